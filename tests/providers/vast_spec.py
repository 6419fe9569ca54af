"""Vast.ai's published API for the routes gpuc uses, restated in the project's own words and data: what gpuc
may send and what the Vast emulator may answer, as JSON Schemas (draft 2020-12) that
test_vast_conformance.py checks every exchange against.

Derived from Vast's own documents (never read by the tests: a clone elsewhere has none of them), at the
version docs/providers.md names (SPEC_VERSION): the per-route OpenAPI files of vast-ai/docs
`api-reference/openapi/yaml/` (create_instance, show_instance, show_instances, destroy_instance,
manage_instance, show_user, search_offers, show_charges, show_ssh_keys, attach_ssh), and where a file leaves
something open, the guide that settles it (`api-reference/{creating-instances-with-api,hello-world,authentication,
rate-limits-and-errors}.mdx`, `cli/reference/show-instance.mdx`).

Two strictness levels:
- a REQUEST gpuc sends may carry only what the spec documents (no unknown body field, query parameter or
  path; the Authorization header on every call): Vast does not say it refuses the rest, and gpuc does not
  lean on that;
- an ANSWER the emulator gives may carry only documented properties, of their documented types, on a
  status the route documents (a 429 may be plain text: "The response body is often plain text").

Where two of Vast's documents disagree, or the spec says nothing of what a real exchange carries, the
schema follows the stated source and says so in DEVIATIONS (the conformance test holds that list to what
the schema actually does, so a new one is a deliberate edit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

SPEC_REPO = "vast-ai/docs"
SPEC_VERSION = "c624622 (2026-08-07)"

Schema = dict[str, Any]

# ---- the type words used below ------------------------------------------------------------------------
# "int", "num", "str", "bool", "obj", "list", "str[]" (a list of strings); a trailing "?" adds null; "any".
_BASE: dict[str, Schema] = {
    "int": {"type": "integer"},
    "num": {"type": "number"},
    "str": {"type": "string"},
    "bool": {"type": "boolean"},
    "obj": {"type": "object"},
    "list": {"type": "array"},
    "str[]": {"type": "array", "items": {"type": "string"}},
    "any": {},
}


def t(word: str) -> Schema:
    """A schema from a type word."""
    if word.endswith("?"):
        inner = t(word[:-1])
        return {"anyOf": [inner, {"type": "null"}]}
    return dict(_BASE[word])


def props(table: str) -> dict[str, Schema]:
    """`name:type name:type ...` -> {name: schema}."""
    return {name: t(word) for name, word in (item.split(":") for item in table.split())}


def words(text: str) -> list[str]:
    return text.split()


def obj(properties: dict[str, Schema], *, required: tuple[str, ...] = (), closed: bool = True) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    return schema


# ---- the common bodies --------------------------------------------------------------------------------

# rate-limits-and-errors.mdx: "The most common error response shape is {success, error, msg}. Some
# endpoints omit the boolean `success`. Some omit `error` and return only `msg` or `message`."
ERROR = obj(props("success:bool error:str msg:str message:str"))
# show_instance.yaml's 401 example: {"success": false, "error": "auth_error", "msg": "Invalid user key"}.
AUTH_ERROR = ERROR
# The instance key "can only start, stop, or destroy that specific instance" (hello-world.mdx): how Vast
# refuses it anything else is not documented; the emulator answers 403 with the common error shape.
SCOPE_ERROR = ERROR
# A 429: "often plain text ... (in certain cases JSON with success/error/msg)"; the yaml files give
# `{"detail": ...}` or, for destroy, `{success, error, msg}`.
TOO_MANY = {"anyOf": [obj(props("detail:str")), ERROR]}


def error_with(codes: tuple[str, ...], extra: str = "") -> Schema:
    body = props("success:bool msg:str" + (" " + extra if extra else ""))
    body["error"] = {"enum": list(codes)}
    return obj(body)


# ---- an instance row ----------------------------------------------------------------------------------

# show_instances.yaml's row (the list). `ports`: "Port mappings. Only present on running instances."
_ROW = props(
    "id:int actual_status:str? cur_state:str next_state:str intended_status:str label:str? template_id:int? "
    "template_hash_id:str? template_name:str? image_uuid:str image_args:str[] image_runtype:str onstart:str "
    "jupyter_token:str status_msg:str? public_ipaddr:str local_ipaddrs:str ssh_host:str ssh_idx:str ssh_port:int "
    "machine_dir_ssh_port:int machine_id:int start_date:num end_date:num uptime_mins:num? duration:num "
    "cpu_arch:str cpu_cores:int cpu_cores_effective:num cpu_name:str cpu_ram:int cpu_util:num mem_limit:num? "
    "mem_usage:num? vmem_usage:num? gpu_name:str gpu_arch:str gpu_totalram:int gpu_ram:int gpu_util:num? "
    "gpu_temp:num? gpu_frac:num gpu_lanes:int gpu_mem_bw:num bw_nvlink:num disk_name:str disk_space:num "
    "disk_bw:num disk_util:num disk_usage:num direct_port_count:int direct_port_start:int direct_port_end:int "
    "static_ip:bool geolocation:str verification:str rentable:bool host_id:int min_bid:num is_bid:bool "
    "dph_base:num dph_total:num dlperf:num? dlperf_per_dphtotal:num? flops_per_dphtotal:num total_flops:num "
    "score:num? reliability2:num os_version:str? mobo_name:str pci_gen:num pcie_bw:num num_gpus:int webpage:str? "
    "search:obj instance:obj storage_cost:num storage_total_cost:num vram_costperhour:num credit_balance:num? "
    "credit_discount:num? credit_discount_max:num? client_run_time:num host_run_time:num external:bool "
    "time_remaining:str time_remaining_isbid:str country_code:str? volume_info:list"
)
_ROW["extra_env"] = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
_ROW["ports"] = {
    "anyOf": [
        {"type": "null"},
        {
            "type": "object",
            "additionalProperties": {
                "type": "array",
                "items": obj(props("HostIp:str HostPort:str"), closed=False),
            },
        },
    ]
}
# cli/reference/show-instance.mdx and show-instances-v1.mdx: the values of the three states. "scheduling"
# is not in the table, but the docs name it as a state an instance sits in while a start waits for its
# machine's GPUs (manage-instances.mdx, cli/reference/start-instance.mdx, troubleshooting.mdx); which field
# shows it is not documented (the emulator: actual_status).
ACTUAL_STATUS = ("loading", "running", "stopped", "frozen", "exited", "rebooting", "unknown", "offline")
_ROW["actual_status"] = {"enum": [None, *ACTUAL_STATUS, "scheduling"]}
_ROW["intended_status"] = {"enum": ["running", "stopped", "frozen"]}
_ROW["cur_state"] = {"enum": ["running", "stopped", "unloaded"]}
_ROW["next_state"] = {"enum": ["running", "stopped", "unloaded"]}
LIST_ROW = obj(_ROW, required=("id",))

# show_instance.yaml's object: the same row, with what it adds (bundle_id, hosting_type, logo) and where it
# differs: `onstart` may be null there; `extra_env` and `ports` see DEVIATIONS.
_SHOWN = {**_ROW, **props("bundle_id:int hosting_type:int logo:str onstart:str?")}
_SHOWN["extra_env"] = {
    "type": "array",
    "items": {"anyOf": [{"type": "string"}, _ROW["extra_env"]["items"]]},
}
_SHOWN["ports"] = {"anyOf": [_ROW["ports"], {"type": "array", "items": {"type": "integer"}}]}
SHOWN_INSTANCE = obj(_SHOWN)

# ---- an offer -----------------------------------------------------------------------------------------

# search_offers.yaml's answer example, field by field (its schema is "additionalProperties: true": the
# example is the only list of what an offer carries). The types are the example's.
OFFER = obj(
    props(
        "id:int ask_contract_id:int bundle_id:int bundled_results:any bw_nvlink:num compute_cap:int cpu_arch:str "
        "cpu_cores:int cpu_cores_effective:num cpu_ghz:num cpu_name:str cpu_ram:int credit_discount_max:num "
        "cuda_max_good:num direct_port_count:int disk_bw:num disk_name:str disk_space:num dlperf:num "
        "dlperf_per_dphtotal:num dph_base:num dph_total:num driver_version:str driver_vers:int duration:num "
        "end_date:num external:bool? flops_per_dphtotal:num geolocation:str geolocode:int gpu_arch:str "
        "gpu_display_active:bool gpu_frac:num gpu_ids:list gpu_lanes:int gpu_mem_bw:num gpu_name:str gpu_ram:int "
        "gpu_total_ram:int gpu_max_power:num gpu_max_temp:num has_avx:int host_id:int hosting_type:int "
        "hostname:str? inet_down:num inet_down_cost:num inet_up:num inet_up_cost:num is_bid:bool logo:str "
        "machine_id:int min_bid:num mobo_name:str num_gpus:int os_version:str pci_gen:num pcie_bw:num "
        "public_ipaddr:str reliability:num reliability_mult:num rentable:bool rented:bool score:num "
        "start_date:num static_ip:bool storage_cost:num storage_total_cost:num total_flops:num verification:str "
        "vericode:int vram_costperhour:num webpage:str? vms_enabled:bool expected_reliability:num "
        "is_vm_deverified:bool resource_type:str cluster_id:int? avail_vol_ask_id:int avail_vol_dph:num "
        "avail_vol_size:num nw_disk_min_bw:num? nw_disk_max_bw:num? nw_disk_avg_bw:num? rn:int dph_total_adj:num "
        "reliability2:num discount_rate:num discounted_hourly:num discounted_dph_total:num search:obj instance:obj "
        "time_remaining:str time_remaining_isbid:str internet_up_cost_per_tb:num internet_down_cost_per_tb:num"
    ),
    required=("id",),
)

# search_offers.yaml's filter fields (each "an object specifying the operator and value"), and the
# operators it lists.
OFFER_FILTERS = words(
    "verified rentable rented gpu_name reliability num_gpus gpu_ram duration machine_id dlperf_per_dphtotal "
    "dph_total flops_per_dphtotal geolocation gpu_arch dlperf cuda_max_good inet_down inet_up inet_down_cost "
    "inet_up_cost driver_version compute_cap cpu_arch has_avx cpu_cores cpu_cores_effective cpu_ghz cpu_ram "
    "datacenter external disk_bw disk_space bw_nvlink gpu_max_power gpu_max_temp gpu_mem_bw gpu_total_ram "
    "gpu_frac gpu_display_active direct_port_count host_id id min_bid mobo_name pci_gen pcie_bw storage_cost "
    "static_ip total_flops os_version ubuntu_version verification vms_enabled"
)
FILTER = {
    "type": "object",
    "minProperties": 1,
    "properties": {
        **{op: {"type": ["string", "number", "boolean"]} for op in ("eq", "neq", "gt", "gte", "lt", "lte")},
        "in": {"type": "array"},
        "notin": {"type": "array"},
    },
    "additionalProperties": False,
}
SEARCH = obj(
    {
        **{name: FILTER for name in OFFER_FILTERS},
        "limit": {"type": "integer"},
        "type": {"enum": ["ondemand", "bid", "reserved"]},
        "order": {
            "type": "array",
            "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2},
        },
        "allocated_storage": {"type": "number"},
    }
)

# ---- the create body ----------------------------------------------------------------------------------

RUNTYPES = ("ssh", "jupyter", "args", "ssh_proxy", "ssh_direct", "jupyter_proxy", "jupyter_direct")
CREATE = obj(
    {
        "image": {"type": "string", "minLength": 1, "maxLength": 1024},
        "template_hash_id": {"type": "string"},
        "label": {"type": "string", "maxLength": 256},
        "disk": {"type": "number", "minimum": 8},
        "runtype": {"enum": list(RUNTYPES)},
        "target_state": {"enum": ["running", "stopped"]},
        "price": {"type": "number", "minimum": 0.001, "maximum": 128},
        # See DEVIATIONS: the object form of creating-instances-with-api.mdx.
        "env": {
            "type": "object",
            "additionalProperties": {"type": "string", "maxLength": 256},
        },
        "cancel_unavail": {"type": "boolean"},
        "vm": {"type": "boolean"},
        # "`onstart` field is limited to 4048 characters" (the spec's own list of quirks).
        "onstart": {"type": "string", "maxLength": 4048},
        "args": {"type": "array", "items": {"type": "string"}},
        "args_str": {"type": "string"},
        "use_jupyter_lab": {"type": "boolean"},
        "jupyter_dir": {"type": "string"},
        "python_utf8": {"type": "boolean"},
        "lang_utf8": {"type": "boolean"},
        "force": {"type": "boolean"},
        "user": {"type": "string"},
        "image_login": {"type": "string"},
        "volume_info": obj(props("create_new:bool volume_id:int size:int mount_path:str")),
    },
    required=("image",),
)

# ---- charges --------------------------------------------------------------------------------------------

CHARGE_ITEM = obj(
    {
        **props("start:int end:int source:str? description:str amount:num metadata:obj items:list"),
        "type": {"enum": ["gpu", "disk", "bwd", "bwu"]},
    }
)
CONTRACT = obj(
    {
        **props("start:int end:int type:str source:str description:str amount:num"),
        "metadata": obj(props("template_id:int label:str endpoint_id:int workergroup_id:int")),
        "items": {"type": "array", "items": CHARGE_ITEM},
    }
)
CHARGES = obj(
    {
        **props("success:bool count:int total:int next_token:str?"),
        "results": {"type": "array", "items": CONTRACT},
    }
)
CHARGE_FILTERS = obj(
    {
        "day": obj(props("gte:int lte:int"), required=("gte", "lte")),
        "type": obj(
            {"in": {"type": "array", "items": {"enum": ["instance", "volume", "serverless"]}}}, required=("in",)
        ),
    },
    required=("day",),
)


# ---- the routes ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A query parameter: JSON-encoded (Vast's GET arguments; the official client json-dumps each) or text."""

    schema: Schema
    json: bool = True
    required: bool = False


