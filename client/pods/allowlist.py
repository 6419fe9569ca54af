"""What leaves the laptop for a pod: the secrets allowlist `up` applies (core/podsecrets.py), its names
printed, never the values; a warning that what the user names reaches a machine the host can read, and a
louder one when a value sent is a key that deploys the watchdog."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuc.client.context import Ctx
from gpuc.core.settings import Settings


def pod_secrets(
    settings: Settings,
    env_file: Mapping[str, str],
    ctx: Ctx,
    environ: Mapping[str, str] | None = None,
    asked: Sequence[str] = (),
) -> dict[str, str]:
    """The allowlist for the pod (core.podsecrets), its names printed (never the values), and the warnings.
    A forbidden name refuses `up` here."""
    from gpuc.core.podconfig import choose_pod_secrets  # pydantic: `up` loads it anyway
    from gpuc.core.podsecrets import ENV_FLAG, POD_SECRETS_ENV

    env = os.environ if environ is None else environ
    chosen = choose_pod_secrets(settings, env_file, env, asked)
    ctx.echo(chosen.names_line())
    for warning in chosen.warnings():
        ctx.echo(warning)
    yours = [name for name, why in chosen.why.items() if why in (POD_SECRETS_ENV, ENV_FLAG)]
    if yours:
        ctx.echo(
            f"warning: {', '.join(yours)} go onto the pod, where its host can read them (on Vast, a stranger's "
            "machine): give the job keys that reach only what it needs, revocable after the run"
        )
    same = deploy_key_source(chosen.values, env_file, env)
    if same is not None:
        name, where = same
        ctx.echo(
            f"warning: {name} is the AWS key that deploys the watchdog ({where}): the pod, on someone else's "
            "machine, would hold the keys to your watchdog. Give the job a key of its own, for what it reads only"
        )
    return chosen.values


def deploy_key_source(
    sent: Mapping[str, str], env_file: Mapping[str, str], environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """(the name sent, where the deploy key equal to it was found), or None. The deploy keys are what boto3
    would use for `gpuc watchdog deploy`: AWS_* in the environment (or in .env), else the shared credentials
    file's profile."""
    from gpuc.core.podsecrets import DEPLOY_KEYS

    by_value = {value: name for name, value in sent.items() if value}
    for where, source in (("in the environment", environ), ("in .env", env_file)):
        for deploy in (source.get(DEPLOY_KEYS[0]), source.get(DEPLOY_KEYS[1])):
            if deploy and deploy in by_value:
                return by_value[deploy], f"AWS_ACCESS_KEY_ID {where}"
    path, profile, keys = shared_credentials(environ)
    for deploy in keys:
        if deploy in by_value:
            return by_value[deploy], f"profile [{profile}] of {path}"
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
