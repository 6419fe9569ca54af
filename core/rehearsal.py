"""A rehearsal reaches nothing real: the second line of defence.

`gpuc demo --serve` writes a shell file that clears every name gpuc reads and points the shell at the
rehearsal's own emulator, sshd and watchdog (testkit/rehearse.py). A user who then re-exports a real
key or URL in that shell (a `source ~/.bashrc`, a pasted export) must not rent for real: with
GPUC_REHEARSAL set, every provider endpoint, the watchdog, the notification channels and the results
destination must be the rehearsal's own, loopback or inside the rehearsal's folder, or the command is
refused naming the setting. Which settings are endpoints is read from their names (`*_url`, `*_urls`,
DESTINATIONS), so a new provider's URL is judged without a change here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

DESTINATIONS = ("results_bucket", "git_remote")
# Cloud credentials boto3 would read from the environment (`watchdog deploy`, an s3:// destination).
AWS_CREDENTIALS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
)
AWS_FILES = ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")
# Where nothing listens: the URL a rehearsal gives every endpoint it does not emulate (the discard port).
NOWHERE = "http://127.0.0.1:9/not-in-this-rehearsal"


def loopback_host(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def endpoint_fields(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(n for n in names if n.endswith(("_url", "_urls")) or n in DESTINATIONS)


def rehearsal_problem(values: Mapping[str, str | None], folder: Path) -> tuple[str, str] | None:
    """(the setting, what is wrong) of the first endpoint in `values` (each endpoint setting's plain value) that
    is not the rehearsal's own; None when all are. core/settings.py raises it as the setting's error."""
    home = folder.expanduser().resolve()
    for name, value in values.items():
        if not value:
            continue
        urls = [u.strip() for u in str(value).split(",") if u.strip()] if name.endswith("_urls") else [str(value)]
        for index, url in enumerate(urls, start=1):
            if not _own(name, url, home, values):
                which = f"URL #{index} of " if len(urls) > 1 else ""
                return (
                    name,
                    f"points outside this rehearsal ({which}it is not on this machine's loopback or in {home}):"
                    " a rehearsal reaches nothing real",
                )
    return None


def _own(name: str, url: str, folder: Path, values: Mapping[str, str | None]) -> bool:
    if name == "results_bucket" and url.startswith("s3://"):
        return loopback_host(urlsplit(values.get("s3_endpoint_url") or "").hostname)  # moto on loopback only
    if url.startswith("file://") or ("://" not in url and not _scp_like(url)):
        return _inside(url.removeprefix("file://"), folder)
    if "://" not in url:  # git's scp shape, user@host:path
        return loopback_host(url.split(":", 1)[0].rpartition("@")[2])
    rest = url.split("://", 1)[1]
    netloc = rest.split("/", 1)[0].rpartition("@")[2]  # a channel's token sits before its host
    try:
        host = urlsplit(f"//{netloc}").hostname
    except ValueError:
        return False
    return loopback_host(host)


def _scp_like(url: str) -> bool:
    head = url.split("/", 1)[0]
    return ":" in head


def _inside(path: str, folder: Path) -> bool:
    return Path(path).expanduser().resolve().is_relative_to(folder)


def check_rehearsal_environ(environ: Mapping[str, str], folder: Path) -> str | None:
    """The first cloud credential in the environment a rehearsal must not hold, as a sentence; or None.
    boto3 reads these itself, past every setting gpuc checks."""
    for name in AWS_CREDENTIALS:
        if environ.get(name):
            return f"{name} is set in this rehearsal's shell: a rehearsal reaches no real cloud; unset {name}"
    home = folder.expanduser().resolve()
    for name in AWS_FILES:
        path = environ.get(name)
        if not path or not _inside(path, home):
            return (
                f"{name} {'points outside' if path else 'is not set in'} this rehearsal ({home}): boto3 would read"
                f" your real AWS credentials; source the rehearsal's shell file again"
            )
    return None
