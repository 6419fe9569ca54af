"""Fakes for the client's one seam, `Ctx` (client/context.py): a watchdog that answers its status from
memory. Tests build `Ctx(settings, watchdog=answering(status), providers={...})` and pass it to the
command as click's `obj`."""

from __future__ import annotations

from typing import cast

from gpuc.core.api import StatusResponse
from gpuc.core.watchdog_client import WatchdogClient


class StatusView:
    """A fake watchdog that answers `status()`, the one status read of every command."""

    def status(self) -> StatusResponse:
        raise NotImplementedError


class StatusOnly(StatusView):
    """The watchdog as the laptop's read-only commands see it: `status()` answers `answer`, or raises it."""

    def __init__(self, answer: StatusResponse | Exception) -> None:
        self.answer = answer
        self.asked = 0

    def status(self) -> StatusResponse:
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def close(self) -> None:
        pass


def answering(answer: StatusResponse | Exception) -> WatchdogClient:
    return cast(WatchdogClient, StatusOnly(answer))
