"""Capability links: one action on one pod, for minutes, once.

A link is `VERB.POD.PARAM.EXP.NONCE.MAC`, every part URL-safe, at most 64 bytes so that the same token is
a Telegram `callback_data` as well as the tail of `/a/<token>`. The MAC is an HMAC-SHA256 (truncated to
80 bits) under a key only the watchdog holds: it lives in the watchdog's own store, never in `.env`, a
pod, a notification or a URL. What a link can do is written in it and nothing else: no admin token,
provider key or pod token is ever needed or shown. Whoever reads a notification (an ntfy topic is
readable by anyone who knows its name) can at most do that one action on that one pod before EXP.

80 bits is enough because a guess can only be checked online, against this watchdog, and a guessed link
would still be one action on one pod. The nonce makes a link single-use (`claim_once`): a signature alone
could be replayed until it expires.

`page` links are the exception: the status page's session (pod `all`), reused until EXP, never acting.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from typing import Literal, get_args

from gpuc.functions.store import Store

Verb = Literal["keep", "destroy", "retry", "stop", "anyway", "extend", "pause", "page", "norecover"]
VERBS: tuple[Verb, ...] = get_args(Verb)
# One letter each on the wire, so that a Vast or RunPod id and a nonce still fit in 64 bytes.
_CODE: dict[Verb, str] = {
    "keep": "k",
    "destroy": "d",
    "retry": "r",
    "stop": "s",
    "anyway": "a",
    "extend": "e",
    "pause": "p",
    "page": "v",
    "norecover": "n",  # stop recovering an outbid run (functions/recovery/rerent.py)
}
_VERB_OF = {code: verb for verb, code in _CODE.items()}
ALL_PODS = "all"  # the status page's session link and "pause new pods" are not about one pod
# Acting links live minutes: long enough to read a notification at dinner, short enough that a leaked
# one is dead by the next morning. Session links live what `gpuc page --for` asks, within a day.
ACT_LIFE_S = 30 * 60
ACT_LIFE_MAX_S = 2 * 3600
PAGE_LIFE_MAX_S = 24 * 3600
TOKEN_MAX = 64
MAC_BYTES = 10
NONCE_BYTES = 6
KEY_META = "link_key"
_POD = re.compile(r"[A-Za-z0-9_-]{1,24}")
_B36 = re.compile(r"[0-9a-z]{1,12}")
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_CONTEXT = b"gpuc-link-v1"


class LinkRefused(Exception):
    """The link does nothing: `why` is one of malformed, altered, expired, used (shown to the person)."""

    def __init__(self, why: Literal["malformed", "altered", "expired", "used"], message: str) -> None:
        super().__init__(message)
        self.why = why


@dataclass(frozen=True)
class Claim:
    verb: Verb
    pod_id: str
    param: int  # seconds for keep/extend, 0 otherwise
    exp: int  # epoch seconds
    nonce: int  # NONCE_BYTES random bytes as an integer


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, rem = divmod(n, 36)
        out = digits[rem] + out
        if n == 0:
            return out


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _payload(claim: Claim) -> str:
    parts = (_CODE[claim.verb], claim.pod_id, _b36(claim.param), _b36(claim.exp), _b36(claim.nonce))
    return ".".join(parts)


def _mac(key: bytes, payload: str) -> str:
    return _b64(hmac.new(key, _CONTEXT + payload.encode(), hashlib.sha256).digest()[:MAC_BYTES])


def new_claim(verb: Verb, pod_id: str, now: float, *, param: int = 0, life_s: int = ACT_LIFE_S) -> Claim:
    limit = PAGE_LIFE_MAX_S if verb == "page" else ACT_LIFE_MAX_S
    if not 0 < life_s <= limit:
        raise ValueError(f"a {verb} link lives 1 s to {limit} s, not {life_s}")
    if not _POD.fullmatch(pod_id):
        raise ValueError("a pod id in a link is 1-24 characters of A-Z a-z 0-9 _ -")
    if param < 0:
        raise ValueError("a link's parameter is a count of seconds, never negative")
    nonce = int.from_bytes(secrets.token_bytes(NONCE_BYTES), "big")
    return Claim(verb, pod_id, param, int(now) + life_s, nonce)


def mint(key: bytes, claim: Claim) -> str:
    payload = _payload(claim)
    token = f"{payload}.{_mac(key, payload)}"
    if len(token) > TOKEN_MAX:  # a Telegram button would be refused by Telegram: fail here, not there
        raise ValueError(f"a link token is at most {TOKEN_MAX} bytes, this one is {len(token)}")
    return token


def read(key: bytes, token: str, now: float) -> Claim:
    """The claim a token carries, if this watchdog signed it and it has not expired. Never acts."""
    claim = _parse(token)
    payload, _, mac = token.rpartition(".")
    if not hmac.compare_digest(_mac(key, payload).encode(), mac.encode()):
        raise LinkRefused("altered", "this link was not made by this watchdog, or was changed")
    if now >= claim.exp:
        raise LinkRefused("expired", "this link has expired: links act for minutes only")
    return claim


def _parse(token: str) -> Claim:
    parts = token.split(".") if len(token) <= TOKEN_MAX else []
    if len(parts) != 6:
        raise LinkRefused("malformed", "this is not a gpuc link")
    code, pod_id, param, exp, nonce, mac = parts
    fields_ok = (
        code in _VERB_OF
        and _POD.fullmatch(pod_id)
        and all(_B36.fullmatch(p) for p in (param, exp, nonce))
        and _B64.fullmatch(mac)
    )
    if not fields_ok:
        raise LinkRefused("malformed", "this is not a gpuc link")
    return Claim(_VERB_OF[code], pod_id, int(param, 36), int(exp, 36), int(nonce, 36))


def claim_once(store: Store, claim: Claim, now: float) -> None:
    """Spend the link's nonce with the store's conditional write (INSERT OR IGNORE on SQLite,
    attribute_not_exists on DynamoDB): of two taps racing, one acts. The record outlives the link, so a
    spent nonce can never be claimed again while the link could still be read."""
    keep_s = max(1.0, claim.exp - now) + ACT_LIFE_MAX_S
    if not store.claim_event_seq(f"link:{claim.pod_id}", claim.nonce, now, keep_s):
        raise LinkRefused("used", "this link was already used: a link acts once")


SPENT_META = "link_spent"


def _spent_key(claim: Claim) -> str:
    return f"{SPENT_META}:{claim.pod_id}:{claim.nonce}"


def record_spent(store: Store, claim: Claim, now: float, outcome: str) -> None:
    """What a spent link did, for its page when it is opened again ("already used at 21:40: destroyed").
    One small record per tap (a person's taps: a handful a day). Never raises: the act is done either way."""
    try:
        store.put_meta(_spent_key(claim), {"at": now, "outcome": outcome[:500]}, None)
    except Exception as exc:
        logging.getLogger("gpuc.functions").warning("could not record a spent link: %s", type(exc).__name__)


def spent(store: Store, claim: Claim) -> tuple[float, str] | None:
    """(when, what it did) for a link already used, or None: not used (or used before this was recorded)."""
    meta = store.get_meta(_spent_key(claim))
    if meta is None:
        return None
    return float(meta.value.get("at", 0.0)), str(meta.value.get("outcome", ""))


def link_key(store: Store) -> bytes:
    """The watchdog's link key, made on first use. Two first uses racing both end with the stored one."""
    for _ in range(3):
        meta = store.get_meta(KEY_META)
        if meta is not None:
            return bytes.fromhex(str(meta.value["key"]))
        store.put_meta(KEY_META, {"key": secrets.token_hex(32)}, expected_version=None)
    raise RuntimeError("the watchdog's store keeps no link key: check its table")


# ---- what a log may say of a path ----------------------------------------------------------------------
# The path of /a/<token> and /p/<token> IS the capability: a log line, an error or a metric that names it
# hands the link to whoever reads the log (a refused link may still work: expired for the page, fine for
# another). So they are named by their route and a short hash: the same link, the same hash, to follow one
# in a log, and 32 bits of a SHA-256 say nothing of the 128+ bits of the token.
_ROUTE_NAMES = (("/a/", "action link"), ("/p/", "status page link"))
_PLAIN_PATH = re.compile(
    r"/(?:v1/(?:pods|heartbeat|events|notify|status|reap|resume|page-link)"
    r"(?:/[A-Za-z0-9_.:-]{1,64}/(?:keep|end|deadline))?|telegram|slack/actions)?/?"
)
_LINK_IN_TEXT = re.compile(r"/([ap])/([^\s/?#'\"<>]+)")


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:8]


def path_for_log(path: str) -> str:
    """A request path as a log line, an error or a metric may show it: one of the watchdog's plain routes as
    it is, a link's route by its name and a short hash, any other path by its hash only (a mistyped link is
    still a link)."""
    path = path.split("?", 1)[0]
    if _PLAIN_PATH.fullmatch(path):
        return path
    for prefix, name in _ROUTE_NAMES:
        if path.startswith(prefix):
            return f"{prefix}<{name} #{short_hash(path[len(prefix) :].rstrip('/'))}>"
    return f"<a path of {len(path)} chars #{short_hash(path)}>"


def scrub_links(text: str) -> str:
    """Free text (the HTTP layer's own messages quote the request line) with every /a/ or /p/ token hashed."""
    return _LINK_IN_TEXT.sub(lambda m: f"/{m.group(1)}/<link #{short_hash(m.group(2))}>", text)
