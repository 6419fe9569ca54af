"""The pod keeps its latest claim: on disk across agent restarts, sent with every signed request,
and only ever something shaped like a claim (a garbled answer must not become a header)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuc.core.clock import FakeClock
from gpuc.core.signing import H_CLAIM, mint_claim, new_token
from gpuc.instance_side.heartbeat import _parse_answer
from gpuc.instance_side.podhttp import HttpResult
from gpuc.instance_side.signer import ClaimFile, SeqCounter, Signer

KEY = "cd" * 32
FIRST = mint_claim(KEY, {"p": "pod-1", "d": 1.0})
LATER = mint_claim(KEY, {"p": "pod-1", "d": 2.0})


def test_the_latest_claim_survives_an_agent_restart(tmp_path: Path) -> None:
    claim = ClaimFile(tmp_path / "claim", FIRST)
    assert claim.text == FIRST and (tmp_path / "claim").read_text() == FIRST
    assert claim.keep(LATER)
    again = ClaimFile(tmp_path / "claim", FIRST)  # restarted: the secrets still hold the first one
    assert again.text == LATER
    assert (tmp_path / "claim").stat().st_mode & 0o077 == 0


def test_every_signed_request_carries_the_claim(tmp_path: Path, clock: FakeClock) -> None:
    claim = ClaimFile(tmp_path / "claim", FIRST)
    signer = Signer("pod-1", new_token(), SeqCounter(tmp_path / "seq", clock), clock, claim)
    _, headers = signer.sign({"pod_id": "pod-1"}, stamp_body=True)
    assert headers[H_CLAIM] == FIRST


def test_a_garbled_claim_is_never_kept_nor_sent(tmp_path: Path, clock: FakeClock) -> None:
    claim = ClaimFile(tmp_path / "claim", FIRST)
    for bad in (FIRST + "\r\nX-Injected: 1", "c1..", "x" * 5000, "", FIRST.replace("c1.", "c2.")):
        assert not claim.keep(bad)
        body = json.dumps({"ok": True, "server_time": 1.8e9, "claim": bad}).encode()
        answer = _parse_answer(HttpResult(200, body), 0.0)
        assert answer is not None and answer.claim is None
    assert claim.text == FIRST
    (tmp_path / "claim").write_text("garbage\r\n")
    assert ClaimFile(tmp_path / "claim", None).text is None
