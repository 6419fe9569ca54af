"""A pod token is what every ping and event of the pod is signed with: a guessable one lets anyone forge
them (keep a silent pod alive, or end a healthy one). Tokens are strong where they are made (`up`, the
drill, the demo: new_token) and refused where the pod loads them (pod_token)."""

from __future__ import annotations

import base64

import pytest

from gpuc.core.errors import ConfigError
from gpuc.core.signing import MIN_TOKEN_CHARS, new_token, weak_token
from gpuc.instance_side.podfiles import TOKEN_ENV, pod_token


def test_a_new_token_carries_256_random_bits() -> None:
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        assert len(raw) == 32, f"{len(raw) * 8}-bit token"
        assert weak_token(token) is None


@pytest.mark.parametrize(
    "token",
    [
        "Zm9vYg",  # 32 bits, URL-safe base64 (token_urlsafe(4))
        "deadbeef",  # 32 bits, hex (token_hex(4))
        "x" * (MIN_TOKEN_CHARS - 1),
    ],
)
def test_a_weak_pod_token_is_refused_where_the_pod_loads_it(token: str) -> None:
    assert weak_token(token) is not None
    with pytest.raises(ConfigError, match=f"{TOKEN_ENV} in the pod's secrets is too short") as err:
        pod_token({TOKEN_ENV: token}, {})
    assert token not in str(err.value) and token not in (err.value.hint or "")  # never echoed
    with pytest.raises(ConfigError, match="too short"):
        pod_token({}, {TOKEN_ENV: token})  # from the environment too


def test_a_strong_pod_token_loads() -> None:
    token = new_token()
    assert pod_token({TOKEN_ENV: token}, {}) == token
    assert pod_token({}, {TOKEN_ENV: token}) == token
