"""Status a person can trust: `keep` says its limit in words (and the watchdog's cap), a GPUC_HOME that cannot
be used is one line naming it, `watchdog serve` says where it listens and logs each pass and each refusal
without a secret, `doctor` says which .env it read, progress uses `\\r` only on a terminal, tables fit."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import cast

import httpx
import pytest

from gpuc.client.money.offers import OfferFilters, collect
from gpuc.client.money.render import render_offers
from gpuc.client.onpod.ssh import _Progress
from gpuc.client.runs import ensure_home
from gpuc.client.setup.doctor import env_source
from gpuc.client.text import clock_utc, short_span, span_words
from gpuc.client.watchdog.admin import serve_banner, token_source
from gpuc.core.api import ReapAction, ReapReport
from gpuc.core.errors import ConfigError
from gpuc.core.models import Offer
from gpuc.core.providers.base import Provider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.reaper import pass_line
from gpuc.functions.server import start_in_thread

ADMIN = "admin-token-PLANTED-4f1e2d3c"
T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z


# -- keep --for: durations and times in words (the command itself: test_keep_words.py) --------------------


@pytest.mark.parametrize(
    ("seconds", "words", "short"),
    [(45, "45 s", "45s"), (1800, "30 min", "30m"), (7200, "2 h", "2h00m"), (5400, "1 h 30 min", "1h30m"),
     (93600, "1 d 2 h", "1d02h")],
)  # fmt: skip
def test_spans_in_words_and_in_cells(seconds: float, words: str, short: str) -> None:
    assert (span_words(seconds), short_span(seconds)) == (words, short)


def test_a_time_on_another_day_carries_its_date() -> None:
    assert clock_utc(T0 + 600, T0) == "14:23 UTC"
    assert clock_utc(T0 + 86400, T0) == "2026-09-22 14:13 UTC"


# -- GPUC_HOME that cannot be used: one line naming the folder and the fix ----------------------------------


def test_a_home_that_is_a_file_is_named_with_the_fix(tmp_path: Path) -> None:
    home = tmp_path / "file"
    home.write_text("")
    with pytest.raises(ConfigError) as caught:
        ensure_home(home)
    assert str(home) in caught.value.message and "GPUC_HOME" in (caught.value.hint or "")


@pytest.mark.parametrize("command", [["ls"], ["keep", "x", "--for", "1h"], ["watchdog", "serve", "--port", "0"]])
def test_gpuc_with_an_unusable_home_prints_one_line_and_no_traceback(tmp_path: Path, command: list[str]) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("")  # a file where a folder must be created: mkdir fails, even for root
    env = {**os.environ, "GPUC_HOME": str(blocker / "gpuc"), "GPUC_ENV_FILE": str(tmp_path / "no.env")}
    done = subprocess.run(
        [sys.executable, "-m", "gpuc.client.cli", *command], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: gpuc cannot use its folder {blocker / 'gpuc'}: cannot create it (Not a directory)"]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert "fix: point GPUC_HOME at a folder you can write" in done.stderr


# -- watchdog serve: where, how often, where the token is; one line per pass and per refusal ----------------


def test_serve_says_where_it_listens_and_where_the_token_is_never_the_token(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path / "h", env_file=tmp_path / ".env", admin_token=SecretStr(ADMIN), reaper_period_s=300
    )
    lines = serve_banner(settings, "http://127.0.0.1:8787", {})
    text = "\n".join(lines)
    assert "listening on http://127.0.0.1:8787" in lines[0] and "loopback" in lines[0]
    assert "reaper: a pass every 5 min" in text
    assert f"admin token: kept in {tmp_path / 'h' / 'config.json'}" in text and ADMIN not in text
    assert "already points here (GPUC_WATCHDOG_URL=http://127.0.0.1:8787)" in text
    assert token_source(settings, {"GPUC_ADMIN_TOKEN": ADMIN}) == "the environment (GPUC_ADMIN_TOKEN)"
    (tmp_path / ".env").write_text(f"GPUC_ADMIN_TOKEN={ADMIN}\n")
    assert token_source(settings, {}) == f"{tmp_path / '.env'} (GPUC_ADMIN_TOKEN)"


def test_serve_on_another_port_tells_the_laptop_the_line_to_add(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "h", env_file=tmp_path / ".env", admin_token=SecretStr(ADMIN))
    text = "\n".join(serve_banner(settings, "http://0.0.0.0:9000", {}))
    assert f"add GPUC_WATCHDOG_URL=http://127.0.0.1:9000 to {tmp_path / '.env'}" in text
    assert "points at http://127.0.0.1:8787, not here" in text


def test_a_refused_request_is_one_log_line_without_the_token(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(home=tmp_path / "h", env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN))
    wrong = "wrong-token-PLANTED-0a9b8c7d"
    with start_in_thread(settings, port=0) as server, caplog.at_level(logging.DEBUG, "gpuc.functions.server"):
        httpx.get(f"{server.url}/v1/status", headers={"Authorization": f"Bearer {wrong}"}, timeout=10)
        httpx.get(f"{server.url}/v1/status", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    infos = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert infos == ["refused GET /v1/status from 127.0.0.1: 401 missing or wrong admin token"]
    assert all(wrong not in r.getMessage() and ADMIN not in r.getMessage() for r in caplog.records)


def test_each_reaper_pass_is_one_line_by_pod_id() -> None:
    report = ReapReport(
        ran_at=T0,
        blind=True,
        blind_providers=["vast"],
        actions=[
            ReapAction(pod_id="p1", provider="runpod", action="destroy", reason="no heartbeat for 9 min"),
            ReapAction(pod_id="p2", provider="vast", action="skip", reason="blind"),
        ],
    )
    assert pass_line(report) == "reaper pass: destroy runpod/p1; could not read vast (no destroys there)"
    assert pass_line(ReapReport(ran_at=T0)) == "reaper pass: nothing to do"


def test_serve_logs_the_reaper_passes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(home=tmp_path / "h", env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN))
    done = threading.Event()

    class Once(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("reaper pass:"):
                done.set()

    handler = Once()
    logging.getLogger("gpuc.reaper").addHandler(handler)
    try:
        with caplog.at_level(logging.INFO, "gpuc.reaper"), start_in_thread(settings, port=0, reaper_interval_s=60):
            assert done.wait(30)
    finally:
        logging.getLogger("gpuc.reaper").removeHandler(handler)


# -- doctor: which .env it read, and why that one -----------------------------------------------------------


def test_doctor_says_which_env_file_it_read_and_why(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    env_file = repo / ".env"
    env_file.write_text("")
    assert env_source(env_file, {}, repo).detail == f"{env_file} (this folder)"
    assert "nearest from this folder up to the repo root" in env_source(env_file, {}, repo / "sub").detail
    assert "GPUC_ENV_FILE" in env_source(env_file, {"GPUC_ENV_FILE": str(env_file)}, tmp_path).detail
    config = tmp_path / "xdg" / "gpuc" / ".env"
    config.parent.mkdir(parents=True)
    config.write_text("")
    assert "your config folder" in env_source(config, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}, repo).detail
    assert env_source(repo / "missing.env", {}, repo).detail.startswith("none: no .env from")


# -- progress and tables ------------------------------------------------------------------------------------


def test_progress_in_a_log_has_no_carriage_return_and_one_line_per_state(capsys: pytest.CaptureFixture[str]) -> None:
    progress = _Progress()
    for attempt in range(1, 4):
        progress(f"\r  ssh root@host:22: waiting ({attempt * 3}s, attempt {attempt})")
    progress("\r  ssh root@host:22: up after 9s                    \n")
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines() == ["  ssh root@host:22: waiting (3s, attempt 1)", "  ssh root@host:22: up after 9s"]


def test_the_offers_table_fits_100_columns_with_runpods_long_ids() -> None:
    class Fake:
        def __init__(self, offers: list[Offer]) -> None:
            self.found = offers

        def offers(self, gpu: str | None, interruptible: bool, **_: object) -> list[Offer]:
            return self.found

        def close(self) -> None:
            pass

    runpod = [
        Offer(provider="runpod", id="NVIDIA RTX 6000 Ada Generation", gpu="RTX 6000 Ada", price_per_hour=0.77),
        Offer(provider="runpod", id="NVIDIA GeForce RTX 4090", gpu="RTX 4090", price_per_hour=0.74, stock="High"),
    ]
    vast = [
        Offer(provider="vast", id="12345678", gpu="RTX 4090", price_per_hour=0.35, min_bid=0.2, reliability=0.995,
              inet_down_mbps=850, verified=True, cuda_max=12.8),
    ]  # fmt: skip
    factories = {"runpod": lambda: cast(Provider, Fake(runpod)), "vast": lambda: cast(Provider, Fake(vast))}
    report = collect(factories, None, False, OfferFilters())
    lines = render_offers(report).splitlines()
    assert max(len(line) for line in lines) <= 100
    assert all(any(o.id in line for line in lines) for o in [*runpod, *vast])
