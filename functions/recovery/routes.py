"""The routes of recovering runs (core/api.py): a register that carries `recovery`, a re-rented pod's boot,
and the laptop's look at and stop of a run.

POST /v1/boot is the one route a pod calls before it holds any token: its one-time boot ticket is the proof.
The ticket is compared in constant time with the one saved for exactly this pod (or, before it is saved, the
one derived for the attempt the run's claim is renting: runs.boot_verdict), and spent by compare-and-set (of
two boots racing, one gets the kit); a bad, spent or unknown ticket is 403 ("never": onstart gives up) with one
stable message that does not say which, and writes nothing. The right ticket for a pod the pass renting it has
not registered yet (a pass cut between its create and its register, or still inside it) is 409 ("later":
onstart asks again; the next pass registers it or destroys it). The answer holds the kit's secrets and the
pod's token: nothing here logs it, and RunRecovery never carries it.
"""

from __future__ import annotations

from urllib.parse import unquote

from gpuc.core import api
from gpuc.functions.app import Deps
from gpuc.functions.claims import claim_for, run_of, token_for
from gpuc.functions.deadline import deadline_of
from gpuc.functions.edge import HttpError, Request, Response, ok, parse, require_admin
from gpuc.functions.recovery import runs
from gpuc.functions.recovery.runs import StoredRun
from gpuc.functions.store import FINISHED_STATES

BAD_TICKET = "bad or spent boot ticket"
NOT_YET = "this pod is not registered yet: the watchdog registers it at its next pass; ask again"
RECOVER_PROVIDERS = ("vast",)  # RunPod has no interruptible API any more (runpodctl PR #267)


def check_recovery(body: api.RegisterRequest, deps: Deps) -> None:
    """Refused before anything is stored: what recovery cannot do right."""
    rec = body.recovery
    if rec is None:
        return
    if body.provider not in RECOVER_PROVIDERS:
        raise HttpError(400, f"recovery is for interruptible Vast pods only, not {body.provider}")
    if not body.interruptible:
        raise HttpError(400, "recovery is for interruptible pods: register with interruptible=true")
    spec = rec.spec
    if spec.run_id != run_of(body.name) or spec.provider != body.provider or spec.experiment != body.experiment:
        raise HttpError(400, "recovery.spec does not match the pod registered (run id, provider, experiment)")
    if len(spec.run_id) > runs.MAX_RECOVER_RUN_ID:
        raise HttpError(400, f"a recovering run's id is at most {runs.MAX_RECOVER_RUN_ID} characters")
    if deps.watchdog_key is None:
        raise HttpError(400, "recovery needs this watchdog's own key (redeploy it with a current gpuc)")
    if body.started_at is None or body.price_per_hour is None:
        raise HttpError(400, "recovery needs the pod's started_at and price_per_hour")
    loaded = runs.load(deps.store, spec.run_id)
    if loaded is not None and loaded[0].attempts[0].pod_id != body.pod_id:
        raise HttpError(409, "this run is already recovering with another pod: a new run needs a new run id")
    live = runs.live_ids(deps.store)
    if spec.run_id not in live and len(live) >= runs.MAX_LIVE_RUNS:
        raise HttpError(429, f"this watchdog already recovers {runs.MAX_LIVE_RUNS} runs: end some first")


def store_recovery(body: api.RegisterRequest, deps: Deps) -> None:
    """The run's record and its place in the index, once: a retried register changes neither."""
    rec = body.recovery
    if rec is None or body.started_at is None or body.price_per_hour is None:
        return
    first = runs.first_run(
        rec, body.experiment, body.provider, body.pod_id, body.started_at, body.price_per_hour, body.interruptible
    )
    if not runs.create(deps.store, first):
        loaded = runs.load(deps.store, rec.spec.run_id)
        if loaded is None or loaded[0].attempts[0].pod_id != body.pod_id:
            raise HttpError(409, "this run is already recovering with another pod: a new run needs a new run id")
    if not runs.index_add(deps.store, rec.spec.run_id):
        raise HttpError(429, f"this watchdog already recovers {runs.MAX_LIVE_RUNS} runs: end some first")


def boot(req: Request, deps: Deps, now: float) -> Response:
    body = parse(api.BootRequest, req.body)
    pod = deps.store.get_pod(body.pod_id)
    key = deps.watchdog_key.get_secret_value() if deps.watchdog_key is not None else None
    if key is None or (pod is not None and pod.state in FINISHED_STATES):  # an ended pod boots nothing
        raise HttpError(403, BAD_TICKET)
    run_id = pod.run_id if pod is not None and pod.run_id else runs.run_of_ticket(body.ticket)
    loaded = runs.load(deps.store, run_id) if run_id else None
    verdict = runs.boot_verdict(loaded[0], pod, body.pod_id, body.ticket, key) if loaded is not None else "never"
    if verdict == "later":
        raise HttpError(409, NOT_YET)
    if verdict != "ok" or pod is None or run_id is None:
        raise HttpError(403, BAD_TICKET)

    def spend(r: StoredRun) -> StoredRun | None:
        if runs.boot_verdict(r, pod, body.pod_id, body.ticket, key) != "ok":
            return None  # spent meanwhile: of two boots racing, one gets the kit
        r.tickets[body.pod_id] = runs.Ticket(sha256=runs.ticket_hash(body.ticket), spent_at=now)
        return r

    spent = runs.update(deps.store, run_id, spend)
    if spent is None:
        raise HttpError(403, BAD_TICKET)
    run = spent[0]
    deadline = deadline_of(pod, deps.settings)
    config = runs.kit_for_pod(run, pod.pod_id, pod.price_per_hour or 0.0, pod.gpu, deadline)
    token = token_for(deps, pod.provider, pod.pod_id, pod.name)
    if token is None:
        raise HttpError(403, BAD_TICKET)
    return ok(
        api.BootAnswer(
            kit=run.request.kit.model_copy(update={"config": config}),
            token=token,
            claim=claim_for(deps, pod, deadline, now),
            resume_from=run.request.results_at,
        )
    )


def _admin_run(req: Request, deps: Deps) -> tuple[StoredRun, int]:
    run_id = unquote(req.params.get("run_id", ""))
    loaded = runs.load(deps.store, run_id) if 0 < len(run_id) <= 64 else None
    if loaded is None:
        raise HttpError(404, "unknown run")
    return loaded


def run_status(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    run, _ = _admin_run(req, deps)
    return ok(runs.recovery_view(run, deps.store, now))


def run_stop(req: Request, deps: Deps, now: float) -> Response:
    """Stop recovering: the next pass stops (a paused instance destroyed, the user told why); a re-rent a pass
    is inside sees the stop at its next step and destroys what it rented (GET /v1/runs/{id} says it, `busy`)."""
    require_admin(req, deps)
    run, _ = _admin_run(req, deps)
    if run.done:
        return ok(api.Ack())
    ask_stop(deps, run.run_id)
    return ok(api.Ack())


def ask_stop(deps: Deps, run_id: str) -> bool:
    def asked(r: StoredRun) -> StoredRun | None:
        if r.done or r.stop_asked:
            return None
        r.stop_asked = True
        return r

    stopped = runs.update(deps.store, run_id, asked) is not None
    if stopped and deps.wake is not None:
        deps.wake()  # the local server: a pass now destroys a paused instance (never inside this answer)
    return stopped
