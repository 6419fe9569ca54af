"""How gpuc's pod bundle becomes runnable on a pod, with the image's own python3 and nothing else: no pip, no
venv module, no network, nothing from a package index. One definition for both ways a pod is set up: `up` over
ssh (client/onpod/provision.py) and a re-rented pod booting by itself (core/bootkit.py's onstart, then
instance_side/boot.py).

- `probe_script()` finds the python the pod runs on (`python3`, then where images put one) and says what it
  found: a python3 >= 3.9 with the modules the pod needs, or what there is instead. `up` refuses an image with
  none before the job, and destroys the pod it rented.
- `Installer.script()` unpacks the bundle (a wheel-shaped zip: client/onpod/bundle.py) with that python's
  `zipfile` into `<code>/site`, in one swap, and writes the launcher at PodPaths.python: the interpreter every
  later `python -m gpuc...` goes through, with `<code>/site` on PYTHONPATH after the image's own entries (an
  image's own pynvml, the demo's NVML stand-in, come first; any entry comes before site-packages). The launcher
  names the site in GPUC_POD_SITE, so what gpuc starts for the user (the job, the bootstrap's pip) gets the
  image's PYTHONPATH back (`image_environ`): gpuc's own modules never shadow the user's.

Standard library only: the pod's boot runs this under the image's python3.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from gpuc.core.podpaths import PodPaths

MIN_PYTHON = (3, 9)
INSTALL_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 60.0
SITE_ENV = "GPUC_POD_SITE"  # the launcher's: which PYTHONPATH entry is gpuc's own
PYTHON_ENV = "GPUC_PYTHON"  # the python the onstart found, for the boot's install to use the same
PROBE_MARK = "gpuc-python"
# Where images keep a python3 that is not on a non-login shell's PATH (conda's pytorch images, a source
# build), after python3 on the PATH; `python` last, for an image whose only python is a python 3 by that name.
CANDIDATES = ("python3", "/opt/conda/bin/python3", "/usr/local/bin/python3", "/usr/bin/python3", "python")
# What the pod's code needs of the interpreter beyond its version: TLS for the watchdog, zipfile for the
# install, fcntl for its locks. A python without them is reported as unusable, with what it lacks.
NEEDS = ("ssl", "zipfile", "fcntl", "json", "hashlib", "hmac")

# Sets P to the first candidate that is a python >= MIN_PYTHON with NEEDS, else leaves P empty and F says
# what was found ("3.8.10 /usr/bin/python3; ..."). `$1`, when set, is the only candidate (a given python), and
# so is $GPUC_PYTHON when the image's env sets it (an image that keeps its python somewhere of its own).
_FIND = """\
P=""; F=""
for c in ${1:-${%(python_env)s:-%(candidates)s}}; do
  p=$(command -v "$c" 2>/dev/null) || continue
  v=$("$p" -c 'import sys; print("%%d.%%d.%%d" %% sys.version_info[:3])' 2>/dev/null) ||
    { F="$F$p (does not run); "; continue; }
  if "$p" -c 'import sys; sys.exit(sys.version_info < %(min)r)' 2>/dev/null; then
    if "$p" -c 'import %(needs)s' 2>/dev/null; then P=$p; break; fi
    F="$F$v $p (lacks one of %(needs)s); "
  else F="$F$v $p; "; fi
done"""


def find_python_sh(given: str | None = None) -> str:
    """The shell that sets P (and F), for the probe and the onstart alike."""
    text = _FIND % {
        "candidates": " ".join(CANDIDATES), "min": MIN_PYTHON, "needs": ", ".join(NEEDS), "python_env": PYTHON_ENV
    }  # fmt: skip
    return f"set -- {q(given)}\n{text}" if given else f"set --\n{text}"


def probe_script(given: str | None = None) -> str:
    """Prints `gpuc-python ok VERSION PATH`, or `gpuc-python none FOUND` (FOUND: what there is instead)."""
    return (
        find_python_sh(given)
        + f'\nif [ -n "$P" ]; then echo "{PROBE_MARK} ok $("$P" -c \'import sys; print(sys.version.split()[0])\') $P"; '
        + f'else echo "{PROBE_MARK} none ${{F:-no python3, python or /opt/conda/bin/python3}}"; fi\n'
    )


@dataclass(frozen=True)
class Found:
    """What the probe said: a usable python (its version and path), or what there is instead."""

    path: str | None
    version: str | None
    instead: str

    @property
    def usable(self) -> bool:
        return self.path is not None


def read_probe(output: str) -> Found:
    """The probe's last line of its own; anything else (a shell with no sh, a dead connection) is "none"."""
    mine = [line.strip() for line in output.splitlines() if line.strip().startswith(PROBE_MARK + " ")]
    if not mine:
        return Found(None, None, (output.strip()[-200:] or "no answer from the pod's shell"))
    words = mine[-1].split(" ", 3)
    if len(words) == 4 and words[1] == "ok" and words[3].startswith("/"):
        return Found(words[3], words[2], "")
    return Found(None, None, mine[-1][len(PROBE_MARK) + len(" none ") :].strip().rstrip(";"))


