"""Faithful emulators of the RunPod and Vast.ai HTTP APIs, for tests and `gpuc demo`."""

from __future__ import annotations

from gpuc.testkit.emulators.server import EmulatorServer, make_emulator, serve

__all__ = ["EmulatorServer", "make_emulator", "serve"]
