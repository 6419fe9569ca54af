"""The terminal sanitizer on the log-streaming path: MB/s of `clean_bytes` and of the whole `LogPrinter`
(clean, mark lines that pass for gpuc's, mask secrets) over a 10 MB job log.

Why it matters: every byte a job prints goes through it on its way to the user's terminal (`--wait`,
`gpuc logs`). A pod's log arrives at most 256 KB per read (about one read a second while following),
so the target is >= 10 MB/s on a log full of escapes: 40x the rate it is fed at.

Three logs: plain ASCII training output; the same with colours (SGR), tqdm-style progress bars
(carriage returns, block characters) and the hostile sequences a review found (title, clear screen, OSC 8,
OSC 52, a forged gpuc line) on every few lines; and pure invalid UTF-8. Baseline in the same run:
`bytes.decode("utf-8", "replace")` of the same log, the least a text path costs (the ratio is the
sanitizer's time over it).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable

from gpuc.client.jobs.podlog import LogPrinter
from gpuc.core.termsafe import clean_bytes

SIZE = 10 * 1024 * 1024
RUNS = 3
PLAIN = b"epoch 12 step 3400 loss 0.4412 lr 3e-4 tokens/s 51234 grad_norm 1.23 mem 71.2GB\n"
COLOURED = b"epoch 12 step 3400 \x1b[32mloss 0.4412\x1b[0m lr 3e-4 \x1b[1;33mwarn\x1b[0m tokens/s 51234\n"
BAR = "\r 45%|\u2588\u2588\u2588\u2588\u258c     | 450/1000 [00:12<00:15, 36.1it/s]".encode()
HOSTILE = (
    b"\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\\x1b]52;c;aGk=\x07"
    b"gpuc: job exited with code 0 ... results and log: s3://elsewhere/\n"
)


def _log(unit: bytes) -> bytes:
    return (unit * (SIZE // len(unit) + 1))[:SIZE]


def _best(work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def _printer(data: bytes) -> None:
    printer = LogPrinter(io.BytesIO(), ["admin-token-for-the-bench"])
    for at in range(0, len(data), 256 * 1024):  # as the pod hands it over
        printer.feed(data[at : at + 256 * 1024])
    printer.flush()


def main() -> list[tuple[str, str, str]]:
    logs = {
        "plain": _log(PLAIN),
        "escapes, progress bars, hostile lines": _log(COLOURED * 4 + BAR * 3 + b"\n" + HOSTILE),
        "invalid UTF-8": _log(bytes(range(0x80, 0x100))),
    }
    rows = []
    for name, data in logs.items():
        mb = len(data) / 1e6
        base = _best(lambda d=data: d.decode("utf-8", "replace"))  # type: ignore[misc]
        cleaned = _best(lambda d=data: clean_bytes(d))  # type: ignore[misc]
        printed = _best(lambda d=data: _printer(d))  # type: ignore[misc]
        rows.append(
            (
                f"clean_bytes, 10 MB {name} (MB/s; time x decode)",
                f"{mb / cleaned:.0f} ({cleaned / base:.1f}x)",
                ">= 10 MB/s",
            )
        )
        rows.append((f"LogPrinter, 10 MB {name} (MB/s)", f"{mb / printed:.0f}", ">= 10 MB/s"))
    return rows


if __name__ == "__main__":
    for label, value, target in main():
        print(f"{label:60} {value:>12}  {target}")
