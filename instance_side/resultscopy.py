"""The pod's half of `gpuc results POD`: list, then send as a tar stream, what the laptop copies of a pod
kept for its results (F16): results/ and the job's log, named as the sync names them beside results/
(`logs/job.log`, `logs/outcome.json`).

    python -m gpuc.instance_side.resultscopy list   -> JSON {name: ["f", size] | ["l", target] | ["d"]}
    python -m gpuc.instance_side.resultscopy tar    -> the same entries, a tar on stdout
    ... list|tar --path REL                           -> the same for one file or folder of the workspace
                                                         (`gpuc cp POD:REL`), named by its last part

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


Source = tuple[str, Path]  # (name in the copy, path on the pod) of a top entry


def sources(paths: PodPaths) -> list[Source]:
    return [
        ("results", paths.results),
        ("logs/job.log", paths.job_log),
        ("logs/outcome.json", paths.outcome),
        ("logs/jobs", paths.jobs),  # each job's own log and outcome (a warm pod runs many)
    ]


def workspace_source(paths: PodPaths, rel: str) -> Source:
    """One path of the workspace, named by its last part. ValueError for a path that leaves the workspace:
    a copy names what the job made, never the pod's other files (its secrets file is outside the workspace
    and .gpuc/ holds gpuc's own)."""
    parts = Path(rel).parts
    if not rel or Path(rel).is_absolute() or ".." in parts or (parts and parts[0] == ".gpuc"):
        raise ValueError(f"{rel!r} is not a path inside the workspace")
    top = paths.workspace / rel
    resolved = top.resolve()
    if resolved != paths.workspace.resolve() and paths.workspace.resolve() not in resolved.parents:
        raise ValueError(f"{rel!r} leads out of the workspace (a link to {resolved})")
    return top.name or "workspace", top


def walk(paths: PodPaths, chosen: list[Source] | None = None) -> Iterator[tuple[str, Path, os.stat_result]]:
    for name, top in sources(paths) if chosen is None else chosen:
        try:
            # The top itself may be a link (results/ to a run's folder): that folder is what the user means
            st = top.stat() if chosen is not None or name == "results" else top.lstat()
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


def listing(paths: PodPaths, chosen: list[Source] | None = None) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for name, path, st in walk(paths, chosen):
        found = entry(path, st)
        if found is not None:
            out[name] = found
    return out


def write_tar(paths: PodPaths, out: IO[bytes], chosen: list[Source] | None = None) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, path, st in walk(paths, chosen):
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
    chosen: list[Source] | None = None
    if len(args) == 3 and args[1] == "--path":
        try:
            chosen = [workspace_source(paths, args[2])]
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        args = args[:1]
    if args == ["list"]:
        print(json.dumps(listing(paths, chosen)), flush=True)
        return 0
    if args == ["tar"]:
        write_tar(paths, sys.stdout.buffer, chosen)
        sys.stdout.buffer.flush()
        return 0
    print("usage: python -m gpuc.instance_side.resultscopy list|tar [--path REL]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
