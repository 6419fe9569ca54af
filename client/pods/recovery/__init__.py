"""Spot recovery on the laptop (`up --interruptible --recover N`): what the laptop does so the watchdog
(functions/recovery/) can re-rent the run after an outbid with no laptop, and what it reads of the run after.

- prepare.py: before any money, the refusals (`--recover` without a bid, a provider or destination a pod
  with no laptop cannot resume from, a watchdog too old); the run's one envelope; the boot kit written at the
  results bucket before the create; the registration's recovery plan;
- runs.py: the recovering runs `gpuc ls`, `gpuc ledger` and `gpuc down` read from the watchdog (attempt
  labels, the run's one row, the kits of runs that are done).
"""
