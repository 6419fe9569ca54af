"""Spot recovery's tests, the watchdog's side and the laptop's together (functions/recovery/,
client/pods/recovery/). The recovering run's worlds are rec_fixtures.py's (testkit/spot_world.py); the
watchdog's store fakes (watchdog_fakes.py) are tests/functions', as tests/aws and tests/browser reach them."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "functions"))
sys.path.insert(0, str(Path(__file__).parent))
