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


def new_token() -> str:
    return secrets.token_urlsafe(32)


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
