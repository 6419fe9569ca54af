"""The pod's half of `gpuc results POD`: list, then send as a tar stream, what the laptop copies of a pod
kept for its results (F16): results/ and the job's log, named as the sync names them beside results/
(`logs/job.log`, `logs/outcome.json`).

    python -m gpuc.instance_side.resultscopy list   -> JSON {name: ["f", size] | ["l", target] | ["d"]}
    python -m gpuc.instance_side.resultscopy tar    -> the same entries, a tar on stdout

One walk serves both, so the laptop verifies the copy against exactly what was sent. Links are sent as
links (never followed: a link out of results/ must not pull in the pod's other files); anything that
holds no data the laptop can keep (a fifo, a socket) is left out of both. Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from gpuc.core.podpaths import PodPaths

Entry = list[object]  # ["f", size] | ["l", target] | ["d"]


def sources(paths: PodPaths) -> list[tuple[str, Path]]:
    """(name in the copy, path on the pod) of each top entry."""
    return [("results", paths.results), ("logs/job.log", paths.job_log), ("logs/outcome.json", paths.outcome)]


def walk(paths: PodPaths) -> Iterator[tuple[str, Path, os.stat_result]]:
    for name, top in sources(paths):
        try:
            # results/ itself may be a link (to a run's folder): that folder is what the user means by it
            st = top.stat() if name == "results" else top.lstat()
        except OSError:
            continue  # no results/ or no job log: nothing of it to copy
        yield name, top, st
        if stat.S_ISDIR(st.st_mode):
            yield from _below(name, top)


def _below(name: str, top: Path) -> Iterator[tuple[str, Path, os.stat_result]]:
    for root, dirs, files in os.walk(top, followlinks=False):
        rel = Path(root).relative_to(top)
        for item in sorted(dirs) + sorted(files):
            path = Path(root) / item
            try:
                st = path.lstat()
            except OSError:
                continue
            yield str(Path(name) / rel / item), path, st
        dirs.sort()


def entry(path: Path, st: os.stat_result) -> Entry | None:
    if stat.S_ISLNK(st.st_mode):
        return ["l", os.readlink(path)]
    if stat.S_ISREG(st.st_mode):
        return ["f", st.st_size]
    if stat.S_ISDIR(st.st_mode):
        return ["d"]
    return None  # a fifo, a socket, a device: no data a copy could keep


def listing(paths: PodPaths) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for name, path, st in walk(paths):
        found = entry(path, st)
        if found is not None:
            out[name] = found
    return out


def write_tar(paths: PodPaths, out: IO[bytes]) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, path, st in walk(paths):
            kind = entry(path, st)
            if kind is None:
                continue
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = int(st.st_mtime), stat.S_IMODE(st.st_mode)
            if kind[0] == "f":
                info.size = st.st_size
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
            elif kind[0] == "l":
                info.type, info.linkname = tarfile.SYMTYPE, str(kind[1])
                tar.addfile(info)
            else:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    paths = PodPaths.from_env()
    if args == ["list"]:
        print(json.dumps(listing(paths)), flush=True)
        return 0
    if args == ["tar"]:
        write_tar(paths, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    print("usage: python -m gpuc.instance_side.resultscopy list|tar", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
