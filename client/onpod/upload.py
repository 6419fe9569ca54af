"""Getting the project onto the pod: `gpuc up` uploads the current folder into the pod's workspace (the
job's working directory), then checks that the files the command names are there before the job starts.

What is sent:
- in a git work tree, what git would keep: `git ls-files --cached --others --exclude-standard` (tracked and
  untracked files, .gitignore respected);
- elsewhere, every file under the folder, skipping .git, .venv, venv, __pycache__, node_modules and tool
  caches;
- less what `.gpucignore` (gitignore syntax, at the project's top) leaves out;
- never `.env` files (secrets reach the pod only as its mode-600 secrets file), a top-level `results/`
  (the pod's results/ is this run's: old results would be synced again as new ones) or `.gpuc/`, nor
  gpuc's own home (its config holds the watchdog's admin token, its store every pod's key).

Refused BEFORE anything is rented (a pod is someone else's machine):
- a file that looks like a credential, by its name or its content (client/onpod/secretscan.py), each named
  with why; the fix is a `.gpucignore` line that leaves it out, or `!path` there for a false positive;
- a folder that holds home folders (`/`, `/home`, your home or an ancestor of it, a folder whose
  sub-folders have their own `.ssh` or shell history): `gpuc up` run there would ship the whole home,
  other users' included. It says to `cd` into the project;
- over the limit (`GPUC_UPLOAD_MAX_MB`, default 200), naming the biggest files, since a checkpoint that
  slipped past .gitignore would otherwise be paid for by the minute while it uploads.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from gpuc.client.onpod import ask, secretscan
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.podpaths import STATE_REL
from gpuc.core.providers.base import PodAccess
from gpuc.core.untar import link_stays_inside

if TYPE_CHECKING:
    import pathspec

DEFAULT_MAX_MB = 200.0
SKIP_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".ipynb_checkpoints",
        ".gpuc",
    }
)
TOP_SKIPPED = ("results", ".gpuc")
IGNORE_FILE = ".gpucignore"
# A folder with one of these is someone's home: `up` run above it would ship that home, keys included.
HOME_MARKS = (".ssh", ".bash_history", ".zsh_history", ".sh_history")
PART_BYTES = 8 * 1024 * 1024  # each put_file stays well inside one ssh call's time limit
UPLOAD_DIR = f"{STATE_REL}/upload"
UNPACK_TIMEOUT_S = 600.0


@dataclass
class Bundle:
    """What `up` sends: files relative to `root` (posix paths), with their sizes."""

    root: Path
    how: str  # "git ls-files" or "folder walk"
    files: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # rel -> target (inside the project)
    skipped: list[str] = field(default_factory=list)
    allowed: set[str] = field(default_factory=set)  # `!path` in .gpucignore: sent though it looks like a key
    prefix: str = ""  # where in the workspace it lands (`gpuc cp DIR POD:data`); "" = the workspace itself

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    def describe(self) -> str:
        return f"{len(self.files) + len(self.links)} files, {_mb(self.total_bytes)} from {self.root} ({self.how})"

    def archive(self) -> bytes:
        """The project as a tar.gz; the same files give the same bytes (no time in the gzip header), so the
        boot kit of a recovering run (client/pods/recovery/prepare.py) is byte for byte what the upload sends."""
        buffer = io.BytesIO()
        with (
            gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=0) as packed,
            tarfile.open(fileobj=packed, mode="w") as tar,
        ):
            for rel in sorted(self.files):
                info = tar.gettarinfo(str(self.root / rel), arcname=self._arcname(rel))
                _own_by_root(info)
                with (self.root / rel).open("rb") as fh:
                    tar.addfile(info, fh)
            for rel, target in sorted(self.links.items()):
                info = tarfile.TarInfo(self._arcname(rel))
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
                _own_by_root(info)
                tar.addfile(info)
        return buffer.getvalue()

    def _arcname(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel


def _own_by_root(info: tarfile.TarInfo) -> None:
    # Extracted as root on the pod, a file keeps the owner the archive names: the laptop user's uid means
    # nothing there.
    info.uid = info.gid = 0
    info.uname = info.gname = "root"


def _mb(size: int) -> str:
    if size >= 100_000:
        return f"{size / 1e6:.1f} MB"
    return f"{size / 1e3:.1f} KB" if size >= 1000 else f"{size} bytes"


def skipped_name(rel: PurePosixPath) -> str | None:
    """Why this path is never uploaded, or None."""
    if rel.parts and rel.parts[0] in TOP_SKIPPED:
        return f"{rel.parts[0]}/"
    if secretscan.dotenv_file(rel.name):
        return str(rel)
    return None


def collect(root: Path, gpuc_home: Path | None = None) -> Bundle:
    root = root.resolve()
    refuse_home_folder(root)
    ignore = read_ignore(root)
    names = _git_files(root)
    bundle = Bundle(root, "git ls-files" if names is not None else "folder walk")
    home = _inside(gpuc_home, root)
    left_out = 0
    for rel in names if names is not None else _walk(root, ignore):
        path = PurePosixPath(rel)
        if home is not None and path.parts[: len(home.parts)] == home.parts:
            if "gpuc home" not in bundle.skipped:
                bundle.skipped.append("gpuc home")
            continue
        verdict = ignore.check_file(rel).include if ignore is not None else None
        if verdict is True:
            left_out += 1
            continue
        if verdict is False:
            bundle.allowed.add(rel)
        _add(bundle, path)
    if left_out:
        bundle.skipped.append(f"{left_out} file{'s' if left_out > 1 else ''} ({IGNORE_FILE})")
    return bundle


def read_ignore(root: Path) -> pathspec.GitIgnoreSpec | None:
    """The project's .gpucignore (gitignore syntax), or None when there is none."""
    path = root / IGNORE_FILE
    if not path.is_file():
        return None
    import pathspec  # lazy: `up` only

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(f"cannot read {path}: {why}", hint=f"fix {path} (gitignore syntax), or delete it") from None
    for number, line in enumerate(lines, 1):
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except ValueError:
            raise ConfigError(
                f"{path} line {number} is not a gitignore pattern", hint=f"fix line {number} of {path}"
            ) from None
    return pathspec.GitIgnoreSpec.from_lines(lines)


