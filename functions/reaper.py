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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

from gpuc.core.api import ReapAction, ReapReport
from gpuc.core.clock import iso
from gpuc.core.errors import GpucError
from gpuc.core.models import Pod, is_gpuc_name
from gpuc.core.notify import Level
from gpuc.core.redact import redact
from gpuc.functions.app import Deps, announce
from gpuc.functions.budget import watch_budget
from gpuc.functions.deadline import alert_key, deadline_of
from gpuc.functions.eventlimit import release_held
from gpuc.functions.store import LIVE_STATES, MARKABLE_STATES, StoredPod, store_born

log = logging.getLogger("gpuc.reaper")

SILENCE_STATUSES = ("running", "exited")  # a pod that should be pinging
BUSY_RULES = ("silence", "ended", "unregistered")  # rules the provider's GPU reading can veto
# A pod at its deadline in one of these is ended (F15); stopped and paused pods bill no GPU: their own rules
# hold them. "unknown" is judged so that its veto alerts (no kill on an uncertain reading).
DEADLINE_STATUSES = ("running", "exited", "provisioning", "unknown")
CONFIRM_ATTEMPTS = 3
CONFIRM_DELAY_S = 2.0
META_REAPER = "reaper"
BLIND_ESCALATE_S = 3600.0  # blind longer than this: error level, once an hour while it lasts
JUMP_PERIODS = 3  # a pass more than this many periods (+ JUMP_SLACK_S) after the last one: a clock jump
JUMP_SLACK_S = 60.0  # also how far back the clock may seem to go (two passes racing) before it counts

ActionKind = Literal["warn", "mark", "cancel", "destroy", "alert", "skip", "confirm", "stop"]
KEPT_STOPPED = ("stopped",)  # a kept pod in this state bills its disk only: nothing to stop, only to say


@dataclass(frozen=True)
class Verdict:
    kind: Literal["fine", "wait", "alert", "kill"]
    rule: str = ""
    reason: str = ""
    # When the provider itself reports the state (stopped, paused, unregistered), the deadline is known
    # in advance: the warning goes out one grace ahead so the destroy lands at limit + one period.
    due_at: float | None = None
    stop: bool = False  # the pod is kept for its results: stop it (disk kept), never destroy it


FINE = Verdict("fine")
WAIT = Verdict("wait")


@dataclass
class Sight:
    """What the providers showed in this pass."""

    pods: dict[str, Pod] = field(default_factory=dict)  # pod id -> live pod of a known record
    gone: set[str] = field(default_factory=set)  # positively gone (absent, and `get` agrees)
    strays: list[tuple[str, Pod]] = field(default_factory=list)  # gpuc pods with no live record
    blind: dict[str, str] = field(default_factory=dict)  # provider -> why it could not be read
    read: list[str] = field(default_factory=list)  # providers listed without error this pass

    def merge(self, other: Sight) -> None:
        self.pods.update(other.pods)
        self.gone |= other.gone
        self.strays += other.strays


@dataclass
class Run:
    deps: Deps
    now: float
    dry_run: bool
    report: ReapReport
    blind: dict[str, str] = field(default_factory=dict)  # provider -> why: nothing is done on its pods
    hold: str | None = None  # why no destroy happens in this whole pass (clock jump, young store)
    young: bool = False  # the hold is the store's youth (alerted only when it defers a destroy)
    epoch: float | None = None  # no deadline counts from before this (the last clock jump)
    fleet_suspect: bool = False
    ingest: str | None = None  # what went wrong with the watchdog's own ingest in the silence window
    destroys: int = 0
    capped: int = 0
    held: int = 0

    def act(self, pod_id: str, provider: str, action: ActionKind, reason: str) -> None:
        self.report.actions.append(ReapAction(pod_id=pod_id, provider=provider, action=action, reason=reason))

    def act_on(self, rec: StoredPod, action: ActionKind, reason: str) -> None:
        self.act(rec.pod_id, rec.provider, action, reason)

    def go_blind(self, provider: str, why: str) -> None:
        self.blind.setdefault(provider, why)
        self.report.blind = True
        self.report.blind_providers = sorted(self.blind)

    def fresh(self, ts: float) -> float:
        """A start time for a deadline: never before the last clock jump."""
        return ts if self.epoch is None else max(ts, self.epoch)


def reap_once(deps: Deps, now: float, dry_run: bool = False) -> ReapReport:
    """One pass. Dry run: providers are read, nothing is written, notified or destroyed."""
    run = Run(deps, now, dry_run, ReapReport(ran_at=now, dry_run=dry_run))
    sight = Sight()
    blind_since: dict[str, float] = {}
    try:
        prev = previous_run(deps)
        records = deps.store.list_pods(LIVE_STATES)
        if check_clock(run, prev, records):
            records = deps.store.list_pods(LIVE_STATES)  # as restart_deadlines left them
        check_store_age(run)
        sight = look(deps, records)
        for name, why in sight.blind.items():
            run.go_blind(name, why)
        blind_since = alert_blind(run, sight, prev)
        records = [track_status(run, r, sight) for r in records] + adopt_strays(run, sight)
        run.fleet_suspect = fleet_silent(run, records, sight)
        run.ingest = ingest_trouble(run)
        for rec in records:
            reap_guarded(run, rec, sight)
        release_held_events(run, records)
        alert_cap(run)
        alert_held(run)
        alert_balances(run, sight)
        watch_budget(run, sight.pods, partial(run_problem, run))
    except Exception as exc:
        if not dry_run:
            record_failed_run(deps, now, exc)
        raise
    finally:
        flush(deps)
    if not dry_run:
        record_run(deps, now, run.report, sight, blind_since=blind_since, epoch=run.epoch)
    return run.report


def previous_run(deps: Deps) -> dict[str, Any]:
    meta = deps.store.get_meta(META_REAPER)
    return dict(meta.value) if meta else {}


