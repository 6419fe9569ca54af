""".env mistakes that would otherwise pass in silence: a misspelt key (`RUNPD_API_KEY`
is read by nobody, so `up` later says "no RunPod key" about a key the user can see in the file) and a
`KEY=` with no value in `.env` (read as unset: the default applies, which the user did not choose). An empty
variable in the environment is how a shell or a script unsets a `.env` value, so it is not judged.

Only names that look like gpuc's or a provider's are judged: the user's shell holds hundreds of variables
(GPU_DEVICE_ORDINAL, HF_HOME, ...) that are none of our business. Warnings name keys, never values, and
each is said once per process (load_settings runs several times in one command).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path

# Read by gpuc outside Settings (core.podpaths, core.providers.common, the deploy, the CLI, the emulators).
OTHER_GPUC_NAMES = frozenset(
    {
        "GPUC_HOME",
        "GPUC_ENV_FILE",
        "GPUC_DEBUG",
        "GPUC_POD_ROOT",
        "GPUC_POD_ID",
        "GPUC_POD_TOKEN",
        "GPUC_POD_CLAIM",
        "GPUC_MANAGED",
        "GPUC_WATCHDOG",
        "GPUC_EXPERIMENT",
        "GPUC_RUN_ID",
        "GPUC_SSM_PREFIX",
        "GPUC_SECRETS_VERSION",
        "GPUC_EMULATED_GPU",
        "GPUC_EMULATED_GPU_COUNT",
    }
)
# The providers' own names a user may meet: their CLIs' keys, and what RunPod / Vast set inside a pod.
PROVIDER_NAMES = frozenset(
    {
        "RUNPOD_API_KEY",
        "RUNPOD_POD_ID",
        "RUNPOD_POD_HOSTNAME",
        "RUNPOD_PUBLIC_IP",
        "RUNPOD_GPU_COUNT",
        "VAST_API_KEY",
        "VAST_CONTAINERLABEL",
    }
)
# A name is judged when its first word is one of these, or one letter off (RUNPD, GPCU, VASTT).
PREFIXES = ("GPUC", "RUNPOD", "VAST")
CUTOFF = 0.8  # difflib ratio: RUNPD_API_KEY 0.96, GPUC_IDEL_DESTROY_S 0.95, RUNPOD_POD_ID vs the key 0.67

_said: set[str] = set()


@cache
def known_names(setting_names: frozenset[str]) -> frozenset[str]:
    """`setting_names`: the Settings' variables (core.settingsload passes them: this module imports none of it)."""
    return setting_names | OTHER_GPUC_NAMES | PROVIDER_NAMES


def looks_like_ours(name: str) -> bool:
    word = name.split("_", 1)[0].upper()
    return "_" in name and any(word == p or _one_edit(word, p) for p in PREFIXES)


def _one_edit(a: str, b: str) -> bool:
    """One letter added, dropped, changed, or two neighbours swapped: cheap, for every shell variable."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        swapped = len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        return len(diff) == 1 or swapped
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def suggestion(name: str, known: frozenset[str]) -> str | None:
    """The known name a misspelt one meant, or None (known, not ours, or nothing close)."""
    if name in known or not looks_like_ours(name):
        return None
    import difflib  # lazy: only a name that looks like ours pays for it

    close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=CUTOFF)
    return close[0] if close else None


def env_mistakes(
    from_file: Mapping[str, str], environ: Mapping[str, str], env_file: Path, setting_names: frozenset[str]
) -> list[str]:
    """One line per mistake, naming the key and where it is, never its value."""
    known = known_names(setting_names)
    lines: list[str] = []
    for where, values in ((str(env_file), from_file), ("your environment", environ)):
        for name in sorted(values):
            meant = suggestion(name, known)
            if meant is not None:
                lines.append(f"{name} in {where} is not a setting gpuc knows: did you mean {meant}?")
            elif values is from_file and values[name] == "" and name in known and name not in environ:
                lines.append(
                    f"{name} in {where} has no value, so gpuc ignores it and uses the default: "
                    f"give it a value or delete it"
                )
    return lines


def warn_once(
    from_file: Mapping[str, str], environ: Mapping[str, str], env_file: Path, setting_names: frozenset[str]
) -> None:
    for line in env_mistakes(from_file, environ, env_file, setting_names):
        if line not in _said:
            _said.add(line)
            print(f"warning: {line}", file=sys.stderr)
