"""A RunPod emulator: REST v2 (`/v2/pods`: create, list, get, action, delete; `/v2/catalog/gpus`;
`/v2/account/ssh-keys`; `/v2/billing/pods`), and GraphQL (`POST /graphql`) as the official clients and gpuc's
balance and pod-side self-destroy still use it. As strict as the real API per shared/reference/providers.md,
and accepting what the official clients send (runpod-python's inline-literal queries, `dataCenterId: null`,
the `User` fields runpod-python and dstack ask for). tests/providers/test_official_clients.py holds it to them.

REST v2, as RunPod's published OpenAPI says (runpod/docs api-reference-v2/openapi.json @a900806e; the
requests in runpod_contract.py, the answers held to tests/providers/runpod_v2.schema.json by
tests/providers/test_runpod_conformance.py): RFC 9457 problem+json errors (`{"title","status","detail"}`,
`errors` on a 422); 401 without or with a wrong key, 403 for a pod-scoped key; a body that breaks the
contract (an unknown, missing or mistyped field, a persistent mount under 10 GB) a 422, one that breaks a
handler rule (not exactly one of gpu/cpu) a 400; an unknown QUERY parameter ignored, as RunPod does. A create
with no capacity is a 400, too little balance a 402, a pool the account cannot use (`deny_pool`) a 403;
`RateLimit`/`RateLimit-Policy` on every answer and 429 + `Retry-After` past `rate_per_minute`; `cost` 0.0
once EXITED; `actions` per status (stop while PROVISIONING too); `ssh.proxy` and `ssh.direct` always there,
`direct` null unless the pod runs with 22/tcp published; `cloud` as asked. The catalog's `availability` is
scoped by `count` and `cloud` (stock for N GPUs on one machine, none past `maxCount`). `list_lag_s`: a new
pod shows in GET /v2/pods only that long after its create. `graphql_retired`: GraphQL answers 410 to
everything.

SSH, as `startSsh` is documented: a pod's sshd takes the keys of the `PUBLIC_KEY` its create's env carries,
else (with `startSsh`) the account's registered keys (`ssh_keys`, GET/PUT /v2/account/ssh-keys), else none:
"with none registered the flag does nothing and the pod has no SSH access". With `sshd_key` set (the
emulated platform's loopback sshd takes that key), a pod whose sshd does not take it lists an ssh port where
nothing answers: the rental a user pays for and cannot reach.

Strict: a query asking for a field RunPod does not have, an input field it does not take or a value of
the wrong type is refused with graphql-js's message and HTTP 400 (the status real RunPod sends with
validation errors is UNCONFIRMED). Resolver refusals answer HTTP 200 `{"errors": [{"message"}]}` like
the observed "pod not found to terminate". Texts RunPod never documented (no capacity, an unauthorised
pod key) are this emulator's own and say so in the code.

State: pods go provisioning -> running after `boot_polls` observations (get or list) or `boot_s`
seconds of the emulator's clock. `terminateAfter` is accepted (its date-time format checked) and never
acted on, as the real API does (runpodctl #330, docs #820): the pod runs, and bills, past it. A stop
(podStop, v2 "stop") releases the pod's GPUs to the stock; a resume (podResume, v2 "start") takes them
back if the stock has them, and otherwise brings the pod back with ZERO GPUs, as RunPod's docs warn
(set_stock drills it). A COMMUNITY pod created without `supportPublicIp: true` gets no public IP (its ssh
port is private): the hazard the official clients avoid by always sending it. Test-driving API:
set_status, set_gpu_util, add_foreign_pod, vanish, set_stock, pod_environ, pods, balance, plant_charge,
set_charge_factor, pod_key_can_terminate, pod_key_not_found,
graphql_lag / v2_lag (one API not showing a pod the other shows).

Pod-scoped keys: they may read, stop and terminate their own pod (GraphQL) and nothing else; REST is 403
(field report). `pod_key_can_terminate=False` answers their podTerminate "Unauthorized";
`pod_key_not_found=True` answers it "pod not found to terminate" while the pod lives on (a refusal that
looks like "already gone": the case the self-destroy must not believe).

GET /v2/pods does not page (the spec: `{pods}`, `includeClusterPods` its one parameter). `page_size` is an
opt-in fault for the day it does: the list then comes `page_size` pods at a time, with
`pagination.nextCursor`/`hasNextPage` and a `cursor` to follow (a shape of the emulator's own).

Billing: REST v2 `GET /v2/billing/pods` (its documented query parameters checked) computes each pod's charges
per bucket from its real life in the emulator's clock: GPU time x costPerHr, disk at RunPod's published
storage rates (container + volume while running, the volume at the stopped rate while stopped).

Fault ops name what a request does, whichever API it goes to: create, list, get, stop, resume, destroy,
offers (the v2 catalog or GraphQL gpuTypes), balance, billing; `rate_limited` for a request over the quota.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuc.core.clock import Clock, iso
from gpuc.testkit.emulators.billing import BUCKETS, BillingBook, Lifeline, bucket_floor, bucket_next, buckets
from gpuc.testkit.emulators.common import Emulator, EmuRequest, EmuResponse, Route, new_key
from gpuc.testkit.emulators.graphql import (
    FieldError,
    Parser,
    RequestError,
    Resolver,
    Schema,
    execute,
    fields,
    input_fields,
)
from gpuc.testkit.emulators.runpod_contract import (
    Refusal,
    action_refusal,
    catalog_refusal,
    create_refusal,
    list_refusal,
    ssh_keys_refusal,
)

POD_INPUT = {
    "gpuTypeId": "String",
    "gpuCount": "Int",
    "cloudType": "CloudTypeEnum",
    "imageName": "String",
    "name": "String",
    "containerDiskInGb": "Int",
    "volumeInGb": "Int",
    "volumeMountPath": "String",
    "env": "[EnvironmentVariableInput]",
    "ports": "String",
    "dockerArgs": "String",
    "startSsh": "Boolean",
    "supportPublicIp": "Boolean",
    "minVcpuCount": "Int",
    "minMemoryInGb": "Int",
    "dataCenterId": "String",
    "countryCode": "String",
    "networkVolumeId": "String",
    "templateId": "String",
    "containerRegistryAuthId": "String",
    "allowedCudaVersions": "[String]",
    "minCudaVersion": "String",
    "minDownload": "Int",
    "minUpload": "Int",
    "stopAfter": "String",
    "terminateAfter": "String",
    "compliance": "[String]",
}

# Only fields the reference lists as used by rp-py, runpodctl, the docs or a capture.
SCHEMA = Schema(
    objects={
        "Query": fields(
            {
                "myself": "User",
                "pod": ("Pod", {"input": "PodFilter!"}),
                "gpuTypes": ("[GpuType]", {"input": "GpuTypeFilter"}),
            }
        ),
        "Mutation": fields(
            {
                "podFindAndDeployOnDemand": ("Pod", {"input": "PodFindAndDeployOnDemandInput"}),
                "podRentInterruptable": ("Pod", {"input": "PodRentInterruptableInput!"}),
                "podStop": ("Pod", {"input": "PodStopInput!"}),
                "podResume": ("Pod", {"input": "PodResumeInput!"}),
                "podBidResume": ("Pod", {"input": "PodBidResumeInput!"}),
                "podTerminate": ("Void", {"input": "PodTerminateInput!"}),
            }
        ),
        "User": fields(
            {
                "id": "String",
                "email": "String",
                "clientBalance": "Float",
                "currentSpendPerHr": "Float",
                "spendLimit": "Float",
                "notifyPodsStale": "Boolean",
                "notifyPodsGeneral": "Boolean",
                "notifyLowBalance": "Boolean",
                "pubKey": "String",
                "authId": "String",
                "pods": "[Pod]",
                "networkVolumes": "[NetworkVolume]",
            }
        ),
        "NetworkVolume": fields(
            {"id": "String", "name": "String", "size": "Int", "dataCenterId": "String", "dataCenter": "DataCenter"}
        ),
        "DataCenter": fields({"id": "String", "name": "String", "location": "String"}),
        "Pod": fields(
            {
                "id": "String",
                "name": "String",
                "desiredStatus": "String",
                "podType": "String",
                "costPerHr": "Float",
                "adjustedCostPerHr": "Float",
                "gpuCount": "Int",
                "imageName": "String",
                "env": "[String]",
                "ports": "String",
                "lastStatusChange": "String",
                "uptimeSeconds": "Int",
                "containerDiskInGb": "Int",
                "volumeInGb": "Float",
                "volumeMountPath": "String",
                "memoryInGb": "Float",
                "vcpuCount": "Float",
                "machineId": "String",
                "machine": "Machine",
                "runtime": "PodRuntime",
                "dockerArgs": "String",
                "dockerId": "String",
                "port": "Int",
            }
        ),
        "Machine": fields(
            {
                "gpuDisplayName": "String",
                "location": "String",
                "podHostId": "String",
                "dataCenterId": "String",
                "costPerHr": "Float",
            }
        ),
        "PodRuntime": fields(
            {
                "uptimeInSeconds": "Int",
                "ports": "[PodRuntimePorts]",
                "gpus": "[PodRuntimeGpus]",
                "container": "PodRuntimeContainer",
            }
        ),
        "PodRuntimePorts": fields(
            {
                "ip": "String",
                "isIpPublic": "Boolean",
                "privatePort": "Int",
                "publicPort": "Int",
                "type": "String",
            }
        ),
        "PodRuntimeGpus": fields({"id": "String", "gpuUtilPercent": "Int", "memoryUtilPercent": "Int"}),
        "PodRuntimeContainer": fields({"cpuPercent": "Int", "memoryPercent": "Int"}),
        "GpuType": fields(
            {
                "id": "String",
                "displayName": "String",
                "memoryInGb": "Int",
                "secureCloud": "Boolean",
                "communityCloud": "Boolean",
                "maxGpuCount": "Int",
                "securePrice": "Float",
                "communityPrice": "Float",
                "communitySpotPrice": "Float",
                "secureSpotPrice": "Float",
                "oneWeekPrice": "Float",
                "oneMonthPrice": "Float",
                "threeMonthPrice": "Float",
                "sixMonthPrice": "Float",
                "clusterPrice": "Float",
                "manufacturer": "String",
                "cudaCores": "Int",
                "lowestPrice": ("LowestPrice", {"input": "GpuLowestPriceInput"}),
            }
        ),
        "LowestPrice": fields(
            {
                "minimumBidPrice": "Float",
                "uninterruptablePrice": "Float",
                "minVcpu": "Float",
                "minMemory": "Float",
                "stockStatus": "String",
                "availableGpuCounts": "[Int]",
                "countryCode": "String",
            }
        ),
    },
    inputs={
        "PodFindAndDeployOnDemandInput": input_fields(POD_INPUT),
        "PodRentInterruptableInput": input_fields({**POD_INPUT, "bidPerGpu": "Float!"}),
        "EnvironmentVariableInput": input_fields({"key": "String!", "value": "String!"}),
        "PodFilter": input_fields({"podId": "String!"}),
        "PodStopInput": input_fields({"podId": "String!"}),
        "PodTerminateInput": input_fields({"podId": "String!"}),
        "PodResumeInput": input_fields({"podId": "String!", "gpuCount": "Int", "allowedCudaVersions": "[String]"}),
        "PodBidResumeInput": input_fields({"podId": "String!", "bidPerGpu": "Float!", "gpuCount": "Int"}),
        "GpuTypeFilter": input_fields({"id": "String", "ids": "[String]", "cluster": "Boolean"}),
        "GpuLowestPriceInput": input_fields(
            {
                "gpuCount": "Int",
                "secureCloud": "Boolean",
                "dataCenterId": "String",
                "countryCode": "String",
                "minDisk": "Int",
                "minMemoryInGb": "Int",
                "minVcpuCount": "Int",
                "minCudaVersion": "String",
            }
        ),
    },
    enums={"CloudTypeEnum": frozenset({"ALL", "SECURE", "COMMUNITY"})},
    scalars=frozenset({"String", "Int", "Float", "Boolean", "ID", "Void"}),
)

OP_OF_FIELD = {
    "podFindAndDeployOnDemand": "create",
    "podRentInterruptable": "create",
    "podTerminate": "destroy",
    "podStop": "stop",
    "podResume": "resume",
    "podBidResume": "resume",
    "pod": "get",
    "gpuTypes": "offers",
}
NOT_FOUND_TO_TERMINATE = "pod not found to terminate"  # observed, and matched by dstack
# The emulator's own wording where RunPod documents none (UNCONFIRMED texts):
NO_CAPACITY = "There are no longer any instances available with the requested specifications."
UNAUTHORIZED = "Unauthorized"
# The emulator's own words for a create into a pool the account may not use (the spec's table: "Your account
# cannot access the requested pool"; the real `detail` is not published).
POOL_DENIED = "Your account cannot access the requested pool."
# Where a pod without ssh access points its ssh port: loopback's discard port, where nothing listens.
NO_SSHD_PORT = 9
V2_ACTIONS = {  # v2 spec: which action each status allows
    "RUNNING": ("stop", "restart", "terminate"),
    "EXITED": ("start", "terminate"),
    "ERROR": ("start", "terminate"),
    "PROVISIONING": ("stop", "terminate"),
    "STARTING": ("stop", "terminate"),
}
# A COMMUNITY host picked with no sizing floor (the emulator's stand-in for "whatever host is free").
STARVED_HOST = (2, 8)  # vCPU, GB RAM
HOST_PER_GPU = (8, 31)  # what a host gives per GPU when it is not the starved one
STATES = ("provisioning", "running", "exited", "outbid", "error")
# RunPod's published storage prices [rp-docs billing.mdx]: container disk and volume $0.10/GB/month on a
# running pod, the volume $0.20/GB/month on a stopped one. The hours in their "month" are not stated
# (UNCONFIRMED): 30 days here.
DISK_RUNNING_USD_GB_MONTH = 0.10
VOLUME_STOPPED_USD_GB_MONTH = 0.20
HOURS_PER_MONTH = 30 * 24
PLANTABLE = ("gpu", "cpu", "disk")


@dataclass
class GpuStock:
    id: str
    display: str
    memory_gb: int
    secure: float  # $/GPU/hour; 0 = not offered
    community: float
    spot: float  # minimum bid
    stock: int = 10  # GPUs free now; a pod of N needs N of them
    max_secure: int = 8  # maxCount: the most GPUs of this type one pod may ask for, per cloud
    max_community: int = 4


DEFAULT_GPUS = (
    GpuStock("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.74, 0.34, 0.20),
    GpuStock("NVIDIA GeForce RTX 3090", "RTX 3090", 24, 0.50, 0.22, 0.12),
    GpuStock("NVIDIA L4", "L4", 24, 0.49, 0.0, 0.25),
    GpuStock("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, 1.39, 1.19, 0.60),
    GpuStock("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, 1.59, 1.39, 0.79),
    GpuStock("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 3.29, 2.69, 1.50),
)


@dataclass
class EmuPod:
    id: str
    name: str
    image: str
    gpu: GpuStock
    gpu_count: int
    cost: float
    env: dict[str, str]
    ports: str
    container_disk: int
    volume_gb: int
    volume_mount: str
    spot: bool
    created_at: float
    key: str
    public_ip: str
    ssh_port: int
    public: bool = True  # False: a community pod created without supportPublicIp (private ssh port only)
    vcpu: int = 16
    memory_gb: int = 62
    state: str = "provisioning"
    polls_left: int = 2
    started_at: float | None = None
    terminate_after: float | None = None  # as sent; nothing ever acts on it (runpodctl #330)
    gpu_util: int = 0
    machine_id: str = field(default_factory=lambda: secrets.token_hex(6))
    gpu_held: bool = True  # False while stopped: its GPUs went back to the stock
    rented_gpus: int = 1  # what it was created with: a resume asks for these again
    cloud: str = "SECURE"
    authorized: tuple[str, ...] = ()  # the public keys its sshd takes (PUBLIC_KEY, else the registered keys)


class RunPodEmulator(Emulator):
    provider = "runpod"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        clock: Clock | None = None,
        boot_polls: int = 2,
        boot_s: float | None = None,
        balance: float = 25.0,
        bills_down: bool = False,
        spend_limit: float = 80.0,
        pod_key_can_terminate: bool = True,
        pod_key_not_found: bool = False,
        gpus: tuple[GpuStock, ...] = DEFAULT_GPUS,
        ssh_endpoint: tuple[str, int] | None = None,
        list_lag_s: float = 0.0,
        rate_per_minute: int = 100_000,
        graphql_retired: bool = False,
        ssh_keys: tuple[str, ...] = (),
        sshd_key: str | None = None,
    ) -> None:
        super().__init__(clock)
        self.api_key = api_key or new_key("rpa_EMU")
        self.boot_polls = boot_polls
        self.boot_s = boot_s
        self.balance = balance  # the credit put in; with bills_down, what the pods billed comes off it
        self.bills_down = bills_down
        self.spend_limit = spend_limit
        # The account's own emails (R5 `myself { notifyPodsStale notifyPodsGeneral notifyLowBalance }`):
        # on by default, a test turns one off to see doctor and balance warn.
        self.notify = {"notifyPodsStale": True, "notifyPodsGeneral": True, "notifyLowBalance": True}
        # Whether the pod-scoped key may podTerminate is UNCONFIRMED; False drills the podStop fallback.
        self.pod_key_can_terminate = pod_key_can_terminate
        # The pod key's podTerminate of its own pod hears "pod not found to terminate"; the pod lives on.
        self.pod_key_not_found = pod_key_not_found
        self.gpus = {g.id: GpuStock(**g.__dict__) for g in gpus}
        # Where every pod's "direct ssh" points, e.g. a local sshd for a demo; default: documentation IPs.
        self.ssh_endpoint = ssh_endpoint
        self.pods: dict[str, EmuPod] = {}
        self.gone: set[str] = set()
        # Every pod ever billed (terminated ones too) and its life in billing states.
        self.billed: dict[str, EmuPod] = {}
        self.billing_book = BillingBook()
        # pod-scoped key -> pod id; a key outlives its pod (it then only hears "not found": UNCONFIRMED)
        self.pod_keys: dict[str, str] = {}
        # runpod-python reads these to place a pod by its network volume; none unless a test adds one.
        self.network_volumes: list[dict[str, Any]] = []
        # The two APIs are separate services and may disagree for a while (UNCONFIRMED how long): pods
        # GraphQL does not show yet (`pod` answers null, `myself.pods` leaves them out) while REST v2
        # does, and pods REST v2 does not show yet (GET /v2/pods/{id} is a 404 problem, the list leaves
        # them out) while GraphQL does.
        self.graphql_lag: set[str] = set()
        self.v2_lag: set[str] = set()
        # A new pod shows in GET /v2/pods only this long after its create (GET /v2/pods/{id} knows it at
        # once): the lag a lookup by name after an unclear create must outwait. RunPod's own is unmeasured.
        self.list_lag_s = list_lag_s
        # The RateLimit-Policy's minute quota, counted on the emulator's clock; 429 + Retry-After past it.
        self.rate_per_minute = rate_per_minute
        self._rate_window, self._rate_used = -1, 0
        # GraphQL as it will be once RunPod retires it ("early 2027"): 410 to every request.
        self.graphql_retired = graphql_retired
        # The account's registered ssh public keys (GET/PUT /v2/account/ssh-keys): none on a new account.
        self.ssh_keys = list(ssh_keys)
        # The public key the platform's sshd takes (None: ssh is not emulated): a pod whose sshd would not take
        # it gets an ssh port where nothing answers.
        self.sshd_key = sshd_key
        # (GPU id, cloud) pools this account may not use: a create there is a 403.
        self.denied_pools: set[tuple[str, str]] = set()
        # Opt-in fault: GET /v2/pods pages this many pods at a time (RunPod does not page today).
        self.page_size: int | None = None
        self.serving_v2 = False
        self._ports = itertools.count(40022)

    # ---- test-driving API ----

    def set_status(self, pod_id: str, state: str) -> None:
        """provisioning | running | exited (stopped) | outbid (spot) | error | vanished | terminated"""
        with self._lock:
            pod = self.pods[pod_id]
            if state in ("vanished", "terminated"):
                self._remove(pod)
                self._track()
                return
            if state not in STATES:
                raise ValueError(f"unknown state {state!r}; use one of {(*STATES, 'vanished', 'terminated')}")
            pod.state = state
            pod.started_at = self.clock.now() if state == "running" else pod.started_at
            pod.polls_left = self.boot_polls if state == "provisioning" else 0
            self._track()

    def set_gpu_util(self, pod_id: str, pct: int) -> None:
        with self._lock:
            self.pods[pod_id].gpu_util = pct

    def vanish(self, pod_id: str) -> None:
        self.set_status(pod_id, "vanished")

    def set_stock(self, gpu_type_id: str, count: int) -> None:
        with self._lock:
            self.gpus[gpu_type_id].stock = count

    def deny_pool(self, gpu_type_id: str, cloud: str = "SECURE") -> None:
        """This account may not rent `gpu_type_id` in `cloud`: a create there answers 403."""
        with self._lock:
            self.denied_pools.add((gpu_type_id, cloud))

    def add_foreign_pod(
        self, name: str = "my-notebook", *, env: dict[str, str] | None = None, state: str = "running"
    ) -> str:
        """A pod the user started outside gpuc (or one named like ours without the env marker)."""
        with self._lock:
            gpu = next(iter(self.gpus.values()))
            pod = self._new_pod(name, "runpod/pytorch", gpu, 1, gpu.secure, dict(env or {}), spot=False)
            pod.state = state
            pod.polls_left = 0
            self._track()
            return pod.id

    def plant_charge(self, pod_id: str, kind: str, amount: float, start: float, end: float | None = None) -> None:
        """Put a charge on the bill that no pod life explains: `kind` gpu|cpu|disk; an unknown pod id is a
        charge for a pod the ledger never saw. It lands in the bucket holding `start`."""
        if kind not in PLANTABLE:
            raise ValueError(f"RunPod bills {', '.join(PLANTABLE)}, not {kind!r}")
        with self._lock:
            self.billing_book.plant(pod_id, kind, amount, start, start if end is None else end)

    def set_charge_factor(self, pod_id: str, factor: float) -> None:
        """Bill this pod at `factor` x what its life costs (1.25: 25 % over the ledger)."""
        with self._lock:
            self.billing_book.set_factor(pod_id, factor)

    def pod_environ(self, pod_id: str) -> dict[str, str]:
        """What RunPod injects into the pod: its id and the pod-scoped key (and PUBLIC_KEY, the keys its sshd
        takes, when it has any)."""
        with self._lock:
            pod = self.pods[pod_id]
            keys = {"PUBLIC_KEY": "\n".join(pod.authorized)} if pod.authorized else {}
            return {"RUNPOD_POD_ID": pod_id, "RUNPOD_API_KEY": pod.key, **keys}

    def client_env(self, base_url: str) -> dict[str, str]:
        return {
            "GPUC_RUNPOD_GRAPHQL_URL": f"{base_url}/graphql",
            "GPUC_RUNPOD_REST_URL": f"{base_url}/v2",
            "RUNPOD_API_KEY": self.api_key,
        }

    def alive(self) -> list[EmuPod]:
        with self._lock:
            return list(self.pods.values())

    # ---- routing ----

    def route(self, request: EmuRequest) -> Route | None:
        path = request.path.rstrip("/")
        # Fault ops name what is done (create, list, get, stop, resume, destroy, offers, balance, billing),
        # whichever API does it; `self.serving_v2` says which API answers, for the fault bodies.
        self.serving_v2 = path.startswith("/v2/") or path == "/v2"
        if path == "/graphql" and request.method == "POST":
            if self.graphql_retired:
                return "graphql", lambda r: self.graphql_gone()
            return graphql_op(request), self.graphql
        if self.serving_v2 and self._over_rate_limit():
            return "rate_limited", lambda r: self.rate_limited()
        if path == "/v2/pods" and request.method == "GET":
            return "list", self.v2_list
        if path == "/v2/pods" and request.method == "POST":
            return "create", self.v2_create
        if path == "/v2/catalog/gpus" and request.method == "GET":
            return "offers", self.v2_catalog
        if path == "/v2/billing/pods" and request.method == "GET":
            return "billing", self.v2_billing
        if path == "/v2/account/ssh-keys" and request.method in ("GET", "PUT"):
            return "ssh_keys", self.v2_ssh_keys
        action = re.fullmatch(r"/v2/pods/([^/]+)/action", path)
        if action and request.method == "POST":
            return action_op(request), lambda r: self.v2_action(r, action.group(1))
        match = re.fullmatch(r"/v2/pods/([^/]+)", path)
        if match and request.method == "GET":
            return "get", lambda r: self.v2_get(r, match.group(1))
        if match and request.method == "DELETE":
            return "destroy", lambda r: self.v2_delete(r, match.group(1))
        return None

    def handle(self, request: EmuRequest) -> EmuResponse:
        answer = super().handle(request)
        if request.path.startswith("/v2/") and answer.status:
            answer.headers.update(self._rate_headers())  # every v2 answer says where the quota stands
        return answer

    def _over_rate_limit(self) -> bool:
        """The minute window of the RateLimit-Policy: count this request, say whether it is one too many."""
        window = int(self.clock.now() // 60)
        if window != self._rate_window:
            self._rate_window, self._rate_used = window, 0
        self._rate_used += 1
        return self._rate_used > self.rate_per_minute

    def _rate_headers(self) -> dict[str, str]:
        left = max(0, self.rate_per_minute - self._rate_used)
        reset = 60 - int(self.clock.now()) % 60
        return {
            "RateLimit": f'"minute";r={left};t={reset}',
            "RateLimit-Policy": f'"minute";q={self.rate_per_minute};w=60, "hour";q={self.rate_per_minute * 50};'
            f'w=3600, "day";q={self.rate_per_minute * 830};w=86400',
        }

    def rate_limited(self) -> EmuResponse:
        reset = 60 - int(self.clock.now()) % 60
        return problem(
            429, "Too Many Requests", "rate limit exceeded for the minute window", {"Retry-After": str(reset)}
        )

    def graphql_gone(self) -> EmuResponse:
        # How RunPod will answer once GraphQL is retired is not published: the emulator's own choice.
        return problem(410, "Gone", "The GraphQL API has been retired. Use the REST API v2.")

    def not_found(self, request: EmuRequest) -> EmuResponse:
        if request.path.startswith("/v2/"):
            return problem(404, "Not Found", "resource not found")
        return EmuResponse.text(404, "404 page not found")

    def fault_answer(self, op: str, kind: str) -> EmuResponse:
        kind = "429" if kind == "search_quota" else kind  # RunPod has no quota answer of its own
        if self.serving_v2:
            if kind == "429":
                return problem(
                    429,
                    "Too Many Requests",
                    "rate limit exceeded for the minute window",
                    {"Retry-After": "1"},
                )
            if kind == "success_false":
                return EmuResponse.json(200, {"title": "Internal Server Error", "status": 500})
            return problem(int(kind), "Error", "emulated failure")
        if kind == "success_false":
            return EmuResponse.json(200, {"errors": [{"message": "Something went wrong. Please try again later."}]})
        if kind in ("502", "503", "504"):
            return EmuResponse(
                int(kind),
                f"<html><body>{kind} Bad Gateway</body></html>".encode(),
                {"content-type": "text/html"},
            )
        return EmuResponse.json(int(kind), {"errors": [{"message": "emulated failure"}]})

    def drift(self, op: str, kind: str, answer: EmuResponse) -> EmuResponse:
        body = answer.decoded()
        if kind == "broken_pagination" and op == "list" and self.serving_v2 and isinstance(body, dict):
            looping = {"nextCursor": v2_cursor_of(0.0, "loop"), "hasNextPage": True}
            return EmuResponse.json(answer.status, {**body, "pagination": looping})  # the same cursor forever
        if self.serving_v2:
            return EmuResponse.json(answer.status, {"data": body})
        if isinstance(body, dict) and "data" in body:
            return EmuResponse.json(answer.status, {"data": {"result": body["data"]}})
        return answer

    def empty_envelope(self, op: str, *, item: bool) -> Any:
        if self.serving_v2:
            return {}  # REST v2 answers the pod itself, or {"pods": [...]}: empty is {}
        return {"data": {"pod": {}}} if item and op == "get" else {"data": {}}

    # ---- auth ----

    def caller(self, request: EmuRequest) -> str | None:
        """ "account", or the id of the pod whose pod-scoped key this is, or None."""
        key = request.bearer()
        if key is None:
            return None
        if secrets.compare_digest(key, self.api_key):
            return "account"
        return next((pid for k, pid in self.pod_keys.items() if secrets.compare_digest(key, k)), None)

    # ---- GraphQL ----

    def graphql(self, request: EmuRequest) -> EmuResponse:
        who = self.caller(request)
        if who is None:
            return EmuResponse.json(401, {"errors": [{"message": UNAUTHORIZED}]})
        try:
            body = request.json()
        except ValueError:
            return EmuResponse.json(400, {"errors": [{"message": "POST body sent invalid JSON."}]})
        result = execute(SCHEMA, body, self._root(who))
        return EmuResponse.json(result.status, result.body)

    def _root(self, who: str) -> dict[str, Resolver]:
        def account_only(resolver: Resolver) -> Resolver:
            def guarded(args: dict[str, Any]) -> Any:
                if who != "account":
                    raise FieldError(UNAUTHORIZED)
                return resolver(args)

            return guarded

        return {
            "myself": account_only(lambda args: self._user()),
            "pod": lambda args: self._get(args["input"]["podId"], who),
            "gpuTypes": lambda args: self._gpu_types(args.get("input")),
            "podFindAndDeployOnDemand": account_only(lambda args: self._create(args.get("input") or {}, spot=False)),
            "podRentInterruptable": account_only(lambda args: self._create(args["input"], spot=True)),
            "podStop": lambda args: self._stop(args["input"]["podId"], who),
            "podResume": account_only(lambda args: self._resume(args["input"]["podId"], args["input"].get("gpuCount"))),
            "podBidResume": account_only(
                lambda args: self._resume(args["input"]["podId"], args["input"].get("gpuCount"))
            ),
            "podTerminate": lambda args: self._terminate(args["input"]["podId"], who),
        }

    def _user(self) -> dict[str, Any]:
        pods = list(self.pods.values())
        for pod in pods:
            self._observe(pod)
        live = list(self.pods.values())
        return {
            "id": "user_emulated",
            "email": "you@example.com",
            "clientBalance": round(self.balance_now(), 4),
            "currentSpendPerHr": round(sum(p.cost for p in live if p.state != "exited" and p.state != "outbid"), 4),
            "spendLimit": self.spend_limit,
            **self.notify,
            "pubKey": "ssh-ed25519 AAAA... emulated",
            "authId": "user_emulated_auth",
            "pods": [self._gql_pod(p) for p in live if p.id not in self.graphql_lag],
            "networkVolumes": [dict(v) for v in self.network_volumes],
        }

    def _get(self, pod_id: str, who: str) -> dict[str, Any] | None:
        if who not in ("account", pod_id):
            raise FieldError(UNAUTHORIZED)
        pod = self.pods.get(pod_id)
        if pod is None or pod_id in self.graphql_lag:
            return None  # a deleted or unknown id: null (UNCONFIRMED: it may be an error instead)
        self._observe(pod)
        return self._gql_pod(pod) if pod.id in self.pods else None

    def _create(self, fields_: dict[str, Any], spot: bool) -> dict[str, Any]:
        gpu = self.gpus.get(str(fields_.get("gpuTypeId")))
        if gpu is None:
            raise FieldError(f"GPU type {fields_.get('gpuTypeId')!r} is not available")
        if not fields_.get("imageName") and not fields_.get("templateId"):
            raise FieldError("imageName or templateId is required")
        count = int(fields_.get("gpuCount") or 1)
        if gpu.stock < count:
            raise FieldError(NO_CAPACITY)
        cloud = str(fields_.get("cloudType") or "ALL")
        price = self._price(gpu, cloud, spot, fields_.get("bidPerGpu"))
        env = {str(e["key"]): str(e["value"]) for e in fields_.get("env") or []}
        image = str(fields_.get("imageName") or fields_.get("templateId"))
        pod = self._new_pod(str(fields_.get("name") or ""), image, gpu, count, price * count, env, spot)
        community = cloud == "COMMUNITY" or (cloud == "ALL" and 0 < gpu.community <= gpu.secure)
        # Community hosts give a public IP only when asked (supportPublicIp): else ssh is private.
        pod.public = not community or fields_.get("supportPublicIp") is True
        if not pod.public:
            pod.public_ip = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.{secrets.randbelow(250) + 2}"
        floor_cpu, floor_mem = fields_.get("minVcpuCount"), fields_.get("minMemoryInGb")
        if community and floor_cpu is None and floor_mem is None:
            pod.vcpu, pod.memory_gb = STARVED_HOST
        else:
            pod.vcpu = max(int(floor_cpu or 0), HOST_PER_GPU[0] * count)
            pod.memory_gb = max(int(floor_mem or 0), HOST_PER_GPU[1] * count)
        pod.ports = str(fields_.get("ports") or "")
        pod.container_disk = int(fields_.get("containerDiskInGb") or 10)
        pod.volume_gb = int(fields_.get("volumeInGb") or 0)
        pod.volume_mount = str(fields_.get("volumeMountPath") or "/workspace")
        pod.terminate_after = deadline(fields_.get("terminateAfter"))
        self._give_sshd(pod, env, fields_.get("startSsh") is True)
        gpu.stock -= count
        return self._gql_pod(pod)

    def _price(self, gpu: GpuStock, cloud: str, spot: bool, bid: Any) -> float:
        if spot:
            if bid is None or float(bid) < gpu.spot:
                raise FieldError(f"bid too low: the minimum bid for {gpu.display} is {gpu.spot}")
            return float(bid)
        prices = {"SECURE": [gpu.secure], "COMMUNITY": [gpu.community], "ALL": [gpu.secure, gpu.community]}[cloud]
        offered = [p for p in prices if p > 0]
        if not offered:
            raise FieldError(NO_CAPACITY)
        return min(offered)

    def _new_pod(
        self, name: str, image: str, gpu: GpuStock, count: int, cost: float, env: dict[str, str], spot: bool
    ) -> EmuPod:
        pod = EmuPod(
            id=new_pod_id(),
            name=name,
            image=image,
            gpu=gpu,
            gpu_count=count,
            rented_gpus=count,
            cost=round(cost, 4),
            env=env,
            ports="22/tcp",
            container_disk=20,
            volume_gb=30,
            volume_mount="/workspace",
            spot=spot,
            created_at=self.clock.now(),
            key=new_key("rpa_POD"),
            polls_left=self.boot_polls,
            public_ip=self.ssh_endpoint[0] if self.ssh_endpoint else "203.0.113.10",
            ssh_port=self.ssh_endpoint[1] if self.ssh_endpoint else next(self._ports),
        )
        self.pods[pod.id] = pod
        self.pod_keys[pod.key] = pod.id
        return pod

    def _stop(self, pod_id: str, who: str) -> dict[str, Any]:
        if who not in ("account", pod_id):
            raise FieldError(UNAUTHORIZED)
        pod = self.pods.get(pod_id)
        if pod is None:
            raise FieldError("pod not found to stop")
        self._stop_pod(pod)
        return self._gql_pod(pod)

    def _resume(self, pod_id: str, gpu_count: Any = None) -> dict[str, Any]:
        pod = self.pods.get(pod_id)
        if pod is None:
            raise FieldError("pod not found to resume")
        self._start_pod(pod, int(gpu_count) if gpu_count is not None else pod.rented_gpus)
        return self._gql_pod(pod)

    def _stop_pod(self, pod: EmuPod) -> None:
        pod.state = "exited"
        if pod.gpu_held:  # RunPod releases the GPU on stop and keeps the volume
            pod.gpu.stock += pod.gpu_count
            pod.gpu_held = False

    def _start_pod(self, pod: EmuPod, wanted: int) -> None:
        """Back through provisioning. A resume takes the GPUs back only if the stock still has them; else
        the pod comes back with zero GPUs (RunPod's docs), which is enough to read its volume."""
        if not pod.gpu_held:
            pod.gpu_count = wanted if pod.gpu.stock >= wanted else 0
            pod.gpu.stock -= pod.gpu_count
            pod.gpu_held = True
        pod.state, pod.polls_left = "provisioning", self.boot_polls

    def _terminate(self, pod_id: str, who: str) -> None:
        own = who == pod_id
        if who != "account" and not own:
            raise FieldError(NOT_FOUND_TO_TERMINATE)  # a pod key cannot see other pods
        if own and not self.pod_key_can_terminate:
            raise FieldError(UNAUTHORIZED)
        if own and self.pod_key_not_found:
            raise FieldError(NOT_FOUND_TO_TERMINATE)  # refused, worded as if the pod were gone
        pod = self.pods.get(pod_id)
        if pod is None:
            raise FieldError(NOT_FOUND_TO_TERMINATE)
        self._remove(pod)

    def _gpu_types(self, flt: dict[str, Any] | None) -> list[dict[str, Any]]:
        gpus = list(self.gpus.values())
        if flt and flt.get("id"):
            gpus = [g for g in gpus if g.id == flt["id"]]
        if flt and flt.get("ids"):
            gpus = [g for g in gpus if g.id in flt["ids"]]
        return [gpu_type_view(g) for g in gpus]

    # ---- REST v2 ----

    def _v2_auth(self, request: EmuRequest) -> EmuResponse | None:
        who = self.caller(request)
        if request.bearer() is None:
            return problem(401, "Unauthorized", "missing bearer token")
        if who is None:
            return problem(401, "Unauthorized", "invalid bearer token")
        if who != "account":
            return problem(403, "Forbidden", "access denied")  # the pod key cannot use REST (field report)
        return None

    def v2_create(self, request: EmuRequest) -> EmuResponse:
        """POST /v2/pods with a CreatePodRequest, as strict as the v2 spec (runpod_contract.py): a broken
        contract is a 422, a broken rule a 400; then no capacity (or a count past maxCount) a 400, a pool the
        account may not use a 403, too little balance a 402. 201 with the Pod, in PROVISIONING."""
        body, refused = self._checked_body(request, create_refusal)
        if refused:
            return refused
        if "cpu" in body:
            return problem(400, "Bad Request", "the emulator rents GPU pods only")
        gpu = self.gpus.get(body["gpu"]["id"])
        if gpu is None:
            return problem(400, "Bad Request", f"GPU type {body['gpu']['id']!r} is not available")
        count = int(body["gpu"].get("count", 1))
        cloud = str(body.get("cloud", "SECURE"))
        if (gpu.id, cloud) in self.denied_pools:
            return problem(403, "Forbidden", POOL_DENIED)
        price = gpu.secure if cloud == "SECURE" else gpu.community
        if count > max_count(gpu, cloud):
            return problem(400, "Bad Request", f"{gpu.display} takes at most {max_count(gpu, cloud)} GPUs per pod")
        if price <= 0 or gpu.stock < count:
            return problem(400, "Bad Request", NO_CAPACITY)
        if self.balance_now() < price * count:  # RunPod wants an hour of the pod's price in the account
            return problem(402, "Payment Required", "insufficient balance")
        env = dict(body.get("env") or {})
        pod = self._new_pod(str(body["name"]), str(body.get("image") or body.get("templateId")), gpu, count,
                            price * count, env, spot=False)  # fmt: skip
        pod.cloud = cloud
        pod.vcpu, pod.memory_gb = HOST_PER_GPU[0] * count, HOST_PER_GPU[1] * count
        pod.ports = ",".join(body.get("ports") or [])
        pod.container_disk = int(body.get("disk", 50))
        persistent = (body.get("mounts") or {}).get("persistent") or {}
        pod.volume_gb = int(persistent.get("size", 0))
        pod.volume_mount = str(persistent.get("path", ""))
        self._give_sshd(pod, env, bool(body.get("startSsh")))
        gpu.stock -= count
        return EmuResponse.json(201, self._v2_pod(pod))

    def _give_sshd(self, pod: EmuPod, env: dict[str, str], start_ssh: bool) -> None:
        """The keys the pod's sshd takes: the PUBLIC_KEY sent (startSsh injects the registered keys "unless the
        request already sets one"), else the registered keys with startSsh, else none (no sshd at all)."""
        sent = env.get("PUBLIC_KEY")
        keys = sent.splitlines() if sent is not None else self.ssh_keys if start_ssh else []
        pod.authorized = tuple(k.strip() for k in keys if k.strip())
        if self.sshd_key is not None and not takes(pod.authorized, self.sshd_key):
            pod.ssh_port = NO_SSHD_PORT  # the image starts no sshd for it: nothing answers

    def _checked_body(
        self, request: EmuRequest, refusal: Callable[[Any], Refusal | None]
    ) -> tuple[Any, EmuResponse | None]:
        """The request's JSON body once the key and the body's contract are checked, or the answer refusing it."""
        refused = self._v2_auth(request)
        if refused:
            return None, refused
        try:
            body = request.json()
        except ValueError:
            return None, validation_failed("body: not JSON")
        said = refusal(body)
        return body, refusal_answer(said) if said is not None else None

    def v2_catalog(self, request: EmuRequest) -> EmuResponse:
        """GET /v2/catalog/gpus: list prices per GPU per hour by cloud, and with include=AVAILABILITY the stock
        for `count` GPUs in `cloud` (SECURE when not given, as upstream)."""
        refused = self._v2_auth(request)
        if refused:
            return refused
        query = last_values(request)
        said = catalog_refusal(query)
        if said is not None:
            return refusal_answer(said)
        scope = None
        if "include" in query:
            scope = (int(query.get("count", "1")), query.get("cloud", "SECURE"))
        return EmuResponse.json(200, {"gpus": [catalog_view(g, scope) for g in self.gpus.values()]})

    def v2_ssh_keys(self, request: EmuRequest) -> EmuResponse:
        """GET /v2/account/ssh-keys: `{"keys": [...]}`; PUT replaces the whole set (for tests and rehearsals:
        gpuc itself never writes it)."""
        if request.method == "PUT":
            body, refused = self._checked_body(request, ssh_keys_refusal)
            if refused:
                return refused
            self.ssh_keys = list(body["keys"])
        refused = self._v2_auth(request)
        return refused or EmuResponse.json(200, {"keys": list(self.ssh_keys)})

    def v2_list(self, request: EmuRequest) -> EmuResponse:
        """GET /v2/pods: `{pods}`, every pod at once; with the `page_size` fault, page by page."""
        refused = self._v2_auth(request)
        if refused:
            return refused
        said = list_refusal(last_values(request))
        if said is not None:
            return refusal_answer(said)
        for pod in list(self.pods.values()):
            self._observe(pod)
        listed_by = self.clock.now() - self.list_lag_s
        ordered = sorted(
            (p for p in self.pods.values() if p.id not in self.v2_lag and p.created_at <= listed_by),
            key=lambda p: (p.created_at, p.id),
        )
        if self.page_size is None:
            return EmuResponse.json(200, {"pods": [self._v2_pod(p) for p in ordered]})
        try:
            after_key = cursor_key(request.param("cursor"))
        except ValueError as exc:
            return validation_failed(f"cursor: {exc}")
        after = [p for p in ordered if after_key is None or (p.created_at, p.id) > after_key]
        page = after[: self.page_size]
        more = len(after) > len(page)
        paging = {"nextCursor": v2_cursor(page[-1]) if more else None, "hasNextPage": more}
        return EmuResponse.json(200, {"pods": [self._v2_pod(p) for p in page], "pagination": paging})

    def v2_get(self, request: EmuRequest, pod_id: str) -> EmuResponse:
        refused = self._v2_auth(request)
        if refused:
            return refused
        pod = self.pods.get(pod_id)
        if pod is not None:
            self._observe(pod)
        if pod_id not in self.pods or pod_id in self.v2_lag:
            return problem(404, "Not Found", "resource not found")
        return EmuResponse.json(200, self._v2_pod(self.pods[pod_id]))

    def v2_action(self, request: EmuRequest, pod_id: str) -> EmuResponse:
        """POST /v2/pods/{id}/action {"action": start|stop|restart|terminate}, as the v2 spec says."""
        body, refused = self._checked_body(request, action_refusal)
        if refused:
            return refused
        pod = self.pods.get(pod_id)
        if pod is None:
            return problem(404, "Not Found", "resource not found")
        status = self._v2_status(pod)
        if body["action"] not in V2_ACTIONS.get(status, ()):
            return problem(409, "Conflict", f"action {body['action']} is not allowed while the pod is {status}")
        if body["action"] == "terminate":
            self._remove(pod)
            return EmuResponse(204)
        if body["action"] == "stop":
            self._stop_pod(pod)
        else:  # start, restart: back through provisioning
            self._start_pod(pod, pod.rented_gpus)
        return EmuResponse.json(200, self._v2_pod(pod))

    def v2_delete(self, request: EmuRequest, pod_id: str) -> EmuResponse:
        refused = self._v2_auth(request)
        if refused:
            return refused
        pod = self.pods.get(pod_id)
        if pod is None:
            return problem(404, "Not Found", "resource not found")
        self._remove(pod)
        return EmuResponse(204)

    def v2_billing(self, request: EmuRequest) -> EmuResponse:
        refused = self._v2_auth(request)
        if refused:
            return refused
        try:
            query = BillingQuery.parse(request, self.clock.now())
        except ValueError as exc:
            return validation_failed(str(exc))
        self._track()
        records = [
            record
            for pod_id in self.billing_book.pod_ids()
            if query.pod_id in (None, pod_id)
            for record in self._billing_records(pod_id, query)
        ]
        totals = {k: round(sum(r[k] for r in records), 4) for k in AMOUNT_KEYS}
        metadata = {
            "query": {**query.echo(), "podId": query.pod_id},
            "recordCount": len(records),
            "uniquePodCount": len({r["podId"] for r in records}),
            "totals": totals,
        }
        return EmuResponse.json(200, {"records": records, "metadata": metadata})

    def _billing_records(self, pod_id: str, query: BillingQuery) -> list[dict[str, Any]]:
        now = self.clock.now()
        life = self.billing_book.lives.get(pod_id)
        planted = [p for p in self.billing_book.planted if p.pod_id == pod_id]
        starts = [p.start for p in planted] + ([life.segments[0].start] if life and life.segments else [])
        if not starts:
            return []
        lo, hi = max(query.lo, min(starts)), query.hi
        records = []
        for start, end in buckets(lo, hi, query.size) if lo < hi else ():
            amounts = self._bucket_amounts(pod_id, life, start, end, now)
            for charge in self.billing_book.planted_in(start, end):
                if charge.pod_id == pod_id:
                    amounts[f"{charge.kind}Amount"] += charge.amount
            if any(amounts.values()):
                rounded = {k: round(v, 4) for k, v in amounts.items()}
                total = round(sum(amounts.values()), 4)
                window = {"startTime": iso(start), "endTime": iso(end), "podId": pod_id}
                records.append({**window, "totalAmount": total, **rounded})
        return records

    def _bucket_amounts(self, pod_id: str, life: Lifeline | None, lo: float, hi: float, now: float) -> dict[str, float]:
        amounts = {"gpuAmount": 0.0, "cpuAmount": 0.0, "diskAmount": 0.0}
        pod = self.billed.get(pod_id)
        if life is None or pod is None:
            return amounts
        running_s = life.seconds({"compute"}, lo, hi, now)
        stopped_s = life.seconds({"stopped"}, lo, hi, now)
        factor = self.billing_book.factor(pod_id)
        per_gb_second = factor / HOURS_PER_MONTH / 3600.0
        running_gb = (pod.container_disk + pod.volume_gb) * DISK_RUNNING_USD_GB_MONTH
        stopped_gb = pod.volume_gb * VOLUME_STOPPED_USD_GB_MONTH
        amounts["gpuAmount"] = running_s * pod.cost / 3600.0 * factor
        amounts["diskAmount"] = (running_s * running_gb + stopped_s * stopped_gb) * per_gb_second
        return amounts

    def balance_now(self) -> float:
        """The account's balance: the credit, less what every pod billed so far when `bills_down` (a real
        account's balance goes down as its pods run; the tests that plant a balance keep it fixed)."""
        if not self.bills_down:
            return self.balance
        now = self.clock.now()
        spent = sum(
            sum(self._bucket_amounts(pod_id, life, 0.0, now + 1.0, now).values())
            for pod_id, life in self.billing_book.lives.items()
        )
        return self.balance - spent - sum(p.amount for p in self.billing_book.planted)

    # ---- state ----

    def _track(self) -> None:
        """Record each pod's billing state as of now: called after every request and every test-driven
        change, so a pod's bill follows its real life in the emulator's clock."""
        now = self.clock.now()
        for pod in self.pods.values():
            self.billed[pod.id] = pod
            self.billing_book.observe(pod.id, billing_state(pod.state), now, pod.created_at)
        for pod_id in self.billing_book.open_ids() - set(self.pods):
            self.billing_book.end(pod_id, now)

    def _observe(self, pod: EmuPod) -> None:
        if pod.state != "provisioning":
            return
        pod.polls_left -= 1
        booted = self.boot_s is not None and self.clock.now() - pod.created_at >= self.boot_s
        if pod.polls_left <= 0 or booted:
            pod.state, pod.started_at = "running", self.clock.now()

    def _remove(self, pod: EmuPod) -> None:
        self.pods.pop(pod.id, None)
        self.gone.add(pod.id)
        if pod.gpu_held:
            pod.gpu.stock += pod.gpu_count
            pod.gpu_held = False

    def _uptime(self, pod: EmuPod) -> int:
        return int(self.clock.now() - pod.started_at) if pod.started_at and pod.state == "running" else 0

    def _gql_pod(self, pod: EmuPod) -> dict[str, Any]:
        running = pod.state == "running"
        desired = "EXITED" if pod.state in ("exited", "outbid") else "RUNNING"
        return {
            "id": pod.id,
            "name": pod.name,
            "desiredStatus": desired,
            "podType": "INTERRUPTABLE" if pod.spot else "RESERVED",
            "costPerHr": pod.cost,
            "adjustedCostPerHr": pod.cost,
            "gpuCount": pod.gpu_count,
            "imageName": pod.image,
            "env": [f"{k}={v}" for k, v in pod.env.items()],
            "ports": pod.ports,
            "lastStatusChange": f"Rented by User: {rented_at(pod.created_at)}",
            "uptimeSeconds": self._uptime(pod),
            "containerDiskInGb": pod.container_disk,
            "volumeInGb": pod.volume_gb,
            "volumeMountPath": pod.volume_mount,
            "memoryInGb": float(pod.memory_gb),
            "vcpuCount": float(pod.vcpu),
            "machineId": pod.machine_id,
            "machine": {
                "gpuDisplayName": pod.gpu.display,
                "location": "US",
                "podHostId": f"{pod.id}-{pod.machine_id[:8]}",
                "dataCenterId": "US-KS-2",
                "costPerHr": pod.cost,
            },
            "runtime": self._gql_runtime(pod) if running else None,
            "dockerArgs": "",
            "dockerId": None,
            "port": None,
        }

    def _gql_runtime(self, pod: EmuPod) -> dict[str, Any]:
        ssh = "22/tcp" in pod.ports.split(",")
        return {
            "uptimeInSeconds": self._uptime(pod),
            "ports": (
                [
                    {
                        "ip": pod.public_ip,
                        "isIpPublic": pod.public,
                        "privatePort": 22,
                        "publicPort": pod.ssh_port,
                        "type": "tcp",
                    }
                ]
                if ssh
                else []
            ),
            "gpus": [
                {"id": f"GPU-{pod.id}-{i}", "gpuUtilPercent": pod.gpu_util, "memoryUtilPercent": 0}
                for i in range(pod.gpu_count)
            ],
            "container": {"cpuPercent": 1, "memoryPercent": 2},
        }

    def _v2_status(self, pod: EmuPod) -> str:
        if pod.state == "provisioning":
            return "STARTING" if pod.polls_left <= 1 else "PROVISIONING"
        return {"running": "RUNNING", "exited": "EXITED", "outbid": "EXITED", "error": "ERROR"}[pod.state]

    def _v2_pod(self, pod: EmuPod) -> dict[str, Any]:
        """The Pod schema: every required field, each field the spec names and no other (no v1 `machine`)."""
        running = pod.state == "running"
        published = "22/tcp" in pod.ports.split(",")
        status = self._v2_status(pod)
        direct = endpoint(pod.public_ip, pod.ssh_port, "root") if running and published and pod.public else None
        return {
            "id": pod.id,
            "name": pod.name,
            "image": pod.image,
            "args": "",
            "disk": pod.container_disk,
            "ports": [p for p in pod.ports.split(",") if p],
            "env": dict(pod.env),
            "registry": None,
            "status": status,
            "actions": list(V2_ACTIONS.get(status, ())),
            "mounts": {"persistent": {"size": pod.volume_gb, "path": pod.volume_mount}} if pod.volume_gb else {},
            "gpu": {"id": pod.gpu.id, "count": pod.gpu_count},
            "cloud": pod.cloud,
            "dataCenterId": "US-KS-2",
            "cudaVersion": "12.8",
            # The proxy is there once the pod has a machine (at once, here); direct only while it runs with a
            # published 22/tcp (null, never left out: the spec requires both keys).
            "ssh": {"proxy": endpoint("ssh.runpod.io", 22, f"{pod.id}-{pod.machine_id[:8]}"), "direct": direct},
            "template": None,
            "cost": pod.cost if pod.state in ("running", "provisioning") else 0.0,
            "locked": False,
            "globalNetworking": {"enabled": False},
            "runtime": self._v2_runtime(pod, published) if running else None,
            "createdAt": iso(pod.created_at),
            "startedAt": iso(pod.started_at) if pod.started_at else None,
        }

    def _v2_runtime(self, pod: EmuPod, published: bool) -> dict[str, Any]:
        port = (
            {"private": 22, "public": pod.ssh_port, "type": "tcp", "ip": pod.public_ip}
            if pod.public
            else {"private": 22, "public": None, "type": "tcp", "ip": None}
        )
        return {
            "uptime": self._uptime(pod),
            "ports": [port] if published else [],
            "gpus": [{"util": pod.gpu_util, "memoryUtil": 0} for _ in range(pod.gpu_count)],
        }


def endpoint(host: str, port: int, user: str) -> dict[str, Any]:
    """PodSshEndpoint: its parts and the ready-to-run command."""
    command = f"ssh {user}@{host}" + (f" -p {port}" if port != 22 else "")
    return {"host": host, "port": port, "username": user, "command": command}


def takes(authorized: tuple[str, ...], key: str) -> bool:
    """Whether an sshd with these authorized keys takes `key` (its type and base64 body; the comment aside)."""
    wanted = key.split()[:2]
    return any(line.split()[:2] == wanted for line in authorized)


def max_count(gpu: GpuStock, cloud: str) -> int:
    return gpu.max_secure if cloud == "SECURE" else gpu.max_community


def last_values(request: EmuRequest) -> dict[str, str]:
    return {name: values[-1] for name, values in request.query.items() if values}


def refusal_answer(said: Refusal) -> EmuResponse:
    status, errors = said
    if status == 422:
        return validation_failed(*errors)
    answer = EmuResponse.json(status, {"title": "Bad Request", "status": status, "detail": "; ".join(errors)})
    answer.headers["content-type"] = "application/problem+json"
    return answer


# The fault op of each v2 action: what it does, as the GraphQL mutation of the same effect is named.
V2_ACTION_OPS = {"stop": "stop", "start": "resume", "restart": "resume", "terminate": "destroy"}


def v2_cursor(pod: EmuPod) -> str:
    return v2_cursor_of(pod.created_at, pod.id)


def v2_cursor_of(created_at: float, pod_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_at, pod_id]).encode()).decode()


