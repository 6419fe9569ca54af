"""The status page for a phone: `GET /p/<session-token>` and the route that mints its link.

The session token is a `page` capability link (functions/links.py): pod `all`, reusable until it expires, and it
never acts. Everything it shows is read, not recomputed: the pods' records, the reaper's own record
(ReaperMeta: last pass, blindness), the month's spend (core.budget, the reaper's arithmetic) and each
pod's next step from the reaper's rules. Its buttons are the same offers a notification carries
(functions.actions.verbs, w20a), each a form that POSTs to `/a/<token>`: the page itself changes nothing,
so a link scanner or a chat preview that opens it changes nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from gpuc.core import api
from gpuc.core.budget import month_spend, record_burn, records_burns, spend_text, usd
from gpuc.core.clock import iso
from gpuc.core.settings import Settings
from gpuc.core.titles import exit_outcome
from gpuc.functions.actions.html import button_form, esc, facts, html_response
from gpuc.functions.actions.routes import CONFIRM, DANGER_VERBS, unsynced
from gpuc.functions.app import Deps
from gpuc.functions.buttons import OfferKind, offer, public_base
from gpuc.functions.deadline import deadline_of, start_of
from gpuc.functions.edge import HttpError, Request, Response, ok, parse, require_admin
from gpuc.functions.links import ALL_PODS, PAGE_LIFE_MAX_S, LinkRefused, link_key, mint, new_claim, read
from gpuc.functions.reaper.record import ReaperMeta, read_meta
from gpuc.functions.reaper.rules import SILENCE_STATUSES, Rules, minutes, silent_at
from gpuc.functions.store import MARKABLE_STATES, StoredPod

log = logging.getLogger("gpuc.functions")

PAGE_PATH = "/p/"
ACT_PATH = "/a/"
ENDED_SHOWN = 5  # the latest ended pods, one line each: what just happened, not the month's history
# Past this many periods without a finished pass the reaper is called stale (as `gpuc doctor` would).
STALE_PERIODS = 3
_REFUSED_STATUS = {"malformed": 404, "altered": 403, "expired": 410, "used": 410}


def offer_kind(pod: StoredPod) -> OfferKind | None:
    """Which notification's offers fit the pod as it stands (None: it has ended, nothing to offer)."""
    if pod.origin == "adopted":
        return None  # a stray gpuc did not start: no button acts on it (`gpuc keep` rescues it)
    if pod.kept_at is not None and pod.state in MARKABLE_STATES:
        return "kept_stopped" if pod.provider_status == "stopped" else "kept"
    if pod.state == "down":
        return "pending_destroy"  # keep 1 h, destroy now
    if pod.state in MARKABLE_STATES:
        return "running"  # keep 1 h, extend 2 h, destroy now
    return None


# ---- the page ---------------------------------------------------------------------------------------------


def status_page(req: Request, deps: Deps, now: float) -> Response:
    """GET /p/<token>: the page, or a clear refusal page. Reads only."""
    try:
        claim = read(link_key(deps.store), req.params.get("token", ""), now)
    except LinkRefused as refused:
        return refusal(refused.why, str(refused))
    if claim.verb != "page" or claim.pod_id != ALL_PODS:
        return refusal("malformed", "this link is for one action, not the status page: open it as it came")
    meta = read_meta(deps.store)
    pods = deps.store.list_pods()
    body = "".join(
        (
            f'<p class="muted">As of {esc(clock(now))}. This page is a key: anyone with its link can see your '
            f"pods and press its buttons until {esc(clock(claim.exp))}. Reload to refresh.</p>",
            reaper_card(deps.settings, meta, now),
            budget_card(deps, pods, now),
            pods_section(deps, pods, meta, now),
        )
    )
    return html_response(200, "gpuc: your pods", body)


def refusal(why: str, sentence: str) -> Response:
    if why == "expired":  # links.read's words are for action links; a session lives what `--for` asked
        sentence = "this status page link has expired: it lives what `gpuc page --for` asked, at most a day"
    fresh = "<p>Ask your laptop for a fresh one: <code>gpuc page</code></p>"
    body = f"<p>{esc(sentence[:1].upper() + sentence[1:])}.</p>{fresh}"
    return html_response(_REFUSED_STATUS.get(why, 403), "This link does not open the status page", body)


def clock(ts: float) -> str:
    return iso(ts)[11:16] + " UTC"


