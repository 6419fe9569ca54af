"""A Vast.ai emulator: the v0 endpoints gpuc and the official vastai CLI/SDK call and the v1 paginated
instance list, as Vast's published OpenAPI (vast-ai/docs `api-reference/openapi/yaml/`, the version
docs/providers.md names) and its guides describe them, and accepting what the official clients send
(tests/providers/test_official_clients.py holds it to them): the SDK's create payload with its optional
keys sent as null, `PUT /search/asks/`, reboot, recycle, bid price change, bulk stop/start/delete and
`/instances/filters/`. The retired v0 list `GET /api/v0/instances/` answers 410 `deprecated_endpoint`.
tests/providers/vast_spec.py is the published contract in the project's words; the conformance test
holds every answer here to it.

Strict where the spec is: a create body with a field Vast does not document (the official client's
`client_id` and `extra` excepted), a value of the wrong type, or one out of its documented bounds
(`disk` >= 8, `price` 0.001-128, `label` <= 256, `image` <= 1024, env values <= 256 and 32768 in all,
args + args_str + onstart <= 4096, `runtype` from the documented set or the CLI's legacy tokens) is
refused with 400 `{"success": false, "error": "invalid_args", "msg": ...}`; `image` is required unless a
template is named. `env` is taken in both documented forms: create_instance.yaml's Docker-flag string
(`-e K=V -p 8000:8000`) and the API guide's object (`{"K": "V", "-p 8000:8000": "1"}`), which the
official client sends. Whether Vast rejects unknown create fields is UNCONFIRMED: this emulator does, so
gpuc may send only documented ones. The documented bodies answer an unknown offer (404), a taken offer
(410), a bid under the offer's `min_bid` (400 `invalid_price`), a missing instance (DELETE 404 not_found;
GET 200 `{"instances": null}`, from the official client's tests), a bad key (401 auth_error), a 429
(plain text, no Retry-After: "often plain text", rate-limits-and-errors.mdx).

Lenient where the spec is: the v1 list ignores query parameters it does not document, treats a `limit`
<= 0 as 5 and caps it at 25, sorts on any column (`id` appended as the tiebreaker, a `dir` other than
asc/desc read as asc), answers every column by default and for `select_cols=["*"]` and `null` for an
unknown column; a bad filter or sort column is 400 `invalid_request`, a bad token 400 `invalid_token`.
A bundles search takes `type` as the spec's `ondemand` or the CLI's `on-demand` (the spec's default:
on-demand) and `allocated_storage` defaults to 8 GB.

Instance rows carry only properties show_instance.yaml / show_instances.yaml name. The two disagree on
`extra_env` (strings vs [key, value] pairs) and `ports` (a list of ints vs an object of mappings): the
list's forms are served on both routes, as the official SDK reads both (it turns `extra_env` pairs into a
dict after `show_instance`, and reads `ports["22/tcp"]` from it). `ports` is "only present on running
instances"; `onstart` is left out when none was given (a string in the list's schema).

State: instances go loading -> running after `boot_polls` observations or `boot_s` seconds; stop,
outbid (is_bid, actual stopped, intended running), frozen, exited, unknown, offline, vanished. A start
(PUT state running) runs on the instance's OWN machine only: while that machine is taken
(`occupy_machine`) the start sits in "scheduling", billing the disk only, until `free_machine` (the docs
name the "scheduling" state; which field carries it is UNCONFIRMED: `actual_status` here).
A create with `target_state: "stopped"` makes a stopped instance.
`users/current/` answers with the account key inside, as the official client's `show_user` expects (it
pops `api_key`): gpuc must never log it.

Billing: `GET /api/v0/charges/` (documented query parameters only, show_charges.yaml) answers one entry
per instance contract, broken down into `gpu` (time running or frozen x the rented price) and `disk`
(time the instance existed x its storage price, which runs while stopped too) items, computed from the
instance's real life in the emulator's clock. Tests plant extra or wrong charges with plant_charge and
set_charge_factor.

`cancel_unavail`: an offer may have a going price for bids (`winning_bid`); a bid below it cannot be
scheduled now. With cancel_unavail (sent true, or left out on an on-demand rent with target_state
running: the documented defaults, "false for interruptibles") the create answers 410 and nothing is made;
without it the instance is created STOPPED, bills its disk, and the create answers an ERROR that carries
`new_contract` (dstack PR #4036; the status and `error` are this emulator's: 400 `invalid_price`,
UNCONFIRMED). `ignore_cancel_unavail=True` plays a server that does not honour it.

Interruptible life (priority: on-demand > higher bid > lower bid): `outbid(id, by=price)` is another renter
bidding more on the machine: the instance is paused (actual stopped, intended running, processes killed
through `on_pause`, disk kept and billed) and a signed outbid webhook is queued (the account's webhook
subscribed to `client:outbid`); `outbidder_leaves(id)` (or a bid raised to at least the going price) resumes
it through loading.
Webhooks, as Vast sends them (vast-ai/docs notification-webhooks.mdx; `webhook_secret`, `webhook_id`,
`webhooks` the deliveries queued, `on_webhook` called with each as it is sent): the headers `X-Vast-Event-Id`,
`X-Vast-Delivery-Attempt` (1, 2, ...), `X-Vast-Timestamp` (integer Unix time) and `X-Vast-Signature-256:
sha256=<hex HMAC-SHA256 over "<timestamp>.<raw body>">`; the body's `notif_type` is the short slug (`outbid`,
never the subscription key `client:outbid`). Delivered at least once (`deliver_twice`: the same event again,
attempt 2). `POST /api/v0/webhooks/{id}/test/` sends a signed `webhook_test` delivery (documented; its
answer's body is this emulator's own: UNCONFIRMED). The payload has no instance id (documented: none; whether
`message` names it is UNCONFIRMED: this emulator names it in `message`).

SSH keys: the account's registered keys (`ssh_keys`, none on a new account: `GET /api/v0/ssh/` then answers
404, "No SSH keys found for the user") go onto each instance at its create; `POST /api/v0/instances/{id}/ssh/`
attaches one more ("Docker: can add post-create"). Each instance keeps the keys its sshd would take.

Instance keys may show, start/stop, reboot and destroy their own instance. `pod_key_not_found=True`
answers their destroy with the documented not-found body while the instance lives on (a refusal that
looks like "already gone": the case the self-destroy must not believe).

Texts the docs do not give (the 410 of the retired list, the filters and bulk answers, the quota 429) are
this emulator's own and say so in the code.

Fault ops: create, get, list, list_v0, filters, stop, stop_bulk, reboot, bid, destroy, destroy_bulk,
balance, offers, billing, ssh_keys, attach_key, webhook_test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import re
import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuc.core.clock import Clock
from gpuc.testkit.emulators.billing import BillingBook, Lifeline, Planted
from gpuc.testkit.emulators.common import Emulator, EmuRequest, EmuResponse, Route, new_key

CREATE_FIELDS: dict[str, tuple[type | tuple[type, ...], ...]] = {
    "client_id": (str,),
    "image": (str,),
    "disk": (int, float),
    "env": (dict, str),  # create_instance.yaml: a Docker-flag string; the API guide and the SDK: an object
    "onstart": (str,),
    "runtype": (str,),
    "args": (list,),
    "args_str": (str,),
    "label": (str,),
    "price": (int, float, type(None)),
    "cancel_unavail": (bool,),
    "target_state": (str,),
    "template_hash_id": (str,),
    "image_login": (str,),
    "python_utf8": (bool,),
    "lang_utf8": (bool,),
    "use_jupyter_lab": (bool,),
    "jupyter_dir": (str,),
    "force": (bool,),
    "user": (str,),
    "vm": (bool,),
    "extra": (str,),
    "volume_info": (dict,),
}
# Sent by the official client, never by the spec's examples: accepted, never required; a null refused.
NOT_NULL_CREATE_FIELDS = frozenset({"client_id"})
IMAGE_MAX = 1024  # create_instance.yaml x-input-validation
RUNTYPE_TOKENS = frozenset(
    {
        "ssh",
        "ssh_proxy",
        "ssh_direct",
        "ssh_direc",
        "jupyter",
        "jupyter_proxy",
        "jupyter_direct",
        "jupyter_direc",
        "args",
    }
)
STORED_COLUMNS = frozenset({"actual_status", "gpu_name", "verification", "id", "label"})
FILTER_OPS = frozenset({"eq", "neq", "gt", "gte", "lt", "lte", "in", "notin"})
OFFER_FIELDS = frozenset(
    {
        "id", "ask_contract_id", "machine_id", "host_id", "gpu_name", "num_gpus", "gpu_ram", "gpu_total_ram",
        "gpu_mem_bw", "gpu_frac", "compute_cap", "cuda_max_good", "cuda_vers", "driver_version", "dlperf",
        "dlperf_per_dphtotal", "total_flops", "flops_per_dphtotal", "dph_base", "dph_total", "dph",
        "discounted_dph_total", "min_bid", "storage_cost", "inet_down", "inet_up", "inet_down_cost",
        "inet_up_cost", "reliability", "reliability2", "verified", "verification", "rentable", "rented",
        "external", "datacenter", "geolocation", "direct_port_count", "disk_space", "disk_bw", "cpu_cores",
        "cpu_cores_effective", "cpu_ram", "cpu_ghz", "cpu_arch", "gpu_arch", "pci_gen", "pcie_bw",
        "bw_nvlink", "duration", "end_date", "is_bid", "score", "static_ip", "vms_enabled", "hosting_type",
        "cluster_id", "has_avx", "gpu_max_power", "gpu_max_temp", "gpu_display_active", "mobo_name", "os_version",
        "ubuntu_version",
    }
)  # fmt: skip
OFFER_ALIASES = {"cuda_vers": "cuda_max_good", "dph": "dph_total"}
BUNDLE_KEYS = frozenset({"order", "limit", "type", "allocated_storage", "disable_bundling"})
# search_offers.yaml's enum is ondemand | bid | reserved; the official CLI sends "on-demand" (and the spec's
# own example does): both are taken.
SEARCH_TYPES = frozenset({"ondemand", "on-demand", "bid", "reserved"})
ACTUAL = ("loading", "running", "stopped", "outbid", "frozen", "exited", "unknown", "offline")
CHARGE_PARAMS = frozenset({"select_filters", "format", "latest_first", "limit", "after_token", "api_key"})
CHARGE_TYPES = frozenset({"instance", "volume", "serverless"})
CHARGE_ITEM_TYPES = ("gpu", "disk", "bwd", "bwu")
# "GPU charges apply" while running or frozen (vast-cli SKILL.md); storage bills from creation to destroy.
GPU_BILLED = frozenset({"running", "frozen"})
MISSING_DAY = "Must provide both 'day' gte and lte filters for instance charges"


@dataclass
class VastOfferState:
    id: int
    gpu_name: str
    dph_base: float
    min_bid: float
    num_gpus: int = 1
    reliability: float = 0.995
    inet_down: float = 800.0
    inet_down_cost: float = 0.003
    storage_cost: float = 0.15  # $/GB/month
    verified: bool = True
    cuda_max_good: float = 12.8
    gpu_ram: int = 24564
    gpu_mem_bw: float = 1008.0
    geolocation: str = "Oregon, US"
    direct_port_count: int = 100  # open ports on the host: 0 means no direct ssh (proxy only)
    rented: bool = False
    winning_bid: float | None = None  # a bid below this cannot be scheduled now (another renter outbids it)
    machine_id: int = field(default_factory=lambda: secrets.randbelow(90000) + 10000)

    def view(self, allocated_storage: float) -> dict[str, Any]:
        storage_hour = self.storage_cost * allocated_storage / (30 * 24)
        return {
            "id": self.id,
            "ask_contract_id": self.id,
            "bundle_id": self.id * 10,
            "machine_id": self.machine_id,
            "host_id": self.machine_id + 7,
            "gpu_name": self.gpu_name,
            "num_gpus": self.num_gpus,
            "gpu_ram": self.gpu_ram,
            "gpu_total_ram": self.gpu_ram * self.num_gpus,
            "gpu_mem_bw": self.gpu_mem_bw,
            "cuda_max_good": self.cuda_max_good,
            "driver_version": "550.54.15",
            "dph_base": self.dph_base,
            "dph_total": round(self.dph_base + storage_hour, 6),
            "min_bid": self.min_bid,
            "storage_cost": self.storage_cost,
            "inet_down": self.inet_down,
            "inet_up": self.inet_down / 2,
            "inet_down_cost": self.inet_down_cost,
            "inet_up_cost": self.inet_down_cost,
            "reliability": self.reliability,
            "reliability2": self.reliability,
            "verification": "verified" if self.verified else "unverified",
            # A machine whose higher bidder holds it now is rented to them: not offered until they leave.
            "rentable": not self.rented and self.winning_bid is None,
            "rented": self.rented or self.winning_bid is not None,
            "external": False,
            "geolocation": self.geolocation,
            "direct_port_count": self.direct_port_count,
            "disk_space": 500.0,
            "is_bid": False,
            "score": round(100 / max(self.dph_base, 0.01), 3),
        }


DEFAULT_OFFERS = (
    VastOfferState(11684738, "RTX 4090", 0.34, 0.20),
    VastOfferState(11684739, "RTX 4090", 0.29, 0.17, reliability=0.97),  # fails reliability > 0.98
    VastOfferState(11684740, "RTX 4090", 0.31, 0.18, inet_down=120.0),  # fails inet_down > 200
    VastOfferState(11684741, "RTX 3090", 0.15, 0.07),
    VastOfferState(11684742, "RTX 3090", 0.12, 0.06, verified=False),  # fails verified
    VastOfferState(11684743, "A100 SXM4", 0.83, 0.34, gpu_ram=81920, gpu_mem_bw=2039.0),
    VastOfferState(11684744, "H100 SXM", 2.07, 1.34, gpu_ram=81920, gpu_mem_bw=3352.0),
    VastOfferState(11684745, "RTX 4090", 0.25, 0.15, cuda_max_good=12.2),  # fails cuda >= 12.4
    VastOfferState(11684746, "RTX 4090", 0.66, 0.30, num_gpus=2),  # fails num_gpus = 1
    VastOfferState(11684747, "L4", 0.33, 0.13, storage_cost=0.5),  # fails storage_cost < 0.3
)


@dataclass
class VastInst:
    id: int
    offer: VastOfferState
    label: str | None
    image: str
    disk: float
    env: dict[str, str]
    runtype: str
    bid: float | None
    key: str
    start_date: float
    polls_left: int
    actual: str | None = None
    intended: str = "running"
    cur_state: str = "running"
    status_msg: str | None = None
    gpu_util: float = 0.0
    ssh_port: int = 20000
    lag_polls: int | None = None  # after a destroy: observations left before it disappears
    onstart: str | None = None  # run by the container at every start (testkit/platform.py runs it)
    # The public keys its sshd takes: the account's registered ones at the create, and any attached since.
    ssh_keys: list[str] = field(default_factory=list)

    def dph_total(self) -> float:
        storage = self.offer.storage_cost * self.disk / (30 * 24)
        return round((self.bid if self.bid is not None else self.offer.dph_base) + storage, 6)

    def storage_total_cost(self) -> float:
        return round(self.offer.storage_cost * self.disk / (30 * 24), 6)


class VastEmulator(Emulator):
    provider = "vast"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        clock: Clock | None = None,
        boot_polls: int = 2,
        boot_s: float | None = None,
        credit: float = 25.0,
        bills_down: bool = False,
        destroy_lag_polls: int = 0,
        offers: tuple[VastOfferState, ...] = DEFAULT_OFFERS,
        ssh_endpoint: tuple[str, int] | None = None,
        pod_key_not_found: bool = False,
        ignore_cancel_unavail: bool = False,
    ) -> None:
        super().__init__(clock)
        self.api_key = api_key or new_key("")
        self.boot_polls = boot_polls
        self.boot_s = boot_s
        self.credit = credit  # what was put in; with bills_down, what the instances billed comes off it
        self.bills_down = bills_down
        self.destroy_lag_polls = destroy_lag_polls
        # An instance key's destroy of its own instance hears the not-found body; the instance lives on.
        self.pod_key_not_found = pod_key_not_found
        self.ignore_cancel_unavail = ignore_cancel_unavail
        # Interruptible life: what a pause does to the instance's processes (the local sandbox kills them),
        # the account's webhook secret and the deliveries queued (at least once).
        self.on_pause: Callable[[str], None] | None = None
        self.webhook_secret = secrets.token_hex(16)
        self.webhook_id = 42  # the account's one webhook (the docs' example id)
        self.webhooks: list[WebhookDelivery] = []
        self.on_webhook: Callable[[WebhookDelivery], None] | None = None  # Vast POSTing it to the webhook's URL
        self.deliver_twice = False
        self._events = itertools.count(1)
        self.offers = {o.id: VastOfferState(**o.__dict__) for o in offers}
        # Where every instance's direct ssh port points, e.g. a local sshd for a demo.
        self.ssh_endpoint = ssh_endpoint
        self.instances: dict[int, VastInst] = {}
        self.busy_machines: set[int] = set()  # machines whose GPUs someone else holds: starts wait
        # The account's registered ssh keys (a new account has none: GET /ssh/ answers 404, as documented).
        # "SSH keys must be registered BEFORE creating an instance (... Docker: can add post-create)".
        self.ssh_keys: list[str] = []
        self.destroyed: set[int] = set()
        # instance key -> instance id; a key outlives its instance (it then hears "not found": UNCONFIRMED)
        self.instance_keys: dict[str, int] = {}
        # Every instance ever billed (destroyed ones too) and its life in billing states.
        self.billed: dict[str, VastInst] = {}
        self.billing_book = BillingBook()
        self._ids = itertools.count(31_000_000)
        self._ssh_ports = itertools.count(20000, 7)
        self._foreign_offers = itertools.count(9_000_000)

    # ---- test-driving API ----

    def set_status(self, instance_id: int | str, state: str) -> None:
        """loading | running | stopped | outbid | frozen | exited | unknown | offline | vanished"""
        with self._lock:
            inst = self.instances[int(instance_id)]
            if state == "vanished":
                self._remove(inst)
                self._track()
                return
            if state not in ACTUAL:
                raise ValueError(f"unknown state {state!r}; use one of {(*ACTUAL, 'vanished')}")
            inst.actual = "stopped" if state == "outbid" else state
            inst.intended = "stopped" if state == "stopped" else "frozen" if state == "frozen" else "running"
            inst.cur_state = "stopped" if state in ("stopped", "outbid") else "running"
            inst.polls_left = self.boot_polls if state == "loading" else 0
            self._track()

    def set_gpu_util(self, instance_id: int | str, pct: float) -> None:
        with self._lock:
            self.instances[int(instance_id)].gpu_util = pct

    def vanish(self, instance_id: int | str) -> None:
        self.set_status(instance_id, "vanished")

    def outbid(self, instance_id: int | str, *, by: float | None = None) -> None:
        """Another renter bids `by` (default: 0.01 above this bid) on the machine: the instance pauses."""
        with self._lock:
            inst = self.instances[int(instance_id)]
            if inst.bid is None:
                raise ValueError("an on-demand instance is never outbid (on-demand outranks every bid)")
            going = round(inst.bid + 0.01, 4) if by is None else by
            if going <= inst.bid:
                raise ValueError(f"a bid of {going} does not outbid {inst.bid}")
            inst.offer.winning_bid = going
            inst.actual, inst.intended, inst.cur_state, inst.polls_left = "stopped", "running", "stopped", 0
            inst.status_msg = "outbid: paused"
            self._queue_webhook("outbid", f"Your interruptible instance {inst.id} was outbid and paused")
            self._track()
        if self.on_pause:
            self.on_pause(str(inst.id))  # "killing running processes"; disk kept

    def outbidder_leaves(self, instance_id: int | str) -> None:
        """The higher bid ends: every paused bid on the machine at or above the going price resumes."""
        with self._lock:
            inst = self.instances[int(instance_id)]
            inst.offer.winning_bid = None
            for other in self.instances.values():
                if other.offer.machine_id == inst.offer.machine_id and paused_bid(other):
                    other.actual, other.cur_state, other.polls_left = "loading", "running", self.boot_polls
                    other.status_msg = None
            self._track()

    def _queue_webhook(self, notif_type: str, message: str, subject: str = "Instance outbid") -> None:
        """One event, signed as Vast signs it; `deliver_twice`: at least once, the same event as attempt 2."""
        now = int(self.clock.now())
        event_id = f"evt_{next(self._events):06d}"
        body = json.dumps(
            {
                "event_id": event_id,
                "user_id": 1001,
                "notif_type": notif_type,
                "subject": subject,
                "message": message,
                "timestamp": now,
            }
        ).encode()
        for attempt in (1, 2) if self.deliver_twice else (1,):
            delivery = WebhookDelivery(sign_webhook(self.webhook_secret, now, body, event_id, attempt), body)
            self.webhooks.append(delivery)
            if self.on_webhook is not None:
                self.on_webhook(delivery)

    def occupy_machine(self, instance_id: int | str) -> None:
        """Someone else rents the GPUs of this instance's machine: a start of it waits ("scheduling")."""
        with self._lock:
            self.busy_machines.add(self.instances[int(instance_id)].offer.machine_id)

    def free_machine(self, instance_id: int | str) -> None:
        with self._lock:
            inst = self.instances[int(instance_id)]
            self.busy_machines.discard(inst.offer.machine_id)
            for other in self.instances.values():
                if other.offer.machine_id == inst.offer.machine_id and other.actual == "scheduling":
                    other.actual, other.cur_state, other.polls_left = "loading", "running", self.boot_polls
            self._track()

    def add_offer(self, offer: VastOfferState) -> None:
        with self._lock:
            self.offers[offer.id] = offer

    def add_foreign_pod(
        self, label: str | None = "my-notebook", *, env: dict[str, str] | None = None, state: str = "running"
    ) -> str:
        with self._lock:
            # rented before gpuc looked: its offer is not in the catalogue
            offer = VastOfferState(next(self._foreign_offers), "RTX 3090", 0.18, 0.08)
            inst = self._new_instance(offer, label, "pytorch/pytorch", 16.0, dict(env or {}), "ssh", None)
            inst.actual, inst.polls_left = state, 0
            self._track()
            return str(inst.id)

    def plant_charge(
        self, instance_id: int | str, kind: str, amount: float, start: float, end: float | None = None
    ) -> None:
        """Put a charge item (gpu|disk|bwd|bwu) on an instance's contract that its life does not explain;
        an unknown id is a contract the ledger never saw."""
        if kind not in CHARGE_ITEM_TYPES:
            raise ValueError(f"Vast charge items are {', '.join(CHARGE_ITEM_TYPES)}, not {kind!r}")
        with self._lock:
            self.billing_book.plant(str(instance_id), kind, amount, start, start if end is None else end)

    def set_charge_factor(self, instance_id: int | str, factor: float) -> None:
        """Bill this instance at `factor` x what its life costs (1.25: 25 % over the ledger)."""
        with self._lock:
            self.billing_book.set_factor(str(instance_id), factor)

    def pod_environ(self, instance_id: int | str) -> dict[str, str]:
        """What Vast injects into the container: its id and the instance-scoped key."""
        with self._lock:
            inst = self.instances[int(instance_id)]
            return {
                "CONTAINER_ID": str(inst.id),
                "CONTAINER_API_KEY": inst.key,
                "VAST_CONTAINERLABEL": f"C.{inst.id}",
            }

    def client_env(self, base_url: str) -> dict[str, str]:
        return {"GPUC_VAST_URL": f"{base_url}/api/v0", "VAST_API_KEY": self.api_key}

    def alive(self) -> list[VastInst]:
        with self._lock:
            return [i for i in self.instances.values() if i.lag_polls is None]

    # ---- routing ----

    def route(self, request: EmuRequest) -> Route | None:
        method, path = request.method, request.path
        if not path.endswith("/"):
            path += "/"
        match = re.fullmatch(r"/api/v0/asks/([^/]+)/", path)
        if match and method == "PUT":
            return "create", lambda r: self.create(r, match.group(1))
        # Before the show-instance route: "filters" is not an instance id.
        if path == "/api/v0/instances/filters/" and method == "GET":
            return "filters", self.filters
        acted = re.fullmatch(r"/api/v0/instances/(reboot|recycle|bid_price)/([^/]+)/", path)
        if acted and method == "PUT":
            kind, raw = acted.group(1), acted.group(2)
            if kind == "bid_price":
                return "bid", lambda r: self.change_bid(r, raw)
            return "reboot", lambda r: self.reboot(r, raw, recycle=kind == "recycle")
        attach = re.fullmatch(r"/api/v0/instances/([^/]+)/ssh/", path)
        if attach and method == "POST":
            return "attach_key", lambda r: self.attach_key(r, attach.group(1))
        match = re.fullmatch(r"/api/v0/instances/([^/]+)/", path)
        if match:
            handlers = {
                "GET": ("get", self.show),
                "PUT": ("stop", self.manage),
                "DELETE": ("destroy", self.destroy),
            }
            if method in handlers:
                op, handler = handlers[method]
                return op, lambda r: handler(r, match.group(1))
        hook = re.fullmatch(r"/api/v0/webhooks/([^/]+)/test/", path)
        if hook and method == "POST":
            return "webhook_test", lambda r: self.test_webhook(r, hook.group(1))
        simple = {
            ("GET", "/api/v1/instances/"): ("list", self.list_v1),
            ("GET", "/api/v0/instances/"): ("list_v0", self.list_v0),
            ("PUT", "/api/v0/instances/"): ("stop_bulk", self.manage_bulk),
            ("DELETE", "/api/v0/instances/"): ("destroy_bulk", self.destroy_bulk),
            ("GET", "/api/v0/users/current/"): ("balance", self.user),
            ("GET", "/api/v0/ssh/"): ("ssh_keys", self.show_ssh_keys),
            ("POST", "/api/v0/bundles/"): ("offers", self.bundles),
            ("PUT", "/api/v0/search/asks/"): ("offers", self.search_asks),
            ("GET", "/api/v0/charges/"): ("billing", self.charges),
        }
        return simple.get((method, path))

    def not_found(self, request: EmuRequest) -> EmuResponse:
        return EmuResponse.json(404, {"success": False, "error": "not_found", "msg": "no such endpoint"})

    def fault_answer(self, op: str, kind: str) -> EmuResponse:
        if kind == "search_quota":
            # vast-cli's is_search_quota_exceeded reads `error`; the msg and the reset header are ours.
            reset = str(int(self.clock.now() // 86400 + 1) * 86400)  # the next UTC midnight
            body = {"success": False, "error": "search_quota_exceeded", "msg": "Daily search quota exceeded"}
            return EmuResponse.json(429, body, {"X-RateLimit-Reset": reset})
        if kind == "429":
            # Vast: plain text, and no Retry-After header
            return EmuResponse.text(429, "API requests too frequent endpoint threshold=4.5")
        if kind == "success_false":
            return EmuResponse.json(200, {"success": False, "error": "server_error", "msg": "Something went wrong"})
        if kind in ("502", "504"):
            return EmuResponse(
                int(kind), b"<html><body><h1>Bad Gateway</h1></body></html>", {"content-type": "text/html"}
            )
        return EmuResponse.json(int(kind), {"success": False, "error": "server_error", "msg": "emulated failure"})

    def drift(self, op: str, kind: str, answer: EmuResponse) -> EmuResponse:
        body = answer.decoded()
        if not isinstance(body, dict):
            return answer
        if kind == "broken_pagination" and op in ("list", "billing"):
            return EmuResponse.json(200, {**body, "next_token": "eyJ2YWx1ZXMiOiB7ImlkIjogMH19"})
        if op == "billing":
            # Charges renamed and reshaped: what an API revision might answer. Never "no charges".
            return EmuResponse.json(answer.status, {**body, "results": None, "charges": body.get("results")})
        renamed = {
            "instances": "results",
            "offers": "bundles",
            "credit": "credits",
            "new_contract": "contract",
        }
        return EmuResponse.json(answer.status, {renamed.get(k, k): v for k, v in body.items()})

    def empty_envelope(self, op: str, *, item: bool) -> Any:
        return {"instances": {} if item else []}

    # ---- auth ----

    def caller(self, request: EmuRequest) -> str | int | None:
        """ "account", the id of the instance whose instance key this is, or None."""
        key = request.bearer()
        if not key:
            return None
        if secrets.compare_digest(key, self.api_key):
            return "account"
        return next((iid for k, iid in self.instance_keys.items() if secrets.compare_digest(key, k)), None)

    def _auth(self, request: EmuRequest, instance_id: int | None = None) -> EmuResponse | None:
        who = self.caller(request)
        if who is None:
            return EmuResponse.json(401, {"success": False, "error": "auth_error", "msg": "Invalid user key"})
        if who != "account" and who != instance_id:
            # The instance key "can only start, stop, or destroy that specific instance" (and show it).
            return EmuResponse.json(
                403, {"success": False, "error": "auth_error", "msg": "this API key may not do that"}
            )
        return None

    def _authed_body(self, request: EmuRequest, instance_id: int | None = None) -> tuple[Any, EmuResponse | None]:
        """The caller checked (as `_auth`), then the JSON body: (body, None) or (None, the refusal)."""
        refused = self._auth(request, instance_id)
        if refused:
            return None, refused
        return self._json_body(request)

    def _search_body(self, request: EmuRequest) -> tuple[Any, EmuResponse | None]:
        """Searches take no key or a valid one (a wrong key is refused, none is anonymous)."""
        if request.bearer() is not None and self.caller(request) is None:
            return None, EmuResponse.json(401, {"success": False, "error": "auth_error", "msg": "Invalid user key"})
        return self._json_body(request)

    @staticmethod
    def _json_body(request: EmuRequest) -> tuple[Any, EmuResponse | None]:
        try:
            return request.json(), None
        except ValueError:
            return None, invalid(400, "Invalid args: the body is not JSON")

    # ---- webhooks ----

    def test_webhook(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        """`POST /api/v0/webhooks/{id}/test/`: a signed `webhook_test` delivery, as a real one is sent."""
        refused = self._auth(request)
        if refused:
            return refused
        if not raw_id.isdigit() or int(raw_id) != self.webhook_id:
            return EmuResponse.json(404, {"success": False, "error": "not_found", "msg": "webhook not found"})
        self._queue_webhook("webhook_test", "This is a test notification.", subject="Webhook test")
        return EmuResponse.json(200, {"success": True})

    # ---- create ----

    def create(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        refused = self._auth(request)
        if refused:
            return refused
        ask_id = int(raw_id) if raw_id.isdigit() else 0
        try:
            body = request.json()
        except ValueError:
            return invalid(400, "Invalid args: the body is not JSON", ask_id)
        problem = create_problem(body)
        if problem:
            return invalid(400, f"error 400/3467: Invalid args: {problem}", ask_id)
        offer = self.offers.get(ask_id)
        price = body.get("price")
        unavailable = offer_refusal(offer, ask_id, price)
        if unavailable or offer is None:
            return unavailable or invalid(404, "no such offer", ask_id)
        # A bid under the going price cannot be scheduled now. cancel_unavail left out (or null): "Defaults to
        # false for interruptibles. Defaults to true for on-demand with target_state='running'".
        running = (body.get("target_state") or "running") == "running"
        cancel = body.get("cancel_unavail")
        cancel = (price is None and running if cancel is None else cancel) and not self.ignore_cancel_unavail
        unschedulable = price is not None and offer.winning_bid is not None and price < offer.winning_bid
        if unschedulable and cancel and running:
            msg = f"error 410/3907: no_such_ask Instance type {ask_id} cannot be scheduled now (cancel_unavail)."
            return EmuResponse.json(410, {"success": False, "error": "no_such_ask", "msg": msg, "ask_id": ask_id})
        env = create_env(body.get("env")) or {}
        image, disk = body.get("image") or "", float(body.get("disk") or 8)
        inst = self._new_instance(offer, body.get("label"), image, disk, env, runtype_of(body), price)
        inst.onstart = body.get("onstart") or None
        if not running:
            inst.actual, inst.intended, inst.cur_state, inst.polls_left = "stopped", "stopped", "stopped", 0
        elif unschedulable:
            # Created, but waiting for the host: stopped, wanting to run, billing its disk meanwhile. The status
            # and `error` are this emulator's (UNCONFIRMED); `invalid_price` is one of the 400's documented values.
            inst.actual, inst.intended, inst.cur_state, inst.polls_left = "stopped", "running", "stopped", 0
            inst.status_msg = "waiting for the machine: outbid"
            msg = f"bid {price} is below what the host gets now: instance {inst.id} created stopped"
            refusal = {"success": False, "error": "invalid_price", "msg": msg, "ask_id": ask_id}
            return EmuResponse.json(400, {**refusal, "new_contract": inst.id})
        return EmuResponse.json(200, {"success": True, "new_contract": inst.id, "instance_api_key": inst.key})

    def _new_instance(
        self,
        offer: VastOfferState,
        label: str | None,
        image: str,
        disk: float,
        env: dict[str, str],
        runtype: str,
        bid: float | None,
    ) -> VastInst:
        inst = VastInst(
            id=next(self._ids),
            offer=offer,
            label=label,
            image=image,
            disk=disk,
            env=env,
            runtype=runtype,
            bid=bid,
            key=secrets.token_hex(32),
            start_date=self.clock.now(),
            polls_left=self.boot_polls,
            ssh_port=next(self._ssh_ports),
        )
        inst.ssh_keys = list(self.ssh_keys)
        offer.rented = True
        self.instances[inst.id] = inst
        self.instance_keys[inst.key] = inst.id
        return inst

    # ---- read ----

    def show(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        if not raw_id.isdigit():
            # show_instance.yaml: 400 "Invalid instance ID or invalid arguments"
            return invalid(400, f"error 400/1782: Invalid args: invalid instance id {raw_id[:40]!r}")
        instance_id = int(raw_id)
        refused = self._auth(request, instance_id)
        if refused:
            return refused
        inst = self.instances.get(instance_id)
        if inst is None:
            return EmuResponse.json(200, {"instances": None})  # Vast: "not found or no longer exists"
        self._observe(inst)
        if inst.id not in self.instances:
            return EmuResponse.json(200, {"instances": None})
        return EmuResponse.json(200, {"instances": self._view(inst)})

    def list_v1(self, request: EmuRequest) -> EmuResponse:
        refused = self._auth(request)
        if refused:
            return refused
        try:
            query = ListQuery.parse(request)
        except ListQueryError as exc:
            return EmuResponse.json(400, {"success": False, "error": exc.error, "msg": str(exc)})
        for inst in list(self.instances.values()):
            self._observe(inst)
        views = [self._view(i) for i in self.instances.values()]
        matching = query.ordered(
            [v for v in views if all(matches(v.get(col), rule) for col, rule in query.filters.items())]
        )
        after = after_token_rows(matching, query)
        page = after[: query.limit]
        more = len(after) > len(page)
        labels: dict[str, int] = {}
        for view in matching:
            labels[view.get("label") or ""] = labels.get(view.get("label") or "", 0) + 1
        return EmuResponse.json(
            200,
            {
                "success": True,
                "instances_found": len(page),
                "total_instances": len(matching),
                "label_counts": labels,
                "next_token": page_token(page[-1]["id"]) if more else None,
                "instances": [select_cols(v, query.cols) for v in page],
            },
        )

    def list_v0(self, request: EmuRequest) -> EmuResponse:
        refused = self._auth(request)
        if refused:
            return refused
        # Retired: the real server answers 410 deprecated_endpoint (the message text is this emulator's).
        msg = "GET /api/v0/instances/ is retired: use GET /api/v1/instances/ (paginated)"
        return EmuResponse.json(410, {"success": False, "error": "deprecated_endpoint", "msg": msg})

    def filters(self, request: EmuRequest) -> EmuResponse:
        """GET /instances/filters/: distinct values of the filterable columns (shape: this emulator's)."""
        refused = self._auth(request)
        if refused:
            return refused
        views = [self._view(i) for i in self.instances.values()]
        found = [
            {"col": col, "values": sorted({str(v[col]) for v in views if v.get(col) is not None})}
            for col in sorted(STORED_COLUMNS - {"id"})
        ]
        return EmuResponse.json(200, {"success": True, "filters": found})

    def credit_now(self) -> float:
        """The account's credit: what was put in, less what every instance billed so far when `bills_down` (its
        GPU and disk, as the charges route counts them), as a real account's credit goes down."""
        if not self.bills_down:
            return self.credit
        self._track()
        now = self.clock.now()
        whole = ChargeQuery(0.0, now + 1.0, None, True, 0, None)
        spent = sum(
            float(item["amount"])
            for pod_id, inst in self.billed.items()
            if (life := self.billing_book.lives.get(pod_id)) is not None
            for item in self._life_items(inst, life, whole, now)
        )
        return self.credit - spent - sum(p.amount for p in self.billing_book.planted)

    def user(self, request: EmuRequest) -> EmuResponse:
        refused = self._auth(request)
        if refused:
            return refused
        return EmuResponse.json(
            200,
            {
                "id": 123456,
                "key_id": 654321,
                "username": "emulated",
                "email": "you@example.com",
                "credit": round(self.credit_now(), 4),
                "balance": 0.0,
                "balance_threshold": 5.0,
                "balance_threshold_enabled": True,
                "can_pay": True,
                "has_billing": True,
                "ssh_key": "ssh-ed25519 AAAA... emulated",
                "api_key": self.api_key,  # as the real one does: the reason gpuc never logs this body
            },
        )

    def show_ssh_keys(self, request: EmuRequest) -> EmuResponse:
        """GET /api/v0/ssh/ (show_ssh_keys.yaml): a bare list of {id, user_id, key, created_at, deleted_at};
        "404: No SSH keys found for the user" (the body's words are this emulator's)."""
        refused = self._auth(request)
        if refused:
            return refused
        if not self.ssh_keys:
            return EmuResponse.json(404, {"success": False, "msg": "No SSH keys found for the user"})
        made = "2026-11-01T09:00:00Z"
        rows = [
            {"id": n, "user_id": 123456, "key": key, "created_at": made, "deleted_at": None}
            for n, key in enumerate(self.ssh_keys, 1)
        ]
        return EmuResponse.json(200, rows)

    def attach_key(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        """POST /api/v0/instances/{id}/ssh/ {"ssh_key": "<public key>"} (attach_ssh.yaml)."""
        instance_id = int(raw_id) if raw_id.isdigit() else -1
        body, refused = self._authed_body(request)
        if refused:
            return refused
        key = body.get("ssh_key") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) != {"ssh_key"} or not isinstance(key, str) or not key:
            return invalid(400, 'Invalid args: expected {"ssh_key": "<public key>"}')
        inst = self.instances.get(instance_id)
        if inst is None or inst.lag_polls is not None:
            return no_such_instance(raw_id)
        if key not in inst.ssh_keys:
            inst.ssh_keys.append(key)
        return EmuResponse.json(200, {"success": True, "msg": "SSH key attached successfully"})

    def bundles(self, request: EmuRequest) -> EmuResponse:
        body, refused = self._search_body(request)
        if refused:
            return refused
        return self._search(body)

    def search_asks(self, request: EmuRequest) -> EmuResponse:
        """PUT /search/asks/ {"select_cols": [...], "q": {...bundles query...}} (vast-cli `search offers --new`)."""
        body, refused = self._search_body(request)
        if refused:
            return refused
        if not isinstance(body, dict) or "q" not in body or set(body) - {"q", "select_cols"}:
            return invalid(400, 'Invalid args: expected {"select_cols": [...], "q": {...}}')
        cols = body.get("select_cols", ["*"])
        if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
            return invalid(400, "Invalid args: select_cols must be a list of column names")
        answer = self._search(body["q"])
        if answer.status != 200 or "*" in cols:
            return answer
        offers = answer.decoded()["offers"]
        return EmuResponse.json(200, {"offers": [select_cols(o, cols) for o in offers]})

    def _search(self, body: Any) -> EmuResponse:
        try:
            search = BundleSearch.parse(body)
        except ValueError as exc:
            return invalid(400, f"Invalid args: {exc}")
        views = [o.view(search.storage) for o in self.offers.values()]
        found = [v for v in views if all(matches(offer_value(v, k), rule) for k, rule in search.filters.items())]
        for col, direction in reversed(search.order):
            found.sort(key=sort_key(col), reverse=direction == "desc")
        return EmuResponse.json(200, {"offers": found[: search.limit]})

    def charges(self, request: EmuRequest) -> EmuResponse:
        refused = self._charges_auth(request)
        if refused:
            return refused
        try:
            query = ChargeQuery.parse(request)
        except ChargeQueryError as exc:
            return EmuResponse.json(400, exc.body)
        self._track()
        now = self.clock.now()
        wanted = query.types is None or "instance" in query.types
        contracts = [c for c in (self._contract(i, query, now) for i in self.billing_book.pod_ids()) if c]
        contracts = sorted(contracts if wanted else [], key=contract_id, reverse=query.latest_first)
        after = [
            c
            for c in contracts
            if query.after is None
            or (contract_id(c) < query.after if query.latest_first else contract_id(c) > query.after)
        ]
        page = after[: query.limit]
        more = len(after) > len(page)
        return EmuResponse.json(
            200,
            {
                "success": True,
                "count": len(page),
                "total": len(contracts),
                "next_token": page_token(contract_id(page[-1])) if more else None,
                "results": page,
            },
        )

    def _charges_auth(self, request: EmuRequest) -> EmuResponse | None:
        # show_charges.yaml: no Authorization is a 403, a key that matches no user a 404.
        if not request.bearer():
            return EmuResponse.json(
                403, {"success": False, "error": "auth_error", "msg": "This action requires login."}
            )
        who = self.caller(request)
        if who is None:
            return EmuResponse.json(404, {"success": False, "error": "auth_error", "msg": "Invalid user key"})
        if who != "account":
            return EmuResponse.json(
                403, {"success": False, "error": "auth_error", "msg": "this API key may not do that"}
            )
        return None

    def _contract(self, pod_id: str, query: ChargeQuery, now: float) -> dict[str, Any] | None:
        inst, life = self.billed.get(pod_id), self.billing_book.lives.get(pod_id)
        items = self._life_items(inst, life, query, now) if inst is not None and life is not None else []
        planted = [p for p in self.billing_book.planted_in(query.lo, query.hi) if p.pod_id == pod_id]
        items += [planted_item(p) for p in planted]
        items = [i for i in items if i["amount"] > 0]
        if not items:
            return None
        if inst is not None and life is not None:
            start, end = inst.start_date, life.segments[-1].end or now
            label = inst.label
        else:
            start, end, label = min(i["start"] for i in items), max(i["end"] for i in items), None
        return {
            "start": int(start),
            "end": int(end),
            "type": "instance",
            "source": f"instance-{pod_id}",
            "description": f"Instance {pod_id} Charges - {max(1, round((end - start) / 86400))} days",
            "amount": round(sum(i["amount"] for i in items), 3),
            "metadata": {"label": label} if label else {},
            "items": items,
        }

    def _life_items(self, inst: VastInst, life: Lifeline, query: ChargeQuery, now: float) -> list[dict[str, Any]]:
        factor = self.billing_book.factor(str(inst.id))
        rate = inst.bid if inst.bid is not None else inst.offer.dph_base
        items = []
        gpu_s = life.seconds({"compute"}, query.lo, query.hi, now)
        gpu_span = life.span({"compute"}, query.lo, query.hi, now)
        if gpu_span:
            words = f"{gpu_s / 3600:.3f} hours at ${rate:.3f}/hour"
            items.append(charge_item("gpu", gpu_span, gpu_s * rate / 3600 * factor, words))
        every = ("compute", "storage")
        disk_s = life.seconds(every, query.lo, query.hi, now)
        disk_span = life.span(every, query.lo, query.hi, now)
        if disk_span:
            words = f"{inst.disk:g} GB for {disk_s / 3600:.3f} hours"
            items.append(charge_item("disk", disk_span, disk_s * inst.storage_total_cost() / 3600 * factor, words))
        return items

    # ---- write ----

    def manage(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        """PUT /instances/{id}/ {"state": "running"|"stopped"} and/or {"label": ...} (manage_instance.yaml,
        whose errors are missing_billing, label_too_long, no_such_instance: a malformed body gets `msg` only)."""
        instance_id = int(raw_id) if raw_id.isdigit() else -1
        refused = self._auth(request, instance_id)
        if refused:
            return refused
        try:
            body = request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not body or set(body) - {"state", "label"}:
            return EmuResponse.json(400, {"success": False, "msg": "Invalid args: expected state and/or label"})
        if "state" in body and body["state"] not in ("running", "stopped"):
            return EmuResponse.json(400, {"success": False, "msg": "Invalid args: state must be running or stopped"})
        if "label" in body and (not isinstance(body["label"], str) or len(body["label"]) > 1024):
            return EmuResponse.json(400, {"success": False, "error": "label_too_long", "msg": "label too long"})
        inst = self.instances.get(instance_id)
        if inst is None or inst.lag_polls is not None:
            return no_such_instance(raw_id)
        if "state" in body:
            self._set_state(inst, body["state"])
        if "label" in body:
            inst.label = body["label"]
        return EmuResponse.json(200, {"success": True})

    def reboot(self, request: EmuRequest, raw_id: str, *, recycle: bool) -> EmuResponse:
        """PUT /instances/reboot/{id}/ (or recycle/): the container restarts, the contract stays."""
        instance_id = int(raw_id) if raw_id.isdigit() else -1
        refused = self._auth(request, instance_id) or self._empty_body(request)
        if refused:
            return refused
        inst = self.instances.get(instance_id)
        if inst is None or inst.lag_polls is not None:
            return no_such_instance(raw_id)
        if inst.intended != "running":
            return invalid(400, f"Invalid args: instance {raw_id} is not running")
        inst.actual, inst.polls_left = "loading", self.boot_polls
        if recycle:
            inst.gpu_util = 0.0
        return EmuResponse.json(200, {"success": True})

    def change_bid(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        """PUT /instances/bid_price/{id}/ {"client_id": "me", "price": float | null (= the going price)}."""
        instance_id = int(raw_id) if raw_id.isdigit() else -1
        body, refused = self._authed_body(request)
        if refused:
            return refused
        ok = isinstance(body, dict) and body.get("client_id") == "me" and set(body) <= {"client_id", "price"}
        price = body.get("price") if isinstance(body, dict) else None
        if not ok or (price is not None and (isinstance(price, bool) or not isinstance(price, int | float))):
            return invalid(400, 'Invalid args: expected {"client_id": "me", "price": <float or null>}')
        inst = self.instances.get(instance_id)
        if inst is None or inst.lag_polls is not None:
            return no_such_instance(raw_id)
        if inst.bid is None:
            return invalid(400, "Invalid args: an on-demand instance has no bid (it cannot become interruptible)")
        going = inst.offer.winning_bid if inst.offer.winning_bid is not None else inst.offer.min_bid
        new = float(price) if price is not None else going
        if new < inst.offer.min_bid:
            msg = f"bid below min_bid {inst.offer.min_bid}"
            return EmuResponse.json(400, {"success": False, "error": "invalid_price", "msg": msg})
        inst.bid = new
        waiting = inst.actual == "stopped" and inst.intended == "running"
        if waiting and new >= going:
            inst.actual, inst.cur_state, inst.polls_left, inst.status_msg = "loading", "running", self.boot_polls, None
        return EmuResponse.json(200, {"success": True})

    def manage_bulk(self, request: EmuRequest) -> EmuResponse:
        """PUT /instances/ {"ids": [...], "state": "running"|"stopped"} (answer shape: this emulator's)."""
        body, refused = self._authed_body(request)
        if refused:
            return refused
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) != {"ids", "state"} or not isinstance(ids, list) or not id_list(ids):
            return invalid(400, 'Invalid args: expected {"ids": [...], "state": "running"|"stopped"}')
        if body["state"] not in ("running", "stopped"):
            return invalid(400, "Invalid args: state must be running or stopped")
        done, missing = [], []
        for instance_id in ids:
            inst = self.instances.get(instance_id)
            if inst is None or inst.lag_polls is not None:
                missing.append(instance_id)
            else:
                self._set_state(inst, body["state"])
                done.append(instance_id)
        return EmuResponse.json(200, {"success": True, "updated": done, "not_found": missing})

    def destroy_bulk(self, request: EmuRequest) -> EmuResponse:
        """DELETE /instances/ {"instance_ids": [...]} (answer shape: this emulator's)."""
        body, refused = self._authed_body(request)
        if refused:
            return refused
        ids = body.get("instance_ids") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) != {"instance_ids"} or not isinstance(ids, list) or not id_list(ids):
            return invalid(400, 'Invalid args: expected {"instance_ids": [...]}')
        done, missing = [], []
        for instance_id in ids:
            inst = self.instances.get(instance_id)
            if inst is None or inst.lag_polls is not None:
                missing.append(instance_id)
            else:
                self._destroy_one(inst)
                done.append(instance_id)
        return EmuResponse.json(200, {"success": True, "destroyed": done, "not_found": missing})

    def _empty_body(self, request: EmuRequest) -> EmuResponse | None:
        try:
            body = request.json()
        except ValueError:
            return invalid(400, "Invalid args: the body is not JSON")
        return None if body in (None, {}) else invalid(400, "Invalid args: this call takes an empty body")

    def _destroy_one(self, inst: VastInst) -> None:
        if self.destroy_lag_polls > 0:
            inst.lag_polls = self.destroy_lag_polls  # still shown, unchanged, for a few reads
        else:
            self._remove(inst)

    def _set_state(self, inst: VastInst, state: str) -> None:
        if state == "stopped":
            inst.actual, inst.intended, inst.cur_state = "stopped", "stopped", "stopped"
        elif inst.offer.machine_id in self.busy_machines and inst.actual in ("stopped", "scheduling"):
            # Its machine's GPUs are taken: it waits for them there, never moves (V4).
            inst.intended, inst.cur_state, inst.actual = "running", "stopped", "scheduling"
        else:
            inst.intended, inst.cur_state, inst.actual = "running", "running", "loading"
            inst.polls_left = self.boot_polls

    def destroy(self, request: EmuRequest, raw_id: str) -> EmuResponse:
        if not raw_id.isdigit():
            return invalid(400, "invalid instance_id")
        instance_id = int(raw_id)
        body, refused = self._authed_body(request, instance_id)
        if refused:
            return refused
        if body not in (None, {}):
            return invalid(400, "Invalid args: destroy takes an empty body")
        inst = self.instances.get(instance_id)
        own_key = self.caller(request) == instance_id
        if inst is None or inst.lag_polls is not None or (own_key and self.pod_key_not_found):
            # pod_key_not_found: the instance key is refused in the words of "already gone"
            return EmuResponse.json(404, {"success": False, "error": "not_found", "msg": "Instance not found"})
        self._destroy_one(inst)
        return EmuResponse.json(200, {"success": True, "msg": "Instance destroyed successfully"})

    # ---- state ----

    def _track(self) -> None:
        """Record each instance's billing state as of now: called after every request and every
        test-driven change, so an instance's charges follow its real life in the emulator's clock."""
        now = self.clock.now()
        for inst in self.instances.values():
            key = str(inst.id)
            self.billed[key] = inst
            self.billing_book.observe(key, billing_state(inst), now, inst.start_date)
            if inst.lag_polls is not None:
                self.billing_book.end(key, now)  # destroyed: still listed for a while, no longer billed
        for key in self.billing_book.open_ids() - {str(i) for i in self.instances}:
            self.billing_book.end(key, now)

    def _observe(self, inst: VastInst) -> None:
        if inst.lag_polls is not None:
            inst.lag_polls -= 1
            if inst.lag_polls < 0:
                self._remove(inst)
            return
        if inst.actual not in (None, "loading") or inst.intended != "running":
            return
        inst.polls_left -= 1
        booted = self.boot_s is not None and self.clock.now() - inst.start_date >= self.boot_s
        inst.actual = "running" if inst.polls_left <= 0 or booted else "loading"

    def _remove(self, inst: VastInst) -> None:
        self.instances.pop(inst.id, None)
        self.destroyed.add(inst.id)
        inst.offer.rented = False

    def _direct_port(self, inst: VastInst) -> int:
        return self.ssh_endpoint[1] if self.ssh_endpoint else inst.ssh_port

    def _view(self, inst: VastInst) -> dict[str, Any]:
        """An instance row: show_instance.yaml's and show_instances.yaml's properties only (the two differ on
        `extra_env` and `ports`: the list's forms are served, which the official SDK reads from both)."""
        running = inst.actual == "running"
        offer = inst.offer
        view: dict[str, Any] = {
            "id": inst.id,
            "actual_status": inst.actual,
            "intended_status": inst.intended,
            "cur_state": inst.cur_state,
            "next_state": inst.cur_state,
            "label": inst.label,
            "image_uuid": inst.image,
            "image_runtype": inst.runtype,
            "extra_env": [[k, v] for k, v in inst.env.items()],
            "status_msg": inst.status_msg or (f"success, running {inst.image}" if running else None),
            "public_ipaddr": self.ssh_endpoint[0] if self.ssh_endpoint else "198.51.100.7",
            "ssh_host": f"ssh{inst.id % 9}.vast.ai",
            "ssh_idx": str(inst.id % 9),
            "ssh_port": inst.ssh_port + 1,
            "machine_id": offer.machine_id,
            "host_id": offer.machine_id + 7,
            "start_date": inst.start_date,
            "end_date": inst.start_date + 30 * 86400,
            "uptime_mins": round((self.clock.now() - inst.start_date) / 60, 2) if running else None,
            "gpu_name": offer.gpu_name,
            "num_gpus": offer.num_gpus,
            "gpu_ram": offer.gpu_ram,
            "gpu_util": inst.gpu_util if running else None,
            "gpu_temp": 41.0 if running else None,
            "disk_space": inst.disk,
            "dph_base": inst.bid if inst.bid is not None else offer.dph_base,
            "dph_total": inst.dph_total(),
            "storage_cost": offer.storage_cost,
            "storage_total_cost": inst.storage_total_cost(),
            "is_bid": inst.bid is not None,
            "min_bid": offer.min_bid,
            "reliability2": offer.reliability,
            "geolocation": offer.geolocation,
            "verification": "verified" if offer.verified else "unverified",
            "direct_port_count": offer.direct_port_count,
            "credit_balance": None,
            "time_remaining": "",
            "time_remaining_isbid": "",
        }
        if inst.onstart is not None:
            view["onstart"] = inst.onstart  # a string in the list's schema: left out when none was given
        if running:
            # "Port mappings. Only present on running instances."
            view["ports"] = {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(self._direct_port(inst))}]}
        return view


# Every column a row can have (show_instances.yaml names them): order_by takes these, anything else is a 400.
INSTANCE_COLUMNS = frozenset(
    {
        "id", "actual_status", "intended_status", "cur_state", "next_state", "label", "image_uuid",
        "image_runtype", "extra_env", "onstart", "status_msg", "public_ipaddr", "ssh_host", "ssh_idx",
        "ssh_port", "ports", "machine_id", "host_id", "start_date", "end_date", "uptime_mins", "gpu_name",
        "num_gpus", "gpu_ram", "gpu_util", "gpu_temp", "disk_space", "dph_base", "dph_total", "storage_cost",
        "storage_total_cost", "is_bid", "min_bid", "reliability2", "geolocation", "verification",
        "direct_port_count", "credit_balance", "time_remaining", "time_remaining_isbid",
    }
)  # fmt: skip


@dataclass(frozen=True)
class WebhookDelivery:
    headers: dict[str, str]
    body: bytes  # the raw body the signature covers


def sign_webhook(secret: str, timestamp: int, body: bytes, event_id: str, attempt: int = 1) -> dict[str, str]:
    """Vast's documented headers: HMAC-SHA256 over `<timestamp>.<raw body>`, hex, after `sha256=` in
    X-Vast-Signature-256 (notification-webhooks.mdx, notifications.yaml)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {
        "X-Vast-Event-Id": event_id,
        "X-Vast-Delivery-Attempt": str(attempt),
        "X-Vast-Timestamp": str(timestamp),
        "X-Vast-Signature-256": f"sha256={mac}",
        "Content-Type": "application/json",
    }


def paused_bid(inst: VastInst) -> bool:
    return inst.bid is not None and inst.actual == "stopped" and inst.intended == "running"


def billing_state(inst: VastInst) -> str:
    return "compute" if inst.actual in GPU_BILLED else "storage"


def charge_item(kind: str, span: tuple[float, float], amount: float, description: str) -> dict[str, Any]:
    return {
        "start": int(span[0]),
        "end": int(span[1]),
        "type": kind,
        "source": None,
        "description": description,
        "amount": round(amount, 3),  # "rounded to 3 decimals"
        "metadata": {},
        "items": [],
    }


def planted_item(charge: Planted) -> dict[str, Any]:
    return charge_item(charge.kind, (charge.start, charge.end), charge.amount, "planted by a test")


def contract_id(contract: dict[str, Any]) -> int:
    return int(str(contract["source"]).rsplit("-", 1)[1])


class ChargeQueryError(ValueError):
    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(str(body.get("msg")))
        self.body = body


@dataclass(frozen=True)
class ChargeQuery:
    """GET /api/v0/charges/ parameters; `day` bounds are unix seconds, both inclusive."""

    lo: float
    hi: float
    types: list[str] | None
    latest_first: bool
    limit: int
    after: int | None

    @classmethod
    def parse(cls, request: EmuRequest) -> ChargeQuery:
        extra = set(request.query) - CHARGE_PARAMS
        if extra:
            raise ChargeQueryError(invalid_body(f"unexpected query parameter {sorted(extra)[0]!r}"))
        try:
            filters = json_param(request, "select_filters", None)
            latest_first = json_param(request, "latest_first", True)
            limit = json_param(request, "limit", 100)
        except ValueError as exc:
            raise ChargeQueryError(invalid_body(str(exc))) from None
        lo, hi = day_range(filters)
        types = type_filter(filters)
        if request.param("format") not in (None, "table", "tree"):
            raise ChargeQueryError(invalid_body("format must be table or tree"))
        if not isinstance(latest_first, bool):
            raise ChargeQueryError(invalid_body("latest_first must be true or false"))
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 500:
            raise ChargeQueryError(invalid_body("limit must be an integer from 1 to 500"))
        try:
            after = token_id(request.param("after_token"))
        except ValueError:
            raise ChargeQueryError(
                {"success": False, "error": "invalid_token", "msg": "Invalid pagination token"}
            ) from None
        return cls(lo, hi, types, latest_first, limit, after)


def day_range(filters: Any) -> tuple[float, float]:
    if not isinstance(filters, dict):
        raise ChargeQueryError({"success": False, "msg": MISSING_DAY})
    unknown = set(filters) - {"day", "type"}
    if unknown:
        raise ChargeQueryError(invalid_body(f"cannot filter charges on {sorted(unknown)[0]!r}"))
    day = filters.get("day")
    if not isinstance(day, dict) or set(day) != {"gte", "lte"}:
        raise ChargeQueryError({"success": False, "msg": MISSING_DAY})
    lo, hi = day["gte"], day["lte"]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (lo, hi)):
        raise ChargeQueryError(invalid_body("day bounds are unix seconds"))
    return float(lo), float(hi) + 1.0  # lte is inclusive: the window ends after its last second


def type_filter(filters: dict[str, Any]) -> list[str] | None:
    rule = filters.get("type")
    if rule is None:
        return None
    ok = isinstance(rule, dict) and set(rule) == {"in"} and isinstance(rule["in"], list)
    if not ok or not set(rule["in"]) <= CHARGE_TYPES:
        raise ChargeQueryError(invalid_body('type takes {"in": [instance|volume|serverless, ...]}'))
    return list(rule["in"])


def invalid_body(msg: str) -> dict[str, Any]:
    return {"success": False, "error": "invalid_args", "msg": msg}


def offer_refusal(offer: VastOfferState | None, ask_id: int, price: float | None) -> EmuResponse | None:
    """The documented answers for an offer that cannot be rented (404 unknown, 410 taken, 400 low bid)."""
    if offer is None:
        msg = f"error 404/3603: no_such_ask Instance type by id {ask_id} is not available."
        return EmuResponse.json(404, {"success": False, "error": "invalid_args", "msg": msg, "ask_id": ask_id})
    if offer.rented:
        msg = f"error 410/3907: no_such_ask Instance type {ask_id} is no longer available."
        return EmuResponse.json(410, {"success": False, "error": "no_such_ask", "msg": msg, "ask_id": ask_id})
    if price is not None and price < offer.min_bid:
        msg = f"bid below min_bid {offer.min_bid}"
        return EmuResponse.json(400, {"success": False, "error": "invalid_price", "msg": msg, "ask_id": ask_id})
    return None


def no_such_instance(raw_id: str) -> EmuResponse:
    return EmuResponse.json(404, {"success": False, "error": "no_such_instance", "msg": f"Instance {raw_id} not found"})


def id_list(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    )


def invalid(status: int, msg: str, ask_id: int | None = None) -> EmuResponse:
    body: dict[str, Any] = {"success": False, "error": "invalid_args", "msg": msg}
    if ask_id is not None:
        body["ask_id"] = ask_id
    return EmuResponse.json(status, body)


def create_problem(body: Any) -> str | None:
    """Why a PUT /asks/ body is refused (create_instance.yaml's fields, types and bounds), or None."""
    if not isinstance(body, dict):
        return "the body must be an object"
    for name, value in body.items():
        allowed = CREATE_FIELDS.get(name)
        if allowed is None:
            return f"unexpected field {name!r}"
        if value is None and name not in NOT_NULL_CREATE_FIELDS:
            continue  # the official SDK sends every optional key, null when unset
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            return f"{name} has the wrong type"
    if body.get("client_id", "me") != "me":
        return "client_id must be 'me'"
    if not body.get("image") and not body.get("template_hash_id"):
        return "image is required"  # required: [image], "optional when using a template"
    if len(body.get("image") or "") > IMAGE_MAX:
        return f"image is at most {IMAGE_MAX} characters"
    if body.get("disk") is not None and body["disk"] < 8:
        return "disk must be at least 8 GB"
    env = create_env(body.get("env"))
    if env is None:
        return "env must be an object of strings, or -e KEY=VALUE / -p PORT:PORT flags"
    return env_problem(env) or label_problem(body) or launch_problem(body) or volume_problem(body.get("volume_info"))


ENV_FLAGS = {"-e", "-p", "-h"}


def create_env(value: Any) -> dict[str, str] | None:
    """The env as the object the API guide documents (`{"VAR": "val", "-p 8000:8000": "1"}`), from either
    form; None when it is neither. The string is create_instance.yaml's "Docker flag format"
    (`-e HF_TOKEN=x -p 8000:8000`); how Vast splits a quoted value is not documented: shell rules here."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()) else None
    try:
        words = shlex.split(value)
    except ValueError:
        return None
    env: dict[str, str] = {}
    for flag, arg in zip(words[::2], words[1::2], strict=False):
        if flag not in ENV_FLAGS:
            return None
        if flag == "-e":
            key, eq, val = arg.partition("=")
            if not key or not eq:
                return None
            env[key] = val
        else:
            env[f"{flag} {arg}"] = "1"  # a port map (or -h host), as the object form keys it
    return env if len(words) % 2 == 0 else None


def env_problem(env: dict[str, str]) -> str | None:
    if any(len(v) > 256 for v in env.values()):
        return "env values are at most 256 characters"
    if sum(len(k) + len(v) for k, v in env.items()) > 32768:
        return "env is at most 32768 characters"
    return None


def label_problem(body: dict[str, Any]) -> str | None:
    if len(body.get("label") or "") > 256:
        return "label is at most 256 characters"
    price = body.get("price")
    if price is not None and not 0.001 <= price <= 128:
        return "price must be between 0.001 and 128"
    if (body.get("target_state") or "running") not in ("running", "stopped"):
        return "target_state must be running or stopped"
    return None


def launch_problem(body: dict[str, Any]) -> str | None:
    tokens = runtype_of(body).split()
    if not tokens or any(t not in RUNTYPE_TOKENS for t in tokens):
        return "unknown runtype"
    args = body.get("args") or []
    if not all(isinstance(a, str) for a in args):
        return "args must be strings"
    if len(" ".join(args)) + len(body.get("args_str") or "") + len(body.get("onstart") or "") > 4096:
        return "args, args_str and onstart are at most 4096 characters together"
    return None


def runtype_of(body: dict[str, Any]) -> str:
    """create_instance.yaml: "If omitted, defaults to 'ssh' unless `args/args_str` is provided"."""
    return str(body.get("runtype") or ("args" if body.get("args") or body.get("args_str") else "ssh"))


VOLUME_FIELDS: dict[str, type] = {"create_new": bool, "volume_id": int, "size": int, "mount_path": str, "name": str}


def volume_problem(info: Any) -> str | None:
    """volume_info's documented properties and types (`name`: the official CLI's volume label)."""
    if info is None:
        return None
    for name, value in info.items():
        kind = VOLUME_FIELDS.get(name)
        if kind is None or isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
            return f"volume_info.{name} is not a documented {kind.__name__ if kind else 'field'}"
    return None


def json_param(request: EmuRequest, name: str, default: Any) -> Any:
    raw = request.param(name)
    if raw is None:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"{name} is not valid JSON") from None


def check_rules(rules: Any, allowed_columns: frozenset[str] | None, what: str) -> dict[str, dict[str, Any]]:
    if not isinstance(rules, dict):
        raise ValueError(f"{what} must be an object")
    for column, rule in rules.items():
        if allowed_columns is not None and column not in allowed_columns:
            raise ValueError(f"cannot filter on {column!r}: not a stored column")
        if not isinstance(rule, dict) or not rule or set(rule) - FILTER_OPS:
            raise ValueError(f"{what}[{column!r}] must map operators ({', '.join(sorted(FILTER_OPS))}) to values")
        for op in ("in", "notin"):
            if op in rule and not isinstance(rule[op], list):
                raise ValueError(f"{what}[{column!r}].{op} takes a list")
    return rules


class ListQueryError(ValueError):
    """A v1 list query show_instances.yaml answers 400: `error` is invalid_request or invalid_token."""

    def __init__(self, msg: str, error: str = "invalid_request") -> None:
        super().__init__(msg)
        self.error = error


@dataclass
class ListQuery:
    """GET /api/v1/instances/'s parameters as show_instances.yaml reads them; any other is ignored."""

    filters: dict[str, dict[str, Any]]
    order: list[tuple[str, bool]]  # (column, descending); `id` appended as the tiebreaker
    limit: int
    after: int | None
    cols: list[str] | None  # None: every column ("Use ["*"] for all columns (default)")

    @classmethod
    def parse(cls, request: EmuRequest) -> ListQuery:
        try:
            filters = check_rules(json_param(request, "select_filters", {}), STORED_COLUMNS, "select_filters")
            order = json_param(request, "order_by", [{"col": "id", "dir": "asc"}])
            limit = json_param(request, "limit", 25)
            cols = json_param(request, "select_cols", None)
        except ValueError as exc:
            raise ListQueryError(str(exc)) from None
        if not isinstance(order, list) or not all(isinstance(o, dict) and "col" in o for o in order):
            raise ListQueryError('order_by is a JSON array of {"col": ..., "dir": "asc"|"desc"}')
        unknown = [o["col"] for o in order if o["col"] not in INSTANCE_COLUMNS]
        if unknown:
            raise ListQueryError(f"Error in query parameters: {unknown[0]} is not a valid order_by column")
        # "anything else treated as asc"; "`id` is always appended as a tiebreaker"
        sort = [(str(o["col"]), o.get("dir") == "desc") for o in order]
        if not any(col == "id" for col, _ in sort):
            sort.append(("id", False))
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise ListQueryError("limit must be an integer")
        if cols is not None and (not isinstance(cols, list) or not all(isinstance(c, str) for c in cols)):
            raise ListQueryError("select_cols must be a JSON array of column names")
        try:
            after = token_id(request.param("after_token"))
        except ValueError:
            raise ListQueryError("Invalid pagination token", "invalid_token") from None
        # "Default 25, max 25. Values <= 0 are treated as 5."
        return cls(filters, sort, 5 if limit <= 0 else min(limit, 25), after, None if cols == ["*"] else cols)

    def ordered(self, views: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for col, descending in reversed(self.order):
            views = sorted(views, key=column_key(col), reverse=descending)
        return views


def column_key(column: str) -> Callable[[dict[str, Any]], tuple[int, Any]]:
    return lambda view: order_key(view.get(column))


def order_key(value: Any) -> tuple[int, Any]:
    """Nulls first, then numbers, then text: any column sorts without comparing unlike types."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool | int | float):
        return (1, float(value))
    return (2, str(value))


def after_token_rows(rows: list[dict[str, Any]], query: ListQuery) -> list[dict[str, Any]]:
    """The rows after the token's: by id when the list is in id order (a row gone since still places the
    page), else after the token's row in the sort."""
    if query.after is None:
        return rows
    if query.order[0][0] == "id":
        descending = query.order[0][1]
        return [v for v in rows if (v["id"] < query.after if descending else v["id"] > query.after)]
    at = next((i for i, v in enumerate(rows) if v["id"] == query.after), None)
    return rows if at is None else rows[at + 1 :]


def page_token(last_id: int) -> str:
    return base64.b64encode(json.dumps({"values": {"id": last_id}}).encode()).decode()


def token_id(token: str | None) -> int | None:
    if token is None:
        return None
    try:
        value = json.loads(base64.b64decode(token, validate=True))["values"]["id"]
    except (ValueError, KeyError, TypeError):
        raise ValueError("after_token is not a token this server issued") from None
    if not isinstance(value, int):
        raise ValueError("after_token is not a token this server issued")
    return value


def select_cols(view: dict[str, Any], cols: list[str] | None) -> dict[str, Any]:
    """The columns asked for; "Unknown column names are returned as `null`" (show_instances.yaml)."""
    if cols is None or "*" in cols:
        return view
    return {c: view.get(c) for c in cols}


@dataclass
class BundleSearch:
    filters: dict[str, dict[str, Any]]
    order: list[tuple[str, str]]
    limit: int
    storage: float

    @classmethod
    def parse(cls, body: Any) -> BundleSearch:
        if not isinstance(body, dict):
            raise ValueError("the query must be an object")
        unknown = [k for k in body if k not in OFFER_FIELDS and k not in BUNDLE_KEYS]
        if unknown:
            raise ValueError(f"unknown search field {unknown[0]!r}")
        filters = check_rules({k: v for k, v in body.items() if k not in BUNDLE_KEYS}, None, "query")
        if body.get("type", "ondemand") not in SEARCH_TYPES:
            raise ValueError(f"type must be one of {sorted(SEARCH_TYPES)}")
        order = body.get("order", [["score", "desc"]])
        if not isinstance(order, list) or not all(
            isinstance(o, list) and len(o) == 2 and o[0] in OFFER_FIELDS and o[1] in ("asc", "desc") for o in order
        ):
            raise ValueError('order must be a list of [field, "asc"|"desc"]')
        # allocated_storage: "Default is 8GB" (search_offers.yaml)
        limit, storage = body.get("limit", 64), body.get("allocated_storage", 8.0)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError("limit must be a positive integer")
        if isinstance(storage, bool) or not isinstance(storage, int | float) or storage <= 0:
            raise ValueError("allocated_storage must be a positive number")
        return cls(filters, [(str(c), str(d)) for c, d in order], limit, float(storage))


def offer_value(view: dict[str, Any], key: str) -> Any:
    if key == "verified":  # a filter, not an answer field: the answer says `verification`
        return view.get("verification") == "verified"
    return view.get(OFFER_ALIASES.get(key, key))


def sort_key(column: str) -> Callable[[dict[str, Any]], float]:
    def key(view: dict[str, Any]) -> float:
        value = numeric(offer_value(view, column))
        return value if isinstance(value, float) else 0.0

    return key


def matches(value: Any, rule: dict[str, Any]) -> bool:
    return all(compare(value, op, operand) for op, operand in rule.items())


def compare(value: Any, op: str, operand: Any) -> bool:
    # The CLI sends numbers as strings ("0.98"): compare numerically when both sides are numbers.
    left, right = numeric(value), operand if isinstance(operand, list) else numeric(operand)
    if op == "in":
        return bool(left in [numeric(x) for x in right])
    if op == "notin":
        return bool(left not in [numeric(x) for x in right])
    if op in ("eq", "neq"):
        return bool(left == right) == (op == "eq")
    if left is None or right is None or isinstance(left, str) != isinstance(right, str):
        return False
    return bool({"gt": left > right, "gte": left >= right, "lt": left < right, "lte": left <= right}[op])


def numeric(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value