def cursor_key(raw: str | None) -> tuple[float, str] | None:
    if raw is None:
        return None
    try:
        created, pod_id = json.loads(base64.urlsafe_b64decode(raw.encode()))
    except (ValueError, TypeError):
        raise ValueError("cursor is not a cursor this server issued") from None
    if not isinstance(created, int | float) or not isinstance(pod_id, str):
        raise ValueError("cursor is not a cursor this server issued")
    return float(created), pod_id


def billing_state(state: str) -> str:
    """A stopped pod (EXITED, or an outbid spot pod) bills its volume only; otherwise the GPU runs."""
    return "stopped" if state in ("exited", "outbid") else "compute"


AMOUNT_KEYS = ("totalAmount", "gpuAmount", "cpuAmount", "diskAmount")


@dataclass(frozen=True)
class BillingQuery:
    """GET /v2/billing/pods parameters, resolved to a bucket-aligned [lo, hi) as the v2 spec says."""

    lo: float
    hi: float
    size: str
    pod_id: str | None

    @classmethod
    def parse(cls, request: EmuRequest, now: float) -> BillingQuery:
        size = request.param("bucketSize") or "day"
        if size not in BUCKETS:
            raise ValueError(f"bucketSize must be one of {', '.join(BUCKETS)}")
        start, end, last_n = request.param("startTime"), request.param("endTime"), request.param("lastN")
        if last_n is not None:
            if start is not None or end is not None:
                raise ValueError("lastN is mutually exclusive with startTime/endTime")
            return cls(*last_buckets(last_n, size, now), size, request.param("podId"))
        lo = bucket_floor(rfc3339(start, "startTime") if start else now - 30 * 86400, size)
        hi_raw = rfc3339(end, "endTime") if end else now
        hi = hi_raw if bucket_floor(hi_raw, size) == hi_raw else bucket_next(bucket_floor(hi_raw, size), size)
        if hi <= lo:
            raise ValueError("endTime must be after startTime")
        return cls(lo, hi, size, request.param("podId"))

    def echo(self) -> dict[str, Any]:
        return {"startTime": iso(self.lo), "endTime": iso(self.hi), "bucketSize": self.size}