def refuse_home_folder(root: Path) -> None:
    """Run from a folder that holds home folders (/, /home, the user's home or above it, a folder of other
    users' homes), an upload would be whole accounts: keys, shell histories, tokens."""
    what = _home_folder(root)
    if what is not None:
        raise ConfigError(
            f"gpuc up would upload {root}, {what}: keys and shell histories included",
            hint="run gpuc up from your project's folder (cd into it first), or skip the upload with --no-upload",
        )


def _home_folder(root: Path) -> str | None:
    home = Path.home().resolve()
    if root == home:
        return "your whole home folder"
    if root == Path("/") or root in home.parents:
        return f"which holds your home folder {home}"
    history = next((m for m in HOME_MARKS[1:] if (root / m).is_file()), None)
    if history is not None:
        return f"a home folder (it has {history})"
    found = _home_inside(root)
    return None if found is None else f"which holds {found[0]}/, a home folder (it has its own {found[1]})"


def _home_inside(root: Path) -> tuple[str, str] | None:
    """A sub-folder of root that is someone's home, and the mark that says so; None when there is none."""
    try:
        children = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except OSError:
        return None  # unreadable: the listing that follows says so
    for name in children:
        mark = next((m for m in HOME_MARKS if os.path.lexists(os.path.join(root, name, m))), None)
        if mark is not None:
            return name, mark
    return None


def _inside(folder: Path | None, root: Path) -> PurePosixPath | None:
    """`folder` relative to root when it lies inside it (a GPUC_HOME kept in the project), else None."""
    if folder is None:
        return None
    resolved = folder.expanduser().resolve()
    return PurePosixPath(resolved.relative_to(root).as_posix()) if resolved.is_relative_to(root) else None


