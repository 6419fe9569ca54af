"""Hostile tars for the tests of what gpuc unpacks (tests/core/test_untar.py, the copy from a pod): the
builders, and the sentinels planted beside the staging folder with a byte-for-byte snapshot of them."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

Snapshot = dict[str, tuple[str, bytes]]


def plant(root: Path) -> Path:
    """The sentinels; returns the (empty) staging folder."""
    (root / "project").mkdir()
    (root / "project" / "train.py").write_text("print('the real one')\n")
    (root / "home").mkdir()
    (root / "home" / ".bashrc").write_text("# the user's own\n")
    (root / "staging").mkdir()
    return root / "staging"


def outside(root: Path, skip: Path | None = None) -> Snapshot:
    """Every entry under `root` but the folder unpacked into (`skip`, root/staging by default): its kind and
    bytes (a link: its target)."""
    skip = skip or root / "staging"
    out: Snapshot = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(dirpath) / d != skip]
        for name in dirs + files:
            path = Path(dirpath) / name
            if path.is_symlink():
                out[str(path)] = ("l", os.readlink(path).encode())
            elif path.is_file():
                out[str(path)] = ("f", path.read_bytes())
            else:
                out[str(path)] = ("d", b"")
    return out


def only_files_and_folders(staging: Path) -> None:
    for path in staging.rglob("*"):
        st_ = path.lstat()
        assert stat.S_ISREG(st_.st_mode) or stat.S_ISDIR(st_.st_mode), path
        assert st_.st_mode & 0o7022 == 0, (path, oct(st_.st_mode))  # no setuid/setgid/sticky, no g/o write
        assert not stat.S_ISREG(st_.st_mode) or st_.st_nlink == 1, path


# -- building tars ------------------------------------------------------------------------------------
def member(
    name: str, kind: str = "f", body: bytes = b"", target: str = "", mode: int = 0o644
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.type = {
        "f": tarfile.REGTYPE,
        "d": tarfile.DIRTYPE,
        "l": tarfile.SYMTYPE,
        "h": tarfile.LNKTYPE,
        "chr": tarfile.CHRTYPE,
        "blk": tarfile.BLKTYPE,
        "fifo": tarfile.FIFOTYPE,
    }[kind]
    info.linkname = target
    info.size = len(body) if kind == "f" else 0
    return info, body


def tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, body in members:
            tar.addfile(info, io.BytesIO(body) if info.isreg() else None)
    return buf.getvalue()


def cve_2025_4517(escape_to: str, leaf: str, body: bytes, top: str = "") -> list[tuple[tarfile.TarInfo, bytes]]:
    """The public proof of concept, its members under `top`: folders with 247-character names, a one-letter
    link to each, so that a/b/.../p expands past PATH_MAX; a link there climbing back to `top`, and `escape`
    through it to `escape_to` (relative to the folder above `top`), then a file written through `escape`."""
    comp, steps, path, members = "d" * 247, "abcdefghijklmnop", top, []
    if top:
        members.append(member(top, "d"))
    for step in steps:
        members += [member(os.path.join(path, comp), "d"), member(os.path.join(path, step), "l", target=comp)]
        path = os.path.join(path, comp)
    linkpath = os.path.join(*steps, "l" * 254)
    members.append(member(os.path.join(top, linkpath), "l", target=os.path.join(*[".."] * len(steps))))
    members.append(member(os.path.join(top, "escape"), "l", target=f"{linkpath}/../{escape_to}"))
    members.append(member(os.path.join(top, "escape", leaf), "f", body))
    return members


def listing_of(members: list[tuple[tarfile.TarInfo, bytes]]) -> dict[str, list[object]]:
    """What a lying pod would list for exactly these members (resultscopy's shape)."""
    out: dict[str, list[object]] = {}
    for info, _ in members:
        out[info.name] = ["f", info.size] if info.isreg() else ["d"] if info.isdir() else ["l", info.linkname]
    return out


def truncated_huge() -> bytes:
    """A header declaring a terabyte, then 10 KB of it and the end of the stream."""
    info = tarfile.TarInfo("big.bin")
    info.size = 10**12
    return info.tobuf(tarfile.PAX_FORMAT) + b"x" * 10_000
