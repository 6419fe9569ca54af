"""RunPod through its GraphQL API, and REST v2 where it says more (status vocabulary, createdAt, 404 = gone).

REST v1 retires on 2026-11-15 and is not used. GraphQL creates pods (it alone has `startSsh` and
`terminateAfter`), stops and terminates them, and reads balance and GPU types; the pod listing is
GraphQL `myself { pods }` (env, podType, runtime ports, GPU utilisation), joined with REST v2 `GET /pods`
(status, createdAt) when v2 answers: v2 only adds detail, so a v2 failure never fails the listing.
Queries pass values as GraphQL variables, never by string interpolation.

Interruptible (spot) pods are not rented: RunPod removed spot from its docs (2026-05) and is removing
`podRentInterruptable` from the public API, so gpuc refuses them up front with a clear message and shows
no spot price as rentable.

Every request goes through the HttpClient choke point in core/providers/http.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, Unpack
from urllib.parse import quote

from gpuc.core.checks import (
    OPT_FLAG,
    OPT_INT,
    OPT_NUMBER,
    OPT_TEXT,
    TEXT,
    ProviderShape,
    checked,
    lax_number,
    many,
    mapping,
    maybe,
    record,
    replaced,
    text,
)
from gpuc.core.clock import Clock, iso, parse_iso
from gpuc.core.errors import ConfigError, NotFound, ProviderAuthError, ProviderError, ProviderSchemaError
from gpuc.core.pod import Pod, PodStatus
from gpuc.core.providers.base import DestroyResult
from gpuc.core.providers.common import (
    HttpProvider,
    HttpTuning,
    PodKey,
    ScopedSelfDestroyer,
    SelfWords,
    TerminateRefused,
    api_key_of,
    env_from_pairs,
    experiment_of,
    is_managed,
    parse_wire,
    pod_env,
)
from gpuc.core.providers.endpoints import RUNPOD_GRAPHQL_ENV, RUNPOD_GRAPHQL_URL, RUNPOD_REST_URL
from gpuc.core.providers.http import BackoffFunction, HttpClient, Reply, require
from gpuc.core.settings import Settings

if TYPE_CHECKING:
    import httpx

    from gpuc.core.models import Balance, Offer, PodSpec

log = logging.getLogger("gpuc.providers.runpod")

PROVIDER = "runpod"
DEFAULT_GRAPHQL_URL = RUNPOD_GRAPHQL_URL
DEFAULT_REST_URL = RUNPOD_REST_URL
KEY_ENV = "RUNPOD_API_KEY"
VOLUME_MOUNT = "/workspace"
# ssh only: no Jupyter port, nothing else exposed.
PORTS = "22/tcp"
# Host sizing sent with every create, per GPU: the official client, SkyPilot and dstack all send a floor,
# and without one a community host may pair a GPU with a starved CPU or RAM. 4 vCPU per GPU is SkyPilot's
# rule; 16 GB RAM per GPU holds a 7B fp16 model's weights while they load.
VCPU_PER_GPU = 4
MEMORY_GB_PER_GPU = 16
SPOT_GONE = "RunPod interruptible (spot) pods are no longer offered through its public API"
SPOT_HINT = "rent on-demand on RunPod (drop --interruptible), or use --provider vast for interruptible"
# REST v2 list paging (limit/cursor, pagination.nextCursor/hasNextPage): not in the 2026-08 spec we read
# (UNCONFIRMED); a body without `pagination` is the whole list.
V2_PAGE_SIZE = 50
MAX_V2_PAGES = 100
CloudType = Literal["ALL", "SECURE", "COMMUNITY"]
# GraphQL errors may come with HTTP 200 or a 4xx (UNCONFIRMED which): read the body for both.
GRAPHQL_ERROR_STATUSES = (400, 404, 409, 422)
POD_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
NOT_FOUND_TO_TERMINATE = "pod not found to terminate"

POD_FIELDS = (
    "id name desiredStatus podType costPerHr gpuCount imageName env ports uptimeSeconds lastStatusChange "
    "containerDiskInGb volumeInGb machineId machine { gpuDisplayName podHostId } "
    "runtime { uptimeInSeconds ports { ip isIpPublic privatePort publicPort type } "
    "gpus { id gpuUtilPercent memoryUtilPercent } }"
)
CREATED_FIELDS = (
    "id name desiredStatus podType costPerHr gpuCount env machineId machine { gpuDisplayName podHostId }"
)
LIST_QUERY = f"query Pods {{ myself {{ pods {{ {POD_FIELDS} }} }} }}"
GET_QUERY = f"query Pod($podId: String!) {{ pod(input: {{podId: $podId}}) {{ {POD_FIELDS} }} }}"
CREATE_ON_DEMAND = (
    "mutation Deploy($input: PodFindAndDeployOnDemandInput!) "
    f"{{ podFindAndDeployOnDemand(input: $input) {{ {CREATED_FIELDS} }} }}"
)
STOP_MUTATION = "mutation Stop($podId: String!) { podStop(input: {podId: $podId}) { id desiredStatus } }"
RESUME_MUTATION = (
    "mutation Resume($podId: String!, $gpuCount: Int!) "
    "{ podResume(input: {podId: $podId, gpuCount: $gpuCount}) { id desiredStatus } }"
)
# podTerminate returns a scalar: no selection set.
TERMINATE_MUTATION = "mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }"
# R5, the fields runpodctl's GetUser reads (CONFIRMED); the notify* flags are the account's own emails.
BALANCE_QUERY = (
    "query Balance { myself { clientBalance currentSpendPerHr spendLimit "
    "notifyPodsStale notifyPodsGeneral notifyLowBalance } }"
)
NOTIFY_FIELDS = ("notifyPodsStale", "notifyPodsGeneral", "notifyLowBalance")
# No spot prices asked: they are not rentable (see the module docstring).
GPU_TYPES_QUERY = (
    "query GpuTypes { gpuTypes { id displayName memoryInGb secureCloud communityCloud "
    "securePrice communityPrice } }"
)
GPU_PRICE_QUERY = (
    "query GpuPrice($id: String!, $gpuCount: Int!) { gpuTypes(input: {id: $id}) "
    "{ id lowestPrice(input: {gpuCount: $gpuCount}) { uninterruptablePrice stockStatus } } }"
)
MAX_PRICE_LOOKUPS = 5

# desiredStatus is what the user asked for; `runtime` says whether the container is actually up.
# CREATED/RESTARTING/PAUSED/DEAD come from a third-party schema copy (UNCONFIRMED).
GRAPHQL_STATUS: dict[str, PodStatus] = {
    "RUNNING": "running",
    "EXITED": "stopped",
    "TERMINATED": "terminated",
    "CREATED": "provisioning",
    "RESTARTING": "provisioning",
    "PAUSED": "paused",
    "DEAD": "exited",
}
V2_STATUS: dict[str, PodStatus] = {
    "PROVISIONING": "provisioning",
    "STARTING": "provisioning",
    "RUNNING": "running",
    "EXITED": "stopped",
    "ERROR": "exited",
    "TERMINATED": "terminated",
}
# RunPod's published price of a stopped pod's volume [rp-docs billing.mdx]; the container disk is wiped on stop.
VOLUME_STOPPED_USD_GB_MONTH = 0.20
# podType values for spot pods (INTERRUPTABLE: third-party code; BID: schema copy; both UNCONFIRMED). gpuc
# rents none, but a spot pod started elsewhere (or before the removal) is still read for what it is.
SPOT_POD_TYPES = ("INTERRUPTABLE", "BID")


# ---- wire shapes: what we read from RunPod, validated where the body enters --------------------------


class GqlPort(ProviderShape):
    ip: str | None = checked(OPT_TEXT, None)
    isIpPublic: bool | None = checked(OPT_FLAG, None)
    privatePort: int | None = checked(OPT_INT, None)
    publicPort: int | None = checked(OPT_INT, None)
    type: str | None = checked(OPT_TEXT, None)


class GqlGpu(ProviderShape):
    id: str | None = checked(OPT_TEXT, None)
    gpuUtilPercent: float | None = checked(OPT_NUMBER, None)
    memoryUtilPercent: float | None = checked(OPT_NUMBER, None)


class GqlRuntime(ProviderShape):
    uptimeInSeconds: float | None = checked(OPT_NUMBER, None)
    ports: tuple[GqlPort, ...] | None = checked(maybe(many(record(GqlPort))), None)
    gpus: tuple[GqlGpu, ...] | None = checked(maybe(many(record(GqlGpu))), None)


class GqlMachine(ProviderShape):
    gpuDisplayName: str | None = checked(OPT_TEXT, None)
    podHostId: str | None = checked(OPT_TEXT, None)


class GqlPod(ProviderShape):
    id: str = checked(TEXT)
    name: str | None = checked(OPT_TEXT, None)
    desiredStatus: str | None = checked(OPT_TEXT, None)
    podType: str | None = checked(OPT_TEXT, None)
    costPerHr: float | None = checked(OPT_NUMBER, None)  # documented as a number, once seen as a string
    gpuCount: int | None = checked(OPT_INT, None)
    env: tuple[str, ...] | None = checked(maybe(many(text())), None)
    uptimeSeconds: float | None = checked(OPT_NUMBER, None)
    volumeInGb: float | None = checked(OPT_NUMBER, None)
    machine: GqlMachine | None = checked(maybe(record(GqlMachine)), None)
    runtime: GqlRuntime | None = checked(maybe(record(GqlRuntime)), None)


class V2Port(ProviderShape):
    private: int | None = checked(OPT_INT, None)
    public: int | None = checked(OPT_INT, None)
    type: str | None = checked(OPT_TEXT, None)
    ip: str | None = checked(OPT_TEXT, None)


class V2Runtime(ProviderShape):
    uptime: float | None = checked(OPT_NUMBER, None)
    ports: tuple[V2Port, ...] | None = checked(maybe(many(record(V2Port))), None)


class V2Gpu(ProviderShape):
    id: str | None = checked(OPT_TEXT, None)
    count: int | None = checked(OPT_INT, None)


class V2Endpoint(ProviderShape):
    host: str | None = checked(OPT_TEXT, None)
    port: int | None = checked(OPT_INT, None)


class V2Ssh(ProviderShape):
    direct: V2Endpoint | None = checked(maybe(record(V2Endpoint)), None)


class V2Pod(ProviderShape):
    id: str = checked(TEXT)
    name: str | None = checked(OPT_TEXT, None)
    status: str | None = checked(OPT_TEXT, None)
    env: dict[str, Any] | None = checked(maybe(mapping), None)
    gpu: V2Gpu | None = checked(maybe(record(V2Gpu)), None)
    cost: float | None = checked(OPT_NUMBER, None)
    createdAt: str | None = checked(OPT_TEXT, None)
    runtime: V2Runtime | None = checked(maybe(record(V2Runtime)), None)
    ssh: V2Ssh | None = checked(maybe(record(V2Ssh)), None)


class LowestPrice(ProviderShape):
    uninterruptablePrice: float | None = checked(OPT_NUMBER, None)  # sic: RunPod's spelling
    stockStatus: str | None = checked(OPT_TEXT, None)


class GpuType(ProviderShape):
    id: str = checked(TEXT)
    displayName: str | None = checked(OPT_TEXT, None)
    memoryInGb: float | None = checked(OPT_NUMBER, None)
    secureCloud: bool | None = checked(OPT_FLAG, None)
    communityCloud: bool | None = checked(OPT_FLAG, None)
    securePrice: float | None = checked(OPT_NUMBER, None)
    communityPrice: float | None = checked(OPT_NUMBER, None)
    lowestPrice: LowestPrice | None = checked(maybe(record(LowestPrice)), None)


class UserBalance(ProviderShape):
    clientBalance: float = checked(lax_number)
    currentSpendPerHr: float | None = checked(OPT_NUMBER, None)
    spendLimit: float | None = checked(OPT_NUMBER, None)
    notifyPodsStale: bool | None = checked(OPT_FLAG, None)
    notifyPodsGeneral: bool | None = checked(OPT_FLAG, None)
    notifyLowBalance: bool | None = checked(OPT_FLAG, None)


W = TypeVar("W", bound=ProviderShape)


def parse(model: type[W], value: Any, what: str) -> W:
    # The error names the field, never the value (it may be an env).
    return parse_wire(model, value, what, provider=PROVIDER, api="RunPod")


# ---- mapping onto our models ----------------------------------------------------------------------


def status_from_graphql(desired: str | None, runtime_up: bool, spot: bool) -> PodStatus:
    if desired is None:
        return "running" if runtime_up else "unknown"
    status = GRAPHQL_STATUS.get(desired, "unknown")
    if status == "running" and not runtime_up:
        return "provisioning"  # RUNNING is the target; runtime stays null until the container is up
    if status == "stopped" and spot:
        return "paused"  # an outbid spot pod shows EXITED (third-party reading, UNCONFIRMED)
    return status


def status_from_v2(status: str | None, spot: bool) -> PodStatus:
    mapped = V2_STATUS.get(status or "", "unknown")
    return "paused" if mapped == "stopped" and spot else mapped


def ssh_from_graphql(runtime: GqlRuntime | None) -> tuple[str | None, int | None]:
    for port in (runtime.ports or []) if runtime else []:
        if port.privatePort == 22 and port.type == "tcp" and port.isIpPublic and port.ip and port.publicPort:
            return port.ip, port.publicPort
    return None, None


def ssh_from_v2(pod: V2Pod) -> tuple[str | None, int | None]:
    for port in (pod.runtime.ports or []) if pod.runtime else []:
        if port.private == 22 and port.type == "tcp" and port.ip and port.public:
            return port.ip, port.public
    direct = pod.ssh.direct if pod.ssh else None
    return (direct.host, direct.port) if direct and direct.host and direct.port else (None, None)


def gpu_util(runtime: GqlRuntime | None) -> float | None:
    # The busiest GPU: the reaper's second witness must not read one idle GPU as an idle pod.
    readings = (
        [g.gpuUtilPercent for g in (runtime.gpus or []) if g.gpuUtilPercent is not None] if runtime else []
    )
    return max(readings) if readings else None


def pod_from_graphql(pod: GqlPod) -> Pod:
    env = env_from_pairs(pod.env or [])
    spot = (pod.podType or "") in SPOT_POD_TYPES
    runtime_up = pod.runtime is not None
    host, port = ssh_from_graphql(pod.runtime)
    uptime = pod.runtime.uptimeInSeconds if pod.runtime and pod.runtime.uptimeInSeconds is not None else None
    return Pod(
        provider=PROVIDER,
        id=pod.id,
        name=pod.name or "",
        experiment=experiment_of(env),
        status=status_from_graphql(pod.desiredStatus, runtime_up, spot),
        raw_status=f"{pod.desiredStatus or '?'}/runtime={'up' if runtime_up else 'none'}",
        gpu=pod.machine.gpuDisplayName if pod.machine else None,
        gpu_count=pod.gpuCount if pod.gpuCount is not None else 1,
        price_per_hour=pod.costPerHr,
        uptime_s=uptime if uptime is not None else pod.uptimeSeconds,
        managed=is_managed(pod.name, env),
        interruptible=spot,
        ssh_host=host,
        ssh_port=port,
        gpu_util_pct=gpu_util(pod.runtime),
        disk_gb=pod.volumeInGb,
        disk_usd_gb_month=VOLUME_STOPPED_USD_GB_MONTH if pod.volumeInGb is not None else None,
    )


def v2_env(pod: V2Pod) -> dict[str, str]:
    return {str(k): str(v) for k, v in (pod.env or {}).items()}


def pod_from_v2(pod: V2Pod) -> Pod:
    """A pod REST v2 lists but GraphQL did not (created between the two calls): never hide it."""
    env = v2_env(pod)
    host, port = ssh_from_v2(pod)
    return Pod(
        provider=PROVIDER,
        id=pod.id,
        name=pod.name or "",
        experiment=experiment_of(env),
        status=status_from_v2(pod.status, spot=False),
        raw_status=f"v2 {pod.status or '?'}",
        gpu=pod.gpu.id if pod.gpu else None,
        gpu_count=pod.gpu.count if pod.gpu and pod.gpu.count is not None else 1,
        price_per_hour=pod.cost,
        created_at=created_at(pod),
        uptime_s=pod.runtime.uptime if pod.runtime else None,
        managed=is_managed(pod.name, env),
        ssh_host=host,
        ssh_port=port,
    )


def merge(graphql: GqlPod, v2: V2Pod | None) -> Pod:
    """GraphQL gives env, podType, ports and GPU use; v2 adds the finer status and createdAt."""
    pod = pod_from_graphql(graphql)
    if v2 is None:
        return pod
    host, port = (pod.ssh_host, pod.ssh_port) if pod.ssh_host else ssh_from_v2(v2)
    status = status_from_v2(v2.status, pod.interruptible) if v2.status else pod.status
    if status == "provisioning" and pod.status == "running":
        status = "running"  # the two reads are moments apart, and a container seen up is up
    return replace(
        pod,
        status=status,
        raw_status=f"{pod.raw_status} v2 {v2.status or '?'}",
        created_at=created_at(v2),
        uptime_s=pod.uptime_s if pod.uptime_s is not None else (v2.runtime.uptime if v2.runtime else None),
        ssh_host=host,
        ssh_port=port,
    )


def created_at(pod: V2Pod) -> float | None:
    if not pod.createdAt:
        return None
    try:
        return parse_iso(pod.createdAt)
    except ValueError:
        return None


def parse_graphql_pod(value: Any) -> Pod:
    return pod_from_graphql(parse(GqlPod, value, "pod"))


def parse_v2_pod(value: Any) -> Pod:
    return pod_from_v2(parse(V2Pod, value, "v2 pod"))


def positive(value: float | None) -> float | None:
    # RunPod reports 0 or null for a cloud where the GPU type is not offered.
    return value if value is not None and value > 0 else None


def on_demand_price(gpu: GpuType, cloud: CloudType) -> float | None:
    secure = positive(gpu.securePrice) if gpu.secureCloud is not False else None
    community = positive(gpu.communityPrice) if gpu.communityCloud is not False else None
    if cloud == "SECURE":
        return secure
    if cloud == "COMMUNITY":
        return community
    return min((p for p in (secure, community) if p is not None), default=None)


def offer_from_gpu_type(gpu: GpuType, cloud: CloudType) -> Offer | None:
    if gpu.id == "unknown":
        return None  # a placeholder entry RunPod lists (runpodctl drops it too)
    price = on_demand_price(gpu, cloud)
    lowest = gpu.lowestPrice
    if price is None and lowest is not None:
        price = positive(lowest.uninterruptablePrice)
    if price is None:
        return None
    from gpuc.core.models import Offer  # pydantic: only `offers` and `up` build one, never `ls`

    # No min_bid / interruptible_price: a RunPod spot price is not something gpuc can rent.
    return Offer(
        provider=PROVIDER,
        id=gpu.id,
        gpu=gpu.displayName or gpu.id,
        price_per_hour=price,
        community_price=positive(gpu.communityPrice) if gpu.communityCloud is not False else None,
        stock=lowest.stockStatus if lowest else None,
    )


def parse_gpu_types(value: Any, cloud: CloudType = "SECURE") -> list[Offer]:
    """`data.gpuTypes` (a list) into offers, per GPU per hour, cheapest first."""
    require(isinstance(value, list), PROVIDER, "gpuTypes is not a list")
    offers = [offer_from_gpu_type(parse(GpuType, item, "gpu type"), cloud) for item in value]
    return sorted((o for o in offers if o is not None), key=lambda o: o.price_per_hour)


def matches_gpu(gpu: GpuType, wanted: str) -> bool:
    want = " ".join(wanted.replace("_", " ").lower().split())
    names = [gpu.id.lower(), (gpu.displayName or "").lower()]
    return want in names or any(want in name for name in names)


class GraphQLError(ProviderError):
    """RunPod answered with `errors`: the request was understood and refused."""

    def __init__(self, messages: list[str], codes: list[str], *, status: int, request_id: str | None) -> None:
        super().__init__(
            messages[0] if messages else "GraphQL error without a message",
            provider=PROVIDER,
            status=status if status != 200 else None,
            request_id=request_id,
        )
        self.messages = messages
        self.codes = codes

    @property
    def pod_not_found(self) -> bool:
        return (
            any(m.strip().lower() == NOT_FOUND_TO_TERMINATE for m in self.messages)
            or "POD_NOT_FOUND" in self.codes
        )


def graphql_error(reply: Reply, http: HttpClient) -> GraphQLError | ProviderAuthError:
    items = (
        [e for e in reply.body["errors"] if isinstance(e, dict)]
        if isinstance(reply.body["errors"], list)
        else []
    )
    messages = [http.redact(str(e.get("message", "")))[:300] for e in items]
    codes = [
        str((e.get("extensions") or {}).get("code", ""))
        for e in items
        if isinstance(e.get("extensions"), dict)
    ]
    if any(re.search(r"unauthori[sz]ed|not authori[sz]ed|forbidden", m, re.IGNORECASE) for m in messages):
        return ProviderAuthError(
            messages[0],
            provider=PROVIDER,
            status=reply.status if reply.status != 200 else None,
            request_id=reply.request_id,
            hint=f"check {KEY_ENV} (environment or .env): is it current, and allowed to do this?",
        )
    return GraphQLError(messages or [""], codes, status=reply.status, request_id=reply.request_id)


class GraphQL:
    """The GraphQL endpoint over the HttpClient: variables in, `data` out, `errors` raised."""

    def __init__(self, http: HttpClient, url: str) -> None:
        self.http = http
        self.url = url

    def __call__(
        self, query: str, variables: Mapping[str, Any] | None = None, *, idempotent: bool = True
    ) -> Any:
        reply = self.http.request(
            "POST",
            self.url,
            json={"query": query, "variables": dict(variables or {})},
            idempotent=idempotent,
            accept=GRAPHQL_ERROR_STATUSES,
        )
        require(isinstance(reply.body, dict), PROVIDER, "GraphQL answer is not an object")
        if reply.body.get("errors"):
            raise graphql_error(reply, self.http)
        require(reply.status < 300, PROVIDER, f"GraphQL HTTP {reply.status} without errors")
        data = reply.body.get("data")
        require(isinstance(data, dict), PROVIDER, "GraphQL answer has no data")
        return data


# ---- the provider -----------------------------------------------------------------------------------


class RunPodProvider(HttpProvider):
    name = PROVIDER

    def __init__(
        self,
        api_key: str,
        *,
        graphql_url: str = DEFAULT_GRAPHQL_URL,
        rest_url: str = DEFAULT_REST_URL,
        cloud_type: CloudType = "SECURE",
        **tuning: Unpack[HttpTuning],
    ) -> None:
        super().__init__(api_key, KEY_ENV, **tuning)
        self.graphql = GraphQL(self.http, graphql_url)
        self.rest_url = rest_url.rstrip("/")
        self.cloud_type: CloudType = cloud_type

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        transport: httpx.BaseTransport | None = None,
        clock: Clock | None = None,
        backoff: BackoffFunction | None = None,
    ) -> RunPodProvider:
        key = api_key_of(settings.runpod_api_key, api="RunPod", key_env=KEY_ENV, example="rpa_...")
        return cls(
            key,
            graphql_url=settings.runpod_graphql_url,
            rest_url=settings.runpod_rest_url,
            timeout_s=settings.provider_timeout_s,
            cloud_type=settings.runpod_cloud_type,
            clock=clock,
            backoff=backoff,
            transport=transport,
        )

    # -- create --

    supports_interruptible = False  # see the module docstring: checked before any call

    def create(self, spec: PodSpec) -> Pod:
        if spec.interruptible:
            raise ConfigError(SPOT_GONE, hint=SPOT_HINT)
        env = pod_env(spec)
        gpu_type_id = self._gpu_type_id(spec.gpu_type)
        variables = {"input": self._create_input(spec, gpu_type_id, env)}

        def send() -> Pod:
            data = self.graphql(CREATE_ON_DEMAND, variables, idempotent=False)
            return self._created(data.get("podFindAndDeployOnDemand"), spec)

        return self.create_named(spec.name, send)

    def _create_input(self, spec: PodSpec, gpu_type_id: str, env: Mapping[str, str]) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "name": spec.name,
            "imageName": spec.image,
            "gpuTypeId": gpu_type_id,
            "gpuCount": spec.gpu_count,
            "cloudType": self.cloud_type,
            "containerDiskInGb": spec.container_disk_gb,
            "volumeInGb": spec.volume_gb,
            "volumeMountPath": VOLUME_MOUNT,
            "ports": PORTS,
            "startSsh": True,
            # Without a public IP a community pod may have no reachable ssh port at all; the official
            # client, SkyPilot and dstack always ask for one.
            "supportPublicIp": True,
            "minVcpuCount": VCPU_PER_GPU * spec.gpu_count,
            "minMemoryInGb": MEMORY_GB_PER_GPU * spec.gpu_count,
            "env": [{"key": k, "value": v} for k, v in env.items()],
            # Sent, counted on nowhere: RunPod accepts terminateAfter and has never acted on it (runpodctl
            # #330, docs #820). Harmless if it ever does; the deadline is gpuc's own, held by the pod's agent
            # and the watchdog (SPEC F15).
            "terminateAfter": iso(self.clock.now() + spec.max_hours * 3600),
        }
        return fields

    def _created(self, value: Any, spec: PodSpec) -> Pod:
        require(isinstance(value, dict), PROVIDER, "create answered without a pod")
        pod = pod_from_graphql(parse(GqlPod, value, "created pod"))
        log.info("runpod: created %s (id %s)", spec.name, pod.id)
        return replace(pod, status="provisioning", experiment=spec.experiment, created_at=self.clock.now())

    def _gpu_type_id(self, wanted: str) -> str:
        """`gpuTypeId` is the id ("NVIDIA GeForce RTX 4090"), not the display name users type."""
        if wanted.startswith(("NVIDIA ", "AMD ")):
            return wanted
        types = self._gpu_types()
        exact = [g for g in types if wanted.lower() in (g.id.lower(), (g.displayName or "").lower())]
        found = exact or [g for g in types if matches_gpu(g, wanted)]
        if len(found) != 1:
            names = ", ".join(sorted(g.displayName or g.id for g in (found or types))[:8])
            raise ConfigError(
                f"RunPod has {'no' if not found else 'several'} GPU types matching {wanted!r}",
                hint=f"use one of: {names}",
            )
        return found[0].id

    # -- read --

    def get(self, pod_id: str) -> Pod | None:
        path = self._pod_path(pod_id)
        reply = self.http.request("GET", path, accept=(404,))
        if reply.status == 404:
            require(is_problem_404(reply.body), PROVIDER, f"404 from {path} is not a RunPod problem body")
            return self._seen_by_graphql_only(pod_id)  # REST v2 positively says the pod does not exist
        v2 = parse(V2Pod, reply.body, "v2 pod")
        if v2.status == "TERMINATED":
            return pod_from_v2(v2)
        found = self.graphql(GET_QUERY, {"podId": pod_id}).get("pod")
        if found is None:
            return pod_from_v2(v2)  # v2 sees it and GraphQL does not yet: trust the one that sees it
        return merge(parse(GqlPod, found, "pod"), v2)

    def _seen_by_graphql_only(self, pod_id: str) -> Pod | None:
        """REST v2 said 404. GraphQL creates the pods, and v2 may not know a new one yet: a pod GraphQL
        still shows alive is not gone. GraphQL can only veto the 404, never cast doubt on it: its own
        failure (or its null, or TERMINATED) leaves v2's positive answer standing."""
        try:
            found = self.graphql(GET_QUERY, {"podId": pod_id}).get("pod")
        except ProviderError as exc:
            log.info("runpod: pod %s: REST v2 404, GraphQL unreadable (%s): gone", pod_id, exc.message)
            return None
        if found is None:
            return None
        pod = parse_graphql_pod(found)  # something is there: an unreadable answer raises
        if pod.status == "terminated":
            return None
        return replace(pod, raw_status=f"{pod.raw_status} v2 404 (lags GraphQL)")

    def list_pods(self) -> list[Pod]:
        """GraphQL is the listing; REST v2 adds status detail and pods GraphQL does not show yet. A v2
        failure (a key without REST rights, a rate limit, a page we cannot read) costs the detail only."""
        from gpuc.core.together import read_together

        # Both reads at once: `gpuc ls` waits for the slower, not their sum (a round trip saved per run).
        jobs: dict[str, Callable[[], Any]] = {"graphql": partial(self.graphql, LIST_QUERY), "v2": self._v2_detail}
        reads = read_together(jobs)
        myself = reads["graphql"].get().get("myself")
        require(
            isinstance(myself, dict) and isinstance(myself.get("pods"), list),
            PROVIDER,
            "myself.pods is not a list",
        )
        graphql = [parse(GqlPod, item, "pod") for item in myself["pods"]]
        v2 = reads["v2"].get()
        pods = [merge(g, v2.pop(g.id, None)) for g in graphql]
        pods += [pod_from_v2(p) for p in v2.values()]
        return [p for p in pods if p.status != "terminated"]

    def _v2_detail(self) -> dict[str, V2Pod]:
        try:
            return self.v2_pods()
        except ProviderError as exc:
            log.warning("runpod: REST v2 list failed (%s); listing from GraphQL alone", exc.message)
            return {}

    def v2_pods(self) -> dict[str, V2Pod]:
        """Every page of REST v2 `GET /pods` (limit + cursor). A chain that breaks raises."""
        pods: dict[str, V2Pod] = {}
        cursors: set[str] = set()
        params = {"limit": str(V2_PAGE_SIZE)}
        for _ in range(MAX_V2_PAGES):
            body = self.http.request("GET", f"{self.rest_url}/pods", params=params).body
            require(isinstance(body, dict) and isinstance(body.get("pods"), list), PROVIDER, "v2 pods is not a list")
            for item in body["pods"]:
                pod = parse(V2Pod, item, "v2 pod")
                require(pod.id not in pods, PROVIDER, f"v2 pod {pod.id} listed twice: the paging broke")
                pods[pod.id] = pod
            cursor = next_cursor(body)
            if cursor is None:
                return pods
            require(cursor not in cursors, PROVIDER, "the same v2 nextCursor came back twice: the paging loops")
            cursors.add(cursor)
            params = {"limit": str(V2_PAGE_SIZE), "cursor": cursor}
        raise ProviderSchemaError(
            f"the v2 pod list goes on past {MAX_V2_PAGES} pages",
            provider=PROVIDER,
            hint="the paging looks broken; gpuc lists from GraphQL without it",
        )

    def balance(self) -> Balance:
        myself = self.graphql(BALANCE_QUERY).get("myself")
        require(isinstance(myself, dict), PROVIDER, "myself is missing")
        user = parse(UserBalance, myself, "balance")
        from gpuc.core.models import Balance  # pydantic: only `balance` and `doctor` build one, never `ls`

        return Balance(
            provider=PROVIDER,
            balance_usd=user.clientBalance,
            spend_per_hour=user.currentSpendPerHr or 0.0,
            spend_limit=user.spendLimit,
            notify={name: on for name in NOTIFY_FIELDS if (on := getattr(user, name)) is not None},
        )

    def offers(self, gpu: str | None = None, interruptible: bool = False) -> list[Offer]:
        if interruptible:
            raise ConfigError(SPOT_GONE, hint=SPOT_HINT)
        types = self._gpu_types()
        if gpu:
            types = [
                self._with_lowest_price(t)
                for t in [t for t in types if matches_gpu(t, gpu)][:MAX_PRICE_LOOKUPS]
            ]
        offers = [o for o in (offer_from_gpu_type(t, self.cloud_type) for t in types) if o is not None]
        return sorted(offers, key=lambda o: o.price_per_hour)

    def _gpu_types(self) -> list[GpuType]:
        value = self.graphql(GPU_TYPES_QUERY).get("gpuTypes")
        require(isinstance(value, list), PROVIDER, "gpuTypes is not a list")
        return [parse(GpuType, item, "gpu type") for item in value]

    def _with_lowest_price(self, gpu: GpuType) -> GpuType:
        value = self.graphql(GPU_PRICE_QUERY, {"id": gpu.id, "gpuCount": 1}).get("gpuTypes")
        require(isinstance(value, list), PROVIDER, "gpuTypes is not a list")
        rows = [parse(GpuType, item, "gpu type") for item in value]
        lowest = next((r.lowestPrice for r in rows if r.id == gpu.id), None)
        return replaced(gpu, lowestPrice=lowest)

    # -- stop / destroy --

    def stop(self, pod_id: str) -> None:
        self._check_id(pod_id)
        self.graphql(STOP_MUTATION, {"podId": pod_id})

    def start(self, pod_id: str) -> None:
        """podResume with the pod's own GPU count. RunPod may bring it back with zero GPUs when its machine
        has none free (docs): enough to copy its volume from, which is what gpuc resumes for."""
        self._check_id(pod_id)
        pod = self.get(pod_id)
        if pod is None or pod.status == "terminated":
            raise NotFound(f"pod {pod_id} no longer exists at RunPod", hint="`gpuc ls` shows live pods")
        self.graphql(RESUME_MUTATION, {"podId": pod_id, "gpuCount": max(1, pod.gpu_count)})

    def destroy(self, pod_id: str) -> DestroyResult:
        """Terminate (never stop: a stopped pod bills its volume), then list again to confirm."""
        self._check_id(pod_id)
        result: DestroyResult = "destroyed"
        try:
            self.graphql(TERMINATE_MUTATION, {"podId": pod_id})
        except GraphQLError as exc:
            if not exc.pod_not_found:
                raise
            result = "already_gone"
            log.info("runpod: pod %s was already gone", pod_id)
        if not self.gone_for_sure(pod_id):
            raise ProviderError(
                f"pod {pod_id} is still listed after podTerminate",
                provider=PROVIDER,
                hint=f"run `gpuc down {pod_id}` again; the reaper re-checks it on its next run",
            )
        return result

    def _pod_path(self, pod_id: str) -> str:
        self._check_id(pod_id)
        return f"{self.rest_url}/pods/{quote(pod_id, safe='')}"

    def _check_id(self, pod_id: str) -> None:
        if not POD_ID_RE.match(pod_id):
            raise NotFound(f"{pod_id!r} is not a RunPod pod id", hint="`gpuc ls` shows the ids of your pods")


