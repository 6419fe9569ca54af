"""What the command runs, checked against the upload before anything is rented, and on the pod right after
the upload (before the bootstrap's minutes are billed): a missing script is said, with a did-you-mean."""

from __future__ import annotations

import difflib
import os
import posixpath
import re
import shlex
from collections.abc import Callable

from gpuc.client.onpod import ask
from gpuc.client.onpod.upload import Bundle, upload
from gpuc.core.errors import ConfigError
from gpuc.core.providers.base import PodAccess

# -- is what the command names on the pod? ----------------------------------------------------------
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash"})
_PY_VALUE_OPTS = frozenset({"-W", "-X", "--check-hash-based-pycs"})
_LAUNCHERS = frozenset({"torchrun", "deepspeed", "accelerate"})


def named_files(command: list[str]) -> tuple[str | None, list[str]]:
    """(the program to find on PATH, or None when argv[0] is a path; the files the command runs).

    Only what is surely an input: the program itself, the script an interpreter or a launcher runs. A
    later argument may be an output the job creates; those are never checked (a false alarm here destroys
    a pod whose job would have worked)."""
    if not command:
        return None, []
    first, args = command[0], command[1:]
    files = [first] if "/" in first else []
    program = None if "/" in first else first
    name = os.path.basename(first)
    if _PYTHON.match(name):
        files += _python_script(args)
    elif name in _SHELLS and not any(_is_c_option(a) for a in args):
        files += [a for a in args if not a.startswith("-")][:1]
    elif name in _LAUNCHERS:
        files += [a for a in args if a.endswith(".py") and not a.startswith("-")][:1]
    return program, files


def _python_script(args: list[str]) -> list[str]:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-m", "-c", "-"):
            return []  # a module, inline code, stdin: no file to check
        if arg in _PY_VALUE_OPTS:
            skip = True
            continue
        if arg.startswith("-"):
            if arg[1:2] in ("m", "c") and not arg.startswith("--"):
                return []  # -mpkg, -c'code'
            continue
        return [arg]
    return []


def _is_c_option(arg: str) -> bool:
    """-c, -ec, -xc ...: the shell runs a string, not a file."""
    return arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]


def is_runner(word: str) -> bool:
    """An interpreter or launcher the command's first word usually is (python3, bash, torchrun)."""
    name = os.path.basename(word)
    return bool(_PYTHON.match(name)) or name in _SHELLS or name in _LAUNCHERS


def check_dashes(experiment: str, command: list[str], *, dashes: bool) -> None:
    """`gpuc up python train.py`: with no name and no `--`, click takes the interpreter for the experiment's
    name and the script for the command, which the pod cannot run ("no program 'train.py'") after a rent and
    an install. Refused here, before anything, with the line that was meant."""
    if dashes or not command or not is_runner(experiment):
        return
    meant = shlex.join([experiment, *command])
    raise ConfigError(
        f"`gpuc up {meant[:80]}` would name the experiment {experiment!r} and run `{shlex.join(command)[:80]}`: "
        "nothing was rented",
        hint=f"put a name and `--` before the command: gpuc up NAME -- {meant[:80]} (or gpuc up -- {meant[:80]},"
        " which takes this folder's name)",
    )


