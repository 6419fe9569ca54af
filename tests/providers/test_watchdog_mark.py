"""The watchdog's mark (core.pod.WATCHDOG_ENV) goes to the provider with the pod's env and comes
back in every listing, where another watchdog on the account reads it: against both emulators."""

from __future__ import annotations

import pytest

from gpuc.core.models import PodSpec
from gpuc.core.pod import WATCHDOG_ENV
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider

OFFER = "11684738"  # the emulator's RTX 4090 (tests/providers/test_vast_provider.py)


def marked(provider: str, **kw: object) -> PodSpec:
    return PodSpec.model_validate(
        {
            "experiment": "tiny-llama",
            "run_id": "run0001",
            "provider": provider,
            "gpu_type": "RTX 4090",
            "env": {WATCHDOG_ENV: "wd-0123456789abcdef"},
            **kw,
        }
    )


@pytest.mark.parametrize("name", ["runpod", "vast"])
def test_the_mark_comes_back_in_the_listing(name: str, request: pytest.FixtureRequest) -> None:
    provider: RunPodProvider | VastProvider = request.getfixturevalue(name)
    extra = {"offer_id": OFFER, "price_per_hour": 0.35} if name == "vast" else {}
    made = provider.create(marked(name, **extra))
    listed = {p.id: p for p in provider.list_pods()}
    assert listed[made.id].watchdog == "wd-0123456789abcdef" and listed[made.id].managed
    got = provider.get(made.id)
    assert got is not None and got.watchdog == "wd-0123456789abcdef"
