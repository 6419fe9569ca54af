"""`gpuc up --interruptible --bid X --recover N`, the real `up` against the Vast emulator: every refusal comes
before any money (nothing created, nothing recorded), the boot kit is written at the results bucket BEFORE
the create, and the first pod's registration carries the run's recovery plan with that kit. The watchdog here
records what it is sent and stops `up` at the registration (what follows is provisioning, tested elsewhere):
`up` then destroys what it created, as for any failure after the create."""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from fakes.up import HealthyWatchdog, rented_settings

from gpuc.client.context import Ctx
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.client.runs import RunStore
from gpuc.core.api import (
    RECOVERY_PROTOCOL,
    WIRE_PROTOCOL,
    Ack,
    EndRequest,
    RegisterAnswer,
    RegisterRequest,
    StatusResponse,
)
from gpuc.core.bootkit import onstart_script
from gpuc.core.budget import run_envelope_usd
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, GpucError, SafetyRefusal
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.emulators.vast import VastEmulator

VAST_KEY = "f00dPLANTEDvastkey4c3b2a19087f6e5d"
VAST_URL = "https://console.vast.test/api/v0"
HF = "hf_PLANTEDsecretvalue123"


class Stop(GpucError):
    """The recording watchdog's answer to a registration: `up` stops there and destroys what it made."""


class RecordingWatchdog(HealthyWatchdog):
    """A watchdog that declares `protocol`, and records each registration (then stops `up` there)."""

    def __init__(self, clock: FakeClock, protocol: int = max(RECOVERY_PROTOCOL, WIRE_PROTOCOL)) -> None:
        super().__init__(clock)
        self.protocol = protocol
        self.registered: list[RegisterRequest] = []
        self.watchdog_id: str | None = "wd-test"
        self.takes = False  # True: the registration is taken, and `up` goes on to wait for the pod
        self.calls: list[str] = []

    def status(self) -> StatusResponse:
        return super().status().model_copy(update={"protocol": self.protocol, "watchdog_id": self.watchdog_id})

    def register(self, request: RegisterRequest) -> RegisterAnswer:
        # Through the wire format, as the real client sends it: what does not serialise fails here.
        self.registered.append(RegisterRequest.model_validate_json(request.model_dump_json()))
        if self.takes:
            return RegisterAnswer(token="t" * 43)
        raise Stop("stopped at the registration (test)")

    def stop_run(self, run_id: str) -> Ack:
        self.calls.append(f"stop_run {run_id}")
        return Ack()

    def end(self, pod_id: str, request: EndRequest) -> Ack:
        self.calls.append(f"end {pod_id}")
        return Ack()


class Watching(VastProvider):
    """The Vast client, with what each create was asked and whether the kit was already written then."""

    def __init__(self, kit_root: Path, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.kit_root = kit_root
        self.creates: list[tuple[PodSpec, list[str]]] = []

    def create(self, spec: PodSpec) -> Pod:
        kit = self.kit_root / ".gpuc-kits" / spec.run_id
        self.creates.append((spec, sorted(p.name for p in kit.glob("*"))))
        return super().create(spec)


@pytest.fixture
def emu(clock: FakeClock) -> VastEmulator:
    return VastEmulator(api_key=VAST_KEY, clock=clock)


@pytest.fixture
def bucket(tmp_path: Path) -> Path:
    path = tmp_path / "bucket"
    path.mkdir()
    return path


@pytest.fixture
def vast(emu: VastEmulator, clock: FakeClock, bucket: Path) -> Iterator[Watching]:
    provider = Watching(bucket, VAST_KEY, url=VAST_URL, transport=emu.transport(), clock=clock, backoff=zero_backoff)
    yield provider
    provider.close()


@pytest.fixture
def settings(tmp_path: Path, bucket: Path) -> Settings:
    """A run that may recover: a file:// bucket (the loopback sandbox's: a folder both sides reach), no git."""
    (tmp_path / ".env").write_text(f"HF_TOKEN={HF}\n")
    return rented_settings(tmp_path).with_overrides(
        vast_api_key=SecretStr(VAST_KEY),
        git_remote=None,
        results_bucket=bucket.as_uri(),
        ssh_sandbox_root=tmp_path / "sandbox",
        hf_token=SecretStr(HF),
    )


def ctx_for(settings: Settings, vast: VastProvider, watchdog: HealthyWatchdog, clock: FakeClock) -> Ctx:
    return Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=clock,
        echo=lambda _line: None,
        watchdog=watchdog,  # type: ignore[arg-type]
        providers={"vast": vast},
    )


