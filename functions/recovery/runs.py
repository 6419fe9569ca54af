"""Recovering runs in the watchdog's store (`up --interruptible --recover N`): one meta record per run, and
an index of the live ones the reaper walks each pass.

Built on the store's meta records and their version (compare-and-set), so the SQLite store of `gpuc watchdog
serve` and DynamoDB on AWS behave alike with no table of their own. Every write is a CAS: two reaper passes
at once (a scheduled event delivered twice), a boot and a pass, a stop tap and a pass never overwrite each
other; the loser re-reads and re-applies, or gives up when what it read no longer holds.

The record holds the run's BootKit, secrets included (the user's allowlisted ones, as the first pod got them):
it never leaves the watchdog except to a re-rented pod that presents its one-time boot ticket, of which only
the sha256 is kept, and only while the run lives: whatever ends the run (`end`) drops the kit's secrets and
the capabilities in its URLs in the same write. Nothing here logs a ticket, a token or the kit.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field

from gpuc.core.api import AttemptRecord, RecoveryRequest, RunRecovery
from gpuc.core.budget import Envelope, run_spent
from gpuc.core.models import Strict
from gpuc.core.pod import RUN_ID_RE
from gpuc.functions.recovery.decide import RecoveryPlan
from gpuc.functions.store import FINISHED_STATES, Store, StoredPod

RUN_META = "run:"  # + run id: the run's record
INDEX_META = "runs:live"  # {"ids": [...]}: the runs a reaper pass looks at
MAX_LIVE_RUNS = 200  # one meta record lists them: a bound on its size, far above one user's runs
CAS_TRIES = 5
# A run id plus an attempt's suffix ("-a21") must still be a run id (core.pod.RUN_ID_RE, 41 characters)
MAX_RECOVER_RUN_ID = 37


class Ticket(Strict):
    sha256: str
    spent_at: float | None = None


Step = Literal["claimed", "destroyed", "renting", "rented", "registered"]


class Acting(Strict):
    """A pass's claim on the run while it destroys and re-rents (or stops): written by CAS before the first
    provider call, so a second pass never acts at the same time; a pass that died inside it leaves it to
    the next pass once `until` has passed (every step it takes is safe to repeat).

    `step` is written by CAS before and after each provider call (and `until` renewed with it): the stop is
    read again at each write, and a pass cut anywhere leaves what it was doing. `renting` is the INTENT,
    written before the create: the attempt's pod is named for it (attempt_run_id), so the next pass finds
    the instance by name whether or not the create went through; `rented` names the instance."""

    action: str  # "rerent" | "stop"
    since: float
    until: float
    why: str
    offer_id: str | None = None
    price_per_hour: float | None = None
    interruptible: bool = True
    min_bid: float | None = None  # the offer's floor when it was chosen (re-checked before the create)
    step: Step = "claimed"
    attempt: int | None = None  # the attempt being rented (from `renting` on)
    pod_id: str | None = None  # the instance its create made (from `rented` on)
    rented_at: float | None = None  # when that create answered: the attempt bills from here


class StoredRun(Strict):
    request: RecoveryRequest
    experiment: str
    provider: str
    attempts: list[AttemptRecord]
    paused_since: float | None = None
    stop_asked: bool = False
    done: bool = False
    stopped_why: str | None = None
    told: list[str] = Field(default_factory=list)
    tickets: dict[str, Ticket] = Field(default_factory=dict)  # pod id -> its boot ticket's sha256
    acting: Acting | None = None

    @property
    def run_id(self) -> str:
        return self.request.spec.run_id

    @property
    def envelope(self) -> Envelope:
        r = self.request
        return Envelope(r.first_start, r.max_hours, r.envelope_usd)

    @property
    def plan(self) -> RecoveryPlan:
        """What the pure rules (functions/recovery/decide.py) read of the request."""
        r = self.request
        return RecoveryPlan(r.recover, self.envelope, r.price_cap, r.disk_per_hour, r.on_demand_last)

    @property
    def latest(self) -> AttemptRecord:
        return self.attempts[-1]


def run_key(run_id: str) -> str:
    return RUN_META + run_id


def end(run: StoredRun) -> StoredRun:
    """The run is done (whatever ended it): never re-rented again, and what only a next pod needed goes in the
    same write: the kit's secrets (the allowlisted ones `up` chose: HF_TOKEN, what GPUC_POD_SECRETS names) and
    the query of its URLs (a presigned GET is a capability until it expires). The record is kept for the
    ledger and `gpuc ls` (the attempts and their cost), without a secret a store leak could give away."""
    kit = run.request.kit
    bare = kit.model_copy(
        update={
            "secrets": {},
            "wheel_url": _no_query(kit.wheel_url),
            "project_url": _no_query(kit.project_url) if kit.project_url else kit.project_url,
        }
    )
    run.request = run.request.model_copy(update={"kit": bare})
    run.done, run.acting, run.paused_since = True, None, None
    return run


def _no_query(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")) or url


MAX_RUN_HOURS = 24 * 14  # RecoveryRequest.max_hours's bound
MAX_ENVELOPE_USD = 1_000_000.0  # RecoveryRequest.envelope_usd's bound


def move_envelope(store: Store, run_id: str, deadline_at: float) -> StoredRun | None:
    """A recovering run's pod had its deadline moved (`gpuc extend`, `gpuc keep`, the phone's extend): the run's
    deadline moves with it, and its money cap by the same hours at the run's own rate (GPU cap + disk). Else
    the next attempt after an outbid would be rented to the old deadline, and a re-rent refused as over a cap
    the user raised. The run written, or None (no such run, done, or nothing to move)."""

    def change(run: StoredRun) -> StoredRun | None:
        request = run.request
        hours = min(MAX_RUN_HOURS, (deadline_at - request.first_start) / 3600)
        if run.done or hours <= 0 or abs(hours - request.max_hours) < 1e-9:
            return None
        usd = min(MAX_ENVELOPE_USD, request.envelope_usd * hours / request.max_hours)
        run.request = request.model_copy(update={"max_hours": hours, "envelope_usd": usd})
        return run

    moved = update(store, run_id, change)
    return None if moved is None else moved[0]


def holds_secrets(run: StoredRun) -> bool:
    kit = run.request.kit
    return bool(kit.secrets) or "?" in kit.wheel_url or "?" in (kit.project_url or "")


def attempt_run_id(run_id: str, attempt: int) -> str:
    """The run id an attempt's pod is NAMED after (1: the run's own). Each attempt has a name of its own:
    the previous attempt is still listed for a while after its destroy, and a create that looks its pod up
    by name (core/providers create_named) must never take that one for the new one."""
    return run_id if attempt <= 1 else f"{run_id}-a{attempt}"


def spent_usd(run: StoredRun, now: float) -> float:
    return run_spent(run.attempts, now)


def load(store: Store, run_id: str) -> tuple[StoredRun, int] | None:
    meta = store.get_meta(run_key(run_id))
    if meta is None:
        return None
    return StoredRun.model_validate(meta.value), meta.version


def create(store: Store, run: StoredRun) -> bool:
    """Only if absent: a retried register never duplicates (nor replaces) the run."""
    return store.put_meta(run_key(run.run_id), run.model_dump(mode="json"), None)


def save(store: Store, run: StoredRun, version: int) -> bool:
    return store.put_meta(run_key(run.run_id), run.model_dump(mode="json"), version)


def update(store: Store, run_id: str, change: Callable[[StoredRun], StoredRun | None]) -> tuple[StoredRun, int] | None:
    """Read, change, CAS, again on a lost race. `change` returns None when what it read no longer allows
    the change (then nothing is written). Returns what was written, or None."""
    for _ in range(CAS_TRIES):
        loaded = load(store, run_id)
        if loaded is None:
            return None
        run, version = loaded
        changed = change(run.model_copy(deep=True))
        if changed is None:
            return None
        if save(store, changed, version):
            return changed, version + 1
    return None


def live_ids(store: Store) -> list[str]:
    meta = store.get_meta(INDEX_META)
    ids = [] if meta is None else meta.value.get("ids", [])
    return [str(i) for i in ids] if isinstance(ids, list) else []


def _edit_index(store: Store, edit: Callable[[list[str]], list[str] | None]) -> bool:
    for _ in range(CAS_TRIES):
        meta = store.get_meta(INDEX_META)
        ids = live_ids(store) if meta is not None else []
        new = edit(list(ids))
        if new is None:
            return True  # nothing to write
        if store.put_meta(INDEX_META, {"ids": new}, None if meta is None else meta.version):
            return True
    return False


def index_add(store: Store, run_id: str) -> bool:
    """False when the index is full (MAX_LIVE_RUNS) or could not be written."""
    full = False

    def add(ids: list[str]) -> list[str] | None:
        nonlocal full
        if run_id in ids:
            return None
        if len(ids) >= MAX_LIVE_RUNS:
            full = True
            return None
        return [*ids, run_id]

    return _edit_index(store, add) and not full


def index_remove(store: Store, run_id: str) -> None:
    _edit_index(store, lambda ids: [i for i in ids if i != run_id] if run_id in ids else None)


def live_run_ids(store: Store) -> frozenset[str]:
    """The runs recovery still owns (not done): their paused pods are recovery's, not the paused-pod rule's."""
    owned = set()
    for run_id in live_ids(store):
        loaded = load(store, run_id)
        if loaded is not None and not loaded[0].done:
            owned.add(run_id)
    return frozenset(owned)


# -- boot tickets ----------------------------------------------------------------------------------------


TICKET_MAX = 64  # core/api.py BOOT_TICKET_RE
BootVerdict = Literal["ok", "later", "never"]


def boot_ticket(watchdog_key: str, run_id: str, attempt: int, since: float) -> str:
    """An attempt's one-time boot ticket, derived from the watchdog's key and the claim that rents it: a pass
    that takes over a claim whose pass died after its create derives the same ticket the pod's env carries,
    and nobody without the key can. Only its sha256 is stored; it goes into the new pod's env, nowhere else.

    `<run id>_<mac>`: the run id (no `_` in one: core.pod.RUN_ID_RE) lets /v1/boot find the run of a pod the
    store does not know yet (a pass cut between its create and its register), to answer "later" rather than
    "never". The mac fills the ticket to 64 characters, at least 26 of them (156 bits)."""
    message = f"gpuc-boot-v1:{run_id}:{attempt}:{since!r}".encode()
    digest = hmac.new(watchdog_key.encode(), message, hashlib.sha256).digest()
    mac = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    return f"{run_id}_{mac[: TICKET_MAX - 1 - len(run_id)]}"


def run_of_ticket(ticket: str) -> str | None:
    run_id, sep, _ = ticket.partition("_")
    return run_id if sep and RUN_ID_RE.match(run_id) else None


def ticket_hash(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def ticket_matches(stored: Ticket | None, presented: str) -> bool:
    if stored is None or stored.spent_at is not None:
        return False
    return hmac.compare_digest(stored.sha256, ticket_hash(presented))


def boot_verdict(run: StoredRun, pod: StoredPod | None, pod_id: str, ticket: str, watchdog_key: str) -> BootVerdict:
    """Whether `pod_id` may trade `ticket` for the run's kit now ("ok"), not yet ("later": the pass renting it
    has not registered it, or was cut before it could; onstart tries again), or never.

    The ticket is valid once saved for this pod (tickets), or, before that, once the pass renting the attempt
    has registered the pod it made: the ticket then is the one derived for the attempt the run's claim is
    renting, and the pod the one the claim names, registered under this run and attempt."""
    if run.done or (pod is not None and pod.state in FINISHED_STATES):
        return "never"
    if pod_id in run.tickets:
        return "ok" if ticket_matches(run.tickets[pod_id], ticket) else "never"
    acting = run.acting
    if acting is None or acting.action != "rerent" or acting.attempt is None or run.stop_asked:
        return "never"  # nothing is being rented for this run (or a stop will destroy what is)
    want = boot_ticket(watchdog_key, run.run_id, acting.attempt, acting.since)
    if not hmac.compare_digest(want, ticket):
        return "never"
    mine = acting.pod_id == pod_id and pod is not None and (pod.run_id, pod.attempt) == (run.run_id, acting.attempt)
    return "ok" if mine and acting.step == "registered" else "later"


# -- what the laptop and the phone see ------------------------------------------------------------------


def with_pod_ends(run: StoredRun, store: Store) -> StoredRun:
    """The run with each open attempt's end taken from its pod's record: the run is not told when a pod ends on its
    own (its job's end, `gpuc down`, the reaper; the pod a stopped recovery leaves running), its pod's record is.
    Without it a done run's last attempt stays open: costed to "now" at every read, and the laptop's row had no
    end of the run to close at."""
    attempts = []
    for a in run.attempts:
        rec = store.get_pod(a.pod_id) if a.end is None else None
        if rec is not None and rec.end_at is not None:
            a = a.model_copy(update={"end": max(a.start, rec.end_at)})
        attempts.append(a)
    return run.model_copy(update={"attempts": attempts})


def recovery_view(run: StoredRun, store: Store, now: float) -> RunRecovery:
    """The run as the laptop and the phone read it (GET /v1/runs/{id}: `gpuc ls`, `gpuc ledger`, `gpuc down`), the
    ONE place a RunRecovery is made: each attempt's end taken from its pod's record (with_pod_ends) and its cost
    as of `now`. Never the kit, its secrets or a ticket."""
    run = with_pod_ends(run, store)
    attempts = [a.model_copy(update={"cost_usd": round(a.cost(now), 6)}) for a in run.attempts]
    return RunRecovery(
        busy=busy_with(run),
        run_id=run.run_id,
        experiment=run.experiment,
        provider=run.provider,
        recover=run.request.recover,
        attempts=attempts,
        envelope_usd=run.request.envelope_usd,
        deadline_at=run.envelope.deadline,
        spent_usd=round(spent_usd(run, now), 6),
        as_of=now,
        done=run.done,
        stop_asked=run.stop_asked,
        stopped_why=run.stopped_why,
        results_at=run.request.results_at,
    )


def busy_with(run: StoredRun) -> str | None:
    """What a pass is doing to the run right now, in words (None: nothing): `gpuc down` and the phone's stop
    say it rather than claim that nothing bills."""
    acting = run.acting
    if acting is None:
        return None
    if acting.action == "stop" or acting.attempt is None:
        return f"destroying the paused instance {run.latest.pod_id}"
    pod = f" (pod {acting.pod_id})" if acting.pod_id else ""
    if run.stop_asked:
        return f"destroying attempt {acting.attempt}{pod}, rented as you asked to stop"
    return f"renting attempt {acting.attempt}{pod}"


def first_run(
    request: RecoveryRequest,
    experiment: str,
    provider: str,
    pod_id: str,
    start: float,
    price: float,
    interruptible: bool,
) -> StoredRun:
    first = AttemptRecord(
        pod_id=pod_id,
        start=start,
        price_per_hour=price,
        disk_per_hour=request.disk_per_hour,
        interruptible=interruptible,
    )
    return StoredRun(request=request, experiment=experiment, provider=provider, attempts=[first])


def kit_for_pod(run: StoredRun, pod_id: str, price: float, gpu: str | None, deadline_at: float) -> dict[str, Any]:
    """The kit's config for this pod; the rest is the first pod's (the same run id: the same destination)."""
    config = dict(run.request.kit.config)
    config.update(pod_id=pod_id, price_per_hour=price, gpu_expected=gpu, deadline_at=deadline_at)
    config.update(gpu_count=run.request.spec.gpu_count)  # verified on the new pod: the run's GPUs, every one
    return config
