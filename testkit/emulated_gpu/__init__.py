"""An NVML stand-in for the emulated pods of `gpuc demo --provider runpod|vast` (see pynvml.py)."""

from __future__ import annotations
