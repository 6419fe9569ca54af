"""One log file per pod, one line per event, secrets scrubbed. Logging never raises: a full disk must
not stop the idle watch or the job wrapper."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from gpuc.core.clock import Clock, iso
from gpuc.core.redact import redact

MAX_LOG_BYTES = 5 * 1024 * 1024


class PodLog:
    def __init__(
        self,
        path: Path,
        clock: Clock,
        *,
        role: str,
        secrets: Iterable[str] = (),
        echo: TextIO | None = None,
        max_bytes: int = MAX_LOG_BYTES,
    ) -> None:
        self.path = path
        self.clock = clock
        self.role = role
        self._secrets = tuple(secrets)
        self.echo = echo
        self.max_bytes = max_bytes

    def add_secrets(self, values: Iterable[str]) -> None:
        """More values to scrub from every line (a job's own variables, `gpuc run --env`)."""
        self._secrets = (*self._secrets, *(v for v in values if v))

    def scrub(self, text: str) -> str:
        return redact(text, self._secrets)

    def line(self, text: str) -> None:
        clean = self.scrub(text)
        self._append(f"{iso(self.clock.now())} {self.role} {clean}\n")
        if self.echo is not None:
            # A dropped ssh leaves a dead terminal behind: writing to it must not end the wrapper.
            with contextlib.suppress(OSError, ValueError):
                self.echo.write(f"gpuc: {clean}\n")
                self.echo.flush()

    def _append(self, entry: str) -> None:
        try:
            if self.path.exists() and self.path.stat().st_size > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(fd, entry.encode(errors="replace"))
            finally:
                os.close(fd)
        except OSError:
            return
