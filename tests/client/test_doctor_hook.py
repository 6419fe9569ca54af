"""`gpuc doctor`'s check of Vast's outbid webhook (client/setup/doctor_hook.py): with --live it asks Vast (the
emulator, through the real VastProvider) for its signed test delivery, which the emulator sends to the real
watchdog route, and passes only when the watchdog verified it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.client.setup.doctor_hook import check_hook_live, check_hook_setup
from gpuc.core.api import StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.emulators.vast import WebhookDelivery
from gpuc.testkit.spot_world import RecWorld, make_rec_world

SECRET = "vast-webhook-secret-for-tests-0123"
PUBLIC = "https://abcdefgh.lambda-url.us-east-1.on.aws"


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock, vast_webhook_secret=SECRET)
    w.emu.webhook_secret = SECRET

    def post(delivery: WebhookDelivery) -> None:  # Vast POSTing to the webhook's URL: the watchdog's route
        w.call("POST", "/v1/hooks/vast", delivery.body, dict(delivery.headers))

    w.emu.on_webhook = post
    yield w
    w.close()


def laptop(tmp_path: Path, **changes: object) -> Settings:
    fields: dict[str, object] = {
        "home": tmp_path / "laptop", "watchdog_url": PUBLIC, "vast_webhook_secret": SecretStr(SECRET),
        "vast_webhook_id": 42, **changes,
    }  # fmt: skip
    return Settings(**fields)  # type: ignore[arg-type]


def status(world: RecWorld) -> StatusResponse:
    return StatusResponse.model_validate(world.admin("GET", "/v1/status").body)


def live(world: RecWorld, settings: Settings) -> tuple[str, str, str]:
    check = check_hook_live(settings, lambda: status(world), lambda: world.vast, world.clock)
    assert check is not None
    return check.status, check.detail, check.fix or ""


def test_vasts_signed_test_delivery_verified_by_the_watchdog_passes(world: RecWorld, tmp_path: Path) -> None:
    state, detail, _ = live(world, laptop(tmp_path))
    assert state == "ok" and "verified" in detail
    assert world.emu.ops("webhook_test")  # Vast was asked


def test_a_watchdog_holding_another_secret_fails_with_the_fix(world: RecWorld, tmp_path: Path) -> None:
    world.emu.webhook_secret = "the-secret-vast-shows-is-another-one"
    state, detail, fix = live(world, laptop(tmp_path))
    assert state == "fail" and "verified none" in detail
    assert f"{PUBLIC}/v1/hooks/vast" in fix and "gpuc watchdog deploy" in fix


def test_a_webhook_id_vast_does_not_know_fails_naming_the_setting(world: RecWorld, tmp_path: Path) -> None:
    state, _detail, fix = live(world, laptop(tmp_path, vast_webhook_id=7))
    assert state == "fail" and "GPUC_VAST_WEBHOOK_ID" in fix


def test_without_the_webhooks_id_it_says_what_it_cannot_know(tmp_path: Path) -> None:
    check = check_hook_setup(laptop(tmp_path, vast_webhook_id=None))
    assert check is not None and check.status == "warn" and "GPUC_VAST_WEBHOOK_ID" in (check.fix or "")


def test_a_watchdog_vast_cannot_reach_is_said(tmp_path: Path) -> None:
    for url in ("http://127.0.0.1:8787", "http://example.org"):
        check = check_hook_setup(laptop(tmp_path, watchdog_url=url))
        assert check is not None and check.status == "warn" and "public HTTPS" in check.detail


def test_without_a_webhook_there_is_nothing_to_check(tmp_path: Path) -> None:
    assert check_hook_setup(laptop(tmp_path, vast_webhook_secret=None)) is None
