"""`gpuc ls` tells the truth: "no pods" only when every provider was read, GPU, age, cost so far and the
watchdog's view per pod, ISO 8601 UTC times in --json, a table that fits 100 columns; and `gpuc ls` starts
without pydantic or httpx on a fresh install."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes.ctx import StatusView

from gpuc.client.context import Ctx
from gpuc.client.pods.commands import ls
from gpuc.client.pods.listing import cells, ls_lines
from gpuc.client.pods.survey import dumps_rows, survey
from gpuc.client.runs import RunStore
from gpuc.client.text import WIDTH
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderAuthError, ProviderUnavailable, WatchdogError
from gpuc.core.models import Balance, PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import DestroyResult, Provider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z


class ListingProvider(Provider):
    def __init__(self, name: str, pods: list[Pod] | None = None, fail: Exception | None = None) -> None:
        self.name = name
        self.pods = pods or []
        self.fail = fail

    def list_pods(self) -> list[Pod]:
        if self.fail:
            raise self.fail
        return list(self.pods)

    def create(self, spec: PodSpec) -> Pod:
        raise AssertionError("ls never creates")

    def get(self, pod_id: str) -> Pod | None:
        raise AssertionError("ls never reads one pod")

    def stop(self, pod_id: str) -> None:
        raise AssertionError("ls never stops")

    def destroy(self, pod_id: str) -> DestroyResult:
        raise AssertionError("ls never destroys")

    def balance(self) -> Balance:
        raise AssertionError("ls never reads balances")


class Watchdog(StatusView):
    def __init__(self, records: list[PodRecord] | None = None, down: bool = False) -> None:
        self.records, self.down = records or [], down

    def status(self) -> StatusResponse:
        if self.down:
            raise WatchdogError("cannot reach the watchdog at http://x", hint="start it")
        return StatusResponse(server_time=T0, reaper_last_run=T0 - 60, reaper_period_s=300, pods=self.records)


def deps_with(tmp_path: Path, providers: Sequence[ListingProvider], watchdog: Watchdog, keys: bool = True) -> Ctx:
    settings = Settings(
        home=tmp_path / "home",
        env_file=tmp_path / "none.env",
        runpod_api_key=SecretStr("rpa_x") if keys else None,
        vast_api_key=SecretStr("vast_x") if keys else None,
    )
    return Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=FakeClock(T0),
        echo=lambda _: None,
        watchdog=watchdog,  # type: ignore[arg-type]
        providers={p.name: p for p in providers},
    )


def every_provider(*pods: Pod, fail: str | None = None) -> list[ListingProvider]:
    by_name: dict[str, list[Pod]] = {"local": [], "runpod": [], "vast": []}
    for pod in pods:
        by_name[pod.provider].append(pod)

    def failure(name: str) -> Exception | None:
        return ProviderUnavailable("HTTP 503 after 4 tries", provider=name) if name == fail else None

    return [ListingProvider(name, found, failure(name)) for name, found in by_name.items()]


def a_pod(**fields: object) -> Pod:
    values: dict[str, object] = {
        "provider": "runpod",
        "id": "abc123xyz45678",
        "name": "gpuc-0123456789",
        "experiment": "lora-sweep-3",
        "status": "running",
        "gpu": "NVIDIA GeForce RTX 4090",
        "price_per_hour": 0.74,
        "created_at": T0 - 3900,
        "managed": True,
    }
    return Pod(**{**values, **fields})  # type: ignore[arg-type]


def record(pod_id: str, **fields: object) -> PodRecord:
    values: dict[str, object] = {
        "pod_id": pod_id,
        "provider": "runpod",
        "name": "gpuc-0123456789",
        "experiment": "lora-sweep-3",
        "registered_at": T0 - 3900,
        "last_seen": T0 - 32,
        "state": "ok",
    }
    return PodRecord(**{**values, **fields})


# -- "no pods" only when every provider was read -----------------------------------------------------------


def test_ls_with_no_keys_never_says_no_pods_and_names_no_provider_never_set_up() -> None:
    """A fresh install: only the local provider can be read; RunPod and Vast were never asked, and never set up
    or asked for: no line nags about them, and "no pods" names what was read."""
    result = CliRunner().invoke(ls, [])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["no pods at local"], result.stdout
    assert "not checked" not in result.output


def test_a_runpod_only_user_hears_nothing_of_vast(tmp_path: Path) -> None:
    providers = [p for p in every_provider() if p.name != "vast"]
    ctx = deps_with(tmp_path, providers, Watchdog())
    ctx.settings = ctx.settings.with_overrides(vast_api_key=None)
    lines = ls_lines(survey(ctx))
    assert lines == ["no pods at local, runpod"], lines


@pytest.mark.parametrize("why", ["GPUC_PROVIDER", "an open run", "a live pod at the watchdog"])
def test_a_provider_without_a_key_is_named_when_the_user_asked_for_it_or_a_pod_may_bill_there(
    tmp_path: Path, why: str
) -> None:
    """Set as the provider, or holding a run this laptop started that is not closed, or a pod the watchdog
    still watches: a pod there may bill unseen, so `ls` says it did not look."""
    providers = [p for p in every_provider() if p.name != "vast"]
    records = [record("v-1", provider="vast")] if why == "a live pod at the watchdog" else []
    ctx = deps_with(tmp_path, providers, Watchdog(records))
    ctx.settings = ctx.settings.with_overrides(
        vast_api_key=None, provider="vast" if why == "GPUC_PROVIDER" else "local"
    )
    if why == "an open run":
        ctx.runs.record_intent("r-1", "gpuc-r-1", "vast", "exp", T0)
        ctx.runs.set_pod_id("r-1", "v-1")
    lines = ls_lines(survey(ctx))
    assert lines[0] == "no pods at local, runpod" and lines[-1].startswith("vast"), lines
    assert "not checked (no key: set VAST_API_KEY)" in lines[-1]
    if why == "an open run":  # closed, the run says nothing of what bills there now
        ctx.runs.set_phase("r-1", "ended", now=T0)
        assert ls_lines(survey(ctx)) == ["no pods at local, runpod"]


def test_no_pods_is_said_when_every_provider_was_read(tmp_path: Path) -> None:
    listing = survey(deps_with(tmp_path, every_provider(), Watchdog()))
    assert listing.complete and ls_lines(listing) == ["no pods"]


def test_a_provider_that_could_not_be_read_is_not_an_empty_account(tmp_path: Path) -> None:
    listing = survey(deps_with(tmp_path, every_provider(fail="vast"), Watchdog()))
    lines = ls_lines(listing)
    assert "no pods" not in lines and lines[0] == "no pods at local, runpod"
    assert lines[-1].startswith("vast") and "not read:" in lines[-1] and "HTTP 503" in lines[-1]


@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_ls_exits_1_and_names_the_provider_it_could_not_read(tmp_path: Path, as_json: list[str]) -> None:
    ctx = deps_with(tmp_path, every_provider(fail="vast"), Watchdog())
    result = CliRunner().invoke(ls, as_json, obj=ctx)
    assert result.exit_code == 1, result.output
    assert "gpuc ls: incomplete: vast could not be read" in result.stderr
    assert "runpod" not in result.stderr.splitlines()[-1]


def test_an_unread_provider_is_named_once_with_what_to_do(tmp_path: Path) -> None:
    refused = ProviderAuthError("Unauthorized", provider="runpod", status=401, hint="check RUNPOD_API_KEY")
    providers = [ListingProvider(p.name, p.pods, refused if p.name == "runpod" else None) for p in every_provider()]
    result = CliRunner().invoke(ls, [], obj=deps_with(tmp_path, providers, Watchdog()))
    assert result.exit_code == 1, result.output
    assert "! runpod: Unauthorized [HTTP 401] (check RUNPOD_API_KEY)" in result.stderr.splitlines()
    assert "runpod  not read: Unauthorized [HTTP 401]" in result.stdout
    assert "runpod: runpod" not in result.output


def test_ls_exits_0_when_the_unread_providers_have_no_key(tmp_path: Path) -> None:
    ctx = deps_with(tmp_path, every_provider(), Watchdog(), keys=False)
    assert CliRunner().invoke(ls, [], obj=ctx).exit_code == 0


def test_json_says_on_stderr_which_providers_were_not_checked() -> None:
    result = CliRunner().invoke(ls, ["--json"], env={"GPUC_PROVIDER": "vast"})
    assert json.loads(result.stdout) == []
    assert "! vast: not checked (no key" in result.stderr and "runpod" not in result.stderr


# -- what a row says ---------------------------------------------------------------------------------------


def test_a_row_says_gpu_age_cost_so_far_and_the_watchdogs_view(tmp_path: Path) -> None:
    pod = a_pod()
    listing = survey(deps_with(tmp_path, every_provider(pod), Watchdog([record(pod.id)])))
    [row] = listing.rows
    assert row["age_s"] == 3900 and row["cost_usd"] == pytest.approx(0.74 * 3900 / 3600, abs=1e-4)
    header, line = ls_lines(listing)
    assert header.split() == [
        *("PROVIDER", "ID", "EXPERIMENT", "STATUS", "GPU", "AGE", "$/H", "SPENT", "WATCHDOG", "(UTC)", "NEXT")
    ]
    assert "RTX 4090" in line and "NVIDIA" not in line and "1h05m" in line and "0.80" in line
    assert "ok, seen 32s ago" in line  # then NEXT: what ends it (tests/client/test_ls_money.py)


@pytest.mark.parametrize(
    ("rec", "managed", "answered", "view"),
    [
        (None, True, True, "not registered"),
        (None, False, True, "not gpuc's"),
        (None, True, False, "?"),
        ({"state": "late", "last_seen": T0 - 420}, True, True, "LATE, seen 7m ago"),
        ({"state": "down", "destroy_at": T0 + 240}, True, True, "DOWN: destroy at 14:17"),
        ({"lease_until": T0 + 7200}, True, True, "ok, seen 32s ago; kept to 16:13"),
    ],
)
def test_the_watchdog_column(
    tmp_path: Path, rec: dict[str, object] | None, managed: bool, answered: bool, view: str
) -> None:
    pod = a_pod(managed=managed)
    records = [record(pod.id, **rec)] if rec is not None else []
    listing = survey(deps_with(tmp_path, every_provider(pod), Watchdog(records, down=not answered)))
    assert cells(listing.rows[0], listing.watchdog, listing.now)[8] == view  # the WATCHDOG column


def test_json_times_are_iso_8601_utc(tmp_path: Path) -> None:
    pod = a_pod()
    listing = survey(deps_with(tmp_path, every_provider(pod), Watchdog([record(pod.id, lease_until=T0 + 60)])))
    [row] = json.loads(dumps_rows(listing.rows))
    assert row["created_at"] == "2026-09-21T13:08:20Z"
    assert row["last_seen"] == "2026-09-21T14:12:48Z" and row["lease_until"] == "2026-09-21T14:14:20Z"
    assert row["age_s"] == 3900 and row["heartbeat_age_s"] == 32 and row["watchdog"] == "ok"


def test_the_table_fits_100_columns_and_never_cuts_an_id(tmp_path: Path) -> None:
    pods = [
        a_pod(id="abc123xyz45678", experiment="a-very-long-experiment-name-about-something-" + "x" * 20),
        a_pod(provider="vast", id="31000001", gpu="H100 SXM", gpu_count=8, status="provisioning"),
        a_pod(provider="local", id="lp-0123456789", experiment=None, price_per_hour=None, created_at=None),
    ]
    records = [record(p.id, state="down", destroy_at=T0 + 240, lease_until=T0 + 90000) for p in pods]
    listing = survey(deps_with(tmp_path, every_provider(*pods), Watchdog(records)))
    lines = ls_lines(listing, width=WIDTH)  # a terminal of 100 columns
    assert max(len(line) for line in lines) <= WIDTH
    assert all(any(p.id in line for line in lines) for p in pods)
    assert any("8x H100" in line for line in lines)
    # Not a terminal (a pipe, a file, cron): nothing is cut, whatever the width.
    whole = ls_lines(listing)
    assert not any("…" in line for line in whole)
    assert any(f"a-very-long-experiment-name-about-something-{'x' * 20} " in line for line in whole)


def test_through_a_pipe_ls_cuts_nothing(tmp_path: Path) -> None:
    """`gpuc ls | cat` (CliRunner's stdout is no terminal): NEXT whole, as --json has it."""
    pod = a_pod(experiment="an-experiment-with-a-name-long-enough-to-push-next-off-a-100-column-screen")
    rec = record(pod.id, deadline_at=T0 + 11 * 3600 + 59 * 60 + 30)
    result = CliRunner().invoke(ls, [], obj=deps_with(tmp_path, every_provider(pod), Watchdog([rec])))
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if pod.id in line]
    assert "…" not in result.stdout and (pod.experiment or "") in row and "deadline in 11h59m" in row, result.stdout


