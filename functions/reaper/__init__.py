"""The reaper: destroys what no in-pod code can, and never kills on uncertainty.

One pass (`reap_once`) = look (every provider read happens first) -> judge each pod -> act. Per pod:

    silent past the limit / stopped too long / paused too long / gpuc-named but never registered /
    ended but still alive
      -> "down": marked "will destroy at T = now + destroy_grace_s" (notified)
      -> at T, judged again: still a kill AND the provider positively shows the pod, ours, in an
         expected state -> "destroying": the ledger end is recorded, notified, destroyed, listed again
      -> "destroyed" once the provider confirms it gone (notified)
    a ping in between cancels the mark ("back", notified).

A pod kept for its results (its sync failed: `kept_at`, told by the pod) is never destroyed here, whatever
the rule (F16): a kill of it becomes a STOP through the same two phases while it runs, and an alert (daily,
with its disk's cost) once it is stopped. Only the user's word (`gpuc down --force`, `gpuc results`) ends
it. One period past its kept window (`kept_until`) a kept pod still running is stopped: the backstop for a
pod that could not stop itself.

Alert only, never a kill: the provider reports the GPU busy (F10: cut off from us but working), the
provider says "unknown", a lease (`gpuc keep`) holds, many pods went silent at once (suspect the
watchdog), the watchdog's own ingest was throttled or failing in the silence window (F18: refused
heartbeats are not silence), or a carried-over pod is silent here (it pings the watchdog it came from).
A stray that pings with a token this store cannot verify is warned about, with the way to keep it; the
pings prove nothing (anyone can send them), so they delay its destroy once, by at most the grace.

Blindness is per provider: an error reading Vast blocks every mark and destroy on Vast pods only,
alerts at once and escalates (error level, hourly) past an hour. "Gone" needs two passes to agree;
a pod taken for gone that is listed again, or pings, is watched again (notified). Destroys are held
for the strays of a store younger than the unregistered grace (a new or lost store cannot tell a
healthy pod registered elsewhere from a stray; the pods registered with it are judged as usual) and in a
pass that comes far too long after the previous one (laptop sleep, a clock step either way), which also
restarts every deadline from that pass. At most
max_destroys_per_run destroys per pass. Every state change is a compare-and-set, so two passes at
once act once. A pod the provider does not mark as gpuc's is never touched.

The package, in the order of a pass: sweep (the pass and the loop), sight (what the providers showed),
trust (may this pass destroy at all), rules (pure: the ruling on one pod, and its vetoes), steps (the
compare-and-set steps), alerts (what the phone hears), budget (the month's budget), record (the reaper's own
record, ReaperMeta, that /v1/status reads). Runs rented with `--recover N` are recovery's (functions/recovery/): the
sweep hands each pass to it after the pods.
"""

from __future__ import annotations

from gpuc.functions.reaper.sweep import pass_line, reap_once, reap_safely, run_loop

__all__ = ["pass_line", "reap_once", "reap_safely", "run_loop"]