def check_clock(run: Run, prev: Mapping[str, Any], records: list[StoredPod]) -> bool:
    """A pass far too long after the last one (the laptop slept, the clock stepped forward) or before
    it (the clock went back) cannot trust any deadline: silence measured across a sleep is the
    watchdog's own absence, not the pods'. Nothing is destroyed in this pass, and every deadline
    starts again from it. True when the records were rewritten."""
    epoch = prev.get("epoch")
    run.epoch = float(epoch) if isinstance(epoch, int | float) else None
    last = prev.get("last_run")
    if not isinstance(last, int | float):
        return False
    gap = run.now - float(last)
    period = run.deps.settings.reaper_period_s
    if -JUMP_SLACK_S <= gap <= JUMP_PERIODS * period + JUMP_SLACK_S:
        return False
    what = f"{minutes(gap)} after the last one" if gap > 0 else f"{minutes(-gap)} BEFORE the last one"
    run.hold = f"this pass came {what} (sleep or a clock step): every deadline restarts now"
    run.epoch = run.now
    if run.dry_run:
        return False
    for rec in records:
        restart_deadlines(run, rec)
    announce(
        run.deps,
        run.now,
        "gpuc: the reaper's clock jumped",
        f"This reaper pass came {what} (the machine slept, or its clock was stepped). Nothing is "
        "destroyed in this pass; silence, stopped/paused and marked-for-destroy deadlines start again "
        "now, so a pod that was fine is not taken for dead.",
        kind="clock",
        level="warning",
    )
    return True


def restart_deadlines(run: Run, rec: StoredPod) -> None:
    """Times from before a backwards step lie in the future: bring them to now, so "afresh from this
    pass" holds for them too. A mark gets a whole new warning window."""
    now, grace = run.now, run.deps.settings.destroy_grace_s
    changes: dict[str, Any] = {
        name: now
        for name in ("last_seen", "provider_status_since", "registered_at", "gone_seen_at")
        if (value := getattr(rec, name)) is not None and value > now
    }
    late_end = rec.state == "ended" and rec.destroy_at is not None and rec.destroy_at > now + grace
    if rec.state == "down" or late_end:
        changes["destroy_at"] = now + grace
    if changes:
        run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes)


def check_store_age(run: Run) -> None:
    """A store younger than the unregistered grace is itself suspect (deleted or corrupt watchdog.db,
    a new GPUC_HOME, a fresh deployment, a second watchdog on the account): every pod it never heard
    of looks like a stray. It warns, but destroys nothing until it is old enough."""
    settings = run.deps.settings
    born = store_born(run.deps.store, run.now, write=not run.dry_run)
    age = run.now - born
    run.young = age < settings.unregistered_grace_s and run.hold is None  # a clock jump says so itself
    if run.young:
        run.hold = (
            f"this watchdog's store is {minutes(max(age, 0.0))} old, younger than the unregistered grace "
            f"({minutes(settings.unregistered_grace_s)}): no destroy before "
            f"{iso(born + settings.unregistered_grace_s)}"
        )


def flush(deps: Deps) -> None:
    try:
        deps.notifier.flush()
    except Exception as exc:  # F13: the phone being down is never the reaper's problem
        log.error("notifier flush failed: %s", type(exc).__name__)


def look(deps: Deps, records: list[StoredPod]) -> Sight:
    """Every provider read of the pass, before any decision: a provider that cannot be read is blind
    for this pass, and nothing it half-answered is kept (a `get` that fails after a good list must
    not leave some of its pods "seen" and others "gone")."""
    sight = Sight()
    names = dict.fromkeys([r.provider for r in records] + list(deps.providers.scan))
    for name in names:
        part = Sight()
        try:
            look_at(deps, name, [r for r in records if r.provider == name], part)
        except Exception as exc:
            sight.blind[name] = describe(exc, deps)
        else:
            sight.merge(part)
            sight.read.append(name)
    return sight


def look_at(deps: Deps, name: str, records: list[StoredPod], sight: Sight) -> None:
    provider = deps.providers.get(name)
    known = {r.pod_id for r in records}
    for pod in provider.list_pods():
        if pod.status == "terminated":
            continue
        if pod.id in known:
            sight.pods[pod.id] = pod
        elif pod.managed:  # a stray if gpuc-named; or a record this store took for gone
            sight.strays.append((name, pod))
    for rec in records:
        if rec.pod_id in sight.pods:
            continue
        # Absent from a listing is not proof: a list call that returns too little is how a peer went
        # blind. Only `get` saying "gone" counts.
        current = provider.get(rec.pod_id)
        if current is None or current.status == "terminated":
            sight.gone.add(rec.pod_id)
        else:
            sight.pods[rec.pod_id] = current


def describe(exc: BaseException, deps: Deps) -> str:
    text = exc.message if isinstance(exc, GpucError) else type(exc).__name__
    return redact(text, deps.secrets())[:300]


def track_status(run: Run, rec: StoredPod, sight: Sight) -> StoredPod:
    """Remember since when the provider has shown the current status: "stopped for 24 h" is measured
    from the first pass that saw it stopped (never earlier, so never too soon). A pod seen again after
    one pass found it gone was a transient "not found": that note is dropped."""
    pod = sight.pods.get(rec.pod_id)
    if pod is not None and rec.gone_seen_at is not None:
        run.act_on(rec, "cancel", "found at the provider again: not gone")
        if not run.dry_run:
            run.deps.store.update_if(rec.pod_id, {"gone_seen_at": rec.gone_seen_at}, {"gone_seen_at": None})
        rec = rec.model_copy(update={"gone_seen_at": None})
    if pod is None or pod.status == rec.provider_status:
        return rec
    changes: dict[str, Any] = {"provider_status": pod.status, "provider_status_since": run.now}
    if rec.provider_status in SILENCE_STATUSES and pod.status in SILENCE_STATUSES:
        # running <-> exited (RunPod restarts an exited container) is one state for the silence clock:
        # a crash-looping container that never pinged must not restart its clock on every flip.
        changes.pop("provider_status_since")
    if not run.dry_run:
        run.deps.store.update_if(rec.pod_id, {"provider_status": rec.provider_status}, changes)
    return rec.model_copy(update=changes)


