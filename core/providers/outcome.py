"""What a pod's self-destroy did, in words the notification can carry as they are.

Kept free of pydantic and httpx: the agent imports it for the hours it only watches.
"""

from __future__ import annotations


class StoppedInstead(str):
    """`destroy_self()`'s answer when the pod could only be STOPPED, not destroyed: a stopped pod still
    bills its disk, so the ending must say so in its notification and leave the pod to the reaper (F9)."""

    __slots__ = ()
