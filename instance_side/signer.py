"""What makes a pod's request believed by the watchdog: a seq that rises across restarts and processes (one
counter file, locked), the watchdog's latest claim on this pod (kept on disk), and the HMAC signature over
`timestamp.seq.body`, in the watchdog's time (core.signing).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuc.core.clock import Clock
from gpuc.core.signing import H_CLAIM, H_POD, H_SEQ, H_SIGNATURE, H_TIMESTAMP, derive_key, sign

# core.signing.mint_claim's shape: nothing else goes into a header (no CR/LF from a garbled answer)
_CLAIM_RE = re.compile(r"c1\.[A-Za-z0-9_=-]{1,1400}\.[0-9a-f]{64}")


class SeqCounter:
    """A counter file under the pod's state dir, locked with flock so concurrent processes never
    hand out the same value. seq = max(last + 1, now in ms): it keeps rising even if the file is lost
    or a write did not reach the disk before a crash.

    `now` is the pod's own clock, never the functions' time the signer corrects to: a pod 6 minutes
    ahead has sent seqs from its fast clock, and a corrected (slower) clock would hand out lower ones
    as soon as the file is lost. The functions only ask that seq rises, and on one clock it does."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self.clock = clock

    def next(self) -> int:
        return self._take(lambda last: max(last + 1, int(self.clock.now() * 1000)))

    def at_least(self, value: int) -> None:
        """The functions saw `value` already (a 409 says so): the next seq goes above it."""
        self._take(lambda last: max(last, value))

    def _take(self, step: Callable[[int], int]) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.read(fd, 64).strip()
            try:
                last = int(raw) if raw else -1
            except ValueError:
                last = -1
            seq = step(last)
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, str(seq).encode())
            return seq
        finally:
            os.close(fd)  # closing releases the lock


class ClaimFile:
    """The pod's latest claim (functions/claims.py), on disk so an agent restart keeps it: the watchdog's
    signed word on this pod, presented with every ping so a watchdog that lost its store knows the pod
    again. Opaque here: only the watchdog can read or check it."""

    def __init__(self, path: Path, first: str | None = None) -> None:
        self.path = path
        self._text: str | None = None
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            text = ""
        if valid_claim(text):
            self._text = text
        elif first is not None:
            self.keep(first)  # the one `up` handed over with the token

    @property
    def text(self) -> str | None:
        return self._text

    def keep(self, text: str) -> bool:
        """Take a newer claim; written (atomically, mode 600) only when it changed. False if not a claim."""
        if not valid_claim(text):
            return False
        if text == self._text:
            return True
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")  # the agent and the wrapper both keep it
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(text)
            os.replace(tmp, self.path)
        except OSError:
            pass  # kept in memory: the next answer tries the disk again
        self._text = text
        return True


def valid_claim(text: object) -> bool:
    return isinstance(text, str) and _CLAIM_RE.fullmatch(text) is not None


class Signer:
    """Holds the derived HMAC key, never the token itself. Signs in the functions' time: the local
    clock plus `offset_s` (what PodClient learnt from the answers)."""

    def __init__(self, pod_id: str, token: str, seq: SeqCounter, clock: Clock, claim: ClaimFile | None = None) -> None:
        self.pod_id = pod_id
        self._key = derive_key(token)
        self.seq = seq
        self.clock = clock
        self.offset_s = 0.0
        self.claim = claim

    def server_now(self) -> float:
        return self.clock.now() + self.offset_s

    def sign(self, payload: Mapping[str, Any], *, stamp_body: bool) -> tuple[bytes, dict[str, str]]:
        """Serialise and sign one attempt. A heartbeat carries its seq and send time in the body too."""
        seq = self.seq.next()
        now = self.server_now()
        body_obj = dict(payload)
        if stamp_body:
            body_obj.update(seq=seq, sent_at=now)
        body = json.dumps(body_obj, separators=(",", ":"), allow_nan=False).encode()
        timestamp = int(now)
        headers = {
            "Content-Type": "application/json",
            H_POD: self.pod_id,
            H_TIMESTAMP: str(timestamp),
            H_SEQ: str(seq),
            H_SIGNATURE: sign(self._key, timestamp, seq, body),
        }
        if self.claim is not None and self.claim.text is not None:
            headers[H_CLAIM] = self.claim.text
        return body, headers
