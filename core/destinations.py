"""The S3 and git primitives the pod's sync (instance_side/sync.py), `up`'s destination check
(core/destcheck.py) and the watchdog's grants (functions/grants.py) share: one URL rule, one object-name
rule, one client, one credential helper, so a destination the check passes is the one the pod's grants
reach. They live in core because core may depend on nothing above it (the layer contract in
pyproject.toml). The S3 client of whoever holds the results key is core/s3client.py: the pod, which holds none,
never imports boto3.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import urlparse

from gpuc.core.errors import SyncError
from gpuc.core.podsecrets import GIT_TOKEN_ENV, S3_KEYS

S3_KEY_ENV, S3_SECRET_ENV = S3_KEYS


@dataclass(frozen=True)
class S3Location:
    """`s3://bucket/prefix`, checked: a results bucket URL with no credentials in it."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> S3Location:
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise SyncError(
                f"{url!r} is not an s3://bucket/prefix URL", hint="set GPUC_RESULTS_BUCKET=s3://bucket/prefix"
            )
        if parsed.username or parsed.password:
            raise SyncError(
                "the results bucket URL holds credentials", hint=f"put them in {S3_KEY_ENV}/{S3_SECRET_ENV}"
            )
        return cls(parsed.netloc, parsed.path.strip("/"))

    def run_base(self, experiment: str, run_id: str) -> str:
        """Where one run's results go: `<prefix>/<experiment>/<run_id>`."""
        return "/".join(p for p in (self.prefix, experiment, run_id) if p)

    def run_url(self, experiment: str, run_id: str) -> str:
        """`s3://bucket/<prefix>/<experiment>/<run_id>`: the run's own prefix, all a pod's grants reach."""
        return f"s3://{self.bucket}/{self.run_base(experiment, run_id)}"


# How a watchdog comes to hold the results key that grants pods their runs' prefixes (functions/grants.py).
GRANT_KEY_HINT = (
    "give the watchdog the results bucket and its key (GPUC_RESULTS_BUCKET, GPUC_S3_ACCESS_KEY_ID, "
    "GPUC_S3_SECRET_ACCESS_KEY, and GPUC_S3_ENDPOINT_URL for R2, B2 or MinIO): `gpuc watchdog deploy` from a folder "
    "whose .env has them, or restart `gpuc watchdog serve` with them"
)

# An object's name inside a run's prefix, in bytes: with the prefix (core.api.RESULTS_AT_MAX), inside S3's 1024.
OBJECT_NAME_MAX = 700


def grant_name_problem(name: str, most_bytes: int = OBJECT_NAME_MAX) -> str | None:
    """Why `name` is not an object name inside a run's prefix, or None. The watchdog refuses to sign one
    (functions/grants.py) and the pod's sync escapes a file's name before it would be one: nothing may
    reach past the prefix, however a store or a proxy reads the path (`..`, `.`, an empty part, a leading
    `/`), and no control character or undecodable byte reaches a URL or an XML listing."""
    if not name or name.startswith("/"):
        return "an empty or absolute name"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "a name with an empty, '.' or '..' part"
    if any(ord(ch) < 32 or ord(ch) == 127 or 0xD800 <= ord(ch) <= 0xDFFF for ch in name):
        return "a name with a control character or an undecodable byte"
    if len(name.encode("utf-8")) > most_bytes:
        return f"a name over {most_bytes} bytes"
    return None


# -- git --------------------------------------------------------------------------------------------
# the pod runs this on 3.9: no `X | None` in an alias (evaluated at import)
GitRunner = Callable[[Sequence[str], Optional[Path], Mapping[str, str], float], tuple[int, str]]


def git_runner(args: Sequence[str], cwd: Path | None, env: Mapping[str, str], timeout_s: float) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return 124, f"git {args[0] if args else ''} timed out after {timeout_s:.0f}s"
    except FileNotFoundError:
        return 127, "git is not installed on this pod"
    return proc.returncode, proc.stdout + proc.stderr


def git_auth_args(remote: str, environ: Mapping[str, str]) -> list[str]:
    """A credential helper that reads the token from the environment when git asks for it: the token
    is never in the URL, in argv (only the variable's name is) or in git's config on disk."""
    if not remote.startswith("https://") or not environ.get(GIT_TOKEN_ENV):
        return []
    helper = (
        '!f() { test "$1" = get || exit 0; echo username=x-access-token; '
        f'printf "password=%s\\n" "${GIT_TOKEN_ENV}"; }}; f'
    )
    return ["-c", "credential.helper=", "-c", f"credential.helper={helper}"]


def git_environ(environ: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    env = dict(environ)
    token = secrets.get(GIT_TOKEN_ENV) or environ.get(GIT_TOKEN_ENV)
    if token:
        env[GIT_TOKEN_ENV] = token
    env["GIT_TERMINAL_PROMPT"] = "0"  # a missing or wrong token fails at once, never hangs on a prompt
    return env


def check_remote(remote: str) -> None:
    url = urlparse(remote)
    if url.username or url.password:
        raise SyncError(
            "git_remote holds credentials in the URL",
            hint=f"use the plain https URL and put the token in {GIT_TOKEN_ENV} in your .env",
        )
