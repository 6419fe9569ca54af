"""Fakes and helpers for the money tests: a Provider that answers from memory, ledger writers for
other processes, a PNG reader."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from gpuc.core.errors import ProviderError
from gpuc.core.ledger.store import Ledger
from gpuc.core.models import Balance, Offer, PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import DestroyResult, Provider

T0 = 1_788_300_000.0  # 2026-09-01T22:00:00Z


class FakeProvider(Provider):
    """Offers and a balance from memory; `fail` makes every call raise like an unreachable API."""

    def __init__(
        self,
        name: str,
        offers: list[Offer] | None = None,
        balance: Balance | None = None,
        fail: ProviderError | None = None,
    ) -> None:
        self.name = name
        self._offers = offers or []
        self._balance = balance
        self._fail = fail
        self.asked: list[tuple[str | None, bool]] = []
        self.closed = False

    def offers(self, gpu: str | None = None, interruptible: bool = False) -> list[Offer]:
        self.asked.append((gpu, interruptible))
        if self._fail:
            raise self._fail
        return list(self._offers)

    def balance(self) -> Balance:
        if self._fail:
            raise self._fail
        assert self._balance is not None
        return self._balance

    def close(self) -> None:
        self.closed = True

    def create(self, spec: PodSpec) -> Pod:
        raise AssertionError("the money commands never create pods")

    def get(self, pod_id: str) -> Pod | None:
        raise AssertionError("the money commands never read pods")

    def list_pods(self) -> list[Pod]:
        raise AssertionError("the money commands never list pods")

    def stop(self, pod_id: str) -> None:
        raise AssertionError("the money commands never stop pods")

    def destroy(self, pod_id: str) -> DestroyResult:
        raise AssertionError("the money commands never destroy pods")


def unreachable(name: str) -> ProviderError:
    return ProviderError("timed out after 3 tries", provider=name, status=503, hint="try again later")


def write_rows(path: str, worker: int, count: int) -> None:
    """A separate process's writer: start and end `count` pods (multiprocessing target)."""
    ledger = Ledger(Path(path))
    for i in range(count):
        pod = f"w{worker}-p{i}"
        ledger.start(
            pod,
            provider="vast",
            experiment=f"exp{worker}",
            gpu="RTX 4090",
            price_per_hour=0.4,
            start_ts=T0 + worker * 1000 + i,
        )
        ledger.end(pod, end_ts=T0 + worker * 1000 + i + 3600, note=f"done {i}")


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG with filter 0 on every row, checking CRCs."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"bad CRC in {kind!r}"
        if kind == b"IHDR":
            width, height, depth, color, _, _, _ = struct.unpack(">IIBBBBB", body)
            assert (depth, color) == (8, 2)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    rows = [raw[y * stride : (y + 1) * stride] for y in range(height)]
    assert all(r[0] == 0 for r in rows)
    return width, height, [r[1:] for r in rows]


def column_heights(rows: list[bytes], color: tuple[int, int, int]) -> list[int]:
    """For each x, how many pixels of `color` the column holds: a bar chart read back."""
    width = len(rows[0]) // 3
    target = bytes(color)
    return [sum(1 for r in rows if r[x * 3 : x * 3 + 3] == target) for x in range(width)]


def bars(heights: list[int]) -> list[int]:
    """Collapse runs of equal non-zero column heights into one height per bar, left to right."""
    found: list[int] = []
    previous = 0
    for h in heights:
        if h and h != previous:
            found.append(h)
        previous = h
    return found
