"""`gpuc page`: a link to the watchdog's status page for your phone, optionally as a QR code.

The link is a capability (functions/links.py `page`): whoever has it sees your pods and may press
the page's buttons (each one action on one pod, through the watchdog's single-use links) until it
expires. So it is said in one line under the link, with the time it dies, and it lives what `--for` asks
(the watchdog caps it at a day). Nothing secret is in it: no admin token, no provider key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from gpuc.client.context import Ctx, pass_ctx
from gpuc.core.clock import parse_duration
from gpuc.core.errors import ConfigError

if TYPE_CHECKING:
    from gpuc.core import api
    from gpuc.core.watchdog_client import WatchdogClient

DEFAULT_FOR = "2h"
DAY_S = 24 * 3600
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@click.command()
@click.option("--for", "duration", default=DEFAULT_FOR, show_default=True, help="How long the link works: 30m, 2h, 1d.")
@click.option("--qr", is_flag=True, help="Also print it as a QR code to scan with the phone.")
@pass_ctx
def page(ctx: Ctx, duration: str, qr: bool) -> None:
    """Print a link to the watchdog's status page for your phone: your pods, the month's spend, and
    buttons (keep 1 h, extend 2 h, destroy...).

    The link is a key: anyone who has it can see your pods and press its buttons until it expires
    (at most 1 d). Do not paste it where others read.
    """
    seconds = for_seconds(duration)
    try:
        answer = request_link(ctx.watchdog, seconds)
    finally:
        ctx.close()  # the watchdog's connection: nothing else in this command needs it
    for line in link_lines(answer.url, answer.expires_at, ctx.clock.now()):
        click.echo(line)
    if qr:
        for line in qr_lines(answer.url):
            click.echo(line)


def for_seconds(duration: str) -> int:
    seconds = int(parse_duration(duration))
    if not 60 <= seconds <= DAY_S:
        raise ConfigError(f"--for {duration} is out of range", hint="a page link lives 1m to 1d: --for 2h")
    return seconds


def request_link(client: WatchdogClient, seconds: int) -> api.PageLinkAnswer:
    from gpuc.core import api

    return client._call("POST", "/v1/page-link", api.PageLinkAnswer, api.PageLinkRequest(for_s=seconds))


def link_lines(url: str, expires_at: float, now: float) -> list[str]:
    from gpuc.client.text import clock_utc

    lines = [url, f"anyone with this link can see your pods and press its buttons until {clock_utc(expires_at, now)}"]
    if (urlsplit(url).hostname or "") in _LOCAL_HOSTS:
        lines.append(
            "! this watchdog is on loopback: the link opens on this machine only. For a phone, serve it where the "
            "phone reaches it and set GPUC_PUBLIC_URL (or use the deployed watchdog)"
        )
    return lines


def qr_lines(text: str) -> list[str]:
    """The QR code in half-block characters (two module rows per line, so it fits 80 columns), drawn
    light-on-dark: a lit cell is a light module, which is what a dark terminal shows and a camera reads."""
    import segno  # a QR encoder is real work (Reed-Solomon, masks, versions): see the README's Dependencies

    code = segno.make(text, error="m", micro=False)
    return half_blocks(code.matrix_iter(scale=1, border=2))


def half_blocks(rows: Iterable[Iterable[int]]) -> list[str]:
    grid = [[bool(cell) for cell in row] for row in rows]
    if len(grid) % 2:
        grid.append([False] * len(grid[0]))  # a light row under the quiet zone: all lit
    pairs = zip(grid[::2], grid[1::2], strict=True)
    return ["".join(_cell(top, bottom) for top, bottom in zip(upper, lower, strict=True)) for upper, lower in pairs]


def _cell(top_dark: bool, bottom_dark: bool) -> str:
    # Lit = light module: "█" both light, "▀" top light only, "▄" bottom light only, " " both dark.
    return {(False, False): "█", (False, True): "▀", (True, False): "▄", (True, True): " "}[(top_dark, bottom_dark)]