# -- startup -----------------------------------------------------------------------------------------------


def test_gpuc_ls_on_a_fresh_install_loads_neither_pydantic_nor_httpx(tmp_path: Path) -> None:
    """Each costs more than a bare interpreter's start (bench/cli_startup.py measures the whole)."""
    code = (
        "import sys; sys.argv = ['gpuc', 'ls']\n"
        "from gpuc.client.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'httpx', 'click'}), file=sys.stderr)"
    )
    env = {"HOME": str(tmp_path), "GPUC_HOME": str(tmp_path / "gpuc"), "GPUC_ENV_FILE": str(tmp_path / "no.env")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stderr.strip().splitlines()[-1] == "['click']", done.stderr


# -- reads made together -----------------------------------------------------------------------------------


class SlowProvider(ListingProvider):
    def __init__(self, name: str, wait: Callable[[], object], fail: Exception | None = None) -> None:
        super().__init__(name, fail=fail)
        self.wait = wait

    def list_pods(self) -> list[Pod]:
        self.wait()
        return super().list_pods()


class SlowWatchdog(Watchdog):
    def __init__(self, wait: Callable[[], object]) -> None:
        super().__init__()
        self.wait = wait

    def status(self) -> StatusResponse:
        self.wait()
        return super().status()


def test_ls_reads_the_watchdog_and_every_provider_at_once(tmp_path: Path) -> None:
    """Each read answers only once all four have begun: read one after the other, the first would wait
    alone (30 s) and fail. No wall-clock margin, so a loaded machine cannot make it flaky."""
    together = threading.Barrier(4, timeout=30.0)
    slow = [SlowProvider(name, together.wait) for name in ("local", "runpod", "vast")]
    found = survey(deps_with(tmp_path, slow, SlowWatchdog(together.wait)))
    assert found.complete and found.watchdog and not together.broken


def test_a_stuck_provider_does_not_hold_back_the_others_listing(tmp_path: Path) -> None:
    """RunPod hangs until its own request deadline ends it in an error: Vast's pods are listed meanwhile,
    not after it, and RunPod is named as not read."""
    vast_listed = threading.Event()
    while_stuck: list[bool] = []  # was Vast listed while RunPod hung? (an event, not a stopwatch: no margin)
    stuck = SlowProvider(
        "runpod",
        # ends once Vast was listed; read one after the other, RunPod (listed first) would wait it out alone
        lambda: while_stuck.append(vast_listed.wait(30.0)),
        fail=ProviderUnavailable("no whole answer within the deadline", provider="runpod"),
    )
    vast = SlowProvider("vast", vast_listed.set)
    vast.pods = [a_pod(provider="vast", id="v1")]
    found = survey(deps_with(tmp_path, [ListingProvider("local"), stuck, vast], Watchdog()))
    assert while_stuck == [True]  # Vast answered while RunPod still hung
    assert [row["id"] for row in found.rows] == ["v1"] and found.unread == ["runpod"]
