"""Each pod's ping token is its own: derived from the watchdog's key and the pod's whole identity (provider, pod
id, run), so no two pods share one. One shared token would let whoever runs one pod sign for every pod (keep a
dead one "alive", end another's job)."""

from __future__ import annotations

import itertools

from gpuc.core.signing import derive_key, new_watchdog_key, pod_token_for, sign, verify

KEY = new_watchdog_key()
IDENTITIES = [
    (provider, pod_id, run)
    for provider, pod_id, run in itertools.product(("vast", "runpod"), ("31000000", "31000001"), ("r1abc", "r1abc-a2"))
]


def test_no_two_pods_share_a_token() -> None:
    tokens = [pod_token_for(KEY, *identity) for identity in IDENTITIES]
    assert len(set(tokens)) == len(IDENTITIES)


def test_a_token_is_derived_again_from_the_same_identity_and_only_with_this_watchdogs_key() -> None:
    identity = IDENTITIES[0]
    assert pod_token_for(KEY, *identity) == pod_token_for(KEY, *identity)
    assert pod_token_for(new_watchdog_key(), *identity) != pod_token_for(KEY, *identity)


def test_one_pods_token_signs_for_no_other_pod() -> None:
    body, ts, seq = b'{"pod_id": "31000001"}', 1_790_000_000, 7
    mine, other = (derive_key(pod_token_for(KEY, *identity)) for identity in IDENTITIES[:2])
    signature = sign(mine, ts, seq, body)
    assert verify(mine, ts, seq, body, signature)
    assert not verify(other, ts, seq, body, signature)
