"""A re-rented pod booting for real: Vast's onstart (core/bootkit.py) run by /bin/sh in a local sandbox pod's root,
against a stdlib http.server stand-in for the watchdog's /v1/boot (and its heartbeat and event routes), with the
wheel `up` builds (client/onpod/provision.py build_wheel) at a file:// URL, installed offline with this python.

Every process the boot starts carries the world's mark in its environment; `kill_all` SIGKILLs them (as a Vast
pause does), and the fixture does at the end, whatever happened (tests run in parallel under xdist)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from fakes.pod import RecordingFunctions, serving
from gpuc.client.onpod.bundle import build_bundle
from gpuc.core.api import BootAnswer, BootKit, BootRequest
from gpuc.core.bootkit import BOOT_TICKET_ENV, BOOT_URL_ENV, onstart_script
from gpuc.core.models import PodSpec
from gpuc.core.podconfig import PodConfig
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest

MARK_ENV = "GPUC_TEST_BOOT_MARK"
TOKEN = "boot-token-" + "k" * 32
TICKET = "bt1_" + "T1ck3tV4lue" * 4
HF_TOKEN = "hf_" + "S3cretHfValue" * 3


class BootFunctions(RecordingFunctions):
    """/v1/boot answers `answer` once per ticket (a spent ticket: 403, as the watchdog does) or `status`."""

    answer: ClassVar[bytes] = b""
    status: ClassVar[int] = 200
    first: ClassVar[list[int]] = []  # statuses answered before `status`, one per request (a "not yet" 409)
    boots: ClassVar[list[BootRequest]]
    spent: ClassVar[set[str]]
    wheel: ClassVar[bytes] = b""
    boot_file: ClassVar[Path | None] = None
    boot_file_modes: ClassVar[list[int]]  # boot.json's mode while the pod fetched its wheel

    def do_GET(self) -> None:
        """The wheel at an http URL (as a presigned https GET): while the pod fetches it, its boot.json is there."""
        cls = type(self)
        if cls.boot_file is not None and cls.boot_file.exists():
            cls.boot_file_modes.append(cls.boot_file.stat().st_mode & 0o777)
        self.send_response(200)
        self.send_header("Content-Length", str(len(cls.wheel)))
        self.end_headers()
        self.wfile.write(cls.wheel)

    def do_POST(self) -> None:
        if self.path != "/v1/boot":
            super().do_POST()
            return
        cls = type(self)
        request = BootRequest.model_validate_json(self.rfile.read(int(self.headers["Content-Length"])))
        cls.boots.append(request)
        if cls.first:
            status = cls.first.pop(0)
            body = b'{"error": "not yet"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        status = cls.status if request.ticket not in cls.spent else 403
        cls.spent.add(request.ticket)
        body = cls.answer if status == 200 else b'{"error": "no such ticket"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@dataclass
class BootWorld:
    tmp: Path
    url: str
    functions: type[BootFunctions]
    local: LocalProvider
    pod_id: str
    paths: PodPaths
    kit_dir: Path
    bucket: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def dest(self) -> Path:
        return self.bucket / "exp" / "run01"

    def push(self, files: dict[str, bytes]) -> str:
        """A previous attempt's push at the run's destination (files + the push manifest)."""
        for name, data in files.items():
            (self.dest / name).parent.mkdir(parents=True, exist_ok=True)
            (self.dest / name).write_bytes(data)
        listed = {n: (len(d), 1) for n, d in files.items()}
        (self.dest / MANIFEST_NAME).parent.mkdir(parents=True, exist_ok=True)
        (self.dest / MANIFEST_NAME).write_text(PushManifest(f"file://{self.dest}", 1.0, listed).to_json())
        return f"file://{self.dest}"

    def kit(
        self, command: list[str] | None, resume_from: str | None, *, over_http: bool = False, **changes: Any
    ) -> BootAnswer:
        wheel = build_bundle()
        (self.kit_dir / wheel.filename).write_bytes(wheel.data)
        self.functions.wheel, self.functions.boot_file = wheel.data, self.paths.state / "boot.json"
        wheel_url = f"{self.url}/{wheel.filename}" if over_http else f"file://{self.kit_dir / wheel.filename}"
        project = _project_tar({"train.sh": b"echo training\n"})
        (self.kit_dir / "project.tar.gz").write_bytes(project)
        config = PodConfig.for_pod(
            Settings(home=self.local.home, watchdog_url=self.url),
            pod_id=self.pod_id,
            provider="local",
            experiment="exp",
            run_id="run01",
            local_home=str(self.local.home),
        ).model_dump(mode="json")
        config.update(
            heartbeat_interval_s=0.5,
            idle_check_interval_s=0.5,
            simulated_gpu=True,
            results_bucket=f"file://{self.bucket}",
            sync_interval_s=0.0,
            **changes.pop("config", {}),
        )
        kit = BootKit(
            wheel_url=wheel_url,
            wheel_name=wheel.filename,
            wheel_sha256=changes.pop("wheel_sha256", wheel.sha256),
            project_url=f"file://{self.kit_dir / 'project.tar.gz'}",
            project_sha256=hashlib.sha256(project).hexdigest(),
            installer="offline",
            offline_python=sys.executable,
            config=config,
            secrets={"HF_TOKEN": HF_TOKEN},
            command=command,
            job_id="job-0001",
            bootstrap=changes.pop("bootstrap", None),
        )
        answer = BootAnswer(kit=kit, token=TOKEN, claim=None, resume_from=resume_from)
        self.functions.answer = answer.model_dump_json().encode()
        return answer

    def onstart(self) -> None:
        """The container starts: Vast runs the onstart with the instance's env."""
        done = subprocess.run(["/bin/sh", "-c", onstart_script()], env=self.env, timeout=60, capture_output=True)
        assert done.returncode == 0, done.stderr

    def boot_out(self) -> str:
        path = self.paths.state / "boot.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait(self, what: Callable[[], bool], timeout_s: float = 120.0) -> bool:
        until = time.monotonic() + timeout_s
        while time.monotonic() < until:
            if what():
                return True
            time.sleep(0.2)
        return what()

    def marked(self) -> list[int]:
        """The pids of the processes this world's boots started (alive: a killed one not yet reaped aside)."""
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                environ = (proc / "environ").read_bytes().split(b"\0")
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if f"{MARK_ENV}={self.tmp}".encode() in environ and state != "Z":
                pids.append(int(proc.name))
        return pids

    def cmdlines(self) -> list[bytes]:
        out = []
        for pid in self.marked():
            with contextlib.suppress(OSError):
                out.append(Path(f"/proc/{pid}/cmdline").read_bytes())
        return out

    def kill_all(self) -> None:
        """A Vast pause: every process of the container killed, no goodbye; the disk kept."""
        until = time.monotonic() + 20
        while time.monotonic() < until:
            pids = self.marked()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)


