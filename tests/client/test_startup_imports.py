"""What `gpuc ls` and `gpuc ledger` load in a home without a token or a key (a fresh install): no HTTP code
at all, since there is nothing to read over the network. (In a home with a watchdog and keys they read
with httpx, gpuc's one HTTP client: bench/ls_latency.py measures what the network costs them.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("command", ["ls", "ledger"])
def test_without_a_token_no_http_code_loads(tmp_path: Path, command: str) -> None:
    env = {"HOME": str(tmp_path), "GPUC_HOME": str(tmp_path / "gpuc"), "GPUC_ENV_FILE": str(tmp_path / "no.env")}
    packages, said = loaded(command, env)
    assert packages == ["click"], said
