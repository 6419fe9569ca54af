"""Drill row for F17: the month's budget would be crossed by the pods running.

Two busy, pinging pods whose worst case (price x the time to their deadlines) crosses GPUC_MONTHLY_BUDGET
(a budget counted only at what pods have spent so far would let pod after pod in). The REAL reaper
(functions/reaper/budget.py, core/budget.py's one rule) pulls both deadlines in, at its first pass, to the
moment the month reaches the budget if both run on (never sooner than now + GPUC_BUDGET_PULL_IN_S), once per
pod, in one warning naming both; the REAL agents hear the earlier deadline in a heartbeat answer and end their
pods at it through their Ender (sync -> notify -> destroy), the reaper's deadline rule behind them. A new `up`
is weighed by the REAL client check (client/pods/budgetcheck.check_budget, the same rule) against the laptop's ledger
and the watchdog's status, read through the real WatchdogClient answered by the real handlers: refused.

Billed minutes run from the moment the spend reaches the budget to the destroy, on the later of the two pods
(0 when both ended before it); the bound is one reaper period (the deadline rule behind the agents).
"""

from __future__ import annotations

import httpx

from gpuc.client.context import Ctx
from gpuc.client.pods.budgetcheck import check_budget
from gpuc.client.pods.plan import Quote, UpOptions
from gpuc.client.runs import RunStore
from gpuc.core import api
from gpuc.core.errors import GpucError, SafetyRefusal
from gpuc.core.ledger.store import Ledger
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.app import Deps
from gpuc.functions.edge import Request, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.testkit.drill_stage import ADMIN, EXPERIMENT, FUNCTIONS_URL, MIN, DrillPod, RowResult, Stage

PRICE = 0.74  # $/h, what Stage.register records for every pod
BUDGET_USD = 1.40  # two pods at $0.74/h cross it 57 min in: mid-run, between two reaper passes
PULLED = "budget: deadline pulled in"
NEW_POD_HOURS = 0.5  # the `up` asked before and after the crossing: $0.37 at most


def f17_budget_spent(stage: Stage) -> RowResult:
    actions = watch_actions(stage)
    budgeted(stage)
    pods = [stage.launch(f"f17-pod-{i}") for i in (1, 2)]
    started = stage.now
    for pod in pods:
        pod.busy()
    laptop = Laptop(stage, [p.pod_id for p in pods])
    crossed_at = crossing(stage, [p.pod_id for p in pods])
    problems: list[str] = []
    stage.run(3 * 3600, until=lambda: all(pulled_at(stage, p.pod_id) is not None for p in pods))
    if not laptop.refused():
        problems.append("up was not refused while the running pods' worst case crosses the budget")
    for pod in pods:  # what the job wrote after its last periodic push: only the ending's sync has it
        (pod.paths.results / "last-epoch.pt").write_bytes(b"\1" * 4096)
    stage.run(3 * 3600, until=lambda: not any(stage.provider.alive(p.pod_id) for p in pods))
    problems += row_problems(stage, pods, actions, crossed_at)
    gone = [stage.provider.destroyed_at.get(p.pod_id) for p in pods]
    billed = None if None in gone else max(0.0, max((g or 0.0) - crossed_at for g in gone)) / MIN
    bound = stage.period / MIN + stage.slack(started)
    text = f"one period (the deadline rule behind the agents){stage.bound_note(started)}"
    if any(stage.reaper_destroys[p.pod_id] and not p.self_destroys for p in pods):
        # A fault refused a self-destroy: the reaper's deadline rule ends it, at the first pass at or after it.
        bound += stage.period / MIN
        text += " + one period (a self-destroy refused: the reaper's deadline rule)"
    budget_notes = sum(1 for n in stage.sent() if n.pod_id is None and n.kind.startswith("budget"))
    return RowResult(
        "F17",
        "the running pods' worst case crosses the month's budget",
        "reaper pulls deadlines in to the budget's end; agents end (sync first); up refuses",
        billed,
        bound,
        text,
        false_kills=false_kills(stage, pods),
        results_lost=sum(p.results_lost() for p in pods),
        notifications=sum(stage.notifications(p.pod_id) for p in pods) + budget_notes,
        problems=problems,
    )


# -- the world -----------------------------------------------------------------------------------------
def budgeted(stage: Stage) -> None:
    """The watchdog's settings (its .env) with the month's budget; the pods' configs are written after."""
    stage.settings = stage.settings.with_overrides(monthly_budget=BUDGET_USD)
    stage.deps.settings = stage.settings


def watch_actions(stage: Stage) -> list[api.ReapAction]:
    """Every action of every reaper pass (the stage keeps only the destroys)."""
    seen: list[api.ReapAction] = []
    inner = stage.reaper

    def reaper(deps: Deps, now: float) -> api.ReapReport:
        report = inner(deps, now)
        seen.extend(report.actions)
        return report

    stage.reaper = reaper
    return seen