def adopt_strays(run: Run, sight: Sight) -> list[StoredPod]:
    """gpuc pods at a provider that this store never registered (the laptop crashed mid-`up`, F11;
    or the store is new): keep a record from first sight. Their clock starts then, never at their
    creation time: a store that lost its records must not find every healthy pod long overdue. A pod
    this store took for gone (or destroyed) that is listed again is watched again."""
    out: list[StoredPod] = []
    for provider, pod in sight.strays:
        known = run.deps.store.get_pod(pod.id)
        if known is not None:
            if known.state == "destroyed":
                listed_again(run, known, pod)
            continue  # a live record (registered meanwhile) or finished: not a stray
        if not is_gpuc_name(pod.name):
            continue  # both ownership markers, or never touched
        rec = StoredPod(
            pod_id=pod.id,
            provider=provider,
            name=pod.name,
            experiment=pod.experiment or "?",
            gpu=pod.gpu,
            price_per_hour=pod.price_per_hour,
            started_at=pod.created_at,
            registered_at=run.now,
            interruptible=pod.interruptible,
            origin="adopted",
            provider_status=pod.status,
            provider_status_since=run.now,
            deadline_at=run.now + run.deps.settings.max_hours * 3600,  # from first sight, as its other clocks
        )
        if run.dry_run or run.deps.store.adopt(rec):
            sight.pods[pod.id] = pod
            out.append(rec)
    return out


def listed_again(run: Run, rec: StoredPod, pod: Pod) -> None:
    from gpuc.functions.handlers import revive  # lazy: handlers imports this module (a cycle at the top)

    reason = f"the provider lists it again ({pod.status})"
    run.act_on(rec, "alert", f"taken for gone, but {reason}: watching it again")
    if not run.dry_run:
        revive(run.deps, rec.pod_id, run.now, reason)


def limit(run: Run, rec: StoredPod, name: str) -> float:
    override: float | None = getattr(rec.policy, name)
    return override if override is not None else float(getattr(run.deps.settings, name))


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


def is_silent(run: Run, rec: StoredPod) -> bool:
    return run.now - silent_since(rec, run.epoch) >= limit(run, rec, "silence_limit_s")


def fleet_silent(run: Run, records: list[StoredPod], sight: Sight) -> bool:
    """Many pods silent at once points at the watchdog or its network, not at the pods."""
    settings = run.deps.settings
    fleet = [
        r
        for r in records
        if r.origin == "registered"  # an adopted pod cannot ping; a carried one pings elsewhere
        and r.state in MARKABLE_STATES
        and (pod := sight.pods.get(r.pod_id)) is not None
        and pod.status in SILENCE_STATUSES
    ]
    silent = sum(1 for r in fleet if is_silent(run, r))
    suspect = silent >= settings.fleet_silence_min_pods and silent >= settings.fleet_silence_fraction * len(
        fleet
    )
    run_problem(
        run,
        "fleet",
        suspect,
        title=f"gpuc: {silent} of {len(fleet)} pods silent at once",
        message="Suspecting the watchdog or its network, not the pods: alerting only, destroying nothing "
        "for silence until they ping again.",
        clear_title="gpuc: the fleet is pinging again",
    )
    return suspect


def ingest_trouble(run: Run) -> str | None:
    """Was the ingest throttled or failing while a pod could have been taken for silent (F18)? A flood
    that fills it makes real heartbeats fail: silence kills are held, like blindness, while it lasts and
    for one silence window after. A health that cannot be read counts as trouble: holding costs a delay,
    with the user told; a wrong "healthy" could cost a false kill of every pod at once. Deadlines and the
    other rules still apply, so the hold never makes the money unbounded."""
    health = run.deps.ingest_health
    if health is None:
        return None
    settings = run.deps.settings
    since = run.now - settings.silence_limit_s - settings.reaper_period_s
    try:
        trouble = health.trouble(since, run.now)
    except Exception as exc:
        trouble = f"could not be checked ({describe(exc, run.deps)})"
    run_problem(
        run,
        "ingest",
        trouble is not None,
        title="gpuc: the watchdog's ingest is refusing heartbeats",
        message=f"The ingest {trouble} in the last {minutes(run.now - since)}: a pod's heartbeats may not have "
        "reached the watchdog, so silence is no evidence. No pod is destroyed for silence until it is healthy "
        "again (ended, stopped, unregistered pods and deadlines are handled as usual). A flood against the "
        "public URL ends when the flood does; `gpuc ls` shows the pods.",
        clear_title="gpuc: the watchdog's ingest is healthy again",
    )
    return trouble


def release_held_events(run: Run, records: list[StoredPod]) -> None:
    """A pod's events over its hourly push limit are told as one notification once the hour is over."""
    if run.dry_run:
        return
    for rec in records:
        try:
            release_held(run.deps, rec, run.now)
        except Exception as exc:  # the next pass tells it
            log.error("reaper: held events of %s: %s", rec.pod_id, describe(exc, run.deps))


def reap_guarded(run: Run, rec: StoredPod, sight: Sight) -> None:
    try:
        reap_pod(run, rec, sight)
    except Exception as exc:  # one odd pod must not stop the pass for the others
        log.error("reaper: pod %s: %s", rec.pod_id, describe(exc, run.deps))
        run.act_on(rec, "skip", f"error while checking it ({type(exc).__name__}); the next pass tries again")


def reap_pod(run: Run, rec: StoredPod, sight: Sight) -> None:
    if rec.pod_id in sight.gone:
        if gone_twice(run, rec):
            settle_gone(run, rec)
        return
    pod = sight.pods.get(rec.pod_id)
    if pod is None:  # its provider could not be read
        if rec.state == "down" and rec.destroy_at is not None and run.now >= rec.destroy_at:
            run.act_on(rec, "skip", "due for destroy, but the reaper is blind: deferred")
        return
    if not pod.managed:
        alert_only(run, rec, "foreign", "the provider does not mark it as gpuc's: never touched")
        return
    if rec.state == "destroying":
        retry_destroy(run, rec)
        return
    verdict = judge(run, rec, pod)
    if verdict.kind == "wait":
        return
    if verdict.kind == "fine":
        if not fine_only_by_restart(run, rec, pod):
            all_clear(run, rec)
        return
    verdict = kept_gate(run, rec, pod, verdict)
    if verdict.kind == "alert":
        every = run.deps.settings.kept_nag_interval_s if verdict.rule.startswith("kept") else None
        alert_only(run, rec, verdict.rule, verdict.reason, every=every)
        return
    why_not = veto(run, rec, pod, verdict)
    if why_not is not None:
        alert_only(
            run, rec, f"{verdict.rule}:{why_not[0]}", f"{verdict.reason}; not destroying: {why_not[1]}"
        )
        return
    if verdict.rule == "deadline" and not verdict.stop:  # a kept pod's deadline is a stop: mark() and below
        reap_deadline(run, rec, verdict)
        return
    if rec.state in ("ok", "late"):
        marked = mark(run, rec, verdict)
        if marked is None:
            return
        rec = marked
    if rec.destroy_at is not None and run.now >= rec.destroy_at:
        if verdict.stop:
            stop_kept(run, rec, verdict.reason)
        else:
            destroy(run, rec, verdict.reason)