@dataclass(frozen=True)
class Route:
    name: str  # the spec file it comes from
    method: str
    path: str  # the documented path; {id} an integer
    body: Schema | None = None  # what gpuc may send; None: no body
    query: dict[str, Param] = field(default_factory=dict)
    answers: dict[int, Schema] = field(default_factory=dict)

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile("^" + re.escape(self.path).replace(r"\{id\}", "[0-9]+") + "$")


EMPTY_BODY: Schema = {"type": "object", "maxProperties": 0}

ROUTES = (
    Route(
        "create_instance.yaml",
        "PUT",
        "/api/v0/asks/{id}/",
        body=CREATE,
        answers={
            # hello-world.mdx's answer adds `instance_api_key` to the yaml's {success, new_contract}.
            200: obj(props("success:bool new_contract:int instance_api_key:str"), required=("success", "new_contract")),
            # See DEVIATIONS: `new_contract` on a refused bid.
            400: error_with(("invalid_args", "invalid_price", "no_ssh_key_for_vm"), "ask_id:int new_contract:int"),
            401: AUTH_ERROR,
            403: obj(props("success:bool error:str msg:str ask_id:int")),
            404: obj(props("success:bool error:str msg:str ask_id:int")),
            410: obj(props("success:bool error:str msg:str ask_id:int")),
            429: TOO_MANY,
        },
    ),
    Route(
        "show_instance.yaml",
        "GET",
        "/api/v0/instances/{id}/",
        # See DEVIATIONS: the official client's `owner=me`.
        query={"owner": Param({"const": "me"}, json=False)},
        answers={
            # See DEVIATIONS: `null` for an instance gone or unknown.
            200: obj({"instances": {"anyOf": [SHOWN_INSTANCE, {"type": "null"}]}}, required=("instances",)),
            400: ERROR,
            401: AUTH_ERROR,
            403: SCOPE_ERROR,
            429: TOO_MANY,
        },
    ),
    Route(
        "show_instances.yaml",
        "GET",
        "/api/v1/instances/",
        query={
            "limit": Param({"type": "integer", "maximum": 25}),
            "after_token": Param({"type": "string"}, json=False),
            "order_by": Param(
                {
                    "type": "array",
                    "items": obj({"col": {"type": "string"}, "dir": {"enum": ["asc", "desc"]}}, required=("col",)),
                }
            ),
            "select_cols": Param({"type": "array", "items": {"type": "string"}}),
            "select_filters": Param({"type": "object", "additionalProperties": FILTER}),
        },
        answers={
            200: obj(
                {
                    **props("success:bool instances_found:int total_instances:int next_token:str?"),
                    "label_counts": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "instances": {"type": "array", "items": LIST_ROW},
                },
                required=("instances",),
            ),
            400: error_with(("invalid_request", "invalid_token")),
            401: AUTH_ERROR,
            429: TOO_MANY,
        },
    ),
    Route(
        "destroy_instance.yaml",
        "DELETE",
        "/api/v0/instances/{id}/",
        body=EMPTY_BODY,  # See DEVIATIONS: the official client's `{}`.
        answers={
            200: obj(props("success:bool msg:str")),
            400: ERROR,
            401: AUTH_ERROR,
            403: SCOPE_ERROR,
            404: ERROR,
            429: TOO_MANY,
        },
    ),
    Route(
        "manage_instance.yaml",
        "PUT",
        "/api/v0/instances/{id}/",
        body={
            **obj({"state": {"enum": ["stopped", "running"]}, "label": {"type": "string", "maxLength": 1024}}),
            "minProperties": 1,  # "At least one of these parameters should be provided"
        },
        answers={
            200: obj(props("success:bool")),
            400: error_with(("missing_billing", "label_too_long", "no_such_instance")),
            401: AUTH_ERROR,
            403: SCOPE_ERROR,
            404: error_with(("missing_billing", "label_too_long", "no_such_instance")),
            429: TOO_MANY,
        },
    ),
    Route(
        "show_user.yaml",
        "GET",
        "/api/v0/users/current/",
        answers={
            # See DEVIATIONS: credit, api_key and the official client's user fields.
            200: obj(
                props(
                    "id:int key_id:int email:str balance:num ssh_key:str sid:str credit:num api_key:str username:str "
                    "fullname:str balance_threshold:num balance_threshold_enabled:bool can_pay:bool has_billing:bool"
                )
            ),
            401: AUTH_ERROR,
            429: TOO_MANY,
            500: ERROR,
        },
    ),
    Route(
        "search_offers.yaml",
        "POST",
        "/api/v0/bundles/",
        body=SEARCH,
        answers={
            200: obj({"offers": {"type": "array", "items": OFFER}}, required=("offers",)),
            400: ERROR,
            401: AUTH_ERROR,
            429: TOO_MANY,
        },
    ),
    Route(
        "show_ssh_keys.yaml",
        "GET",
        "/api/v0/ssh/",
        answers={
            200: {
                "type": "array",
                "items": obj(props("id:int user_id:int key:str created_at:str deleted_at:str?")),
            },
            401: AUTH_ERROR,
            404: ERROR,  # "No SSH keys found for the user" (no body documented)
            429: TOO_MANY,
        },
    ),
    Route(
        "attach_ssh.yaml",
        "POST",
        "/api/v0/instances/{id}/ssh/",
        body=obj({"ssh_key": {"type": "string", "minLength": 1}}, required=("ssh_key",)),
        answers={200: obj(props("success:bool msg:str")), 400: ERROR, 401: AUTH_ERROR, 404: ERROR, 429: TOO_MANY},
    ),
    Route(
        "show_charges.yaml",
        "GET",
        "/api/v0/charges/",
        query={
            "select_filters": Param(CHARGE_FILTERS, required=True),
            "format": Param({"enum": ["table", "tree"]}, json=False),
            "latest_first": Param({"type": "boolean"}),
            "limit": Param({"type": "integer", "minimum": 1, "maximum": 500}),
            "after_token": Param({"type": "string"}, json=False),
        },
        answers={200: CHARGES, 400: ERROR, 401: AUTH_ERROR, 403: ERROR, 404: ERROR, 429: TOO_MANY},
    ),
)

