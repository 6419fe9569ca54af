"""The laptop's two calls on a recovering run (core/watchdog_client.py): GET /v1/runs/{run_id} (a 404, a run
the watchdog does not hold, is None, never an error: every `gpuc down` asks it) and POST .../stop, both
admin, over an in-process transport that answers as the watchdog's routes do."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from gpuc.core.api import AttemptRecord, RunRecovery
from gpuc.core.errors import WatchdogError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.watchdog_client import WatchdogClient

RUN = RunRecovery(
    run_id="r1234abcd",
    experiment="exp1",
    provider="vast",
    recover=2,
    envelope_usd=3.0,
    deadline_at=1.8e9,
    spent_usd=0.2,
    as_of=1.78e9,
    attempts=[AttemptRecord(pod_id="31000000", start=1.78e9, price_per_hour=0.25, disk_per_hour=0.01)],
)


def client(tmp_path: Path, answer: httpx.Response, seen: list[httpx.Request]) -> WatchdogClient:
    settings = Settings(
        home=tmp_path,
        env_file=tmp_path / "none.env",
        admin_token=SecretStr("admin-x"),
        watchdog_url="https://wd.example",
    )

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    return WatchdogClient(settings, httpx.MockTransport(handler))


def test_run_reads_the_run_with_the_admin_token(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    with client(tmp_path, httpx.Response(200, json=json.loads(RUN.model_dump_json())), seen) as wd:
        assert wd.run("r1234abcd") == RUN
    [request] = seen
    assert (request.method, request.url.path) == ("GET", "/v1/runs/r1234abcd")
    assert request.headers["Authorization"] == "Bearer admin-x"


def test_a_run_the_watchdog_does_not_hold_is_none(tmp_path: Path) -> None:
    with client(tmp_path, httpx.Response(404, json={"error": "no such run"}), []) as wd:
        assert wd.run("r1234abcd") is None


def test_any_other_refusal_is_an_error(tmp_path: Path) -> None:
    with client(tmp_path, httpx.Response(401, json={"error": "bad token"}), []) as wd, pytest.raises(WatchdogError):
        wd.run("r1234abcd")


def test_stop_run_posts_to_the_runs_stop(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []
    with client(tmp_path, httpx.Response(200, json={"ok": True}), seen) as wd:
        assert wd.stop_run("r/../x").ok
    [request] = seen
    assert request.method == "POST" and request.url.raw_path == b"/v1/runs/r%2F..%2Fx/stop"
