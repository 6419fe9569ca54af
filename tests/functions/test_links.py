"""Capability links: one action, one pod, minutes, once; nothing else verifies."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuc.functions.links import (
    ACT_LIFE_S,
    TOKEN_MAX,
    VERBS,
    Claim,
    LinkRefused,
    claim_once,
    link_key,
    mint,
    new_claim,
    read,
)
from gpuc.functions.store import SqliteStore

KEY = bytes(range(32))
NOW = 1_800_000_000.0


def test_a_minted_link_reads_back_its_claim() -> None:
    claim = new_claim("keep", "abc123xyz", NOW, param=3600)
    assert read(KEY, mint(KEY, claim), NOW + 10) == claim


@given(
    st.sampled_from(VERBS),
    st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True),
    st.integers(0, 48 * 3600),
)
def test_every_link_fits_a_telegram_button(verb: str, pod: str, param: int) -> None:
    claim = new_claim(verb, pod, NOW, param=param)  # type: ignore[arg-type]
    assert len(mint(KEY, claim)) <= TOKEN_MAX


def test_a_changed_character_anywhere_is_refused() -> None:
    token = mint(KEY, new_claim("destroy", "podA", NOW))
    for i, ch in enumerate(token):
        if ch == ".":
            continue
        other = "b" if ch != "b" else "c"
        with pytest.raises(LinkRefused) as info:
            read(KEY, token[:i] + other + token[i + 1 :], NOW)
        assert info.value.why in ("altered", "malformed")


def test_a_link_for_another_pod_is_a_forgery() -> None:
    token = mint(KEY, new_claim("destroy", "podA", NOW))
    forged = token.replace(".podA.", ".podB.")
    with pytest.raises(LinkRefused, match="not made by this watchdog") as info:
        read(KEY, forged, NOW)
    assert info.value.why == "altered"


def test_another_watchdogs_key_is_refused() -> None:
    token = mint(bytes(32), new_claim("keep", "podA", NOW, param=3600))
    with pytest.raises(LinkRefused) as info:
        read(KEY, token, NOW)
    assert info.value.why == "altered"


def test_an_expired_link_is_refused() -> None:
    token = mint(KEY, new_claim("keep", "podA", NOW, param=3600))
    read(KEY, token, NOW + ACT_LIFE_S - 1)
    with pytest.raises(LinkRefused) as info:
        read(KEY, token, NOW + ACT_LIFE_S)
    assert info.value.why == "expired"


@pytest.mark.parametrize("junk", ["", ".", "x" * 65, "k.podA.0.0.0", "z.podA.0.1.2.mac", "k.p/d.0.1.2.mac"])
def test_junk_is_malformed(junk: str) -> None:
    with pytest.raises(LinkRefused) as info:
        read(KEY, junk, NOW)
    assert info.value.why == "malformed"


def test_no_link_lives_longer_than_its_kind_allows() -> None:
    with pytest.raises(ValueError):
        new_claim("destroy", "podA", NOW, life_s=3 * 3600)
    with pytest.raises(ValueError):
        new_claim("page", "all", NOW, life_s=25 * 3600)
    with pytest.raises(ValueError):
        new_claim("keep", "../etc", NOW)


def test_a_link_acts_once_and_a_second_tap_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    claim = new_claim("keep", "podA", NOW, param=3600)
    claim_once(store, claim, NOW)
    with pytest.raises(LinkRefused) as info:
        claim_once(store, claim, NOW + 60)
    assert info.value.why == "used"
    # Still spent just before it expires: the spent nonce outlives the link.
    with pytest.raises(LinkRefused):
        claim_once(store, claim, claim.exp - 1)


def test_nonces_of_different_links_are_independent(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    claim_once(store, new_claim("keep", "podA", NOW, param=3600), NOW)
    claim_once(store, new_claim("keep", "podA", NOW, param=3600), NOW)
    same_nonce_other_pod = Claim("keep", "podB", 3600, int(NOW) + 60, 7)
    claim_once(store, Claim("keep", "podA", 3600, int(NOW) + 60, 7), NOW)
    claim_once(store, same_nonce_other_pod, NOW)


def test_the_key_is_made_once_and_kept(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    first = link_key(store)
    assert len(first) == 32
    assert link_key(SqliteStore(tmp_path / "s.db")) == first
