"""A multi-GPU run's envelope is the bid x its GPUs: `--bid` is per GPU (as Vast prices a machine), so a 2-GPU run
bills twice the bid an hour, and an envelope at one bid would hold half of what the run may spend (the budget
check passing a run that crosses it; the watchdog's cap on every re-rent at half the run's machine)."""

from __future__ import annotations

import pytest

from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.recovery.prepare import envelope_of, run_disk_gb
from gpuc.core.budget import run_envelope_usd
from gpuc.core.models import PodSpec


def spec(gpus: int) -> PodSpec:
    return PodSpec(experiment="exp1", run_id="r1abc", provider="vast", gpu_type="RTX 4090", gpu_count=gpus,
                   interruptible=True, bid_per_gpu=0.25)  # fmt: skip


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_the_envelope_is_the_bid_times_the_gpus(gpus: int) -> None:
    opts = UpOptions("exp1", provider="vast", gpu_count=gpus, interruptible=True, bid=0.25, recover=2, max_hours=3)
    envelope = envelope_of(opts, spec(gpus))
    assert envelope is not None
    assert envelope.price_cap == pytest.approx(0.25 * gpus)
    assert envelope.usd == pytest.approx(run_envelope_usd(0.25 * gpus, envelope.disk_per_hour, 3))
    assert envelope.disk_per_hour == pytest.approx(run_disk_gb(spec(gpus)) * 0.3 / 720)  # the disk is the machine's
