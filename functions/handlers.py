"""The watchdog's route handlers: plain functions of (request, deps, now), the same on loopback and on
Lambda. Who may call, and how a body is read, is functions.edge; the record transitions the reaper makes
too are functions.transitions.

After the signature (edge.verify_pod), the seq: a heartbeat's seq must rise (a replayed "alive" ping
would keep a dead pod billing), an event's seq must be new (events from the agent and the wrapper may
arrive out of order, never twice). Admin routes, which are trusted, say 404 "unknown pod".
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from urllib.parse import unquote

from gpuc.core import api
from gpuc.core.notify.message import Level
from gpuc.core.redact import redact
from gpuc.core.signing import derive_key
from gpuc.functions.actions import slack, telegram, verbs
from gpuc.functions.actions.routes import action_page, action_post
from gpuc.functions.actions.status_page import page_link, status_page
from gpuc.functions.app import Deps, announce
from gpuc.functions.channels import held_channels
from gpuc.functions.claims import catch_up, claim_for, claimed, run_of, token_for
from gpuc.functions.deadline import deadline_of
from gpuc.functions.edge import (
    BAD_POD,
    Handler,
    HttpError,
    Request,
    Response,
    check_time,
    ok,
    parse,
    require_admin,
    same_pod,
    verify_pod,
)
from gpuc.functions.eventlimit import admit_event
from gpuc.functions.grants import checked_results_at, grant, grant_list, grant_upload, said_scope
from gpuc.functions.links import path_for_log
from gpuc.functions.podnews import event_text, event_title
from gpuc.functions.reaper import reap_once
from gpuc.functions.reaper.record import read_meta
from gpuc.functions.recovery.routes import boot, check_recovery, run_status, run_stop, store_recovery
from gpuc.functions.recovery.webhook import last_delivery, vast_hook
from gpuc.functions.store import StoredPod, store_born
from gpuc.functions.transitions import (
    capped_deadline,
    clear_kept,
    lease,
    record_end,
    record_kept,
    revive,
    set_deadline,
)

log = logging.getLogger("gpuc.functions")

# How far from the server's clock a reported time may be: an end recorded by a pod that could not reach
# us for a while is still taken; a year-2090 end or a start next week is not.
END_PAST_S = 30 * 24 * 3600.0
FUTURE_SLACK_S = 3600.0
NOTIFICATIONS_IN_STATUS = 50
# Sent only after a verified results sync (instance_side/ending.py): whatever was kept for them is not.
SYNCED_ENDS = ("job_exit", "idle_destroy", "phone_destroy")


def register(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    body = parse(api.RegisterRequest, req.body)
    if body.provider not in deps.providers.known:
        raise HttpError(400, "json validation error: provider is not one of the configured providers")
    check_time("started_at", body.started_at, now, float("inf"), FUTURE_SLACK_S)
    check_recovery(body, deps)
    results_at = (
        None
        if body.results_at is None
        else checked_results_at(deps.settings, body.results_at, body.experiment, run_of(body.name))
    )
    # No key of its own: the pod's token is derived from this watchdog's key, so its claim alone proves it.
    token = None if body.key is not None else token_for(deps, body.provider, body.pod_id, body.name)
    if body.key is None and token is None:
        raise HttpError(400, "json validation error: key is required (this watchdog has no key of its own)")
    pod = StoredPod(
        **body.model_dump(exclude={"key", "policy", "interruptible", "carried", "recovery", "results_at"}),
        key=body.key if token is None else derive_key(token),
        policy=body.policy,
        interruptible=body.interruptible,
        origin="carried" if body.carried else "registered",
        registered_at=now,
        run_id=body.recovery.spec.run_id if body.recovery is not None else None,
        attempt=1 if body.recovery is not None else None,
        results_at=results_at,
    )
    pod = capped_deadline(pod, deps)
    store_born(deps.store, now)  # the first registration dates a new store, if no reaper pass did
    if deps.store.register(pod) == "refused":
        raise HttpError(409, "pod already ended: register a new pod")
    store_recovery(body, deps)
    claim = claim_for(deps, pod, deadline_of(pod, deps.settings), now)
    return ok(api.RegisterAnswer(token=token, claim=claim))


def heartbeat(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(api.HeartbeatBody, req.body)
    same_pod(signed, body.pod_id)
    if body.seq != signed.seq:
        raise HttpError(400, f"body seq does not match the {api.H_SEQ} header")
    if not deps.store.record_heartbeat(signed.pod_id, signed.seq, now, body):
        current = deps.store.get_pod(signed.pod_id)
        last = current.last_seq if current else None
        raise HttpError(409, "replayed or out-of-order seq: send a higher one", last_seq=last)
    if signed.auth.state == "destroyed":
        revive(deps, signed.pod_id, now, "it pinged (valid signature)")
    if catch_up(deps, signed.auth, claimed(deps, req.header(api.H_CLAIM), signed.pod_id)):
        signed = replace(signed, auth=deps.store.get_auth(signed.pod_id) or signed.auth)  # an old backup's record
    if body.kept_left_s is not None:
        # Said on every ping too: a lost "kept" event must not leave a dying agent's results to a destroy.
        record_kept(deps, signed.pod_id, now, body.kept_left_s)
    deadline = deadline_of(signed.auth, deps.settings)  # the pod adopts it: later (extend) or earlier (budget)
    intent, intent_at = verbs.intent_of(signed.auth, now)  # asked from the phone: said until the pod acts
    return ok(
        api.HeartbeatAnswer(
            server_time=now,
            lease_until=signed.auth.lease_until,
            deadline_at=deadline,
            intent=intent,
            intent_at=intent_at,
            # Minted afresh from this one read (no write): what changed since (extend, a lease, a budget's
            # pull-in) reaches the pod, which keeps the latest and presents it to a store that lost it.
            claim=claim_for(deps, signed.auth, deadline, now),
        )
    )


def event(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(api.PodEvent, req.body)
    same_pod(signed, body.pod_id)
    check_time("end_at", body.end_at, now, END_PAST_S, FUTURE_SLACK_S)
    if not deps.store.claim_event_seq(signed.pod_id, signed.seq, now, keep_s=2 * api.SIGNATURE_WINDOW_S):
        raise HttpError(409, "replayed event: this seq was already received")
    # The pod waits for this answer before its destroy call: the ledger end is recorded first, the
    # phone hears about it second.
    if body.end_at is not None:
        by = {"idle_destroy": "idle", "deadline_destroy": "deadline", "phone_destroy": "phone"}.get(
            body.kind, "wrapper"
        )
        record_end(deps, signed.pod_id, now, end_at=body.end_at, by=by, note=body.note)
    elif body.kept_left_s is not None:
        record_kept(deps, signed.pod_id, now, body.kept_left_s)
    elif body.kind in SYNCED_ENDS:  # KEEP_ALIVE=1: synced, not ending: nothing is kept for its results
        clear_kept(deps, signed.pod_id)
    pod = deps.store.get_pod(signed.pod_id)
    if pod is None:
        raise HttpError(401, BAD_POD)
    if not admit_event(deps, pod, body.kind, now):
        return ok(api.Ack())  # recorded and counted; its push is told with the hour's others
    announce(
        deps,
        now,
        event_title(pod, body, now, deps.settings),
        event_text(pod, body),
        pod_id=pod.pod_id,
        kind=body.kind,
        level=_event_level(body),
    )
    return ok(api.Ack())


def _event_level(body: api.PodEvent) -> Level:
    if body.kind in ("sync_failed", "destroy_failed", "verify_failed", "stop_failed"):
        return "error"
    if body.kind in ("idle_warning", "deadline_warning", "kept_stopping", "kept_stopped"):
        return "warning"
    if body.kind == "job_exit" and body.exit_code not in (0, None):
        return "warning"
    return "info"


def _admin_pod(req: Request, deps: Deps) -> StoredPod:
    pod_id = unquote(req.params.get("pod_id", ""))
    pod = deps.store.get_pod(pod_id) if 0 < len(pod_id) <= 128 else None
    if pod is None:
        raise HttpError(404, "unknown pod")
    return pod


def keep(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    pod = _admin_pod(req, deps)
    body = parse(api.KeepRequest, req.body)
    lease(deps, pod, now, body.until)
    return ok(api.Ack())


def deadline(req: Request, deps: Deps, now: float) -> Response:
    """`gpuc extend` / `gpuc keep`: move the deadline, within the user's cap (transitions.set_deadline)."""
    require_admin(req, deps)
    pod = _admin_pod(req, deps)
    return ok(set_deadline(deps, pod, now, parse(api.DeadlineRequest, req.body)))