def fine_only_by_restart(run: Run, rec: StoredPod, pod: Pod) -> bool:
    """Fine only because a clock jump restarted its clock: it did not come back, its mark (with its
    fresh window) stands until the restarted clock runs out or it pings."""
    if rec.state not in ("late", "down") or run.epoch is None:
        return False
    return judge(replace(run, epoch=None), rec, pod) != FINE


def gone_twice(run: Run, rec: StoredPod) -> bool:
    """One "not found" is not enough to stop watching a pod for good (a provider's list and get can
    lag, or answer from a stale replica): the first pass notes it, a later pass must agree."""
    first = rec.gone_seen_at
    pinged = first is not None and rec.last_seen is not None and rec.last_seen > first
    if first is not None and not pinged and run.now - first >= run.deps.settings.reaper_period_s / 2:
        return True
    if pinged:  # a valid ping since the provider first said "not found": it lives; start over
        run.act_on(rec, "skip", "not found at the provider, but it pings: still watched")
    else:
        run.act_on(rec, "skip", "not found at the provider: taken as gone once the next pass agrees")
    if (first is None or pinged) and not run.dry_run:
        run.deps.store.update_if(
            rec.pod_id, {"state": rec.state, "gone_seen_at": first}, {"gone_seen_at": run.now}
        )
    return False


def judge(run: Run, rec: StoredPod, pod: Pod) -> Verdict:
    """Pure: what this pod's situation calls for, before any veto."""
    now, settings = run.now, run.deps.settings
    past = deadline_verdict(run, rec, pod)
    if past is not None:
        return past
    if rec.state == "ended":
        if rec.destroy_at is not None and now >= rec.destroy_at:
            return Verdict(
                "kill", "ended", f"ended by {rec.ended_by or '?'} but still {pod.status} at the provider"
            )
        return WAIT
    grace = settings.destroy_grace_s
    if rec.origin == "adopted":
        return judge_stray(run, rec)
    if rec.kept_until is not None and pod.status in SILENCE_STATUSES:
        due = run.fresh(rec.kept_until) + settings.reaper_period_s  # the pod's own stop goes first
        if now >= due - grace:
            return Verdict(
                "kill",
                "kept",
                f"kept for its results since {iso(rec.kept_at or rec.kept_until)} (its sync failed) and still "
                f"{pod.status} past its kept window",
                due_at=due,
            )
    quiet = minutes(now - silent_since(rec, run.epoch))
    if pod.status in SILENCE_STATUSES:
        if not is_silent(run, rec):
            return FINE
        if rec.origin == "carried" and rec.last_seen is None:
            return Verdict(
                "alert",
                "carried",
                f"no heartbeat here for {quiet}: carried over from another watchdog by `gpuc watchdog deploy`, "
                "it still pings the one it was started with (keep that one running until it ends)",
            )
        return Verdict("kill", "silence", f"no heartbeat for {quiet}")
    status_since = run.fresh(rec.provider_status_since if rec.provider_status_since is not None else now)
    since = now - status_since
    for status, name, text in (
        ("stopped", "stopped_limit_s", "stopped for {} (a stopped pod bills its disk)"),
        ("paused", "paused_limit_s", "paused (outbid) for {}"),
    ):
        if pod.status == status and since >= limit(run, rec, name) - grace:
            return Verdict("kill", status, text.format(minutes(since)), due_at=status_since + limit(run, rec, name))
    if pod.status in ("provisioning", "unknown") and is_silent(run, rec):
        return Verdict(
            "alert",
            pod.status,
            f"provider status {pod.status} ({pod.raw_status or '-'}), no heartbeat for {quiet}",
        )
    return FINE