# Where the schema above is not the route's yaml file read alone, and why. Each names the route, the
# property, and the source that settles it.
DEVIATIONS = {
    ("create_instance.yaml", "env"): "the yaml types it a Docker-flag string; creating-instances-with-api.mdx "
    'an object ({"VAR": "val", "-p 8000:8000": "1"}), which the official client sends; gpuc sends the object '
    "(the string form's quoting is not documented)",
    ("create_instance.yaml", "400.new_contract"): "a bid the server cannot schedule, sent without cancel_unavail, "
    "is created stopped and the create errs naming it (dstack PR #4036); the status and code are UNCONFIRMED",
    ("show_instance.yaml", "owner"): "no query parameter is documented; the official client sends owner=me, and "
    "so does the pod's self-read (gpuc's account reads send none)",
    ("show_instance.yaml", "200.instances"): "`null` for an instance gone or unknown: the official client's "
    'tests and its message ("not found or no longer exists")',
    ("show_instance.yaml", "extra_env"): "the yaml says a list of strings; the list's yaml, and the official SDK "
    "reading show_instance's answer, [key, value] pairs: both are taken",
    ("show_instance.yaml", "ports"): "the yaml says a list of ints; the list's yaml, and the official SDK reading "
    "show_instance's answer (ports['22/tcp'][0]['HostPort']), an object of mappings: both are taken",
    ("destroy_instance.yaml", "body"): "no body is documented; the official client sends {} (a money path: gpuc "
    "sends what has always destroyed)",
    ("show_user.yaml", "200"): "the yaml lists id, key_id, email, balance, ssh_key, sid; authentication.mdx's "
    "example has `credit`, and the official client pops `api_key` and shows username, fullname, "
    "balance_threshold(_enabled), can_pay, has_billing",
    ("*", "403"): "the instance key 'can only start, stop, or destroy that specific instance': its refusal of "
    "anything else is not documented (403 here)",
}


def route_for(method: str, path: str) -> Route | None:
    for route in ROUTES:
        if route.method == method and route.pattern.match(path):
            return route
    return None
