"""The laptop's one reader of the pod's answers (client/onpod/ask.py), against recorded answers: what
`python -m gpuc.instance_side ask QUESTION` prints on a pod (one JSON line: its fields, "ask", "v"), what a
pod started by an older gpuc prints (argparse's "invalid choice: 'ask'"), and what a stranger's machine
may print instead. The pod's side answering for real is tested end to end (tests/client/test_podlife.py,
test_upload.py, tests/providers/test_live_doctor.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from gpuc.client.cli import report_error
from gpuc.client.jobs.podlog import read_pod_log
from gpuc.client.onpod import ask
from gpuc.client.onpod.script import missing_on_pod
from gpuc.client.onpod.upload import Bundle, upload
from gpuc.client.pods.run import job_on_pod
from gpuc.core.errors import GpucError, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.core.providers.base import PodAccess

POD = Pod(id="p1", name="gpuc-exp", provider="local", status="running", managed=True)
# What a pod whose gpuc predates `ask` prints (python 3.11's argparse), on stderr, with exit 2.
OLDER = (
    "usage: python -m gpuc.instance_side [-h] {agent,run,sync,bootstrap,verify} ...\n"
    "python -m gpuc.instance_side: error: argument command: invalid choice: 'ask' "
    "(choose from 'agent', 'run', 'sync', 'bootstrap', 'verify')\n"
)


class Pod1(PodAccess):
    """A pod that answers every command with `out` and `code`, and records what it was asked."""

    def __init__(self, out: str, code: int = 0) -> None:
        self.out, self.code = out, code
        self.asked: list[list[str]] = []
        self.files: dict[str, bytes] = {}

    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        self.files[path] = data

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        self.asked.append(argv)
        return self.code, self.out

    def spawn(self, argv: list[str], role: str) -> None:
        raise AssertionError("asking starts nothing")


def answer(question: str, **fields: Any) -> str:
    """The pod's answer line, after a warning its python printed first."""
    return "DeprecationWarning: something the image's python says\n" + json.dumps({"ask": question, "v": 1, **fields})


def test_each_question_is_asked_in_real_code_not_a_string_script() -> None:
    pod = Pod1(answer("job-state", job_pid=None, ended=None, ending=False))
    ask.job_state(pod)
    assert pod.asked == [["python", "-m", "gpuc.instance_side", "ask", "job-state"]]
    pod = Pod1(answer("log", size=0, data="", outcome=None, ended=None))
    ask.read_log(pod, 10, 20, 30)
    assert pod.asked == [["python", "-m", "gpuc.instance_side", "ask", "log", "10", "20", "30"]]
    pod = Pod1(answer("missing", missing=[], cwd="/workspace"))
    ask.missing(pod, None, ["train.py"])
    assert pod.asked == [["python", "-m", "gpuc.instance_side", "ask", "missing", "", "train.py"]]


def test_recorded_answers_are_read_into_their_types() -> None:
    state = ask.job_state(Pod1(answer("job-state", job_pid=4242, ended=None, ending=False)))
    assert state == ask.JobState(job_pid=4242, ended=None, ending=False)
    log = ask.read_log(
        Pod1(answer("log", size=5, data=base64.b64encode(b"hi\n\xff!").decode(), outcome=None, ended="p1")), 0, 3, 9
    )
    assert log == ask.LogAnswer(data=b"hi\n", size=5, outcome=None, ended="p1"), "at most what was asked"
    assert ask.unpack(Pod1(answer("unpack", files=3, workspace="/workspace")), "ab" * 32) == ask.Unpacked(
        3, "/workspace"
    )
    assert ask.missing(Pod1(answer("missing", missing=["torchrun", "x.py"], cwd="/w")), "torchrun", []) == [
        "torchrun",
        "x.py",
    ]
    scope = ask.key_scope(Pod1(answer("key-scope", own_pod=200, list=403, v2_own=None, odd="x", big=700)))
    assert scope == {"own_pod": 200, "list": 403}, "statuses only, nothing the pod adds"


@pytest.mark.parametrize(
    "out",
    [
        "",
        "Traceback (most recent call last):\n  ...\nModuleNotFoundError: No module named 'gpuc'\n",
        json.dumps({"job_pid": None, "ended": None, "ending": False}),  # no question, no version
        json.dumps({"ask": "log", "v": 1, "job_pid": None, "ended": None, "ending": False}),  # another question's
        json.dumps({"ask": "job-state", "v": 2, "job_pid": None, "ended": None, "ending": False}),  # a newer one
        json.dumps({"ask": "job-state", "v": 1, "job_pid": "7", "ended": None, "ending": False}),
        '{"ask": "job-state", "v": 1, "ask": "job-state", "job_pid": null, "ended": null, "ending": false}',
        "[" * 50_000,
    ],
)
def test_anything_else_is_no_answer(out: str) -> None:
    with pytest.raises(ask.PodAnswerError):
        ask.job_state(Pod1(out))


def test_a_refused_question_carries_the_pods_reason(tmp_path: Path) -> None:
    bad = Pod1(json.dumps({"ask": "log", "v": 1, "error": "OFFSET must be a number"}), code=2)
    with pytest.raises(ask.PodAnswerError) as refused:
        ask.read_log(bad, 0, 1, 1)
    assert refused.value.error == "OFFSET must be a number" and "could not answer log" in refused.value.message
    damaged = Pod1(json.dumps({"ask": "unpack", "v": 1, "error": "the upload arrived damaged"}), code=3)
    with pytest.raises(GpucError, match="unpacking the project on the pod failed: the upload arrived damaged"):
        upload(damaged, Bundle(root=tmp_path, how="folder walk"), lambda _: None)


def test_a_pod_of_an_older_gpuc_is_said_as_such_never_taken_for_a_reading() -> None:
    older = Pod1(OLDER, code=2)
    for call in (
        lambda: ask.job_state(older),
        lambda: ask.read_log(older, 0, 1, 1),
        lambda: ask.unpack(older, "00"),
        lambda: ask.missing(older, "python", ["x.py"]),
        lambda: ask.key_scope(older),
    ):
        with pytest.raises(ask.OlderPod) as caught:
            call()
        assert "older gpuc" in caught.value.message and "`gpuc down` it and `gpuc up` again" in caught.value.message
    # Not "no job is running" (a second job would destroy the pod under the first), not a retry loop:
    with pytest.raises(ask.OlderPod):
        job_on_pod(older, POD)
    with pytest.raises(ask.OlderPod):
        read_pod_log(older, 0)
    with pytest.raises(ask.OlderPod):
        missing_on_pod(older, ["python", "train.py"])


def test_the_older_pod_is_one_line_with_its_fix(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ask.OlderPod) as caught:
        job_on_pod(Pod1(OLDER, code=2), POD)
    assert report_error(caught.value) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: this pod runs an older gpuc") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2 and "fix: every `gpuc up` installs" in err


def test_a_job_state_that_cannot_be_read_refuses_a_second_job() -> None:
    with pytest.raises(SafetyRefusal, match="could not tell whether a job is running on p1"):
        job_on_pod(Pod1("{}"), POD)
