"""What a tap on the phone does: each verb is one of the watchdog's existing transitions, asked
for by a capability link (functions/links.py) instead of the admin token.

- keep 1 h: `gpuc keep`'s lease (the idle destroy waits) and the deadline no sooner than it.
- extend 2 h: `gpuc extend`'s deadline move, within the user's cap.
- destroy now: never a destroy from here. The pod is asked to end itself (its next heartbeat answer says
  so): sync -> notify -> destroy, kept on a failed sync, as when it decides itself. Only a pod that cannot
  (it has not pinged since) is the reaper's, through its usual mark and destroy (rules.asked_ruling).
- retry sync (a kept pod): its agent's kept loop retries now (the heartbeat answer again).
- stop, keep disk (a kept pod): the reaper's kept stop (steps.stop_kept), now.
- destroy anyway (a kept pod): the user's word, as `gpuc down --force`; the reaper's destroy (claim,
  ledger end, notify, destroy, confirm gone; retried by the next pass if it does not finish).
- pause new pods: a watchdog flag `gpuc up` reads from /v1/status and refuses on.

`act` checks everything that can refuse BEFORE it spends the link's nonce, so a refused tap changes nothing;
of two taps racing, the nonce's conditional write lets one act. Destroy verbs act only from their
confirmation page (via "page"), which shows what is not synced: never from a bare channel button.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from gpuc.core import api
from gpuc.core.api import ReapReport
from gpuc.core.ledger.rows import money
from gpuc.core.notify.message import Action, Level
from gpuc.core.titles import cost_so_far, title
from gpuc.functions.app import Deps, announce
from gpuc.functions.buttons import LABELS, SAFE_VERBS
from gpuc.functions.deadline import deadline_of, limit_of
from gpuc.functions.edge import HttpError
from gpuc.functions.links import ALL_PODS, Claim, Verb, claim_once, link_key, read, record_spent
from gpuc.functions.reaper.state import Pass
from gpuc.functions.reaper.steps import destroy, stop_kept
from gpuc.functions.recovery import runs
from gpuc.functions.recovery.routes import ask_stop
from gpuc.functions.store import MARKABLE_STATES, PodAuth, StoredPod
from gpuc.functions.transitions import lease, set_deadline

Via = Literal["page", "ntfy", "telegram", "slack"]
VIAS: tuple[Via, ...] = get_args(Via)
PAUSE_META = "paused_new_pods"
# An intent the agent has not acted on is sent again with every heartbeat answer; a retry for this long.
RETRY_INTENT_LIFE_S = 3600.0
PHONE = "phone"  # move_deadline says "from the phone"


class ActionRefused(Exception):
    """The tap does nothing: `status` for the page (404 unknown pod, 403 not from here, 409 not now)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Acted:
    verb: Verb
    pod_id: str  # ALL_PODS for pause
    sentence: str  # what happened, for the person who tapped


@dataclass(frozen=True)
class VerbSpec:
    label: str
    check: Callable[[Deps, StoredPod | None, Claim, float], None]  # raises ActionRefused; changes nothing
    do: Callable[[Deps, StoredPod | None, Claim, float, Via], str]  # the sentence
    explain: str  # what the confirmation page says the button does
    told: bool = False  # the transition's own push is the tap's one push (said "from the phone")


def hm(ts: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(ts))