def when(ts: float, now: float) -> str:
    """'21:40 UTC (in 25 min)': a time a person reads on a phone, with how far it is."""
    delta = ts - now
    rel = "now" if abs(delta) < 60 else f"in {minutes(delta)}" if delta > 0 else f"{minutes(-delta)} ago"
    day = "" if abs(delta) < 20 * 3600 else iso(ts)[:10] + " "
    return f"{day}{clock(ts)} ({rel})"


def reaper_card(settings: Settings, meta: ReaperMeta, now: float) -> str:
    if meta.last_run is None:
        line = '<p class="warn">The reaper has never finished a pass: nothing watches your pods yet.</p>'
    elif now - meta.last_run > STALE_PERIODS * settings.reaper_period_s:
        line = f'<p class="warn">The reaper\'s last pass was {esc(when(meta.last_run, now))}: it is stale.</p>'
    else:
        line = f'<p class="ok">The reaper\'s last pass: {esc(when(meta.last_run, now))}.</p>'
    blind = "".join(
        f'<p class="warn">Cannot read {esc(name)} since {esc(when(meta.blind_since.get(name, now), now))}'
        f"{esc(': ' + meta.blind_why[name] if meta.blind_why.get(name) else '')}. Nothing is marked or "
        f"destroyed on {esc(name)} until it can be read.</p>"
        for name in meta.blind
    )
    error = (
        f'<p class="warn">Its last attempt failed: {esc(meta.last_error)}.</p>'
        if meta.last_error and (meta.last_attempt or 0) > (meta.last_run or 0)
        else ""
    )
    return f'<div class="card"><h2>Watchdog</h2>{line}{blind}{error}</div>'


def budget_card(deps: Deps, pods: Sequence[StoredPod], now: float) -> str:
    settings = deps.settings
    budget = settings.monthly_budget
    spend = month_spend(records_burns(pods), now)
    text = spend_text(spend, budget)
    if budget is None:
        unset = '<p class="muted">No monthly budget set (GPUC_MONTHLY_BUDGET).</p>'
        return f'<div class="card"><h2>This month</h2><p>{esc(text)}.</p>{unset}</div>'
    fraction = spend.total_usd / budget
    cls = "warn" if fraction >= settings.budget_alert_fraction else "ok"
    head = f'<p class="{cls}">{esc(usd(spend.total_usd))} of {esc(usd(budget))} ({100 * fraction:.0f} %)</p>'
    buttons = buttons_for(deps, None, "budget", now) if fraction >= settings.budget_alert_fraction else ""
    return f'<div class="card"><h2>This month</h2>{head}<p class="muted">{esc(text)}.</p>{buttons}</div>'


def pods_section(deps: Deps, pods: Sequence[StoredPod], meta: ReaperMeta, now: float) -> str:
    live = [p for p in pods if p.state in (*MARKABLE_STATES, "destroying")]
    ended = sorted((p for p in pods if p not in live), key=lambda p: p.end_at or p.registered_at, reverse=True)
    cards = "".join(pod_card(deps, p, meta, now) for p in sorted(live, key=lambda p: p.registered_at))
    head = f"<h2>Pods running ({len(live)})</h2>" + (cards or "<p>No pod is running.</p>")
    if not ended:
        return head
    codes = exit_codes(deps)
    lines = "".join(
        f'<tr><td>{esc(p.experiment)}<div class="muted">{esc(p.name)}</div></td>'
        f"<td>{esc(outcome(p, now, codes.get(p.pod_id)))}</td><td>{esc(spent(p, now))}</td></tr>"
        for p in ended[:ENDED_SHOWN]
    )
    heads = "<tr><th>Experiment</th><th>Outcome</th><th>Cost</th></tr>"
    return f"{head}<h2>Ended lately</h2><table>{heads}{lines}</table>"


_ENDED_BY = {
    "wrapper": "its job ended",
    "idle": "ended itself, idle",
    "deadline": "ended at its deadline",
    "phone": "ended from the phone",
    "down": "ended by `gpuc down`",
    "up": "destroyed by `gpuc up` as it stopped early",
    "reaper": "destroyed by the watchdog",
}


# The watchdog's own words in a job_exit push (functions/podnews.py), after the pod's quoted ones.
_EXIT_SAID = re.compile(r"gpuc: exit code (-?\d{1,10})\.")


