"""What RunPod's REST v2 takes, as its published OpenAPI says (runpod/docs api-reference-v2/openapi.json
@a900806e, 2026-08-20), for the routes the emulator serves: which refusal each request earns.

Two kinds of refusal, as the spec's create table puts them: a body that breaks the CONTRACT (an unknown
field: the bodies are `unevaluatedProperties: false`; a missing required one; a wrong type, bound or word)
is a 422 with every violation in `errors`; a body that keeps the contract but breaks a RULE the handler
enforces (exactly one of `gpu` or `cpu`; one kind of mount; no persistent mount on a CPU pod; a CUDA set and
a CUDA floor together) is a 400. Query parameters are the other way round: an unknown one is IGNORED (RunPod's
migration guide: "ignored, not rejected"), a known one with a bad value is a 422, and the catalog's
"valid only with include=AVAILABILITY" ones are a 400 without it.

Hand-written, on purpose not read from tests/providers/runpod_v2.schema.json: the conformance test checks
the emulator against that schema, and one implementation checking itself would prove nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]
Field = tuple[Check, str]  # the check, and what the value must be, in the words of the refusal
Refusal = tuple[int, list[str]]  # the status (400 or 422) and the problem's `errors`

CUDA = re.compile(r"^\d+\.\d+$")
CUDA_FLOOR_QUERY = re.compile(r"^\d+(\.\d+)?$")  # the catalog's filter takes a bare major; the body does not
COUNTRY = re.compile(r"^[A-Z]{2}$")
# UpdateSshKeysRequest: one authorized_keys entry per item.
SSH_KEY = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")
PERSISTENT_MIN_GB = 10  # PersistentMount.size: "Upstream enforces a 10 GB floor"
CLOUDS = ("SECURE", "COMMUNITY")
PRODUCTS = ("POD", "CLUSTER", "SERVERLESS")
ACTIONS = ("start", "stop", "restart", "terminate")


def is_int(low: int) -> Check:
    """JSON Schema's integer: any number without a fraction (1.0 is one), never a boolean."""

    def check(v: Any) -> bool:
        whole = isinstance(v, int) or (isinstance(v, float) and v.is_integer())
        return whole and not isinstance(v, bool) and v >= low

    return check


def is_strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


STRING: Field = (lambda v: isinstance(v, str), "a string")
NON_EMPTY: Field = (lambda v: isinstance(v, str) and v != "", "a non-empty string")
BOOLEAN: Field = (lambda v: isinstance(v, bool), "true or false")
STRINGS: Field = (is_strs, "an array of strings")
OBJECT: Field = (lambda v: isinstance(v, dict), "an object")
# CreatePodRequest: ContainerConfig's fields and its own, nothing else.
CREATE_FIELDS: dict[str, Field] = {
    "name": NON_EMPTY,
    "image": STRING,
    "templateId": NON_EMPTY,
    "args": STRING,
    "disk": (is_int(1), "an integer of at least 1 (GB)"),
    "env": (lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()), "an object of strings"),
    "ports": STRINGS,
    "registry": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "cloud": (lambda v: v in CLOUDS, f"one of {', '.join(CLOUDS)}"),
    "dataCenterIds": STRINGS,
    "globalNetworking": BOOLEAN,
    "startJupyter": BOOLEAN,
    "startSsh": BOOLEAN,
    "gpu": OBJECT,
    "cpu": OBJECT,
    "mounts": OBJECT,
}
# CreateGpuConfig = GpuConfig + the CUDA constraints; CreateCpuConfig = BaseCpuConfig. Both closed.
GPU_FIELDS: dict[str, Field] = {
    "id": STRING,
    "count": (is_int(1), "an integer of at least 1"),
    "allowedCudaVersions": (lambda v: is_strs(v) and all(CUDA.match(x) for x in v), "major.minor versions"),
    "minCudaVersion": (lambda v: isinstance(v, str) and CUDA.match(v) is not None, "a major.minor version"),
}
CPU_FIELDS: dict[str, Field] = {"id": NON_EMPTY, "vcpuCount": (is_int(2), "an integer of at least 2")}
PERSISTENT_FIELDS: dict[str, Field] = {
    "size": (is_int(PERSISTENT_MIN_GB), f"an integer of at least {PERSISTENT_MIN_GB} (GB)"),
    "path": STRING,
}
NETWORK_FIELDS: dict[str, Field] = {"volumeId": STRING, "path": STRING}


def closed(where: str, value: dict[str, Any], fields: Mapping[str, Field], required: tuple[str, ...]) -> list[str]:
    """An object that takes exactly `fields`: what it adds, lacks or gets wrong."""
    errors = [f"{where}{k}: unknown field" for k in sorted(set(value) - set(fields))]
    errors += [f"{where}{k}: required" for k in required if k not in value]
    errors += [f"{where}{k}: must be {what}" for k, (ok, what) in fields.items() if k in value and not ok(value[k])]
    return errors


def mounts_errors(mounts: dict[str, Any]) -> list[str]:
    errors = [f"mounts.{k}: unknown field" for k in sorted(set(mounts) - {"persistent", "network"})]
    if "persistent" in mounts:
        persistent = mounts["persistent"]
        if isinstance(persistent, dict):
            errors += closed("mounts.persistent.", persistent, PERSISTENT_FIELDS, ("size", "path"))
        else:
            errors.append("mounts.persistent: must be an object")
    if "network" in mounts:
        network = mounts["network"]
        if not isinstance(network, list) or len(network) > 1:
            errors.append("mounts.network: must be an array of at most 1 item")
        else:
            for item in network:
                if isinstance(item, dict):
                    errors += closed("mounts.network[0].", item, NETWORK_FIELDS, ("volumeId", "path"))
                else:
                    errors.append("mounts.network[0]: must be an object")
    return errors