def span(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


# -- checks (before the nonce is spent) -----------------------------------------------------------
def _pod(pod: StoredPod | None) -> StoredPod:
    if pod is None:
        raise ActionRefused(404, "unknown pod")
    return pod


def _live(pod: StoredPod | None) -> StoredPod:
    rec = _pod(pod)
    if rec.state not in MARKABLE_STATES:
        raise ActionRefused(409, f"{rec.name} has already ended ({rec.state}): nothing to do")
    return rec


def _kept(pod: StoredPod | None) -> StoredPod:
    rec = _live(pod)
    if rec.kept_at is None:
        raise ActionRefused(409, f"{rec.name} is not kept for its results: this button no longer applies")
    return rec


def _kept_running(pod: StoredPod | None) -> StoredPod:
    rec = _kept(pod)
    if rec.provider_status == "stopped":
        raise ActionRefused(
            409, f"{rec.name} is already stopped: its agent cannot run. `gpuc results {rec.pod_id}` copies results/"
        )
    return rec


def check_keep(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    _live(pod)


def check_extend(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    rec = _live(pod)
    cap = limit_of(rec, deps.settings)
    if deadline_of(rec, deps.settings) >= cap:
        raise ActionRefused(409, f"{rec.name}'s deadline is already at your cap ({hm(cap)}, max_lifetime_hours)")


def check_destroy(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    rec = _live(pod)
    if rec.kept_at is not None:
        raise ActionRefused(
            409,
            f"{rec.name} is kept for its results (its sync failed): its kept notification offers "
            "'destroy anyway', which says what is lost",
        )


def check_kept(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    _kept(pod)


def check_kept_running(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    _kept_running(pod)


def _recovering(deps: Deps, pod: StoredPod | None) -> str:
    rec = _pod(pod)
    loaded = runs.load(deps.store, rec.run_id) if rec.run_id is not None else None
    if loaded is None:
        raise ActionRefused(409, f"{rec.name} is not part of a recovering run: this button no longer applies")
    run = loaded[0]
    if run.done:
        raise ActionRefused(409, f"recovery of run {run.run_id} is already over ({run.stopped_why or 'its pod ended'})")
    if run.stop_asked:
        raise ActionRefused(409, f"stopping the recovery of run {run.run_id} was already asked")
    return run.run_id


def check_norecover(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    _recovering(deps, pod)


def check_pause(deps: Deps, pod: StoredPod | None, claim: Claim, now: float) -> None:
    paused = paused_since(deps)
    if paused is not None:
        raise ActionRefused(409, f"new pods are already paused (since {hm(paused)})")


# -- the verbs ------------------------------------------------------------------------------------
def do_keep(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    rec = _pod(pod)
    until = min(now + claim.param, now + deps.settings.max_hours * 3600)
    lease(deps, rec, now, until)
    # As `gpuc keep`: kept for 1 h means alive for 1 h, so the deadline is no sooner (as far as the cap lets).
    ends = ""
    try:
        answer = set_deadline(deps, rec, now, api.DeadlineRequest(deadline_at=until, at_least=True), via=PHONE)
        if answer.deadline_at < until:
            ends = f"; its deadline stays {hm(answer.deadline_at)} (your cap)"
    except HttpError as exc:
        ends = f"; its deadline was not moved ({exc.message})"
    return f"kept {span(until - now)} more from the phone, until {hm(until)}{ends}"


def do_extend(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    rec = _pod(pod)
    request = api.DeadlineRequest(extend_s=float(claim.param), at_least=True)
    answer = set_deadline(deps, rec, now, request, via=PHONE)
    capped = " (as far as your cap, max_lifetime_hours, allows)" if answer.capped else ""
    return f"deadline moved from the phone: {rec.name} now ends at {hm(answer.deadline_at)}{capped}"


def do_destroy(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    rec = _pod(pod)
    # The lease goes: a lease vetoes the reaper's kill, and this is the user saying "end it".
    changes = {"intent": "end", "intent_at": now, "lease_until": None}
    _cas(deps, rec, {"state": MARKABLE_STATES, "kept_at": None}, changes)
    return (
        f"destroy of {rec.name} asked from the phone: the pod syncs results/, then destroys itself (kept, not "
        "destroyed, if that sync fails); if it cannot, the watchdog destroys it on its next passes"
    )


def do_retry(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    rec = _pod(pod)
    _cas(deps, rec, {"kept_at": rec.kept_at}, {"intent": "retry_sync", "intent_at": now})
    return (
        f"sync retry of {rec.name} asked from the phone: the pod tries again at its next heartbeat (about a "
        "minute); a sync that works ends the pod as usual, a failed one keeps it"
    )


def do_stop(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    rec = _pod(pod)
    run = _pass(deps, now)
    stop_kept(run, rec, "stop asked from the phone")
    if not _did(run, "stop"):
        raise ActionRefused(409, f"{rec.name} was not stopped: {_last_reason(run)}. Try again in a minute")
    return f"{rec.name} stopped from the phone: GPU billing ended, the disk with results/ stays"


def do_anyway(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    rec = _pod(pod)
    # The user's word, as `gpuc down --force`: nothing is kept for the results any more, the end is theirs.
    word = {"kept_at": None, "kept_until": None, "end_at": now, "ended_by": "phone"}
    _cas(deps, rec, {"state": rec.state, "kept_at": rec.kept_at}, word)
    run = _pass(deps, now)
    destroy(run, rec.model_copy(update=word), "destroy anyway asked from the phone (results/ not synced)")
    if _did(run, "destroy") and (after := deps.store.get_pod(rec.pod_id)) is not None and after.state == "destroyed":
        cost = cost_so_far(rec.price_per_hour, rec.started_at, now)
        spent = f"; it ran {span(now - (rec.started_at or now))}, {money(cost)}" if cost is not None else ""
        return f"{rec.name} destroyed from the phone; its results/ was not synced. Ledger end {hm(now)}{spent}"
    return f"destroying {rec.name} (asked from the phone); not confirmed gone yet: the reaper retries on its next pass"


def do_pause(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    meta = deps.store.get_meta(PAUSE_META)
    if not deps.store.put_meta(PAUSE_META, {"paused": True, "since": now, "via": via}, meta.version if meta else None):
        raise ActionRefused(409, "new pods were paused meanwhile")
    return f"new pods paused from the phone: `gpuc up` refuses until {RESUME_HOW}"


def do_norecover(deps: Deps, pod: StoredPod | None, claim: Claim, now: float, via: Via) -> str:
    run_id = _recovering(deps, pod)
    if not ask_stop(deps, run_id):
        raise ActionRefused(409, "the run changed meanwhile: nothing was done")
    loaded = runs.load(deps.store, run_id)
    busy = runs.busy_with(loaded[0]) if loaded is not None else None
    # The phone cannot wait for the pass: it says plainly what is still under way (runs.busy_with: an attempt
    # rented after this stop is destroyed by that pass, confirmed gone, and said).
    now_doing = f"; right now the watchdog is {busy}: you are told once it is confirmed gone" if busy else ""
    return (
        f"recovery of run {run_id} stopped from the phone: no re-rent after an outbid; the watchdog's next pass "
        f"destroys a paused instance and says so (the pushed results stay){now_doing}"
    )


RESUME_HOW = "`gpuc watchdog resume` (running pods are not touched)"

VERB_SPECS: dict[Verb, VerbSpec] = {
    "keep": VerbSpec(LABELS["keep"], check_keep, do_keep, "suspends the idle destroy for this long (gpuc keep)"),
    "extend": VerbSpec(
        LABELS["extend"], check_extend, do_extend, "moves gpuc's deadline for the pod later, within your cap", told=True
    ),
    "destroy": VerbSpec(
        LABELS["destroy"],
        check_destroy,
        do_destroy,
        "asks the pod to end now: it syncs results/ first and is kept if that fails; a pod that cannot answer "
        "is destroyed by the watchdog",
    ),
    "retry": VerbSpec(LABELS["retry"], check_kept_running, do_retry, "the pod tries its results sync again now"),
    "stop": VerbSpec(
        LABELS["stop"], check_kept_running, do_stop, "stops the pod: GPU billing ends, the disk with results/ stays"
    ),
    "anyway": VerbSpec(
        LABELS["anyway"], check_kept, do_anyway, "destroys the pod and its disk: its unsynced results/ are lost"
    ),
    "pause": VerbSpec(LABELS["pause"], check_pause, do_pause, "`gpuc up` refuses new pods; running pods go on"),
    "norecover": VerbSpec(
        LABELS["norecover"],
        check_norecover,
        do_norecover,
        "no more re-rents after an outbid: a paused instance is destroyed, the pushed results stay",
    ),
}


def _cas(deps: Deps, rec: StoredPod, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> None:
    if not deps.store.update_if(rec.pod_id, expect, changes):
        raise ActionRefused(409, "the pod changed meanwhile: nothing was done")


def _pass(deps: Deps, now: float) -> Pass:
    return Pass(deps, now, False, ReapReport(ran_at=now))


def _did(run: Pass, action: str) -> bool:
    return bool(run.report.actions) and run.report.actions[-1].action == action


def _last_reason(run: Pass) -> str:
    return run.report.actions[-1].reason if run.report.actions else "the pod changed meanwhile"


# -- the two entry points -------------------------------------------------------------------------
def target(deps: Deps, claim: Claim) -> StoredPod | None:
    """The pod a link is about (None for ALL_PODS); ActionRefused 404 when the watchdog has no such pod."""
    if claim.pod_id == ALL_PODS:
        if claim.verb != "pause":
            raise ActionRefused(400, "this link is not about one pod")
        return None
    if claim.verb == "pause":
        raise ActionRefused(400, "this link is about all pods, not one")
    pod = deps.store.get_pod(claim.pod_id)
    if pod is None:
        raise ActionRefused(404, "unknown pod: this watchdog has no record of it")
    return pod


def readable(deps: Deps, token: str, now: float) -> tuple[Claim, StoredPod | None]:
    """What a link would do, for its confirmation page. Never acts, never spends the nonce."""
    claim = read(link_key(deps.store), token, now)
    if claim.verb == "page":
        raise ActionRefused(400, "this is a status-page link, not an action: open it as /p/<link>")
    return claim, target(deps, claim)


def act(deps: Deps, token: str, now: float, via: Via) -> Acted:
    """Read the link, check it may act from `via` and now, spend its nonce, act, tell the phone. Raises
    LinkRefused or ActionRefused (with the sentence to show); nothing changes on a refusal."""
    if via not in VIAS:
        raise ActionRefused(400, f"unknown channel {via!r}")
    claim, pod = readable(deps, token, now)
    spec = VERB_SPECS[claim.verb]
    if via != "page" and claim.verb not in SAFE_VERBS:
        raise ActionRefused(403, f"'{spec.label}' acts only from its confirmation page: open the link")
    spec.check(deps, pod, claim, now)
    claim_once(deps.store, claim, now)
    held = HeldPushes()
    try:
        # The transitions' own pushes (destroying, destroyed, stopped) are held: one tap is one push,
        # which says what they said when it matters. The store still logs each.
        sentence = spec.do(deps if spec.told else replace(deps, notifier=held), pod, claim, now, via)
    except HttpError as exc:  # the transition's own refusal (a race since the check): said, nothing done
        record_spent(deps.store, claim, now, f"nothing was done: {exc.message}")
        raise ActionRefused(409, exc.message) from None
    except ActionRefused as exc:
        record_spent(deps.store, claim, now, f"nothing was done: {exc.message}")
        raise
    record_spent(deps.store, claim, now, sentence)
    if not spec.told:
        _tell(deps, pod, claim.verb, sentence, now, via, held)
    return Acted(claim.verb, claim.pod_id, sentence)


@dataclass
class HeldPushes:
    """A Sender that sends nothing: what a tap's transitions would have pushed, kept for the tap's one push."""

    said: list[tuple[str, str, Level]] = field(default_factory=list)

    def send(
        self,
        title: str,
        message: str,
        *,
        pod_id: str | None = None,
        kind: str = "info",
        level: Level = "info",
        actions: Sequence[Action] = (),
    ) -> None:
        self.said.append((title, message, level))

    def flush(self) -> None:
        pass


def _tell(deps: Deps, pod: StoredPod | None, verb: Verb, sentence: str, now: float, via: Via, held: HeldPushes) -> None:
    label = VERB_SPECS[verb].label
    experiment = None if pod is None else pod.experiment
    headline = title(f"{label} {'new pods ' if pod is None else ''}(from the phone)", experiment=experiment)
    where = f" Pod {pod.pod_id} ({pod.provider}, {pod.experiment})." if pod is not None else ""
    level: Level = "warning" if verb in ("destroy", "anyway", "pause") else "info"
    # A failure on the way (destroy FAILED: still billing) is the news: it leads, at its own level.
    failed = [f"{t}: {m}" for t, m, lvl in held.said if lvl == "error"]
    if failed:
        level = "error"
    announce(
        deps,
        now,
        headline,
        " ".join([*failed, f"{sentence} (tapped in {via}).{where}"]),
        pod_id=None if pod is None else pod.pod_id,
        kind="action",
        level=level,
    )


def paused_since(deps: Deps) -> float | None:
    meta = deps.store.get_meta(PAUSE_META)
    if meta is None or not meta.value.get("paused"):
        return None
    return float(meta.value.get("since", 0.0))


def resume(deps: Deps, now: float) -> bool:
    """`gpuc watchdog resume`: new pods may start again. False when they were not paused."""
    meta = deps.store.get_meta(PAUSE_META)
    if meta is None or not meta.value.get("paused"):
        return False
    if not deps.store.put_meta(PAUSE_META, {"paused": False}, meta.version):
        return False
    announce(deps, now, "gpuc: new pods resumed", "`gpuc up` may start pods again.", kind="action")
    return True


def intent_of(auth: PodAuth, now: float) -> tuple[Literal["end", "retry_sync"] | None, float | None]:
    """What the pod's heartbeat answer asks of it. An "end" stands until the pod ends or is kept (or the
    reaper takes it); a retry lasts RETRY_INTENT_LIFE_S (the agent acts once per intent_at)."""
    if auth.intent_at is None:
        return None, None
    if auth.intent == "end" and auth.state in MARKABLE_STATES:
        return "end", auth.intent_at
    if auth.intent == "retry_sync" and now < auth.intent_at + RETRY_INTENT_LIFE_S:
        return "retry_sync", auth.intent_at
    return None, None


def paused_text(deps: Deps) -> str | None:
    """The sentence `gpuc up` refuses with while new pods are paused, or None."""
    since = paused_since(deps)
    if since is None:
        return None
    return f"new pods are paused (from the phone, since {hm(since)}): resume with {RESUME_HOW}"
