"""What `gpuc ls` and `gpuc ledger` load (bench/cli_startup.py measures the time; this checks the cause).
With a watchdog to read and a ledger with rows, neither loads pydantic or httpx for the watchdog's status
or the ledger; in a home without a token, not even the standard library's HTTP code."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.ledger import Ledger
from gpuc.core.settings import SecretStr, Settings
from gpuc.functions.server import start_in_thread

WATCHED = ("pydantic", "httpx", "http", "click")


def loaded(command: str, env: dict[str, str]) -> tuple[list[str], str]:
    """(the WATCHED top-level packages loaded by one `gpuc COMMAND`, its stderr)."""
    code = (
        f"import sys; sys.argv = ['gpuc', {command!r}]\n"
        "import json\nfrom gpuc.client.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(WATCHED)!r})), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    *said, last = done.stderr.strip().splitlines()
    return json.loads(last), "\n".join(said)


@pytest.fixture
def lived_in(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A home with a .env naming a running watchdog and its admin token, and a ledger row."""
    token = secrets.token_hex(16)
    watchdog = start_in_thread(Settings(home=tmp_path / "watchdog", env_file=tmp_path / "none.env",
                                        admin_token=SecretStr(token)))  # fmt: skip
    try:
        dotenv = tmp_path / ".env"
        dotenv.write_text(f"GPUC_FUNCTIONS_URL={watchdog.url}\nGPUC_ADMIN_TOKEN={token}\n", encoding="utf-8")
        dotenv.chmod(0o600)
        Ledger(tmp_path / "gpuc" / "gpu-ledger.csv").start(
            "pod-1", provider="runpod", experiment="exp", gpu="RTX 4090", price_per_hour=0.69, start_ts=time.time()
        )
        yield {"HOME": str(tmp_path), "GPUC_HOME": str(tmp_path / "gpuc"), "GPUC_ENV_FILE": str(dotenv)}
    finally:
        watchdog.stop()


@pytest.mark.parametrize("command", ["ls", "ledger"])
def test_reading_the_watchdog_and_the_ledger_loads_no_pydantic_and_no_httpx(
    lived_in: dict[str, str], command: str
) -> None:
    packages, said = loaded(command, lived_in)
    assert "unreachable" not in said and "error" not in said, said  # the watchdog was read
    assert packages == ["click", "http"], said


@pytest.mark.parametrize("command", ["ls", "ledger"])
def test_without_a_token_no_http_code_loads(tmp_path: Path, command: str) -> None:
    env = {"HOME": str(tmp_path), "GPUC_HOME": str(tmp_path / "gpuc"), "GPUC_ENV_FILE": str(tmp_path / "no.env")}
    packages, said = loaded(command, env)
    assert packages == ["click"], said
