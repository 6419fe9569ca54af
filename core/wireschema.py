"""The JSON Schema of every wire document the pod reads or sends, made from the one declaration of each: the
pydantic models the watchdog validates with (core/api.py) and the laptop writes the pod's config with
(core/podconfig.py). The pod bundle carries it (client/onpod/bundle.py), and the pod reads it with the standard
library (core/wire.py): no second declaration, no pydantic on a pod.

Laptop side (pydantic); core/wire.py imports it only where no bundle's schema is there (a clone, the laptop).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gpuc.core import api
from gpuc.core.podconfig import PodConfig

# What a pod reads (its config, its boot kit, the heartbeat's answer) and sends (heartbeats, events, the boot).
POD_DOCUMENTS: tuple[type[BaseModel], ...] = (
    PodConfig,
    api.BootAnswer,
    api.HeartbeatAnswer,
    api.HeartbeatBody,
    api.PodEvent,
    api.BootRequest,
)


def schemas() -> dict[str, Any]:
    return {model.__name__: model.model_json_schema(mode="validation") for model in POD_DOCUMENTS}