def exit_codes(deps: Deps) -> dict[str, int]:
    """Pod id -> its job's exit code, from the job_exit pushes the store still holds ("its job
    ended" did not say whether it failed)."""
    codes: dict[str, int] = {}
    for note in deps.store.recent_notifications(200):  # oldest first: a pod's last job_exit wins
        said = _EXIT_SAID.findall(note.message) if note.kind == "job_exit" and note.pod_id else []
        if said and note.pod_id:
            codes[note.pod_id] = int(said[-1])
    return codes


def outcome(pod: StoredPod, now: float, exit_code: int | None = None) -> str:
    """How an ended pod ended, in a few words a person reads on a phone, and when."""
    words = _ENDED_BY.get(pod.ended_by or "", "ended")
    if pod.ended_by == "idle" and pod.warm_s:
        words = f"ended itself: warm, no job for {minutes(pod.warm_s)}"
    if pod.ended_by == "wrapper" and exit_code is not None:
        words = f"its job ended: {exit_outcome(exit_code)}"
    if pod.ended_by == "reaper" and pod.reason:
        words += f" ({pod.reason[:80]})"
    if pod.ended_by == "up" and pod.note:  # gpuc's own note: why `up` stopped (Ctrl-C, a failed install)
        words += f" ({pod.note.removeprefix('up stopped early: ')[:80]})"
    if pod.state == "destroying":
        words += "; being destroyed"
    if pod.end_at is not None:
        words += f", {when(pod.end_at, now)}"
    return words


def pod_card(deps: Deps, pod: StoredPod, meta: ReaperMeta, now: float) -> str:
    settings = deps.settings
    price = "?" if pod.price_per_hour is None else f"{usd(pod.price_per_hour)}/h"
    state = pod.state if pod.provider_status is None else f"{pod.provider_status} ({watchdog_word(pod)})"
    rows = (
        ("Provider", pod.provider),
        ("GPU", pod.gpu or "?"),
        ("State", state),
        ("Age", minutes(max(0.0, now - start_of(pod)))),
        ("Price", price),
        ("Spent", spent(pod, now)),
        ("Deadline", when(deadline_of(pod, settings), now)),
        *warm_row(pod),
        ("Next", next_step(settings, pod, meta, now)),
    )
    kind = offer_kind(pod)
    buttons = buttons_for(deps, pod, kind, now) if kind is not None else ""
    title = f"{pod.name} · {pod.experiment}"
    head = f'<strong>{esc(title)}</strong><div class="muted">{esc(pod.pod_id)}</div>'
    return f'<div class="card">{head}{facts(rows)}{buttons}</div>'


def warm_row(pod: StoredPod) -> tuple[tuple[str, str], ...]:
    """A warm pod (`up --warm`) outlives its jobs: say so, and what ends it, beside its deadline."""
    if not pod.warm_s:
        return ()
    beat = pod.last_heartbeat
    now_doing = "a job is running; " if beat is not None and beat.job_running else ""
    return (("Warm", f"{now_doing}kept {minutes(pod.warm_s)} after each job, for the next `gpuc run`"),)


def watchdog_word(pod: StoredPod) -> str:
    return {"ok": "pinging", "late": "LATE", "down": "DOWN"}.get(pod.state, pod.state)


def spent(pod: StoredPod, now: float) -> str:
    """Price x the hours it billed so far (core.budget's reading of a record): an estimate."""
    burn = record_burn(pod)
    if burn.unknown or burn.start is None or burn.price_per_hour is None:
        return "?"
    end = now if burn.end is None else burn.end
    return "about " + usd(burn.price_per_hour * max(0.0, end - burn.start) / 3600)


def idle_step(settings: Settings, pod: StoredPod) -> float | None:
    """When the pod's agent ends it for idleness, from its last heartbeat: idle so long already (no job, no
    ssh, GPU idle), it ends at idle_destroy_s; a warm pod with no job, at its warm time (`up --warm`, counted
    from its last job's end). None when it is busy, kept alive, or has not said."""
    beat = pod.last_heartbeat
    if beat is None or pod.last_seen is None or beat.job_running or beat.keep_file or beat.busy_reason is not None:
        return None
    if pod.warm_s:
        return pod.last_seen + max(0.0, pod.warm_s - beat.idle_minutes * 60)
    if beat.idle_minutes <= 0:
        return None
    return pod.last_seen + max(0.0, settings.idle_destroy_s - beat.idle_minutes * 60)