def crossing(stage: Stage, pod_ids: list[str]) -> float:
    """When the records' spend reaches the budget: sum of price x (t - start) = budget."""
    starts = [rec.started_at or rec.registered_at for rec in (stage.real_store.get_pod(p) for p in pod_ids) if rec]
    if len(starts) != len(pod_ids):
        raise RuntimeError("drill setup: a pod is not registered")
    return (BUDGET_USD / PRICE * 3600 + sum(starts)) / len(starts)


def pulled_at(stage: Stage, pod_id: str) -> float | None:
    rec = stage.real_store.get_pod(pod_id)
    return None if rec is None else rec.budget_pulled_at


class Laptop:
    """The user's laptop: its ledger (the rows `up` wrote for the two pods) and `up`'s budget check, asking
    the watchdog's status through the real client, answered by the real handlers."""

    def __init__(self, stage: Stage, pod_ids: list[str]) -> None:
        self.stage = stage
        home = stage.root / "laptop"
        self.settings = Settings(
            home=home,
            watchdog_url=FUNCTIONS_URL,
            admin_token=SecretStr(ADMIN),
            monthly_budget=BUDGET_USD,
        )
        book = Ledger(self.settings.ledger)
        for pod_id in pod_ids:
            book.start(
                pod_id,
                provider=stage.provider.name,
                experiment=EXPERIMENT,
                gpu="RTX 4090",
                price_per_hour=PRICE,
                start_ts=stage.now,
            )
        self.lines: list[str] = []
        watchdog = WatchdogClient(self.settings, httpx.MockTransport(self._answer), sleep=lambda s: None)
        self.ctx = Ctx(self.settings, runs=RunStore(home), clock=stage.clock, echo=self.lines.append, watchdog=watchdog)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        asked = Request(request.method, request.url.path, dict(request.headers), request.content)
        answer = dispatch(asked, self.stage.deps, self.stage.now)
        return httpx.Response(answer.status, content=response_bytes(answer))

    def refused(self) -> bool:
        """`up`'s budget step for a new pod ($0.74/h, --max-hours 0.5), as `up` runs it: the watchdog's
        status, then check_budget. A watchdog that cannot answer right now (a store fault) is asked again
        a minute later, as a user would run `up` again."""
        opts = UpOptions(experiment="f17-new", provider=self.stage.provider.name, max_hours=NEW_POD_HOURS)
        for _ in range(30):
            try:
                records = self.ctx.watchdog.status().pods
            except GpucError:
                self.stage.run(MIN)
                continue
            try:
                check_budget(Quote(PRICE, "the drill's price"), opts, self.ctx, records)
            except SafetyRefusal as exc:
                return "the monthly budget would be crossed" in exc.message
            return False
        raise RuntimeError("drill: the watchdog's status never answered")


# -- what the row promises -------------------------------------------------------------------------------
def row_problems(stage: Stage, pods: list[DrillPod], actions: list[api.ReapAction], crossed_at: float) -> list[str]:
    problems = []
    pull_in = stage.settings.budget_pull_in_s
    told = [n for n in stage.sent() if n.kind == "budget_pull_in"]
    for pod in pods:
        rec = stage.real_store.get_pod(pod.pod_id)
        pulls = [a for a in actions if a.pod_id == pod.pod_id and a.reason.startswith(PULLED)]
        if rec is None or rec.budget_pulled_at is None:
            problems.append(f"{pod.pod_id}: its deadline was never pulled in")
            continue
        if len(pulls) != 1:
            problems.append(f"{pod.pod_id}: pulled in {len(pulls)} times")
        want = max(crossed_at, rec.budget_pulled_at + pull_in)  # the budget's end, never sooner than the pull-in
        if rec.deadline_at is None or abs(rec.deadline_at - want) > 1.0:
            problems.append(f"{pod.pod_id}: deadline {rec.deadline_at} is not the budget's end {want}")
        if pod.agent.deadline.deadline_at != rec.deadline_at:
            problems.append(f"{pod.pod_id}: its agent never adopted the earlier deadline")
        named = sum(1 for n in told if pod.pod_id in n.message)
        if named > 1 or (named == 0 and not stage.plan.on):
            problems.append(f"{pod.pod_id}: named in {named} budget warnings (one wanted)")
        if not stage.plan.on:
            if pod.self_destroys != 1 or stage.reaper_destroys[pod.pod_id]:
                problems.append(f"{pod.pod_id}: not ended by its own agent at the deadline")
            if not any(n.kind == "deadline_destroy" for n in stage.sent(pod.pod_id)):
                problems.append(f"{pod.pod_id}: no deadline notification")
    return problems


def false_kills(stage: Stage, pods: list[DrillPod]) -> int:
    """Ended before its pulled-in deadline less the agent's lead (or with no deadline on record)."""
    lead = stage.settings.deadline_lead_s + stage.settings.idle_check_interval_s
    kills = 0
    for pod in pods:
        gone = stage.provider.destroyed_at.get(pod.pod_id)
        rec = stage.real_store.get_pod(pod.pod_id)
        deadline = rec.deadline_at if rec is not None and rec.deadline_at is not None else None
        if gone is not None and (deadline is None or gone < deadline - lead):
            kills += 1
    return kills
