"""Titles lead with the experiment and the outcome (never a bare run id), bodies with what
to do; a channel added to .env after the local watchdog started reaches it, the watchdog's status says which
channels it has (kind and index, never a URL), and the laptop names the ones it lacks."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from fakes.watchdog import World

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.notify.message import Action
from gpuc.core.notify.notifier import Notifier, read_outbox
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.core.titles import title
from gpuc.functions.channels import (
    ReloadingNotifier,
    channel_gaps,
    describe,
    held_channels,
    is_local_watchdog,
    send_test,
    settings_channels,
)

TG = "tgram://123456:ABC-def/-100123"
NTFY = "ntfy://gpuc-topic-x7"


def last_title(world: World) -> str:
    return world.outbox()[-1].title


def test_a_failed_job_is_titled_by_experiment_outcome_and_cost(world: World) -> None:
    world.register("p1", experiment="kvcache")
    world.clock.advance(144.0)  # $0.50 an hour: $0.02
    world.event("p1", "job_exit", "job exited with code 3", exit_code=3, end_at=world.now)
    msg = world.outbox()[-1]
    assert msg.title == "kvcache FAILED (exit 3), $0.02"
    assert "gpuc-p1" not in msg.title
    assert msg.message.startswith("See why: `gpuc logs p1`.")


def test_a_good_job_is_ok_with_its_cost(world: World) -> None:
    world.register("p1", experiment="kvcache")
    world.clock.advance(2952.0)
    world.event("p1", "job_exit", "job exited with code 0", exit_code=0, end_at=world.now)
    assert last_title(world) == "kvcache OK, $0.41"


def test_an_idle_warning_says_when_it_destroys(world: World) -> None:
    world.register("p1", experiment="kvcache")
    world.event("p1", "idle_warning", "idle for 15 min: destroying in 5 min")
    msg = world.outbox()[-1]
    assert msg.title.startswith("kvcache idle: destroys at ") and msg.title.endswith(" UTC")
    assert msg.message.startswith("To keep it: `gpuc keep p1 --for 2h`")


def test_pod_text_never_reaches_a_title(world: World) -> None:
    world.register("p1", experiment="kvcache")
    world.event("p1", "info", "kvcache OK, $0.00 https://evil.example")
    assert last_title(world) == "kvcache says"


def test_the_reapers_titles_name_the_experiment(world: World) -> None:
    world.register("p1", experiment="kvcache")
    world.run(3 * 3600)  # silent: marked, destroyed, confirmed gone
    titles = [n.title for n in world.store.recent_notifications(100) if n.pod_id == "p1"]
    assert titles and all(t.startswith("kvcache ") and "gpuc-p1" not in t for t in titles), titles
    assert any(t.startswith("kvcache destroyed by the watchdog, $") for t in titles), titles


def test_one_title_function_shapes_pod_and_fleet_titles() -> None:
    assert title("OK", experiment="kvcache", cost_usd=0.405) == "kvcache OK, $0.41"
    assert title("reaper blind on vast") == "gpuc: reaper blind on vast"


def settings_for(tmp_path: Path, env_text: str) -> tuple[Settings, dict[str, str]]:
    env_file = tmp_path / ".env"
    env_file.write_text(env_text)
    env = {"GPUC_HOME": str(tmp_path / "home"), "GPUC_ENV_FILE": str(env_file)}
    return load_settings(env), env


class Phone:
    def __init__(self) -> None:
        self.hosts: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.hosts.append(request.url.host)
        return httpx.Response(200, json={"ok": True})


def test_a_channel_added_after_the_start_reaches_the_local_watchdog(tmp_path: Path, clock: FakeClock) -> None:
    settings, env = settings_for(tmp_path, f"GPUC_NOTIFY_URLS={NTFY}\n")
    phone = Phone()

    def build(s: Settings) -> Notifier:
        return Notifier.from_settings(s, clock=clock, transport=httpx.MockTransport(phone), sleep=lambda _: None)

    notifier = ReloadingNotifier(settings, env, build=build)
    notifier.send("one", "x")
    assert phone.hosts == ["ntfy.sh"]
    settings.env_file.write_text(f"GPUC_NOTIFY_URLS={NTFY},{TG}\n")
    os.utime(settings.env_file, ns=(1, 1))  # a new mtime even on a coarse clock
    notifier.send("two", "y")
    assert phone.hosts == ["ntfy.sh", "ntfy.sh", "api.telegram.org"]
    assert [(c.index, c.kind) for c in held_channels(notifier) or []] == [(1, "ntfy"), (2, "telegram")]


def test_a_broken_env_file_keeps_the_channels_it_had(tmp_path: Path, clock: FakeClock) -> None:
    settings, env = settings_for(tmp_path, f"GPUC_NOTIFY_URLS={NTFY}\n")
    notifier = ReloadingNotifier(settings, env)
    settings.env_file.write_text("GPUC_NOTIFY_URLS=bogus\n")
    os.utime(settings.env_file, ns=(2, 2))
    assert [c.kind for c in describe(notifier.channels)] == ["ntfy"]


def test_the_status_lists_channels_by_kind_never_url(world: World) -> None:
    answer = world.admin("GET", "/v1/status")
    status = api.StatusResponse.model_validate(answer.body)
    assert status.channels is not None
    assert "123456" not in str(answer.body) and "ABC-def" not in str(answer.body)


def test_the_laptop_names_a_channel_the_watchdog_lacks() -> None:
    laptop = [api.ChannelInfo(index=1, kind="ntfy"), api.ChannelInfo(index=2, kind="telegram")]
    watchdog = [api.ChannelInfo(index=1, kind="ntfy")]
    assert channel_gaps(laptop, watchdog, local=False) == [
        "the watchdog does not have channel 2 (telegram): redeploy: gpuc watchdog deploy"
    ]
    assert "restart it" in channel_gaps(laptop, watchdog, local=True)[0]
    assert channel_gaps(laptop, laptop, local=True) == []
    assert is_local_watchdog("http://127.0.0.1:8787") and not is_local_watchdog("https://x.lambda-url.aws")


def test_send_test_says_which_route_arrived(tmp_path: Path) -> None:
    settings, _ = settings_for(tmp_path, f"GPUC_NOTIFY_URLS={NTFY},{TG}\n")

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403 if request.url.host == "api.telegram.org" else 200)

    sent: list[str] = []
    held = [api.ChannelInfo(index=1, kind="ntfy")]
    status = api.StatusResponse(server_time=0, reaper_period_s=300, channels=held)
    results = send_test(
        settings,
        watchdog_notify=lambda t, m: sent.append(t),
        watchdog_status=lambda: status,
        now=0.0,
        transport=httpx.MockTransport(answer),
    )
    assert [(r.route, r.arrived) for r in results] == [
        ("channel 1 (ntfy)", True),
        ("channel 2 (telegram)", False),
        ("the watchdog", False),
    ]
    assert "does not have channel 2 (telegram)" in results[-1].detail and len(sent) == 1
    assert all("123456" not in r.detail for r in results)
    assert len(settings_channels(settings)) == 2
    assert read_outbox(settings.home / "outbox.jsonl") == []  # a test sends through channels, never the log


@pytest.mark.parametrize("notify_start", [False, True])
def test_agent_start_is_pushed_only_when_asked(tmp_path: Path, notify_start: bool) -> None:
    from gpuc.core.podconfig import PodConfig

    settings, _ = settings_for(tmp_path, f"GPUC_NOTIFY_START={int(notify_start)}\n")
    config = PodConfig.for_pod(settings, pod_id="p", provider="local", experiment="e", run_id="r")
    assert config.notify_start is notify_start


# -- carried onto the phone's actions: titles there too, and the buttons survive a reload --------
def test_a_destroy_from_the_phone_is_titled_by_experiment_and_cost(world: World) -> None:
    world.register("p1", experiment="kvcache")
    world.clock.advance(144.0)
    world.event("p1", "phone_destroy", "destroy asked from the phone; results: 1 file", end_at=world.now)
    msg = world.outbox()[-1]
    assert msg.title == "kvcache destroyed from the phone: results saved, $0.02"
    assert msg.message.startswith("Nothing to do: results/ is synced")


def test_a_tap_from_the_phone_is_titled_by_experiment(world: World) -> None:
    from test_actions_verbs import offered, tap

    world.register("p1", experiment="kvcache", deadline_at=world.now + 3600)
    assert tap(world, offered(world, "p1", "deadline", "extend").token).status == 200
    (told,) = [n for n in world.store.recent_notifications(100) if n.kind == "action"]
    assert told.title.startswith("kvcache deadline moved from the phone: destroys at "), told.title
    assert "gpuc-p1" not in told.title and told.message.startswith("Nothing to do.")


def test_the_reloading_notifier_keeps_the_buttons(tmp_path: Path, clock: FakeClock) -> None:
    settings, env = settings_for(tmp_path, f"GPUC_NOTIFY_URLS={NTFY}\n")
    seen: list[httpx.Request] = []

    def phone(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    def build(s: Settings) -> Notifier:
        return Notifier.from_settings(s, clock=clock, transport=httpx.MockTransport(phone), sleep=lambda _: None)

    keep = Action("keep 1 h", "https://watchdog.example/a/tok123", "tok123", True)
    ReloadingNotifier(settings, env, build=build).send("kvcache idle", "x", pod_id="p1", actions=[keep])
    assert [m.actions for m in read_outbox(settings.home / "outbox.jsonl")] == [(keep,)]
    assert seen and "watchdog.example/a/tok123" in seen[0].content.decode()
