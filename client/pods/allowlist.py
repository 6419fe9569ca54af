"""What leaves the laptop for a pod: the secrets allowlist `up` applies (core/podsecrets.py), its names
printed, never the values, and a warning when the results keys are the keys that deploy the watchdog."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuc.client.context import Ctx
from gpuc.core.settings import Settings


def pod_secrets(settings: Settings, env_file: Mapping[str, str], ctx: Ctx, environ: Mapping[str, str] | None = None,
                asked: Sequence[str] = ()) -> dict[str, str]:
    """The allowlist for the pod (core.podsecrets), its names printed (never the values), and a warning
    when the results keys are the ones that deploy the watchdog. A forbidden name refuses `up` here."""
    from gpuc.core.podconfig import choose_pod_secrets  # pydantic: `up` loads it anyway

    env = os.environ if environ is None else environ
    chosen = choose_pod_secrets(settings, env_file, env, asked)
    ctx.echo(chosen.names_line())
    for warning in chosen.warnings():
        ctx.echo(warning)
    same = deploy_key_source(chosen.values, env_file, env)
    if same is not None:
        ctx.echo(
            f"warning: the results keys (GPUC_S3_ACCESS_KEY_ID) are the AWS keys that deploy the watchdog ({same}):"
            " the pod, on someone else's machine, would hold the keys to your watchdog. Give the pod a key for the"
            " results bucket only, in GPUC_S3_ACCESS_KEY_ID / GPUC_S3_SECRET_ACCESS_KEY"
        )
    return chosen.values


def deploy_key_source(
    sent: Mapping[str, str], env_file: Mapping[str, str], environ: Mapping[str, str]
) -> str | None:
    """Where the deploy keys equal to the results keys sent to the pod were found, or None. The deploy
    keys are what boto3 would use for `gpuc watchdog deploy`: AWS_* in the environment (or in .env), else
    the shared credentials file's profile."""
    from gpuc.core.podsecrets import DEPLOY_KEYS, S3_KEYS

    sent_pair = {sent.get(S3_KEYS[0]), sent.get(S3_KEYS[1])} - {None, ""}
    if not sent_pair:
        return None
    for where, source in (("in the environment", environ), ("in .env", env_file)):
        if sent_pair & {source.get(DEPLOY_KEYS[0]), source.get(DEPLOY_KEYS[1])}:
            return f"AWS_ACCESS_KEY_ID {where}"
    path, profile, deploy = shared_credentials(environ)
    if sent_pair & deploy:
        return f"profile [{profile}] of {path}"
    return None


def shared_credentials(environ: Mapping[str, str]) -> tuple[Path, str, set[str]]:
    """The AWS shared credentials file boto3 reads, the profile it picks, and that profile's key id and
    secret (empty when there is none)."""
    import configparser

    path = Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials").expanduser()
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return path, profile, set()
    if not parser.has_section(profile):
        return path, profile, set()
    section = parser[profile]
    return path, profile, {v for v in (section.get("aws_access_key_id"), section.get("aws_secret_access_key")) if v}
