"""Drill row F20: one tap on the phone. The idle warning reaches the phone; the user taps "keep 1 h"
(a real POST to the watchdog's real `/a/<link>` route, after a link scanner opened it with a GET); the pod
lives that hour more under the real agent's idle rule and the real reaper, then ends as an idle pod does.

Billed minutes run from the kept hour's end (what the user asked for is not waste); a destroy before it
is a false kill.
"""

from __future__ import annotations

from gpuc.functions.actions.routes import CONFIRM, FORM
from gpuc.functions.buttons import KEEP_S, offer
from gpuc.functions.edge import Request, Response
from gpuc.functions.handlers import dispatch
from gpuc.testkit.drill_stage import MIN, RowResult, Stage, pod_row


def tap(stage: Stage, token: str) -> Response:
    """What the phone does: a link scanner's GET first (it must change nothing), then the button's POST."""
    dispatch(Request("GET", f"/a/{token}"), stage.deps, stage.now)
    body = "=".join(CONFIRM).encode()
    return dispatch(Request("POST", f"/a/{token}", {"Content-Type": FORM}, body), stage.deps, stage.now)


def tap_keep(stage: Stage, pod_id: str) -> list[int]:
    """Tap "keep 1 h" on the warning; a page that says the watchdog failed (a fault's store window) is
    tapped again a minute later, on the next notification's fresh link."""
    statuses: list[int] = []
    for _ in range(5):
        rec = stage.real_store.get_pod(pod_id)
        offers = offer(stage.deps.store, stage.deps.settings, rec, "pending_destroy", stage.now)
        keep = next(o for o in offers if o.verb == "keep")
        statuses.append(tap(stage, keep.token).status)
        if statuses[-1] == 200:
            break
        stage.run(MIN)
    return statuses


def warned(stage: Stage, pod_id: str) -> bool:
    return any(n.kind == "idle_warning" for n in stage.sent(pod_id))


def f20_keep_from_the_phone(stage: Stage) -> RowResult:
    settings = stage.settings
    pod = stage.launch("f20-pod")  # nobody on it: idle from the start
    check = settings.idle_check_interval_s
    stage.run(settings.idle_destroy_s + 2 * check, until=lambda: warned(stage, pod.pod_id))
    problems = [] if warned(stage, pod.pod_id) else ["no idle warning reached the phone"]
    statuses = tap_keep(stage, pod.pod_id)
    if statuses[-1] != 200:
        problems.append(f"the tap was refused ({statuses})")
    kept_until = stage.now + KEEP_S
    stage.run_until_gone(pod.pod_id, 3 * 3600)
    gone = stage.provider.destroyed_at.get(pod.pod_id)
    false_kills = 1 if gone is not None and gone < kept_until else 0
    if gone is None:
        problems.append("the pod was never ended after its kept hour")
    if not any(n.kind == "action" and "from the phone" in n.message for n in stage.sent(pod.pod_id)):
        problems.append("the tap was not notified")
    bound = (settings.idle_destroy_s + 2 * check) / MIN + stage.slack(kept_until)
    text = f"kept 1 h, then 20 min idle + 2 checks{stage.bound_note(kept_until)}"
    billed = None if gone is None else max(0.0, gone - kept_until) / MIN
    caught_by = "phone tap (keep 1 h), then the idle watch"
    return pod_row(
        stage,
        pod,
        "F20",
        "idle warning, one tap: keep 1 h",
        caught_by,
        billed,
        bound,
        text,
        false_kills=false_kills,
        problems=problems,
    )