def last_buckets(raw: str, size: str, now: float) -> tuple[float, float]:
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError("lastN must be an integer >= 1")
    lo = bucket_floor(now, size)
    hi = bucket_next(lo, size)
    for _ in range(int(raw) - 1):
        lo = bucket_floor(lo - 1, size)
    return lo, hi


def rfc3339(value: str, name: str) -> float:
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name} is not an RFC 3339 date-time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{name} is not an RFC 3339 date-time (no offset)")
    return moment.timestamp()


def validation_failed(*errors: str) -> EmuResponse:
    body = {"title": "Unprocessable Entity", "status": 422, "detail": "Request validation failed."}
    answer = EmuResponse.json(422, {**body, "errors": list(errors)})
    answer.headers["content-type"] = "application/problem+json"
    return answer


def catalog_view(gpu: GpuStock, scope: tuple[int, str] | None) -> dict[str, Any]:
    """One GpuType of GET /v2/catalog/gpus. `scope` (count, cloud) when include=AVAILABILITY asked for the
    stock: then `availability` is for a pod of `count` GPUs in `cloud` (NONE past maxCount or with fewer
    free), and `dataCenters` is left out when it is NONE everywhere."""
    view: dict[str, Any] = {
        "id": gpu.id,
        "name": gpu.display,
        "pool": "EMULATED",
        "manufacturer": "NVIDIA",
        "memory": gpu.memory_gb,
        "secure": gpu.secure > 0,
        "community": gpu.community > 0,
        "price": {"secure": gpu.secure, "community": gpu.community, "serverless": round(gpu.secure * 1.5, 3)},
        "maxCount": {"secure": gpu.max_secure, "community": gpu.max_community},
    }
    if scope is None:
        return view
    count, cloud = scope
    offered = (gpu.secure if cloud == "SECURE" else gpu.community) > 0 and count <= max_count(gpu, cloud)
    pods = gpu.stock // count if offered else 0  # how many pods of `count` GPUs the free stock makes
    level = "NONE" if pods < 1 else "LOW" if pods < 3 else "MEDIUM" if pods < 8 else "HIGH"
    view["availability"] = level
    view["cudaVersions"] = [{"version": "12.8", "available": level != "NONE"}]
    if level != "NONE":
        view["dataCenters"] = [{"id": "US-KS-2", "name": "US Kansas 2", "availability": level}]
    return view


