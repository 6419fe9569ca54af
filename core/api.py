"""The functions' HTTP contract, shared by the client, the pod and the server.

Routes (the local server and the Lambda Function URL serve the same ones):

    POST /v1/pods                 admin   RegisterRequest           -> Ack
    POST /v1/heartbeat            pod     HeartbeatBody (signed)    -> HeartbeatAnswer
    POST /v1/events               pod     PodEvent (signed)         -> Ack
    POST /v1/pods/{id}/keep       admin   KeepRequest               -> Ack
    POST /v1/pods/{id}/end        admin   EndRequest                -> Ack
    POST /v1/notify               admin   NotifyRequest             -> Ack
    GET  /v1/status               admin                             -> StatusResponse
    POST /v1/reap                 admin   ReapRequest               -> ReapReport

Admin requests carry `Authorization: Bearer <admin token>`. Pod requests carry the four
X-Gpuc-* headers below; the signature covers `timestamp.seq.body` (see core.signing).
Errors: 4xx with `{"error": "<stable message>"}`; never 5xx for bad input.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuc.core.models import GpuReading, PodStatus, Strict

MAX_BODY_BYTES = 16 * 1024
SIGNATURE_WINDOW_S = 300

H_POD = "X-Gpuc-Pod"
H_TIMESTAMP = "X-Gpuc-Timestamp"
H_SEQ = "X-Gpuc-Seq"
H_SIGNATURE = "X-Gpuc-Signature"

PodId = str
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
]


class Policy(Strict):
    """Per-pod overrides of the reaper's limits (seconds). None = the server's default."""

    silence_limit_s: float | None = Field(None, gt=0)
    stopped_limit_s: float | None = Field(None, gt=0)
    paused_limit_s: float | None = Field(None, gt=0)


class RegisterRequest(Strict):
    pod_id: str = Field(min_length=1, max_length=128)
    provider: str = Field(min_length=1, max_length=32)
    name: str = Field(min_length=1, max_length=128)
    experiment: str = Field(min_length=1, max_length=64)
    key: str = Field(pattern=r"^[0-9a-f]{64}$")  # derived HMAC key, see core.signing
    gpu: str | None = Field(None, max_length=64)
    price_per_hour: float | None = Field(None, ge=0, le=1000)
    started_at: float | None = None
    interruptible: bool = False
    policy: Policy = Field(default_factory=lambda: Policy.model_validate({}))


class HeartbeatBody(Strict):
    pod_id: str = Field(min_length=1, max_length=128)
    seq: int = Field(ge=0)
    sent_at: float
    gpus: list[GpuReading] = Field(default_factory=list, max_length=16)
    gpu_error: str | None = Field(None, max_length=500)
    python_procs: int = Field(0, ge=0)
    active_ssh: int = Field(0, ge=0)
    idle_minutes: float = Field(0, ge=0)
    busy_reason: str | None = Field(None, max_length=200)
    job_running: bool = False
    keep_file: bool = False


class HeartbeatAnswer(Strict):
    ok: bool = True
    server_time: float
    lease_until: float | None = None


class PodEvent(Strict):
    pod_id: str = Field(min_length=1, max_length=128)
    kind: EventKind
    message: str = Field(max_length=2000)
    exit_code: int | None = None
    duration_s: float | None = Field(None, ge=0)
    end_at: float | None = None  # the pod is ending: record the ledger end BEFORE the destroy call
    note: str | None = Field(None, max_length=500)


class KeepRequest(Strict):
    until: float


class EndRequest(Strict):
    end_at: float
    by: Literal["down", "wrapper", "idle", "reaper"] = "down"
    note: str | None = Field(None, max_length=500)


class NotifyRequest(Strict):
    title: str = Field(max_length=200)
    message: str = Field(max_length=2000)


class ReapRequest(Strict):
    dry_run: bool = False


class Ack(Strict):
    ok: bool = True


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


class ReapAction(Strict):
    pod_id: str
    provider: str
    action: Literal["warn", "mark", "cancel", "destroy", "alert", "skip", "confirm"]
    reason: str


class ReapReport(Strict):
    ran_at: float
    dry_run: bool = False
    blind: bool = False
    actions: list[ReapAction] = Field(default_factory=list)


class NotificationRecord(Strict):
    ts: float
    title: str
    message: str
    pod_id: str | None = None
    kind: str = "info"
    level: Literal["info", "warning", "error"] = "info"


class StatusResponse(Strict):
    server_time: float
    reaper_last_run: float | None = None
    reaper_period_s: float
    pods: list[PodRecord] = Field(default_factory=list)
    reaper_blind: list[str] = Field(default_factory=list)  # providers the last reaper run could not read
    notifications: list[NotificationRecord] = Field(default_factory=list)  # the most recent, oldest first
