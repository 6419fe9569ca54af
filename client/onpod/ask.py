"""Asking a pod: the laptop's half of `python -m gpuc.instance_side ask QUESTION [ARGS]`.

The pod answers with the code that runs there (instance_side), one JSON line: the fields of its answer,
plus `"ask": QUESTION` and `"v": 1`. `ask_pod` is the one reader of that line, strict: the last line that
starts with `{` (a pod's python may warn before it) through core/podjson.py, and only when it names the
question asked and this version. The typed calls below check each field's type: everything a pod says is
its word, and a pod on Vast is a stranger's machine.

A pod started by a gpuc older than `ask` answers with argparse's "invalid choice: 'ask'": that is said
as such (`gpuc down` it and `gpuc up` again: the wheel is rebuilt on every `up`), never taken for a
reading.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuc.core.errors import GpucError
from gpuc.core.podjson import Unreadable, last_json_line
from gpuc.core.providers.base import PodAccess

VERSION = 1
ASK = ["python", "-m", "gpuc.instance_side", "ask"]
OLDER_GPUC = "invalid choice: 'ask'"  # argparse, on a pod whose gpuc predates `ask`
ERROR_MAX = 300
ANSWER_TIMEOUT_S = 60.0
UNPACK_TIMEOUT_S = 600.0
CLEAN_TIMEOUT_S = 900.0  # a push of what changed since the job's end first (usually nothing), then the removal
KEY_SCOPE_TIMEOUT_S = 90.0


class PodAnswerError(GpucError):
    """The pod did not answer the question, or answered what cannot be read. `error` is the pod's own
    reason when it gave one (a damaged upload, say), cleaned and cut; None otherwise."""

    def __init__(self, message: str, *, error: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.error = error


ACTING = frozenset({"unpack", "clean-results"})


class OlderPod(PodAnswerError):
    """The pod's gpuc predates `ask`."""


def ask_pod(access: PodAccess, argv: Sequence[str], timeout_s: float = ANSWER_TIMEOUT_S) -> dict[str, Any]:
    """Ask the pod `argv` (the question, then its arguments); its answer's fields. Raises OlderPod for a
    pod without `ask`, PodAnswerError when it did not answer (with its reason when it gave one)."""
    question = argv[0]
    # Every question only looks, and ssh may retry it after its own connection failure; `unpack` writes
    # the workspace and goes through `run`, exactly once.
    send = access.run if question in ACTING else access.read
    code, out = send([*ASK, *argv], timeout_s=timeout_s)
    if OLDER_GPUC in out:
        raise OlderPod(
            f"this pod runs an older gpuc (it cannot answer `ask {question}`): `gpuc down` it and `gpuc up` again",
            hint="every `gpuc up` installs the gpuc of this laptop on the pod",
        )
    try:
        found: dict[str, Any] = last_json_line(out)
        if found.get("ask") != question or found.get("v") != VERSION:
            raise Unreadable(f"not an answer to {question} (v{VERSION})")
    except Unreadable as exc:
        raise PodAnswerError(f"the pod did not answer {question} (exit {code}: {exc})") from None
    error = found.get("error")
    if code != 0 or error is not None:
        reason = str(error)[:ERROR_MAX] if error is not None else None
        raise PodAnswerError(f"the pod could not answer {question}: {reason or f'exit {code}'}", error=reason)
    return found


def _text(value: object, most: int = 256) -> bool:
    return isinstance(value, str) and len(value) <= most


def _size(value: object) -> bool:
    return type(value) is int and value >= 0