def gpu_type_view(gpu: GpuStock) -> dict[str, Any]:
    def lowest(args: dict[str, Any]) -> dict[str, Any]:
        wanted = int((args.get("input") or {}).get("gpuCount") or 1)
        level = "None" if gpu.stock < wanted else "Low" if gpu.stock < 3 else "Medium" if gpu.stock < 8 else "High"
        offered = [p for p in (gpu.secure, gpu.community) if p > 0]
        return {
            "minimumBidPrice": gpu.spot,
            "uninterruptablePrice": min(offered) if offered else None,
            "minVcpu": 8.0,
            "minMemory": 30.0,
            "stockStatus": level,
            "availableGpuCounts": [n for n in (1, 2, 4, 8) if n <= gpu.stock],
            "countryCode": "US",
        }

    return {
        "id": gpu.id,
        "displayName": gpu.display,
        "memoryInGb": gpu.memory_gb,
        "secureCloud": gpu.secure > 0,
        "communityCloud": gpu.community > 0,
        "maxGpuCount": 8,
        "securePrice": gpu.secure,
        "communityPrice": gpu.community,
        "communitySpotPrice": gpu.spot if gpu.community > 0 else None,
        "secureSpotPrice": round(gpu.spot * 1.2, 3) if gpu.secure > 0 else None,
        "oneWeekPrice": None,
        "oneMonthPrice": None,
        "threeMonthPrice": None,
        "sixMonthPrice": None,
        "clusterPrice": round(gpu.secure * 1.2, 3),
        "manufacturer": "Nvidia",
        "cudaCores": 16384,
        "lowestPrice": lowest,
    }