def next_step(settings: Settings, pod: StoredPod, meta: ReaperMeta, now: float) -> str:
    """What the reaper does next to this pod and when, read from its record and the reaper's rules."""
    if pod.provider in meta.blind:
        return f"nothing while {pod.provider} cannot be read (no kill on an uncertain reading)"
    if pod.state == "destroying":
        return "being destroyed now"
    if pod.kept_at is not None:
        if pod.provider_status == "stopped":
            return "nothing: stopped and kept for its results, its disk bills until you decide"
        if pod.kept_until is not None:
            stop = pod.kept_until + settings.reaper_period_s
            return f"kept for its results (its sync failed): stopped, never destroyed, at {when(stop, now)}"
        return "kept for its results (its sync failed): never destroyed unasked"
    if pod.state == "down" and pod.destroy_at is not None:
        why = f" ({pod.reason})" if pod.reason else ""
        return f"destroy at {when(pod.destroy_at, now)}{why}, unless it pings again"
    if pod.intent == "end":
        return "ending: asked from the phone, it syncs results/ and destroys itself at its next heartbeat"
    deadline = deadline_of(pod, settings)
    steps = [(deadline, f"ends at its deadline {when(deadline, now)} (results synced first)")]
    leased = pod.lease_until is not None and now < pod.lease_until
    idle = idle_step(settings, pod)
    if leased and pod.lease_until is not None:
        steps.append((pod.lease_until, f"kept until {when(pod.lease_until, now)} (gpuc keep); then watched as usual"))
    elif idle is not None and pod.warm_s:
        steps.append(
            (idle, f"warm, no job: ends itself at {when(idle, now)} (results synced first), unless a job starts")
        )
    elif idle is not None:
        steps.append((idle, f"ends itself idle at {when(idle, now)} (results synced first), unless work starts"))
    # A pod pinging as it should: the silence rule is no threat to it, and not what happens next.
    fresh = pod.last_seen is not None and now - pod.last_seen < 3 * settings.heartbeat_interval_s
    pinging = pod.state == "ok" and fresh
    if not (leased or pinging) and pod.provider_status in SILENCE_STATUSES and pod.origin == "registered":
        silent = silent_at(Rules(now, settings, epoch=meta.epoch), pod)
        steps.append(
            (
                silent,
                f"if it does not ping by {when(silent, now)}: warned, then destroyed "
                f"{minutes(settings.destroy_grace_s)} later",
            )
        )
    return min(steps)[1]


# ---- the link -------------------------------------------------------------------------------------------


def page_link(req: Request, deps: Deps, now: float) -> Response:
    """POST /v1/page-link (admin): a session link to the status page, for `gpuc page --for`."""
    require_admin(req, deps)
    body = parse(api.PageLinkRequest, req.body)
    if body.for_s > PAGE_LIFE_MAX_S:
        raise HttpError(
            400, f"json validation error: for_s is too large (a page link lives at most {PAGE_LIFE_MAX_S} s)"
        )
    token = mint(link_key(deps.store), new_claim("page", ALL_PODS, now, life_s=body.for_s))
    url = f"{public_base(deps.settings, asked_at(req))}{PAGE_PATH}{token}"
    return ok(api.PageLinkAnswer(url=url, expires_at=int(now) + body.for_s))


def asked_at(req: Request) -> str:
    """The address the laptop called (a Function URL's own host); on loopback `gpuc page` says the link
    works on this machine only."""
    host = req.header("Host") or "127.0.0.1"
    scheme = req.header("X-Forwarded-Proto") or ("http" if _loopback(host) else "https")
    return f"{scheme}://{host}"


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name in ("localhost", "127.0.0.1", "[::1]") or name.startswith("127.")


def buttons_for(deps: Deps, pod: StoredPod | None, kind: OfferKind, now: float) -> str:
    """The offers as forms that act on the tap. Each carries the confirmation field: a form with no field
    POSTs an empty body, which the route takes for a channel's bare button (destroy refused with a 403).
    This page is the confirmation: it shows the pod, and what a destroy would lose, next to the button."""
    offers = offer(deps.store, deps.settings, pod, kind, now)
    forms = "".join(button_form(f"{ACT_PATH}{o.token}", o.label, danger=not o.safe, fields=(CONFIRM,)) for o in offers)
    lose = ""
    if pod is not None and any(o.verb in DANGER_VERBS for o in offers):
        cls = "warn" if pod.kept_at is not None or pod.state != "ok" else "muted"  # kept, or not pinging: loud
        lose = f'<p class="{cls}">If destroyed, not synced: {esc(unsynced(deps, pod, now))}.</p>'
    return f'<div class="actions">{lose}{forms}</div>' if forms else ""
