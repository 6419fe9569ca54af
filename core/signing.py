"""Heartbeat and webhook signatures.

A pod holds a random token. Both sides derive the HMAC key from it; the functions store only that
derived key (never the token), and verify `timestamp.seq.body` in constant time. A store leak lets
someone forge pings for a pod but not recover the token.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

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
    return hmac.compare_digest(
        hashlib.sha256(presented.encode()).digest(), hashlib.sha256(expected.encode()).digest()
    )


def sign_webhook(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
