"""`python -m gpuc.instance_side ask QUESTION [ARGS]`: what only the pod can tell the laptop, one JSON line.

    job-state                       is a job running under the wrapper, or an ending under way?
    log OFFSET MOST OUTCOME_MAX     the job log from OFFSET (at most MOST bytes), the outcome file, the end
    unpack DIGEST                   the project the laptop sent (.gpuc/upload/part-*) into the workspace
    missing PROGRAM [FILE ...]      which of the names a command needs the pod lacks ("" for no program)
    key-scope                       what the pod-scoped key may read (statuses, never the key)
    clean-results                   results/ pushed, then emptied of what the destination holds (clean.py)

Each answer is built on the code the pod itself runs (procs, podfiles, joblog, selfdestroy): the laptop's
question and the pod's own rules cannot drift apart. The laptop reads it in one place (client/onpod/ask.py).

The answer is exactly one line on stdout, a JSON object `{"ask": QUESTION, "v": 1, ...}`, and the exit code:
- 0: answered ("no job" is an answer);
- 1: the pod's state could not be read; `error` says what, and the laptop must not guess;
- 2: the question or its arguments are wrong (`error`);
- 3: `unpack` refused the upload (damaged, unsafe, no room), or `clean-results` deleted nothing (`error`).
A short-lived process on the standard library: it never adds to the agent's memory, and starts fast.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from gpuc.instance_side.joblog import outcome_bytes, read_job_log
from gpuc.instance_side.podfiles import END_MARKER_MAX, PodPaths, end_marker, ending_under_way
from gpuc.instance_side.procs import JobScanError, job_alive, read_job_stamp

ASK_VERSION = 1
ANSWERED, CANNOT_TELL, BAD_QUESTION, REFUSED = 0, 1, 2, 3
# One log read: the laptop asks 256 KiB at a time. The bound keeps a bad MOST from allocating the pod's memory.
READ_MAX = 16 * 1024 * 1024
_COUNT = re.compile(r"[0-9]{1,18}")
_DIGEST = re.compile(r"[0-9a-f]{64}")
KEY_TIMEOUT_S = 20.0
KEY_BODY_MAX = 1024 * 1024

Answer = dict[str, object]


class AskError(Exception):
    """No answer: `code` says why (CANNOT_TELL, BAD_QUESTION or REFUSED), the message says what."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _bad(message: str) -> AskError:
    return AskError(message, BAD_QUESTION)


def _no_args(question: str, args: Sequence[str]) -> None:
    if args:
        raise _bad(f"{question} takes no arguments, got {len(args)}")


def _count(name: str, value: str, most: int | None = None) -> int:
    if not _COUNT.fullmatch(value):
        raise _bad(f"{name} must be a whole number of bytes, got {value[:40]!r}")
    number = int(value)
    if most is not None and number > most:
        raise _bad(f"{name} must be at most {most}, got {number}")
    return number


# -- the questions ------------------------------------------------------------------------------
def job_state(paths: PodPaths, args: Sequence[str]) -> Answer:
    """`job_pid`: the job under the wrapper, None when none runs (a stale pid file included); `ended`: the
    end marker as written (the laptop compares it with the pod's id); `ending`: an ending holds end.lock."""
    _no_args("job-state", args)
    try:
        stamp = read_job_stamp(paths.job)
    except JobScanError as exc:
        raise AskError(str(exc), CANNOT_TELL) from None
    pid = stamp[0] if stamp is not None and stamp[0] > 0 and job_alive(*stamp) else None
    try:
        ended = end_marker(paths)
        ending = ending_under_way(paths)
    except (OSError, ValueError) as exc:
        raise AskError(f"cannot read the end marker or end.lock: {type(exc).__name__}", CANNOT_TELL) from None
    return {"job_pid": pid, "ended": ended, "ending": ending}