def judge_stray(run: Run, rec: StoredPod) -> Verdict:
    """A gpuc pod this store never registered. Its window starts when this store first saw it, never at
    its creation time; warned one grace ahead so the destroy lands at the grace (SPEC F11: grace + one
    period). A registration before then rescues it, and so does the user's lease (`gpuc keep`, the veto).
    Pings this store cannot verify prove nothing (anyone can send them): they may delay the destroy once,
    by at most the grace from first sight, and never past the pod's deadline."""
    now, settings = run.now, run.deps.settings
    grace = settings.unregistered_grace_s
    start = run.fresh(rec.registered_at)
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
        return Verdict(
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
        return Verdict(
            "alert",
            "unverified",
            f"pinging with a token this watchdog cannot verify ({minutes(max(0.0, now - heard))} ago): registered "
            f"with a watchdog that lost its store, or with another one? {fate}",
        )
    return FINE


def deadline_verdict(run: Run, rec: StoredPod, pod: Pod) -> Verdict | None:
    """F15: a pod that looks alive past its deadline (a busy loop, a hung NCCL collective at 100 % GPU, a
    host faking pings) is ended whatever its pings and GPU say: warned at the first pass one period ahead,
    destroyed at the first pass at or after it (billed <= --max-hours + one period, on every provider)."""
    if pod.status not in DEADLINE_STATUSES:
        return None
    at = deadline_of(rec, run.deps.settings)
    if run.now < at - run.deps.settings.reaper_period_s:
        return None
    reason = f"its deadline is {iso(at)} (--max-hours): it is ended then, whatever its pings and GPU say"
    return Verdict("kill", "deadline", reason, due_at=at)


def reap_deadline(run: Run, rec: StoredPod, verdict: Verdict) -> None:
    """The deadline's two phases. Its mark is reckoned afresh from the deadline every pass, so a ping that
    resets the state cannot cancel it; the claim before the destroy is conditioned on the deadline itself
    (a `gpuc extend` meanwhile wins), not on the seq, so a host pinging every second cannot outrun it."""
    at = verdict.due_at if verdict.due_at is not None else run.now
    marked = deadline_mark(run, rec, verdict, at)
    if marked is None or run.now < at:
        return
    states = ("ended",) if rec.state == "ended" else MARKABLE_STATES
    claim = {"state": states, "deadline_at": rec.deadline_at}
    destroy(run, marked, f"past its deadline, {iso(at)} (--max-hours)", claim)


def deadline_mark(run: Run, rec: StoredPod, verdict: Verdict, at: float) -> StoredPod | None:
    """Warned once per deadline value ("will destroy at <deadline>"); the state shows it until the pod
    ends. None: not marked in this pass (blind, or the record moved: the next pass reckons again)."""
    if rec.provider in run.blind:
        run.act_on(rec, "skip", f"{verdict.reason}; not marking: the reaper cannot read {rec.provider} this pass")
        return None
    key = alert_key(at)
    warned = rec.alerted == key
    changes: dict[str, Any] = {} if warned else {"alerted": key, "alerted_at": run.now}
    if rec.state != "ended" and (rec.state != "down" or rec.destroy_at != at):
        changes.update(state="down", destroy_at=at, reason=verdict.reason)
    if not changes:
        return rec
    if not run.dry_run:
        states = ("ended",) if rec.state == "ended" else MARKABLE_STATES
        expect = {"state": states, "alerted": rec.alerted, "deadline_at": rec.deadline_at}
        if not run.deps.store.update_if(rec.pod_id, expect, changes):
            return None
        if not warned:
            when = iso(max(at, run.now))
            message = f"{verdict.reason}. It will be destroyed at {when}: `gpuc extend {rec.pod_id} 2h` moves it."
            tell(run, rec, f"gpuc: will destroy {rec.name} at {when} (deadline)", message, "mark", "warning")
    if not warned:
        run.act_on(rec, "mark", f"{verdict.reason}; will destroy at {iso(at)}")
    return rec.model_copy(update=changes)


def rescue(rec: StoredPod, verdict: Verdict) -> str:
    """What stops a marked destroy, as the warning says it."""
    if verdict.rule == "unregistered":
        return f"unless it is registered or kept (if it is yours: `gpuc keep {rec.pod_id} --for 2h`)"
    return "unless it pings again"


def veto(run: Run, rec: StoredPod, pod: Pod, verdict: Verdict) -> tuple[str, str] | None:
    """A second witness that says "do not kill": (key, why)."""
    settings = run.deps.settings
    if pod.status == "unknown":
        return "unknown", f"the provider reports its state as unknown ({pod.raw_status or '-'})"
    leased = rec.lease_until is not None and run.now < rec.lease_until
    if rec.state != "ended" and verdict.rule != "deadline" and leased:  # a lease is for the idle watch
        return "lease", f"kept until {iso(rec.lease_until)} (gpuc keep)"
    busy = pod.gpu_util_pct
    if verdict.rule in BUSY_RULES and busy is not None and busy >= settings.idle_gpu_pct:
        return (
            "busy",
            f"the provider reports its GPU {busy:.0f}% busy: working, but cut off from the watchdog?",
        )
    if verdict.rule == "silence" and run.fleet_suspect:
        return "fleet", "many pods went silent at once: suspecting the watchdog, not the pods"
    if verdict.rule == "silence" and run.ingest is not None:
        return "ingest", f"the watchdog's ingest {run.ingest}: its heartbeats may have been refused"
    return None


def kept_gate(run: Run, rec: StoredPod, pod: Pod, verdict: Verdict) -> Verdict:
    """Any kill of a pod kept for its results, by any rule (silence, stopped, paused, ended, deadline...),
    becomes a stop while it runs, or an alert once it is stopped: its results exist nowhere else."""
    if verdict.kind != "kill" or rec.kept_at is None:
        return verdict
    if pod.status in KEPT_STOPPED:
        return Verdict("alert", "kept_stopped", kept_stopped_text(rec, pod))
    reason = f"{verdict.reason}; kept for its results (its sync failed): stopping it, never destroying it"
    return replace(verdict, stop=True, reason=reason)


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


def mark(run: Run, rec: StoredPod, verdict: Verdict) -> StoredPod | None:
    """Phase one: "will destroy at T" (or, for a kept pod, "will stop at T"), notified. A ping before T
    cancels it."""
    if rec.provider in run.blind:
        run.act_on(rec, "skip", f"{verdict.reason}; not marking: the reaper cannot read {rec.provider} this pass")
        return None
    at = run.now + run.deps.settings.destroy_grace_s if verdict.due_at is None else max(run.now, verdict.due_at)
    changes: dict[str, Any] = {
        "state": "down",
        "destroy_at": at,
        "reason": verdict.reason,
        "alerted": "down",
        "alerted_at": run.now,
    }
    if not run.dry_run:
        # last_seq in the condition: a ping that lands between our read and this write wins.
        if not run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
            return None
        verb = "stop" if verdict.stop else "destroy"
        if verdict.stop:
            message = (
                f"{verdict.reason}. It will be stopped at {iso(at)}: GPU billing ends, the disk with results/ stays. "
                f"`gpuc results {rec.pod_id}` gets them"
            )
        else:
            message = f"{verdict.reason}. It will be destroyed at {iso(at)} {rescue(rec, verdict)}."
        tell(run, rec, f"gpuc: will {verb} {rec.name} at {iso(at)}", message, "mark", "warning")
    run.act_on(rec, "mark", f"{verdict.reason}; will {'stop' if verdict.stop else 'destroy'} at {iso(at)}")
    return rec.model_copy(update=changes)


def stop_kept(run: Run, rec: StoredPod, reason: str) -> None:
    """Phase two for a pod kept for its results: STOP it (GPU billing ends, the disk stays). The same holds
    as a destroy (blind, young store, clock jump, the cap); afterwards it is watched as a stopped pod."""
    if not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "stop", f"{reason} (dry run: nothing done)")
        return
    changes: dict[str, Any] = {"state": "ok", "destroy_at": None, "reason": None, "alerted": None, "alerted_at": None}
    if not run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
        run.destroys -= 1  # another pass, or a ping, got there first
        return
    try:
        run.deps.providers.get(rec.provider).stop(rec.pod_id)
    except Exception as exc:
        detail = describe(exc, run.deps)
        run.go_blind(rec.provider, detail)
        run.act_on(rec, "skip", f"stop failed ({detail}); the next pass tries again")
        tell(run, rec, f"gpuc: could not stop {rec.name}", f"{detail}. The reaper retries.", "destroy_failed", "error")
        return
    run.act_on(rec, "stop", reason)
    message = (
        f"{reason}. Stopped, not destroyed: GPU billing ended; the disk with results/ stays. `gpuc results "
        f"{rec.pod_id}` copies them to your laptop and ends it; `gpuc down {rec.pod_id} --force` destroys them."
    )
    tell(run, rec, f"gpuc: stopped {rec.name}", message, "kept_stopped", "warning")


