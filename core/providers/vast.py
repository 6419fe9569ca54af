"""Vast.ai through its REST API: create = PUT /asks/{offer}/, list = the v1 paginated instance list (the v0
list is deprecated), DELETE /instances/{id}/, GET /users/current/, POST /bundles/.

Every request is one Vast's published OpenAPI documents, on its documented path (docs/providers.md names
the version; tests/providers/test_vast_conformance.py holds each to it): no field outside the documented
ones, so the create body carries no `client_id` (the official CLI's, absent from the spec and its
examples) and the documented `runtype` `ssh_direct`, and an on-demand search leaves `type` to its
documented default. A create is checked against the documented bounds first (a refusal here costs nothing
and says the fix), and an interruptible create against the offer's `min_bid`. The instance is handed the ssh
key `up` logs in with (attached after the create): Vast gives a new instance only the account's registered
keys, none on a new account.

Vast answers `success: false` with HTTP 200 at times, so every write checks `success` as well as the
status. Every request goes through the HttpClient choke point in core/providers/http.py.

The list is asked without `select_cols`, as the official SDK does: the spec says the default is every
column. A row without `extra_env` cannot show gpuc's ownership marker, so such a row raises instead of
being read as someone else's instance.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Unpack

from gpuc.core.clock import Clock
from gpuc.core.errors import ConfigError, GpucError, NotFound, ProviderError, ProviderSchemaError
from gpuc.core.pod import Pod
from gpuc.core.providers.answers import VAST_INSTANCE_ID_RE, vast_not_found
from gpuc.core.providers.base import DestroyResult
from gpuc.core.providers.common import HttpProvider, HttpTuning, api_key_of, pod_env
from gpuc.core.providers.endpoints import VAST_URL, vast_host
from gpuc.core.providers.http import BackoffFunction, HttpClient, Reply, require
from gpuc.core.providers.vast_bounds import check_create_bounds
from gpuc.core.providers.vast_instances import (
    PROVIDER,
    VastInstance,
    VastSshKey,
    VastUser,
    parse,
    parse_instance,
    pod_from_instance,
    spend_rate,
)
from gpuc.core.providers.vast_offers import BID_MARGIN, bundles_query, offer_for_bid, parse_offers
from gpuc.core.settings import Settings

if TYPE_CHECKING:
    import httpx

    from gpuc.core.models import Balance, Offer, PodSpec

log = logging.getLogger("gpuc.providers.vast")

DEFAULT_URL = VAST_URL
KEY_ENV = "VAST_API_KEY"
PAGE_SIZE = 25  # the v1 list's maximum
MAX_PAGES = 200  # 5000 instances: far past any personal account, so more means the pagination broke
# create_instance.yaml's enum: "Direct SSH connection. Port 22 is provisioned on the instance" (the API
# guide's choice for SSH only; the official CLI still sends the legacy "ssh_direc ssh_proxy"). Offers are
# asked with direct ports (DIRECT_PORTS) so that port can be provisioned.
RUNTYPE = "ssh_direct"
INSTANCE_ID_RE = VAST_INSTANCE_ID_RE


def refused(http: HttpClient, reply: Reply, what: str) -> ProviderError:
    body = reply.body if isinstance(reply.body, dict) else {}
    msg = http.redact(str(body.get("msg") or body.get("error") or "success: false")[:300])
    return ProviderError(f"{what}: {msg}", provider=PROVIDER, status=reply.status, request_id=reply.request_id)


class VastApi:
    """The calls on one instance (show, stop, destroy); the pod makes its own (core/providers/podkey.py)."""

    def __init__(self, http: HttpClient, url: str) -> None:
        self.http = http
        self.v0 = f"{vast_host(url)}/api/v0"
        self.v1 = f"{vast_host(url)}/api/v1"

    def instance_url(self, instance_id: str) -> str:
        if not INSTANCE_ID_RE.match(instance_id):
            raise NotFound(f"{instance_id!r} is not a Vast instance id", hint="`gpuc ls` shows the ids of your pods")
        return f"{self.v0}/instances/{instance_id}/"

    def delete(self, instance_id: str) -> DestroyResult:
        reply = self.http.request("DELETE", self.instance_url(instance_id), json={}, accept=(404,))
        if reply.status == 404:
            require(vast_not_found(reply.body), PROVIDER, "404 without Vast's not-found body")
            return "already_gone"
        if isinstance(reply.body, dict) and reply.body.get("success") is True:
            return "destroyed"
        if vast_not_found(reply.body):
            return "already_gone"
        # success:false with HTTP 200 is a failure, never a destroy (vast-cli's destroy_instance bug)
        raise refused(self.http, reply, f"destroy of instance {instance_id} refused")

    def set_state(self, instance_id: str, state: str) -> None:
        reply = self.http.request("PUT", self.instance_url(instance_id), json={"state": state})
        if not (isinstance(reply.body, dict) and reply.body.get("success") is True):
            raise refused(self.http, reply, f"{state} of instance {instance_id} refused")


class VastProvider(HttpProvider):
    name = PROVIDER
    # `create` hands the instance the public key `up` logs in with (PodSpec.ssh_public_key), attached after the
    # create: Vast puts only the account's registered keys on a new instance ("SSH keys must be registered
    # BEFORE creating an instance (VM: no recovery; Docker: can add post-create)"), none on a new account.
    takes_public_key = True

    def __init__(
        self,
        api_key: str,
        *,
        url: str = DEFAULT_URL,
        disk_gb: float | None = None,
        **tuning: Unpack[HttpTuning],
    ) -> None:
        super().__init__(api_key, KEY_ENV, **tuning)
        self.api = VastApi(self.http, url)
        self.disk_gb = disk_gb

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        transport: httpx.BaseTransport | None = None,
        clock: Clock | None = None,
        backoff: BackoffFunction | None = None,
    ) -> VastProvider:
        key = api_key_of(settings.vast_api_key, api="Vast.ai", key_env=KEY_ENV, example="...")
        return cls(
            key,
            url=settings.vast_url,
            timeout_s=settings.provider_timeout_s,
            clock=clock,
            backoff=backoff,
            transport=transport,
        )

    # -- create --

    def check_spec(self, spec: PodSpec) -> None:
        """What Vast would refuse of this spec (create_instance.yaml's bounds), before any call."""
        bid = spec.bid_per_gpu * spec.gpu_count if spec.interruptible and spec.bid_per_gpu else None
        self._create_body(spec, pod_env(spec), bid)

    def create(self, spec: PodSpec) -> Pod:
        env = pod_env(spec)
        offer_id, price, bid = self._offer_for(spec)
        body = self._create_body(spec, env, bid)

        def send() -> Pod:
            return self._send_create(offer_id, body, spec, bid if bid is not None else price)

        pod = self.create_named(spec.name, send)
        if spec.ssh_public_key:
            self._hand_key(pod.id, spec.ssh_public_key)
        return pod

    def _hand_key(self, pod_id: str, public_key: str) -> None:
        """POST /instances/{id}/ssh/ (attach_ssh.yaml): the key `up` logs in with, on the instance whatever the
        account has registered. Whether a key attached while the instance still loads reaches its sshd is
        UNCONFIRMED, so a refusal is said, never fatal: the account's registered keys still apply (`up` and
        `doctor` say whether gpuc's is among them), and an instance `up` cannot reach is destroyed."""
        try:
            reply = self.http.request("POST", f"{self.api.instance_url(pod_id)}ssh/", json={"ssh_key": public_key})
        except GpucError as exc:
            log.warning("vast: could not attach gpuc's ssh key to instance %s (%s)", pod_id, exc.message)
            return
        if not (isinstance(reply.body, dict) and reply.body.get("success") is True):
            said = refused(self.http, reply, "attach").message
            log.warning("vast: instance %s did not take gpuc's ssh key (%s)", pod_id, said)

    def registered_ssh_keys(self) -> list[str]:
        """GET /api/v0/ssh/ (show_ssh_keys.yaml): the public keys the account puts on a new instance. "404: No
        SSH keys found for the user" is an account with none; a deleted key is not one. Only ever said (a
        warning before renting), never acted on: a wrong reading costs a line, not money."""
        reply = self.http.request("GET", f"{self.api.v0}/ssh/", accept=(404,))
        if reply.status == 404:
            return []
        require(isinstance(reply.body, list), PROVIDER, "the ssh keys answer is not a list")
        rows = [parse(VastSshKey, row, "ssh key") for row in reply.body]
        return [row.key.strip() for row in rows if row.deleted_at is None]

    def _offer_for(self, spec: PodSpec) -> tuple[str, float | None, float | None]:
        """(offer id, on-demand price, bid per machine). Without an offer id, take the cheapest that passes
        the default filters (for a bid: the cheapest whose min_bid the bid clears)."""
        bid = spec.bid_per_gpu * spec.gpu_count if spec.interruptible and spec.bid_per_gpu else None
        if spec.offer_id:
            if spec.interruptible and bid is None:
                raise ConfigError(
                    "an interruptible Vast instance needs a bid",
                    hint="pass a bid per GPU (`gpuc offers --interruptible` shows min_bid)",
                )
            return spec.offer_id, spec.price_per_hour, bid
        found = self.offers(spec.gpu_type, spec.interruptible, num_gpus=spec.gpu_count)
        if not found:
            raise NotFound(
                f"no Vast offer for {spec.gpu_type} x{spec.gpu_count} passes the default filters",
                hint="run `gpuc offers --provider vast` and pass an offer id, or loosen the filters there",
            )
        best = found[0]
        if spec.interruptible and spec.bid_per_gpu:
            best = offer_for_bid(found, spec.bid_per_gpu, spec.gpu_type, spec.gpu_count)
        elif spec.interruptible and best.min_bid is not None:
            bid = round(best.min_bid * BID_MARGIN, 4)
        log.info("vast: using offer %s (%s at %.3f $/h)", best.id, best.gpu, best.price_per_hour)
        return best.id, best.price_per_hour, bid

    def _create_body(self, spec: PodSpec, env: Mapping[str, str], bid: float | None) -> dict[str, Any]:
        # create_instance.yaml's fields only (no `client_id`: the CLI's, not the spec's).
        body: dict[str, Any] = {
            "image": spec.image,
            # Vast has one local disk; it is sized like RunPod's volume (default 30 GB).
            "disk": float(self.disk_gb or max(spec.volume_gb, spec.container_disk_gb)),
            "label": spec.name,
            "env": dict(env),  # the object form (the API guide's, the official client's), not the flag string
            "runtype": RUNTYPE,
            # Fail instead of creating a STOPPED instance when the offer cannot be scheduled now: an
            # unschedulable bid would otherwise sit stopped, billing its disk. Sent explicitly because the
            # server's default depends on the rental type ("Defaults to false for interruptibles").
            "cancel_unavail": True,
        }
        if bid is not None:
            body["price"] = bid  # a bid makes it interruptible; without `price` it is on-demand
        if spec.onstart:
            body["onstart"] = spec.onstart
        check_create_bounds(body)
        return body

    def _send_create(self, offer_id: str, body: dict[str, Any], spec: PodSpec, price: float | None) -> Pod:
        if not INSTANCE_ID_RE.match(offer_id):
            raise NotFound(f"{offer_id!r} is not a Vast offer id", hint="`gpuc offers --provider vast` lists them")
        reply = self.http.request(
            "PUT", f"{self.api.v0}/asks/{offer_id}/", json=body, idempotent=False, accept=(400, 404, 410)
        )
        ok = isinstance(reply.body, dict) and reply.body.get("success") is True
        if not ok or reply.status >= 400:
            error = refused(self.http, reply, f"create from offer {offer_id} refused")
            if reply.status in (404, 410):
                # 410 also answers an offer that cannot be scheduled now (cancel_unavail), e.g. a low bid.
                error.hint = (
                    "the offer is gone or cannot be scheduled now (for a bid: below what the host gets); "
                    "nothing was created: run `gpuc offers --provider vast` again"
                )
            elif isinstance(reply.body, dict) and reply.body.get("error") == "invalid_price":
                error.hint = (
                    "Vast refused the bid (under the offer's min_bid, or out of range); nothing was created: "
                    "`gpuc offers --provider vast --interruptible` shows each offer's min_bid"
                )
            stray = reply.body.get("new_contract") if isinstance(reply.body, dict) else None
            if isinstance(stray, int) and not isinstance(stray, bool):
                self._destroy_failed_create(str(stray), error)
            raise error
        new_id = reply.body.get("new_contract")  # the instance id; the answer's instance_api_key is never kept
        require(isinstance(new_id, int), PROVIDER, "create answered without new_contract")
        log.info("vast: created %s (id %s)", spec.name, new_id)
        return Pod(
            provider=PROVIDER,
            id=str(new_id),
            name=spec.name,
            experiment=spec.experiment,
            status="provisioning",
            raw_status="created",
            gpu=spec.gpu_type,
            gpu_count=spec.gpu_count,
            price_per_hour=price,
            created_at=self.clock.now(),
            managed=True,
            interruptible="price" in body,
        )

    def _destroy_failed_create(self, instance_id: str, error: ProviderError) -> None:
        """A refused create that still names an instance (a losing bid without cancel_unavail: created
        STOPPED, billing its disk; dstack PR #4036) is destroyed and confirmed gone before the refusal is
        told. Whether the real server does this when cancel_unavail is sent is UNCONFIRMED: never trusted."""
        log.warning("vast: the refused create left instance %s; destroying it", instance_id)
        try:
            self.destroy(instance_id)
        except GpucError as exc:
            error.hint = (
                f"the refused create left instance {instance_id}, and its destroy did not complete ({exc}): "
                f"run `gpuc down {instance_id}` (it bills its disk until gone)"
            )
            return
        error.hint = f"the refused create left instance {instance_id}; it was destroyed and is confirmed gone"

    # -- read --

    def get(self, pod_id: str) -> Pod | None:
        # No `owner=me`: the official client sends it, show_instance.yaml and its examples do not.
        reply = self.http.request("GET", self.api.instance_url(pod_id))
        body = reply.body
        require(isinstance(body, dict) and "instances" in body, PROVIDER, "instance answer has no instances")
        if body["instances"] is None:
            return None  # Vast's positive "not found or no longer exists"
        require(isinstance(body["instances"], dict), PROVIDER, "instances is not one object")
        # An empty object says nothing about the instance: never a status made up from defaults.
        require(bool(body["instances"]), PROVIDER, "instances is an empty object")
        # The docs' own example omits `id`; the id we asked for is the one it is about.
        return parse_instance({"id": pod_id, **body["instances"]})

    def list_pods(self) -> list[Pod]:
        pods = [pod_from_instance(inst) for inst in self._instances()]
        return [p for p in pods if p.status != "terminated"]

    def _instances(self) -> list[VastInstance]:
        """Every page of the v1 list. A page that breaks the chain raises: never a shorter account."""
        seen: dict[int, VastInstance] = {}
        tokens: set[str] = set()
        token: str | None = None
        for _ in range(MAX_PAGES):
            body = self._page(token)
            for item in body["instances"]:
                require(
                    isinstance(item, dict) and "extra_env" in item,
                    PROVIDER,
                    "an instance row without extra_env: gpuc cannot tell its own instances from others",
                )
                inst = parse(VastInstance, item, "instance")
                require(inst.id not in seen, PROVIDER, f"instance {inst.id} listed twice: the pagination broke")
                seen[inst.id] = inst
            token = body.get("next_token")
            if not token:
                return list(seen.values())  # null or "": the official SDK ends on either
            require(isinstance(token, str), PROVIDER, "next_token is not a string")
            require(token not in tokens, PROVIDER, "the same next_token came back twice: the pagination loops")
            tokens.add(token)
        raise ProviderSchemaError(
            f"the instance list goes on past {MAX_PAGES} pages",
            provider=PROVIDER,
            hint="the pagination looks broken; gpuc will not act on a partial list",
        )

    def _page(self, token: str | None) -> dict[str, Any]:
        # GET arguments are JSON-encoded, then URL-quoted (vast-cli _build_url); the token goes as it is.
        # No select_cols: see the module docstring.
        params = {
            "select_filters": json.dumps({}),
            "order_by": json.dumps([{"col": "id", "dir": "asc"}]),
            "limit": str(PAGE_SIZE),
        }
        if token is not None:
            params["after_token"] = token
        reply = self.http.request("GET", f"{self.api.v1}/instances/", params=params)
        body = reply.body
        require(isinstance(body, dict), PROVIDER, "instance list is not an object")
        if body.get("success") is False:
            raise refused(self.http, reply, "instance list refused")
        require(isinstance(body.get("instances"), list), PROVIDER, "instance list has no instances list")
        return body  # type: ignore[no-any-return]

    def balance(self) -> Balance:
        # The body holds the account API key: it is parsed for `credit` and dropped, never logged.
        # The documented path ends in "/" (show_user.yaml; the CLI calls it without): gpuc never follows a
        # redirect, so it asks the path the spec gives.
        reply = self.http.request("GET", f"{self.api.v0}/users/current/")
        require(isinstance(reply.body, dict), PROVIDER, "users/current is not an object")
        user = parse(VastUser, reply.body, "user")
        from gpuc.core.models import Balance  # pydantic: only `balance` and `doctor` build one, never `ls`

        # V5: Vast has no spend-rate field and no spend limit: the rate is computed from the instances.
        return Balance(
            provider=PROVIDER,
            balance_usd=user.credit,
            spend_per_hour=spend_rate(self._instances()),
            spend_rate_source="computed",
        )

    def offers(
        self,
        gpu: str | None = None,
        interruptible: bool = False,
        *,
        verified: bool | None = True,
        min_reliability: float | None = 0.98,
        min_inet_down: float | None = 200.0,
        max_inet_down_cost: float | None = 0.01,
        max_storage_cost: float | None = 0.3,
        num_gpus: int | None = 1,
        min_cuda: float | None = 12.4,
        allocated_storage_gb: float = 30.0,
    ) -> list[Offer]:
        """POST /bundles/ with the five default filters; pass None to drop one. Cheapest first."""
        filters: dict[str, tuple[str, Any] | None] = {
            "verified": ("eq", verified) if verified is not None else None,
            "reliability": ("gt", min_reliability) if min_reliability is not None else None,
            "inet_down": ("gt", min_inet_down) if min_inet_down is not None else None,
            "inet_down_cost": ("lt", max_inet_down_cost) if max_inet_down_cost is not None else None,
            "storage_cost": ("lt", max_storage_cost) if max_storage_cost is not None else None,
            "num_gpus": ("eq", num_gpus) if num_gpus is not None else None,
            "cuda_max_good": ("gte", min_cuda) if min_cuda is not None else None,
        }
        query = bundles_query(gpu, interruptible, filters, allocated_storage_gb)
        reply = self.http.request("POST", f"{self.api.v0}/bundles/", json=query)
        return parse_offers(reply.body)

    def offer(self, offer_id: str, interruptible: bool = False, allocated_storage_gb: float = 30.0) -> Offer | None:
        """One offer by its id (search_offers.yaml's `id` filter), while it is rentable; None when not."""
        if not INSTANCE_ID_RE.match(offer_id):
            raise NotFound(f"{offer_id!r} is not a Vast offer id", hint="`gpuc offers --provider vast` lists them")
        query = bundles_query(None, interruptible, {"id": ("eq", int(offer_id))}, allocated_storage_gb)
        query.pop("direct_port_count")  # an offer the user named is priced as it is
        reply = self.http.request("POST", f"{self.api.v0}/bundles/", json=query)
        return next((o for o in parse_offers(reply.body) if o.id == offer_id), None)

    # -- stop / destroy --

    def stop(self, pod_id: str) -> None:
        self.api.set_state(pod_id, "stopped")

    def start(self, pod_id: str) -> None:
        """PUT state running. Vast starts it on the SAME machine only, when that machine has the GPUs free;
        until then it may sit in "scheduling" (read as provisioning), billing its disk only."""
        self.api.set_state(pod_id, "running")

    def destroy(self, pod_id: str) -> DestroyResult:
        """DELETE (idempotent: already gone is success), then read it back until Vast says it is gone."""
        result = self.api.delete(pod_id)
        if result == "already_gone":
            log.info("vast: instance %s was already gone", pod_id)
        if not self.gone_for_sure(pod_id):
            raise ProviderError(
                f"instance {pod_id} is still listed after the destroy",
                provider=PROVIDER,
                hint=f"run `gpuc down {pod_id}` again; the reaper re-checks it on its next run",
            )
        return result