def _git_files(root: Path) -> list[str] | None:
    """What git would keep, relative to root; None when root is not in a git work tree (or no git)."""
    try:
        inside = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"], cwd=root, capture_output=True, text=True, timeout=30
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if listed.returncode != 0:
        raise ConfigError(
            f"git could not list the files of {root}: {listed.stderr.decode(errors='replace').strip()[-200:]}",
            hint="fix the repository, or upload nothing with --no-upload",
        )
    # A tracked file deleted from the work tree is listed twice over (cached); each name is sent once.
    return sorted({n for n in listed.stdout.decode(errors="surrogateescape").split("\0") if n})


def _walk(root: Path, ignore: pathspec.GitIgnoreSpec | None = None) -> list[str]:
    out: list[str] = []
    # A folder .gpucignore leaves out is not walked (a data/ of a million files), unless a `!` line may take
    # something under it back: then each file is judged, as in a git work tree.
    prune = ignore if ignore is not None and all(p.include is not False for p in ignore.patterns) else None
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root)
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and not (prune and prune.match_file(f"{(base / d).as_posix()}/"))
        )
        out.extend((base / name).as_posix() for name in sorted(files))
        # A link to a folder is not walked into; it travels as a link.
        out.extend((base / d).as_posix() for d in dirs if (Path(folder) / d).is_symlink())
    return out


def _add(bundle: Bundle, rel: PurePosixPath) -> None:
    why = skipped_name(rel)
    if why is not None:
        if why not in bundle.skipped:
            bundle.skipped.append(why)
        return
    path = bundle.root / rel
    try:
        st = os.lstat(path)
    except OSError:
        return  # listed by git but deleted from the work tree: nothing to send
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        inside = (path.parent / target).resolve()
        if os.path.isabs(target) or not inside.is_relative_to(bundle.root):
            bundle.skipped.append(f"{rel} (a link out of the project)")
            return
        refuse_link_the_pod_refuses(bundle.root, rel, target)
        bundle.links[rel.as_posix()] = target
    elif stat.S_ISREG(st.st_mode):
        bundle.files[rel.as_posix()] = st.st_size
    elif stat.S_ISDIR(st.st_mode):
        bundle.skipped.append(f"{rel}/ (a git submodule: not uploaded)")


def refuse_link_the_pod_refuses(root: Path, rel: PurePosixPath, target: str) -> None:
    """The pod makes a link only by core.untar's rule (judged without following the other links); one the
    laptop sent that fails it fails the unpack, after the rent: so it is refused here, before anything is."""
    if link_stays_inside(target, depth=len(rel.parts) - 1):
        return
    why = (
        "its target has `..` after a name, which climbs from wherever that name leads (another link could take "
        "it out of the workspace)"
        if ".." in target.split("/")
        else "its target is not a plain relative path"
    )
    raise ConfigError(
        f"the project at {root} has a link the pod would refuse to make: {rel} -> {target[:200]!r}: {why}; "
        "nothing was rented",
        hint="point it at the same place without the detour (`b/../c` is `c`; `ln -sfn TARGET "
        f"{rel}` remakes it), or leave it out with a line `{rel}` in {root / IGNORE_FILE}",
    )


