"""The ssh public key a rented pod is handed, and whether the provider account has it registered.

RunPod's `startSsh` puts only the account's REGISTERED keys on a pod, and "with none registered the flag does
nothing and the pod has no SSH access": a first rental would pay for a boot it cannot reach. gpuc hands the
pod the key it logs in with itself (`PUBLIC_KEY` in the create's env, core/providers/runpod.py), which the
flag leaves alone ("unless the request already sets one"): a first rental works with nothing registered.
`up` and `doctor` still read the account's keys (GET /v2/account/ssh-keys) and say when gpuc's key is not
among them, with the fix: RunPod's own ssh and pods started outside gpuc use the registered keys only, and a
create that carries its own key gets none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gpuc.core.errors import ConfigError, GpucError

if TYPE_CHECKING:
    from gpuc.core.providers.base import Provider
    from gpuc.core.settings import Settings

KEY_LINE = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")


def public_key_path(settings: Settings) -> Path:
    key = settings.ssh_key_path.expanduser()
    return key.with_name(key.name + ".pub")


def read_public_key(settings: Settings) -> str:
    """The public half of the key `up` logs in with, one authorized_keys line; refused with the fix."""
    path = public_key_path(settings)
    private = settings.ssh_key_path.expanduser()
    try:
        line = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise ConfigError(
            f"no public key at {path}: the pod is handed it to let `up` in, and there is nothing to hand",
            hint=f"ssh-keygen -y -f {private} > {path}",
        ) from None
    if "\n" in line or not KEY_LINE.match(line):
        raise ConfigError(
            f"{path} is not one OpenSSH public key line (`<type> <base64> [comment]`)",
            hint=f"write it again from the private key: ssh-keygen -y -f {private} > {path}",
        )
    return line


def same_key(a: str, b: str) -> bool:
    """The same key whatever its comment: the type and the base64 body."""
    return a.split()[:2] == b.split()[:2]


@dataclass(frozen=True)
class KeyStanding:
    """Whether the provider account has gpuc's key registered, as a doctor check words it."""

    status: Literal["ok", "warn"]
    detail: str
    fix: str | None = None


def key_standing(provider: Provider, public_key: str, shown: str) -> KeyStanding | None:
    """None where gpuc does not read the account's keys (the provider hands a pod none of its own choosing);
    `shown` names the key for the user (its .pub path)."""
    try:
        keys = provider.registered_ssh_keys()
    except GpucError as exc:
        later = " (rate limited: try again later)" if getattr(exc, "status", None) == 429 else ""
        return KeyStanding(
            "warn",
            f"could not read {provider.name}'s registered ssh keys{later}: {exc.message}; gpuc hands each pod "
            f"{shown} itself, so `up` still reaches it",
            exc.hint,
        )
    if keys is None:
        return None
    register = (
        f"add the line in {shown} to your {provider.name} account's SSH public keys (its console's settings, or "
        "PUT /v2/account/ssh-keys, which replaces the whole list)"
    )
    if any(same_key(k, public_key) for k in keys):
        return KeyStanding("ok", f"{shown} is registered at {provider.name}")
    if not keys:
        return KeyStanding(
            "warn",
            f"no ssh key is registered at {provider.name}: gpuc hands each pod {shown} itself (PUBLIC_KEY), so `up` "
            f"reaches it; {provider.name}'s own ssh, and pods started outside gpuc, need it registered",
            register,
        )
    return KeyStanding(
        "warn",
        f"{shown} is not among the {len(keys)} key(s) registered at {provider.name}: gpuc hands each pod this key "
        "itself (PUBLIC_KEY), and then RunPod adds none of your registered ones to that pod",
        register,
    )
