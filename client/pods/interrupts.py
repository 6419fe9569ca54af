"""Stop signals and broken output while `up` holds a pod that bills.

Ctrl-C on `gpuc up ... | tee log` sends SIGINT to the whole pipeline: `tee` dies first, and the next line
gpuc prints fails on the broken pipe (Python ignores SIGPIPE, so a write raises BrokenPipeError). A closed
terminal sends SIGHUP (and its writes fail with EIO); `kill` sends SIGTERM. Python's default for those two
ends the process on the spot. Every one of these, at any moment of `up`, must end in the destroy of what
`up` created, never in a pod left billing:

- `stop_signals_raise()`: while `up` runs, SIGINT, SIGHUP and SIGTERM raise `Interrupted` where the code
  is (a BaseException: no `except Exception` on the way swallows it), so `up`'s abort path runs.
- `stop_signals_deferred()`: during that abort, a second Ctrl-C is noted, never raised (it would abort the
  destroy); `time_limit()` bounds the destroy in time (SIGALRM raises `CleanupTimeout` in a stuck call).
- `say()`: the abort path's only way of printing, to stderr, after the destroy; it never raises.

Standard library only: the CLI's entry imports it for the exit codes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGHUP", "SIGTERM") if hasattr(signal, name)
)
_WORDS = {"SIGINT": "Ctrl-C (SIGINT)", "SIGHUP": "terminal closed (SIGHUP)", "SIGTERM": "terminated (SIGTERM)"}


class Interrupted(BaseException):
    """A stop signal arrived while `up` held a pod. The exit code is the shell's for that signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(describe_signal(signum))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class CleanupTimeout(BaseException):
    """The abort path ran out of its time: what is not destroyed yet is left to the watchdog."""


def describe_signal(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return _WORDS.get(name, name)


def _main_thread() -> bool:
    # signal.signal only works there; `up` in a worker thread (a test harness) keeps Python's defaults.
    return threading.current_thread() is threading.main_thread()


def _heeded() -> list[signal.Signals]:
    """The stop signals this process does not ignore: `nohup gpuc up ...` (SIGHUP ignored) and a background
    job of a non-interactive shell (SIGINT ignored) asked for `up` to go on, and it does."""
    return [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """SIGINT, SIGHUP and SIGTERM raise `Interrupted` inside the block, ONCE: the abort path that the first
    one starts must not be cut short by a second Ctrl-C arriving before it deferred them (a pressed-twice
    Ctrl-C is common). Later ones are noted and said on stderr. The old handlers come back after."""
    if not _main_thread():
        yield
        return
    raised: list[int] = []

    def once(signum: int, frame: FrameType | None) -> None:
        if raised:
            say(f"gpuc: {describe_signal(signum)} again: still destroying what up created")
            return
        raised.append(signum)
        raise Interrupted(signum)

    old = {s: signal.signal(s, once) for s in _heeded()}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextmanager
def stop_signals_deferred(note: str) -> Iterator[list[int]]:
    """Stop signals are noted (the list yielded), not raised: a second Ctrl-C must not abort a destroy
    under way. `note` is said on stderr at the first one."""
    if not _main_thread():
        yield []
        return
    noted: list[int] = []

    def defer(signum: int, frame: FrameType | None) -> None:
        if not noted:
            say(note)
        noted.append(signum)

    old = {s: signal.signal(s, defer) for s in _heeded()}
    try:
        yield noted
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextmanager
def time_limit(limit_s: float) -> Iterator[None]:
    """`CleanupTimeout` is raised in whatever call is stuck after `limit_s` (SIGALRM): a provider that
    never answers must not hold the terminal, with the user's Ctrl-C deferred, forever."""
    alarm = getattr(signal, "SIGALRM", None)
    if alarm is None or not _main_thread():
        yield
        return

    def out_of_time(signum: int, frame: FrameType | None) -> None:
        raise CleanupTimeout()

    old = signal.signal(alarm, out_of_time)
    signal.setitimer(signal.ITIMER_REAL, max(limit_s, 0.001))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(alarm, old)


def say(text: str) -> bool:
    """One line on stderr, if it can be written: False (and nothing raised) when stderr is a broken pipe
    or a closed terminal. The abort path says what it did with this, after doing it."""
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:  # EPIPE, EIO, a closed file, a reentrant write from a signal handler
        return False
    return True


def silence_broken_output() -> None:
    """stdout and stderr that can no longer be written go to /dev/null, so the interpreter's own flush
    at exit neither fails nor prints "Exception ignored ... BrokenPipeError" (nor turns the exit code into
    120): the exit code says what happened."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # whatever stands in for the stream, it cannot take more
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
                stream.flush()
            except Exception:  # nothing else to try: exiting anyway
                pass
