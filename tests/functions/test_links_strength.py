"""A link's signature is long enough that guessing one online is hopeless.

A link is checked only online, against this watchdog: a 16-bit signature is found in ~33,000 tries, an
afternoon of requests; 80 bits are not found before the sun burns out. A mutant that cut the MAC to 16
bits passed every test: these fail on it, and on a check that compares only part of the signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from gpuc.functions.links import VERBS, LinkRefused, mint, new_claim, read

KEY = bytes(range(32))
NOW = 1_800_000_000.0
MIN_BITS = 80  # links.py's own bound: online guessing only, and the token must fit a Telegram button


def mac_of(token: str) -> bytes:
    mac = token.rsplit(".", 1)[1]
    return base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))


@pytest.mark.parametrize("verb", VERBS)
def test_every_links_signature_has_at_least_80_bits(verb: str) -> None:
    token = mint(KEY, new_claim(verb, "pod-with-a-long-id-24chr" if verb != "page" else "all", NOW))  # type: ignore[arg-type]
    mac = mac_of(token)
    assert len(mac) * 8 >= MIN_BITS, f"a {len(mac) * 8}-bit signature is forgeable online"
    # and it is the HMAC-SHA256 of the rest under the key, not a constant or a hash anyone can compute
    payload = token.rsplit(".", 1)[0]
    assert mac == hmac.new(KEY, b"gpuc-link-v1" + payload.encode(), hashlib.sha256).digest()[: len(mac)]
    assert mac != hashlib.sha256(payload.encode()).digest()[: len(mac)]


def test_a_signature_cut_short_or_extended_is_refused() -> None:
    token = mint(KEY, new_claim("destroy", "pod-1", NOW))
    payload, mac = token.rsplit(".", 1)
    for forged in (mac[:3], mac[:-1], mac + "A", mac[:-2] + ("AA" if not mac.endswith("AA") else "BB")):
        with pytest.raises(LinkRefused):
            read(KEY, f"{payload}.{forged}", NOW)


def test_only_the_whole_signature_opens_a_link() -> None:
    """Every single byte of the signature counts: a check of its first bytes only is a shorter signature."""
    token = mint(KEY, new_claim("destroy", "pod-1", NOW))
    payload = token.rsplit(".", 1)[0]
    raw = mac_of(token)
    for i in range(len(raw)):
        changed = raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1 :]
        forged = base64.urlsafe_b64encode(changed).rstrip(b"=").decode()
        with pytest.raises(LinkRefused):
            read(KEY, f"{payload}.{forged}", NOW)
