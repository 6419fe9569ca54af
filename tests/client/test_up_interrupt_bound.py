"""`up`'s abort path, in-process: the destroy is bounded in time (a provider that never answers does not hold the
terminal with the user's Ctrl-C deferred), what could not be destroyed is named with where to find it, and a
stop signal during the destroy is deferred and said, never raised."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from gpuc.client.context import Ctx
from gpuc.client.pods import abort
from gpuc.client.pods.interrupts import Interrupted
from gpuc.client.runs import RunStore
from gpuc.core.clock import FakeClock, SystemClock
from gpuc.core.errors import GpucError
from gpuc.core.models import PodSpec
from gpuc.core.providers.base import DestroyResult
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.fakes import FakeProvider

SPEC = PodSpec(experiment="exp", run_id="run-bound", provider="fake", gpu_type="RTX 4090")


class StuckProvider(FakeProvider):
    """A destroy that never answers (120 s here); a Ctrl-C arrives while it hangs."""

    def __init__(self) -> None:
        super().__init__(FakeClock())
        self.asked: list[str] = []

    def destroy(self, pod_id: str) -> DestroyResult:
        self.asked.append(pod_id)
        signal.raise_signal(signal.SIGINT)  # the user, pressing Ctrl-C again while the destroy hangs
        time.sleep(120)
        return super().destroy(pod_id)


def ctx_for(tmp_path: Path, provider: FakeProvider) -> Ctx:
    settings = Settings(home=tmp_path / "home")
    return Ctx(settings, runs=RunStore(settings.home), clock=SystemClock(), providers={"fake": provider})


def test_a_stuck_destroy_is_given_up_in_time_naming_the_pod_and_where_to_find_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(abort, "CLEANUP_LIMIT_S", 0.5)
    provider = StuckProvider()
    pod = provider.add("p1", name=SPEC.name)
    started = time.monotonic()
    abort.abort(pod, SPEC, ctx_for(tmp_path, provider), Interrupted(signal.SIGINT), [])
    assert time.monotonic() - started < 30.0  # the 0.5 s limit, with room for a loaded machine; not the 120 s
    err = capsys.readouterr().err
    assert provider.asked == ["p1"] and provider.alive("p1")
    assert "still destroying" in err  # the second Ctrl-C: said, not raised
    assert "could not destroy p1 within 0s" in err or "could not destroy p1 within 1s" in err, err
    assert "gpuc ls" in err and SPEC.name in err and "watchdog" in err, err


def test_a_pod_whose_create_had_no_answer_is_found_by_name_and_destroyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    provider = FakeProvider(FakeClock())
    provider.add("other", name="gpuc-someone-else")  # never touched: not this run's name
    provider.add("p2", name=SPEC.name)
    abort.abort(None, SPEC, ctx_for(tmp_path, provider), Interrupted(signal.SIGHUP), [])
    assert provider.destroyed == ["p2"] and provider.alive("other")
    err = capsys.readouterr().err
    assert "up ended early: terminal closed (SIGHUP); destroyed p2" in err and "found by its name" in err, err


def test_the_abort_line_quoting_a_failure_is_scrubbed_of_secrets_and_terminal_controls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reason may quote a provider or a pod (a stranger's machine): redacted and cleaned, as the CLI's errors."""
    key = "rpa_" + "K" * 36
    provider = FakeProvider(FakeClock())
    pod = provider.add("p3", name=SPEC.name)
    settings = Settings(home=tmp_path / "home", runpod_api_key=SecretStr(key))
    ctx = Ctx(settings, runs=RunStore(settings.home), clock=SystemClock(), providers={"fake": provider})
    abort.abort(pod, SPEC, ctx, GpucError(f"the pod said {key}\x1b[2J\x1b]0;owned\x07 no"), [])
    err = capsys.readouterr().err
    assert provider.destroyed == ["p3"]
    assert "destroyed p3" in err and key not in err and "\x1b" not in err and "\x07" not in err, repr(err)