def never_kept(run: Run, rec: StoredPod, reason: str) -> bool:
    """The last line before any destroy call: a pod kept for its results is never destroyed here, whatever
    decided it (kept_gate turns every rule's kill into a stop; this holds even for a path that missed it)."""
    if rec.kept_at is None:
        return True
    run.act_on(rec, "alert", f"{reason}; NOT destroyed: kept for its results (only `gpuc results` or --force ends it)")
    if not run.dry_run and rec.state == "destroying":
        run.deps.store.update_if(
            rec.pod_id, {"state": "destroying"}, {"state": "late", "destroy_at": None, "reason": reason}
        )
    return False


def destroy(run: Run, rec: StoredPod, reason: str, expect: Mapping[str, Any] | None = None) -> None:
    """Phase two: record the end, notify, destroy, list again. `expect`: the claim's condition (by default
    the state and seq read: a ping that lands meanwhile wins)."""
    if not never_kept(run, rec, reason) or not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "destroy", f"{reason} (dry run: nothing done)")
        return
    changes: dict[str, Any] = {"state": "destroying", "destroy_started_at": run.now, "reason": reason}
    if rec.end_at is None:
        changes.update(end_at=run.now, ended_by="reaper")
    claim: dict[str, Any] = dict(expect) if expect is not None else {"state": rec.state, "last_seq": rec.last_seq}
    # kept_at in the condition: a pod that said "kept for my results" since this pass read it is not destroyed.
    claim["kept_at"] = None
    if not run.deps.store.update_if(rec.pod_id, claim, changes):
        run.destroys -= 1  # another pass, or a ping, got there first
        return
    end_at = changes.get("end_at", rec.end_at)
    message = f"{reason}. Ledger end recorded at {iso(end_at)}."
    tell(run, rec, f"gpuc: destroying {rec.name}", message, "destroying", "warning")
    call_destroy(run, rec.model_copy(update=changes), reason)


def retry_destroy(run: Run, rec: StoredPod) -> None:
    """A destroy that did not finish (provider error, still listed). Claimed by CAS on its start time,
    and only once it is old enough that no other pass can still be inside it."""
    started = rec.destroy_started_at if rec.destroy_started_at is not None else 0.0
    if run.now - started < run.deps.settings.reaper_period_s / 2:
        return
    reason = rec.reason or "retrying an unfinished destroy"
    if not never_kept(run, rec, reason) or not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "destroy", f"{reason}, retried (dry run: nothing done)")
        return
    expect = {"state": "destroying", "destroy_started_at": rec.destroy_started_at, "kept_at": None}
    if not run.deps.store.update_if(rec.pod_id, expect, {"destroy_started_at": run.now}):
        run.destroys -= 1
        return
    call_destroy(run, rec, reason)


def may_destroy(run: Run, rec: StoredPod, reason: str) -> bool:
    if rec.provider in run.blind:
        run.act_on(rec, "skip", f"{reason}; destroy deferred: the reaper cannot read {rec.provider} this pass")
        return False
    if run.hold is not None and (not run.young or rec.origin == "adopted"):
        # A young store suspects only what it never registered: a pod that registered here, with its own
        # key, and then went silent is exactly what this store exists to catch (F5 holds from minute one).
        run.held += 1
        run.act_on(rec, "skip", f"{reason}; destroy deferred: {run.hold}")
        return False
    if run.destroys >= run.deps.settings.max_destroys_per_run:
        run.capped += 1
        run.act_on(
            rec,
            "skip",
            f"{reason}; destroy deferred: at most {run.deps.settings.max_destroys_per_run} per pass",
        )
        return False
    run.destroys += 1
    return True


def call_destroy(run: Run, rec: StoredPod, reason: str) -> None:
    deps = run.deps
    try:
        provider = deps.providers.get(rec.provider)
        provider.destroy(rec.pod_id)  # idempotent: "already_gone" is success
        gone = provider.confirm_gone(
            rec.pod_id, clock=deps.clock, attempts=CONFIRM_ATTEMPTS, delay_s=CONFIRM_DELAY_S
        )
    except Exception as exc:
        detail = describe(exc, deps)
        run.go_blind(rec.provider, detail)  # no more destroys on this provider in this pass
        run.act_on(rec, "skip", f"destroy failed ({detail}); the next pass retries")
        message = f"{detail}. The reaper retries on its next pass."
        tell(run, rec, f"gpuc: could not destroy {rec.name}", message, "destroy_failed", "error")
        return
    if not gone:
        run.act_on(rec, "destroy", f"{reason}; destroy called, still listed: re-checked next pass")
        return
    finish(run, rec, reason)


def finish(run: Run, rec: StoredPod, reason: str) -> None:
    if not run.deps.store.update_if(
        rec.pod_id, {"state": "destroying"}, {"state": "destroyed", "destroy_at": None}
    ):
        return
    run.act_on(rec, "destroy", reason)
    tell_destroyed(run, rec, reason)


def settle_gone(run: Run, rec: StoredPod) -> None:
    """Gone at the provider, two passes agreeing: success, no destroy call."""
    run.act_on(rec, "confirm", "gone at the provider")
    if run.dry_run:
        return
    expect = {"state": rec.state, "gone_seen_at": rec.gone_seen_at}
    if not run.deps.store.update_if(rec.pod_id, expect, {"state": "destroyed", "destroy_at": None}):
        return
    if rec.state == "destroying":
        tell_destroyed(run, rec, rec.reason or "destroyed")
    elif rec.state in MARKABLE_STATES and rec.origin == "registered":
        message = "the provider no longer lists it (deleted outside gpuc, or preempted); its ledger row stays open."
        tell(run, rec, f"gpuc: {rec.name} is gone", message, "gone", "warning")