def _base64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise Unreadable(f"{what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise Unreadable(f"{what} is not base64 text") from None


def _unreadable(question: str, exc: Unreadable) -> PodAnswerError:
    return PodAnswerError(
        f"the pod answered {question} with something unreadable ({exc})", hint="is gpuc the same version there?"
    )


# -- job-state: is a job under the wrapper there, is the pod ending -------------------------------------
@dataclass(frozen=True)
class JobState:
    job_pid: int | None  # the job's pid while it runs (a pid reused since is not taken for it)
    ended: str | None  # the `ended` marker's text: the pod's ending is done, or under way
    ending: bool  # the wrapper holds end.lock: the job exited, its sync and destroy are under way


def job_state(access: PodAccess) -> JobState:
    found = ask_pod(access, ["job-state"])
    pid, ended, ending = found.get("job_pid", False), found.get("ended", False), found.get("ending", False)
    if not (
        (pid is None or (type(pid) is int and pid > 0)) and (ended is None or _text(ended)) and type(ending) is bool
    ):
        raise _unreadable("job-state", Unreadable("a field is not of its type"))
    return JobState(job_pid=pid, ended=ended, ending=ending)


# -- log: the job log from an offset, the outcome file's bytes, the end marker -----------------------------
@dataclass(frozen=True)
class LogAnswer:
    data: bytes
    size: int | None  # None: no job log on the pod (yet)
    outcome: bytes | None  # the outcome file as it holds it (its one strict reader parses it); None: none yet
    ended: str | None


def read_log(access: PodAccess, offset: int, most: int, outcome_most: int) -> LogAnswer:
    """One read of the pod's job log. Bytes travel base64-encoded: the job's output need not be UTF-8."""
    found = ask_pod(access, ["log", str(offset), str(most), str(outcome_most)])
    try:
        size, ended, outcome = found.get("size"), found.get("ended"), found.get("outcome")
        if size is not None and not _size(size):
            raise Unreadable("its log size is not a size")
        if ended is not None and not _text(ended):
            raise Unreadable("its end marker is not a short text")
        data = _base64(found.get("data"), "its log data")[:most]
        kept = None if outcome is None else _base64(outcome, "its outcome")[:outcome_most]
    except Unreadable as exc:
        raise _unreadable("log", exc) from None
    return LogAnswer(data=data, size=size, outcome=kept, ended=ended)


# -- unpack: the uploaded parts joined, checked and unpacked into the workspace ----------------------------
@dataclass(frozen=True)
class Unpacked:
    files: int
    workspace: str


def unpack(access: PodAccess, digest: str, timeout_s: float = UNPACK_TIMEOUT_S) -> Unpacked:
    """The parts under the pod's .gpuc/upload joined, checked against `digest`, unpacked into the workspace
    (no member out of it), then removed. A damaged upload is the pod's error (PodAnswerError.error)."""
    found = ask_pod(access, ["unpack", digest], timeout_s=timeout_s)
    files, workspace = found.get("files"), found.get("workspace")
    if not (_size(files) and _text(workspace, 4096)):
        raise _unreadable("unpack", Unreadable("a field is not of its type"))
    assert isinstance(files, int) and isinstance(workspace, str)
    return Unpacked(files=files, workspace=workspace)


# -- missing: which of the program and files a command names the pod lacks (where the job runs) ----------
def missing(access: PodAccess, program: str | None, files: Sequence[str]) -> list[str]:
    found = ask_pod(access, ["missing", program or "", *files])
    names = found.get("missing")
    if not (isinstance(names, list) and all(_text(n, 4096) for n in names)):
        raise _unreadable("missing", Unreadable("its list is not a list of names"))
    return [str(n) for n in names]


# -- key-scope: what the pod-scoped key may read (statuses only, never a body or a key) --------------------
def key_scope(access: PodAccess) -> dict[str, int]:
    """HTTP statuses by name (own_pod, list, v2_own); a call that got no status is left out."""
    found = ask_pod(access, ["key-scope"], timeout_s=KEY_SCOPE_TIMEOUT_S)
    return {k: v for k, v in found.items() if k not in ("ask", "v") and type(v) is int and 100 <= v <= 599}


# -- clean-results: results/ pushed, then emptied of what the destination holds (`gpuc run --clean`) -----------
@dataclass(frozen=True)
class Cleaned:
    removed: int
    removed_bytes: int
    kept: list[str]  # what stays, and why (at most 20 named)
    kept_count: int
    destination: str


def clean_results(access: PodAccess) -> Cleaned:
    """Ask the pod to push results/ and remove what the destination holds as it is (instance_side/clean.py).
    PodAnswerError with the pod's reason when it removed nothing (a failed push, no destination, a job)."""
    found = ask_pod(access, ["clean-results"], timeout_s=CLEAN_TIMEOUT_S)
    removed, size, kept, count, where = (
        found.get("removed"),
        found.get("removed_bytes"),
        found.get("kept"),
        found.get("kept_count"),
        found.get("destination"),
    )
    if not (
        _size(removed)
        and _size(size)
        and _size(count)
        and _text(where, 300)
        and isinstance(kept, list)
        and all(_text(k, 300) for k in kept)
    ):
        raise _unreadable("clean-results", Unreadable("a field is not of its type"))
    assert isinstance(removed, int) and isinstance(size, int) and isinstance(count, int) and isinstance(where, str)
    return Cleaned(removed, size, [str(k) for k in kept][:20], count, where)