def next_cursor(body: dict[str, Any]) -> str | None:
    """The cursor of the next v2 page, or None at the end (or when the answer does not page at all)."""
    paging = body.get("pagination")
    if paging is None:
        return None
    require(isinstance(paging, dict), PROVIDER, "v2 pagination is not an object")
    cursor, more = paging.get("nextCursor"), paging.get("hasNextPage")
    if more is False or (more is None and not cursor):
        return None
    require(isinstance(cursor, str) and cursor != "", PROVIDER, "v2 hasNextPage without a nextCursor")
    return str(cursor)


def is_problem_404(body: Any) -> bool:
    """RFC 9457 problem from REST v2. A 404 from anything else (a wrong base URL) must not read as "gone"."""
    return (
        isinstance(body, dict)
        and body.get("status") == 404
        and isinstance(body.get("title") or body.get("detail"), str)
    )


# ---- inside the pod ----------------------------------------------------------------------------------


class RunPodSelfDestroyer(ScopedSelfDestroyer):
    """This pod's end with the pod-scoped key RunPod injects (RUNPOD_API_KEY), never the account key: the
    calls only, the decision is ScopedSelfDestroyer's. Whether that key may podTerminate is UNCONFIRMED
    (self-stop is documented); it may hear "pod not found to terminate" while the pod lives on."""

    words = SelfWords(
        PROVIDER, noun="pod", call="podTerminate", short="terminate", done="terminated",
        not_found=f"answered {NOT_FOUND_TO_TERMINATE!r}", disk="volume", kept="its volume (/workspace) stays",
    )
    key = PodKey("RUNPOD_POD_ID", "RUNPOD_API_KEY", role="the pod-scoped key", hint="RunPod injects them into the"
                 " container's main process; pass them on to the agent's env")

    def __init__(self, pod_id: str, *, graphql_url: str = DEFAULT_GRAPHQL_URL, http: HttpClient) -> None:
        self.pod_id = pod_id
        self.graphql = GraphQL(http, graphql_url)
        self.http = http

    @classmethod
    def with_client(cls, own_id: str, http: HttpClient, environ: Mapping[str, str]) -> Self:
        return cls(own_id, graphql_url=environ.get(RUNPOD_GRAPHQL_ENV) or DEFAULT_GRAPHQL_URL, http=http)

    @property
    def own_id(self) -> str:
        return self.pod_id

    def terminate(self) -> bool:
        try:
            self.graphql(TERMINATE_MUTATION, {"podId": self.pod_id})
        except GraphQLError as exc:
            if exc.pod_not_found:
                return False
            raise TerminateRefused(exc.message) from None
        except ProviderAuthError as exc:
            raise TerminateRefused(exc.message) from None
        return True

    def stop(self) -> None:
        """podStop with the pod key: the one self-control RunPod documents (R7). The volume (/workspace,
        where results/ is) stays; the container disk is wiped."""
        self.graphql(STOP_MUTATION, {"podId": self.pod_id})

    def stop_found_nothing(self, exc: ProviderError) -> bool:
        return isinstance(exc, GraphQLError) and "not found" in exc.message.lower()

    def read_self(self) -> bool | None:
        """Read this pod with its own key: True/False, or None when the read itself fails."""
        try:
            found = self.graphql(GET_QUERY, {"podId": self.pod_id}).get("pod")
        except ProviderError as exc:
            log.warning("runpod: pod %s cannot read itself (%s)", self.pod_id, exc.message)
            return None
        if found is None:
            return False  # null for a deleted id (UNCONFIRMED; the reaper re-checks with the account key)
        pod = parse(GqlPod, found, "pod")
        return pod.desiredStatus != "TERMINATED"
