"""The reaper's two pure steps as tables: `judge` (what a pod's situation calls for) and `veto` (a second
witness that says "do not kill"). One row per situation; times are offsets from NOW, in minutes. The rules
read a record, a provider's pod and a `Rules` value, all built here from literals: no store, no pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuc.core.pod import Pod
from gpuc.core.settings import Settings
from gpuc.functions.reaper.rules import Rules, Ruling, judge, veto
from gpuc.functions.store import StoredPod

NOW = 1_790_000_000.0
MIN = 60.0
HOUR = 3600.0
STRAY: dict[str, Any] = {"origin": "adopted", "key": "", "last_seen": None}  # what adopt_strays records


# The defaults the rows are written against: silence 5 min, destroy grace 4 min, unregistered grace 20 min,
# stopped 24 h, paused 30 min, a pass every 5 min, GPU busy from 5 %.
SETTINGS = Settings(home=Path("/nonexistent/gpuc-home"))


def rules_at(**fields: Any) -> Rules:
    return Rules(NOW, SETTINGS, **fields)


def record(**fields: Any) -> StoredPod:
    base: dict[str, Any] = {
        "pod_id": "pod-1",
        "provider": "fake",
        "name": "gpuc-pod-1",
        "experiment": "exp",
        "registered_at": NOW - 2 * HOUR,
        "key": "ab" * 32,
        "last_seen": NOW - MIN,
        "provider_status": "running",
        "provider_status_since": NOW - 2 * HOUR,
    }
    return StoredPod.model_validate({**base, **fields})


def pod(**fields: Any) -> Pod:
    base: dict[str, Any] = {
        "provider": "fake",
        "id": "pod-1",
        "name": "gpuc-pod-1",
        "status": "running",
        "managed": True,
    }
    return Pod(**{**base, **fields})


# (id, record fields, pod fields, rules fields, expected kind, expected rule, expected due_at)
JUDGE_ROWS: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], str, str, float | None]] = [
    ("pinging", {}, {}, {}, "fine", "", None),
    ("silent 4 min", {"last_seen": NOW - 4 * MIN}, {}, {}, "fine", "", None),
    ("silent 5 min", {"last_seen": NOW - 5 * MIN}, {}, {}, "kill", "silence", None),
    ("silent, exited", {"last_seen": NOW - HOUR}, {"status": "exited"}, {}, "kill", "silence", None),
    (
        "never pinged, running 4 min",
        {"last_seen": None, "provider_status_since": NOW - 4 * MIN},
        {},
        {},
        "fine",
        "",
        None,
    ),
    (
        "silent, policy 30 min",
        {"last_seen": NOW - 20 * MIN, "policy": {"silence_limit_s": 1800}},
        {},
        {},
        "fine",
        "",
        None,
    ),
    ("silent, but a clock jump 1 min ago", {"last_seen": NOW - HOUR}, {}, {"epoch": NOW - MIN}, "fine", "", None),
    (
        "stopped 23 h",
        {"provider_status": "stopped", "provider_status_since": NOW - 23 * HOUR},
        {"status": "stopped"},
        {},
        "fine",
        "",
        None,
    ),
    (
        "stopped 24 h minus the grace",
        {"provider_status": "stopped", "provider_status_since": NOW - 24 * HOUR + 4 * MIN},
        {"status": "stopped"},
        {},
        "kill",
        "stopped",
        NOW + 4 * MIN,
    ),
    (
        "stopped 25 h, clock jump 1 h ago",
        {"provider_status": "stopped", "provider_status_since": NOW - 25 * HOUR},
        {"status": "stopped"},
        {"epoch": NOW - HOUR},
        "fine",
        "",
        None,
    ),
    (
        "paused 30 min",
        {"provider_status": "paused", "provider_status_since": NOW - 30 * MIN},
        {"status": "paused"},
        {},
        "kill",
        "paused",
        NOW,
    ),
    (
        "provisioning, silent",
        {"last_seen": None, "registered_at": NOW - HOUR},
        {"status": "provisioning"},
        {},
        "alert",
        "provisioning",
        None,
    ),
    ("unknown, silent", {"last_seen": NOW - HOUR}, {"status": "unknown"}, {}, "alert", "unknown", None),
    ("unknown, pinging", {}, {"status": "unknown"}, {}, "fine", "", None),
    ("ended, before its destroy time", {"state": "ended", "destroy_at": NOW + MIN}, {}, {}, "wait", "", None),
    ("ended, at its destroy time", {"state": "ended", "destroy_at": NOW}, {}, {}, "kill", "ended", None),
    (
        "stray first seen now, created 6 h ago",
        {"origin": "adopted", "key": "", "registered_at": NOW, "last_seen": None},
        {"created_at": NOW - 6 * HOUR},
        {},
        "fine",
        "",
        None,
    ),
    (
        "stray first seen 16 min ago",
        {"origin": "adopted", "key": "", "registered_at": NOW - 16 * MIN, "last_seen": None},
        {},
        {},
        "kill",
        "unregistered",
        NOW + 4 * MIN,
    ),
    (
        "stray first seen 10 min ago, pinging with a token this store cannot verify",
        {**STRAY, "registered_at": NOW - 10 * MIN, "unverified_ping_at": NOW - MIN},
        {},
        {},
        "alert",
        "unverified",
        None,
    ),
    (
        "stray pinging unverifiably, kept by the user's lease",
        {**STRAY, "registered_at": NOW - 10 * MIN, "unverified_ping_at": NOW - MIN, "lease_until": NOW + HOUR},
        {},
        {},
        "alert",
        "unverified",
        None,
    ),
    (
        "stray pinging unverifiably, first seen 36 min ago: delayed once, by at most the grace",
        {**STRAY, "registered_at": NOW - 36 * MIN, "unverified_ping_at": NOW - MIN},
        {},
        {},
        "kill",
        "unregistered",
        NOW + 4 * MIN,
    ),
    (
        "stray pinging unverifiably for 3 h: the pings do not keep it",
        {**STRAY, "registered_at": NOW - 3 * HOUR, "unverified_ping_at": NOW - MIN},
        {},
        {},
        "kill",
        "unregistered",
        NOW - 3 * HOUR + 40 * MIN,
    ),
    (
        "stray pinging unverifiably, its deadline in 4 min: never delayed past it (the deadline rule ends it)",
        {**STRAY, "registered_at": NOW - 16 * MIN, "unverified_ping_at": NOW - MIN, "deadline_at": NOW + 4 * MIN},
        {},
        {},
        "kill",
        "deadline",
        NOW + 4 * MIN,
    ),
    (
        "stray whose unverified pings stopped 17 min ago",
        {**STRAY, "registered_at": NOW - 30 * MIN, "unverified_ping_at": NOW - 17 * MIN},
        {},
        {},
        "kill",
        "unregistered",
        NOW + 3 * MIN,
    ),
    (
        "carried, silent here",
        {"origin": "carried", "last_seen": None, "registered_at": NOW - HOUR},
        {},
        {},
        "alert",
        "carried",
        None,
    ),
    ("carried, pinged here once", {"origin": "carried", "last_seen": NOW - HOUR}, {}, {}, "kill", "silence", None),
]


@pytest.mark.parametrize(
    ("rec_fields", "pod_fields", "rules_fields", "kind", "rule", "due_at"),
    [pytest.param(*row[1:], id=row[0]) for row in JUDGE_ROWS],
)
def test_judge(
    rec_fields: dict[str, Any],
    pod_fields: dict[str, Any],
    rules_fields: dict[str, Any],
    kind: str,
    rule: str,
    due_at: float | None,
) -> None:
    ruling = judge(rules_at(**rules_fields), record(**rec_fields), pod(**pod_fields))
    assert (ruling.kind, ruling.rule, ruling.due_at) == (kind, rule, due_at), ruling.reason


# (id, record fields, pod fields, rules fields, ruling rule, expected veto key or None)
VETO_ROWS: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], str, str | None]] = [
    ("nothing against it", {}, {}, {}, "silence", None),
    ("provider says unknown", {}, {"status": "unknown"}, {}, "silence", "unknown"),
    ("lease holds", {"lease_until": NOW + MIN}, {}, {}, "silence", "lease"),
    ("lease over", {"lease_until": NOW - MIN}, {}, {}, "silence", None),
    ("lease does not hold an ended pod", {"state": "ended", "lease_until": NOW + HOUR}, {}, {}, "ended", None),
    ("GPU busy, silent", {}, {"gpu_util_pct": 90.0}, {}, "silence", "busy"),
    ("GPU busy, stray", {}, {"gpu_util_pct": 90.0}, {}, "unregistered", "busy"),
    ("GPU busy, ended", {}, {"gpu_util_pct": 90.0}, {}, "ended", "busy"),
    ("GPU busy does not keep a stopped pod", {}, {"gpu_util_pct": 90.0}, {}, "stopped", None),
    ("GPU idle", {}, {"gpu_util_pct": 1.0}, {}, "silence", None),
    ("fleet silent", {}, {}, {"fleet_suspect": True}, "silence", "fleet"),
    ("fleet silent does not keep a paused pod", {}, {}, {"fleet_suspect": True}, "paused", None),
    ("ingest refused heartbeats", {}, {}, {"ingest": "refused or failed 9 requests"}, "silence", "ingest"),
    ("ingest trouble does not keep an ended pod", {"state": "ended"}, {}, {"ingest": "x"}, "ended", None),
    ("ingest trouble does not keep a stray", {}, {}, {"ingest": "x"}, "unregistered", None),
]


@pytest.mark.parametrize(
    ("rec_fields", "pod_fields", "rules_fields", "rule", "key"),
    [pytest.param(*row[1:], id=row[0]) for row in VETO_ROWS],
)
def test_veto(
    rec_fields: dict[str, Any],
    pod_fields: dict[str, Any],
    rules_fields: dict[str, Any],
    rule: str,
    key: str | None,
) -> None:
    why_not = veto(rules_at(**rules_fields), record(**rec_fields), pod(**pod_fields), Ruling("kill", rule))
    assert (why_not[0] if why_not else None) == key
