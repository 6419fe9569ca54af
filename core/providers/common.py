"""What the RunPod and Vast clients share besides HTTP: the ownership marker, the env we put on a pod,
and the create that never leaves two pods.

Provider APIs echo a pod's env back in every listing (RunPod `env`, Vast `extra_env`), so the env we send
must never hold a secret: secrets travel over ssh into a mode-600 file instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping

from gpuc.core.clock import Clock
from gpuc.core.errors import ProviderUnavailable, SafetyRefusal
from gpuc.core.models import OWNER_ENV, Pod, PodSpec, is_gpuc_name
from gpuc.core.providers.http import AmbiguousOutcome
from gpuc.core.redact import MASK, redact

log = logging.getLogger("gpuc.providers")

# Read back from listings to fill Pod.experiment; not an ownership marker.
EXPERIMENT_ENV = "GPUC_EXPERIMENT"
OWNER_VALUE = "1"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


def pod_env(spec: PodSpec) -> dict[str, str]:
    """The env a gpuc pod is created with: the spec's settings plus the ownership marker."""
    refuse_secret_env(spec.env)
    reserved = {OWNER_ENV, EXPERIMENT_ENV} & set(spec.env)
    if reserved:
        raise SafetyRefusal(
            f"the pod env may not set {', '.join(sorted(reserved))}",
            hint="gpuc sets these itself to mark the pods it owns; remove them from the env",
        )
    return {**spec.env, OWNER_ENV: OWNER_VALUE, EXPERIMENT_ENV: spec.experiment}


def refuse_secret_env(env: Mapping[str, str]) -> None:
    for name, value in env.items():
        if _SECRET_NAME.search(name) or MASK in redact(value):
            raise SafetyRefusal(
                f"env variable {name} looks like a secret and provider APIs echo pod env in every listing",
                hint="keep secrets in .env (mode 600): gpuc copies them over ssh into a mode-600 file",
            )


def env_from_pairs(pairs: Iterable[object]) -> dict[str, str]:
    """RunPod lists env as "K=V" strings, Vast as [k, v] pairs; anything else is skipped."""
    out: dict[str, str] = {}
    for item in pairs:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            out[key] = value
        elif isinstance(item, list | tuple) and len(item) == 2 and all(isinstance(x, str) for x in item):
            out[str(item[0])] = str(item[1])
    return out


def is_managed(name: str | None, env: Mapping[str, str]) -> bool:
    """Both markers must hold: a pod someone merely named gpuc-... is not ours to destroy."""
    return is_gpuc_name(name) and env.get(OWNER_ENV) == OWNER_VALUE


def experiment_of(env: Mapping[str, str]) -> str | None:
    return env.get(EXPERIMENT_ENV) or None


def create_once(
    *,
    provider: str,
    name: str,
    send: Callable[[], Pod],
    find: Callable[[str], Pod | None],
    clock: Clock,
    attempts: int = 2,
    lookups: int = 3,
    lookup_delay_s: float = 2.0,
) -> Pod:
    """Create a pod, never twice: after an ambiguous failure (timeout or 5xx once the request was sent),
    look the name up before sending again. A peer lost pods to a retry that created a second one.

    A lookup that fails raises: not knowing whether a pod exists is never a reason to create another.
    """
    last: AmbiguousOutcome | None = None
    for attempt in range(max(1, attempts)):
        if attempt:
            log.warning("%s: no pod named %s after an unclear create; creating it again", provider, name)
        try:
            return send()
        except AmbiguousOutcome as exc:
            last = exc
            log.warning(
                "%s: create of %s: outcome unknown (%s); looking it up by name", provider, name, exc.message
            )
        found = look_up(name, find, clock, lookups, lookup_delay_s)
        if found is not None:
            log.info("%s: %s was created after all (id %s)", provider, name, found.id)
            return found
    raise ProviderUnavailable(
        f"create of {name} failed {max(1, attempts)} times with an unknown outcome, "
        "and no pod by that name is listed",
        provider=provider,
        status=last.status if last else None,
        request_id=last.request_id if last else None,
        hint=f"check `gpuc ls` for {name}; if it shows up later, the reaper destroys it after a grace period",
    )


def look_up(
    name: str, find: Callable[[str], Pod | None], clock: Clock, tries: int, delay_s: float
) -> Pod | None:
    # A pod created a moment ago may take a moment to be listed: look more than once.
    for attempt in range(max(1, tries)):
        found = find(name)
        if found is not None:
            return found
        if attempt + 1 < tries:
            clock.sleep(delay_s)
    return None