def log(paths: PodPaths, args: Sequence[str]) -> Answer:
    """The job log's `size` (None: no log yet) and its bytes from OFFSET as `data`; the outcome file's bytes as
    `outcome` (None: none) as the file holds them, for the laptop's one strict reader; `ended` as in
    job-state (None when it cannot be read: the log is what was asked). Bytes travel base64-encoded (the
    job's output need not be UTF-8)."""
    if len(args) != 3:
        raise _bad(f"log takes OFFSET MOST OUTCOME_MAX, got {len(args)} arguments")
    offset = _count("OFFSET", args[0])
    most, outcome_max = _count("MOST", args[1], READ_MAX), _count("OUTCOME_MAX", args[2], READ_MAX)
    try:
        size, data = read_job_log(paths, offset, most)
    except OSError as exc:
        raise AskError(f"cannot read the job log: {type(exc).__name__}", CANNOT_TELL) from None
    outcome = outcome_bytes(paths, outcome_max)
    try:
        ended = end_marker(paths)
    except (OSError, ValueError):
        ended = None
    return {
        "size": size,
        "data": base64.b64encode(data).decode(),
        "outcome": None if outcome is None else base64.b64encode(outcome).decode(),
        "ended": None if ended is None else ended[:END_MARKER_MAX],
    }


def unpack(paths: PodPaths, args: Sequence[str]) -> Answer:
    """Join the parts `up` put in .gpuc/upload, check them against DIGEST (sha256), unpack them into the
    workspace, remove the parts. `files`: how many members; `workspace`: where.

    Unpacked by core/untar, never tarfile's extraction (its filter is fooled by CVE-2025-4517 before
    3.11.13 and missing before 3.11.4, and the pod's Python is whatever its image holds): only files and
    folders are written, none through a link already in the workspace; the project's own links are made
    last, each only if it cannot lead out of the workspace."""
    if len(args) != 1 or not _DIGEST.fullmatch(args[0]):
        raise _bad("unpack takes DIGEST, the sha256 of the upload in lowercase hex")
    import hashlib
    import io

    from gpuc.core.errors import GpucError
    from gpuc.core.untar import make_links
    from gpuc.core.untar import unpack as untar

    parts = sorted(paths.upload.glob("part-*"))
    try:
        data = b"".join(p.read_bytes() for p in parts)
    except OSError as exc:
        raise AskError(f"cannot read the upload: {type(exc).__name__}", CANNOT_TELL) from None
    if hashlib.sha256(data).hexdigest() != args[0]:
        raise AskError("the upload arrived damaged (checksum mismatch)", REFUSED)
    try:
        paths.workspace.mkdir(parents=True, exist_ok=True)
        done = untar(io.BytesIO(data), paths.workspace, compression="gz", replace=True)
        if done.hardlinks:  # the laptop never sends one
            raise GpucError(f"a hard link: {sorted(done.hardlinks)[0][:200]!r}")
        make_links(paths.workspace, done.symlinks, replace=True)
    except GpucError as exc:
        raise AskError(f"cannot unpack the upload: {exc.message}", REFUSED) from None
    except OSError as exc:
        raise AskError(f"cannot unpack the upload: {exc.strerror or type(exc).__name__}", REFUSED) from None
    for part in parts:
        part.unlink(missing_ok=True)
    return {"files": done.files + len(done.symlinks), "workspace": str(paths.workspace)}


def missing(paths: PodPaths, args: Sequence[str]) -> Answer:
    """Which of PROGRAM (looked up on PATH; "" for none) and the FILEs are not there, from where the job
    runs (this process's folder and PATH); `cwd`: that folder."""
    if not args:
        raise _bad('missing takes PROGRAM [FILE ...] ("" for no program)')
    import shutil

    program, files = args[0], args[1:]
    gone = [f for f in files if not os.path.exists(f)]
    if program and shutil.which(program) is None:
        gone.insert(0, program)
    try:
        cwd = os.getcwd()
    except OSError as exc:
        raise AskError(f"cannot tell the job's folder: {type(exc).__name__}", CANNOT_TELL) from None
    return {"missing": gone, "cwd": cwd}


