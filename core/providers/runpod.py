"""RunPod through REST v2 (`https://api.runpod.io/v2`): create, list, get, stop, start, terminate, the GPU
catalog with its prices, and the bill (runpod_billing.py).

RunPod retires GraphQL in "early 2027" and retired REST v1 on 2026-11-15. GraphQL is used only where v2 has
no route, and only through `legacy_graphql`, which says plainly when RunPod answers that it is gone:
- the account balance and spend (`myself { clientBalance currentSpendPerHr spendLimit }`): v2 has the
  bill's history (`/v2/billing`), not the balance;
- the pod's own self-destroy and self-stop with the pod-scoped key (RunPodSelfDestroyer): whether that key
  may use REST v2 is unconfirmed, and a field report saw REST answer it 403 while GraphQL served it.
`gpuc ls`, `up`, `down`, the reaper and `results` never reach GraphQL.

What v2 does not say, and what gpuc does instead:
- no spot/interruptible field: gpuc rents none on RunPod (refused up front) and reads every pod as on-demand;
- no `supportPublicIp` and no host sizing floor (`minVcpuCount`/`minMemoryInGb`): SECURE pods always
  have a public IP; a COMMUNITY pod without one lists no direct ssh endpoint and `up` cannot reach it;
- no host machine id: nothing in gpuc needs it;
- `cost` is 0.0 once a pod is EXITED, while its volume still bills: a stopped pod's hourly price is its
  volume at RunPod's published stopped rate (VOLUME_STOPPED_USD_GB_MONTH), from `mounts.persistent.size`;
- `terminateAfter` does not exist (RunPod never enforced it anyway): the deadline is gpuc's own, held by
  the pod's agent and the watchdog.

Every request goes through the HttpClient choke point in core/providers/http.py.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar, Unpack
from urllib.parse import quote

from gpuc.core.clock import Clock, parse_iso
from gpuc.core.errors import (
    ConfigError,
    NotFound,
    ProviderError,
    ProviderSchemaError,
)
from gpuc.core.pod import Pod, PodStatus
from gpuc.core.providers.base import DestroyResult
from gpuc.core.providers.common import (
    HttpProvider,
    HttpTuning,
    Number,
    ProviderAnswer,
    Whole,
    api_key_of,
    experiment_of,
    is_managed,
    parse_wire,
    pod_env,
    watchdog_of,
)
from gpuc.core.providers.endpoints import RUNPOD_GRAPHQL_URL, RUNPOD_REST_URL
from gpuc.core.providers.http import BackoffFunction, HttpClient, Reply, require
from gpuc.core.providers.podkey import (
    GRAPHQL_ERROR_STATUSES,
    GRAPHQL_GONE_STATUSES,
    GraphQLRetired,
    graphql_data,
    message_from_body,
)
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
PORTS = ("22/tcp",)
SPOT_GONE = "RunPod interruptible (spot) pods are no longer offered through its public API"
SPOT_HINT = "rent on-demand on RunPod (drop --interruptible), or use --provider vast for interruptible"
# REST v2 list paging (limit/cursor, pagination.nextCursor/hasNextPage): not in the 2026-08 spec we read
# (UNCONFIRMED); a body without `pagination` is the whole list.
V2_PAGE_SIZE = 50
MAX_V2_PAGES = 100
CloudType = Literal["ALL", "SECURE", "COMMUNITY"]
POD_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A create whose outcome is unknown (timeout, reset mid-exchange) is looked up by name before any second
# create, for this long: a new pod reaches GET /v2/pods only after a lag (unmeasured at RunPod; the emulator's
# `list_lag_s` drills it), and a second create while the first is still unlisted bills two pods.
LOOKUP_WINDOW_S = 45.0
LOOKUP_DELAY_S = 3.0
# "Not found" is read twice, this far apart, before a pod counts as gone: gone stops the reaper watching it.
RECHECK_DELAY_S = 1.0
# Create refusals v2 documents (R1): 400 rule or NO CAPACITY, 402 balance, 422 contract. None was applied.
CREATE_REFUSALS = (400, 402, 422)
CATALOG_PARAMS = {"product": "POD", "include": "AVAILABILITY"}

# GraphQL, for what v2 has no route (see the module docstring). Values pass as variables, never inlined.
# R5, the fields runpodctl's GetUser reads (CONFIRMED); the notify* flags are the account's own emails.
BALANCE_QUERY = (
    "query Balance { myself { clientBalance currentSpendPerHr spendLimit "
    "notifyPodsStale notifyPodsGeneral notifyLowBalance } }"
)
NOTIFY_FIELDS = ("notifyPodsStale", "notifyPodsGeneral", "notifyLowBalance")

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
HOURS_PER_MONTH = 30 * 24  # RunPod does not state the hours in its month (UNCONFIRMED)
GPU_VENDOR_PREFIXES = ("NVIDIA GeForce ", "NVIDIA ", "AMD ")


# ---- wire shapes: what we read from RunPod, validated where the body enters --------------------------


class V2Port(ProviderAnswer):
    private: Whole | None = None
    public: Whole | None = None
    type: str | None = None
    ip: str | None = None


class V2RuntimeGpu(ProviderAnswer):
    id: str | None = None
    util: Number | None = None


class V2Runtime(ProviderAnswer):
    uptime: Number | None = None
    ports: list[V2Port] | None = None
    gpus: list[V2RuntimeGpu] | None = None


class V2Gpu(ProviderAnswer):
    id: str | None = None
    count: Whole | None = None


class V2Endpoint(ProviderAnswer):
    host: str | None = None
    port: Whole | None = None


class V2Ssh(ProviderAnswer):
    direct: V2Endpoint | None = None


class V2Persistent(ProviderAnswer):
    size: Number | None = None


class V2Mounts(ProviderAnswer):
    persistent: V2Persistent | None = None


class V2Pod(ProviderAnswer):
    id: str
    name: str | None = None
    status: str | None = None
    env: dict[str, Any] | None = None
    gpu: V2Gpu | None = None
    cost: Number | None = None
    createdAt: str | None = None
    runtime: V2Runtime | None = None
    ssh: V2Ssh | None = None
    mounts: V2Mounts | None = None


class CatalogPrice(ProviderAnswer):
    secure: Number | None = None
    community: Number | None = None


class CatalogGpu(ProviderAnswer):
    """One row of GET /v2/catalog/gpus; prices per GPU per hour."""

    id: str
    name: str | None = None
    memory: Number | None = None
    secure: bool | None = None
    community: bool | None = None
    price: CatalogPrice | None = None
    availability: str | None = None


class UserBalance(ProviderAnswer):
    clientBalance: Number
    currentSpendPerHr: Number | None = None
    spendLimit: Number | None = None
    notifyPodsStale: bool | None = None
    notifyPodsGeneral: bool | None = None
    notifyLowBalance: bool | None = None


W = TypeVar("W", bound=ProviderAnswer)


def parse(model: type[W], value: Any, what: str) -> W:
    # The error names the field, never the value (it may be an env).
    return parse_wire(model, value, what, provider=PROVIDER, api="RunPod")


# ---- mapping onto our models ----------------------------------------------------------------------


def status_from_v2(status: str | None) -> PodStatus:
    return V2_STATUS.get(status or "", "unknown")


def ssh_from_v2(pod: V2Pod) -> tuple[str | None, int | None]:
    for port in (pod.runtime.ports or []) if pod.runtime else []:
        if port.private == 22 and port.type == "tcp" and port.ip and port.public:
            return port.ip, port.public
    direct = pod.ssh.direct if pod.ssh else None
    return (direct.host, direct.port) if direct and direct.host and direct.port else (None, None)


def gpu_util(runtime: V2Runtime | None) -> float | None:
    # The busiest GPU: the reaper's second witness must not read one idle GPU as an idle pod.
    readings = [g.util for g in (runtime.gpus or []) if g.util is not None] if runtime else []
    return max(readings) if readings else None


def gpu_display(gpu_id: str | None) -> str | None:
    """"NVIDIA GeForce RTX 4090" -> "RTX 4090": v2 pods carry the catalog id, people read the short name."""
    if not gpu_id:
        return None
    for prefix in GPU_VENDOR_PREFIXES:
        if gpu_id.startswith(prefix):
            return gpu_id[len(prefix) :]
    return gpu_id


def v2_env(pod: V2Pod) -> dict[str, str]:
    return {str(k): str(v) for k, v in (pod.env or {}).items()}


def volume_gb(pod: V2Pod) -> float | None:
    return pod.mounts.persistent.size if pod.mounts and pod.mounts.persistent else None


def hourly_price(status: PodStatus, cost: float | None, volume: float | None) -> float | None:
    """v2 answers `cost` 0.0 once a pod is EXITED, yet its volume bills on: show what it still costs."""
    if status == "stopped" and volume is not None:
        return round(volume * VOLUME_STOPPED_USD_GB_MONTH / HOURS_PER_MONTH, 6)
    return cost


def pod_from_v2(pod: V2Pod) -> Pod:
    env = v2_env(pod)
    host, port = ssh_from_v2(pod)
    status = status_from_v2(pod.status)
    volume = volume_gb(pod)
    return Pod(
        provider=PROVIDER,
        id=pod.id,
        name=pod.name or "",
        experiment=experiment_of(env),
        status=status,
        raw_status=pod.status or "?",
        gpu=gpu_display(pod.gpu.id if pod.gpu else None),
        gpu_count=pod.gpu.count if pod.gpu and pod.gpu.count is not None else 1,
        price_per_hour=hourly_price(status, pod.cost, volume),
        created_at=created_at(pod),
        uptime_s=pod.runtime.uptime if pod.runtime else None,
        managed=is_managed(pod.name, env),
        watchdog=watchdog_of(env),
        ssh_host=host,
        ssh_port=port,
        gpu_util_pct=gpu_util(pod.runtime),
        disk_gb=volume,
        disk_usd_gb_month=VOLUME_STOPPED_USD_GB_MONTH if volume is not None else None,
    )


def created_at(pod: V2Pod) -> float | None:
    if not pod.createdAt:
        return None
    try:
        return parse_iso(pod.createdAt)
    except ValueError:
        return None


def parse_v2_pod(value: Any) -> Pod:
    return pod_from_v2(parse(V2Pod, value, "v2 pod"))


def positive(value: float | None) -> float | None:
    # RunPod reports 0 or null for a cloud where the GPU type is not offered.
    return value if value is not None and value > 0 else None


def cloud_prices(gpu: CatalogGpu) -> dict[str, float]:
    """The on-demand $/GPU/hour of each cloud that offers this GPU."""
    price = gpu.price or CatalogPrice()
    offered = {
        "SECURE": positive(price.secure) if gpu.secure is not False else None,
        "COMMUNITY": positive(price.community) if gpu.community is not False else None,
    }
    return {cloud: p for cloud, p in offered.items() if p is not None}


def cloud_for(gpu: CatalogGpu, cloud: CloudType) -> str | None:
    """v2 takes SECURE or COMMUNITY, and places one GPU type in one cloud without falling back: "ALL" is
    the cheaper of the two that offer it."""
    prices = cloud_prices(gpu)
    if cloud != "ALL":
        return cloud if cloud in prices else None
    return min(prices, key=lambda c: prices[c]) if prices else None


def offer_from_catalog(gpu: CatalogGpu, cloud: CloudType) -> Offer | None:
    if gpu.id == "unknown":
        return None  # a placeholder entry RunPod lists (runpodctl drops it too)
    chosen = cloud_for(gpu, cloud)
    if chosen is None:
        return None
    prices = cloud_prices(gpu)
    from gpuc.core.models import Offer  # pydantic: only `offers` and `up` build one, never `ls`

    # No min_bid / interruptible_price: v2 has no spot, and a RunPod spot price is not something gpuc rents.
    return Offer(
        provider=PROVIDER,
        id=gpu.id,
        gpu=gpu.name or gpu_display(gpu.id) or gpu.id,
        price_per_hour=prices[chosen],
        community_price=prices.get("COMMUNITY"),
        stock=gpu.availability.title() if gpu.availability else None,
    )


def parse_catalog(value: Any, cloud: CloudType = "SECURE") -> list[Offer]:
    """GET /v2/catalog/gpus into offers, per GPU per hour, cheapest first."""
    offers = [offer_from_catalog(g, cloud) for g in catalog_rows(value)]
    return sorted((o for o in offers if o is not None), key=lambda o: o.price_per_hour)


def catalog_rows(value: Any) -> list[CatalogGpu]:
    require(isinstance(value, dict) and isinstance(value.get("gpus"), list), PROVIDER, "catalog gpus is not a list")
    return [parse(CatalogGpu, item, "catalog gpu") for item in value["gpus"]]


def matches_gpu(gpu: CatalogGpu, wanted: str) -> bool:
    want = " ".join(wanted.replace("_", " ").lower().split())
    names = [gpu.id.lower(), (gpu.name or "").lower()]
    return want in names or any(want in name for name in names)


def is_problem_404(body: Any) -> bool:
    """RFC 9457 problem from REST v2. A 404 from anything else (a wrong base URL) must not read as "gone"."""
    return (
        isinstance(body, dict)
        and body.get("status") == 404
        and isinstance(body.get("title") or body.get("detail"), str)
    )


def problem_words(reply: Reply, http: HttpClient) -> str:
    """A v2 problem's own words (detail, then its `errors`), redacted, for an error message."""
    body = reply.body if isinstance(reply.body, dict) else {}
    said = message_from_body({k: v for k, v in body.items() if k != "errors"}) or f"HTTP {reply.status}"
    extra = body.get("errors")
    if isinstance(extra, list) and extra:
        said += ": " + "; ".join(str(e) for e in extra[:3])
    return http.redact(said)[:300]


