"""`gpuc doctor --live` against the emulators over loopback: every read it makes is a read (no create, stop,
terminate, label, bid), each unconfirmed fact comes back confirmed / refuted / unknown, the pod-key probe
script runs for real (with the pod's own key, on "the pod": here a subprocess), and no key is printed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner
from fakes.providers import RUNPOD_KEY, VAST_KEY, spec

from gpuc.client.onpod.ask import key_scope
from gpuc.client.setup.doctor_live import LiveReport, live_report, render
from gpuc.core.clock import FakeClock
from gpuc.core.pod import Pod
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

WRITES = {"create", "stop", "destroy", "resume", "reboot", "bid", "stop_bulk"}
WRITES.add("destroy_bulk")


@pytest.fixture
def accounts(
    runpod_server: EmulatorServer, vast_server: EmulatorServer, clock: FakeClock
) -> Iterator[dict[str, Provider]]:
    runpod = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=f"{runpod_server.url}/graphql",
        rest_url=f"{runpod_server.url}/v2",
        clock=clock,
        backoff=zero_backoff,
    )
    vast = VastProvider(VAST_KEY, url=vast_server.url, clock=clock, backoff=zero_backoff)
    yield {"runpod": runpod, "vast": vast}
    runpod.close()
    vast.close()


class PodProcess(PodAccess):
    """A pod that is a subprocess here, with the pod's environment (its key): `python` is this python."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        raise AssertionError("the probe writes nothing")

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        assert argv[0] == "python"
        done = subprocess.run([sys.executable, *argv[1:]], env=self.env, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    def spawn(self, argv: list[str], role: str) -> None:
        raise AssertionError("the probe starts nothing")


def pod_probe(servers: dict[str, EmulatorServer]) -> Any:
    """The pod's own answer to `ask key-scope`, read by the laptop's one reader, run where the pod key lives
    (a subprocess standing in for the pod)."""

    def probe(provider: Provider, pod: Pod) -> dict[str, int]:
        server = servers[provider.name]
        emulator = cast(RunPodEmulator | VastEmulator, server.emulator)
        env = {**server.client_env(), **emulator.pod_environ(pod.id), "NO_PROXY": "127.0.0.1"}  # the POD key
        env.pop("VAST_API_KEY", None)  # the account keys stay off "the pod"
        if provider.name == "vast":
            env.pop("RUNPOD_API_KEY", None)
        return key_scope(PodProcess(env))

    return probe


def run_live(accounts: dict[str, Provider], servers: dict[str, EmulatorServer]) -> LiveReport:
    return live_report({name: partial(same, p) for name, p in accounts.items()}, pod_probe(servers))


def same(provider: Provider) -> Provider:
    return provider


def test_it_reads_every_account_and_settles_the_facts_without_a_write(
    accounts: dict[str, Provider], runpod_server: EmulatorServer, vast_server: EmulatorServer
) -> None:
    servers = {"runpod": runpod_server, "vast": vast_server}
    for name, provider in accounts.items():
        pod = provider.create(spec(name, offer_id="11684738" if name == "vast" else None))
        servers[name].emulator.set_status(pod.id, "running")  # type: ignore[attr-defined]
    kept = accounts["runpod"].create(spec("runpod", run_id="run0002"))
    runpod_server.emulator.set_status(kept.id, "exited")  # type: ignore[attr-defined]  # a stopped pod
    writes_before = {n: sum(r.op in WRITES for r in s.emulator.requests) for n, s in servers.items()}

    report = run_live(accounts, servers)

    assert [c.status for c in report.checks] == ["ok"] * 6, report.checks
    facts = {(f.provider, f.fact): f.status for f in report.facts}
    confirmed = {k[1] for k, v in facts.items() if v == "confirmed"}
    for claim in (
        "REST v2 answers an unknown pod id with a 404 problem (gpuc reads two of them as gone)",
        "REST v2 ignores a query parameter it does not know (its migration guide: ignored, not rejected)",
        "status is one of PROVISIONING / STARTING / RUNNING / EXITED / ERROR / TERMINATED",
        "cost is 0.0 for an EXITED pod (gpuc shows its volume's price instead)",
        "REST v2 lists every pod in one answer (no paging, as its 2026-08 spec says)",
        "the pod key may read its own pod (GraphQL pod(...))",
        "the pod key may not list the account (GraphQL myself.pods)",
        "the pod key may not use REST v2 (403)",
        "the v1 list without select_cols answers full rows (extra_env and ports)",
        "GET /api/v0/instances/ is retired with 410 deprecated_endpoint",
        "the instance key may read its own instance",
        "the instance key may not list the account",
    ):
        assert claim in confirmed, (claim, report.facts)
    assert facts[("runpod", "the pod-scoped key may destroy its own pod")] == "unknown"  # that would be a write
    writes_after = {n: sum(r.op in WRITES for r in s.emulator.requests) for n, s in servers.items()}
    assert writes_after == writes_before
    shown = render(report) + report.model_dump_json()
    assert RUNPOD_KEY not in shown and VAST_KEY not in shown


def test_without_a_running_pod_the_pod_key_facts_are_unknown_and_a_refused_key_fails_its_checks(
    accounts: dict[str, Provider], runpod_server: EmulatorServer, vast_server: EmulatorServer
) -> None:
    vast_server.emulator.api_key = "f00dOTHERkey"  # type: ignore[attr-defined]  # the key on file is refused
    report = run_live(accounts, {"runpod": runpod_server, "vast": vast_server})
    pod_key = [f for f in report.facts if "pod-scoped key may read" in f.fact]
    assert pod_key and all(f.status == "unknown" for f in pod_key)
    vast = {c.name: c.status for c in report.checks if c.name.startswith("vast: ")}
    assert (vast["vast: list schema"], vast["vast: balance"], vast["vast: facts"]) == ("fail", "fail", "warn")
    assert {c.status for c in report.checks if c.name.startswith("runpod: ")} == {"ok"}


def test_the_cli_flag_prints_the_facts(runpod_server: EmulatorServer, tmp_path: Path) -> None:
    from gpuc.client.cli import cli

    env_file = tmp_path / ".env"
    env_file.write_text("")
    env_file.chmod(0o600)
    env = {
        **runpod_server.client_env(),
        "GPUC_HOME": str(tmp_path / "home"),
        "GPUC_ENV_FILE": str(env_file),
        "GPUC_WATCHDOG_URL": "http://127.0.0.1:9",  # nothing listens: the watchdog check fails, offline
        "VAST_API_KEY": "",
    }
    result = CliRunner().invoke(cli, ["doctor", "--live", "--json", "--repo", str(tmp_path)], env=env)
    body = json.loads(result.output)
    assert any(f["provider"] == "runpod" and f["status"] == "confirmed" for f in body["facts"])
    assert any(c["name"] == "runpod: list schema" and c["status"] == "ok" for c in body["checks"])
    assert RUNPOD_KEY not in result.output
