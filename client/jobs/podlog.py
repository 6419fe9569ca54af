"""The job's log on the live pod: read by parts (onpod/ask.py: log), and printed as it comes.

What is printed is the job's own output: a secret the job prints is the user's business, but the values
gpuc holds (provider keys, the admin token) are masked wherever they appear. Everything read is the pod's
word (a stranger's machine, on Vast): the log is cleaned of terminal controls and bounded in size, and the
outcome goes through the one strict reader (jobs/outcome_file.py).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import BinaryIO

from gpuc.client.jobs.outcome_file import OUTCOME_MAX_BYTES, OutcomeRead, parse_outcome
from gpuc.client.onpod import ask
from gpuc.core.errors import GpucError
from gpuc.core.providers.base import PodAccess
from gpuc.core.redact import MASK
from gpuc.core.settings import Settings
from gpuc.core.termsafe import clean_bytes
from gpuc.instance_side.joblog import LOG_CAP_BYTES, TAIL_BYTES

CHUNK_BYTES = 256 * 1024
# What a gpuc pod's log can hold: the tee's head and tail, and its notes. A log past it is not one gpuc
# wrote (a job, or a stranger, can put anything at the destination): the rest is not printed.
LOG_PRINT_MAX = LOG_CAP_BYTES + TAIL_BYTES + 64 * 1024
JOB_LINE_MARK = b"[log] "
# A line that starts (blanks and zero-width characters aside) with "gpuc", in any case. A lookalike in
# other letters is not caught here: on a terminal gpuc's own prefix is styled, which no job output can be.
_LOOKS_LIKE_GPUC = re.compile(rb"(?im)^(?=(?:[ \t]|\xe2\x80[\x8b-\x8d]|\xe2\x81\xa0|\xef\xbb\xbf)*gpuc)")


POD_OUTCOME_PLACE = "the outcome file on the pod (.gpuc/outcome.json)"


@dataclass(frozen=True)
class PodLogRead:
    data: bytes
    size: int | None  # None: no job log on the pod (yet)
    outcome: OutcomeRead | None  # None: no outcome file on the pod (yet)
    ended: str | None


def read_pod_log(access: PodAccess, offset: int, most: int = CHUNK_BYTES) -> PodLogRead:
    """One read of the pod's job log from `offset`. Raises GpucError when the pod does not answer, or
    answers what cannot be read: the caller retries, or asks the provider whether the pod is gone (an
    older pod's OlderPod is said as such: retrying would not change it)."""
    try:
        answer = ask.read_log(access, offset, most, OUTCOME_MAX_BYTES + 1)
    except ask.OlderPod:
        raise
    except ask.PodAnswerError as exc:
        raise GpucError(
            f"could not read the job log on the pod ({exc.message})", hint="is the pod still running?"
        ) from None
    outcome = None if answer.outcome is None else parse_outcome(answer.outcome, POD_OUTCOME_PLACE)
    return PodLogRead(data=answer.data, size=answer.size, outcome=outcome, ended=answer.ended)


# -- printing ---------------------------------------------------------------------------------------
def gpuc_secrets(settings: Settings) -> list[str]:
    return [v for v in settings.secret_values() if len(v) >= 4]


class LogPrinter:
    """Writes the job's output as it comes: cleaned of terminal controls (core/termsafe.py), a line that
    would pass for one of gpuc's own marked `[log] `, gpuc's secret values masked, at most `most` bytes.
    A value split between two reads must still be caught: bytes after the last line break (or carriage
    return: a progress bar) wait for the next read, up to a bound. `raw`: the bytes as the pod wrote them
    (`gpuc logs --raw`), secrets still masked."""

    def __init__(
        self,
        out: BinaryIO,
        secrets: list[str],
        hold_max: int = 64 * 1024,
        *,
        raw: bool = False,
        most: int = LOG_PRINT_MAX,
    ) -> None:
        self.out = out
        self.secrets = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
        self.hold_max = hold_max
        self.raw = raw
        self.most = most
        self.pending = b""
        self.printed = 0  # bytes of the log consumed (held bytes included)
        self.shown = 0  # bytes of the log written out (before cleaning), at most `most`
        self.cut_short = False  # more than `most` came: the rest is dropped (said once)
        self.at_line_start = True

    @property
    def full(self) -> bool:
        return self.cut_short

    def feed(self, data: bytes) -> None:
        self.printed += len(data)
        buffer = self.pending + data
        # A carriage return as the last byte waits: it may be the first half of a CR LF.
        cut = max(buffer.rfind(b"\n"), buffer.rfind(b"\r", 0, len(buffer) - 1)) + 1
        if cut == 0 and len(buffer) > self.hold_max:
            cut = _utf8_boundary(buffer)
        self.pending = buffer[cut:]
        self._write(buffer[:cut])

    def flush(self) -> None:
        self._write(self.pending)
        self.pending = b""

    def _write(self, data: bytes) -> None:
        if not data or self.cut_short:
            return
        room = self.most - self.shown
        data, self.cut_short = data[:room], len(data) > room
        self.shown += len(data)
        if not self.raw:
            data = self._mark(clean_bytes(data))
        for secret in self.secrets:
            data = data.replace(secret, MASK.encode())
        if self.cut_short:
            data += (
                f"\n[gpuc: the log goes on past {self.most // (1024 * 1024)} MB, more than a gpuc pod keeps;"
                " the rest is not shown]\n"
            ).encode()
        with contextlib.suppress(OSError, ValueError):
            self.out.write(data)
            self.out.flush()

    def _mark(self, data: bytes) -> bytes:
        """Job lines that start like gpuc's own (`gpuc: job exited with code 0 ...`) are marked as the log's."""
        if not data:
            return data
        if self.at_line_start:
            start = 0
        else:
            newline = data.find(b"\n")
            start = len(data) if newline < 0 else newline + 1
        self.at_line_start = data.endswith(b"\n")
        if start >= len(data) or data.lower().find(b"gpuc", start) < 0:  # C speed, unlike re.IGNORECASE
            return data
        return data[:start] + _LOOKS_LIKE_GPUC.sub(JOB_LINE_MARK, data[start:])


def _utf8_boundary(data: bytes) -> int:
    """len(data), less a UTF-8 character cut short at its end (it waits for the rest)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # the lead byte: how long its character is
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if length > back else len(data)
    return len(data)
