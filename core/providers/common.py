"""What the RunPod and Vast clients share besides HTTP: the ownership marker, the env we put on a pod and
the create that never leaves two pods (the pod's own end, with its own key, is core/providers/podkey.py's).

Provider APIs echo a pod's env back in every listing (RunPod `env`, Vast `extra_env`), so the env we send
must never hold a secret: secrets travel over ssh into a mode-600 file instead.
"""

from __future__ import annotations

import logging
import re
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypedDict, TypeVar

from pydantic import AllowInfNan, BaseModel, BeforeValidator, ConfigDict, ValidationError

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import ConfigError, ProviderSchemaError, ProviderUnavailable, SafetyRefusal
from gpuc.core.pod import OWNER_ENV, WATCHDOG_ENV, Pod, is_gpuc_name
from gpuc.core.providers.base import Provider
from gpuc.core.providers.http import AmbiguousOutcome, BackoffFunction, HttpClient
from gpuc.core.redact import MASK, redact
from gpuc.core.settingvalues import SecretStr

if TYPE_CHECKING:
    import httpx

    from gpuc.core.billing import BillingRecord
    from gpuc.core.models import PodSpec

log = logging.getLogger("gpuc.providers")

# Read back from listings to fill Pod.experiment; not an ownership marker.
EXPERIMENT_ENV = "GPUC_EXPERIMENT"
OWNER_VALUE = "1"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


def _not_a_bool(value: Any) -> Any:
    # pydantic's lax mode counts true as 1: a price or a count sent as a bool is refused, never read as 1.
    if isinstance(value, bool):
        raise ValueError("a number was expected, not true or false")
    return value


# The number fields of the providers' answers: what pydantic's lax mode reads (RunPod once sent `costPerHr`
# as a string), minus a bool, and for a float minus NaN and infinity ("nan" as text reads as NaN, and a NaN
# price or balance fails every comparison a guard makes, so it would pass them all).
Number = Annotated[float, AllowInfNan(False), BeforeValidator(_not_a_bool)]
Whole = Annotated[int, BeforeValidator(_not_a_bool)]


class ProviderAnswer(BaseModel):
    """The base of a provider's wire document (RunPod's pods, GPU rows and balance, Vast's instances, offers
    and user): their answers grow fields gpuc does not read, so an unknown one is ignored and a known one
    checked. Read-only, and its repr and str name no value (a pod's env, an account's key)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(type(self).model_fields)})"

    __str__ = __repr__


W = TypeVar("W", bound=ProviderAnswer)


def parse_wire(model: type[W], value: Any, what: str, *, provider: str, api: str) -> W:
    """A body fragment as its wire model; the error names the field, never the value (a pod's env, an
    account's key). An answer gpuc cannot read raises: a listing never reads as an empty account."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ProviderSchemaError(
            f"unexpected {what}: {first_error(exc)}",
            provider=provider,
            hint=f"the {api} API may have changed; gpuc will not guess what it meant",
        ) from None


