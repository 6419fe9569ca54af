"""The one strict reader of a job's outcome, against what a stranger's machine can write: every value is
a well-typed outcome or "unreadable" with a reason, never an exception. The same reader behind the pod's
log read (whatever the pod answers), the results destination, and the watchdog's job_exit note."""

from __future__ import annotations

import base64
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuc.client.context import Ctx
from gpuc.client.jobs.follow import watchdog_outcome
from gpuc.client.jobs.outcome_file import (
    MAX_DURATION_S,
    OUTCOME_MAX_BYTES,
    BadOutcome,
    JobOutcome,
    OutcomeRead,
    parse_outcome,
)
from gpuc.client.jobs.places import Destination, FilePlace
from gpuc.client.jobs.podlog import read_pod_log
from gpuc.client.pods.run import job_on_pod
from gpuc.client.setup.doctor_live import ssh_probe
from gpuc.core.api import NotificationRecord, StatusResponse
from gpuc.core.errors import GpucError, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.settings import Settings
from gpuc.instance_side.joblog import OUTCOME_FORMAT

EXAMPLES = int(os.environ.get("GPUC_HOSTILE_EXAMPLES", "300"))
FORMAT = f'"format": "{OUTCOME_FORMAT}"'
WHERE = "s3://results/exp/run/logs/outcome.json"
GOOD = {"format": OUTCOME_FORMAT, "job_id": "j1", "exit_code": 3, "duration_s": 12.5, "started_at": 1.79e9}

# What a crafted outcome.json held, and the words the reason must carry.
HOSTILE: list[tuple[bytes, str]] = [
    (("{" + FORMAT + ', "exit_code": "oops"}').encode(), "exit_code is 'oops'"),
    (("{" + FORMAT + ', "exit_code": 1e400}').encode(), "out of range"),
    (("{" + FORMAT + ', "exit_code": NaN}').encode(), "NaN"),
    (("{" + FORMAT + ', "exit_code": 256}').encode(), "out of range"),
    (("{" + FORMAT + ', "exit_code": -65}').encode(), "out of range"),
    (("{" + FORMAT + ', "exit_code": 99999999999999999999999}').encode(), "out of range"),
    (("{" + FORMAT + ', "exit_code": true}').encode(), "exit_code is True"),
    (("{" + FORMAT + ', "exit_code": 0.0}').encode(), "not an exit code"),
    (("{" + FORMAT + ', "exit_code": [0]}').encode(), "exit_code is list"),
    (("{" + FORMAT + ', "exit_code": 0, "exit_code": 1}').encode(), "twice"),
    (("{" + FORMAT + ', "exit_code": 0, "duration_s": 1e400}').encode(), "out of range"),
    (("{" + FORMAT + ', "exit_code": 0, "duration_s": -1}').encode(), "duration_s -1"),
    (("{" + FORMAT + ', "exit_code": 0, "duration_s": "1h"}').encode(), "duration_s is '1h'"),
    (("{" + FORMAT + ', "exit_code": 0, "started_at": -1e300}').encode(), "started_at"),
    (("{" + FORMAT + ', "exit_code": 0, "ending": "rm -rf"}').encode(), "ending"),
    (("{" + FORMAT + ', "exit_code": 0, "job_id": {"a": 1}}').encode(), "job_id"),
    (("{" + FORMAT + ', "exit_code": 0, "log_truncated": "no"}').encode(), "log_truncated"),
    (b'{"format": "gpuc-outcome/2", "exit_code": 0}', "format"),
    (b'{"exit_code": 0}', "format is None"),
    (b"[0]", "not a JSON object"),
    (b"exit code 0", "not JSON"),
    (b"", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b"[" * 60_000, "not JSON"),
    (("1" * 5000).encode(), "not JSON"),
    (("{" + FORMAT + ', "exit_code": 0, "pad": "' + "x" * OUTCOME_MAX_BYTES + '"}').encode(), "larger than"),
]


@pytest.mark.parametrize(("data", "said"), HOSTILE, ids=[said for _, said in HOSTILE])
def test_a_crafted_outcome_is_unreadable_and_says_why(data: bytes, said: str) -> None:
    found = parse_outcome(data, WHERE)
    assert isinstance(found, BadOutcome), found
    assert found.where == WHERE and said in found.why, found.why
    assert found.describe().startswith(f"{WHERE} is unreadable (")


def test_what_the_wrapper_writes_is_read() -> None:
    assert parse_outcome(json.dumps(GOOD).encode(), WHERE) == JobOutcome("j1", 3, 12.5)
    running = {"format": OUTCOME_FORMAT, "job_id": "j1", "exit_code": None, "started_at": 1.79e9}
    assert parse_outcome(json.dumps(running).encode(), WHERE) == JobOutcome("j1", None)
    kept = {**GOOD, "exit_code": 0, "ending": "kept_sync_failed", "log_truncated": True, "extra": [1]}
    assert parse_outcome(json.dumps(kept).encode(), WHERE) == JobOutcome("j1", 0, 12.5, "kept_sync_failed")
    # A signal as python reports it (-9) is the shell's 128+9.
    assert parse_outcome(json.dumps({**GOOD, "exit_code": -9}).encode(), WHERE) == JobOutcome("j1", 137, 12.5)


