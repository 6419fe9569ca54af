"""The reaper's rules: what a pod's situation calls for (`judge`), and the second witness that says "do
not kill" (`veto`). Pure: they read a pod's record, what its provider shows and a small frozen `Rules`
(the pass's time, the settings, what the pass found of the whole fleet), and write nothing; the sweep
acts on their `Ruling`. Tested with literals (tests/functions/test_judge_veto.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from gpuc.core.clock import iso
from gpuc.core.notify.message import provider_says
from gpuc.core.pod import Pod
from gpuc.core.settings import Settings
from gpuc.functions.deadline import deadline_of
from gpuc.functions.store import MARKABLE_STATES, StoredPod

SILENCE_STATUSES = ("running", "exited")  # a pod that should be pinging
ASKED_WAIT_BEATS = 2  # heartbeats a pod asked to end from the phone has to hear it before the reaper ends it
BUSY_RULES = ("silence", "ended", "unregistered")  # rules the provider's GPU reading can veto
# A pod at its deadline in one of these is ended (F15); stopped and paused pods bill no GPU: their own rules
# hold them. "unknown" is judged so that its veto alerts (no kill on an uncertain reading).
DEADLINE_STATUSES = ("running", "exited", "provisioning", "unknown")
KEPT_STOPPED = ("stopped",)  # a kept pod in this state bills its disk only: nothing to stop, only to say


@dataclass(frozen=True)
class Ruling:
    kind: Literal["fine", "wait", "alert", "kill"]
    rule: str = ""
    reason: str = ""
    # When the provider itself reports the state (stopped, paused, unregistered), the deadline is known
    # in advance: the warning goes out one grace ahead so the destroy lands at limit + one period.
    due_at: float | None = None
    stop: bool = False  # the pod is kept for its results: stop it (disk kept), never destroy it


FINE = Ruling("fine")
WAIT = Ruling("wait")


@dataclass(frozen=True)
class Rules:
    """What the rules read of a pass."""

    now: float
    settings: Settings
    epoch: float | None = None  # no deadline counts from before this (the last clock jump)
    fleet_suspect: bool = False  # many pods silent at once: suspect the watchdog, not the pods
    ingest: str | None = None  # what went wrong with the watchdog's own ingest in the silence window
    # Runs whose recovery is live (functions/recovery/runs.py): their paused pod is recovery's to wait on, destroy and
    # re-rent, never the paused-pod rule's. Once a run is done, the usual rules apply to its pods.
    recovering: frozenset[str] = frozenset()

    def fresh(self, ts: float) -> float:
        """A start time for a deadline: never before the last clock jump."""
        return ts if self.epoch is None else max(ts, self.epoch)


def limit(rules: Rules, rec: StoredPod, name: str) -> float:
    override: float | None = getattr(rec.policy, name)
    return override if override is not None else float(getattr(rules.settings, name))


def silent_since(rec: StoredPod, epoch: float | None = None) -> float:
    if rec.last_seen is not None:
        since = rec.last_seen
    elif rec.provider_status in SILENCE_STATUSES and rec.provider_status_since is not None:
        # Never pinged yet: the clock starts when it was first seen running, so a slow image pull or
        # upload before the agent starts is not silence.
        since = max(rec.registered_at, rec.provider_status_since)
    else:
        since = rec.registered_at
    return since if epoch is None else max(since, epoch)


def silent_at(rules: Rules, rec: StoredPod) -> float:
    """When its silence counts: the status page says it as the pod's next step, the rule below acts on it."""
    window = limit(rules, rec, "silence_limit_s")
    if rec.attempt is not None and rec.attempt > 1 and rec.last_seen is None:
        # A re-rented attempt boots with no laptop (its onstart installs gpuc, then starts the agent): until its
        # first ping it has the unregistered grace a pod being set up has, never less.
        window = max(window, rules.settings.unregistered_grace_s)
    return silent_since(rec, rules.epoch) + window


def is_silent(rules: Rules, rec: StoredPod) -> bool:
    return rules.now >= silent_at(rules, rec)


