"""`gpuc doctor --live`: read (never write) each configured provider account, and settle what a read can
settle of the provider facts the README lists as unconfirmed.

Per provider: the list (its schema), the balance, one offer search, and, where a gpuc pod is running, what
its pod-scoped key may do (the pod's own answer to `ask key-scope`, over ssh: read-only calls). Every call is a read: no
create, stop, terminate, label or bid, and no "harmless" write on a made-up id either. Each fact comes
back `confirmed` (the provider does what gpuc assumed), `refuted` (it does not: the detail says what it
does instead) or `unknown` (this account could not tell, e.g. no pod to probe).

Provider bodies never print: a Vast `/users/current` answer holds the account key. Only statuses, counts
and field names leave this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel

from gpuc.client.context import Ctx
from gpuc.client.onpod.ask import PodAnswerError, key_scope
from gpuc.client.setup.checks import Check, fail, ok, warn
from gpuc.core.errors import GpucError, ProviderError
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import keyed_providers
from gpuc.core.termsafe import clean_line

FactStatus = Literal["confirmed", "refuted", "unknown"]
# A pod id no account has: the read of an unknown id (REST v2's 404 problem) is a read.
MISSING_POD_ID = "gpuclivemissing0"
PROBE_TIMEOUT_S = 90.0


class Fact(BaseModel):
    provider: str
    fact: str  # what gpuc assumes, in the README's words
    status: FactStatus
    detail: str


class LiveReport(BaseModel):
    checks: list[Check]
    facts: list[Fact]


# Runs a read-only probe on a running gpuc pod with the pod's own key; the HTTP statuses it saw, by name.
PodProbe = Callable[[Provider, Pod], dict[str, int]]


@dataclass
class Reading:
    provider: str
    checks: list[Check]
    facts: list[Fact]

    def check(self, name: str, run: Callable[[], str]) -> Any:
        """One read as a check: ok with its summary, or fail with the provider's own words."""
        try:
            self.checks.append(ok(f"{self.provider}: {name}", run()))
            return True
        except GpucError as exc:
            self.checks.append(fail(f"{self.provider}: {name}", exc.message, exc.hint or "see the message"))
            return False

    def fact(self, fact: str, status: FactStatus, detail: str) -> None:
        self.facts.append(Fact(provider=self.provider, fact=fact, status=status, detail=detail))


def live_report(providers: Mapping[str, Callable[[], Provider]], probe: PodProbe | None = None) -> LiveReport:
    checks: list[Check] = []
    facts: list[Fact] = []
    if not providers:
        checks.append(warn("live", "no provider key is configured", "set RUNPOD_API_KEY or VAST_API_KEY in .env"))
    from gpuc.core.together import read_together

    # Every account read at once (core/together.py), each into its own lists, kept in the providers' order.
    reads = read_together({name: partial(read_account, name, factory, probe) for name, factory in providers.items()})
    for outcome in reads.values():
        reading = outcome.get()
        checks += reading.checks
        facts += reading.facts
    return LiveReport(checks=checks, facts=facts)


def read_account(name: str, factory: Callable[[], Provider], probe: PodProbe | None) -> Reading:
    reading = Reading(name, [], [])
    try:
        provider = factory()
    except GpucError as exc:
        reading.checks.append(fail(f"{name}: connect", exc.message, exc.hint or "see the message"))
        return reading
    try:
        read_provider(reading, provider, probe)
    finally:
        provider.close()
    return reading


def read_provider(reading: Reading, provider: Provider, probe: PodProbe | None) -> None:
    pods: list[Pod] = []

    def listing() -> str:
        pods.extend(provider.list_pods())
        return f"the list reads: {len(pods)} pod(s), {sum(p.managed for p in pods)} of them gpuc's"

    reading.check("list schema", listing)
    reading.check("balance", lambda: f"${provider.balance().balance_usd:.2f}")
    reading.check("one offer search", lambda: f"{len(provider.offers())} offer(s)")
    # Lazy: `gpuc doctor` loads this module; a provider's client (and httpx) loads only when it is configured.
    from gpuc.core.providers.runpod import RunPodProvider
    from gpuc.core.providers.vast import VastProvider

    try:
        if isinstance(provider, RunPodProvider):
            runpod_facts(reading, provider)
        elif isinstance(provider, VastProvider):
            vast_facts(reading, provider)
    except GpucError as exc:  # a read the account refused: the facts it would settle stay unknown
        reading.checks.append(warn(f"{reading.provider}: facts", exc.message, exc.hint or "see the message"))
    pod_key_facts(reading, provider, pods, probe)


def configured_factories(ctx: Ctx) -> dict[str, Callable[[], Provider]]:
    """A client of its own for each provider with a key (live_report closes it)."""
    return {name: partial(ctx.new_provider, name) for name in keyed_providers(ctx.settings)}


