"""Known-answer vectors for the three signatures, computed outside Python (`openssl dgst -sha256 -hmac`),
so a change to any of them — context string, message layout, encoding — fails here, not in the field where
every pod's pings would start bouncing. And a forgery that differs in one late hex digit is refused."""

from __future__ import annotations

import pytest

from gpuc.core.signing import derive_key, sign, sign_webhook, verify

TOKEN = "pod-token-0123456789abcdef"
# printf 'gpuc-heartbeat-v1' | openssl dgst -sha256 -hmac "$TOKEN"
KEY = "29cddd048543a08e6b80d148732d8015b255538e8282c69292afa85f941ae78f"
BODY = b'{"pod_id":"gpuc-abcd1234","seq":42}'
# printf '1790000000.42.<BODY>' | openssl dgst -sha256 -mac HMAC -macopt hexkey:$KEY
SIGNATURE = "9e17698246c8cc716c88998fc5b21103c0d5f238eda7cce9dc5fa7f93d056983"
WEBHOOK_SECRET = "whsec-test-secret"
WEBHOOK_BODY = b'{"title":"gpuc: destroyed gpuc-abcd1234"}'
# printf '1790000000.<WEBHOOK_BODY>' | openssl dgst -sha256 -hmac "$WEBHOOK_SECRET"
WEBHOOK_SIGNATURE = "5e25e23ac5b23303c6711dfacfd06b69c140eff16879784ba4c1725979b0c674"


def test_the_heartbeat_key_derivation_matches_its_vector() -> None:
    assert derive_key(TOKEN) == KEY


def test_the_heartbeat_signature_matches_its_vector() -> None:
    assert sign(KEY, 1_790_000_000, 42, BODY) == SIGNATURE
    assert verify(KEY, 1_790_000_000, 42, BODY, SIGNATURE)


def test_the_webhook_signature_matches_its_vector() -> None:
    assert sign_webhook(WEBHOOK_SECRET, 1_790_000_000, WEBHOOK_BODY) == WEBHOOK_SIGNATURE


def flip(hex_text: str, index: int) -> str:
    digit = hex_text[index]
    return hex_text[:index] + ("0" if digit != "0" else "1") + hex_text[index + 1 :]


@pytest.mark.parametrize("index", [63, 62, 48, 0])
def test_a_signature_off_by_one_hex_digit_is_refused(index: int) -> None:
    forged = flip(SIGNATURE, index)
    assert forged != SIGNATURE
    assert not verify(KEY, 1_790_000_000, 42, BODY, forged)


def test_the_same_signature_over_another_timestamp_seq_or_body_is_refused() -> None:
    assert not verify(KEY, 1_790_000_001, 42, BODY, SIGNATURE)
    assert not verify(KEY, 1_790_000_000, 43, BODY, SIGNATURE)
    assert not verify(KEY, 1_790_000_000, 42, BODY.replace(b"42", b"43"), SIGNATURE)
