"""Hostile input against the local watchdog server over real HTTP (127.0.0.1, port 0).

Property-based: malformed JSON, huge bodies, wrong types, unicode, forged signatures, replayed and
stale pings, seq going backwards, bad admin tokens. Every answer must be a 4xx (never a 5xx), nothing
from bad input may be stored, and no forgery may be accepted.

Examples per property: env GPUC_HOSTILE_EXAMPLES (default 300, what `make test` runs). The full run is
`make hostile` (GPUC_HOSTILE_EXAMPLES=10000, `-m slow`: the `full` variants below). The case count and
the three zero counters are printed at the end (`-s` shows them) and asserted.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuc.core import api
from gpuc.core.clock import FakeClock, SystemClock
from gpuc.core.notify.notifier import Notifier
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_token, sign
from gpuc.functions.app import Deps, ProviderPool
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.functions.store import SqliteStore
from gpuc.testkit.drill_stage import DrillProvider, FaultPlan, FaultTally

ADMIN = "hostile-admin-token-" + "a1b2c3d4" * 3
GOOD_POD = "good-pod-01"
EXAMPLES = int(os.environ.get("GPUC_HOSTILE_EXAMPLES", "300"))
DEFAULT_EXAMPLES = min(EXAMPLES, 300)
PROPERTY_RUNS = 7  # the full run spreads EXAMPLES over them, with margin: hostile cases >= EXAMPLES
FULL_EXAMPLES = math.ceil(EXAMPLES / (PROPERTY_RUNS - 2))
TALLY: Counter[str] = Counter()


@dataclass
class Target:
    url: str
    http: httpx.Client
    store: SqliteStore
    token: str
    seq: Iterator[int]

    def snapshot(self) -> tuple[Any, ...]:
        pods = self.store.list_pods()
        good = self.store.get_pod(GOOD_POD)
        assert good is not None
        fields = good.model_dump(include={"last_seq", "last_seen", "last_heartbeat", "state", "lease_until"})
        return len(pods), fields, len(self.store.recent_notifications(100_000))

    def post(self, path: str, body: bytes, headers: dict[str, Any]) -> httpx.Response:
        return self.http.post(path, content=body, headers=headers)

    def signed(self, body: bytes, seq: int, ts: int | None = None, pod: str = GOOD_POD) -> dict[str, str]:
        stamp = int(time.time()) if ts is None else ts
        return {
            api.H_POD: pod,
            api.H_TIMESTAMP: str(stamp),
            api.H_SEQ: str(seq),
            api.H_SIGNATURE: sign(derive_key(self.token), stamp, seq, body),
        }


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    home: Path = tmp_path_factory.mktemp("hostile-home")
    cfg = Settings(home=home, admin_token=SecretStr(ADMIN))
    store = SqliteStore(home / "watchdog.db")
    provider = DrillProvider(FakeClock(), FaultPlan(0, on=False, tally=FaultTally()), name="local")
    deps = Deps(
        settings=cfg,
        store=store,
        providers=ProviderPool.of(provider),
        notifier=Notifier(home / "outbox.jsonl", sleep=lambda s: None),
        admin_token=SecretStr(ADMIN),
        clock=SystemClock(),
    )
    handle: ServerHandle = start_in_thread(cfg, "127.0.0.1", 0, deps=deps)
    with httpx.Client(base_url=handle.url, timeout=20) as http:
        token = new_token()
        register = api.RegisterRequest.model_validate(
            {
                "pod_id": GOOD_POD,
                "provider": "local",
                "name": "gpuc-good-pod-01",
                "experiment": "hostile",
                "key": derive_key(token),
                "price_per_hour": 0.5,
                "started_at": time.time(),
            }
        )
        answer = http.post("/v1/pods", content=register.model_dump_json(), headers={"Authorization": f"Bearer {ADMIN}"})
        assert answer.status_code == 200, answer.text
        t = Target(handle.url, http, store, token, itertools.count(1))
        body = heartbeat(seq := next(t.seq))
        assert http.post("/v1/heartbeat", content=body, headers=t.signed(body, seq)).status_code == 200
        yield t
    handle.stop()
    store.close()
    # Bad input is never the ingest's trouble: if it were, anyone could hold every silence kill (F18).
    trouble = deps.ingest_health.trouble(0.0, time.time() + 60) if deps.ingest_health is not None else "no log"
    assert trouble is None, trouble
    total = sum(v for k, v in TALLY.items() if k.startswith("cases") and k not in ("cases good", "cases signed-valid"))
    print(
        f"\nhostile input: {total} hostile cases over HTTP (+{TALLY['cases good']} good pings, "
        f"{TALLY['cases signed-valid']} valid by chance); 5xx {TALLY['5xx']}, stored from bad input "
        f"{TALLY['stored']}, accepted forgeries {TALLY['forgeries']}"
    )
    assert TALLY["5xx"] == TALLY["stored"] == TALLY["forgeries"] == 0


def heartbeat(seq: int, **fields: Any) -> bytes:
    return json.dumps({"pod_id": GOOD_POD, "seq": seq, "sent_at": time.time(), **fields}).encode()


def must_reject(t: Target, answer: httpx.Response, before: tuple[Any, ...], kind: str) -> None:
    TALLY[f"cases {kind}"] += 1
    if answer.status_code >= 500:
        TALLY["5xx"] += 1
    if answer.is_success:
        TALLY["forgeries"] += 1
    if t.snapshot() != before:
        TALLY["stored"] += 1
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    assert t.snapshot() == before, "bad input changed what is stored"


def run(prop: Callable[..., None], strategy: st.SearchStrategy[Any], n: int) -> None:
    wrapped = settings(
        max_examples=n, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )(given(strategy)(prop))
    wrapped()


def sizes(test: Callable[..., None]) -> Any:
    """Each property twice: the default size, and the full size for `make hostile` (slow)."""
    return pytest.mark.parametrize(
        "n",
        [pytest.param(DEFAULT_EXAMPLES, id="default"), pytest.param(FULL_EXAMPLES, id="full", marks=pytest.mark.slow)],
    )(test)


# -- strategies ---------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
# What HTTP can carry in a header value: printable latin-1, no edge whitespace (h11 refuses to send it).
header_text = (
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=80)
    .map(lambda s: s.strip(" \t"))
    .filter(bool)
)
junk_bodies = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=512).map(lambda s: s.encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.integers(16 * 1024 + 1, 300 * 1024).map(lambda n: b"{" + b" " * n + b"}"),
    st.sampled_from([b"", b"{", b'{"pod_id":', b"null", b"[]", b'{"seq": NaN}', b"\xff\xfe\x00", b'{"a":1}' * 3]),
)
HB_FIELDS = (
    "pod_id",
    "seq",
    "sent_at",
    "gpus",
    "gpu_error",
    "python_procs",
    "active_ssh",
    "idle_minutes",
    "busy_reason",
    "job_running",
    "keep_file",
    "extra_field",
)


@st.composite
def forged_headers(draw: st.DrawFn) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    for name, value in (
        (api.H_POD, st.one_of(st.just(GOOD_POD), header_text, st.just("x" * 500))),
        (
            api.H_TIMESTAMP,
            st.one_of(st.integers(-(2**70), 2**70).map(str), header_text, st.just(str(int(time.time())))),
        ),
        (api.H_SEQ, st.one_of(st.integers(-(2**70), 2**70).map(str), header_text)),
        (api.H_SIGNATURE, st.one_of(st.text("0123456789abcdef", min_size=64, max_size=64), header_text)),
    ):
        if draw(st.booleans()) or name == api.H_SIGNATURE:
            headers[name] = draw(value).encode("latin-1")
    return headers


# -- properties ---------------------------------------------------------------------------------
@sizes
@pytest.mark.parametrize("path", ["/v1/heartbeat", "/v1/events"])
def test_forged_or_malformed_pod_requests_are_refused(target: Target, n: int, path: str) -> None:
    """Anything not signed with the pod's key: refused with a 4xx, whatever the body."""

    def prop(case: tuple[bytes, dict[str, Any]]) -> None:
        body, headers = case
        before = target.snapshot()
        must_reject(target, target.post(path, body, headers), before, "forged")

    run(prop, st.tuples(junk_bodies, forged_headers()), n)


