"""client/watchdog/status.py (the status `gpuc ls` and `gpuc ledger` read without pydantic) against
core/api.py's StatusResponse (what the server answers with): the same fields, the same required ones, the
same words and bounds, and on every way of breaking a full status document the light reader refuses at
least what pydantic refuses. Each hand-written check in status.py has a mutation below that a missing
check would let through."""

from __future__ import annotations

import copy
import json
from dataclasses import MISSING
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError

from gpuc.client.watchdog import status as light
from gpuc.core import api, models
from gpuc.core.checks import as_dict
from gpuc.core.pod import POD_STATUSES

PAIRS: list[tuple[type[Any], type[BaseModel]]] = [
    (light.WatchdogStatus, api.StatusResponse),
    (light.WatchedPod, api.PodRecord),
    (light.Heartbeat, api.HeartbeatBody),
    (light.GpuReading, models.GpuReading),
    (light.Blind, api.BlindProvider),
    (light.Notification, api.NotificationRecord),
]


@pytest.mark.parametrize(("view", "model"), PAIRS, ids=[m.__name__ for _, m in PAIRS])
def test_each_record_has_the_models_fields_and_required_ones(view: type[Any], model: type[BaseModel]) -> None:
    mine = {name: f.default is MISSING for name, f in view.FIELDS.items()}
    theirs = {name: info.is_required() for name, info in model.model_fields.items()}
    assert mine == theirs


def test_the_words_and_bounds_are_the_apis() -> None:
    assert light.POD_STATUSES == POD_STATUSES
    assert get_args(api.PodRecord.model_fields["state"].annotation) == light.RECORD_STATES
    assert get_args(api.NotificationRecord.model_fields["level"].annotation) == light.LEVELS
    assert (light.EPOCH_MIN, light.EPOCH_MAX, light.MAX_LIMIT_S, light.SEQ_MAX) == (
        api.EPOCH_MIN,
        api.EPOCH_MAX,
        api.MAX_LIMIT_S,
        api.SEQ_MAX,
    )


T0 = 1_767_225_600.0
GPU = {
    "index": 0, "name": "RTX 4090", "uuid": "GPU-1", "utilization_pct": 97.0, "memory_used_mb": 20_000.0,
    "memory_total_mb": 24_564.0, "power_w": 400.0, "power_limit_w": 450.0, "temperature_c": 70.0,
    "driver_version": "550", "cuda_version": "12.4", "processes": [4242], "error": None,
}  # fmt: skip
HEARTBEAT = {
    "pod_id": "p1", "seq": 7, "sent_at": T0, "gpus": [GPU], "gpu_error": None, "python_procs": 1,
    "active_ssh": 0, "idle_minutes": 0.0, "busy_reason": "job", "job_running": True, "keep_file": False,
    "kept_left_s": None,
}  # fmt: skip
POD = {
    "pod_id": "p1", "provider": "runpod", "name": "gpuc-abcd1", "experiment": "exp", "gpu": "RTX 4090",
    "price_per_hour": 0.69, "started_at": T0, "registered_at": T0, "last_seen": T0 + 60, "last_seq": 7,
    "state": "late", "destroy_at": T0 + 900, "lease_until": None, "end_at": None, "ended_by": None,
    "note": None, "provider_status": "running", "last_heartbeat": HEARTBEAT, "reason": "silent",
    "deadline_at": T0 + 3600, "kept_at": None,
}  # fmt: skip
FULL: dict[str, Any] = {
    "server_time": T0 + 120, "reaper_last_run": T0 + 60, "reaper_period_s": 300.0, "pods": [POD],
    "reaper_blind": ["vast"], "reaper_blind_since": [{"provider": "vast", "since": T0, "why": "HTTP 503"}],
    "notifications": [{"ts": T0, "title": "t", "message": "m", "pod_id": "p1", "kind": "info", "level": "warning"}],
    "new_pods_paused": None,
}  # fmt: skip


def pydantic_reads(doc: Any) -> bool:
    try:
        api.StatusResponse.model_validate(doc)
    except ValidationError:
        return False
    return True


def light_reads(doc: Any) -> bool:
    try:
        light.read_status(doc)
    except light.Unexpected:
        return False
    return True


