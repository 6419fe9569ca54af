"""Heartbeat and webhook signatures.

A pod holds a token. Both sides derive the HMAC key from it; the watchdog stores only that derived key
(never the token), and verify `timestamp.seq.body` in constant time. A store leak lets someone forge pings
for a pod but not recover the token. The token itself is derived from the watchdog's own key and the pod's
identity (pod_token_for), so a watchdog that lost its store can derive it again; older pods made theirs at
random (new_token).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets

# The headers of a pod's signed request (core/api.py re-exports them): the signature covers `timestamp.seq.body`.
H_POD = "X-Gpuc-Pod"
H_TIMESTAMP = "X-Gpuc-Timestamp"
H_SEQ = "X-Gpuc-Seq"
H_SIGNATURE = "X-Gpuc-Signature"
H_CLAIM = "X-Gpuc-Claim"
_KEY_CONTEXT = b"gpuc-heartbeat-v1"
# The floor a pod token must clear wherever one is made or loaded: 32 characters is at least 128 bits
# even as hex. A shorter one (a truncated generator, a token typed by hand) could be guessed, and with it
# every ping and event of the pod forged: a silent pod kept alive, or a healthy one ended.
MIN_TOKEN_CHARS = 32


def new_token() -> str:
    token = secrets.token_urlsafe(32)  # 256 bits, 43 URL-safe characters
    weak = weak_token(token)
    if weak is not None:
        raise RuntimeError(f"the new pod token is {weak}")
    return token


def weak_token(token: str) -> str | None:
    """Why this token is too weak to sign a pod's heartbeats, or None. Never names the token itself."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"too short ({len(token)} characters, at least {MIN_TOKEN_CHARS} needed)"
    return None


def derive_key(token: str) -> str:
    return hmac.new(token.encode(), _KEY_CONTEXT, hashlib.sha256).hexdigest()


def sign(key_hex: str, timestamp: int, seq: int, body: bytes) -> str:
    msg = f"{timestamp}.{seq}.".encode() + body
    return hmac.new(bytes.fromhex(key_hex), msg, hashlib.sha256).hexdigest()


def verify(key_hex: str, timestamp: int, seq: int, body: bytes, signature: str) -> bool:
    expected = sign(key_hex, timestamp, seq, body)
    return hmac.compare_digest(expected.encode(), signature.encode())


def token_matches(presented: str, expected: str) -> bool:
    """Constant-time comparison of bearer tokens (the admin token)."""
    return hmac.compare_digest(hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.encode()).digest())


def sign_webhook(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


# -- the watchdog's key: pods carry their own proof ----------------------------------------------
# One secret per watchdog, beside its admin token (SSM on AWS, config.json for `serve`), never in the store.
# Everything a pod needs to be recognised without the store comes from it: the pod's ping token is derived
# from it and the pod's identity, and the pod's claim (what the watchdog registered) is signed with it. A
# watchdog that lost its store re-creates a pod's record from the claim the pod presents, and verifies the
# pod's pings with the token it derives again: a lost store destroys no healthy pod.
CLAIM_VERSION = "c1"
MAX_CLAIM_CHARS = 1500


def new_watchdog_key() -> str:
    return secrets.token_hex(32)


def _mac(watchdog_key: str, context: str) -> str:
    return hmac.new(watchdog_key.encode(), context.encode(), hashlib.sha256).hexdigest()


def watchdog_id(watchdog_key: str) -> str:
    """The watchdog's public name, marked on every pod it starts (core.pod.WATCHDOG_ENV). From the key, so a
    watchdog is one secret: a new key is a new watchdog."""
    return "wd-" + _mac(watchdog_key, "watchdog-id")[:16]


def pod_token_for(watchdog_key: str, provider: str, pod_id: str, run: str) -> str:
    """The pod's ping token (GPUC_POD_TOKEN), derived, not random: the watchdog can derive it again from the
    pod's identity alone. 64 hex characters: weak_token's floor holds."""
    return _mac(watchdog_key, f"pod-key|{provider}|{pod_id}|{run}")


def mint_claim(watchdog_key: str, fields: dict[str, object]) -> str:
    """`c1.<base64url JSON>.<hex HMAC>`: what the watchdog says about one pod, signed. The JSON is sorted and
    compact, so the same facts make the same claim (the pod rewrites its copy only when they change)."""
    payload = base64.urlsafe_b64encode(
        json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    ).decode()
    return f"{CLAIM_VERSION}.{payload}.{_mac(watchdog_key, f'claim|{payload}')}"


def open_claim(watchdog_key: str, claim: str) -> dict[str, object] | None:
    """The claim's fields if this key signed it, else None (a forged, altered or foreign claim): checked
    in constant time before the JSON is even read."""
    if len(claim) > MAX_CLAIM_CHARS or claim.count(".") != 2:
        return None
    version, payload, mac = claim.split(".")
    expected = _mac(watchdog_key, f"claim|{payload}")
    if version != CLAIM_VERSION or not hmac.compare_digest(expected.encode(), mac.encode()):
        return None
    try:
        fields = json.loads(base64.urlsafe_b64decode(payload.encode()))
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None
