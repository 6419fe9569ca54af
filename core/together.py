"""Reads made together: each in a thread of its own, so the network costs the slowest read, not their sum
(`gpuc ls` in a real home reads the watchdog and two providers; the reaper reads every provider). The
threads share the process's one HTTP client (core/transport.py), which keeps a connection open per host.

Each read's outcome is kept apart: one read that fails or hangs never hides or delays another's answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpuc.core.errors import GpucError

T = TypeVar("T")


class NoAnswerInTime(GpucError):
    """A read that had not ended when its pass's deadline came."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(f"no answer within {deadline_s:g} s", hint="the endpoint is slow or stuck")
        self.deadline_s = deadline_s


@dataclass
class Outcome(Generic[T]):
    """One read's result, or the exception it raised (NoAnswerInTime past the deadline)."""

    value: T | None = None
    error: BaseException | None = None

    def get(self) -> T:
        """The value, or the read's own exception raised again."""
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def read_together(reads: Mapping[str, Callable[[], T]], deadline_s: float | None = None) -> dict[str, Outcome[T]]:
    """Run every read at once; return when all have ended, or at `deadline_s` (those still running then are
    NoAnswerInTime, their threads left to end on their own request deadline). Keys keep their order."""
    outcomes: dict[str, Outcome[T]] = {name: Outcome() for name in reads}
    done = {name: threading.Event() for name in reads}

    def run(name: str, read: Callable[[], T]) -> None:
        try:
            outcomes[name].value = read()
        except BaseException as exc:
            outcomes[name].error = exc
        finally:
            done[name].set()

    if len(reads) == 1:  # one read: no thread to start
        name, read = next(iter(reads.items()))
        run(name, read)
        return outcomes
    for name, read in reads.items():
        threading.Thread(target=run, args=(name, read), name=f"gpuc-read-{name}", daemon=True).start()
    until = None if deadline_s is None else time.monotonic() + deadline_s
    late: dict[str, Outcome[T]] = {}
    for name, event in done.items():
        left = None if until is None else max(0.0, until - time.monotonic())
        if not event.wait(left):
            late[name] = Outcome(error=NoAnswerInTime(deadline_s or 0.0))
    return {name: late.get(name, outcome) for name, outcome in outcomes.items()}
