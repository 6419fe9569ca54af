"""Fakes for the client's one seam, `Ctx` (client/context.py): a watchdog that answers its status from
memory. Tests build `Ctx(settings, watchdog=answering(status), providers={...})` and pass it to the
command as click's `obj`."""

from __future__ import annotations

from typing import cast

from gpuc.client.watchdog.client import WatchdogClient
from gpuc.client.watchdog.status import WatchdogStatus, read_status
from gpuc.core.api import StatusResponse


def view(answer: StatusResponse) -> WatchdogStatus:
    """`answer` as `gpuc ls` and `gpuc ledger` read it: its JSON (the server's `ok()`) through the real
    light reader, so every fake status a test gives also checks that reader against the API model."""
    return read_status(answer.model_dump(mode="json"))


class StatusView:
    """`status_view()` for a fake that answers `status()`."""

    def status(self) -> StatusResponse:
        raise NotImplementedError

    def status_view(self) -> WatchdogStatus:
        return view(self.status())


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