@sizes
def test_validly_signed_garbage_is_refused_and_stores_nothing(target: Target, n: int) -> None:
    """The pod's own key over a bad body (wrong types, unicode, malformed JSON): 4xx, nothing stored.
    A body that happens to validate may be accepted: that is not bad input."""

    wrong = st.tuples(st.sampled_from(HB_FIELDS), json_values)

    def prop(case: tuple[int, Any]) -> None:
        mode, payload = case
        seq = next(target.seq)
        if mode == 0:
            body = payload
        else:
            name, value = payload
            doc = json.loads(heartbeat(seq))
            doc[name] = value
            body = json.dumps(doc, ensure_ascii=bool(mode == 1)).encode()
        before = target.snapshot()
        answer = target.post("/v1/heartbeat", body, target.signed(body, seq))
        if answer.is_success:
            TALLY["cases signed-valid"] += 1
            api.HeartbeatBody.model_validate_json(body)  # accepted only because it is valid
            return
        must_reject(target, answer, before, "signed")

    run(prop, st.one_of(st.tuples(st.just(0), junk_bodies), st.tuples(st.integers(1, 2), wrong)), n)


@sizes
def test_replayed_stale_and_backward_pings_are_refused(target: Target, n: int) -> None:
    def prop(case: tuple[str, int]) -> None:
        kind, k = case
        fresh = next(target.seq)
        body = heartbeat(fresh)
        answer = target.post("/v1/heartbeat", body, target.signed(body, fresh))
        assert answer.status_code == 200, answer.text  # the baseline: a good ping lands
        TALLY["cases good"] += 1
        if kind == "replay":
            bad_body, headers = body, target.signed(body, fresh)
        elif kind == "stale":
            seq = next(target.seq)
            bad_body = heartbeat(seq)
            ts = int(time.time()) + (1 if k % 2 else -1) * (api.SIGNATURE_WINDOW_S + 5 + k)
            headers = target.signed(bad_body, seq, ts=ts)
        else:  # seq going backwards
            seq = max(0, fresh - 1 - k)
            bad_body = heartbeat(seq)
            headers = target.signed(bad_body, seq)
        must_reject(target, target.post("/v1/heartbeat", bad_body, headers), target.snapshot(), kind)

    run(prop, st.tuples(st.sampled_from(["replay", "stale", "backward"]), st.integers(0, 10**7)), n)