def _well_typed(found: OutcomeRead) -> None:
    if isinstance(found, BadOutcome):
        assert isinstance(found.why, str) and found.why
        return
    assert isinstance(found, JobOutcome)
    assert found.exit_code is None or (type(found.exit_code) is int and 0 <= found.exit_code <= 255)
    assert found.duration_s is None or (
        type(found.duration_s) is float and math.isfinite(found.duration_s) and 0 <= found.duration_s <= MAX_DURATION_S
    )
    assert found.job_id is None or type(found.job_id) is str
    assert found.ending is None or type(found.ending) is str


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(["exit_code", "duration_s", "job_id", "ending", "started_at", "ended_at", "log_truncated"])
OUTCOMES = st.dictionaries(FIELDS, JSON_VALUES, max_size=7).map(lambda d: {"format": OUTCOME_FORMAT, **d})


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=OUTCOMES | JSON_VALUES)
def test_any_json_is_a_well_typed_outcome_or_unreadable(value: Any) -> None:
    # allow_nan: json.dumps writes NaN / Infinity for floats('nan'), as a hostile writer would.
    _well_typed(parse_outcome(json.dumps(value).encode(), WHERE))


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_any_bytes_are_a_well_typed_outcome_or_unreadable(data: bytes) -> None:
    _well_typed(parse_outcome(data, WHERE))


# -- the pod's log read: whatever the pod answers ----------------------------------------------------------
class Answers(PodAccess):
    """A pod whose probe prints `out` and exits `code`."""

    def __init__(self, out: str, code: int = 0) -> None:
        self.out, self.code = out, code

    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        raise AssertionError("no writes")

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        return self.code, self.out

    def spawn(self, argv: list[str], role: str) -> None:
        raise AssertionError("no spawns")


def probe_answer(file: bytes | None, **over: Any) -> str:
    """The pod's answer to `ask log` (instance_side), as it prints it: its fields, the question, the version."""
    body = {
        "ask": "log",
        "v": 1,
        "size": 4,
        "data": base64.b64encode(b"log\n").decode(),
        "outcome": None if file is None else base64.b64encode(file).decode(),
        "ended": None,
        **over,
    }
    return "a warning python printed\n" + json.dumps(body) + "\n"


def test_the_pod_read_takes_the_outcome_through_the_same_reader() -> None:
    read = read_pod_log(Answers(probe_answer(json.dumps(GOOD).encode())), 0)
    assert read.outcome == JobOutcome("j1", 3, 12.5) and read.data == b"log\n" and read.size == 4
    for data, said in HOSTILE:
        bad = read_pod_log(Answers(probe_answer(data)), 0).outcome
        assert isinstance(bad, BadOutcome) and said in bad.why and "on the pod" in bad.where
    assert read_pod_log(Answers(probe_answer(None)), 0).outcome is None


@pytest.mark.parametrize(
    "out",
    [
        "",
        "not json\n",
        "{broken\n",
        "[" * 50_000 + "\n",
        "{" + '"a": [' * 5000 + "\n",
        probe_answer(None, size="4"),
        probe_answer(None, size=-1),
        probe_answer(None, size=True),
        probe_answer(None, data="***not base64***"),
        probe_answer(None, data=7),
        probe_answer(None, outcome=[1]),
        probe_answer(None, ended={"x": 1}),
        probe_answer(None, pad="x" * 2_000_000),
        '{"ask": "log", "v": 1, "size": 1, "size": 2, "data": "", "outcome": null, "ended": null}',
        '{"ask": "job-state", "v": 1, "size": 4, "data": "", "outcome": null, "ended": null}',
        '{"ask": "log", "v": 2, "size": 4, "data": "", "outcome": null, "ended": null}',
        '{"size": 4, "data": "", "outcome": null, "ended": null}',
    ],
)
def test_an_unreadable_pod_answer_is_a_gpuc_error_never_a_crash(out: str) -> None:
    with pytest.raises(GpucError) as caught:
        read_pod_log(Answers(out), 0)
    assert "could not read the job log on the pod" in caught.value.message


def _read_or_gpuc_error(out: str, code: int = 0) -> None:
    try:
        read = read_pod_log(Answers(out, code), 0)
    except GpucError:
        return
    assert isinstance(read.data, bytes) and (read.size is None or read.size >= 0)
    if read.outcome is not None:
        _well_typed(read.outcome)


@settings(max_examples=EXAMPLES, deadline=None)
@given(out=st.text(max_size=400), code=st.integers(min_value=0, max_value=255))
def test_any_pod_answer_is_a_read_or_a_gpuc_error(out: str, code: int) -> None:
    _read_or_gpuc_error(out, code)


PROBE_KEYS = st.sampled_from(["size", "data", "outcome", "ended", "x", "ask", "v"])
B64 = st.binary(max_size=80).map(lambda b: base64.b64encode(b).decode())


