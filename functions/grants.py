"""A pod's grant: its own run's objects at an s3:// destination, never a key (docs/secrets.md "What a pod
holds").

A pod on Vast is a stranger's machine: whatever it holds, the host can read. So the bucket's key stays with
the laptop and the watchdog (its own settings: SSM on AWS, `.env` for `gpuc watchdog serve`), and a pod asks
the watchdog, signed as its heartbeats are (edge.verify_pod: its derived key, the 5-minute window, a new
seq), for presigned SigV4 URLs naming objects of its own run's prefix, `<prefix>/<experiment>/<run_id>/`:

- POST /v1/grant: a PUT or GET URL for each name (never DELETE: no route signs one);
- POST /v1/grant/list: the watchdog lists the prefix with its key and answers names and sizes (the sync's
  verification, the restore's listing);
- POST /v1/grant/upload: a file too large for one PUT (S3 caps it at 5 GB), in parts: the watchdog starts,
  completes (only when the parts the pod names are there) or aborts the upload itself, and signs only
  part URLs.

Presigned URLs work on every S3-compatible store (AWS, R2, B2, MinIO); POST policies do not (R2 and B2 lack
them) and STS session policies are AWS's alone. A URL names one object, one method, and dies GRANT_TTL_S after
it is signed (S3 checks it as a request starts).

The prefix is fixed at registration (RegisterRequest.results_at, checked against the bucket this watchdog
holds a key for and the pod's own experiment and run id) and carried in the pod's signed claim, so a watchdog
that lost its store grants the same prefix again, never a wider one. Each name is checked (core.destinations
grant_name_problem: no `..`, `.`, empty part, leading `/`, control character). Refused (403, nothing stored):
a pod with no prefix, one whose record ended, one past its deadline (or its kept window) + GRANT_MARGIN_S; no
URL lives past that margin either. A grant's seq is spent like an event's: a replayed request is a 409.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuc.core import api, grantapi
from gpuc.core.destinations import GRANT_KEY_HINT, S3Location, grant_name_problem
from gpuc.core.errors import SyncError
from gpuc.core.settings import Settings
from gpuc.functions.app import Deps
from gpuc.functions.bucket import BucketError, PartsMismatch, ResultsBucket, results_bucket
from gpuc.functions.deadline import deadline_of
from gpuc.functions.edge import HttpError, Request, Response, Signed, ok, parse, same_pod, verify_pod
from gpuc.functions.store import FINISHED_STATES

GRANT_TTL_S = 15 * 60  # a URL's life: long enough to start a 64 MB part on a slow uplink, short once stolen
GRANT_MARGIN_S = 15 * 60  # after the deadline (or the kept window): the end's last sync still finishing
NO_KEY = "this watchdog holds no key for an s3:// results destination: a pod can be granted nothing there"


@dataclass(frozen=True)
class Scope:
    """The s3:// destination this watchdog holds a key for: pods are granted runs' prefixes inside it."""

    bucket: str
    prefix: str
    endpoint_url: str | None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def holds(self, prefix: str) -> bool:
        return not self.prefix or prefix == self.prefix or prefix.startswith(self.prefix + "/")


def scope_of(settings: Settings) -> Scope | None:
    url = settings.results_bucket or ""
    if not url.startswith("s3://") or settings.s3_access_key_id is None or settings.s3_secret_access_key is None:
        return None
    try:
        where = S3Location.parse(url)
    except SyncError:
        return None
    return Scope(where.bucket, where.prefix, settings.s3_endpoint_url)


def said_scope(settings: Settings) -> grantapi.GrantScope | None:
    """What /v1/status says of it, for `up` to check before renting (never the key)."""
    scope = scope_of(settings)
    return None if scope is None else grantapi.GrantScope(bucket=scope.url, endpoint_url=scope.endpoint_url)


def checked_results_at(settings: Settings, url: str, experiment: str, run_id: str) -> str:
    """A registration's results_at: `s3://<this watchdog's bucket>/<prefix under its own>/<experiment>/<run_id>`,
    nothing else (400, nothing stored). The laptop is trusted, but a pod's prefix is the whole of its power."""
    scope = scope_of(settings)
    if scope is None:
        raise HttpError(400, NO_KEY, hint=GRANT_KEY_HINT)
    if not (url.isascii() and url.isprintable()):
        raise HttpError(400, "json validation error: results_at must be printable ASCII")
    try:
        where = S3Location.parse(url)
    except SyncError:
        raise HttpError(400, "json validation error: results_at is not an s3://bucket/prefix URL") from None
    tail = f"{experiment}/{run_id}"
    root = where.prefix[: -len(tail)].rstrip("/") if where.prefix.endswith(tail) else None
    if root is None or (root and not where.prefix.endswith("/" + tail)) or grant_name_problem(where.prefix):
        raise HttpError(400, "json validation error: results_at must end in the pod's own experiment and run id")
    if where.bucket != scope.bucket or not scope.holds(root):
        raise HttpError(
            400,
            f"results_at is outside {scope.url}, the destination this watchdog holds a key for",
            hint=f"set GPUC_RESULTS_BUCKET inside {scope.url} on the laptop, or give the watchdog the key for yours",
        )
    return f"s3://{where.bucket}/{where.prefix}"


