"""`gpuc doctor`'s line on the results destination: a rented pod with nowhere to sync stays
KEPT, billing. Only what needs no request is judged here (set, parses, keys there: core.destcheck's
check_setting); `up` proves a write and a list before it rents. A setup with the local provider alone
needs none (its results go to a folder on this machine)."""

from __future__ import annotations

from gpuc.client.setup.checks import Check, fail, ok, warn
from gpuc.core.destcheck import BUCKET_ENV, check_setting
from gpuc.core.errors import ConfigError
from gpuc.core.providers.registry import keyed_providers
from gpuc.core.settings import Settings

NAME = "results destination"


def check_results(settings: Settings) -> Check:
    """A ✗ when GPUC_PROVIDER rents; a warning when it is local but a provider key is there (`up -p` may
    rent); nothing to say with the local provider alone."""
    bucket, remote = settings.results_bucket or "", settings.git_remote
    renting, keyed = settings.provider != "local", bool(keyed_providers(settings))
    if not renting and not keyed:
        if not bucket and not remote:
            return ok(NAME, f"local provider only: results go to {settings.home / 'results'}")
        if bucket.startswith("file://") and not remote:
            return ok(NAME, f"a folder ({BUCKET_ENV}) for the local provider; a rented pod needs a bucket or git")
    try:
        return ok(NAME, check_setting(settings))
    except ConfigError as exc:
        fix = exc.hint or "README: Your first rental, step 3"
        return fail(NAME, exc.message, fix) if renting else warn(NAME, f"for `up -p`: {exc.message}", fix)