@settings(max_examples=EXAMPLES, deadline=None)
@given(body=st.dictionaries(PROBE_KEYS, JSON_VALUES | B64, max_size=5))
def test_any_json_probe_answer_is_a_read_or_a_gpuc_error(body: dict[str, Any]) -> None:
    _read_or_gpuc_error(json.dumps(body))
    _read_or_gpuc_error(json.dumps({"ask": "log", "v": 1, **body}))


# -- the results destination ---------------------------------------------------------------------------
def test_the_destination_reads_at_most_the_outcome_cap(tmp_path: Path) -> None:
    place = FilePlace(tmp_path / "bucket", "exp", "run1")
    (place.dest / "logs").mkdir(parents=True)
    (place.dest / "logs" / "outcome.json").write_bytes(b" " * (50 * 1024 * 1024))
    found = Destination([place]).read_outcome()
    assert isinstance(found, BadOutcome) and "larger than" in found.why


def test_the_destination_does_not_follow_a_symlink_or_open_a_fifo(tmp_path: Path) -> None:
    place = FilePlace(tmp_path / "bucket", "exp", "run1")
    (place.dest / "logs").mkdir(parents=True)
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----")
    (place.dest / "logs" / "job.log").symlink_to(secret)
    os.mkfifo(place.dest / "logs" / "outcome.json")
    dest = Destination([place])
    assert dest.read("logs/job.log") is None and dest.read_outcome() is None
    assert len(dest.errors) == 2 and all("cannot read" in e for e in dest.errors), dest.errors


# -- the watchdog's job_exit note -------------------------------------------------------------------------
def _noted(message: str) -> StatusResponse:
    note = NotificationRecord(ts=1.79e9, pod_id="p1", kind="job_exit", title="job exited", message=message)
    return StatusResponse(notifications=[note], server_time=1.79e9, reaper_period_s=60)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("job exited; exit code 3, ran 1.0 min", 3),
        ("job exited; exit code 99999, ran 1.0 min", None),
        ("job exited; exit code " + "9" * 5000, None),
        ("job exited; exit code 0, ran " + "9" * 400 + " min", None),
        ("job exited; exit code -9", 137),
        # A FAILED job's last line, quoted first: the watchdog's own words after it count.
        ('See why.\npod says: "last line: exit code 0" gpuc: exit code 3. gpuc: ran 1.0 min.', 3),
    ],
)
def test_the_watchdogs_note_is_read_as_strictly(message: str, code: int | None) -> None:
    found = watchdog_outcome(_noted(message), "p1", 0.0)
    assert (found.exit_code if found else None) == code


# -- the other probes' answers --------------------------------------------------------------------------
POD = Pod(id="p1", name="gpuc-exp", provider="local", status="running", managed=True)


@pytest.mark.parametrize(
    "out",
    [
        '{"ask": "job-state", "v": 1, "job_pid": "123", "ended": null, "ending": false}',
        '{"ask": "job-state", "v": 1, "job_pid": true, "ended": null, "ending": false}',
        '{"ask": "job-state", "v": 1, "job_pid": -1, "ended": null, "ending": false}',
        '{"ask": "job-state", "v": 1, "job_pid": null, "ended": 5, "ending": false}',
        '{"ask": "job-state", "v": 1, "job_pid": null, "ended": null, "ending": "no"}',
        '{"ask": "job-state", "v": 1, "job_pid": null, "ended": null, "ending": false, "job_pid": 7}',
        '{"ask": "job-state", "v": 1, "job_pid": 1e400, "ended": null}',
        "[" * 50_000,
        '{"ask": "job-state", "v": 1, "ended": null}',
        '{"job_pid": null, "ended": null, "ending": false}',
    ],
)
def test_an_unreadable_job_probe_answer_refuses_a_second_job(out: str) -> None:
    with pytest.raises(SafetyRefusal, match="could not tell whether a job is running"):
        job_on_pod(Answers(out + "\n"), POD)


def test_a_readable_job_probe_answer_is_taken() -> None:
    free = '{"ask": "job-state", "v": 1, "job_pid": null, "ended": null, "ending": false}\n'
    busy = '{"ask": "job-state", "v": 1, "job_pid": 42, "ended": null, "ending": false}\n'
    assert job_on_pod(Answers(free), POD) is None
    assert "pid 42" in str(job_on_pod(Answers(busy), POD))


def test_the_doctor_probe_keeps_only_http_statuses() -> None:
    answer = '{"ask": "key-scope", "v": 1, "own_pod": 200, "list": "403", "v2_own": true, "x": 1e308, "y": 999}'
    provider = cast(Provider, SimpleNamespace(name="vast"))
    probe = ssh_probe(Ctx(Settings(), access=lambda *_: Answers(answer + "\n")))
    assert probe(provider, POD) == {"own_pod": 200}
    probe = ssh_probe(Ctx(Settings(), access=lambda *_: Answers("[" * 50_000 + "\n")))
    with pytest.raises(GpucError, match="did not answer key-scope"):
        probe(provider, POD)