def results_at_of_run(settings: Settings, url: str, experiment: str, run_id: str) -> str | None:
    """A re-rented attempt's prefix: its run's, as `up` registered it (None when it has no grant here: a
    file:// destination, or a watchdog that no longer holds the key; its sync then fails and keeps the pod)."""
    if not url.startswith("s3://"):
        return None
    try:
        return checked_results_at(settings, url, experiment, run_id)
    except HttpError:
        return None


# -- the routes ----------------------------------------------------------------------------------------
def grant(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(grantapi.GrantRequest, req.body)
    same_pod(signed, body.pod_id)
    base, ttl = _granted(deps, signed, now)
    bucket = _bucket(deps)
    method: Literal["PUT", "GET"] = "PUT" if body.op == "put" else "GET"
    urls = [grantapi.GrantedUrl(name=n, url=bucket.presign(method, f"{base}/{n}", ttl)) for n in body.names]
    return ok(grantapi.GrantAnswer(urls=urls, expires_in_s=ttl))


def grant_list(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(grantapi.ListRequest, req.body)
    same_pod(signed, body.pod_id)
    if body.after is not None and grant_name_problem(body.after):
        raise HttpError(400, "json validation error: after is invalid")
    base, _ = _granted(deps, signed, now)
    prefix = base + "/"
    try:
        page = _bucket(deps).listing(prefix, None if body.after is None else prefix + body.after)
    except BucketError as exc:
        raise _unreachable(exc) from None
    objects = [grantapi.ListedObject(name=key[len(prefix) :], size=size) for key, size in page.keys]
    return ok(grantapi.ListAnswer(objects=objects, more=page.more))


def grant_upload(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(grantapi.UploadRequest, req.body)
    same_pod(signed, body.pod_id)
    if body.op != "start" and body.upload_id is None:
        raise HttpError(400, "json validation error: upload_id is required")
    if body.op == "complete" and (body.count is None or body.size is None):
        raise HttpError(400, "json validation error: count and size are required")
    base, ttl = _granted(deps, signed, now)
    bucket, key = _bucket(deps), f"{base}/{body.name}"
    try:
        return ok(_upload_step(bucket, key, body, ttl))
    except PartsMismatch as exc:
        raise HttpError(409, f"not completed: {exc}") from None
    except BucketError as exc:
        raise _unreachable(exc) from None


def _upload_step(bucket: ResultsBucket, key: str, body: grantapi.UploadRequest, ttl: int) -> grantapi.UploadAnswer:
    upload_id = body.upload_id or ""
    if body.op == "start":
        return grantapi.UploadAnswer(upload_id=bucket.start_upload(key))
    if body.op == "parts":
        urls = [grantapi.PartUrl(part=n, url=bucket.presign_part(key, upload_id, n, ttl)) for n in body.parts]
        return grantapi.UploadAnswer(upload_id=upload_id, urls=urls, expires_in_s=ttl)
    if body.op == "complete":
        bucket.complete_upload(key, upload_id, body.count or 0, body.size or 0)
    else:
        bucket.abort_upload(key, upload_id)
    return grantapi.UploadAnswer(upload_id=upload_id)


def _granted(deps: Deps, signed: Signed, now: float) -> tuple[str, int]:
    """The pod's run prefix (the key prefix, no bucket) and how long a URL may live, or the refusal; then the
    request's seq is spent (a replay is a 409). Every refusal comes before anything is written."""
    auth = signed.auth
    if not auth.results_at:
        raise HttpError(403, "no grant: this pod's run has no s3:// results destination at this watchdog")
    if auth.state in FINISHED_STATES:
        raise HttpError(403, "no grant: this pod's run has ended")
    end = max(deadline_of(auth, deps.settings), auth.kept_until or 0.0) + GRANT_MARGIN_S
    if now >= end:
        raise HttpError(403, "no grant: this pod is past its deadline")
    scope = scope_of(deps.settings)
    where = S3Location.parse(auth.results_at)
    if scope is None or where.bucket != scope.bucket:
        raise HttpError(403, f"no grant: {NO_KEY}")
    if not deps.store.claim_event_seq(signed.pod_id, signed.seq, now, keep_s=2 * api.SIGNATURE_WINDOW_S):
        raise HttpError(409, "replayed request: this seq was already received")
    return where.prefix, int(min(GRANT_TTL_S, end - now)) or 1


def _bucket(deps: Deps) -> ResultsBucket:
    if deps.bucket is None:
        deps.bucket = results_bucket(deps.settings)
    return deps.bucket


def _unreachable(exc: BucketError) -> HttpError:
    # Not the pod's fault, and maybe passing: a 503 the pod retries (never a 4xx that would end its sync).
    return HttpError(503, f"the results bucket did not answer the watchdog: {exc}")