def judge(rules: Rules, rec: StoredPod, pod: Pod) -> Ruling:
    """What this pod's situation calls for, before any veto."""
    now, settings = rules.now, rules.settings
    past = deadline_ruling(rules, rec, pod)
    if past is not None:
        return past
    if rec.state == "ended":
        if rec.destroy_at is not None and now >= rec.destroy_at:
            return Ruling("kill", "ended", f"ended by {rec.ended_by or '?'} but still {pod.status} at the provider")
        return WAIT
    asked = asked_ruling(rules, rec)
    if asked is not None:
        return asked
    grace = settings.destroy_grace_s
    if rec.origin == "adopted":
        return judge_stray(rules, rec)
    if rec.kept_until is not None and pod.status in SILENCE_STATUSES:
        due = rules.fresh(rec.kept_until) + settings.reaper_period_s  # the pod's own stop goes first
        if now >= due - grace:
            return Ruling(
                "kill",
                "kept",
                f"kept for its results since {iso(rec.kept_at or rec.kept_until)} (its sync failed) and still "
                f"{pod.status} past its kept window",
                due_at=due,
            )
    quiet = minutes(now - silent_since(rec, rules.epoch))
    if pod.status in SILENCE_STATUSES:
        if not is_silent(rules, rec):
            return FINE
        if rec.origin == "carried" and rec.last_seen is None:
            return Ruling(
                "alert",
                "carried",
                f"no heartbeat here for {quiet}: carried over from another watchdog by `gpuc watchdog deploy`, "
                "it still pings the one it was started with (keep that one running until it ends)",
            )
        return Ruling("kill", "silence", f"no heartbeat for {quiet}")
    status_since = rules.fresh(rec.provider_status_since if rec.provider_status_since is not None else now)
    since = now - status_since
    if pod.status == "paused" and rec.run_id is not None and rec.run_id in rules.recovering:
        return FINE  # outbid: recovery owns it (functions/recovery/rerent.py), within GPUC_RECOVER_WAIT_S
    for status, name, text in (
        ("stopped", "stopped_limit_s", "stopped for {} (a stopped pod bills its disk)"),
        ("paused", "paused_limit_s", "paused (outbid) for {}"),
    ):
        if pod.status == status and since >= limit(rules, rec, name) - grace:
            return Ruling("kill", status, text.format(minutes(since)), due_at=status_since + limit(rules, rec, name))
    if pod.status in ("provisioning", "unknown") and is_silent(rules, rec):
        return Ruling(
            "alert",
            pod.status,
            f"provider status {pod.status} ({provider_says(pod.raw_status) or '-'}), no heartbeat for {quiet}",
        )
    return FINE


def asked_ruling(rules: Rules, rec: StoredPod) -> Ruling | None:
    """ "Destroy now" from the phone (functions/actions/verbs.py). The pod ends itself, sync first, told by its
    heartbeat answer; the reaper's usual mark and destroy only if it cannot: no ping since it was asked,
    for two heartbeat intervals (silent, frozen, no agent). A pod that heard it and still runs is not ended
    on that (an agent too old to know intents, KEEP_ALIVE=1): said, never killed. Kept: its window decides."""
    if rec.intent != "end" or rec.intent_at is None or rec.kept_at is not None:
        return None
    asked = f"destroy asked from the phone at {iso(rec.intent_at)}"
    if rec.last_seen is not None and rec.last_seen >= rec.intent_at:
        if rules.now < rec.intent_at + limit(rules, rec, "silence_limit_s"):
            return None
        return Ruling("alert", "asked", f"{asked}; the pod heard it and has not ended: `gpuc down {rec.pod_id}`")
    if rules.now < rec.intent_at + ASKED_WAIT_BEATS * rules.settings.heartbeat_interval_s:
        return None
    return Ruling("kill", "asked", f"{asked}; the pod has not answered since, so it cannot end itself")


def judge_stray(rules: Rules, rec: StoredPod) -> Ruling:
    """A gpuc pod this store never registered. Its window starts when this store first saw it, never at
    its creation time; warned one grace ahead so the destroy lands at the grace (F11: grace + one
    period). A registration before then rescues it, and so does the user's lease (`gpuc keep`, the veto).
    Pings this store cannot verify prove nothing (anyone can send them): they may delay the destroy once,
    by at most the grace from first sight, and never past the pod's deadline."""
    now, settings = rules.now, rules.settings
    grace = settings.unregistered_grace_s
    start = rules.fresh(rec.registered_at)
    due = start + grace
    heard = rec.unverified_ping_at
    if heard is not None:
        delayed = min(max(due, heard + grace), start + 2 * grace)
        due = min(delayed, max(due, deadline_of(rec, settings)))
    keep = f"if it is yours, keep it: `gpuc keep {rec.pod_id} --for 2h`"
    pinging = (
        ""
        if heard is None
        else f"; it pings with a token this watchdog cannot verify (last {minutes(max(0.0, now - heard))} ago), "
        "which proves nothing and delays its destroy only once"
    )
    if now >= due - settings.destroy_grace_s:
        return Ruling(
            "kill",
            "unregistered",
            f"a gpuc pod this watchdog never registered, first seen {minutes(now - rec.registered_at)} ago "
            f"(did `up` crash? started with another watchdog?){pinging}",
            due_at=due,
        )
    if heard is not None:
        kept = rec.lease_until is not None and now < rec.lease_until
        fate = (
            f"kept until {iso(rec.lease_until)} (gpuc keep), then destroyed unless it is registered"
            if kept and rec.lease_until is not None
            else f"It will be destroyed at {iso(due)} all the same; {keep}"
        )
        return Ruling(
            "alert",
            "unverified",
            f"pinging with a token this watchdog cannot verify ({minutes(max(0.0, now - heard))} ago): registered "
            f"with a watchdog that lost its store, or with another one? {fate}",
        )
    return FINE