def live_checks(ctx: Ctx) -> LiveReport:
    from gpuc.client.setup.doctor_hook import check_hook_live

    report = live_report(configured_factories(ctx), ssh_probe(ctx))
    if ctx.settings.vast_api_key is not None:  # Vast's signed test delivery, when a webhook is set up
        hook = check_hook_live(ctx.settings, ctx.watchdog.status, partial(ctx.new_provider, "vast"), ctx.clock)
        report.checks += [hook] if hook is not None else []
    return report


# ---- RunPod ----------------------------------------------------------------------------------------


def runpod_facts(reading: Reading, provider: Any) -> None:
    """REST v2's facts (gpuc reaches GraphQL only for the balance, read by the balance check above)."""
    from gpuc.core.providers.runpod_pods import V2_STATUS
    from gpuc.core.providers.runpod_refusals import is_problem_404  # lazy: as in read_provider

    reading.fact(
        "terminateAfter ends a pod at its time (gpuc does not rely on it)",
        "refuted",
        "RunPod never enforced it (runpodctl #330, docs #820) and REST v2 has no such field: gpuc sends none; "
        "its deadline is held by the pod's agent and the watchdog",
    )
    http, rest = provider.http, provider.rest_url
    gone = read_or_error(lambda: http.request("GET", f"{rest}/pods/{MISSING_POD_ID}", accept=(404,)))
    reading.fact(
        "REST v2 answers an unknown pod id with a 404 problem (gpuc reads two of them as gone)",
        "confirmed" if gone[0] == "value" and gone[1].status == 404 and is_problem_404(gone[1].body) else "refuted",
        f"HTTP {gone[1].status}" if gone[0] == "value" else str(gone[1])[:120],
    )
    ignored = read_or_error(
        lambda: http.request("GET", f"{rest}/pods", params={"gpucLiveProbe": "1"}, accept=(400, 422))
    )
    claim = "REST v2 ignores a query parameter it does not know (its migration guide: ignored, not rejected)"
    if ignored[0] == "value":
        verdict: FactStatus = "confirmed" if ignored[1].status < 300 else "refuted"
        reading.fact(claim, verdict, f"an unknown query parameter: HTTP {ignored[1].status}")
    else:
        reading.fact(claim, "unknown", str(ignored[1])[:120])
    listed = read_or_error(lambda: list(provider.v2_pods().values()))
    if listed[0] == "value" and listed[1]:
        seen = sorted({str(p.status) for p in listed[1]})
        unknown = [s for s in seen if s not in V2_STATUS]
        reading.fact(
            "status is one of PROVISIONING / STARTING / RUNNING / EXITED / ERROR / TERMINATED",
            "refuted" if unknown else "confirmed",
            f"seen: {', '.join(seen)}",
        )
        exited = [p for p in listed[1] if p.status == "EXITED"]
        if exited:
            zero = all(not p.cost for p in exited)
            reading.fact(
                "cost is 0.0 for an EXITED pod (gpuc shows its volume's price instead)",
                "confirmed" if zero else "refuted",
                f"{len(exited)} EXITED pod(s)" + ("" if zero else ": a cost that is not 0"),
            )
    else:
        reading.fact("status values", "unknown", "no pod in the account to read")
    v2_paging_fact(reading, provider)


def v2_paging_fact(reading: Reading, provider: Any) -> None:
    reply = read_or_error(lambda: provider.http.request("GET", f"{provider.rest_url}/pods", accept=(403,)))
    claim = "REST v2 lists every pod in one answer (no paging, as its 2026-08 spec says)"
    if reply[0] == "error":
        reading.fact(claim, "unknown", f"v2 list failed: {str(reply[1])[:120]}")
        return
    status, body = reply[1].status, reply[1].body
    if status == 403:
        reading.fact(claim, "unknown", "this key may not list pods on REST v2 (403): gpuc cannot list RunPod")
    elif isinstance(body, dict) and isinstance(body.get("pagination"), dict):
        keys = sorted(body["pagination"])
        reading.fact(claim, "refuted", f"it pages now (pagination keys: {', '.join(keys)}): gpuc follows nextCursor")
    else:
        reading.fact(claim, "confirmed", "no pagination object: one answer holds the list")


# ---- Vast ------------------------------------------------------------------------------------------