def first_error(exc: ValidationError) -> str:
    """Where and what, never the value: a provider's answer may echo an env or a key."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top)"
    return f"{where}: {first['msg']}"


def api_key_of(secret: SecretStr | None, *, api: str, key_env: str, example: str) -> str:
    key = secret.get_secret_value() if secret else ""
    if not key:
        raise ConfigError(
            f"no {api} API key",
            hint=f"set {key_env} in your environment, or add {key_env}={example} to .env (chmod 600 .env)",
        )
    return key


class HttpTuning(TypedDict, total=False):
    """How patient an HTTP provider is; every key has the default HttpProvider gives it."""

    timeout_s: float
    clock: Clock | None
    backoff: BackoffFunction | None
    transport: httpx.BaseTransport | None
    max_attempts: int
    create_attempts: int
    lookup_attempts: int
    lookup_delay_s: float
    confirm_attempts: int
    confirm_delay_s: float


class HttpProvider(Provider):
    """What the RunPod and Vast clients share: one retrying HTTP client with the account key, and the
    patience of a create that never leaves two pods and of a destroy confirmed by listing again."""

    def __init__(
        self,
        api_key: str,
        key_env: str,
        *,
        timeout_s: float = 20.0,
        clock: Clock | None = None,
        backoff: BackoffFunction | None = None,
        transport: httpx.BaseTransport | None = None,
        max_attempts: int = 5,
        create_attempts: int = 2,
        lookup_attempts: int = 3,
        lookup_delay_s: float = 2.0,
        confirm_attempts: int = 5,
        confirm_delay_s: float = 1.0,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.http = HttpClient(
            provider=self.name,
            api_key=api_key,
            key_env=key_env,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            backoff=backoff,
            clock=self.clock,
            transport=transport,
        )
        self.create_attempts = create_attempts
        self.lookup_attempts = lookup_attempts
        self.lookup_delay_s = lookup_delay_s
        self.confirm_attempts = confirm_attempts
        self.confirm_delay_s = confirm_delay_s

    def close(self) -> None:
        self.http.close()

    def create_named(self, name: str, send: Callable[[], Pod]) -> Pod:
        return create_once(
            provider=self.name,
            name=name,
            send=send,
            find=self.find_by_name,
            clock=self.clock,
            attempts=self.create_attempts,
            lookups=self.lookup_attempts,
            lookup_delay_s=self.lookup_delay_s,
        )

    def gone_for_sure(self, pod_id: str) -> bool:
        return self.confirm_gone(pod_id, self.clock, self.confirm_attempts, self.confirm_delay_s)


def pod_env(spec: PodSpec) -> dict[str, str]:
    """The env a gpuc pod is created with: the spec's settings plus the ownership marker."""
    refuse_secret_env(spec.env)
    # `up` marks the experiment itself (the local sandbox reads it from the env): the same value is fine.
    marks = {OWNER_ENV: OWNER_VALUE, EXPERIMENT_ENV: spec.experiment}
    reserved = {k for k, v in marks.items() if k in spec.env and spec.env[k] != v}
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


def watchdog_of(env: Mapping[str, str]) -> str | None:
    """The watchdog that started the pod (core.pod.WATCHDOG_ENV), as its env shows it."""
    return env.get(WATCHDOG_ENV) or None


P = TypeVar("P", bound=HttpProvider)


class ProviderBilling(Generic[P]):
    """A reconcile BillingSource over a provider client's HTTP choke point (auth, retries, error mapping):
    one client per month asked for, closed after."""

    def __init__(self, connect: Callable[[], P]) -> None:
        self._connect = connect

    def billing(self, month: str) -> list[BillingRecord]:
        provider = self._connect()
        try:
            return self.fetch(provider, month)
        finally:
            provider.close()

    @abstractmethod
    def fetch(self, provider: P, month: str) -> list[BillingRecord]:
        """The month's records, through `provider`."""


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
            log.warning("%s: create of %s: outcome unknown (%s); looking it up by name", provider, name, exc.message)
        found = look_up(name, find, clock, lookups, lookup_delay_s)
        if found is not None:
            log.info("%s: %s was created after all (id %s)", provider, name, found.id)
            return found
    raise ProviderUnavailable(
        f"create of {name} failed {max(1, attempts)} times with an unknown outcome, and no pod by that name is listed",
        provider=provider,
        status=last.status if last else None,
        request_id=last.request_id if last else None,
        hint=f"check `gpuc ls` for {name}; if it shows up later, the reaper destroys it after a grace period",
    )


def look_up(name: str, find: Callable[[str], Pod | None], clock: Clock, tries: int, delay_s: float) -> Pod | None:
    # A pod created a moment ago may take a moment to be listed: look more than once.
    for attempt in range(max(1, tries)):
        found = find(name)
        if found is not None:
            return found
        if attempt + 1 < tries:
            clock.sleep(delay_s)
    return None