def end(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    pod = _admin_pod(req, deps)
    body = parse(api.EndRequest, req.body)
    check_time("end_at", body.end_at, now, END_PAST_S, FUTURE_SLACK_S)
    record_end(deps, pod.pod_id, now, end_at=body.end_at, by=body.by, note=body.note)
    return ok(api.Ack())


def notify(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    body = parse(api.NotifyRequest, req.body)
    announce(deps, now, body.title, body.message, kind="client")
    return ok(api.Ack())


def status(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    meta = read_meta(deps.store)
    return ok(
        api.StatusResponse(
            server_time=now,
            reaper_last_run=meta.last_run,
            reaper_period_s=deps.settings.reaper_period_s,
            reaper_blind=list(meta.blind),
            reaper_blind_since=[
                api.BlindProvider(provider=name, since=since, why=meta.blind_why.get(name, ""))
                for name, since in sorted(meta.blind_since.items())
            ],
            channels=held_channels(deps.notifier),
            pods=[p.to_record() for p in deps.store.list_pods()],
            notifications=deps.store.recent_notifications(NOTIFICATIONS_IN_STATUS),
            new_pods_paused=verbs.paused_text(deps),
            watchdog_id=deps.watchdog_id,
            protocol=api.WIRE_PROTOCOL,
            vast_hook_last=_hook_seen(deps),
            results_grant=said_scope(deps.settings),
        )
    )


def _hook_seen(deps: Deps) -> api.VastHookSeen | None:
    seen = last_delivery(deps)
    return api.VastHookSeen(notif_type=seen[0], at=seen[1]) if seen is not None else None


def resume(req: Request, deps: Deps, now: float) -> Response:
    """`gpuc watchdog resume`: new pods may start again after "pause new pods" from the phone."""
    require_admin(req, deps)
    return ok(api.ResumeAnswer(resumed=verbs.resume(deps, now)))


def reap(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    body = parse(api.ReapRequest, req.body) if req.body else api.ReapRequest()
    return ok(reap_once(deps, now, dry_run=body.dry_run))


_POD_ID = r"(?P<pod_id>[^/]{1,384})"
_RUN_ID = r"(?P<run_id>[^/]{1,128})"
_TOKEN = r"(?P<token>[^/]{1,200})"  # a link's own checks say what is wrong with it (links.read)
ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    ("POST", re.compile(r"/v1/pods"), register),
    ("POST", re.compile(r"/v1/heartbeat"), heartbeat),
    ("POST", re.compile(r"/v1/events"), event),
    ("POST", re.compile(r"/v1/grant"), grant),
    ("POST", re.compile(r"/v1/grant/list"), grant_list),
    ("POST", re.compile(r"/v1/grant/upload"), grant_upload),
    ("POST", re.compile(rf"/v1/pods/{_POD_ID}/keep"), keep),
    ("POST", re.compile(rf"/v1/pods/{_POD_ID}/end"), end),
    ("POST", re.compile(rf"/v1/pods/{_POD_ID}/deadline"), deadline),
    ("POST", re.compile(r"/v1/notify"), notify),
    ("GET", re.compile(r"/v1/status"), status),
    ("POST", re.compile(r"/v1/reap"), reap),
    ("POST", re.compile(r"/v1/resume"), resume),
    ("POST", re.compile(r"/v1/boot"), boot),
    ("GET", re.compile(rf"/v1/runs/{_RUN_ID}"), run_status),
    ("POST", re.compile(rf"/v1/runs/{_RUN_ID}/stop"), run_stop),
    ("POST", re.compile(r"/v1/hooks/vast"), vast_hook),
    ("GET", re.compile(rf"/a/{_TOKEN}"), action_page),
    ("POST", re.compile(rf"/a/{_TOKEN}"), action_post),
    ("POST", re.compile(r"/telegram"), telegram.webhook),
    ("POST", re.compile(r"/slack/actions"), slack.actions),
    ("POST", re.compile(r"/v1/page-link"), page_link),
    ("GET", re.compile(r"/p/(?P<token>[^/]{1,64})"), status_page),
)


def route(method: str, path: str) -> tuple[Handler, dict[str, str]]:
    allowed = False
    for verb, pattern, handler in ROUTES:
        match = pattern.fullmatch(path.rstrip("/") or "/")
        if match is None:
            continue
        if verb == method.upper():
            return handler, match.groupdict()
        allowed = True
    if allowed:
        raise HttpError(405, "method not allowed")
    raise HttpError(404, "no such route")


def dispatch(req: Request, deps: Deps, now: float) -> Response:
    try:
        if len(req.body) > api.MAX_BODY_BYTES:
            raise HttpError(413, f"body larger than {api.MAX_BODY_BYTES} bytes")
        handler, params = route(req.method, req.path.split("?", 1)[0])
        return handler(replace(req, params=params), deps, now)
    except HttpError as exc:
        return Response(exc.status, {"error": exc.message, **exc.extra})
    except Exception as exc:
        # A bug or a broken store, never bad input (that is all caught above): say so without details.
        log.error(
            "%s %s failed: %s",
            req.method,
            path_for_log(req.path),
            redact(f"{type(exc).__name__}: {exc}", deps.secrets()),
        )
        return Response(500, {"error": "internal error"})
