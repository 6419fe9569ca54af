"""Pods carry their own proof; the store is a cache.

At registration the watchdog derives the pod's ping token from its own key and the pod's identity
(core.signing.pod_token_for) and mints the pod's CLAIM: what it registered (provider, run, experiment,
deadline, lease, kept window, its own id), signed with its key. The pod sends the claim with every signed
request. A watchdog whose store does not know the pod (watchdog.db deleted, a new GPUC_HOME, a table
restored from an old backup) opens the claim, derives the pod's token again, verifies the ping with it and
only then re-creates the pod's record: the pod is judged as before, and a lost store destroys no healthy
pod. Whatever the watchdog changes later (extend, a lease, a budget's pull-in) goes back to the pod as a
fresh claim in every heartbeat answer.

A ping that no key of this watchdog verifies is still nothing: a claim is read only after its own HMAC
checks, it must name the pod the request names and this watchdog, and the ping must verify with the token
derived for exactly that identity. A stolen claim without the pod's token, a claim replayed for another pod
id, an altered deadline, a claim of another watchdog: all refused before anything is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from gpuc.core.api import RESULTS_AT_MAX
from gpuc.core.pod import NAME_PREFIX, pod_name
from gpuc.core.signing import derive_key, mint_claim, open_claim, pod_token_for
from gpuc.functions.app import Deps
from gpuc.functions.store import PodAuth, StoredPod, store_born

# claim field names: short, the claim rides on every ping
_FIELDS = {
    "pod_id": "p",
    "provider": "v",
    "run": "r",
    "experiment": "e",
    "deadline_at": "d",
    "lease_until": "l",
    "kept_until": "k",
    "started_at": "s",
    "price_per_hour": "c",
    "watchdog": "w",
    "issued_at": "t",
    "results_at": "g",
}


class Claimed(Protocol):
    """What a claim is minted from: a StoredPod, or the ping path's PodAuth read."""

    pod_id: str
    provider: str
    name: str
    experiment: str
    lease_until: float | None
    kept_until: float | None
    started_at: float | None
    price_per_hour: float | None
    results_at: str | None


@dataclass(frozen=True)
class Claim:
    pod_id: str
    provider: str
    run: str
    experiment: str
    watchdog: str
    deadline_at: float | None = None
    lease_until: float | None = None
    kept_until: float | None = None
    started_at: float | None = None
    price_per_hour: float | None = None
    issued_at: float | None = None  # the answer that carried it: newer than the store's last ping = a stale store
    # The run's own prefix its grants reach (functions/grants.py): a store rebuilt from the claim grants the same
    # prefix, never a wider one (the claim is signed: the pod cannot change it).
    results_at: str | None = None


def run_of(name: str) -> str:
    """The run id a gpuc pod is named after (core.pod.pod_name); a name gpuc did not make is its own run."""
    return name[len(NAME_PREFIX) :] if name.startswith(NAME_PREFIX) else name


def token_for(deps: Deps, provider: str, pod_id: str, name: str) -> str | None:
    """The pod's ping token, derived from this watchdog's key: None without a key."""
    if deps.watchdog_key is None:
        return None
    return pod_token_for(deps.watchdog_key.get_secret_value(), provider, pod_id, run_of(name))


def claim_for(deps: Deps, pod: Claimed, deadline_at: float | None, now: float) -> str | None:
    """The pod's claim as this watchdog knows the pod now (the deadline already reckoned: deadline_of)."""
    if deps.watchdog_key is None or deps.watchdog_id is None:
        return None
    claim = Claim(
        pod_id=pod.pod_id,
        provider=pod.provider,
        run=run_of(pod.name),
        experiment=pod.experiment,
        watchdog=deps.watchdog_id,
        deadline_at=deadline_at,
        lease_until=pod.lease_until,
        kept_until=pod.kept_until,
        started_at=pod.started_at,
        price_per_hour=pod.price_per_hour,
        issued_at=now,
        results_at=pod.results_at,
    )
    fields = {short: getattr(claim, name) for name, short in _FIELDS.items() if getattr(claim, name) is not None}
    return mint_claim(deps.watchdog_key.get_secret_value(), fields)


