"""gpuc: rented GPUs that destroy themselves, with a watchdog and a ledger.

Nothing heavy is imported here: `gpuc --help` must stay close to `python -c pass`.
"""

from __future__ import annotations

__version__ = "0.1.0"
