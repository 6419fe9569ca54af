"""Unpacking a tar that may be hostile, without tarfile's extraction (and so without its filter). Stdlib only:
the laptop uses it for what a pod sends (client/jobs/copyout.py) and the pod for the project the laptop sends
(instance_side/ask.py).

Why not `extractall(filter="data")`: the filter judges a name by `os.path.realpath`, which gives up on a chain
of links longer than PATH_MAX while the kernel still follows it (CVE-2025-4517, fixed only from Python
3.11.13 / 3.12.11 / 3.13.4), and it does not exist before 3.11.4. Here no link is ever followed and none is
made while unpacking:
- a member's name must be a plain relative path (no absolute name, no `..`, `.` or empty part, no NUL, no
  backslash, no control character), and a name may come only once (a second entry replacing the first is
  the classic way to swap a file for a link);
- each folder of the path is opened relative to the folder above it with O_NOFOLLOW | O_DIRECTORY, from a
  descriptor of the destination; each file is created with O_CREAT | O_EXCL | O_NOFOLLOW: a link standing
  anywhere on the way is refused by the kernel itself, whatever its length;
- only regular files and folders are written; a symlink or a hard link is returned (name -> target) for the
  caller to write down (the laptop) or to make afterwards under strict rules (`make_links`, the pod);
  devices, fifos and sparse files are refused;
- modes lose setuid, setgid, sticky and group/world write (the owner's execute bit stays); content is
  copied in chunks, never held whole.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Literal

from gpuc.core.errors import GpucError

CHUNK = 1024 * 1024
Entry = list[object]  # as the pod lists it: ["f", size] | ["d"] | ["l", target] | ["h", target]
Admit = Callable[[str, Entry], None]  # raises to refuse a member before anything of it is written

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CONTROL = frozenset(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)])
_temp_names = itertools.count()


@dataclass
class Unpacked:
    files: int = 0
    dirs: int = 0
    symlinks: dict[str, str] = field(default_factory=dict)  # name -> target, never made by `unpack`
    hardlinks: dict[str, str] = field(default_factory=dict)  # name -> the member it names, never made


def refused(what: str, name: str) -> GpucError:
    return GpucError(f"{what}: {name[:200]!r}")


def plain_parts(name: str) -> list[str]:
    """The parts of a plain relative name, or GpucError naming what is wrong with it."""
    if not name:
        raise refused("an entry with no name", name)
    if name.startswith("/"):
        raise refused("an absolute name", name)
    if "\\" in name or any(ch in _CONTROL for ch in name):
        raise refused("a name with a backslash or a control character", name)
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise refused("a name with an empty, '.' or '..' part", name)
    return parts


def file_mode(mode: int) -> int:
    return (mode & 0o755) | 0o600


def dir_mode(mode: int) -> int:
    return (mode & 0o755) | 0o700


def unpack(
    stream: IO[bytes],
    into: str | os.PathLike[str],
    *,
    compression: Literal["", "gz"] = "",
    replace: bool = False,
    admit: Admit | None = None,
) -> Unpacked:
    """Read the tar in `stream` member by member into the folder `into` (which must exist). `compression`:
    "" or "gz". `replace`: an existing file of that name is replaced (by a rename: never written through);
    otherwise it is an error. `admit` sees each member's name and entry first and may refuse it.
    GpucError for anything refused or a damaged tar; what was written so far stays for the caller to
    remove (always inside `into`)."""
    root = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    state = _State(root, replace, admit)
    try:
        with tarfile.open(fileobj=stream, mode="r|gz" if compression == "gz" else "r|") as tar:
            for member in tar:
                state.one(tar, member)
    except tarfile.TarError as exc:
        raise GpucError(f"a damaged archive ({type(exc).__name__}: {str(exc)[:200]})") from None
    except OSError as exc:
        raise GpucError(f"could not write it ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(root)
    return state.done


@dataclass
class _State:
    root: int
    replace: bool
    admit: Admit | None
    done: Unpacked = field(default_factory=Unpacked)
    named: set[str] = field(default_factory=set)  # every member's name
    above: set[str] = field(default_factory=set)  # every folder above a member

    def one(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        parts = plain_parts(member.name.removesuffix("/") if member.isdir() else member.name)
        name = "/".join(parts)
        if name in self.named:
            raise refused("a name that comes twice", name)
        entry = _entry(member, name)
        self._check_links(name, parts, entry)
        if self.admit is not None:
            self.admit(name, entry)
        self.named.add(name)
        if entry[0] == "d":
            with _folder(self.root, parts, dir_mode(member.mode)):
                self.done.dirs += 1
        elif entry[0] == "f":
            source = tar.extractfile(member)
            assert source is not None  # a regular member always has its data
            with _folder(self.root, parts[:-1]) as parent:
                _write(parent, parts[-1], source, member, self.replace)
            self.done.files += 1
        elif entry[0] == "l":
            self.done.symlinks[name] = member.linkname
        else:
            self.done.hardlinks[name] = member.linkname

    def _check_links(self, name: str, parts: list[str], entry: Entry) -> None:
        # A name below a link's name is how a tar writes through a link (CVE-2025-4517 and its elders): the
        # link is not made here, but the folder made in its place would hold what the tar meant for elsewhere.
        # Either order is caught: a link after a name below it too.
        above = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if any(p in self.done.symlinks or p in self.done.hardlinks for p in above):
            raise refused("a name below a link", name)
        if entry[0] in ("l", "h") and name in self.above:
            raise refused("a link where a folder already holds entries", name)
        self.above.update(above)


def _entry(member: tarfile.TarInfo, name: str) -> Entry:
    if member.issparse():
        raise refused("a sparse file (it could claim far more room than it sends)", name)
    if member.isreg():
        return ["f", member.size]
    if member.isdir():
        return ["d"]
    if member.issym() or member.islnk():
        target = member.linkname
        if not target or "\x00" in target:
            raise refused("a link with no target", name)
        return ["l" if member.issym() else "h", target]
    raise refused("a device, fifo or other special file", name)


@contextlib.contextmanager
def _folder(root: int, parts: list[str], mode: int = 0o755) -> Iterator[int]:
    """A descriptor of root/parts, each folder opened without following a link and made when missing."""
    fd = os.dup(root)
    try:
        for part in parts:
            try:
                below = _open_dir(fd, part)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # a dangling link: the open below refuses it
                    os.mkdir(part, mode, dir_fd=fd)
                below = _open_dir(fd, part)
            os.close(fd)
            fd = below
        yield fd
    finally:
        os.close(fd)


def _open_dir(fd: int, part: str) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        raise refused("a link or a file where a folder goes", part) from None


def _write(parent: int, leaf: str, source: IO[bytes], member: tarfile.TarInfo, replace: bool) -> None:
    target = f".gpuc-unpack-{os.getpid()}-{next(_temp_names)}" if replace else leaf
    try:
        fd = os.open(target, _NEW_FILE_FLAGS, 0o600, dir_fd=parent)
    except FileExistsError:
        raise refused("a file that is already there", leaf) from None
    try:
        with open(fd, "wb", closefd=False) as out:
            shutil.copyfileobj(source, out, CHUNK)
        os.fchmod(fd, file_mode(member.mode))
        with contextlib.suppress(OverflowError, ValueError, OSError):  # a time this system cannot hold
            os.utime(fd, (member.mtime, member.mtime))
    except BaseException:
        os.close(fd)
        if replace:
            os.unlink(target, dir_fd=parent)
        raise
    os.close(fd)
    if replace:
        try:
            os.rename(target, leaf, src_dir_fd=parent, dst_dir_fd=parent)  # replaces a name, follows nothing
        except OSError:
            os.unlink(target, dir_fd=parent)
            raise


def make_links(into: str | os.PathLike[str], symlinks: dict[str, str], *, replace: bool = False) -> None:
    """Make the symlinks `unpack` returned, once every file is written (so nothing is ever written through
    one), each only if it stays inside `into` whatever the other links are: a relative target whose `..`
    parts all come first and climb no higher than `into`. GpucError naming the first that does not."""
    for name, target in sorted(symlinks.items()):
        parts = plain_parts(name)
        if not link_stays_inside(target, depth=len(parts) - 1):
            raise refused(f"a link that could lead out of its folder (-> {target[:200]!r})", name)
    root = os.open(into, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, target in sorted(symlinks.items()):
            parts = plain_parts(name)
            with _folder(root, parts[:-1]) as parent:
                _symlink(parent, parts[-1], target, replace)
    except OSError as exc:
        raise GpucError(f"could not make a link ({exc.strerror or type(exc).__name__})") from None
    finally:
        os.close(root)


def link_stays_inside(target: str, depth: int) -> bool:
    """Whether a link `depth` folders below the root, to `target`, stays under the root whatever the other
    links are (the rule the pod makes the project's links by; the laptop may judge an upload by it too)."""
    # `..` after a name would climb from wherever that name leads (another link): only leading ones are
    # judged by the folders they climb, which are real folders under the root.
    if not target or target.startswith("/") or "\x00" in target or "\\" in target:
        return False
    parts = [p for p in target.split("/") if p not in ("", ".")]
    ups = len(list(itertools.takewhile(lambda p: p == "..", parts)))
    return ups <= depth and ".." not in parts[ups:]


def _symlink(parent: int, leaf: str, target: str, replace: bool) -> None:
    if not replace:
        try:
            os.symlink(target, leaf, dir_fd=parent)
        except FileExistsError:
            raise refused("a link where a file is already there", leaf) from None
        return
    temp = f".gpuc-unpack-{os.getpid()}-{next(_temp_names)}"
    os.symlink(target, temp, dir_fd=parent)
    try:
        os.rename(temp, leaf, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError:
        os.unlink(temp, dir_fd=parent)
        raise
