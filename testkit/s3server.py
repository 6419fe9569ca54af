"""A real S3 API on loopback: the bucket behind `gpuc demo`, the rehearsals and the grants tests.

ministack (the `rehearse` and `test` extras) runs as a process of its own with AUTH on: it checks every SigV4
signature, a presigned URL's included, and refuses one past its expiry, so a pod's grant is proven against a
store that says no (moto's server checks neither: a URL bent to another run's object would pass there and
prove nothing). It starts in under a second. Its root key is random per start (nothing else on the machine
can read the bucket with ministack's default `test`), and the laptop and the watchdog get an IAM user's key
allowed what gpuc asks of a results key and nothing more (docs/secrets.md): put, get, list, the multipart
upload's abort and parts, and delete (the destination probe's removal, the boot kit's at the run's end;
the pods never get a key at all).

The process is started by pid in a session of its own and stopped by that pid's group; it also ends by
itself when the process that started it goes away (a SIGKILLed rehearsal leaves no S3 server behind).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpuc.core.errors import GpucError

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
REGION = "us-east-1"
# What the laptop's and the watchdog's key may do on the bucket (docs/secrets.md, plus the delete the laptop's
# probe and kit removal use): a pod's grants need no more, and the pod holds none of it.
RESULTS_ACTIONS = (
    "s3:PutObject", "s3:GetObject", "s3:ListBucket", "s3:DeleteObject", "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
)  # fmt: skip
# ministack's own process, with a watch on the one that started it: a parent gone (a kill -9 of the rehearsal)
# takes it down within a second, so no S3 server outlives what it served.
_LAUNCH = """
import os, sys, threading, time
parent = int(sys.argv[1])
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["ministack"]
from ministack.app import main
main()
"""


class S3Unavailable(GpucError):
    """No S3 server to put the demo's results on: ministack is not installed, or did not start (its log says)."""


def require_s3() -> None:
    """Says what to install, before anything starts, when ministack is missing."""
    if importlib.util.find_spec("ministack") is None:
        raise S3Unavailable(
            "ministack is missing: the demo and the rehearsals put their results on an S3 API on loopback",
            hint="install the rehearsal's extra: pip install 'gpuc[rehearse]' (in a clone: make demo installs it, "
            "or .venv/bin/pip install -e '.[rehearse]')",
        )


@dataclass
class LoopbackS3:
    url: str
    root: tuple[str, str]  # the bucket owner's key: the tests' reads, never the laptop's or the watchdog's
    proc: subprocess.Popen[bytes] = field(repr=False)
    log: Path
    data: Path | None = None  # where the objects are kept on disk (S3_PERSIST), or None: in memory only

    def client(self, service: str = "s3", keys: tuple[str, str] | None = None) -> Any:
        import boto3

        key_id, secret = keys or self.root
        return boto3.client(  # type: ignore[call-overload]
            service, endpoint_url=self.url, region_name=REGION, aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        )  # fmt: skip

    def make_bucket(self, bucket: str) -> None:
        s3 = self.client("s3")
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou, s3.exceptions.BucketAlreadyExists):
            s3.create_bucket(Bucket=bucket)

    def user_key(self, bucket: str, name: str = "gpuc", actions: tuple[str, ...] = RESULTS_ACTIONS) -> tuple[str, str]:
        """An IAM user's key allowed `actions` on `bucket` and its objects, and nothing else."""
        iam = self.client("iam")
        with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
            iam.create_user(UserName=name)
        policy = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": list(actions),
             "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]},
        ]}  # fmt: skip
        iam.put_user_policy(UserName=name, PolicyName="results", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return str(key["AccessKeyId"]), str(key["SecretAccessKey"])

    def objects(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Every object under `prefix`, as the bucket's owner lists it: key -> size."""
        found: dict[str, int] = {}
        for page in self.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            found.update({str(o["Key"]): int(o["Size"]) for o in page.get("Contents", [])})
        return found

    def stop(self, *, at_once: bool = False) -> None:
        """Its process group ended: SIGTERM (it writes what it holds), or SIGKILL `at_once` (a demo's throwaway
        bucket: nothing in it is kept); either way waited for, so nothing is left behind."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL if at_once else signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_s3(work: Path, *, persist: Path | None = None, auth: bool = True, **env: str) -> LoopbackS3:
    """ministack on a free loopback port, its log (and scratch files) in `work`; with `persist`, the objects
    are written under that folder too (they outlive the server: a rehearsal's bucket can be looked at after)."""
    require_s3()
    work.mkdir(parents=True, exist_ok=True, mode=0o700)
    root = ("ROOT" + secrets.token_hex(8).upper(), secrets.token_urlsafe(24))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUC_", "S3_"))}
    environ.update(
        BIND_HOST="127.0.0.1", MINISTACK_HOST="127.0.0.1", TMPDIR=str(work), IOT_MTLS_ENABLED="0",
        AUTH="true" if auth else "false", AWS_ACCESS_KEY_ID=root[0], AWS_SECRET_ACCESS_KEY=root[1],
        LOG_LEVEL="WARNING", PYTHONWARNINGS="ignore", **env,
    )  # fmt: skip
    if persist is not None:
        persist.mkdir(parents=True, exist_ok=True, mode=0o700)
        environ.update(S3_PERSIST="1", S3_DATA_DIR=str(persist))
    log_path = work / "s3.log"
    for _ in range(3):  # a free port can be taken between the probe and the bind: another one then
        port = free_port()
        environ["GATEWAY_PORT"] = str(port)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, str(os.getpid())], env=environ, cwd=work, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        server = LoopbackS3(f"http://127.0.0.1:{port}", root, proc, log_path, persist)
        import boto3  # noqa: F401  (~0.5 s, needed next: loaded while ministack starts in its own process)

        if _ready(server):
            return server
        server.stop()
    tail = log_path.read_text(errors="replace")[-1500:]
    raise S3Unavailable("the loopback S3 server (ministack) did not start", hint=f"its log {log_path} ends:\n{tail}")


def _ready(server: LoopbackS3) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return False
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/_ministack/health", timeout=2).status_code < 500:
                return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def s3_server(work: Path, **kwargs: Any) -> Iterator[LoopbackS3]:
    server = start_s3(work, **kwargs)
    try:
        yield server
    finally:
        server.stop()


def results_env(server: LoopbackS3, bucket: str, prefix: str = "results") -> dict[str, str]:
    """The bucket made, and the settings of an s3:// results destination at it, as a user sets a real one: the
    key (the laptop's and the watchdog's, never a pod's) an IAM user's that may reach this bucket only."""
    server.make_bucket(bucket)
    key_id, secret = server.user_key(bucket)
    return {
        "GPUC_RESULTS_BUCKET": f"s3://{bucket}/{prefix}",
        "GPUC_S3_ENDPOINT_URL": server.url,
        "GPUC_S3_ACCESS_KEY_ID": key_id,
        "GPUC_S3_SECRET_ACCESS_KEY": secret,
    }
