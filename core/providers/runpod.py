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
- `GET /v2/pods` does not page (`{pods}`; unknown query parameters are ignored): gpuc asks for the list with
  no parameter, and follows a `pagination.nextCursor` only if one ever comes back;
- `startSsh` injects the account's REGISTERED keys, and with none registered "does nothing and the pod has no
  SSH access": gpuc sends the key it logs in with as `PUBLIC_KEY` in the create's env (the flag injects
  nothing "unless the request already sets one"), and `up`/`doctor` say when that key is not registered;
- a persistent volume under 10 GB is a 422 ("Upstream enforces a 10 GB floor"): refused here first, with the
  fix (`check_spec`);
- the catalog's stock is for `count` GPUs on one pod (default 1): read with the pod's count, and a count past
  `maxCount` is no offer;
- a 403 on create is "your account cannot access the requested pool" (not a bad key): the next cloud that
  offers the GPU at no more than the price shown is tried, and the refusal says so;
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
from typing import TYPE_CHECKING, Any, Unpack
from urllib.parse import quote

from gpuc.core.clock import Clock
from gpuc.core.errors import ConfigError, NotFound, ProviderError, ProviderSchemaError
from gpuc.core.pod import Pod, PodStatus
from gpuc.core.providers.base import DestroyResult
from gpuc.core.providers.common import HttpProvider, HttpTuning, ProviderAnswer, api_key_of, pod_env
from gpuc.core.providers.endpoints import RUNPOD_GRAPHQL_URL, RUNPOD_REST_URL
from gpuc.core.providers.http import BackoffFunction, require
from gpuc.core.providers.runpod_catalog import (
    CatalogGpu,
    CloudType,
    Placement,
    catalog_rows,
    clouds_of,
    matches_gpu,
    not_offered,
    offer_from_choices,
    placement,
    ranked,
)
from gpuc.core.providers.runpod_graphql import BALANCE_QUERY, NOTIFY_FIELDS, UserBalance, legacy_graphql
from gpuc.core.providers.runpod_pods import PROVIDER, V2Pod, gpu_display, parse, parse_v2_pod, pod_from_v2
from gpuc.core.providers.runpod_refusals import (
    CREATE_REFUSALS,
    PoolDenied,
    create_refused,
    is_problem_404,
    pools_denied,
    problem_words,
)
from gpuc.core.settings import Settings

if TYPE_CHECKING:
    import httpx

    from gpuc.core.models import Balance, Offer, PodSpec

log = logging.getLogger("gpuc.providers.runpod")

DEFAULT_GRAPHQL_URL = RUNPOD_GRAPHQL_URL
DEFAULT_REST_URL = RUNPOD_REST_URL
KEY_ENV = "RUNPOD_API_KEY"
VOLUME_MOUNT = "/workspace"
# ssh only: no Jupyter port, nothing else exposed.
PORTS = ("22/tcp",)
SPOT_GONE = "RunPod interruptible (spot) pods are no longer offered through its public API"
SPOT_HINT = "rent on-demand on RunPod (drop --interruptible), or use --provider vast for interruptible"
# GET /v2/pods does not page (the 2026-08 spec: `{pods}`); should RunPod add paging, a `pagination.nextCursor`
# is followed (its shape a guess: UNCONFIRMED), for at most this many pages.
MAX_V2_PAGES = 100
# PersistentMount.size: "Upstream enforces a 10 GB floor" (a 422 past it).
MIN_VOLUME_GB = 10
# What RunPod's images read to start sshd (R7, the v2 spec's startSsh): gpuc's own key, sent with the create.
PUBLIC_KEY_ENV = "PUBLIC_KEY"
PUBLIC_KEY_RE = re.compile(r"^(ssh|ecdsa|sk)-[^\s]+ [^\s]+([ \t][^\n\r]*)?$")
POD_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A create whose outcome is unknown (timeout, reset mid-exchange) is looked up by name before any second
# create, for this long: a new pod reaches GET /v2/pods only after a lag (unmeasured at RunPod; the emulator's
# `list_lag_s` drills it), and a second create while the first is still unlisted bills two pods.
LOOKUP_WINDOW_S = 45.0
LOOKUP_DELAY_S = 3.0
# "Not found" is read twice, this far apart, before a pod counts as gone: gone stops the reaper watching it.
RECHECK_DELAY_S = 1.0
# Stock for pods (`product`), with the availability; `count` and `cloud` scope it (catalog_params).
CATALOG_PARAMS = {"product": "POD", "include": "AVAILABILITY"}