def alert_only(run: Run, rec: StoredPod, key: str, reason: str, *, every: float | None = None) -> None:
    run.act_on(rec, "alert", reason)
    if run.dry_run:
        return
    if rec.state in ("ok", "down"):
        # From "down" this cancels the mark: the second witness said no.
        changes = {"state": "late", "destroy_at": None, "reason": reason}
        if run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
            rec = rec.model_copy(update=changes)
    pod_problem(run, rec, key, f"gpuc: {rec.name} needs a look", f"{who(rec)}: {reason}.", every=every)


def pod_problem(
    run: Run, rec: StoredPod, key: str, title: str, message: str, *, every: float | None = None
) -> None:
    """Notify on a new problem, then nag every `every` (nag_interval_s) while it lasts (CAS: once per pass)."""
    nagging = rec.alerted == key
    interval = run.deps.settings.nag_interval_s if every is None else every
    if nagging and rec.alerted_at is not None and run.now - rec.alerted_at < interval:
        return
    expect = {"alerted": rec.alerted, "alerted_at": rec.alerted_at}
    if not run.deps.store.update_if(rec.pod_id, expect, {"alerted": key, "alerted_at": run.now}):
        return
    if nagging:
        run.act_on(rec, "warn", f"still: {message}")
        title = f"{title} (still)"
    announce(run.deps, run.now, title, message, pod_id=rec.pod_id, kind="alert", level="warning")


def all_clear(run: Run, rec: StoredPod) -> None:
    """Nothing wrong now. If something was wrong (or notified) before: cancel it and say so."""
    store = run.deps.store
    if rec.state in ("late", "down"):
        expect: dict[str, Any] = {"state": rec.state, "last_seq": rec.last_seq}
    elif rec.alerted is not None:  # a ping already reset the state; the phone has not heard yet
        expect = {"alerted": rec.alerted, "alerted_at": rec.alerted_at}
    else:
        return
    run.act_on(rec, "cancel", "back to normal")
    if run.dry_run:
        return
    changes = {"state": "ok", "destroy_at": None, "reason": None, "alerted": None, "alerted_at": None}
    if rec.state not in ("late", "down"):
        changes.pop("state")
    if not store.update_if(rec.pod_id, expect, changes):
        return
    action = "stop" if rec.kept_at is not None else "destroy"  # a kept pod is only ever marked for a stop
    planned = (
        f"; the {action} it was marked for is cancelled" if rec.state == "down" or rec.alerted == "down" else ""
    )
    tell(run, rec, f"gpuc: {rec.name} is back", f"back to normal{planned}.", "back")


def run_problem(
    run: Run,
    key: str,
    active: bool,
    *,
    title: str,
    message: str,
    clear_title: str,
    detail: str = "",
    level: Level = "warning",
) -> None:
    """A problem of the whole pass (blind, fleet, cap): one alert, nagged, and one all-clear."""
    if run.dry_run:
        if active:
            run.act("*", detail or "*", "alert", title)
        return
    store = run.deps.store
    meta = store.get_meta(key)
    value: Mapping[str, Any] = meta.value if meta else {}
    was = bool(value.get("active"))
    if active:
        due = not was or value.get("detail") != detail
        due = due or run.now - float(value.get("alerted_at", 0.0)) >= run.deps.settings.nag_interval_s
        if not due:
            return
        new: dict[str, Any] = {"active": True, "alerted_at": run.now, "detail": detail}
    elif was:
        new = {"active": False}
    else:
        return
    if not store.put_meta(key, new, meta.version if meta else None):
        return  # another pass said it
    run.act("*", detail or "*", "alert", title if active else clear_title)
    text = message if active else "Back to normal."
    announce(
        run.deps, run.now, title if active else clear_title, text, kind=key, level=level if active else "info"
    )


def alert_blind(run: Run, sight: Sight, prev: Mapping[str, Any]) -> dict[str, float]:
    """Per provider: one alert when it goes blind, error level once an hour after the first hour (a
    frozen pod there bills unchecked all that time), one all-clear. Returns provider -> blind since."""
    before = prev.get("blind_since")
    known: dict[str, Any] = before if isinstance(before, dict) else {}
    since = {
        name: float(known[name]) if isinstance(known.get(name), int | float) else run.now for name in sight.blind
    }
    for name in sorted(set(sight.blind) | (set(known) & set(sight.read))):
        blind_problem(run, name, sight.blind.get(name), since.get(name, run.now))
    return since


def blind_problem(run: Run, name: str, why: str | None, since: float) -> None:
    if run.dry_run:
        if why is not None:
            run.act("*", name, "alert", f"gpuc: reaper blind on {name}")
        return
    store, key = run.deps.store, f"blind:{name}"
    meta = store.get_meta(key)
    value: Mapping[str, Any] = meta.value if meta else {}
    was = bool(value.get("active"))
    lasted = run.now - since
    level: Level = "error" if lasted >= BLIND_ESCALATE_S else "warning"
    if why is not None:
        due = not was or value.get("level") != level
        due = due or (level == "error" and run.now - float(value.get("alerted_at", 0.0)) >= BLIND_ESCALATE_S)
        if not due:
            return
        new: dict[str, Any] = {"active": True, "alerted_at": run.now, "level": level}
        title = f"gpuc: reaper blind on {name}" + (f" for {minutes(lasted)}" if level == "error" else "")
        text = (
            f"Cannot read {name}: {why}. Nothing is marked or destroyed on {name} pods until it can see again "
            f"(blind since {iso(since)}); pods at other providers are watched as usual."
        )
    elif was:
        new, level = {"active": False}, "info"
        title, text = f"gpuc: the reaper can read {name} again", "Back to normal."
    else:
        return
    if not store.put_meta(key, new, meta.version if meta else None):
        return  # another pass said it
    run.act("*", name, "alert", title)
    announce(run.deps, run.now, title, text, kind="blind", level=level)


