"""The watchdog says which version of the pod's requests it takes (core/api.py WIRE_PROTOCOL), and `up` rents
only when it is this gpuc's (an upgraded laptop's pod sends fields an older watchdog refuses, the pod
counts as silent and is destroyed with its job). The number stands for the schema of what a pod sends: a change
to that schema without a new number fails here, before it ships to a watchdog that would refuse it."""

from __future__ import annotations

import hashlib
import json

from fakes.watchdog import World

from gpuc.client.pods.plan import check_protocol
from gpuc.core import api, grantapi

# What a pod sends, as this WIRE_PROTOCOL defines it. Changed a model below? Raise WIRE_PROTOCOL and record
# the new schema's digest here with it (the failure prints it).
POD_SENDS = (
    api.HeartbeatBody,
    api.PodEvent,
    api.BootRequest,
    grantapi.GrantRequest,
    grantapi.ListRequest,
    grantapi.UploadRequest,
)
SCHEMA_OF = {2: "d814ba07454291f8", 3: "1a74955be5046b85", 4: "27716092ac9a0e6e"}


def schema_digest() -> str:
    schemas = {model.__name__: model.model_json_schema() for model in POD_SENDS}
    return hashlib.sha256(json.dumps(schemas, sort_keys=True).encode()).hexdigest()[:16]


def test_this_watchdog_says_its_protocol_and_up_takes_it(world: World) -> None:
    answer = world.admin("GET", "/v1/status")
    assert answer.body["protocol"] == api.WIRE_PROTOCOL
    check_protocol(api.StatusResponse.model_validate(answer.body), world.settings)  # no refusal


def test_what_a_pod_sends_changes_only_with_a_new_protocol_number() -> None:
    digest = schema_digest()
    assert SCHEMA_OF.get(api.WIRE_PROTOCOL) == digest, (
        f"what a pod sends changed (schema {digest}) without a new WIRE_PROTOCOL: an older watchdog would refuse "
        f"its heartbeats; raise WIRE_PROTOCOL and set SCHEMA_OF[{api.WIRE_PROTOCOL + 1}] = {digest!r}"
    )
