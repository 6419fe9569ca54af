"""A warm pod (`gpuc up NAME --warm 30m`): the rules its agent, the watchdog and the laptop share, so they say
the same times. Standard library only (the pod runs it).

- Between jobs it ends itself after its warm time with no job (instance_side/idle.py), warned `warm_lead`
  ahead: the usual lead of any idle pod (GPUC_IDLE_DESTROY_S - GPUC_IDLE_WARN_S), but never in the first half
  of the warm time (a warning at the job's end says nothing the user did not ask for).
- Its deadline, unless `--max-hours` fixes it: `warm_deadline`, the job allowance (GPUC_WARM_JOB_HOURS) plus
  the warm time after the start, then after each `gpuc run`'s start (client/pods/warm.py moves it through the
  watchdog, which the agent adopts). So the budget holds one job and one warm time for it at a time, not
  GPUC_MAX_HOURS; the deadline stays a hard one, enforced by the agent and the watchdog as any pod's.
"""

from __future__ import annotations

# How a warm pod's agent opens its idle warning and end with no job (instance_side/agent.py): the watchdog
# words the phone's title and first line for a warm pod on it (a job hung on a warm pod is warned as any).
WARM_SAYS = "warm pod, no job"


def warm_lead(warm_s: float, idle_destroy_s: float, idle_warn_s: float) -> float:
    """How long before its warm time ends a warm pod with no job is warned."""
    return max(0.0, min(idle_destroy_s - idle_warn_s, warm_s / 2))


def warm_deadline(start: float, warm_s: float, job_hours: float) -> float:
    """A warm pod's deadline from a job's start (or the pod's): one job allowance, then the warm time."""
    return start + job_hours * 3600 + warm_s