def read_claim(deps: Deps, text: str) -> Claim | None:
    """The claim if this watchdog signed it and its fields are sane, else None."""
    if deps.watchdog_key is None:
        return None
    fields = open_claim(deps.watchdog_key.get_secret_value(), text)
    if fields is None:
        return None
    values: dict[str, Any] = {name: fields.get(short) for name, short in _FIELDS.items()}
    texts = ("pod_id", "provider", "run", "experiment", "watchdog")
    if not all(isinstance(values[n], str) and 0 < len(values[n]) <= 128 for n in texts):
        return None
    results_at = values["results_at"]
    if results_at is not None and not (isinstance(results_at, str) and 0 < len(results_at) <= RESULTS_AT_MAX):
        return None
    for name in set(values) - {*texts, "results_at"}:
        value = values[name]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if value is not None and not (number and math.isfinite(value)):
            return None
    return Claim(**values)


def claimed(deps: Deps, text: str | None, pod_id: str) -> Claim | None:
    """The claim a request presents, if this watchdog signed it for this pod."""
    claim = read_claim(deps, text.strip()) if text else None
    if claim is None or claim.pod_id != pod_id or claim.watchdog != deps.watchdog_id:
        return None
    return claim


def catch_up(deps: Deps, auth: PodAuth, claim: Claim | None) -> bool:
    """A store restored from an old backup knows the pod, but not what it said since (a `gpuc extend`, a
    lease): a claim issued after the store's last sight of the pod is newer than its record, and wins. A
    store that is current never loses to a claim: every claim it issued is at most its own last_seen (the
    ping is recorded before the answer), so a budget's pull-in is never undone by an older claim."""
    seen = auth.last_seen if auth.last_seen is not None else auth.registered_at
    if claim is None or claim.issued_at is None or claim.issued_at <= seen + 1.0:
        return False
    changes: dict[str, Any] = {"deadline_at": claim.deadline_at, "lease_until": claim.lease_until}
    if claim.kept_until is not None:
        changes.update(kept_at=auth.last_seen or auth.registered_at, kept_until=claim.kept_until)
    expect = {"key": auth.key, "deadline_at": auth.deadline_at, "lease_until": auth.lease_until}
    return deps.store.update_if(auth.pod_id, expect, changes)


def pod_of_claim(claim: Claim, key: str, now: float) -> StoredPod:
    """The record a claim re-creates: registered now (its windows restart from this sight, as a store's
    first sight of a stray does), with what the claim says about its deadline, lease and kept window."""
    return StoredPod(
        pod_id=claim.pod_id,
        provider=claim.provider,
        name=pod_name(claim.run),
        experiment=claim.experiment,
        price_per_hour=claim.price_per_hour,
        started_at=claim.started_at,
        registered_at=now,
        deadline_at=claim.deadline_at,
        lease_until=claim.lease_until,
        kept_until=claim.kept_until,
        key=key,
        results_at=claim.results_at,
    )


def restore(deps: Deps, claim: Claim, now: float, signed_at: float) -> PodAuth | None:
    """Re-create the record of a pod whose ping verified with its derived token, over the stray record the
    reaper made when its provider listed it; never over a live registration or a finished pod.

    A genuine ping captured within its window and replayed after a store loss verifies too: it must not bring an
    ended pod back as healthy (to be told "gone at the provider" a pass later, or, still listed and stopped, kept
    from the stray rule's destroy). So nothing is re-created for a pod no listing showed (no stray record: not
    listed, or not yet: its next ping, after the next pass, is), nor from a ping signed before this store was
    born (a live pod's next ping is signed after it). No provider is called on the ping path."""
    listed = deps.store.get_auth(claim.pod_id)
    if listed is None or listed.origin != "adopted":
        return None
    if signed_at < math.floor(store_born(deps.store, now, write=False)):  # signed in whole seconds
        return None
    token = token_for(deps, claim.provider, claim.pod_id, pod_name(claim.run))
    if token is None:
        return None
    pod = pod_of_claim(claim, derive_key(token), now)
    if deps.store.register(pod) == "refused":
        return None
    later: dict[str, Any] = {} if claim.lease_until is None else {"lease_until": claim.lease_until}
    if claim.kept_until is not None:  # kept for its results (F16): never destroyed unasked, stopped by then
        later.update(kept_at=now, kept_until=claim.kept_until)
    if later:
        deps.store.update_if(pod.pod_id, {"key": pod.key}, later)
    return deps.store.get_auth(pod.pod_id)
