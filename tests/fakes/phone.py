"""What the phone tests read of the watchdog: the whole store (for "nothing stored"), a pod's lease (what a
"keep 1 h" tap changes), and a tap's link, minted by the real offers as a notification's would be."""

from __future__ import annotations

from typing import Any

from fakes.watchdog import World
from gpuc.functions.app import Deps
from gpuc.functions.buttons import OfferKind, offer
from gpuc.functions.store import SqliteStore


def dump(deps: Deps) -> list[Any]:
    """Everything the store holds, for "nothing stored" (SqliteStore)."""
    store = deps.store
    assert isinstance(store, SqliteStore)
    return list(store._db.iterdump())


def leased(world: World, pod_id: str = "p1") -> float | None:
    """Until when `pod_id` is kept (a "keep 1 h" tap's effect), or None."""
    pod = world.store.get_pod(pod_id)
    assert pod is not None
    return pod.lease_until


def tap_token(world: World, verb: str = "keep", pod_id: str = "p1") -> str:
    kind: OfferKind = "kept" if verb in ("retry", "stop", "anyway") else "pending_destroy"
    offers = offer(world.store, world.settings, world.pod(pod_id), kind, world.now)
    return next(o.token for o in offers if o.verb == verb)
