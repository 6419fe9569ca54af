"""The run's own objects at an s3:// destination, as the pod reaches them: it holds no S3 key.

A pod is a stranger's machine (docs/secrets.md "What a pod holds"). It asks the watchdog, signed with its
pod token as its heartbeats are, for presigned URLs naming objects of its own run's prefix (core/api.py
GrantRequest, ListRequest, UploadRequest; functions/grants.py decides), and sends or fetches each object
through its URL with urllib: the file streamed from disk (never read whole), an overall deadline per object,
retried with backoff, a URL that expired signed afresh. A file over SINGLE_PUT_MAX goes in parts (S3 takes
at most 5 GB in one PUT; a 7B checkpoint is 13.5 GB). The listing (the sync's verification, the restore)
comes from the watchdog, which lists the prefix with its key.

Nothing here sends an `x-amz-*` header: a presigned URL signs the host only, and S3 refuses a header it did
not sign (HeadersNotSigned); sending none keeps every request exactly what the watchdog signed.

Standard library only, on python3 >= 3.9.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.destinations import S3Location
from gpuc.core.errors import SyncError
from gpuc.core.podpaths import CLAIM_ENV, TOKEN_ENV, PodPaths
from gpuc.core.redact import redact
from gpuc.core.signing import weak_token
from gpuc.instance_side.heartbeat import PodClient
from gpuc.instance_side.podhttp import TransportError, UrllibTransport
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.signer import ClaimFile, SeqCounter, Signer

GRANT_PATH = "/v1/grant"
LIST_PATH = "/v1/grant/list"
UPLOAD_PATH = "/v1/grant/upload"
BATCH = 50  # core.api.GRANT_BATCH
MIB = 1024 * 1024
SINGLE_PUT_MAX = 64 * MIB  # larger: in parts
PART_BYTES = 64 * MIB
PARTS_MAX = 10_000  # S3's part numbers
CALL_BUDGET_S = 180.0  # one call to the watchdog, its retries included
CALL_TIMEOUT_S = 30.0  # a list or a completed upload waits on S3 behind the watchdog
ANSWER_MAX = 4 * MIB  # a page of 1000 names, or 50 URLs
ATTEMPTS = 4  # per object (or part), a fresh URL included
SOCKET_TIMEOUT_S = 60.0  # one connect, one read or write of the socket
SLOWEST_BYTES_S = 256 * 1024  # an object's deadline: FIXED_S + its size at this rate
FIXED_S = 120.0
FRESH_S = 60.0  # a URL with less life left than this is signed again before use
CHUNK = MIB
HINT = "the pod is kept; once the watchdog and the bucket answer: python -m gpuc.instance_side sync"


class GrantCalls:
    """The pod's signed calls to the grant routes, through its PodClient (its seq, its claim, the
    functions' clock)."""

    def __init__(self, client: PodClient, pod_id: str, budget_s: float = CALL_BUDGET_S) -> None:
        self.client = client
        self.pod_id = pod_id
        self.budget_s = budget_s

    def urls(self, op: str, names: Sequence[str]) -> tuple[dict[str, str], float]:
        """op "put" or "get": name -> URL, and how long they live."""
        data = self._call(GRANT_PATH, {"pod_id": self.pod_id, "op": op, "names": list(names)})
        urls = {str(u.get("name")): _url(u.get("url")) for u in _dicts(data.get("urls"))}
        if set(urls) != set(names):
            raise SyncError("the watchdog's grant named other objects than asked", hint=HINT)
        return urls, _life(data.get("expires_in_s"))

    def page(self, after: str | None) -> tuple[dict[str, int], bool]:
        payload: dict[str, Any] = {"pod_id": self.pod_id}
        if after is not None:
            payload["after"] = after
        data = self._call(LIST_PATH, payload)
        listed: dict[str, int] = {}
        for item in _dicts(data.get("objects")):
            name, size = item.get("name"), item.get("size")
            if isinstance(name, str) and isinstance(size, int) and not isinstance(size, bool) and size >= 0:
                listed[name] = size
        return listed, data.get("more") is True and bool(listed)

    def upload(self, op: str, name: str, **fields: Any) -> dict[str, Any]:
        return self._call(UPLOAD_PATH, {"pod_id": self.pod_id, "op": op, "name": name, **fields})

    def part_urls(self, name: str, upload_id: str, parts: Sequence[int]) -> tuple[dict[int, str], float]:
        data = self.upload("parts", name, upload_id=upload_id, parts=list(parts))
        urls = {u.get("part"): _url(u.get("url")) for u in _dicts(data.get("urls"))}
        if set(urls) != set(parts):
            raise SyncError("the watchdog's grant named other parts than asked", hint=HINT)
        return {int(n): u for n, u in urls.items() if isinstance(n, int)}, _life(data.get("expires_in_s"))

    def _call(self, path: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        try:
            result = self.client.exchange(path, payload, self.budget_s)
        except TransportError as exc:
            raise SyncError(f"the watchdog could not be reached for a results grant: {exc}", hint=HINT) from None
        try:
            data = json.loads(result.body)
        except ValueError:
            data = None
        if not 200 <= result.status < 300:
            said = str(data.get("error", ""))[:300] if isinstance(data, dict) else ""
            raise SyncError(f"the watchdog refused the results grant: HTTP {result.status} {said}".rstrip(), hint=HINT)
        if not isinstance(data, dict):
            raise SyncError("the watchdog answered the results grant with something that is not JSON", hint=HINT)
        return data


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _url(value: object) -> str:
    if not isinstance(value, str) or not value.startswith(("https://", "http://")):
        raise SyncError("the watchdog's grant holds something that is not a URL", hint=HINT)
    return value


def _life(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 7 * 86400:
        return float(value)
    return 60.0  # a garbled life: the URLs are used at once, or signed again


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A presigned URL is for one host: a redirect is an answer to report, never a place to follow."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Again(Exception):
    """Worth another try, with a URL signed afresh: the one used may have expired, and a store that refuses an
    expired URL early may cut the upload instead of answering (a reset, not a 403)."""


class GrantedObjects:
    """The run's objects at `url` (`s3://bucket/<prefix>/<experiment>/<run_id>`), by name relative to it,
    through the URLs the watchdog grants (instance_side/s3sync.py RunObjects)."""

    def __init__(
        self,
        url: str,
        calls: Callable[[], GrantCalls],
        *,
        clock: Clock | None = None,
        single_put_max: int = SINGLE_PUT_MAX,
        part_bytes: int = PART_BYTES,
    ) -> None:
        self.url = url.rstrip("/")
        self._make_calls = calls
        self._calls: GrantCalls | None = None
        self.clock = clock or SystemClock()
        self.single_put_max = single_put_max
        self.part_bytes = part_bytes
        self._opener = urllib.request.build_opener(_NoRedirect)

    def describe(self) -> str:
        return self.url + "/"

    def calls(self) -> GrantCalls:
        if self._calls is None:
            self._calls = self._make_calls()
        return self._calls

    # -- put ------------------------------------------------------------------------------------------
    def put(self, name: str, source: Path, size: int) -> None:
        self.put_many([(name, source, size)])

    def put_many(self, files: Sequence[tuple[str, Path, int]]) -> None:
        """Each (name, file, size it had when listed), in order; a file whose size changed since is a failed
        push (its listing would not match), sent again by the next one."""
        small = [f for f in files if f[2] <= self.single_put_max]
        for start in range(0, len(small), BATCH):
            batch = small[start : start + BATCH]
            urls, life = self.calls().urls("put", [name for name, _, _ in batch])
            granted = self.clock.now()
            for name, source, size in batch:
                url = urls[name] if self.clock.now() < granted + life - FRESH_S else self._fresh_put(name)
                self._send(url, functools.partial(self._fresh_put, name), source, 0, size, size, name)
        for name, source, size in files:
            if size > self.single_put_max:
                self._put_parts(name, source, size)

    def _fresh_put(self, name: str) -> str:
        return self.calls().urls("put", [name])[0][name]

    def _put_parts(self, name: str, source: Path, size: int) -> None:
        part = max(self.part_bytes, -(-size // PARTS_MAX))
        count = -(-size // part)
        calls = self.calls()
        upload_id = calls.upload("start", name).get("upload_id")
        if not isinstance(upload_id, str) or not upload_id:
            raise SyncError(f"the watchdog started no upload for {name}", hint=HINT)
        try:
            for first in range(1, count + 1, BATCH):
                numbers = list(range(first, min(first + BATCH, count + 1)))
                urls, life = calls.part_urls(name, upload_id, numbers)
                granted = self.clock.now()
                for n in numbers:

                    def fresh(n: int = n) -> str:
                        return calls.part_urls(name, upload_id, [n])[0][n]

                    url = urls[n] if self.clock.now() < granted + life - FRESH_S else fresh()
                    offset = (n - 1) * part
                    self._send(url, fresh, source, offset, min(part, size - offset), size, f"{name} (part {n}/{count})")
            calls.upload("complete", name, upload_id=upload_id, count=count, size=size)
        except BaseException:
            with contextlib.suppress(Exception):  # what it leaves would bill storage; never worth the error
                calls.upload("abort", name, upload_id=upload_id)
            raise

    def _send(
        self, url: str, fresh: Callable[[], str], source: Path, offset: int, length: int, whole: int, what: str
    ) -> None:
        def once(url: str) -> None:
            self._put_once(url, source, offset, length, whole, what)

        self._with_retries(url, fresh, once, f"upload of {what}")

    def _put_once(self, url: str, source: Path, offset: int, length: int, whole: int, what: str) -> None:
        deadline = self.clock.now() + FIXED_S + length / SLOWEST_BYTES_S
        try:
            fh = source.open("rb")
        except OSError as exc:
            raise SyncError(f"cannot read results/{what}: {exc.strerror or exc}", hint=HINT) from None
        with fh:
            if os.fstat(fh.fileno()).st_size != whole:
                raise SyncError(f"results/{what} changed while the push ran: it is sent again next time", hint=HINT)
            fh.seek(offset)
            body = _Body(fh, length, lambda: self.clock.now() > deadline)
            headers = {"Content-Length": str(length), "Content-Type": "application/octet-stream"}
            request = urllib.request.Request(url, data=body, method="PUT", headers=headers)
            self._exchange(request, lambda response: response.read(64 * 1024))

    # -- get ------------------------------------------------------------------------------------------
    def get(self, name: str, target: Path, *, size: int | None = None, limit: int | None = None) -> bool:
        """The object into `target` (replaced whole); False when there is none. `size`: what it must hold;
        `limit`: the most that is read of one whose size is not known."""
        calls = self.calls()
        url = calls.urls("get", [name])[0][name]
        found: list[bool] = []

        def once(url: str) -> None:
            found[:] = [self._get_once(url, target, size, limit, name)]

        self._with_retries(url, lambda: calls.urls("get", [name])[0][name], once, f"download of {name}")
        return found[0]

    def _get_once(self, url: str, target: Path, size: int | None, limit: int | None, name: str) -> bool:
        deadline = self.clock.now() + FIXED_S + (size or limit or 0) / SLOWEST_BYTES_S
        request = urllib.request.Request(url, method="GET")

        def save(response: Any) -> None:
            got = 0
            with target.open("wb") as out:
                while True:
                    chunk = response.read(CHUNK)
                    if not chunk:
                        break
                    got += len(chunk)
                    if (size is not None and got > size) or (limit is not None and got > limit):
                        raise SyncError(f"{name} at {self.describe()} is larger than the push said", hint=HINT)
                    if self.clock.now() > deadline:
                        raise _Again("past its deadline")
                    out.write(chunk)
            if size is not None and got != size:
                said = f"{name} at {self.describe()} does not match the push ({got} of {size} bytes)"
                raise SyncError(said, hint=HINT)

        return self._exchange(request, save, missing_ok=True)

    # -- list -----------------------------------------------------------------------------------------
    def list(self) -> dict[str, int]:
        """Every object of the run's prefix (name -> size), as the watchdog lists it with its key."""
        listed: dict[str, int] = {}
        after: str | None = None
        while True:
            page, more = self.calls().page(after)
            listed.update(page)
            if not more:
                return listed
            after = max(page)

    # -- one request ----------------------------------------------------------------------------------
    def _with_retries(self, url: str, fresh: Callable[[], str], once: Callable[[str], None], what: str) -> None:
        delay, why = 1.0, ""
        for attempt in range(ATTEMPTS):
            try:
                once(url)
                return
            except _Again as again:
                why = str(again)
                if attempt + 1 == ATTEMPTS:
                    break
                self.clock.sleep(delay)
                delay *= 2
                url = fresh()
        raise SyncError(f"{what} to {self.describe()} failed: {why}", hint=HINT)

    def _exchange(self, request: urllib.request.Request, read: Callable[[Any], Any], missing_ok: bool = False) -> bool:
        """True when S3 answered 2xx (read through `read`); False for a 404 when `missing_ok`; else _Again
        (worth a retry) or SyncError (it is not)."""
        try:
            with self._opener.open(request, timeout=SOCKET_TIMEOUT_S) as response:
                read(response)
                return True
        except urllib.error.HTTPError as exc:
            with exc:
                code = _s3_code(exc.read(16 * 1024))
            status = int(exc.code)
        except (OSError, ValueError) as exc:  # unreachable, reset, a socket timeout, a file that shrank
            raise _Again(f"{type(exc).__name__}: {redact(str(exc))[:200]}") from None
        if status == 404 and missing_ok and code in ("NoSuchKey", ""):
            return False
        said = f"HTTP {status} {code}".rstrip()
        if status >= 500 or status in (408, 429) or code in ("RequestTimeout", "SlowDown"):
            raise _Again(said)
        if status == 403:
            raise _Again(said)  # expired (a slow uplink, a clock off): signed again
        raise SyncError(f"the results bucket refused it: {said}", hint=HINT)


class _Body:
    """A file's `length` bytes from where it stands, for http.client to stream; a file that shrank, or a
    request past its deadline, fails the request (never a short body sent as whole)."""

    def __init__(self, fh: Any, length: int, late: Callable[[], bool]) -> None:
        self.fh = fh
        self.left = length
        self.late = late

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        if self.late():
            raise OSError("the upload went past its deadline")
        want = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(want)
        if not data:
            raise OSError("the file shrank while it was sent")
        self.left -= len(data)
        return bytes(data)


_CODE = re.compile(rb"<Code>([A-Za-z0-9.]{1,64})</Code>")


def _s3_code(body: bytes) -> str:
    found = _CODE.search(body)
    return found.group(1).decode() if found else ""


def pod_objects(
    bucket_url: str,
    experiment: str,
    run_id: str,
    *,
    pod_id: str,
    watchdog_url: str,
    secrets: Mapping[str, str],
    paths: PodPaths,
    environ: Mapping[str, str] | None = None,
) -> GrantedObjects:
    """The pod's objects, its calls signed with its token and claim (built at the first call: a sync that
    sends nothing asks nothing)."""
    env = os.environ if environ is None else environ

    def calls() -> GrantCalls:
        token = secrets.get(TOKEN_ENV) or env.get(TOKEN_ENV) or ""
        if not token or weak_token(token) is not None:
            raise SyncError(
                "this pod holds no token to ask the watchdog for its results grant",
                hint="re-run `gpuc up`: it writes the pod's token",
            )
        clock = SystemClock()
        claim = ClaimFile(paths.claim, secrets.get(CLAIM_ENV))
        signer = Signer(pod_id, token, SeqCounter(paths.seq, clock), clock, claim)
        log = PodLog(paths.log, clock, role="grants", secrets=[token, *(v for v in secrets.values() if v)])
        transport = UrllibTransport(answer_max=ANSWER_MAX)
        return GrantCalls(PodClient(watchdog_url, signer, transport, clock, log, timeout_s=CALL_TIMEOUT_S), pod_id)

    return GrantedObjects(S3Location.parse(bucket_url).run_url(experiment, run_id), calls)