def check_size(bundle: Bundle, max_mb: float) -> None:
    limit = int(max_mb * 1e6)
    if bundle.total_bytes <= limit:
        return
    biggest = sorted(bundle.files.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    shown = ", ".join(f"{name} ({_mb(size)})" for name, size in biggest)
    leave_out = (
        "add big files to .gitignore"
        if bundle.how == "git ls-files"
        else "this folder is not a git work tree, so every file goes: move big files out (or git init and"
        " .gitignore them)"
    )
    raise ConfigError(
        f"the project at {bundle.root} is {_mb(bundle.total_bytes)}, over the {max_mb:g} MB upload limit;"
        f" biggest: {shown}",
        hint=f"{leave_out}; data and checkpoints belong in a bucket or are downloaded on the pod."
        " Or raise GPUC_UPLOAD_MAX_MB, or skip the upload with --no-upload",
    )


def refuse_credential_folder(folder: Path) -> None:
    """The folder sent is judged by its own path too: `~/.kube` holds `config`, a name that says
    nothing; `~/.docker`, `~/.config/gcloud` the same."""
    where = secretscan.root_reason(folder)
    if where is not None:
        raise ConfigError(
            f"{where}: every file in it is a credential, whatever its name; a pod is someone else's machine",
            hint="send only what the job needs, from a folder of its own",
        )


def check_credentials(bundle: Bundle, known: Mapping[str, str] | None = None) -> None:
    """Refuse when a file that would be uploaded looks like a credential, or holds a secret value gpuc itself
    holds (`known`: Settings.named_secrets(), value -> setting), named by its setting only (secretscan.py)."""
    refuse_credential_folder(bundle.root)
    values = {value.encode(): name for value, name in (known or {}).items()}
    findings = secretscan.scan(bundle.root, bundle.files, values, allowed=bundle.allowed)
    if not findings:
        return
    shown = "\n".join(f"  {f.line()}" for f in findings[:20])
    more = f"\n  ... and {len(findings) - 20} more" if len(findings) > 20 else ""
    first = findings[0].path
    held = next((f for f in findings if f.why.startswith("holds the value of")), None)
    if held is not None:
        raise ConfigError(
            f"the project at {bundle.root} holds a secret gpuc itself holds; a pod is someone else's machine, so"
            f" nothing was sent:\n{shown}{more}",
            hint=f"take the value out of {held.path} (read it from the environment instead: secrets reach the pod"
            " only through GPUC_POD_SECRETS), or leave the file out with a line in"
            f" {bundle.root / IGNORE_FILE}",
        )
    raise ConfigError(
        f"the project at {bundle.root} holds what looks like credentials; a pod is someone else's machine, so"
        f" nothing was rented:\n{shown}{more}",
        hint=f"leave each out with a line in {bundle.root / IGNORE_FILE} (gitignore syntax, e.g. `{first}`); if"
        f" one is not a secret, send it anyway with `!{first}` there",
    )


def prepare(root: Path, max_mb: float, gpuc_home: Path | None = None, known: Mapping[str, str] | None = None) -> Bundle:
    """Listed, measured and checked for credentials on the laptop, before anything is rented. `known`: the
    secret values gpuc holds (Settings.named_secrets())."""
    bundle = collect(root, gpuc_home)
    check_size(bundle, max_mb)
    check_credentials(bundle, known)
    return bundle


# -- onto the pod ---------------------------------------------------------------------------------
def upload(
    access: PodAccess, bundle: Bundle, say: Callable[[str], None], part_bytes: int = PART_BYTES, what: str = "project"
) -> None:
    """The project into the pod's workspace, in parts the pod joins, checks and unpacks (ask unpack).
    Raises GpucError (then `up` destroys the pod)."""
    data = bundle.archive()
    digest = hashlib.sha256(data).hexdigest()
    count = max(1, -(-len(data) // part_bytes))
    for i in range(count):
        chunk = data[i * part_bytes : (i + 1) * part_bytes]
        access.put_file(f"{UPLOAD_DIR}/part-{i:05d}", chunk, 0o600)
    try:
        unpacked = ask.unpack(access, digest, timeout_s=UNPACK_TIMEOUT_S)
    except ask.PodAnswerError as exc:
        raise GpucError(
            f"unpacking the project on the pod failed: {exc.error or exc.message}", hint="check the pod's disk space"
        ) from None
    landed = f"{unpacked.workspace}/{bundle.prefix}" if bundle.prefix else unpacked.workspace
    say(f"  {what} uploaded: {bundle.describe()} -> {landed} ({_mb(len(data))} sent)")
    if bundle.skipped:
        say(f"  not uploaded: {', '.join(bundle.skipped[:6])}{' ...' if len(bundle.skipped) > 6 else ''}")