def deadline_ruling(rules: Rules, rec: StoredPod, pod: Pod) -> Ruling | None:
    """F15: a pod that looks alive past its deadline (a busy loop, a hung NCCL collective at 100 % GPU, a
    host faking pings) is ended whatever its pings and GPU say: warned at the first pass one period ahead,
    destroyed at the first pass at or after it (billed <= --max-hours + one period, on every provider)."""
    if pod.status not in DEADLINE_STATUSES:
        return None
    at = deadline_of(rec, rules.settings)
    if rules.now < at - rules.settings.reaper_period_s:
        return None
    reason = f"its deadline is {iso(at)} (--max-hours): it is ended then, whatever its pings and GPU say"
    return Ruling("kill", "deadline", reason, due_at=at)


def fine_only_by_restart(rules: Rules, rec: StoredPod, pod: Pod) -> bool:
    """Fine only because a clock jump restarted its clock: it did not come back, its mark (with its
    fresh window) stands until the restarted clock runs out or it pings."""
    if rec.state not in ("late", "down") or rules.epoch is None:
        return False
    return judge(replace(rules, epoch=None), rec, pod) != FINE


def veto(rules: Rules, rec: StoredPod, pod: Pod, ruling: Ruling) -> tuple[str, str] | None:
    """A second witness that says "do not kill": (key, why)."""
    if pod.status == "unknown":
        return "unknown", f"the provider reports its state as unknown ({provider_says(pod.raw_status) or '-'})"
    leased = rec.lease_until is not None and rules.now < rec.lease_until
    if rec.state != "ended" and ruling.rule != "deadline" and leased:  # a lease is for the idle watch
        return "lease", f"kept until {iso(rec.lease_until)} (gpuc keep)"
    busy = pod.gpu_util_pct
    if ruling.rule in BUSY_RULES and busy is not None and busy >= rules.settings.idle_gpu_pct:
        return (
            "busy",
            f"the provider reports its GPU {busy:.0f}% busy: working, but cut off from the watchdog?",
        )
    if ruling.rule == "silence" and rules.fleet_suspect:
        return "fleet", "many pods went silent at once: suspecting the watchdog, not the pods"
    if ruling.rule == "silence" and rules.ingest is not None:
        return "ingest", f"the watchdog's ingest {rules.ingest}: its heartbeats may have been refused"
    return None


def kept_gate(rec: StoredPod, pod: Pod, ruling: Ruling) -> Ruling:
    """Any kill of a pod kept for its results, by any rule (silence, stopped, paused, ended, deadline...),
    becomes a stop while it runs, or an alert once it is stopped: its results exist nowhere else."""
    if ruling.kind != "kill" or rec.kept_at is None:
        return ruling
    if pod.status in KEPT_STOPPED:
        return Ruling("alert", "kept_stopped", kept_stopped_text(rec, pod))
    reason = f"{ruling.reason}; kept for its results (its sync failed): stopping it, never destroying it"
    return replace(ruling, stop=True, reason=reason)


def kept_stopped_text(rec: StoredPod, pod: Pod) -> str:
    return (
        f"stopped, and kept for its results since {iso(rec.kept_at or rec.registered_at)} (its sync failed): its "
        f"disk bills {disk_cost(pod)} until you decide. `gpuc results {rec.pod_id}` copies results/ to your "
        f"laptop and ends it; `gpuc down {rec.pod_id} --force` destroys them"
    )


def disk_cost(pod: Pod) -> str:
    """What a stopped pod's disk costs, where the provider says (RunPod's volume price, Vast's storage_cost)."""
    if pod.disk_gb is None or pod.disk_usd_gb_month is None:
        return "an unknown amount (the provider does not say its disk's size or price)"
    per_day = pod.disk_gb * pod.disk_usd_gb_month / 30
    return f"about ${per_day:.2f}/day ({pod.disk_gb:g} GB x ${pod.disk_usd_gb_month:.2f}/GB/month)"


def rescue(rec: StoredPod, ruling: Ruling) -> str:
    """What stops a marked destroy, as the warning says it."""
    if ruling.rule == "unregistered":
        return f"unless it is registered or kept (if it is yours: `gpuc keep {rec.pod_id} --for 2h`)"
    return "unless it pings again"


def fleet_silence(rules: Rules, records: Iterable[StoredPod], pods: Mapping[str, Pod]) -> tuple[int, int]:
    """(silent, watched): of the pods that should be pinging this watchdog, how many are silent."""
    fleet = [
        r
        for r in records
        if r.origin == "registered"  # an adopted pod cannot ping; a carried one pings elsewhere
        and r.state in MARKABLE_STATES
        and (pod := pods.get(r.pod_id)) is not None
        and pod.status in SILENCE_STATUSES
    ]
    return sum(1 for r in fleet if is_silent(rules, r)), len(fleet)


def fleet_suspect(settings: Settings, silent: int, watched: int) -> bool:
    """Many pods silent at once points at the watchdog or its network, not at the pods."""
    return silent >= settings.fleet_silence_min_pods and silent >= settings.fleet_silence_fraction * watched


def minutes(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
