"""Shared by the reconcile tests: one provider's emulator over real HTTP, a gpuc client of it, the ledger gpuc
writes, and the `gpuc ledger reconcile` command run the way a user runs it."""

from __future__ import annotations

import json
import os
from itertools import count
from types import TracebackType
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpuc.client.cli import cli
from gpuc.core.clock import FakeClock, parse_iso
from gpuc.core.ledger.store import Ledger
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_billing import RunPodBilling
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_billing import VastBilling
from gpuc.core.settingsload import load_settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

# A month safely in the past: the CLI's billing clients read the wall clock and never ask for the future.
T0 = parse_iso("2025-09-03T10:00:00Z")
MONTH = "2025-09"
HOUR = 3600.0
_run_ids = count(1)


class World:
    """A provider account (its emulator), the gpuc client that rents from it, and the user's ledger."""

    def __init__(self, name: str, server: EmulatorServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
        self.name = name
        self.server = server
        self.clock = clock
        self.env = server.client_env()
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        self.ledger = Ledger(load_settings().ledger)
        self.provider: RunPodProvider | VastProvider = self._client()
        self.last_price = 0.0  # $/h of the last pod rented: what a lost row's pod is billed at

    @property
    def emulator(self) -> RunPodEmulator | VastEmulator:
        emulator = self.server.emulator
        assert isinstance(emulator, RunPodEmulator | VastEmulator)
        return emulator

    @property
    def key(self) -> str:
        return self.env["RUNPOD_API_KEY" if self.name == "runpod" else "VAST_API_KEY"]

    def _client(self) -> RunPodProvider | VastProvider:
        if self.name == "runpod":
            return RunPodProvider(
                self.key,
                graphql_url=self.env["GPUC_RUNPOD_GRAPHQL_URL"],
                rest_url=self.env["GPUC_RUNPOD_REST_URL"],
                clock=self.clock,
                backoff=zero_backoff,
            )
        return VastProvider(self.key, url=self.env["GPUC_VAST_URL"], clock=self.clock, backoff=zero_backoff)

    def source(self, **options: Any) -> RunPodBilling | VastBilling:
        """The billing source as the CLI builds it, but on the test's clock."""
        if self.name == "runpod":
            return RunPodBilling(self._runpod_client, **options)
        return VastBilling(self._vast_client, **options)

    def _runpod_client(self) -> RunPodProvider:
        client = self._client()
        assert isinstance(client, RunPodProvider)
        return client

    def _vast_client(self) -> VastProvider:
        client = self._client()
        assert isinstance(client, VastProvider)
        return client

    def start(self, *, record: bool = True) -> Pod:
        spec = PodSpec(
            experiment="tiny-llama", run_id=f"run{next(_run_ids):04d}", provider=self.name, gpu_type="RTX 4090"
        )
        pod = self.provider.create(spec)
        self.last_price = pod.price_per_hour or 0.0
        self.provider.list_pods()
        self.provider.list_pods()  # the emulators boot a pod after two observations
        if record:
            self.ledger.start(
                pod.id,
                provider=self.name,
                experiment=spec.experiment,
                gpu=pod.gpu or spec.gpu_type,
                price_per_hour=pod.price_per_hour,
                start_ts=pod.created_at if pod.created_at is not None else self.clock.now(),
            )
        return pod

    def run_pod(self, hours: float, *, record: bool = True, stopped_hours: float = 0.0) -> str:
        """A pod that runs `hours`, then (if asked) sits stopped `stopped_hours` before it is destroyed.
        The ledger row ends when the work ended: a stopped pod is one gpuc believed finished."""
        pod = self.start(record=record)
        self.clock.advance(hours * HOUR)
        ended = self.clock.now()
        if stopped_hours:
            self.provider.stop(pod.id)
            self.clock.advance(stopped_hours * HOUR)
        self.provider.destroy(pod.id)
        if record:
            self.ledger.end(pod.id, end_ts=ended, note="done")
        return pod.id

    def plant_charge(self, pod_id: str, kind: str, amount: float, start: float, end: float) -> None:
        self.emulator.plant_charge(pod_id, kind, amount, start, end)

    def set_charge_factor(self, pod_id: str, factor: float) -> None:
        self.emulator.set_charge_factor(pod_id, factor)

    def close(self) -> None:
        self.provider.close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def reconcile(*args: str) -> Result:
    """`gpuc ledger reconcile --month MONTH ...` through the real command table, env as the user sets it."""
    assert os.environ.get("GPUC_HOME"), "the root conftest points GPUC_HOME at a temporary directory"
    return CliRunner().invoke(cli, ["ledger", "reconcile", "--month", MONTH, *args])


def reconcile_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = reconcile(*args, "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    body: dict[str, Any] = json.loads(result.stdout)
    return result.exit_code, body