def create_refusal(body: Any) -> Refusal | None:
    """What POST /v2/pods answers a body with, before any capacity or balance is looked at; None: accepted."""
    if not isinstance(body, dict):
        return 422, ["body: must be a CreatePodRequest object"]
    errors = closed("", body, CREATE_FIELDS, ("name",))
    if "image" not in body and "templateId" not in body:
        errors.append("image: required unless templateId is set")
    if isinstance(body.get("gpu"), dict):
        errors += closed("gpu.", body["gpu"], GPU_FIELDS, ("id",))
    if isinstance(body.get("cpu"), dict):
        errors += closed("cpu.", body["cpu"], CPU_FIELDS, ("id", "vcpuCount"))
    if isinstance(body.get("mounts"), dict):
        errors += mounts_errors(body["mounts"])
    if errors:
        return 422, errors
    rules = create_rule_breaks(body)
    return (400, rules) if rules else None


def create_rule_breaks(body: dict[str, Any]) -> list[str]:
    """The cross-field rules the handler enforces (the spec's 400: "breaks a cross-field rule")."""
    broken = []
    if ("gpu" in body) == ("cpu" in body):
        broken.append("exactly one of gpu or cpu must be set")
    mounts = body.get("mounts") or {}
    if "persistent" in mounts and "network" in mounts:
        broken.append("mounts: at most one of persistent or network")
    if "persistent" in mounts and "cpu" in body:
        broken.append("mounts.persistent is invalid on a CPU pod")
    gpu = body.get("gpu") or {}
    if gpu.get("allowedCudaVersions") and "minCudaVersion" in gpu:
        broken.append("gpu.allowedCudaVersions and gpu.minCudaVersion are mutually exclusive")
    return broken


def action_refusal(body: Any) -> Refusal | None:
    """PodActionRequest: `{"action": ...}` and nothing else."""
    if not isinstance(body, dict) or set(body) != {"action"} or body["action"] not in ACTIONS:
        return 422, [f'body: must be {{"action": {" | ".join(ACTIONS)}}}']
    return None


def ssh_keys_refusal(body: Any) -> Refusal | None:
    """UpdateSshKeysRequest: `{"keys": [<type> <base64> [comment]]}`, closed."""
    if not isinstance(body, dict):
        return 422, ["body: must be an UpdateSshKeysRequest object"]
    errors = [f"{k}: unknown field" for k in sorted(set(body) - {"keys"})]
    keys = body.get("keys")
    if "keys" not in body:
        errors.append("keys: required")
    elif not isinstance(keys, list):
        errors.append("keys: must be an array")
    else:
        lines = [isinstance(k, str) and SSH_KEY.match(k) is not None for k in keys]
        errors += [f"keys[{i}]: not a public key line" for i, ok in enumerate(lines) if not ok]
    return (422, errors) if errors else None


def bool_query(query: Mapping[str, str], name: str) -> Refusal | None:
    value = query.get(name)
    return None if value in (None, "true", "false") else (422, [f"{name}: must be true or false"])


def list_refusal(query: Mapping[str, str]) -> Refusal | None:
    """GET /v2/pods takes `includeClusterPods` alone; anything else is ignored."""
    return bool_query(query, "includeClusterPods")


# GET /v2/catalog/gpus: the filters that scope availability, "valid only with include=AVAILABILITY".
ONLY_WITH_INCLUDE = ("product", "countryCodes", "cudaVersions", "minCudaVersion")


def catalog_refusal(query: Mapping[str, str]) -> Refusal | None:
    """What GET /v2/catalog/gpus answers its query with; None: served. `count` and `cloud` without `include`
    scope nothing and are let through (the spec does not say they are refused)."""
    bad = [f"{name}: {why}" for name, why in catalog_malformed(query)]
    if bad:
        return 422, bad
    included = "include" in query
    if included and "product" not in query:
        return 400, ["product: required with include=AVAILABILITY (stock differs by product)"]
    stray = [name for name in ONLY_WITH_INCLUDE if name in query and not included]
    if stray:
        return 400, [f"{stray[0]}: valid only with include=AVAILABILITY"]
    if "cudaVersions" in query and "minCudaVersion" in query:
        return 400, ["cudaVersions and minCudaVersion are mutually exclusive"]
    return None


def catalog_malformed(query: Mapping[str, str]) -> list[tuple[str, str]]:
    checks: dict[str, Field] = {
        "include": (lambda v: v == "AVAILABILITY", "must be AVAILABILITY"),
        "product": (lambda v: all(p in PRODUCTS for p in v.split(",")), f"each one of {', '.join(PRODUCTS)}"),
        "count": (lambda v: v.isdigit() and int(v) >= 1, "an integer of at least 1"),
        "cloud": (lambda v: v in CLOUDS, f"one of {', '.join(CLOUDS)}"),
        "countryCodes": (lambda v: all(COUNTRY.match(c) for c in v.split(",")), "uppercase ISO country codes"),
        "cudaVersions": (lambda v: all(CUDA.match(c) for c in v.split(",")), "major.minor versions"),
        "minCudaVersion": (lambda v: CUDA_FLOOR_QUERY.match(v) is not None, "a major or major.minor version"),
    }
    return [(name, why) for name, (ok, why) in checks.items() if name in query and not ok(query[name])]
