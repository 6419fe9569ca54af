"""The create's documented bounds (create_instance.yaml's x-input-validation), checked before the create: a
refusal costs nothing either way, but gpuc's says the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuc.core.errors import ConfigError

# create_instance.yaml's bounds (x-input-validation), checked before the create: a refusal costs nothing
# either way, but gpuc's says the fix. onstart: "limited to 4048 characters" (the spec's own quirk list),
# under the 4096 of args + args_str + onstart together.
PRICE_RANGE = (0.001, 128.0)
DISK_MIN_GB = 8.0
LABEL_MAX, IMAGE_MAX, ONSTART_MAX = 256, 1024, 4048
ENV_VALUE_MAX, ENV_TOTAL_MAX = 256, 32768
OURS = "gpuc sets this itself, so this is a gpuc bug: report it with this message"


def check_create_bounds(body: Mapping[str, Any]) -> None:
    """create_instance.yaml's bounds, before the create: Vast refuses each (400 invalid_args, nothing rented),
    gpuc says which and how to fix it."""
    price = body.get("price")
    if price is not None and not PRICE_RANGE[0] <= price <= PRICE_RANGE[1]:
        raise ConfigError(
            f"a bid of ${price:g}/h for the instance is outside what Vast takes (${PRICE_RANGE[0]:g} to "
            f"${PRICE_RANGE[1]:g} per machine-hour)",
            hint="pass --bid per GPU-hour within that range (`gpuc offers --provider vast --interruptible` shows "
            "each offer's min_bid)",
        )
    if body["disk"] < DISK_MIN_GB:
        raise ConfigError(f"a {body['disk']:g} GB disk is under Vast's minimum of {DISK_MIN_GB:g} GB", hint=OURS)
    if len(body["image"]) > IMAGE_MAX or len(body["label"]) > LABEL_MAX:
        raise ConfigError(
            f"Vast takes an image name of at most {IMAGE_MAX} characters and a label of at most {LABEL_MAX}",
            hint="pass a shorter --image",
        )
    if len(body.get("onstart") or "") > ONSTART_MAX:
        raise ConfigError(f"the onstart script is over Vast's {ONSTART_MAX} characters", hint=OURS)
    env: Mapping[str, str] = body["env"]
    long = sorted(k for k, v in env.items() if len(v) > ENV_VALUE_MAX)
    if long or sum(len(k) + len(v) for k, v in env.items()) > ENV_TOTAL_MAX:
        what = f"{long[0]} is over {ENV_VALUE_MAX} characters" if long else f"over {ENV_TOTAL_MAX} characters"
        raise ConfigError(
            f"Vast refuses this pod's env: {what}",
            hint="the env shows in every listing and is for short settings: put long values in .env "
            "(`up --env NAME` sends them to the job over ssh)",
        )
