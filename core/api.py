"""The watchdog's HTTP contract, shared by the client, the pod and the server.

Routes (the local server and the Lambda Function URL serve the same ones):

    POST /v1/pods                 admin   RegisterRequest           -> Ack
    POST /v1/heartbeat            pod     HeartbeatBody (signed)    -> HeartbeatAnswer
    POST /v1/events               pod     PodEvent (signed)         -> Ack
    POST /v1/pods/{id}/keep       admin   KeepRequest               -> Ack
    POST /v1/pods/{id}/end        admin   EndRequest                -> Ack
    POST /v1/pods/{id}/deadline   admin   DeadlineRequest           -> DeadlineAnswer
    POST /v1/notify               admin   NotifyRequest             -> Ack
    GET  /v1/status               admin                             -> StatusResponse
    POST /v1/reap                 admin   ReapRequest               -> ReapReport
    POST /v1/resume               admin                             -> Ack  (new pods paused from the phone)
    POST /v1/boot                 ticket  BootRequest               -> BootAnswer (a re-rented pod, once; 409: later)
    POST /v1/grant                pod     GrantRequest (signed)     -> GrantAnswer (its run's own objects)
    POST /v1/grant/list           pod     ListRequest (signed)      -> ListAnswer (its run's own objects)
    POST /v1/grant/upload         pod     UploadRequest (signed)    -> UploadAnswer (a large file, in parts)
    GET  /v1/runs/{run_id}        admin                             -> RunRecovery
    POST /v1/runs/{run_id}/stop   admin                             -> Ack  (stop recovering)
    POST /v1/hooks/vast           Vast    Vast's signed webhook     -> {"ok": true} (a hint: wakes the reaper)
    GET  /a/{link}                link                              -> HTML confirmation page (never acts)
    POST /a/{link}                link    form (confirm=yes)        -> HTML result page (acts once)

Admin requests carry `Authorization: Bearer <admin token>`. Pod requests carry the four
X-Gpuc-* headers below; the signature covers `timestamp.seq.body` (see core.signing).
Errors: 4xx with `{"error": "<stable message>"}`; never 5xx for bad input.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from gpuc.core.gpubounds import reading_problem
from gpuc.core.grantapi import GrantScope
from gpuc.core.models import GpuReading, PodSpec, Strict
from gpuc.core.pod import PodStatus
from gpuc.core.signing import H_CLAIM as H_CLAIM
from gpuc.core.signing import H_POD as H_POD
from gpuc.core.signing import H_SEQ as H_SEQ
from gpuc.core.signing import H_SIGNATURE as H_SIGNATURE
from gpuc.core.signing import H_TIMESTAMP as H_TIMESTAMP

MAX_BODY_BYTES = 16 * 1024
SIGNATURE_WINDOW_S = 300
# Every number that crosses the edge is range-checked: a signed `end_at = 1e300` once broke every
# `gpuc ls`, and DynamoDB refuses what SQLite stores (numbers past 1e125, ints past 2^63), so an
# unchecked value would make the two stores disagree.
EPOCH_MIN = 1_577_836_800.0  # 2020-01-01
EPOCH_MAX = 4_102_444_800.0  # 2100-01-01
SEQ_MAX = 2**63 - 1  # SQLite's INTEGER; a seq header past it is a 400, never an overflow
MAX_LIMIT_S = 366 * 24 * 3600.0

Epoch = Annotated[float, Field(ge=EPOCH_MIN, le=EPOCH_MAX)]
Seconds = Annotated[float, Field(ge=0, le=MAX_LIMIT_S)]
Count = Annotated[int, Field(ge=0, le=1_000_000)]

# The version of what a pod sends (HeartbeatBody, PodEvent, their headers and claims), as the watchdog
# declares it in its status. Pod requests are Strict: a watchdog from an older gpuc answers 4xx to a field
# it does not know, the pod then counts as silent and is destroyed with its job. `up` rents only when the
# watchdog says at least this (client/pods/plan.py check_protocol). Raise it with every change to what a pod
# sends; tests/functions/test_wire_protocol.py holds the schema this number stands for.
# 3: a re-rented pod's BootRequest (POST /v1/boot), for a run recovering after an outbid.
# 4: a pod holds no S3 key: it asks for grants on its own run's prefix (GrantRequest, ListRequest, UploadRequest).
#    and a warm pod's registration (RegisterRequest.warm_s): an older watchdog would refuse `up`'s register
#    after the create (a pod rented, then destroyed).
WIRE_PROTOCOL = 4
# The least protocol a watchdog must declare for `up --recover` (client/pods/recovery/prepare.py
# check_recovery_protocol):
# one that keeps a run's RecoveryRequest, answers /v1/boot, /v1/runs/{id} and .../stop. An older one would
# take the registration's `recovery` as an unknown field (4xx) or, worse, never re-rent. Its own constant, so
# raising WIRE_PROTOCOL for another reason never lets an older watchdog pass this check.
RECOVERY_PROTOCOL = 3

# H_POD, H_TIMESTAMP, H_SEQ, H_SIGNATURE and H_CLAIM (the pod's claim, core.signing.mint_claim, sent with every
# signed request: a watchdog whose store does not know the pod re-creates its record from it, functions.claims)
# are core.signing's, which the pod imports without pydantic; imported above.

PodId = str
# The run's results prefix rides in the pod's claim (functions/claims.py), which a header carries: bounded.
RESULTS_AT_MAX = 300
EventKind = Literal[
    "agent_start",
    "job_exit",
    "idle_warning",
    "idle_destroy",
    "sync_failed",
    "sync_ok",
    "destroying",
    "destroy_failed",
    "verify_failed",
    "info",
    "deadline_warning",
    "deadline_destroy",
    # kept for its results (F16): stopping soon, stopped (GPU billing ended, disk kept), could not stop
    "kept_stopping",
    "kept_stopped",
    "stop_failed",
    "phone_destroy",  # the user's "destroy now" from the phone, ended as the pod's own end
]


class Policy(Strict):
    """Per-pod overrides of the reaper's limits (seconds). None = the server's default."""

    silence_limit_s: float | None = Field(None, gt=0, le=MAX_LIMIT_S)
    stopped_limit_s: float | None = Field(None, gt=0, le=MAX_LIMIT_S)
    paused_limit_s: float | None = Field(None, gt=0, le=MAX_LIMIT_S)


class RegisterRequest(Strict):
    pod_id: str = Field(min_length=1, max_length=128)
    provider: str = Field(min_length=1, max_length=32)
    name: str = Field(min_length=1, max_length=128)
    experiment: str = Field(min_length=1, max_length=64)
    # The pod's derived HMAC key (core.signing.derive_key), for a pod that made its own token (a pod carried
    # from another watchdog, an older gpuc). None: the watchdog derives the pod's token from its own key and
    # the pod's identity, and answers it with the pod's claim (RegisterAnswer): the pod then carries its proof.
    key: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    gpu: str | None = Field(None, max_length=64)
    price_per_hour: float | None = Field(None, ge=0, le=1000)
    started_at: Epoch | None = None
    interruptible: bool = False
    policy: Policy = Field(default_factory=lambda: Policy.model_validate({}))
    # Carried over from another watchdog by `gpuc watchdog deploy`: its heartbeats still go to the old
    # URL, so its silence here is no evidence until it pings here once.
    carried: bool = False
    # The pod's deadline (`up --max-hours`): gpuc ends the pod then, whatever its pings and GPU say. No
    # provider field is counted on for this (RunPod never enforced terminateAfter: runpodctl #330).
    deadline_at: Epoch | None = None
    # `up --interruptible --recover N`: the watchdog re-rents this run after an outbid (functions/
    # recovery/) inside the run's one envelope, and boots the new pod with no laptop from `recovery.kit`.
    recovery: RecoveryRequest | None = None
    # The run's own results prefix at an s3:// destination, `s3://bucket/<prefix>/<experiment>/<run_id>`: the
    # only objects this pod's grants reach (POST /v1/grant). The watchdog refuses one outside the bucket it
    # holds a key for, or not ending in this pod's experiment and run id. None: no s3:// destination.
    results_at: str | None = Field(None, min_length=6, max_length=RESULTS_AT_MAX)
    # `up --warm`: the pod outlives its jobs and ends itself after this long with no job; the watchdog says so
    # (the status page, the phone) rather than the idle times of a pod that ends with its job.
    warm_s: Seconds | None = None


HEX64 = r"^[0-9a-f]{64}$"
BOOT_TICKET_RE = r"^[A-Za-z0-9_-]{32,64}$"
URL_MAX = 4096  # a presigned S3 URL with a session token runs past 2 KB


class BootKit(Strict):
    """What a re-rented pod needs to start with no laptop, as `up` left it for the run. The watchdog keeps it
    (secrets included: the same allowlisted ones the first pod got, core/podsecrets.py, never the bucket's key:
    each attempt is granted its run's prefix, functions/grants.py) until the run ends,
    and hands it to a new pod once, for its boot ticket (BootRequest). The files themselves are at the run's
    results destination, fetched by URL (file:// or a presigned https GET), checked by their sha256."""

    wheel_url: str = Field(min_length=1, max_length=URL_MAX)  # gpuc's pod wheel, as `up` built it
    wheel_name: str = Field(pattern=r"^gpuc-[A-Za-z0-9.+_-]+-py3-none-any\.whl$")
    wheel_sha256: str = Field(pattern=HEX64)
    project_url: str | None = Field(None, max_length=URL_MAX)  # the project tar `up` uploaded (None: none)
    project_sha256: str | None = Field(None, pattern=HEX64)
    # How the bundle is installed: "offline", unpacked into <code>/site with no network and run by
    # `offline_python` or, when None, by the image's own python3 >= 3.9 (core/podinstall.py). "venv" (pip from the
    # package index) is an older gpuc's, still read from the kit of a run it started.
    installer: Literal["venv", "offline"] = "offline"
    offline_python: str | None = Field(None, max_length=1024)
    config: dict[str, Any]  # the first pod's PodConfig JSON; pod_id, price, gpu and deadline set per pod
    secrets: dict[str, str] = Field(default_factory=dict, max_length=32)
    bootstrap: dict[str, Any] | None = None  # bootstrap.json (client/onpod/provision.py bootstrap_plan)
    command: list[str] | None = Field(None, max_length=256)  # the job, run under the wrapper
    job_id: str | None = Field(None, max_length=64)


class RecoveryRequest(Strict):
    """The run's recovery plan and its one envelope, fixed at `up` (functions/recovery/decide.py reads it)."""

    recover: int = Field(ge=1, le=20)  # recoveries allowed after the first attempt
    on_demand_last: bool = False  # --recover-on-demand: the last recovery rents on-demand if the envelope holds
    price_cap: float = Field(gt=0, le=1000)  # per hour for the whole pod: no re-rent above it (the first bid)
    disk_per_hour: float = Field(ge=0, le=100)
    envelope_usd: float = Field(gt=0, le=1_000_000)  # the run's money cap across attempts
    first_start: Epoch  # the run's wall clock starts here; the deadline is first_start + max_hours
    max_hours: float = Field(gt=0, le=24 * 14)
    spec: PodSpec  # the first attempt's: image, disk, GPU and non-secret env every attempt keeps
    results_at: str = Field(min_length=1, max_length=URL_MAX)  # the run's push destination (GPUC_RESUME_FROM)
    kit: BootKit


class BootRequest(Strict):
    """A re-rented pod's first call (its onstart, core/bootkit.py): the ticket the watchdog put in its env.
    Spent on first use: Vast echoes a pod's env in every listing, so the ticket is worth nothing after."""

    pod_id: str = Field(min_length=1, max_length=128)
    ticket: str = Field(pattern=BOOT_TICKET_RE)


class BootAnswer(Strict):
    kit: BootKit  # config already set for this pod (pod_id, price, gpu_expected, deadline_at)
    token: str  # the pod's heartbeat token (GPUC_POD_TOKEN), derived for this pod
    claim: str | None = None
    resume_from: str | None = None  # the last push to restore into results/ before the job starts


class AttemptRecord(Strict):
    """One attempt (one instance) of a recovering run: THE attempt, wherever it is read: the watchdog's stored run
    (functions/recovery/runs.py), the rules (functions/recovery/decide.py), the envelope's money
    (core.budget run_spent, attempt_fits), the run's view (RunRecovery) and the ledger's row."""

    pod_id: str
    start: float  # its GPU and its disk bill from here
    price_per_hour: float
    disk_per_hour: float
    interruptible: bool = True
    paused_at: float | None = None  # outbid: GPU no longer billed, the disk still is
    end: float | None = None  # destroyed (confirmed gone): nothing billed after
    cost_usd: float = 0.0  # in a RunRecovery: `cost` as of its `as_of` (0 in the stored run: never read there)

    def cost(self, now: float) -> float:
        """Its cost as of `now`: the GPU from its start until paused or ended, the disk until it is gone."""
        gone = now if self.end is None else min(self.end, now)
        gpu_end = gone if self.paused_at is None else min(self.paused_at, gone)
        gpu_h = max(0.0, gpu_end - self.start) / 3600
        disk_h = max(0.0, gone - self.start) / 3600
        return gpu_h * self.price_per_hour + disk_h * self.disk_per_hour


class RunRecovery(Strict):
    """A recovering run as the watchdog keeps it: `gpuc ledger` writes it as one row (its attempts in the
    note), the phone hears it, `gpuc ls` shows it."""

    run_id: str
    experiment: str
    provider: str
    recover: int
    attempts: list[AttemptRecord]
    envelope_usd: float
    deadline_at: float
    spent_usd: float
    as_of: float
    done: bool = False
    stop_asked: bool = False
    stopped_why: str | None = None  # why recovery stopped (None: still going, or the job ended by itself)
    results_at: str | None = None
    # What a watchdog pass is doing to the run right now (a re-rent, a destroy), in words; None: nothing.
    # `gpuc down` waits for it to clear before it says nothing bills (functions/recovery/runs.py busy_with).
    busy: str | None = None


class HeartbeatBody(Strict):
    pod_id: str = Field(min_length=1, max_length=128)
    seq: int = Field(ge=0, le=SEQ_MAX)
    sent_at: Epoch
    gpus: list[GpuReading] = Field(default_factory=list, max_length=16)
    gpu_error: str | None = Field(None, max_length=500)
    python_procs: Count = 0
    active_ssh: Count = 0
    idle_minutes: float = Field(0, ge=0, le=MAX_LIMIT_S / 60)
    busy_reason: str | None = Field(None, max_length=200)
    job_running: bool = False
    keep_file: bool = False
    kept_left_s: Seconds | None = None  # kept for its results, stopping itself in this long (as PodEvent's)
    # The last verified results push (instance_side/push.py), said so a destroy from outside can say what it
    # costs: how long before this ping (seconds, not a time: the pod's clock may be off), how many files, where.
    pushed_ago_s: Seconds | None = None
    pushed_files: Count | None = None
    pushed_to: str | None = Field(None, max_length=300)

    @field_validator("gpus")
    @classmethod
    def _readings_in_range(cls, gpus: list[GpuReading]) -> list[GpuReading]:
        # GpuReading is shared with the pod side; its bounds at the edge are checked here.
        for gpu in gpus:
            problem = reading_problem(gpu)
            if problem:
                raise ValueError(problem)
        return gpus


class HeartbeatAnswer(Strict):
    ok: bool = True
    server_time: float
    lease_until: float | None = None
    deadline_at: float | None = None  # the watchdog's word on the deadline: the pod adopts it
    # The user's word from the phone: end now (sync first, as the pod's own end) or retry the kept
    # pod's sync. Repeated in every answer until the pod acts; the pod acts once per intent_at.
    intent: Literal["end", "retry_sync"] | None = None
    intent_at: float | None = None
    # The watchdog's latest word on this pod, signed (core.signing.mint_claim): a later deadline (`gpuc
    # extend`), a lease, a budget's pull-in reach the pod here; it keeps the latest and presents it.
    claim: str | None = None


class PodEvent(Strict):
    pod_id: str = Field(min_length=1, max_length=128)
    kind: EventKind
    message: str = Field(max_length=2000)
    exit_code: int | None = Field(None, ge=-(2**31), lt=2**31)
    duration_s: Seconds | None = None
    end_at: Epoch | None = None  # the pod is ending: record the ledger end BEFORE the destroy call
    note: str | None = Field(None, max_length=500)
    # The pod is kept for its results (its sync failed) and stops itself in this many seconds (F16): the
    # watchdog records when it heard it, never destroys it, and stops it if it is still running after.
    kept_left_s: Seconds | None = None


class KeepRequest(Strict):
    until: Epoch


class DeadlineRequest(Strict):
    """Move a pod's deadline (`gpuc extend`, `gpuc keep`): exactly one of `deadline_at` (there) and
    `extend_s` (later by this much; from now if it has passed). The watchdog refuses one past the pod's
    start + max_lifetime_hours."""

    deadline_at: Epoch | None = None
    extend_s: float | None = Field(None, gt=0, le=MAX_LIMIT_S)
    # `gpuc keep`: never earlier than it is now, and only as far as the cap allows (capped, not refused)
    at_least: bool = False
    # `gpuc run` on a warm pod moves its deadline with each job it starts (client/pods/warm.py): the user just
    # asked for that job, and a push per job would be noise on the phone. Moved and recorded all the same.
    quiet: bool = False


class DeadlineAnswer(Strict):
    deadline_at: float  # the pod ends then (the pod's agent hears it in its next heartbeat answer)
    previous: float
    limit_at: float  # the latest it may be: the pod's start + max_lifetime_hours
    capped: bool = False  # at_least asked for more than the cap allows


class EndRequest(Strict):
    end_at: Epoch
    # Who ended the pod: `gpuc down`; its job's wrapper; its idle watch; the reaper; `gpuc up` that stopped
    # early (Ctrl-C, a failed install) and destroyed what it created.
    by: Literal["down", "wrapper", "idle", "reaper", "up"] = "down"
    note: str | None = Field(None, max_length=500)


class NotifyRequest(Strict):
    title: str = Field(max_length=200)
    message: str = Field(max_length=2000)


class ReapRequest(Strict):
    dry_run: bool = False


class Ack(Strict):
    ok: bool = True


class RegisterAnswer(Strict):
    """A registration's answer. For a pod registered without its own key: the token it signs its pings with
    (derived by the watchdog, handed to the pod as GPUC_POD_TOKEN, never stored) and its claim."""

    ok: bool = True
    token: str | None = None
    claim: str | None = None


class ResumeAnswer(Strict):
    resumed: bool  # False: new pods were not paused


class PodRecord(Strict):
    pod_id: str
    provider: str
    name: str
    experiment: str
    gpu: str | None = None
    price_per_hour: float | None = None
    started_at: float | None = None
    registered_at: float
    last_seen: float | None = None
    last_seq: int = -1
    state: Literal["ok", "late", "down", "destroying", "destroyed", "ended"] = "ok"
    destroy_at: float | None = None
    lease_until: float | None = None
    end_at: float | None = None
    ended_by: str | None = None
    note: str | None = None
    provider_status: PodStatus | None = None
    last_heartbeat: HeartbeatBody | None = None
    reason: str | None = None  # why the reaper flagged it (late / down / destroying)
    deadline_at: float | None = None  # gpuc ends the pod then (a stray's counts from first sight)
    kept_at: float | None = None  # kept for its results since (its sync failed): never destroyed unasked (F16)
    # A pod of a run rented with `--recover N`: its run, and which attempt it is (1: the one `up` rented)
    run_id: str | None = None
    attempt: int | None = None
    warm_s: float | None = None  # `up --warm`: kept between jobs, ended after this long with no job


class BlindProvider(Strict):
    provider: str
    since: float  # the first pass of this spell that could not read it
    why: str = ""


class ReapAction(Strict):
    pod_id: str
    provider: str
    action: Literal["warn", "mark", "cancel", "destroy", "alert", "skip", "confirm", "stop"]
    reason: str


class ReapReport(Strict):
    ran_at: float
    dry_run: bool = False
    blind: bool = False  # some provider could not be read: nothing was done on ITS pods
    blind_providers: list[str] = Field(default_factory=list)
    actions: list[ReapAction] = Field(default_factory=list)


class NotificationRecord(Strict):
    ts: float
    title: str
    message: str
    pod_id: str | None = None
    kind: str = "info"
    level: Literal["low", "info", "warning", "error"] = "info"


class ChannelInfo(Strict):
    """One notification channel the watchdog holds, as GPUC_NOTIFY_URLS lists it: never its URL."""

    index: int = Field(ge=1, le=1000)
    kind: str = Field(min_length=1, max_length=32)


class VastHookSeen(Strict):
    notif_type: str = Field(max_length=40)
    at: float


class StatusResponse(Strict):
    server_time: float
    reaper_last_run: float | None = None
    reaper_period_s: float
    pods: list[PodRecord] = Field(default_factory=list)
    reaper_blind: list[str] = Field(default_factory=list)  # providers the last reaper run could not read
    reaper_blind_since: list[BlindProvider] = Field(default_factory=list)  # the same, with since-when
    notifications: list[NotificationRecord] = Field(default_factory=list)  # the most recent, oldest first
    # "pause new pods" from the phone: `gpuc up` refuses while set, with this sentence
    new_pods_paused: str | None = None
    channels: list[ChannelInfo] | None = None  # the watchdog's notification channels now; None: it cannot say
    # The watchdog's public id (core.signing.watchdog_id): `up` marks each pod with it (core.pod.WATCHDOG_ENV).
    # None: a watchdog without a key of its own (a deployment from before claims).
    watchdog_id: str | None = None
    # WIRE_PROTOCOL of the gpuc the watchdog runs; absent (0) from a watchdog older than the field.
    protocol: int = Field(0, ge=0, le=1_000_000)
    # The last Vast webhook delivery the watchdog verified (its slug and when; never its body): `gpuc doctor
    # --live` asks Vast for a signed test delivery and reads here that it arrived. None: none yet.
    vast_hook_last: VastHookSeen | None = None
    # Where this watchdog grants a pod its run's own objects (None: it holds no results key): `up` refuses an
    # s3:// destination it does not cover before renting.
    results_grant: GrantScope | None = None


class PageLinkRequest(Strict):
    """`gpuc page --for`: how long the status page's session link lives (the watchdog caps it at a day)."""

    for_s: int = Field(gt=0, le=int(MAX_LIMIT_S))


class PageLinkAnswer(Strict):
    url: str  # a capability: whoever has it sees the pods and may press the page's buttons until expires_at
    expires_at: float