def graphql_op(request: EmuRequest) -> str:
    """The fault-plan name of a GraphQL request, from its first root field."""
    try:
        body = request.json()
        op = Parser(body["query"]).document() if isinstance(body, dict) and isinstance(body.get("query"), str) else None
    except (ValueError, RequestError):
        op = None
    if op is None or not op.selections:
        return "graphql"
    first = op.selections[0]
    if first.name == "myself":
        wants_pods = any(f.name == "pods" for f in first.selections or [])
        return "list" if wants_pods else "balance"
    return OP_OF_FIELD.get(first.name, "graphql")


def deadline(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise FieldError(f"terminateAfter is not a date-time: {value!r}") from None


def rented_at(ts: float) -> str:
    return f"{datetime.fromtimestamp(ts, UTC):%a %b %d %Y %H:%M:%S} GMT+0000 (Coordinated Universal Time)"


def new_pod_id() -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(secrets.choice(alphabet) for _ in range(14))


def action_op(request: EmuRequest) -> str:
    try:
        body = request.json()
    except ValueError:
        return "action"
    action = body.get("action") if isinstance(body, dict) else None
    return V2_ACTION_OPS.get(action, "action") if isinstance(action, str) else "action"


def problem(status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> EmuResponse:
    answer = EmuResponse.json(status, {"title": title, "status": status, "detail": detail}, headers)
    answer.headers["content-type"] = "application/problem+json"
    return answer
