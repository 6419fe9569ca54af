"""What the credential scan (client/onpod/secretscan.py) adds to `gpuc up`'s upload, on a 10,000-file project.

The tree: 9,000 small text files (code, configs, ~2 KB), 800 text shards of 100 KB and 200 binary files of
200 KB (checked by magic bytes and known values only), in a plain folder (the folder walk). Every file is
read whole, and searched for the secret values gpuc holds: six here, as a user with a provider
key, an admin token, a notification URL (two tokens in it), a Hugging Face token and a git token has.
Measured in the same run, best of 3 on a warm page cache:
- before: listing what is sent, as `up` did before the scan (`collect` + the size check);
- after: the same plus the scan (`prepare`);
- for scale: building the archive `up` then sends (tar + gzip of the same files).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuc.client.onpod.upload import check_size, collect, prepare

SMALL, SHARDS, BINARIES = 9000, 800, 200
# The values a settings object would name (Settings.named_secrets()); none is in the tree.
KNOWN = {f"{i:02d}Zq8{'x7Kp' * 8}": f"SETTING_{i}" for i in range(6)}


def make_tree(root: Path) -> None:
    line = b"def step(batch, model):\n    loss = model(batch).mean()  # a line of ordinary code\n"
    for i in range(SMALL):
        folder = root / "src" / f"pkg{i // 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod{i:05d}.py").write_bytes(line * 25)
    # Real shards hold what the gates look for ("_", "-", ":", capitals): no early way out for them.
    shard = b'{"input_ids": [101, 2023, 102], "text": "A mid-term score: 3/5 (AK-47 ASIA_x)", "label_id": 3}\n' * 1000
    for i in range(SHARDS):
        folder = root / "data" / f"part{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"shard{i:04d}.jsonl").write_bytes(shard)
    blob = b"\x93NUMPY\x01\x00" + os.urandom(200_000)
    for i in range(BINARIES):
        folder = root / "arrays"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"a{i:04d}.npy").write_bytes(blob)


def best(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        make_tree(root)
        limit = 10_000.0  # MB: the bench measures the listing and the scan, not the refusal

        def listing() -> None:
            check_size(collect(root), limit)

        before = best(listing)
        after = best(lambda: prepare(root, limit, known=KNOWN))
        archive = best(lambda: collect(root).archive(), runs=1)
    scan = after - before
    return [
        ("upload: listing 10,000 files (before the scan)", f"{before:.2f} s", "-"),
        ("upload: listing + credential scan (after)", f"{after:.2f} s", f"{after / before:.1f}x before"),
        ("upload: building the archive sent (tar+gzip), for scale", f"{archive:.2f} s", "-"),
        ("upload: the scan / the archive", f"{scan / archive:.2f}", "<= 0.25"),
    ]


if __name__ == "__main__":
    for label, value, target in main():
        print(f"{label:60} {value:>18}  {target}")