def create_refused(reply: Reply, http: HttpClient, gpu: str, cloud: str) -> ProviderError:
    """A create v2 refused outright: nothing was created, and nothing is resent."""
    said = problem_words(reply, http)
    common: dict[str, Any] = {"provider": PROVIDER, "status": reply.status, "request_id": reply.request_id}
    if reply.status == 402:
        return ProviderError(
            f"RunPod refused the pod: insufficient balance ({said})",
            hint="add credit at runpod.io (RunPod wants at least one hour of the pod's price in the account)",
            **common,
        )
    if reply.status == 422:
        return ProviderSchemaError(
            f"RunPod refused gpuc's create request as malformed ({said})",
            hint="RunPod's API changed under this gpuc: upgrade gpuc, or report it with the request id",
            **common,
        )
    return ProviderError(
        f"RunPod has no {gpu} to give in {cloud} cloud now, or refused the request ({said})",
        hint="try another GPU type (`gpuc offers`), another cloud (GPUC_RUNPOD_CLOUD_TYPE), or --provider vast",
        **common,
    )


# ---- GraphQL: the one door, for what REST v2 has no route ----------------------------------------------


def legacy_graphql(
    http: HttpClient, url: str, query: str, variables: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The one way the laptop reaches RunPod's GraphQL (retiring "early 2027"): variables in, `data` out, `errors`
    raised (read as the pod reads them, core/providers/podkey.py), and GraphQLRetired when RunPod answers that it
    is gone. Only for what REST v2 has no route."""
    try:
        reply = http.request(
            "POST", url, json={"query": query, "variables": dict(variables or {})}, accept=GRAPHQL_ERROR_STATUSES
        )
    except ProviderSchemaError as exc:  # a 404/410 page that is not JSON: the endpoint itself is gone
        if exc.status in GRAPHQL_GONE_STATUSES:
            raise GraphQLRetired("", status=exc.status, request_id=exc.request_id) from None
        raise
    return graphql_data(reply.status, reply.body, reply.request_id, http.redact)


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
        recheck_delay_s: float = RECHECK_DELAY_S,
        **tuning: Unpack[HttpTuning],
    ) -> None:
        # The lookup after an unclear create covers the listing's lag (LOOKUP_WINDOW_S), not a few seconds.
        tuning.setdefault("lookup_delay_s", LOOKUP_DELAY_S)
        tuning.setdefault("lookup_attempts", 1 + int(LOOKUP_WINDOW_S / max(0.1, tuning["lookup_delay_s"])))
        super().__init__(api_key, KEY_ENV, **tuning)
        self.graphql_url = graphql_url
        self.rest_url = rest_url.rstrip("/")
        self.cloud_type: CloudType = cloud_type
        self.recheck_delay_s = recheck_delay_s

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

    def legacy_graphql(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return legacy_graphql(self.http, self.graphql_url, query, variables)

    # -- create --

    supports_interruptible = False  # see the module docstring: checked before any call

    def create(self, spec: PodSpec) -> Pod:
        if spec.interruptible:
            raise ConfigError(SPOT_GONE, hint=SPOT_HINT)
        env = pod_env(spec)
        gpu_id, cloud = self._placement(spec.gpu_type)
        body = self._create_request(spec, gpu_id, cloud, env)

        def send() -> Pod:
            reply = self.http.request(
                "POST", f"{self.rest_url}/pods", json=body, idempotent=False, accept=CREATE_REFUSALS
            )
            if reply.status in CREATE_REFUSALS:
                raise create_refused(reply, self.http, gpu_display(gpu_id) or gpu_id, cloud)
            return self._created(reply.body, spec)

        return self.create_named(spec.name, send)

    def _create_request(
        self, spec: PodSpec, gpu_id: str, cloud: str, env: Mapping[str, str]
    ) -> dict[str, Any]:
        """CreatePodRequest, with exactly the fields v2 takes (an unknown one is a 422)."""
        return {
            "name": spec.name,
            "image": spec.image,
            "gpu": {"id": gpu_id, "count": spec.gpu_count},
            "cloud": cloud,
            "disk": spec.container_disk_gb,
            "mounts": {"persistent": {"size": spec.volume_gb, "path": VOLUME_MOUNT}},
            "ports": list(PORTS),
            "env": dict(env),
            "startSsh": True,
        }

    def _created(self, value: Any, spec: PodSpec) -> Pod:
        require(isinstance(value, dict), PROVIDER, "create answered without a pod")
        pod = parse_v2_pod(value)
        log.info("runpod: created %s (id %s)", spec.name, pod.id)
        return replace(
            pod,
            status="provisioning",
            experiment=spec.experiment,
            created_at=pod.created_at or self.clock.now(),
        )

    def _placement(self, wanted: str) -> tuple[str, str]:
        """The catalog id ("NVIDIA GeForce RTX 4090", not what users type) and the cloud to ask in."""
        if wanted.startswith(GPU_VENDOR_PREFIXES) and self.cloud_type != "ALL":
            return wanted, self.cloud_type  # already an id, and nothing to choose: no catalog read
        rows = self._catalog()
        exact = [g for g in rows if wanted.lower() in (g.id.lower(), (g.name or "").lower())]
        found = exact or [g for g in rows if matches_gpu(g, wanted)]
        if len(found) != 1:
            names = ", ".join(sorted(g.name or g.id for g in (found or rows))[:8])
            raise ConfigError(
                f"RunPod has {'no' if not found else 'several'} GPU types matching {wanted!r}",
                hint=f"use one of: {names}",
            )
        cloud = cloud_for(found[0], self.cloud_type)
        if cloud is None:
            raise ConfigError(
                f"RunPod does not offer {found[0].name or found[0].id} in {self.cloud_type} cloud",
                hint="pick another GPU type (`gpuc offers --provider runpod`) or set GPUC_RUNPOD_CLOUD_TYPE",
            )
        return found[0].id, cloud

    # -- read --

    def get(self, pod_id: str) -> Pod | None:
        """None only after two 404 problems, RECHECK_DELAY_S apart: one "not found" may be a moment's lag,
        and a pod read as gone while it lives bills unwatched."""
        first = self._read(pod_id)
        if first is not None:
            return first
        self.clock.sleep(self.recheck_delay_s)
        again = self._read(pod_id)
        if again is not None:
            log.info("runpod: pod %s: one 404 then found: not gone", pod_id)
        return again

    def _read(self, pod_id: str) -> Pod | None:
        path = self._pod_path(pod_id)
        reply = self.http.request("GET", path, accept=(404,))
        if reply.status == 404:
            require(is_problem_404(reply.body), PROVIDER, f"404 from {path} is not a RunPod problem body")
            return None
        return parse_v2_pod(reply.body)

    def list_pods(self) -> list[Pod]:
        return [p for p in (pod_from_v2(v) for v in self.v2_pods().values()) if p.status != "terminated"]

    def v2_pods(self) -> dict[str, V2Pod]:
        """Every page of GET /v2/pods (limit + cursor). A chain that breaks raises: never an empty account."""
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
            hint="the paging looks broken; report it with the request id",
        )

    def balance(self) -> Balance:
        """GraphQL: v2 has the bill's history, not the balance (R5)."""
        myself = self.legacy_graphql(BALANCE_QUERY).get("myself")
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
        rows = [g for g in self._catalog() if gpu is None or matches_gpu(g, gpu)]
        offers = [o for o in (offer_from_catalog(g, self.cloud_type) for g in rows) if o is not None]
        return sorted(offers, key=lambda o: o.price_per_hour)

    def _catalog(self) -> list[CatalogGpu]:
        return catalog_rows(self.http.request("GET", f"{self.rest_url}/catalog/gpus", params=CATALOG_PARAMS).body)

    # -- stop / start / destroy --

    def stop(self, pod_id: str) -> None:
        """The volume stays (and bills); the GPU is released."""
        self._action(pod_id, "stop", settled=("stopped", "paused"))

    def start(self, pod_id: str) -> None:
        """Only `gpuc results` resumes, to copy a kept pod's volume. RunPod may bring it back with zero GPUs
        when its machine has none free (docs): enough to copy from."""
        self._action(pod_id, "start", settled=("running", "provisioning"))

    def _action(self, pod_id: str, action: str, settled: tuple[PodStatus, ...]) -> None:
        """POST /v2/pods/{id}/action. A resend after a lost answer hears 409 (not valid in the new status):
        the pod already where it was sent is success, read back to be sure."""
        path = f"{self._pod_path(pod_id)}/action"
        reply = self.http.request("POST", path, json={"action": action}, accept=(404, 409))
        if reply.status == 404:
            require(is_problem_404(reply.body), PROVIDER, f"404 from {path} is not a RunPod problem body")
            raise NotFound(f"pod {pod_id} no longer exists at RunPod", hint="`gpuc ls` shows live pods")
        if reply.status == 409:
            pod = self.get(pod_id)
            if pod is not None and pod.status in settled:
                return
            raise ProviderError(
                f"RunPod refused to {action} pod {pod_id} ({problem_words(reply, self.http)})",
                provider=PROVIDER,
                status=409,
                request_id=reply.request_id,
                hint="`gpuc ls` shows its status now; run the command again once it has settled",
            )

    def destroy(self, pod_id: str) -> DestroyResult:
        """DELETE (never stop: a stopped pod bills its volume), then read again to confirm. A 404 problem is
        "already gone"; the confirmation reads it twice more before believing it."""
        path = self._pod_path(pod_id)
        result: DestroyResult = "destroyed"
        reply = self.http.request("DELETE", path, accept=(404,))
        if reply.status == 404:
            require(is_problem_404(reply.body), PROVIDER, f"404 from {path} is not a RunPod problem body")
            result = "already_gone"
            log.info("runpod: pod %s was already gone", pod_id)
        if not self.gone_for_sure(pod_id):
            raise ProviderError(
                f"pod {pod_id} is still listed after its DELETE",
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


# ---- inside the pod ----------------------------------------------------------------------------------