def key_scope(paths: PodPaths, args: Sequence[str]) -> Answer:
    """What the pod-scoped key the platform injected may do, as HTTP statuses (None: no answer), read-only
    calls only: `own_pod` (read this pod), `list` (list the account), and on RunPod `v2_own` (REST v2).
    No key on this pod: an empty answer. Never the key, never a body."""
    _no_args("key-scope", args)
    from gpuc.core.providers import endpoints as ep
    from gpuc.instance_side.selfdestroy import container_environ

    env = {**container_environ(), **os.environ}
    if env.get("RUNPOD_POD_ID") and env.get("RUNPOD_API_KEY"):
        pod, key = env["RUNPOD_POD_ID"], env["RUNPOD_API_KEY"]
        gql = env.get(ep.RUNPOD_GRAPHQL_ENV) or ep.RUNPOD_GRAPHQL_URL
        rest = env.get(ep.RUNPOD_REST_ENV) or ep.RUNPOD_REST_URL
        own = {"query": "query P($i: String!) { pod(input: {podId: $i}) { id } }", "variables": {"i": pod}}
        return {
            "own_pod": _status("POST", gql, key, own),
            "list": _status("POST", gql, key, {"query": "query { myself { pods { id } } }"}),
            "v2_own": _status("GET", rest.rstrip("/") + "/pods/" + pod, key),
        }
    if env.get("CONTAINER_ID") and env.get("CONTAINER_API_KEY"):
        instance, key = env["CONTAINER_ID"], env["CONTAINER_API_KEY"]
        host = ep.vast_host(env.get(ep.VAST_URL_ENV) or ep.VAST_URL)
        return {
            "own_pod": _status("GET", host + "/api/v0/instances/" + instance + "/?owner=me", key),
            "list": _status("GET", host + "/api/v1/instances/?limit=1", key),
        }
    return {}


def _status(method: str, url: str, key: str, body: Mapping[str, object] | None = None) -> int | None:
    """The call's HTTP status; a 200 whose JSON body holds `errors` (GraphQL's refusal) counts as 403."""
    import http.client
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        # A redirect would carry the key's Authorization header to wherever it points: its status is the answer.
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json", "Accept": "application/json"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=KEY_TIMEOUT_S) as reply:
            status, text = int(reply.status), reply.read(KEY_BODY_MAX).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError, http.client.HTTPException):
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return status
    return 403 if isinstance(found, dict) and found.get("errors") else status


def clean_results(paths: PodPaths, args: Sequence[str]) -> Answer:
    """`removed` files (`removed_bytes`) of results/, each at the destination as it was; `kept`: what stays and
    why (at most 20 named, `kept_count` in all); `destination`. REFUSED when nothing may be removed."""
    _no_args("clean-results", args)
    from gpuc.instance_side.clean import NotCleaned, answer  # its own code: the sync, only when asked

    try:
        return answer(paths)
    except NotCleaned as exc:
        raise AskError(str(exc), REFUSED) from None


QUESTIONS: dict[str, Callable[[PodPaths, Sequence[str]], Answer]] = {
    "job-state": job_state,
    "log": log,
    "unpack": unpack,
    "missing": missing,
    "key-scope": key_scope,
    "clean-results": clean_results,
}


# -- asking -------------------------------------------------------------------------------------
def answer(argv: Sequence[str], paths: PodPaths) -> tuple[int, Answer]:
    """(exit code, the JSON object to print) for `ask ARGV...`. Never raises."""
    question = argv[0] if argv else ""
    head: Answer = {"ask": question[:64], "v": ASK_VERSION}
    ask = QUESTIONS.get(question)
    if ask is None:
        said = f"unknown question {question[:64]!r}" if question else "no question"
        return BAD_QUESTION, {**head, "error": f"{said}; ask one of: {', '.join(QUESTIONS)}"}
    try:
        return ANSWERED, {**head, **ask(paths, argv[1:])}
    except AskError as exc:
        return exc.code, {**head, "error": str(exc)}
    except Exception as exc:  # never a traceback on stdout: the pod's log gets the details
        _log_failure(paths, question, exc)
        return CANNOT_TELL, {**head, "error": f"{type(exc).__name__} on the pod; details in {paths.log.name}"}


def _log_failure(paths: PodPaths, question: str, exc: Exception) -> None:
    import traceback

    from gpuc.core.clock import SystemClock
    from gpuc.instance_side.podlog import PodLog

    where = traceback.extract_tb(exc.__traceback__)[-1:]
    at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    keys = [os.environ.get(name, "") for name in ("RUNPOD_API_KEY", "CONTAINER_API_KEY", "GPUC_POD_TOKEN")]
    PodLog(paths.log, SystemClock(), role="ask", secrets=keys).line(
        f"ask {question} failed: {type(exc).__name__}: {exc}{at}"
    )


def main(argv: Sequence[str], paths: PodPaths | None = None, out: TextIO | None = None) -> int:
    code, found = answer(argv, paths or PodPaths.from_env())
    line = json.dumps(found, allow_nan=False)
    with contextlib.suppress(OSError, ValueError):  # the ssh went away: no one to answer
        print(line, file=out or sys.stdout, flush=True)
    return code