def python_missing_hint() -> str:
    want = ".".join(map(str, MIN_PYTHON))
    return (
        f"gpuc's pod side needs python3 >= {want} in the image (the standard library only: gpuc copies its own "
        "code, nothing is installed from a package index). Pick an image that has one, e.g. a PyTorch image "
        "(pytorch/pytorch, runpod/pytorch, vastai/pytorch), or add python3 to yours (`apt-get install -y "
        "python3` in its Dockerfile)"
    )


@dataclass(frozen=True)
class Installer:
    """How the uploaded bundle becomes runnable on the pod: `python` is the interpreter that runs it (None:
    the probe's, found on the pod; tests and demos name one)."""

    python: str | None = None
    timeout_s: float = INSTALL_TIMEOUT_S

    def site(self, paths: PodPaths) -> PurePosixPath:
        return PurePosixPath(str(paths.code)) / "site"

    def script(self, paths: PodPaths, bundle: PurePosixPath, python: str) -> str:
        """Unpack `bundle` into <code>/site in one swap and write the launcher; `python` is the probe's path."""
        site, new = q(self.site(paths)), q(f"{self.site(paths)}.new")
        old, launcher = q(f"{self.site(paths)}.old"), str(paths.python)
        return "\n".join(
            [
                "set -e",
                f"rm -rf {new} {old}",
                f"{q(python)} - {q(bundle)} {new} <<'GPUC_UNZIP'",
                UNZIP,
                "GPUC_UNZIP",
                f"if [ -d {site} ]; then mv {site} {old}; fi",
                f"mv {new} {site}",
                f"rm -rf {old}",
                f"mkdir -p {q(PurePosixPath(launcher).parent)}",
                f"cat > {q(launcher + '.new')} <<'GPUC_LAUNCHER'",
                launcher_text(self.site(paths), python).rstrip("\n"),
                "GPUC_LAUNCHER",
                f"chmod 755 {q(launcher + '.new')}",
                f"mv {q(launcher + '.new')} {q(launcher)}",
            ]
        )


# A pure wheel is a zip: unpacked with the image's python, every name checked first (no absolute path, no
# `..`, no backslash: the bundle is the laptop's, but a pod's disk is a stranger's).
UNZIP = """\
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith("/") or "\\\\" in n or ".." in n.split("/"):
        sys.exit("gpuc: the bundle names " + repr(n[:80]))
z.extractall(sys.argv[2])"""


def launcher_text(site: PurePosixPath, python: str) -> str:
    return (
        f"#!/bin/sh\n{SITE_ENV}={q(site)}\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}${SITE_ENV}"\n'
        f"export {SITE_ENV} PYTHONPATH\n"
        f'exec {q(python)} "$@"\n'
    )


def image_environ(environ: Mapping[str, str], *drop: str) -> dict[str, str]:
    """The environment for what gpuc starts for the user (the job, the bootstrap's pip and smoke test): the
    image's PYTHONPATH, without gpuc's site (and any of `drop`, e.g. the boot's unpacked kit)."""
    env = dict(environ)
    ours = {p for p in (env.pop(SITE_ENV, None), *drop) if p}
    kept = [p for p in env.get("PYTHONPATH", "").split(":") if p and p not in ours]
    if kept:
        env["PYTHONPATH"] = ":".join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


def installer_named(kind: str, python: str | None) -> Installer:
    """The installer a boot kit names (core/api.py BootKit.installer); ValueError for one it cannot use."""
    if kind == "offline":
        return Installer(python)
    raise ValueError(f"installer {kind!r} is not this gpuc's (a kit from an older gpuc)")


def q(path: object) -> str:
    return shlex.quote(str(path))