def test_the_full_document_reads_the_same() -> None:
    theirs = api.StatusResponse.model_validate(FULL).model_dump(mode="json")
    assert json.loads(json.dumps(as_dict(light.read_status(FULL)))) == theirs


def test_the_servers_own_answer_with_defaults_left_out_reads() -> None:
    bare = {"server_time": T0, "reaper_period_s": 300.0, "pods": [{k: POD[k] for k in ("pod_id", "provider",
            "name", "experiment", "registered_at")}]}  # fmt: skip
    read = light.read_status(bare)
    assert read.pods[0].state == "ok" and read.pods[0].last_seq == -1 and read.reaper_blind_since == ()


def objects(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every JSON object in `doc`."""
    found: list[tuple[Any, ...]] = []
    if isinstance(doc, dict):
        found.append(path)
        for key, value in doc.items():
            found += objects(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += objects(value, (*path, i))
    return found


def at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


WRONG = ["x", "", -1, 0, 1, 64, 1.5, -1e300, 1e300, float("nan"), True, None, [], {}, ["x"], [-1], [2**40]]


def mutations() -> list[tuple[str, Any]]:
    """Each way of breaking FULL: a field dropped, a field added, a value replaced by a wrong one."""
    out: list[tuple[str, Any]] = []
    for path in objects(FULL):
        obj = at(FULL, path)
        doc = copy.deepcopy(FULL)
        at(doc, path)["surprise"] = 1
        out.append((f"{path} + surprise", doc))
        for key in obj:
            doc = copy.deepcopy(FULL)
            del at(doc, path)[key]
            out.append((f"{path} - {key}", doc))
            for i, value in enumerate(WRONG):
                doc = copy.deepcopy(FULL)
                at(doc, path)[key] = value
                out.append((f"{(*path, key)} = {value!r} #{i}", doc))
    for n in (17,):  # a heartbeat holds at most 16 GPUs
        doc = copy.deepcopy(FULL)
        doc["pods"][0]["last_heartbeat"]["gpus"] = [GPU] * n
        out.append((f"{n} gpus", doc))
    doc = copy.deepcopy(FULL)
    doc["pods"][0]["last_heartbeat"]["gpus"][0]["processes"] = list(range(1025))
    out.append(("1025 processes", doc))
    doc = copy.deepcopy(FULL)
    doc["pods"][0]["last_heartbeat"]["pod_id"] = "p" * 129
    out.append(("a 129-character pod id", doc))
    return out


MUTATIONS = mutations()


def test_no_document_pydantic_refuses_is_read() -> None:
    """Never weaker: every broken document pydantic refuses is refused here too (the reverse is allowed only
    for the stricter coercions the module's docstring names)."""
    let_through = [name for name, doc in MUTATIONS if light_reads(doc) and not pydantic_reads(doc)]
    assert let_through == []


def test_what_both_read_reads_the_same() -> None:
    for name, doc in MUTATIONS:
        if light_reads(doc) and pydantic_reads(doc):
            theirs = api.StatusResponse.model_validate(doc).model_dump(mode="json")
            assert json.dumps(as_dict(light.read_status(doc))) == json.dumps(theirs), name


def test_only_the_named_stricter_coercions_differ() -> None:
    """Where pydantic reads and the light reader does not: a bool or float for an int, a bool for a float,
    0 or 1 for a bool (the server never sends them)."""
    refused = [name for name, doc in MUTATIONS if pydantic_reads(doc) and not light_reads(doc)]
    allowed = ("= True", "= 1.5", "= 0 ", "= 1 ", "= -1e300", "= 1e300")
    assert [n for n in refused if not any(a in n for a in allowed)] == []


@pytest.mark.parametrize(
    ("key", "value"),
    [("index", 64), ("index", -1), ("power_w", 1e8), ("temperature_c", -1e4), ("processes", [2**32]),
     ("processes", list(range(1025)))],
)  # fmt: skip
def test_a_gpu_reading_out_of_bounds_is_refused_by_both(key: str, value: Any) -> None:
    """core/gpubounds.py is the one rule both readers call: a bound missing there would pass both."""
    doc = copy.deepcopy(FULL)
    doc["pods"][0]["last_heartbeat"]["gpus"][0][key] = value
    assert not light_reads(doc) and not pydantic_reads(doc)
