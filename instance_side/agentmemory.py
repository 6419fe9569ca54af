"""What one agent leaves for the next (the wrapper restarts a dead agent: wrapper.py): its idle window, the
deadline and lease the watchdog last gave, the push schedule, in `<state>/agent-state.json`, saved each check.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpuc.instance_side.podfiles import PodPaths


def memory_path(paths: PodPaths) -> Path:
    return paths.state / "agent-state.json"


@dataclass(frozen=True)
class AgentMemory:
    """What one agent leaves for the next (agent-state.json, saved each check)."""

    pod_id: str
    saved_at: float
    idle_s: float = 0.0
    last_idle_check: float | None = None
    warned: bool = False
    deadline_at: float | None = None
    warned_for: float | None = None
    lease_until: float | None = None
    obeyed: float | None = None
    next_sync: float | None = None
    sync_failing: bool = False

    @classmethod
    def load(cls, path: Path) -> AgentMemory | None:
        """None when absent or unreadable: a fresh agent, as before (nothing assumed)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None
