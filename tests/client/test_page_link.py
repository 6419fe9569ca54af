"""`gpuc page`: the link from the real local watchdog, the capability said in one line, the QR code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import segno
from click.testing import CliRunner

from gpuc.client.command_table import COMMANDS
from gpuc.client.watchdog import page as pagelink
from gpuc.core.errors import ConfigError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.server import ServerHandle, start_in_thread

ADMIN = "admin-token-PLANTED-9a8b7c6d"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerHandle, dict[str, str]]]:
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN))
    server = start_in_thread(settings, port=0)
    try:
        yield server, {"GPUC_HOME": str(home), "GPUC_WATCHDOG_URL": server.url, "GPUC_ADMIN_TOKEN": ADMIN}
    finally:
        server.stop()


def test_gpuc_page_prints_the_link_and_says_it_is_a_key(served: tuple[ServerHandle, dict[str, str]]) -> None:
    server, env = served
    result = CliRunner().invoke(pagelink.page, ["--for", "30m"], env=env)
    assert result.exit_code == 0, result.output
    url, capability, loopback = result.output.splitlines()
    assert url.startswith(f"{server.url}/p/") and ADMIN not in result.output
    assert capability.startswith("anyone with this link can see your pods and press its buttons until ")
    assert capability.endswith(" UTC")
    assert "loopback" in loopback and "GPUC_PUBLIC_URL" in loopback


def test_gpuc_page_qr_fits_80_columns_and_encodes_the_link(served: tuple[ServerHandle, dict[str, str]]) -> None:
    _, env = served
    result = CliRunner().invoke(pagelink.page, ["--qr"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    url, art = lines[0], lines[3:]
    assert art and max(len(line) for line in art) <= 80
    assert set("".join(art)) <= set("█▀▄ ")
    assert art == pagelink.qr_lines(url)
    # The art is the code: undo the half blocks and compare with segno's own matrix, light-on-dark.
    rows = [list(r) for r in segno.make(url, error="m", micro=False).matrix_iter(scale=1, border=2)]
    tops = [[ch in "█▀" for ch in line] for line in art]  # lit = a light module
    bottoms = [[ch in "█▄" for ch in line] for line in art]
    rebuilt = [row for pair in zip(tops, bottoms, strict=True) for row in pair][: len(rows)]
    assert rebuilt == [[not cell for cell in row] for row in rows]


def test_a_page_link_beyond_a_day_is_refused_before_asking(served: tuple[ServerHandle, dict[str, str]]) -> None:
    _, env = served
    result = CliRunner().invoke(pagelink.page, ["--for", "2d"], env=env)
    assert isinstance(result.exception, ConfigError) and "1m to 1d" in (result.exception.hint or "")


def test_the_command_is_registered() -> None:
    assert COMMANDS["page"][0] == "gpuc.client.watchdog.page:page"