class SshKeys(ProviderAnswer):
    """GET /v2/account/ssh-keys: the account's registered public keys, authorized_keys lines."""

    keys: list[str]


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
    takes_public_key = True  # the create carries the key gpuc logs in with (PUBLIC_KEY)

    def check_spec(self, spec: PodSpec) -> None:
        """What RunPod would refuse, or rent unusable, refused before any call (and again by `create`)."""
        if spec.interruptible:
            raise ConfigError(SPOT_GONE, hint=SPOT_HINT)
        if spec.volume_gb < MIN_VOLUME_GB:
            raise ConfigError(
                f"a {spec.volume_gb} GB volume is too small for RunPod: it refuses a pod volume under "
                f'{MIN_VOLUME_GB} GB ("Upstream enforces a 10 GB floor"); nothing was created',
                hint=f"ask for --volume-gb {MIN_VOLUME_GB} or more (gpuc's default is 30): the volume holds "
                "/workspace, where results/ lives",
            )
        key = spec.ssh_public_key
        if key is not None and not PUBLIC_KEY_RE.match(key.strip()):
            raise ConfigError(
                "the ssh public key for the pod is not one line `<type> <base64> [comment]`",
                hint="point GPUC_SSH_KEY_PATH at a private key whose .pub beside it is an OpenSSH public key "
                "(ssh-keygen -y -f KEY > KEY.pub rewrites it)",
            )

    def create(self, spec: PodSpec) -> Pod:
        """POST /v2/pods in the first cloud that offers the GPU type for this count (`_placements`); after a
        403 ("your account cannot access the requested pool") the next one, if its price is within what the
        user was shown (spec.price_per_hour, else the first's): a dearer pool is never rented unasked."""
        self.check_spec(spec)
        env = pod_env(spec)
        if spec.ssh_public_key is not None:
            # startSsh injects the account's registered keys "unless the request already sets one": with
            # none registered, a pod without this has no ssh at all, and `up` could not reach what it pays for.
            env[PUBLIC_KEY_ENV] = spec.ssh_public_key.strip()
        gpu_id, choices = self._placements(spec.gpu_type, spec.gpu_count)
        ceiling = max(spec.price_per_hour or 0.0, choices[0].per_gpu * spec.gpu_count)
        denied: list[PoolDenied] = []
        skipped: list[str] = []
        for choice in choices:
            price = choice.per_gpu * spec.gpu_count
            if denied and price > ceiling + 1e-9:
                skipped.append(f"{choice.cloud} (${price:.3f}/h, above the ${ceiling:.3f}/h shown)")
                continue
            if denied:  # said where the user reads it: the pod is rented elsewhere than first asked
                log.warning("runpod: %s; asking in %s cloud instead ($%.3f/h)", denied[-1].said, choice.cloud, price)
            try:
                return self._create_in(spec, gpu_id, choice.cloud, env)
            except PoolDenied as exc:
                denied.append(exc)
        raise pools_denied(denied, skipped, gpu_display(gpu_id) or gpu_id)

    def _create_in(self, spec: PodSpec, gpu_id: str, cloud: str, env: Mapping[str, str]) -> Pod:
        body = self._create_request(spec, gpu_id, cloud, env)

        def send() -> Pod:
            reply = self.http.request(
                "POST", f"{self.rest_url}/pods", json=body, idempotent=False, accept=CREATE_REFUSALS
            )
            if reply.status in CREATE_REFUSALS:
                raise create_refused(reply, self.http, gpu_display(gpu_id) or gpu_id, cloud)
            return self._created(reply.body, spec)

        return self.create_named(spec.name, send)

    def _create_request(self, spec: PodSpec, gpu_id: str, cloud: str, env: Mapping[str, str]) -> dict[str, Any]:
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

    def _placements(self, wanted: str, count: int) -> tuple[str, list[Placement]]:
        """The catalog id ("NVIDIA GeForce RTX 4090", not what users type) and the clouds to ask in, first
        first, read for a pod of `count` GPUs."""
        catalog = self._catalog(count)
        rows = {g.id: g for per_cloud in catalog.values() for g in per_cloud.values()}
        exact = [g for g in rows.values() if wanted.lower() in (g.id.lower(), (g.name or "").lower())]
        found = exact or [g for g in rows.values() if matches_gpu(g, wanted)]
        if len(found) != 1:
            names = ", ".join(sorted(g.name or g.id for g in (found or list(rows.values())))[:8])
            raise ConfigError(
                f"RunPod has {'no' if not found else 'several'} GPU types matching {wanted!r}",
                hint=f"use one of: {names}",
            )
        gpu = found[0]
        choices = self._choices(catalog, gpu.id, count)
        if not choices:
            raise not_offered(gpu, self.cloud_type, count)
        return gpu.id, choices

    def _choices(self, catalog: Mapping[str, Mapping[str, CatalogGpu]], gpu_id: str, count: int) -> list[Placement]:
        found = [
            p
            for cloud, rows in catalog.items()
            if gpu_id in rows and (p := placement(rows[gpu_id], cloud, count)) is not None
        ]
        return ranked(found)

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
        """GET /v2/pods: every pod in one answer (v2 does not page). Should an answer ever carry a
        `pagination.nextCursor`, it is followed; a chain that breaks raises: never an empty account."""
        pods: dict[str, V2Pod] = {}
        cursors: set[str] = set()
        params: dict[str, str] = {}
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
            params = {"cursor": cursor}
        raise ProviderSchemaError(
            f"the v2 pod list goes on past {MAX_V2_PAGES} pages",
            provider=PROVIDER,
            hint="the paging looks broken; report it with the request id",
        )

    def registered_ssh_keys(self) -> list[str]:
        """GET /v2/account/ssh-keys: the public keys `startSsh` would put on a pod (authorized_keys lines)."""
        body = self.http.request("GET", f"{self.rest_url}/account/ssh-keys").body
        return parse(SshKeys, body, "ssh keys").keys

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

    def offers(self, gpu: str | None = None, interruptible: bool = False, *, num_gpus: int = 1) -> list[Offer]:
        """Offers for pods of `num_gpus` GPUs: the whole pod's price, and the stock for that many (the catalog
        read with `count`: stock for one GPU says nothing of four on one machine)."""
        if interruptible:
            raise ConfigError(SPOT_GONE, hint=SPOT_HINT)
        catalog = self._catalog(num_gpus)
        rows = {g.id: g for per_cloud in catalog.values() for g in per_cloud.values() if g.id != "unknown"}
        wanted = [g for g in rows.values() if gpu is None or matches_gpu(g, gpu)]
        offers = [o for g in wanted if (o := offer_from_choices(self._choices(catalog, g.id, num_gpus), num_gpus))]
        return sorted(offers, key=lambda o: o.price_per_hour)

    def pod_offer(self, wanted: str, count: int) -> Offer:
        """The offer `create` would take first for `count` GPUs of `wanted`: what `up` quotes (ConfigError
        when RunPod cannot rent it: a GPU type it does not sell, a count past its largest pod)."""
        _, choices = self._placements(wanted, count)
        offer = offer_from_choices(choices, count)
        assert offer is not None  # _placements raises rather than answer no choice
        return offer

    def _catalog(self, count: int) -> dict[str, dict[str, CatalogGpu]]:
        """GET /v2/catalog/gpus once per cloud asked for: the availability is scoped by `count` and `cloud`."""
        catalog: dict[str, dict[str, CatalogGpu]] = {}
        for cloud in clouds_of(self.cloud_type):
            params = {**CATALOG_PARAMS, "count": str(count), "cloud": cloud}
            body = self.http.request("GET", f"{self.rest_url}/catalog/gpus", params=params).body
            catalog[cloud] = {g.id: g for g in catalog_rows(body)}
        return catalog

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
