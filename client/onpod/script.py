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


def check_in_bundle(command: list[str], bundle: Bundle, *, clone: bool) -> None:
    """Before anything is rented: a file the command runs (`python trian.py`) that is not in the upload is
    refused here, with the nearest name sent, rather than after a create, a boot and an upload. Only
    relative paths the upload decides: an absolute path, one outside the folder, or under `repo/` when
    GPUC_GIT_REMOTE's clone lands there, is left to the check on the pod."""
    sent = set(bundle.files) | set(bundle.links)
    for named in named_files(command)[1]:
        rel = posixpath.normpath(named)
        if named.startswith(("/", "~")) or rel == ".." or rel.startswith("../") or rel in sent:
            continue
        if clone and (rel == "repo" or rel.startswith("repo/")):
            continue
        near = difflib.get_close_matches(rel, sorted(sent), n=1, cutoff=0.6)
        guess = f"did you mean {near[0]}? " if near else ""
        why = " (it was left out as a likely secret)" if rel in bundle.skipped else ""
        raise ConfigError(
            f"`{shlex.join(command)[:80]}`: {named} is not in the upload{why} ({bundle.describe()}); nothing was"
            " rented",
            hint=f"{guess}run gpuc up from the project's folder (git-ignored files are not sent), or fix the path",
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


def check_command(access: PodAccess, command: list[str], bundle: Bundle | None, *, destroying: bool = True) -> None:
    """Raise ConfigError when what COMMAND runs is not on the pod. From `up` the pod was just created for
    this job: the error destroys it (seconds billed, not the bootstrap's minutes and the job's failure)."""
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
    raise ConfigError(message, hint="fix the command's path, or copy the file onto the pod first")


def put_project(access: PodAccess, bundle: Bundle, command: list[str], say: Callable[[str], None]) -> None:
    """The project into the workspace, then the check: right after the upload, before the bootstrap's
    minutes are billed."""
    upload(access, bundle, say)
    check_command(access, command, bundle)
