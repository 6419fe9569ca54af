"""`gpuc keep POD --for 2h`: a lease that suspends the pod's idle destroy, said back in words.

The watchdog caps a lease at its own `max_hours` from now (an unbounded lease would switch the reaper off
for the pod); a longer request is refused there, and this module turns that refusal into what to ask for.
"""

from __future__ import annotations

import re

from gpuc.client.deps import Deps
from gpuc.client.human import clock_utc, span_words
from gpuc.core.clock import parse_iso
from gpuc.core.errors import ConfigError, FunctionsError

# The watchdog's refusal names its limit: "... until is too large (at most max_hours ahead, <ISO>)".
_CAP = re.compile(r"until is too large \(at most max_hours ahead, (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\)")


def keep(ref: str, seconds: float, deps: Deps, asked: str) -> str:
    """Set the lease; the sentence to print. `asked` is the user's own spelling ("2h"), for messages."""
    run = deps.runs.find(ref)
    if run.pod_id is None:
        raise ConfigError(f"run {run.run_id} has no pod id", hint="`gpuc ls` shows live pods")
    now = deps.clock.now()
    until = now + seconds
    try:
        deps.functions.keep(run.pod_id, until)
    except FunctionsError as exc:
        raise over_cap(exc, ref, asked, now) or exc from None
    return f"{run.pod_id}: idle destroy suspended until {clock_utc(until, now)} ({span_words(seconds)})"


def over_cap(exc: FunctionsError, ref: str, asked: str, now: float) -> ConfigError | None:
    found = _CAP.search(exc.message) if exc.status == 400 else None
    if found is None:
        return None
    limit = parse_iso(found.group(1))
    hours = max(0, int((limit - now) // 3600))
    ask = f"gpuc keep {ref} --for {hours}h" if hours else f"gpuc keep {ref} --for {max(1, int((limit - now) // 60))}m"
    return ConfigError(
        f"--for {asked} is longer than the watchdog allows: a lease ends at most {span_words(limit - now)} "
        f"from now (by {clock_utc(limit, now)})",
        hint=f"ask for less ({ask}); the cap is the watchdog's GPUC_MAX_HOURS",
    )
