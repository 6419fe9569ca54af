"""A real S3 API on loopback for the pod's grants, and the watchdog that signs them.

ministack (in the test and rehearse extras) runs as a process with AUTH=true: it checks every SigV4 signature, a
presigned URL's included, and refuses one past its expiry (moto's server checks neither: a forged URL would
pass there and prove nothing). The watchdog holds an IAM user's key that may put, get and list the bucket
(no delete); the pod holds only its token, asks the watchdog for URLs, and uses them with urllib.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from gpuc.core import api
from gpuc.core.podpaths import CLAIM_ENV, TOKEN_ENV, PodPaths
from gpuc.core.podsecrets import render_env_file
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_token
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.instance_side.manifest import ResultsSync
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.sync import make_sync
from gpuc.testkit.s3server import LoopbackS3, s3_server

Ministack = LoopbackS3  # the name the S3 tests import (an explicit export, as mypy --strict wants)

BUCKET = "results"
ADMIN = "admin-token-for-s3-tests-0123456789"
# What the watchdog's key may do: a pod's grants need no more (never a delete).
WATCHDOG_ACTIONS = ["s3:PutObject", "s3:GetObject", "s3:ListBucket", "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts"]  # fmt: skip


@contextmanager
def ministack(work: Path, *, auth: bool = True, **env: str) -> Iterator[Ministack]:
    """Started by pid and stopped by pid (its process group), bound to loopback: testkit/s3server.py, the same
    server `gpuc demo` and the rehearsals put their results on. Its root key (`stack.root`) owns the bucket."""
    with s3_server(work, auth=auth, **env) as stack:
        yield stack


def watchdog_key(stack: Ministack, name: str = "watchdog", actions: list[str] | None = None) -> tuple[str, str]:
    """An IAM user's key, allowed `actions` on the bucket (WATCHDOG_ACTIONS by default)."""
    return stack.user_key(BUCKET, name, tuple(actions or WATCHDOG_ACTIONS))


@dataclass
class GrantWorld:
    """ministack, its bucket, a watchdog on loopback holding `key`, and pods registered with it."""

    stack: Ministack
    key: tuple[str, str]
    home: Path
    prefix: str = "runs"
    watchdog_key: SecretStr | None = None  # claims (functions/claims.py): None, pods register with their own keys
    watchdog: ServerHandle | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def settings(self) -> Settings:
        return Settings(
            home=self.home / "watchdog",
            admin_token=SecretStr(ADMIN),
            results_bucket=f"s3://{BUCKET}/{self.prefix}",
            s3_endpoint_url=self.stack.url,
            s3_access_key_id=SecretStr(self.key[0]),
            s3_secret_access_key=SecretStr(self.key[1]),
            watchdog_key=self.watchdog_key,
        )

    def start(self) -> GrantWorld:
        self.watchdog = start_in_thread(self.settings, port=0)
        return self

    def stop(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None

    @property
    def url(self) -> str:
        assert self.watchdog is not None
        self._url = self.watchdog.url
        return self._url

    def admin(self, method: str, path: str, body: object | None = None) -> httpx.Response:
        return httpx.request(method, self.url + path, json=body, headers={"Authorization": f"Bearer {ADMIN}"},
                             timeout=30)  # fmt: skip

    def register(self, pod_id: str, run_id: str, *, experiment: str = "exp", **fields: object) -> str:
        token = new_token()
        body = api.RegisterRequest.model_validate({
            "pod_id": pod_id, "provider": "runpod", "name": f"gpuc-{run_id}", "experiment": experiment,
            "key": derive_key(token), "price_per_hour": 0.5, "started_at": time.time(),
            "results_at": f"s3://{BUCKET}/{self.prefix}/{experiment}/{run_id}", **fields,
        })  # fmt: skip
        answer = self.admin("POST", "/v1/pods", json.loads(body.model_dump_json()))
        assert answer.status_code == 200, answer.text
        self.tokens[pod_id] = token
        return token

    def pod(self, root: Path, pod_id: str, run_id: str, *, experiment: str = "exp") -> tuple[AgentConfig, PodPaths]:
        """A pod's files as `up` leaves them: its config (no key) and its secrets file (its token only)."""
        paths = PodPaths(root)
        paths.state.mkdir(parents=True, exist_ok=True)
        paths.secrets.write_text(render_env_file({TOKEN_ENV: self.tokens[pod_id]}))
        os.chmod(paths.secrets, 0o600)
        cfg = AgentConfig(
            pod_id=pod_id, provider="runpod", experiment=experiment, run_id=run_id, watchdog_url=self.url,
            results_bucket=f"s3://{BUCKET}/{self.prefix}", s3_endpoint_url=self.stack.url,
        )  # fmt: skip
        return cfg, paths

    def sync(self, root: Path, pod_id: str, run_id: str, *, experiment: str = "exp") -> ResultsSync:
        cfg, paths = self.pod(root, pod_id, run_id, experiment=experiment)
        return make_sync(cfg, {TOKEN_ENV: self.tokens[pod_id]}, paths=paths, environ={})

    def objects(self, prefix: str | None = None) -> dict[str, int]:
        """What the bucket holds under this world's prefix (the bucket is shared by the tests of a process),
        or under `prefix`, as its owner sees it."""
        s3 = self.stack.client("s3")
        found: dict[str, int] = {}
        where = f"{self.prefix}/" if prefix is None else prefix
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=where):
            found.update({str(o["Key"]): int(o["Size"]) for o in page.get("Contents", [])})
        return found


def claim_secrets(token: str, claim: str | None) -> dict[str, str]:
    return {TOKEN_ENV: token, **({CLAIM_ENV: claim} if claim else {})}
