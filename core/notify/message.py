"""What a notification says: its title, text, level and buttons (Message, Action), and a pod's or a provider's
words as every notification shows them, defanged."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, NamedTuple

# "low": news that costs nothing now (a balance above the cap): it must not wake a lock screen, or a user
# mutes the topic and misses "sync FAILED: pod kept, billing".
Level = Literal["low", "info", "warning", "error"]


POD_TEXT_MAX = 500
# Every channel auto-links plain URLs and domain names (ntfy's app, Telegram, Slack mrkdwn, Discord), and
# pod text is whatever a stranger's machine chose to send: "your RunPod key was revoked, re-enter it at
# https://...". So a scheme loses its "tt", a dot between a name and a letter becomes "[.]", an IPv4
# address's dots too, and "<" / ">" (Slack's <url|text> links and <!channel> mentions) become look-alikes.
_SCHEME = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}):(//|\\\\)")
_NAME_DOT = re.compile(r"(?<=\w)[.\u3002\uff0e\uff61](?=[^\W\d_])")
_IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
_ANY_DOT = re.compile(r"[\u3002\uff0e\uff61]")  # the ideographic and fullwidth full stops browsers map to "."


def counted(count: int, noun: str) -> str:
    """ "1 pod", "2 pods": what a notification counts, in words a person reads (never "pod(s)")."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def pod_says(text: str, limit: int = POD_TEXT_MAX) -> str:
    """Text that came from a pod, as every notification shows it: quoted and marked as the pod's, on one
    line, control and invisible characters stripped, every URL defanged (`hxxps://evil[.]example`), so
    nothing a pod says can pass for gpuc's own words, become a link or a button, or move a terminal."""
    return f'pod says: "{defang(text, limit)}"'


def provider_says(text: str, limit: int = 120) -> str:
    """A provider's own words about a pod (Vast's status texts come from the host's machine, a stranger's),
    as an alert quotes them: defanged as a pod's are. gpuc's own words around them are never defanged."""
    return defang(text, limit)


def defang(text: str, limit: int = POD_TEXT_MAX) -> str:
    """One line of pod text that no channel can turn into a link, a mention or a control sequence."""
    chars = []
    for ch in text:
        if ch in "\t\n\r\v\f\x85\u2028\u2029":
            chars.append(" ")
        elif unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co"):
            chars.append(ch)
    clean = " ".join("".join(chars).split())
    clean = _SCHEME.sub(_defang_scheme, clean)
    clean = _IPV4.sub(lambda m: m.group(0).replace(".", "[.]"), clean)
    clean = _NAME_DOT.sub("[.]", clean)
    clean = _ANY_DOT.sub("[.]", clean)
    clean = clean.replace("<", "\u2039").replace(">", "\u203a").replace('"', "'")
    return clean if len(clean) <= limit else clean[: limit - 1] + "\u2026"


def _defang_scheme(match: re.Match[str]) -> str:
    scheme = match.group(1)
    if scheme.lower() in ("http", "https"):
        return f"{scheme[0]}xx{scheme[3:]}://"
    return f"{scheme}[:]//"


class Action(NamedTuple):
    """A button on a notification. `url` is the watchdog's `/a/<token>`: a GET shows its
    confirmation page and never acts, a POST acts. `token` is the same link as a Telegram callback_data or
    a Slack button value. `safe`: it may act straight from the channel's own button; otherwise (destroy)
    the button only opens the confirmation page. Every part is the watchdog's own, never a pod's text."""

    label: str
    url: str
    token: str
    safe: bool


NTFY_ACTIONS_MAX = 3  # ntfy shows at most 3 action buttons


@dataclass(frozen=True)
class Message:
    ts: float
    title: str
    message: str
    pod_id: str | None = None
    kind: str = "info"
    level: Level = "info"
    actions: tuple[Action, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["actions"] = [action._asdict() for action in self.actions]
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Message:
        actions = tuple(Action(**a) for a in raw.pop("actions", ()))
        return cls(**raw, actions=actions)

    def plain(self) -> Message:
        """The text-only form: each action a link line to its confirmation page (the channels without
        buttons, and the fallback when a channel refuses a message's buttons)."""
        if not self.actions:
            return self
        lines = "".join(f"\n{action.label}: {action.url}" for action in self.actions)
        return replace(self, message=f"{self.message}{lines}", actions=())