ADMIN_ROUTES = (
    ("POST", "/v1/pods"),
    ("POST", f"/v1/pods/{GOOD_POD}/keep"),
    ("POST", f"/v1/pods/{GOOD_POD}/end"),
    ("POST", "/v1/notify"),
    ("GET", "/v1/status"),
    ("POST", "/v1/reap"),
)


@sizes
def test_bad_admin_tokens_are_refused(target: Target, n: int) -> None:
    auth = st.one_of(
        header_text,
        header_text.map(lambda s: f"Bearer {s}"),
        header_text.map(lambda s: f"Bearer {s}{ADMIN}"),
        st.just(f"Bearer {ADMIN[:-1]}"),
        st.just(f"Bearer {ADMIN}x"),
        st.just(f"Basic {ADMIN}"),
        st.just(f"bearer  {ADMIN} extra"),
    )

    def prop(case: tuple[tuple[str, str], str | None, bytes]) -> None:
        (method, path), header, body = case
        headers = {} if header is None else {b"Authorization": header.encode("latin-1")}
        before = target.snapshot()
        answer = target.http.request(method, path, content=body, headers=headers)
        must_reject(target, answer, before, "admin")

    run(prop, st.tuples(st.sampled_from(ADMIN_ROUTES), st.none() | auth, junk_bodies), n)


@sizes
def test_admin_with_hostile_bodies_stores_nothing(target: Target, n: int) -> None:
    """The right token, a bad registration: 4xx and no pod record."""
    fields = st.fixed_dictionaries(
        {},
        optional={
            "pod_id": json_values | st.text(min_size=129, max_size=400),
            "provider": json_values,
            "name": json_values,
            "experiment": json_values,
            "key": json_values,
            "price_per_hour": json_values,
            "started_at": json_values,
        },
    )

    def prop(body: bytes) -> None:
        before = target.snapshot()
        answer = target.post("/v1/pods", body, {"Authorization": f"Bearer {ADMIN}"})
        TALLY["cases admin-body"] += 1
        assert answer.status_code < 500, answer.text
        if answer.is_success:
            api.RegisterRequest.model_validate_json(body)  # only a valid registration registers
            return
        assert target.snapshot() == before

    run(prop, st.one_of(junk_bodies, fields.map(lambda d: json.dumps(d).encode())), n)
