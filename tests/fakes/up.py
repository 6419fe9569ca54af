"""Shared by the tests of `up`'s checks before the create (tests/client/test_plan.py, the destination
check in tests/aws/test_destcheck_s3.py): a rented provider whose create is where money would be spent, a
healthy watchdog, and settings with everything a rented `up` needs, so that each test breaks one thing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fakes.ctx import StatusView
from gpuc.client.context import Ctx
from gpuc.client.runs import RunStore
from gpuc.core.api import WIRE_PROTOCOL, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.grantapi import GrantScope
from gpuc.core.models import Balance, Offer, PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import DestroyResult, Provider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr


class Created(ProviderError):
    """Raised by the fakes' create: the test reached the point where money is spent."""


class FakeProvider(Provider):
    """A rented provider answering from memory; `create` records the spec and stops there."""

    def __init__(self, name: str, offers: list[Offer] | None = None) -> None:
        self.name = name
        self._offers = offers or []
        self.created: list[PodSpec] = []
        self.asked: list[str | None] = []

    def offers(self, gpu: str | None = None, interruptible: bool = False) -> list[Offer]:
        self.asked.append(gpu)
        return list(self._offers)

    def create(self, spec: PodSpec) -> Pod:
        self.created.append(spec)
        raise Created("create called", provider=self.name)

    def get(self, pod_id: str) -> Pod | None:
        return None

    def list_pods(self) -> list[Pod]:
        return []

    def stop(self, pod_id: str) -> None:
        raise AssertionError("never")

    def destroy(self, pod_id: str) -> DestroyResult:
        raise AssertionError("never")

    def balance(self) -> Balance:
        raise AssertionError("never")


class HealthyWatchdog(StatusView):
    """The functions as `up` sees them before the create: reachable, reaper fresh."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.results_grant: GrantScope | None = None  # where it grants pods their runs' prefixes (s3://)

    def status(self) -> StatusResponse:
        now = self.clock.now()
        return StatusResponse(
            server_time=now, reaper_last_run=now, reaper_period_s=300, protocol=WIRE_PROTOCOL,
            results_grant=self.results_grant,
        )  # fmt: skip


def make_deps(settings: Settings, provider: Provider, lines: list[str]) -> Ctx:
    clock = FakeClock()
    return Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=clock,
        echo=lines.append,
        watchdog=HealthyWatchdog(clock),  # type: ignore[arg-type]
        providers={provider.name: provider},
    )


def runpod_4090() -> FakeProvider:
    offer = Offer(provider="runpod", id="NVIDIA GeForce RTX 4090", gpu="RTX 4090", price_per_hour=0.74)
    return FakeProvider("runpod", [offer])


PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpucGMtdGVzdC1rZXktbm90LWEtcmVhbC1vbmUx me@laptop"


def rented_settings(tmp_path: Path) -> Settings:
    """Everything a rented `up` needs, so that each test breaks exactly one thing."""
    env_file = tmp_path / ".env"
    env_file.write_text("HF_TOKEN=hf_x\n")
    os.chmod(env_file, 0o600)
    key = tmp_path / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    key.with_name("id_ed25519.pub").write_text(PUBLIC_KEY + "\n")  # handed to a RunPod pod (PUBLIC_KEY)
    results = tmp_path / "results.git"  # a destination that takes the results (core/destcheck.py proves it)
    subprocess.run(["git", "init", "--quiet", "--bare", str(results)], check=True)
    return Settings(
        home=tmp_path / "home",
        env_file=env_file,
        runpod_api_key=SecretStr("rpa_test"),
        vast_api_key=SecretStr("vast_test"),
        admin_token=SecretStr("admin"),
        ssh_key_path=key,
        watchdog_url="https://abc.lambda-url.eu-west-1.on.aws",
        git_remote=str(results),
    )


def nothing_spent(deps: Ctx, provider: FakeProvider) -> bool:
    return provider.created == [] and deps.runs.all() == []