def _project_tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@contextlib.contextmanager
def boot_world(tmp: Path) -> Iterator[BootWorld]:
    class Functions(BootFunctions):
        pass

    Functions.token, Functions.status, Functions.first = TOKEN, 200, []
    Functions.reset()
    Functions.boots, Functions.spent, Functions.boot_file_modes = [], set(), []
    home = tmp / "gpuc-home"
    local = LocalProvider(home, settings=Settings(home=home, local_boot_s=0))
    pod = local.create(PodSpec(experiment="exp", run_id="run01", provider="local", gpu_type="sim"))
    paths = local.paths(pod.id)
    bin_dir, kit_dir = tmp / "bin", tmp / "kit"
    bin_dir.mkdir()
    kit_dir.mkdir()
    # The image's python3: this interpreter, outside its venv (no pydantic, no dotenv): the boot's first half
    # must live on the standard library.
    (bin_dir / "python3").symlink_to(sys.executable)
    with serving(Functions, ThreadingHTTPServer) as url:
        world = BootWorld(tmp, url, Functions, local, pod.id, paths, kit_dir, tmp / "bucket")
        env = {k: v for k, v in local.sandbox_env(pod.id).items() if k != "PYTHONPATH"}
        world.env = {
            **env,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "CONTAINER_ID": pod.id,
            BOOT_TICKET_ENV: TICKET,
            BOOT_URL_ENV: url,
            MARK_ENV: str(tmp),
            "KEEP_ALIVE": "1",  # the job's end syncs and keeps the pod: the test reads its disk after
        }
        try:
            yield world
        finally:
            world.kill_all()


def job(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def dumps(value: object) -> str:
    return json.dumps(value)
