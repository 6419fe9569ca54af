"""`up --volume-gb`: the pod's persistent volume, on every rented provider. RunPod refuses one under 10 GB (its
own floor, tests/client/test_runpod_first_rental.py); on Vast, whose instance has one disk, the quote is
priced with the disk the create will ask for, not a default 30 GB."""

from __future__ import annotations

import json
from pathlib import Path

from fakes.up import make_deps, rented_settings

from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.clock import FakeClock
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.vast import VastEmulator

VAST_KEY = "f00dPLANTEDvastkey4c3b2a19087f6e5d"


def test_a_vast_quote_is_priced_with_the_volume_asked_for(tmp_path: Path, clock: FakeClock) -> None:
    emu = VastEmulator(api_key=VAST_KEY, clock=clock)
    vast = VastProvider(VAST_KEY, url="https://console.vast.test/api/v0", transport=emu.transport(), clock=clock,
                        backoff=zero_backoff)  # fmt: skip
    lines: list[str] = []
    deps = make_deps(rented_settings(tmp_path), vast, lines)
    for size in (None, 100):
        up(UpOptions(experiment="exp1", provider="vast", volume_gb=size, dry_run=True), deps)
    searches = [json.loads(r.body) for r in emu.requests if r.path.rstrip("/").endswith("/bundles")]
    assert [s["allocated_storage"] for s in searches] == [30.0, 100.0]
    assert any("disk 20+100 GB" in line for line in lines)
    assert emu.alive() == []  # a dry run
