"""Where a phone channel's tap (telegram.py, slack.py) meets the verbs: the tap turned into the
verb's one sentence, or a refusal that says why. Which buttons a notification carries is functions/buttons.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuc.functions.actions import verbs
from gpuc.functions.links import LinkRefused

if TYPE_CHECKING:
    from gpuc.functions.app import Deps


class Refused(Exception):
    """A tap that did nothing, with the sentence for the person (why, and what to do instead)."""


def act(deps: Deps, token: str, now: float, via: verbs.Via) -> str:
    """What a channel's tap did, as one sentence; raises Refused (nothing changed) with why."""
    try:
        return verbs.act(deps, token, now, via).sentence
    except LinkRefused as exc:
        raise Refused(str(exc)) from None
    except verbs.ActionRefused as exc:
        raise Refused(exc.message) from None