def yes(_question: str) -> bool:
    return True


def recover_opts(**changes: object) -> UpOptions:
    opts = UpOptions(
        experiment="exp1",
        provider="vast",
        gpu="4090",
        max_hours=2,
        interruptible=True,
        bid=0.25,
        recover=2,
        confirm=yes,
        command=["python", "train.py"],
        job_id="job-1",
    )
    for name, value in changes.items():
        setattr(opts, name, value)
    return opts


def rented_nothing(emu: VastEmulator, ctx: Ctx, bucket: Path) -> bool:
    return not emu.instances and not emu.billed and ctx.runs.all() == [] and not (bucket / ".gpuc-kits").exists()


# -- refusals, each before any money --------------------------------------------------------------
REFUSALS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "not-interruptible": ({"interruptible": False}, {}, "--recover is for interruptible pods"),
    "no-bid": ({"bid": None}, {}, "--recover needs --bid"),
    "on-demand-without-recover": ({"recover": 0, "recover_on_demand": True}, {}, "--recover-on-demand needs"),
    "git-remote": ({}, {"git_remote": "https://github.com/you/exp.git"}, "git results destination"),
    "no-bucket": ({}, {"results_bucket": None}, "needs GPUC_RESULTS_BUCKET"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_recover_refusals_come_before_any_money(
    name: str, settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock, bucket: Path
) -> None:
    opt_changes, setting_changes, said = REFUSALS[name]
    watchdog = RecordingWatchdog(clock)
    ctx = ctx_for(settings.with_overrides(**setting_changes), vast, watchdog, clock)
    with pytest.raises(ConfigError) as caught:
        up(recover_opts(**opt_changes), ctx)
    assert said in caught.value.message and caught.value.hint
    assert vast.creates == [] and watchdog.registered == [] and rented_nothing(emu, ctx, bucket)


def test_recover_is_refused_on_runpod(settings: Settings, clock: FakeClock, bucket: Path) -> None:
    from fakes.up import nothing_spent, runpod_4090

    provider = runpod_4090()
    ctx = ctx_for(settings, provider, RecordingWatchdog(clock), clock)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--recover works on Vast only"):
        up(recover_opts(provider="runpod"), ctx)
    assert nothing_spent(ctx, provider) and not (bucket / ".gpuc-kits").exists()


def test_recover_refuses_a_watchdog_without_recovery(
    settings: Settings,
    vast: Watching,
    emu: VastEmulator,
    clock: FakeClock,
    bucket: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watchdog that takes this gpuc's pods (WIRE_PROTOCOL) but not its recovery: its own check, its own
    constant, so a later WIRE_PROTOCOL never lets it through (the recovery one is set above it here)."""
    from gpuc.core import api

    monkeypatch.setattr(api, "RECOVERY_PROTOCOL", api.WIRE_PROTOCOL + 1)
    watchdog = RecordingWatchdog(clock, protocol=api.WIRE_PROTOCOL)
    ctx = ctx_for(settings, vast, watchdog, clock)
    with pytest.raises(ConfigError) as caught:
        up(recover_opts(), ctx)
    assert f"--recover needs {api.WIRE_PROTOCOL + 1}" in caught.value.message
    assert "gpuc watchdog deploy" in (caught.value.hint or "")
    assert vast.creates == [] and rented_nothing(emu, ctx, bucket)


def test_the_budget_counts_the_runs_envelope_not_one_attempt(
    settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock, bucket: Path
) -> None:
    """A $0.55 budget passes one attempt at $0.25 x 2 h ($0.50) but not the envelope with its disk."""
    watchdog = RecordingWatchdog(clock)
    ctx = ctx_for(settings.with_overrides(monthly_budget=0.505), vast, watchdog, clock)
    with pytest.raises(SafetyRefusal) as caught:
        up(recover_opts(), ctx)
    envelope = run_envelope_usd(0.25, 30 * 0.3 / 720, 2)
    assert f"envelope across all its attempts is ${envelope:,.2f}" in caught.value.message
    assert vast.creates == [] and rented_nothing(emu, ctx, bucket)


def test_the_price_line_says_the_envelope_bounds_every_attempt(
    settings: Settings, vast: Watching, clock: FakeClock
) -> None:
    lines: list[str] = []
    ctx = ctx_for(settings, vast, RecordingWatchdog(clock), clock)
    ctx.echo = lines.append
    up(recover_opts(dry_run=True), ctx)
    text = "\n".join(lines)
    envelope = run_envelope_usd(0.25, 30 * 0.3 / 720, 2)
    assert f"ONE envelope of ${envelope:.2f}" in text and "the bound across every attempt" in text
    assert ".gpuc-kits/" in text and vast.creates == []


# -- the kit, before the create; the registration carries it ----------------------------------------------
def test_the_kit_is_written_before_the_create_and_the_registration_carries_it(
    settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock, bucket: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    from gpuc.client.onpod.upload import prepare

    watchdog = RecordingWatchdog(clock)
    ctx = ctx_for(settings, vast, watchdog, clock)
    bundle = prepare(project, 10)
    with pytest.raises(Stop):
        up(recover_opts(upload=bundle, recover_on_demand=True), ctx)

    [(spec, kit_then)] = vast.creates
    assert kit_then == sorted([PROJECT, wheel_of(kit_then)])  # both files were there when the create was sent
    assert spec.onstart == onstart_script() and spec.interruptible and spec.bid_per_gpu == 0.25
    [sent] = watchdog.registered
    plan = sent.recovery
    assert plan is not None
    assert (plan.recover, plan.on_demand_last, plan.max_hours) == (2, True, 2)
    assert plan.price_cap == 0.25 and plan.envelope_usd == pytest.approx(run_envelope_usd(0.25, plan.disk_per_hour, 2))
    assert plan.first_start == sent.started_at
    assert plan.results_at == f"{bucket.as_uri()}/exp1/{spec.run_id}"
    kit = plan.kit
    folder = bucket / ".gpuc-kits" / spec.run_id
    wheel = folder / kit.wheel_name
    assert kit.wheel_url == wheel.as_uri() and hashlib.sha256(wheel.read_bytes()).hexdigest() == kit.wheel_sha256
    tar = folder / "project.tar.gz"
    assert kit.project_url == tar.as_uri() and hashlib.sha256(tar.read_bytes()).hexdigest() == kit.project_sha256
    assert tar.read_bytes() == bundle.archive()  # byte for byte what the upload sends
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(wheel.stat().st_mode) == 0o600
    assert stat.S_IMODE(tar.stat().st_mode) == 0o600
    # The first pod's config, the allowlisted secrets (never a token or a claim), the job as `up` starts it.
    assert kit.config["run_id"] == spec.run_id and kit.config["pod_id"] == sent.pod_id
    assert kit.config["results_bucket"] == bucket.as_uri() and kit.config["deadline_at"] == sent.deadline_at
    assert kit.config["gpu_count"] == spec.gpu_count  # a re-rented pod verifies the run's GPUs, every one
    assert kit.secrets == {"HF_TOKEN": HF}
    assert (kit.command, kit.job_id, kit.installer) == (["python", "train.py"], "job-1", "offline")
    assert kit.bootstrap is not None and kit.bootstrap["requirements"] == "requirements.txt"
    assert plan.spec.run_id == spec.run_id and plan.spec.offer_id is None
    # `up` stopped at the registration: what it created is destroyed, as for any failure after the create.
    assert not emu.alive()
    # Nothing of the kit reaches the provider: its env is echoed in every listing.
    [inst] = emu.billed.values()
    assert HF not in json.dumps(inst.env) and kit.wheel_url not in json.dumps(inst.env)


PROJECT = "project.tar.gz"


def wheel_of(names: list[str]) -> str:
    return next((n for n in names if n.endswith(".whl")), "no wheel")


def test_the_offline_installer_is_named_for_a_sandbox_python(
    settings: Settings, vast: Watching, clock: FakeClock
) -> None:
    watchdog = RecordingWatchdog(clock)
    ctx = ctx_for(settings.with_overrides(ssh_sandbox_python="/usr/bin/python3"), vast, watchdog, clock)
    with pytest.raises(Stop):
        up(recover_opts(), ctx)
    [sent] = watchdog.registered
    assert sent.recovery is not None
    assert (sent.recovery.kit.installer, sent.recovery.kit.offline_python) == ("offline", "/usr/bin/python3")
    assert sent.recovery.kit.project_url is None  # no upload asked: nothing to fetch


def test_a_kit_that_cannot_be_written_rents_nothing(
    settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock, bucket: Path
) -> None:
    (bucket / ".gpuc-kits").write_text("a file where the kits' folder goes\n")  # every write under it fails
    watchdog = RecordingWatchdog(clock)
    ctx = ctx_for(settings, vast, watchdog, clock)
    with pytest.raises(ConfigError) as caught:
        up(recover_opts(), ctx)
    assert "cannot write the run's boot kit" in caught.value.message and "nothing was rented" in caught.value.message
    assert vast.creates == [] and watchdog.registered == [] and not emu.instances and ctx.runs.all() == []


def test_without_recover_no_kit_no_onstart_no_plan(
    settings: Settings, vast: Watching, clock: FakeClock, bucket: Path
) -> None:
    watchdog = RecordingWatchdog(clock)
    ctx = ctx_for(settings, vast, watchdog, clock)
    with pytest.raises(Stop):
        up(recover_opts(recover=0), ctx)
    [(spec, kit_then)] = vast.creates
    assert spec.onstart is None and kit_then == [] and watchdog.registered[0].recovery is None
    assert not (bucket / ".gpuc-kits").exists()
    assert urlparse(settings.results_bucket or "").scheme == "file"


def test_an_up_that_fails_after_the_registration_stops_the_runs_recovery(
    settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock
) -> None:
    """The pod never comes up: `up` destroys it, and stops the run's recovery at the watchdog (else it could
    rent the next attempt of a run nobody wants), then ends the pod there."""
    emu.boot_polls = 10_000
    watchdog = RecordingWatchdog(clock)
    watchdog.takes = True
    ctx = ctx_for(settings, vast, watchdog, clock)
    with pytest.raises(GpucError, match="not running after"):
        up(recover_opts(wait_timeout_s=5.0), ctx)
    [(spec, _kit)] = vast.creates
    [pod_id] = [str(i) for i in emu.billed]
    assert watchdog.calls == [f"stop_run {spec.run_id}", f"end {pod_id}"] and not emu.alive()


def test_a_create_that_fails_leaves_no_kit(
    settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock, bucket: Path
) -> None:
    for offer in emu.offers.values():
        offer.winning_bid = 1.0  # every bid of $0.25 loses: cancel_unavail refuses the create
    ctx = ctx_for(settings, vast, RecordingWatchdog(clock), clock)
    with pytest.raises(GpucError):
        up(recover_opts(), ctx)
    assert len(vast.creates) == 1 and not emu.alive()
    assert list((bucket / ".gpuc-kits").iterdir()) == []


def test_recover_refuses_a_watchdog_without_a_key_of_its_own(
    settings: Settings, vast: Watching, emu: VastEmulator, clock: FakeClock, bucket: Path
) -> None:
    watchdog = RecordingWatchdog(clock)
    watchdog.watchdog_id = None
    ctx = ctx_for(settings, vast, watchdog, clock)
    with pytest.raises(ConfigError, match="has no key of its own"):
        up(recover_opts(), ctx)
    assert vast.creates == [] and rented_nothing(emu, ctx, bucket)