def check_in_bundle(command: list[str], bundle: Bundle, *, clone: bool, nothing: str = "rented") -> None:
    """Before anything is rented (or, for `run --sync`, uploaded): a file the command runs (`python trian.py`)
    that is not in the upload is refused here, with the nearest name sent, rather than after a create, a boot
    and an upload. Only relative paths the upload decides: an absolute path, one outside the folder, or under
    `repo/` when GPUC_GIT_REMOTE's clone lands there, is left to the check on the pod. So is a program, but
    not a script of the upload named as one (`train.py`, no interpreter): the pod's PATH never holds it."""
    sent = set(bundle.files) | set(bundle.links)
    program = named_files(command)[0]
    if program is not None and "." in program and program in sent:
        runner = "bash" if program.endswith(".sh") else "python"
        raise ConfigError(
            f"`{shlex.join(command)[:80]}`: {program} is a file of the upload, not a program on the pod's PATH;"
            f" nothing was {nothing}",
            hint=f"name its interpreter first, after the `--`: {shlex.join([runner, *command])[:80]}",
        )
    for named in named_files(command)[1]:
        rel = posixpath.normpath(named)
        if named.startswith(("/", "~")) or rel == ".." or rel.startswith("../") or rel in sent:
            continue
        if clone and (rel == "repo" or rel.startswith("repo/")):
            continue
        near = difflib.get_close_matches(rel, sorted(sent), n=1, cutoff=0.6)
        guess = f"did you mean {near[0]}? " if near else ""
        why = " (it was left out as a likely secret)" if rel in bundle.skipped else ""
        where = "gpuc up" if nothing == "rented" else "it"
        raise ConfigError(
            f"`{shlex.join(command)[:80]}`: {named} is not in the upload{why} ({bundle.describe()}); nothing was"
            f" {nothing}",
            hint=f"{guess}run {where} from the project's folder (git-ignored files are not sent), or fix the path",
        )


def missing_on_pod(access: PodAccess, command: list[str]) -> list[str]:
    """The program or files COMMAND needs that the pod does not have (checked by the pod, where the job runs:
    its folder, its PATH)."""
    program, files = named_files(command)
    if program is None and not files:
        return []
    try:
        return ask.missing(access, program, files)
    except ask.OlderPod:
        raise
    except ask.PodAnswerError:
        return []  # cannot tell: the job's own error will say it, no pod is destroyed on a guess


def missing_message(missing: list[str], command: list[str], access: PodAccess, bundle: Bundle | None) -> str:
    program, _files = named_files(command)
    parts = [f"no program {program!r} on the pod's PATH"] if program in missing else []
    files = [m for m in missing if m != program]
    if files:
        count = len(bundle.files) + len(bundle.links) if bundle else 0
        held = f" (it holds the {count} files uploaded from {bundle.root})" if bundle else ""
        parts.append(f"{', '.join(files)} not in the job's folder {access.paths.workspace}{held}")
    return f"`{shlex.join(command)[:80]}`: {'; '.join(parts)}"


def check_command(
    access: PodAccess, command: list[str], bundle: Bundle | None, *, destroying: bool = True, fix: str | None = None
) -> None:
    """Raise ConfigError when what COMMAND runs is not on the pod. From `up` the pod was just created for
    this job: the error destroys it (seconds billed, not the bootstrap's minutes and the job's failure).
    `fix`: the hint for a pod that is kept, from what was missing (`run` says `--sync` for a file here)."""
    if not command:
        return
    missing = missing_on_pod(access, command)
    if not missing:
        return
    message = missing_message(missing, command, access, bundle)
    if destroying:
        raise ConfigError(
            message,
            hint="the pod was destroyed; run gpuc up from the project's folder (git-ignored files are not sent),"
            " or fix the command's path",
        )
    raise ConfigError(message, hint=fix or "fix the command's path")


def check_before_upload(access: PodAccess, command: list[str], bundle: Bundle) -> None:
    """`run --sync`, before the upload: what the upload cannot bring (the program on the pod's PATH, a file
    outside the folder) must be on the pod already, or the upload is for nothing. The files the upload
    brings were checked against it here (check_in_bundle)."""
    if not command:
        return
    program = named_files(command)[0]
    sent = set(bundle.files) | set(bundle.links)
    missing = [m for m in missing_on_pod(access, command) if m == program or posixpath.normpath(m) not in sent]
    if missing:
        message = missing_message(missing, command, access, None)
        raise ConfigError(f"{message}; nothing was uploaded", hint="fix the command's name or path")


def put_project(access: PodAccess, bundle: Bundle, command: list[str], say: Callable[[str], None]) -> None:
    """The project into the workspace, then the check: right after the upload, before the bootstrap's
    minutes are billed."""
    upload(access, bundle, say)
    check_command(access, command, bundle)
