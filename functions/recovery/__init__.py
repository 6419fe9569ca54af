"""Spot recovery on the watchdog: a run rented with `up --interruptible --recover N`, re-rented after an outbid
inside its one envelope, with no laptop. One pass of recovery, file by file:

- webhook.py: Vast's signed `client:outbid` delivery, a hint that wakes the reaper sooner (never a decision);
- watch.py: the reaper's sweep hands each pass to `recover_runs`: every live run, looked at and decided;
- attempts.py: the provider's side, with no write: the latest attempt read twice, the offers, the next spec;
- decide.py: pure rules: none, wait, re-rent (which offer) or stop;
- claim.py: the pass's claim on the run by compare-and-set before any provider call, its lease and steps;
- rerent.py: the act: destroy confirmed, rent the next attempt, register it, record its boot ticket, tell;
- runs.py: the run's record in the store (the request, the attempts, the claim, the tickets), by CAS;
- routes.py: the HTTP routes: a register carrying `recovery`, the new pod's POST /v1/boot, GET /v1/runs/{id},
  POST /v1/runs/{id}/stop.

The laptop's side (the refusals before any money, the boot kit, the runs `ls` and `down` read) is
client/pods/recovery/.
"""
