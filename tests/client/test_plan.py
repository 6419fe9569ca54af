"""`up` checks what it can before the create call, shows the price and the most the pod can cost, and asks:
every refusal here must come BEFORE any money is spent (no create call, no intent recorded)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from click.testing import CliRunner, Result
from fakes.up import (
    Created,
    FakeProvider,
    HealthyWatchdog,
    make_deps,
    nothing_spent,
    rented_settings,
    runpod_4090,
)

from gpuc.client.context import Ctx
from gpuc.client.money.offers import OfferFilters, fetch
from gpuc.client.pods.commands import up as up_command
from gpuc.client.pods.plan import UpOptions, check_watchdog_reachable
from gpuc.client.pods.up import up
from gpuc.core import gpunames
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.models import Offer, PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.testkit.emulators.vast import VastEmulator

VAST_KEY = "f00dPLANTEDvastkey4c3b2a19087f6e5d"
VAST_URL = "https://console.vast.test/api/v0"
EMULATOR_4090 = "11684738"  # the Vast emulator's RTX 4090 that passes every default filter


class RecordingVast(VastProvider):
    created: list[PodSpec]

    def create(self, spec: PodSpec) -> Pod:
        self.created.append(spec)
        raise Created("create called", provider="vast")


@pytest.fixture
def rented(tmp_path: Path) -> Settings:
    return rented_settings(tmp_path)


def opts(**fields: Any) -> UpOptions:
    return UpOptions(**{"experiment": "exp1", "provider": "runpod", **fields})


# -- refused before the create -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8787", "http://localhost:8787", "http://127.0.0.2:9", "http://[::1]:8787", "http://0.0.0.0:1"],
)
def test_it_refuses_a_loopback_watchdog_for_a_rented_pod_before_any_call(rented: Settings, url: str) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = make_deps(rented.with_overrides(watchdog_url=url), provider, lines)
    with pytest.raises(ConfigError) as caught:
        up(opts(), deps)
    assert "cannot reach" in caught.value.message and "gpuc watchdog deploy" in (caught.value.hint or "")
    assert nothing_spent(deps, provider)


def test_a_public_watchdog_url_or_a_loopback_sandbox_passes(rented: Settings, tmp_path: Path) -> None:
    check_watchdog_reachable(rented)
    check_watchdog_reachable(rented.with_overrides(watchdog_url="http://10.0.0.5:8787"))
    # The loopback sandbox (tests, the remote demo) runs its pods on this machine: loopback reaches them.
    sandbox = rented.with_overrides(watchdog_url="http://127.0.0.1:8787", ssh_sandbox_root=tmp_path)
    check_watchdog_reachable(sandbox)


def test_it_refuses_a_missing_ssh_key_before_any_call(rented: Settings, tmp_path: Path) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = make_deps(rented.with_overrides(ssh_key_path=tmp_path / "nope"), provider, lines)
    with pytest.raises(ConfigError, match="no ssh key at") as caught:
        up(opts(), deps)
    assert "ssh-keygen" in (caught.value.hint or "")
    assert nothing_spent(deps, provider)


def test_it_refuses_a_missing_provider_key_before_any_call(rented: Settings) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = make_deps(rented.with_overrides(runpod_api_key=""), provider, lines)
    with pytest.raises(ConfigError, match="no runpod API key") as caught:
        up(opts(), deps)
    assert "RUNPOD_API_KEY" in (caught.value.hint or "")
    assert nothing_spent(deps, provider)


def test_it_refuses_a_readable_env_file_before_any_call(rented: Settings) -> None:
    os.chmod(rented.env_file, 0o644)
    provider = runpod_4090()
    deps = make_deps(rented, provider, [])
    with pytest.raises(ConfigError, match="readable by other users"):
        up(opts(), deps)
    assert nothing_spent(deps, provider)


def test_an_ambiguous_gpu_lists_the_choices_before_any_call(rented: Settings) -> None:
    provider = FakeProvider("vast")
    deps = make_deps(rented, provider, [])
    with pytest.raises(ConfigError) as caught:
        up(opts(provider="vast", gpu="h100"), deps)
    for choice in ("H100 SXM", "H100 PCIE", "H100 NVL"):
        assert choice in caught.value.message
    assert nothing_spent(deps, provider)


def test_runpod_interruptible_is_refused_before_any_call(rented: Settings) -> None:
    provider = runpod_4090()
    provider.supports_interruptible = False
    deps = make_deps(rented, provider, [])
    with pytest.raises(ConfigError, match="cannot rent interruptible"):
        up(opts(interruptible=True, bid=0.3), deps)
    assert nothing_spent(deps, provider)


# -- the price, the most it can cost, the question -------------------------------------------------------


def test_up_shows_the_price_and_the_most_it_can_cost_and_a_no_creates_nothing(rented: Settings) -> None:
    lines: list[str] = []
    questions: list[str] = []
    provider = runpod_4090()
    deps = make_deps(rented, provider, lines)

    def no(question: str) -> bool:
        questions.append(question)
        return False

    with pytest.raises(GpucError, match="nothing was created"):
        up(opts(max_hours=10, confirm=no), deps)
    price = next(line for line in lines if line.startswith("price:"))
    assert "$0.740/h" in price and "at most $7.40 by the deadline (--max-hours 10h, ends at " in price
    assert "enforced by the pod's agent and the watchdog" in price and "RunPod ends" not in price  # #330
    assert questions == ["create exp1 on runpod?"]
    assert nothing_spent(deps, provider)


def test_without_a_question_up_goes_on_to_the_create_with_the_catalogs_spelling(rented: Settings) -> None:
    provider = runpod_4090()
    deps = make_deps(rented, provider, [])
    with pytest.raises(Created):
        up(opts(gpu="4090"), deps)
    assert [s.gpu_type for s in provider.created] == ["NVIDIA GeForce RTX 4090"]


@pytest.fixture
def vast_emu(clock: FakeClock) -> VastEmulator:
    return VastEmulator(api_key=VAST_KEY, clock=clock)


@pytest.fixture
def vast(vast_emu: VastEmulator, clock: FakeClock) -> Iterator[RecordingVast]:
    provider = RecordingVast(VAST_KEY, url=VAST_URL, transport=vast_emu.transport(), clock=clock, backoff=zero_backoff)
    provider.created = []
    yield provider
    provider.close()


def test_vast_rents_the_offer_whose_price_was_shown(rented: Settings, vast: RecordingVast) -> None:
    """The quote and the create must be the same offer: a cheaper one found a moment later is not what the
    user agreed to (and a dearer one would be worse)."""
    lines: list[str] = []
    deps = make_deps(rented, vast, lines)
    with pytest.raises(Created):
        up(opts(provider="vast", gpu="4090", max_hours=4), deps)
    [spec] = vast.created
    price = next(line for line in lines if line.startswith("price:"))
    assert spec.gpu_type == "RTX 4090" and spec.offer_id == EMULATOR_4090
    assert spec.price_per_hour is not None and f"${spec.price_per_hour:.3f}/h" in price
    assert f"offer {EMULATOR_4090}" in price and "at most $" in price
    assert "enforced by the pod's agent and the watchdog" in price  # the same layers as on RunPod


def test_the_dry_run_shows_the_price_too(rented: Settings) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = make_deps(rented, provider, lines)
    assert up(opts(dry_run=True), deps) is None
    assert any("$0.740/h" in line for line in lines) and nothing_spent(deps, provider)


def test_the_cli_asks_only_on_a_terminal_and_never_with_yes(rented: Settings) -> None:
    def invoke(*args: str, terminal: bool) -> tuple[Result, FakeProvider]:
        provider = runpod_4090()
        watchdog = cast(WatchdogClient, HealthyWatchdog(FakeClock()))
        ctx = Ctx(rented, watchdog=watchdog, providers={"runpod": provider}, terminal=lambda: terminal)
        argv = ["exp1", "-p", "runpod", "--no-upload", *args]
        return CliRunner().invoke(up_command, argv, input="n\n", obj=ctx), provider

    question = "create exp1 on runpod?"
    for args, terminal in (((), False), (("-y",), True)):
        result, provider = invoke(*args, terminal=terminal)
        assert isinstance(result.exception, Created) and question not in result.output, "not asked: rented"
        assert len(provider.created) == 1
    result, provider = invoke(terminal=True)
    assert question in result.output and provider.created == [], "asked, and no was the answer"
    assert isinstance(result.exception, GpucError) and "not confirmed" in result.exception.message


# -- GPU names through the catalogue, for every provider -------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "typed", "sent"),
    [
        ("runpod", "4090", "NVIDIA GeForce RTX 4090"),
        ("runpod", "h100 sxm", "NVIDIA H100 80GB HBM3"),
        ("runpod", "H100 PCIe", "NVIDIA H100 PCIe"),
        ("runpod", "rtx 3090 ti", "NVIDIA GeForce RTX 3090 Ti"),
        ("vast", "4090", "RTX 4090"),
        ("vast", "RTX_3090", "RTX 3090"),
        ("vast", "h100 pcie", "H100 PCIE"),
        ("vast", "A100 SXM", "A100 SXM4"),
        ("vast", "Mystery 9000", "Mystery 9000"),  # unknown here: the provider decides
        ("local", "h100", "h100"),
    ],
)
def test_a_gpu_name_becomes_the_providers_own_spelling(provider: str, typed: str, sent: str) -> None:
    assert gpunames.resolve(provider, typed) == sent


@pytest.mark.parametrize(("provider", "typed"), [("runpod", "h100"), ("runpod", "A100"), ("vast", "a100")])
def test_an_ambiguous_gpu_name_is_refused_with_its_choices(provider: str, typed: str) -> None:
    with pytest.raises(ConfigError, match=r"names [23] cards") as caught:
        gpunames.resolve(provider, typed)
    assert "--gpu" in (caught.value.hint or "")


def test_offers_for_h100_on_vast_search_every_h100_spelling() -> None:
    """Vast filters gpu_name by equality: one search for "h100" found nothing at all."""
    found = [
        Offer(provider="vast", id="1", gpu="H100 SXM", price_per_hour=2.0),
        Offer(provider="vast", id="2", gpu="H100 PCIE", price_per_hour=1.8),
        Offer(provider="vast", id="3", gpu="RTX 4090", price_per_hour=0.3),  # a loose answer: dropped
    ]
    provider = FakeProvider("vast", found)
    offers = fetch("vast", lambda: provider, "h100", False, OfferFilters())
    assert sorted(provider.asked) == ["H100 NVL", "H100 PCIE", "H100 SXM"]  # type: ignore[type-var]
    assert sorted(o.id for o in offers) == ["1", "2"]


# -- the results destination: nowhere to sync is KEPT and billing, so refused first ------------
def probe_refs(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "for-each-ref"], capture_output=True, text=True, check=True).stdout


def hook(repo: Path, script: str) -> None:
    path = repo / "hooks" / "pre-receive"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


def test_up_with_nowhere_to_send_results_creates_nothing_and_names_a_working_value(rented: Settings) -> None:
    provider = runpod_4090()
    deps = make_deps(rented.with_overrides(git_remote=None, results_bucket=None), provider, [])
    with pytest.raises(ConfigError) as caught:
        up(opts(), deps)
    assert "nowhere to send its results: GPUC_RESULTS_BUCKET is not set" in caught.value.message
    hint = caught.value.hint or ""
    assert "s3://my-bucket/gpuc" in hint and "GPUC_GIT_REMOTE=https://" in hint
    assert nothing_spent(deps, provider)


def test_up_with_a_git_remote_that_refuses_the_push_creates_nothing(rented: Settings) -> None:
    repo = Path(rented.git_remote or "")
    hook(repo, "echo 'permission to push denied' >&2\nexit 1\n")
    provider = runpod_4090()
    deps = make_deps(rented, provider, [])
    with pytest.raises(ConfigError) as caught:
        up(opts(), deps)
    assert caught.value.message.startswith(f"git {repo} refused the push of a probe ref")
    assert "permission to push denied" in caught.value.message and "GPUC_GIT_TOKEN" in (caught.value.hint or "")
    assert nothing_spent(deps, provider) and probe_refs(repo) == ""


def test_a_probe_ref_the_remote_will_not_delete_is_named_and_up_goes_on(rented: Settings) -> None:
    """The pod only pushes, never deletes: a remote that refuses deletions takes the results."""
    repo = Path(rented.git_remote or "")
    hook(
        repo,
        'while read old new ref; do [ "$new" = 0000000000000000000000000000000000000000 ] && exit 1; done\nexit 0\n',
    )
    lines: list[str] = []
    provider = runpod_4090()
    with pytest.raises(Created):
        up(opts(), make_deps(rented, provider, lines))
    (left,) = probe_refs(repo).splitlines()
    ref = left.split()[-1]
    assert ref.startswith("refs/gpuc-probe/gpuc-probe-")
    assert any(f"probe {ref} left: delete it with git push origin :{ref}" in line for line in lines), lines


def test_the_dry_run_proves_the_destination_too_and_removes_its_probe(rented: Settings) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = make_deps(rented, provider, lines)
    assert up(opts(dry_run=True), deps) is None
    assert f"results: git {rented.git_remote} takes a push and answers a list (probe ref removed)" in lines
    assert nothing_spent(deps, provider) and probe_refs(Path(rented.git_remote or "")) == ""
    refused = make_deps(rented.with_overrides(git_remote=None), provider, [])
    with pytest.raises(ConfigError, match="nowhere to send its results"):
        up(opts(dry_run=True), refused)


def test_up_note_that_is_not_one_line_is_refused_before_anything_is_rented(rented: Settings) -> None:
    provider = runpod_4090()
    deps = make_deps(rented, provider, [])
    result = CliRunner().invoke(up_command, ["exp1", "-p", "runpod", "--no-upload", "-y", "--note", "a\nb"], obj=deps)
    assert isinstance(result.exception, ConfigError) and "control character" in result.exception.message
    assert nothing_spent(deps, provider)
