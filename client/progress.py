"""Progress while gpuc waits (a boot, an ssh address, the bootstrap, the upload), for a reader that is not a
terminal: `gpuc up ... 2>&1 | tee run.log`, a cron job's mail, a CI log. A terminal sees a line redrawn in
place (`\\r`); a pipe or a file gets none of that, so it gets a plain line every GPUC_PROGRESS_EVERY_S (30 s)
instead ("still booting (40 s): provisioning"), and a long wait never reads as a hang.

Two shapes: `Ticker` for a loop that polls (it reads the loop's clock, so a test's fake clock drives it), and
`ticking()` for one blocking call (a thread says the line while the call runs).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gpuc.client.context import talk
from gpuc.core.clock import Clock

EVERY_S = 30.0  # GPUC_PROGRESS_EVERY_S's default


def plain_stderr() -> bool:
    """gpuc's lines go to something that is not a terminal: each progress line must stand on its own."""
    try:
        return not sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stderr: no terminal either
        return True


def still(what: str, waited_s: float, detail: str = "") -> str:
    return f"  still {what} ({waited_s:.0f} s)" + (f": {detail}" if detail else "")


class Ticker:
    """`tick()` from a polling loop: every `every_s` of the clock, one `still ...` line (not on a terminal)."""

    def __init__(
        self,
        what: str,
        clock: Clock,
        *,
        say: Callable[[str], None] = talk,
        every_s: float = EVERY_S,
        plain: bool | None = None,
    ) -> None:
        self.what, self.clock, self.say, self.every_s = what, clock, say, every_s
        self.plain = plain_stderr() if plain is None else plain
        self.start = clock.now()
        self.next_at = self.start + every_s

    def tick(self, detail: str = "") -> None:
        now = self.clock.now()
        if self.plain and now >= self.next_at:
            self.say(still(self.what, now - self.start, detail))
            self.next_at = now + self.every_s


@contextmanager
def ticking(
    what: str, *, say: Callable[[str], None] = talk, every_s: float = EVERY_S, plain: bool | None = None
) -> Iterator[None]:
    """A `still ...` line every `every_s` while the block runs (not on a terminal). The line is said from a
    thread; a failed write (a reader gone) ends the thread, never the block."""
    if not (plain_stderr() if plain is None else plain):
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every_s):
            try:
                say(still(what, time.monotonic() - start))
            except Exception:  # EPIPE, a closed stream: the block's own output says what happened
                return

    thread = threading.Thread(target=beat, name="gpuc-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(1.0)