def alert_cap(run: Run) -> None:
    cap = run.deps.settings.max_destroys_per_run
    run_problem(
        run,
        "cap",
        run.capped > 0,
        title=f"gpuc: destroy cap reached ({cap} per pass)",
        message=f"{run.capped} more destroys were deferred to the next pass. Many pods due at once is "
        "unusual: check `gpuc ls`.",
        clear_title="gpuc: destroys are under the cap again",
    )


def alert_held(run: Run) -> None:
    """A young store's hold is a state that lasts: one alert when it first defers a destroy, one when it
    ends (a clock jump says so itself)."""
    run_problem(
        run,
        "young",
        run.young and run.held > 0,
        title="gpuc: watchdog store is new: destroys held",
        message=f"{run.held} destroys deferred: {run.hold}. A new or lost store (deleted watchdog.db, a new "
        "GPUC_HOME, a fresh deployment, a second watchdog on this account) cannot tell a healthy pod from a "
        "stray; pods registered with another watchdog: `gpuc watchdog deploy --carry` carries them over.",
        clear_title="gpuc: watchdog store old enough: destroys resume",
    )


def alert_balances(run: Run, sight: Sight) -> None:
    """Per provider account, alert only: too low (pods stop when it hits zero, mid-run, data unsynced)
    or above the user's cap (what a leaked key or a runaway loop could spend). Transitions + nag, as
    run_problem does. Read after every destroy of the pass: a balance read can never delay a kill."""
    settings = run.deps.settings
    for name in sight.read:
        try:
            usd = run.deps.providers.get(name).balance().balance_usd
        except Exception as exc:  # a missing balance is not a problem of the fleet: log, no alert
            log.warning("reaper: balance of %s unreadable: %s", name, describe(exc, run.deps))
            continue
        run_problem(
            run,
            f"balance_low:{name}",
            usd < settings.balance_low_usd,
            title=f"gpuc: {name} balance low (${usd:.2f})",
            message=f"The {name} balance is ${usd:.2f}, below ${settings.balance_low_usd:.2f}: pods stop "
            "when it reaches zero. Top up, or sync and end your runs.",
            clear_title=f"gpuc: {name} balance is above ${settings.balance_low_usd:.2f} again",
            detail=name,
        )
        run_problem(
            run,
            f"balance_cap:{name}",
            usd > settings.balance_cap_usd,
            title=f"gpuc: {name} balance above your cap (${usd:.2f})",
            message=f"The {name} balance is ${usd:.2f}, above your cap of ${settings.balance_cap_usd:.2f}: "
            "that is what a leaked key could spend. Keep less on the account.",
            clear_title=f"gpuc: {name} balance is under your cap again",
            detail=name,
        )


def record_run(
    deps: Deps,
    now: float,
    report: ReapReport,
    sight: Sight,
    *,
    blind_since: Mapping[str, float] | None = None,
    epoch: float | None = None,
) -> None:
    """The reaper's own heartbeat (F14): `gpuc ls` and `gpuc doctor` read it through /v1/status, with
    each blind provider and since when; the next pass reads `last_run` and `epoch` (clock jumps)."""
    value: dict[str, Any] = {
        "last_run": now,
        "blind": sorted(sight.blind),
        "blind_since": dict(blind_since or {}),
        "blind_why": dict(sight.blind),
        "actions": len(report.actions),
    }
    if epoch is not None:
        value["epoch"] = epoch
    _put_meta(deps, value)


def record_failed_run(deps: Deps, now: float, exc: BaseException) -> None:
    """A pass that crashed is not a run: last_run stays where it was, so a crashing reaper goes stale."""
    try:
        meta = deps.store.get_meta(META_REAPER)
        value = dict(meta.value) if meta else {}
        _put_meta(deps, {**value, "last_error": describe(exc, deps), "last_attempt": now})
    except Exception as inner:
        log.error("reaper: could not record a failed pass: %s", type(inner).__name__)


def _put_meta(deps: Deps, value: Mapping[str, Any]) -> None:
    for _ in range(3):  # last writer wins; the CAS only keeps two writers from tearing it
        meta = deps.store.get_meta(META_REAPER)
        if deps.store.put_meta(META_REAPER, value, meta.version if meta else None):
            return


def reap_safely(deps: Deps, dry_run: bool = False) -> ReapReport | None:
    """One pass that never raises: the loop must survive anything one pass does."""
    try:
        return reap_once(deps, deps.clock.now(), dry_run=dry_run)
    except Exception as exc:
        log.error("reaper pass failed: %s", describe(exc, deps))
        return None


def run_loop(deps: Deps, interval_s: float, stop: threading.Event) -> None:
    while not stop.is_set():
        report = reap_safely(deps)
        if report is not None:
            log.info("%s", pass_line(report))
        stop.wait(interval_s)


def pass_line(report: ReapReport) -> str:
    """One log line per pass (`gpuc watchdog serve` shows it): what it did, by pod id; no reasons (they
    are in the notifications), so nothing a provider echoed can reach the log."""
    done = [a for a in report.actions if a.action != "skip"]
    blind = f"; could not read {', '.join(report.blind_providers)} (no destroys there)" if report.blind else ""
    if not done:
        return f"reaper pass: nothing to do{blind}"
    return "reaper pass: " + ", ".join(f"{a.action} {a.provider}/{a.pod_id}" for a in done) + blind


def tell(run: Run, rec: StoredPod, title: str, message: str, kind: str, level: Level = "info") -> None:
    """A notification about one pod, sent at this pass's time; the message opens with which pod it is."""
    announce(run.deps, run.now, title, f"{who(rec)}: {message}", pod_id=rec.pod_id, kind=kind, level=level)


def tell_destroyed(run: Run, rec: StoredPod, reason: str) -> None:
    message = f"{reason}. Confirmed gone at the provider.{cost_text(rec)}"
    tell(run, rec, f"gpuc: destroyed {rec.name}", message, "destroyed")


def who(rec: StoredPod) -> str:
    return f"{rec.pod_id} ({rec.provider}, {rec.experiment})"


def minutes(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def cost_text(rec: StoredPod) -> str:
    if rec.price_per_hour is None or rec.started_at is None or rec.end_at is None:
        return ""
    hours = max(0.0, rec.end_at - rec.started_at) / 3600
    return f" Ran {hours:.2f} h, about ${hours * rec.price_per_hour:.2f}."
