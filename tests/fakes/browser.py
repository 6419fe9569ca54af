"""The fleet the browser tests look at, and the session link to it (imported by name: every test folder has
a conftest)."""

from __future__ import annotations

from pathlib import Path

from fakes.watchdog import World
from gpuc.functions.links import ALL_PODS, link_key, mint, new_claim
from gpuc.functions.server import ServerHandle

ARTIFACTS = Path(__file__).parent.parent / "artifacts"  # gitignored: screenshots to look at


def fleet(world: World) -> None:
    """Two pods: pod-a pinging, pod-b silent past its limit and marked for destroy (a pending destroy)."""
    world.register("pod-a", gpu="NVIDIA GeForce RTX 4090", price_per_hour=0.69)
    world.register("pod-b", gpu="NVIDIA A100 80GB PCIe", price_per_hour=1.89)
    world.ping("pod-a")
    world.ping("pod-b")
    world.reap()
    world.clock.advance(world.settings.silence_limit_s + 1)
    world.ping("pod-a")
    world.reap()
    assert world.pod("pod-b").state == "down", world.pod("pod-b")


def session_url(world: World, handle: ServerHandle, life_s: int = 3600) -> str:
    token = mint(link_key(world.store), new_claim("page", ALL_PODS, world.now, life_s=life_s))
    return f"{handle.url}/p/{token}"
