"""A first rental on RunPod, as a user tries it: no ssh key registered at RunPod, a 3 GB volume, a 4-GPU
quote, a pool the account cannot use. Each is handled or refused BEFORE money, with the fix, through the
real `up` against the RunPod emulator (its create recorded, then stopped: what follows a create is other
tests' business)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fakes.providers import RTX4090, RUNPOD_KEY, runpod_of
from fakes.up import PUBLIC_KEY, Created, make_deps, rented_settings

from gpuc.client.context import Ctx
from gpuc.client.pods.commands import up as up_command
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, ProviderAuthError, ProviderError
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_refusals import PoolDenied
from gpuc.core.settings import Settings
from gpuc.testkit.emulators.runpod import RunPodEmulator


class StopAfterCreate(RunPodProvider):
    """The real create (catalog, POST /v2/pods, its refusals), then `Created`: money was spent here."""

    made: list[Pod]

    def create(self, spec: PodSpec) -> Pod:
        self.made.append(super().create(spec))
        raise Created("created", provider="runpod")


@pytest.fixture
def emu(clock: FakeClock) -> RunPodEmulator:
    return RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)  # a new account: no ssh key registered


def runpod(emu: RunPodEmulator, clock: FakeClock, cloud: str = "SECURE") -> StopAfterCreate:
    provider = runpod_of(StopAfterCreate, emu, clock, cloud_type=cloud)
    provider.made = []
    return provider


def rent(settings: Settings, provider: RunPodProvider, lines: list[str], **fields: Any) -> Ctx:
    deps = make_deps(settings, provider, lines)
    with pytest.raises(Created):
        up(UpOptions(**{"experiment": "exp1", "provider": "runpod", **fields}), deps)
    return deps


def creates(emu: RunPodEmulator) -> list[dict[str, Any]]:
    return [json.loads(r.body) for r in emu.requests if r.method == "POST" and r.path == "/v2/pods"]


# -- no ssh key registered -------------------------------------------------------------------------------


def test_with_no_key_registered_the_pod_is_handed_gpucs_key_and_the_user_is_told(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    """startSsh alone: "with none registered the flag does nothing and the pod has no SSH access". The create
    carries the key `up` logs in with (PUBLIC_KEY), so the pod takes it; the warning says how to register it."""
    lines: list[str] = []
    provider = runpod(emu, clock)
    rent(rented_settings(tmp_path), provider, lines)
    [sent] = creates(emu)
    assert sent["env"]["PUBLIC_KEY"] == PUBLIC_KEY and sent["startSsh"] is True
    assert emu.pods[provider.made[0].id].authorized == (PUBLIC_KEY,)  # its sshd takes the key `up` logs in with
    [warning] = [line for line in lines if "ssh" in line and line.startswith("warning")]
    assert "no ssh key is registered at runpod" in warning and "PUT /v2/account/ssh-keys" in warning
    paths = [r.path for r in emu.requests]
    assert paths.index("/v2/account/ssh-keys") < paths.index("/v2/pods")  # read before anything is rented


def test_a_registered_key_is_not_warned_about(tmp_path: Path, emu: RunPodEmulator, clock: FakeClock) -> None:
    emu.ssh_keys = [PUBLIC_KEY.rsplit(" ", 1)[0] + " another-comment"]  # the same key, whatever its comment
    lines: list[str] = []
    rent(rented_settings(tmp_path), runpod(emu, clock), lines)
    assert not [line for line in lines if "ssh" in line and line.startswith("warning")]


def test_keys_that_cannot_be_read_now_do_not_stop_the_rental(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    emu.faults.add(op="ssh_keys", kind="429", times=None)
    lines: list[str] = []
    rent(rented_settings(tmp_path), runpod(emu, clock), lines)
    assert any("could not read runpod's registered ssh keys (rate limited" in line for line in lines)
    assert creates(emu)[0]["env"]["PUBLIC_KEY"] == PUBLIC_KEY


def test_a_key_without_its_public_half_is_refused_before_any_call(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    settings = rented_settings(tmp_path)
    (tmp_path / "id_ed25519.pub").unlink()
    deps = make_deps(settings, runpod(emu, clock), [])
    with pytest.raises(ConfigError) as caught:
        up(UpOptions(experiment="exp1", provider="runpod"), deps)
    assert "no public key" in caught.value.message and "ssh-keygen -y -f" in (caught.value.hint or "")
    assert creates(emu) == [] and deps.runs.all() == []


# -- a volume RunPod would refuse ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 3, 9])
def test_a_volume_under_10_gb_is_refused_before_any_call_with_the_fix(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock, size: int
) -> None:
    deps = make_deps(rented_settings(tmp_path), runpod(emu, clock), [])
    with pytest.raises(ConfigError) as caught:
        up(UpOptions(experiment="exp1", provider="runpod", volume_gb=size), deps)
    assert f"a {size} GB volume is too small for RunPod" in caught.value.message
    assert "--volume-gb 10" in (caught.value.hint or "") and "upgrade" not in str(caught.value)
    assert emu.requests == [] and deps.runs.all() == []  # not even a catalog read


def test_the_cli_refuses_it_as_a_config_error_and_a_10_gb_volume_is_rented(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = rented_settings(tmp_path)
    deps = make_deps(settings, runpod(emu, clock), [])
    monkeypatch.chdir(tmp_path)
    args = ["exp1", "-p", "runpod", "--volume-gb", "3", "--no-upload", "-y"]
    result = CliRunner().invoke(up_command, args, obj=deps)
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2, result.output
    assert "too small for RunPod" in str(result.exception) and "--volume-gb 10" in str(result.exception)
    assert creates(emu) == []
    lines: list[str] = []
    rent(settings, runpod(emu, clock), lines, volume_gb=10)
    assert creates(emu)[0]["mounts"] == {"persistent": {"size": 10, "path": "/workspace"}}


# -- a multi-GPU quote -----------------------------------------------------------------------------------


def test_a_4_gpu_quote_is_the_catalogs_price_and_stock_for_4(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    emu.set_stock(RTX4090, 5)  # HIGH for one GPU; one pod of four
    lines: list[str] = []
    rent(rented_settings(tmp_path), runpod(emu, clock), lines, gpu_count=4)
    [price] = [line for line in lines if line.startswith("price:")]
    assert "$2.960/h for NVIDIA GeForce RTX 4090 x4" in price and "stock for 4 GPUs: Low" in price, price
    catalog = [r.query for r in emu.requests if r.path == "/v2/catalog/gpus"]
    assert catalog and all(q["count"] == ["4"] for q in catalog)  # never the stock for one
    assert creates(emu)[0]["gpu"] == {"id": RTX4090, "count": 4}


def test_a_4_gpu_quote_with_no_stock_for_4_says_so_and_the_refusal_costs_nothing(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    emu.set_stock(RTX4090, 3)  # three free: "Medium" for one GPU, none for a pod of four
    lines: list[str] = []
    deps = make_deps(rented_settings(tmp_path), runpod(emu, clock), lines)
    with pytest.raises(ProviderError, match="no RTX 4090 to give") as caught:
        up(UpOptions(experiment="exp1", provider="runpod", gpu_count=4), deps)
    [price] = [line for line in lines if line.startswith("price:")]
    assert "stock for 4 GPUs: None (RunPod lists none free now" in price, price
    assert caught.value.status == 400 and emu.alive() == []


def test_more_gpus_than_runpods_largest_pod_is_refused_before_the_question(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    emu.gpus[RTX4090].max_secure = 2
    deps = make_deps(rented_settings(tmp_path), runpod(emu, clock), [])
    with pytest.raises(ConfigError) as caught:
        up(UpOptions(experiment="exp1", provider="runpod", gpu_count=4), deps)
    assert "at most 2 x RTX 4090" in caught.value.message and "--gpus 2" in (caught.value.hint or "")
    assert creates(emu) == [] and deps.runs.all() == []


# -- a pool the account cannot use -----------------------------------------------------------------------


def test_a_pool_the_account_cannot_use_is_said_as_such_never_a_bad_key(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock
) -> None:
    emu.deny_pool(RTX4090, "SECURE")
    deps = make_deps(rented_settings(tmp_path), runpod(emu, clock), [])
    with pytest.raises(PoolDenied) as caught:
        up(UpOptions(experiment="exp1", provider="runpod"), deps)
    assert not isinstance(caught.value, ProviderAuthError) and caught.value.status == 403
    assert "cannot access that pool" in caught.value.message and "Nothing was created" in caught.value.message
    assert "not a bad key" in (caught.value.hint or "") and "GPUC_RUNPOD_CLOUD_TYPE" in (caught.value.hint or "")
    assert emu.alive() == [] and len(creates(emu)) == 1


def test_after_a_403_the_next_pool_is_tried_within_the_price_shown_and_said(
    tmp_path: Path, emu: RunPodEmulator, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    emu.deny_pool(RTX4090, "COMMUNITY")  # the cheaper cloud, asked first with GPUC_RUNPOD_CLOUD_TYPE=ALL
    settings = rented_settings(tmp_path)
    deps = make_deps(settings, runpod(emu, clock, cloud="ALL"), [])
    with pytest.raises(PoolDenied) as caught:  # SECURE costs more than the $0.34/h shown: not rented unasked
        up(UpOptions(experiment="exp1", provider="runpod"), deps)
    assert "not tried: SECURE ($0.740/h, above the $0.340/h shown)" in caught.value.message
    assert emu.alive() == []
    provider = runpod(emu, clock, cloud="ALL")
    rent(settings, provider, [], price_per_hour=0.80)  # the user's own price covers the secure pool
    assert [c["cloud"] for c in creates(emu)] == ["COMMUNITY", "COMMUNITY", "SECURE"]
    assert emu.pods[provider.made[0].id].cloud == "SECURE"
    assert "cannot access that pool" in caplog.text and "asking in SECURE cloud instead ($0.740/h)" in caplog.text


def test_other_create_refusals_keep_their_meaning(tmp_path: Path, emu: RunPodEmulator, clock: FakeClock) -> None:
    emu.set_stock(RTX4090, 0)
    deps = make_deps(rented_settings(tmp_path), runpod(emu, clock), [])
    with pytest.raises(ProviderError, match="no RTX 4090 to give") as caught:
        up(UpOptions(experiment="exp1", provider="runpod"), deps)
    assert not isinstance(caught.value, PoolDenied | ProviderAuthError)
