"""How gpuc's pod wheel becomes runnable on a pod: the install script and the launcher every later
`python -m gpuc...` goes through. One definition for both ways a pod is set up: `up` over ssh
(client/onpod/provision.py) and a re-rented pod booting by itself (instance_side/boot.py).

Standard library only: the pod's boot runs this before gpuc's dependencies are installed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpuc.core.podpaths import PodPaths

INSTALL_TIMEOUT_S = 900.0
OFFLINE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Installer:
    """How the uploaded wheel becomes runnable on the pod: a shell script that installs it, and the
    launcher written at PodPaths.python that every later `python -m gpuc...` goes through."""

    script: Callable[[PodPaths, PurePosixPath], str]
    launcher: Callable[[PodPaths], str]
    timeout_s: float = INSTALL_TIMEOUT_S


def venv_script(paths: PodPaths, wheel: PurePosixPath) -> str:
    venv, python, w = q(paths.venv), q(paths.venv / "bin" / "python"), q(wheel)
    # A venv of gpuc's own keeps its pins away from the experiment's packages; it sees the image's
    # (torch, pip) through system-site-packages, so it needs neither ensurepip nor python3-venv.
    return "\n".join(
        [
            "set -e",
            f"[ -x {python} ] || python3 -m venv --system-site-packages --without-pip {venv}",
            # The dependencies, then the code itself again: pip keeps an installed gpuc of the same
            # version, and re-provisioning after a code change must replace it.
            f"{python} -m pip install --quiet --no-input --disable-pip-version-check {w}",
            f"{python} -m pip install --quiet --no-input --disable-pip-version-check --force-reinstall --no-deps {w}",
        ]
    )


def venv_launcher(paths: PodPaths) -> str:
    return f'#!/bin/sh\nexec {q(paths.venv / "bin" / "python")} "$@"\n'


VENV_INSTALLER = Installer(script=venv_script, launcher=venv_launcher)


def offline_installer(python: str) -> Installer:
    """For a pod that already has gpuc's dependencies (tests, demos over a loopback sshd): the wheel's
    own files go into `<code>/site` with no network, and `python` runs with that first on its path."""

    def site(paths: PodPaths) -> PurePosixPath:
        return PurePosixPath(str(paths.code)) / "site"

    def script(paths: PodPaths, wheel: PurePosixPath) -> str:
        return (
            f"set -e\n{q(python)} -m pip install --quiet --no-input --disable-pip-version-check"
            f" --no-deps --no-index --upgrade --target {q(site(paths))} {q(wheel)}"
        )

    def launcher(paths: PodPaths) -> str:
        return (
            f"#!/bin/sh\nPYTHONPATH={q(site(paths))}${{PYTHONPATH:+:$PYTHONPATH}}\nexport PYTHONPATH\n"
            f'exec {q(python)} "$@"\n'
        )

    return Installer(script=script, launcher=launcher, timeout_s=OFFLINE_TIMEOUT_S)


def installer_named(kind: str, offline_python: str | None) -> Installer:
    """The installer a boot kit names (core/api.py BootKit.installer); ValueError for one it cannot use."""
    if kind == "venv":
        return VENV_INSTALLER
    if kind == "offline" and offline_python:
        return offline_installer(offline_python)
    raise ValueError(f"installer {kind!r} (offline needs offline_python)")


def q(path: object) -> str:
    return shlex.quote(str(path))