def vast_facts(reading: Reading, provider: Any) -> None:
    http, v0, v1 = provider.http, provider.api.v0, provider.api.v1
    first = http.request("GET", f"{v1}/instances/", params={"limit": "25"})
    rows = first.body.get("instances") if isinstance(first.body, dict) else None
    token = first.body.get("next_token", "(absent)") if isinstance(first.body, dict) else "(absent)"
    if isinstance(rows, list) and rows:
        full = all(isinstance(r, dict) and "extra_env" in r and "ports" in r for r in rows)
        reading.fact(
            "the v1 list without select_cols answers full rows (extra_env and ports)",
            "confirmed" if full else "refuted",
            f"{len(rows)} row(s) read",
        )
    else:
        reading.fact("the v1 list without select_cols answers full rows", "unknown", "no instance to read")
    if token in (None, ""):
        reading.fact('the v1 list ends with next_token null or ""', "confirmed", f"ended with {token!r}")
    user = http.request("GET", f"{v0}/users/current/")  # show_user.yaml's path: gpuc follows no redirect
    body = user.body if isinstance(user.body, dict) else {}
    fields = [k for k in ("credit", "balance") if isinstance(body.get(k), int | float)]
    reading.fact(
        "/users/current carries both credit and balance (gpuc spends from credit)",
        "confirmed" if len(fields) == 2 else "refuted",
        "present: " + (", ".join(fields) or "neither") + (": equal" if equal_fields(body) else ""),
    )
    retired = http.request("GET", f"{v0}/instances/", params={"owner": "me"}, accept=(404, 410))
    error = retired.body.get("error") if isinstance(retired.body, dict) else None
    reading.fact(
        "GET /api/v0/instances/ is retired with 410 deprecated_endpoint",
        "confirmed" if (retired.status, error) == (410, "deprecated_endpoint") else "refuted",
        f"HTTP {retired.status}" + (f", error {error}" if error else ""),
    )
    ondemand = read_or_error(
        lambda: http.request("POST", f"{v0}/bundles/", json={"type": "ondemand", "limit": 1}, accept=(400,))
    )
    if ondemand[0] == "value":
        reading.fact(
            'offer search accepts type "ondemand" as well as "on-demand"',
            "confirmed" if ondemand[1].status == 200 else "refuted",
            f"HTTP {ondemand[1].status}",
        )


def equal_fields(body: Mapping[str, Any]) -> bool:
    return isinstance(body.get("credit"), int | float) and body.get("credit") == body.get("balance")


# ---- the pod-scoped key ----------------------------------------------------------------------------


def pod_key_facts(reading: Reading, provider: Provider, pods: Sequence[Pod], probe: PodProbe | None) -> None:
    target = next((p for p in pods if p.managed and p.status == "running" and p.ssh_host), None)
    if probe is None or target is None:
        reading.fact("what the pod-scoped key may read", "unknown", "no running gpuc pod to probe")
        return
    try:
        seen = probe(provider, target)
    except GpucError as exc:
        reading.fact("what the pod-scoped key may read", "unknown", f"probe failed: {exc.message}")
        return
    for claim, key, expected in POD_KEY_CLAIMS.get(provider.name, ()):
        status = seen.get(key)
        if not isinstance(status, int):
            reading.fact(claim, "unknown", "not probed")
        else:
            verdict: FactStatus = "confirmed" if (200 <= status < 300) == expected else "refuted"
            reading.fact(claim, verdict, f"HTTP {status}")
    reading.fact(
        "the pod-scoped key may destroy its own pod",
        "unknown",
        "not probed: it would be a write (the self-destroy reads itself back after any 'not found')",
    )


# (claim, probe key, whether a 2xx confirms it)
POD_KEY_CLAIMS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "runpod": (
        ("the pod key may read its own pod (GraphQL pod(...))", "own_pod", True),
        ("the pod key may not list the account (GraphQL myself.pods)", "list", False),
        ("the pod key may not use REST v2 (403)", "v2_own", False),
    ),
    "vast": (
        ("the instance key may read its own instance", "own_pod", True),
        ("the instance key may not list the account", "list", False),
    ),
}


def ssh_probe(ctx: Ctx) -> PodProbe:
    """The probe on a running gpuc pod, over ssh (the pod key never leaves the pod): the pod's own answer
    to `ask key-scope`, statuses only."""

    def probe(provider: Provider, pod: Pod) -> dict[str, int]:
        try:
            return key_scope(ctx.pod_access(provider, pod))
        except PodAnswerError as exc:
            raise ProviderError(f"the probe on pod {pod.id}: {exc.message}", provider=provider.name) from None

    return probe


def read_or_error(read: Callable[[], Any]) -> tuple[Literal["value", "error"], Any]:
    try:
        return "value", read()
    except GpucError as exc:
        return "error", exc.message


def render(report: LiveReport) -> str:
    width = max([10, *(len(f.provider) for f in report.facts)])
    lines = ["", "provider facts (read-only, live):"]
    # A detail may quote a provider's answer: cleaned of terminal controls, one line.
    lines += [f"  {f.provider:<{width}} {f.status:<9} {f.fact} ({clean_line(f.detail)})" for f in report.facts]
    return "\n".join(lines)
