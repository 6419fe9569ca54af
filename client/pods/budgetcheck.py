"""The month's budget before a create (GPUC_MONTHLY_BUDGET, GPUC_EXPERIMENT_BUDGET; core/budget.py's one rule):
`check_budget` refuses a pod whose worst case (price x its hours) would cross a budget, counted with the month's
spend AND the worst case of every pod still running or kept; `show_budget` says where the month stands in a dry
run. Its words name the fix: a shorter --max-hours, a cheaper GPU, or the budget itself."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.pods.plan import Quote, UpOptions
from gpuc.client.text import short_span
from gpuc.core.budget import Ahead, MonthSpend, Outlook, ahead_of, ledger_burns, outlook, usd
from gpuc.core.clock import hours_text
from gpuc.core.errors import GpucError, SafetyRefusal
from gpuc.core.settings import Settings, env_name

if TYPE_CHECKING:
    from gpuc.core.api import PodRecord
    from gpuc.core.pod import Pod


@dataclass(frozen=True)
class BudgetWeight:
    """One budget against the month's spend, the worst case of every pod still running or kept, and this
    pod's worst case (price x --max-hours): core.budget's one rule, `Outlook.crosses`."""

    variable: str  # the setting that holds it
    scope: str  # in words: "the monthly budget", "experiment exp1's budget"
    limit_usd: float
    outlook: Outlook
    worst_usd: float | None  # None: the price is unknown, so the worst case cannot be bounded

    @property
    def spend(self) -> MonthSpend:
        return self.outlook.spend

    @property
    def over(self) -> bool:
        return self.outlook.crosses(self.limit_usd, self.worst_usd)

    def line(self) -> str:
        worst = "unknown (no price)" if self.worst_usd is None else usd(self.worst_usd)
        verdict = "OVER" if self.over else "within"
        return f"budget: {self.scope} {verdict}: {self.outlook.text(self.limit_usd)}; this pod at most {worst}"


def weigh_budgets(
    q: Quote, opts: UpOptions, ctx: Ctx, records: list[PodRecord] | None
) -> tuple[list[BudgetWeight], list[str]]:
    """Every budget the user set, weighed; and what the figures rest on (notes). Empty with no budget."""
    return weigh(ctx, records, opts.experiment, q.worst_usd(opts.max_hours))


def weigh(
    ctx: Ctx, records: Sequence[PodRecord] | None, experiment: str, worst: float | None
) -> tuple[list[BudgetWeight], list[str]]:
    """Every budget the user set against the month and the pods ahead, plus `worst` (a pod `up` would add, a
    warm pod's deadline `run` would move: client/pods/warm.py; None: no bound)."""
    settings = ctx.settings
    wanted = [
        ("monthly_budget", "the monthly budget", None),
        ("experiment_budget", f"experiment {experiment}'s budget", experiment),
    ]
    wanted = [w for w in wanted if getattr(settings, w[0]) is not None]
    if not wanted:
        return [], []
    view = ledger_burns(ctx.ledger().entries(), records)
    now = ctx.clock.now()
    ahead = pods_ahead(records or [], ctx, now)
    weights = [
        BudgetWeight(
            env_name(name), scope, getattr(settings, name), outlook(view.burns, ahead, now, experiment=only), worst
        )
        for name, scope, only in wanted
    ]
    notes = list(view.notes)
    if records is None:
        notes.append("no word from the watchdog: the running pods' worst case to their deadlines is not known")
    return weights, notes


def pods_ahead(records: Sequence[PodRecord], ctx: Ctx, now: float) -> list[Ahead]:
    """Every pod the watchdog says is still running or kept, at its worst case to its deadline. A kept pod's
    disk price is the provider's word (read only for kept pods: a stopped one bills its disk alone)."""
    ahead = []
    for rec in records:
        start = rec.started_at if rec.started_at is not None else rec.registered_at
        # A record from an older gpuc has no deadline: the watchdog's own default holds it (functions/deadline.py).
        deadline = rec.deadline_at if rec.deadline_at is not None else start + ctx.settings.max_hours * 3600
        kept = rec.kept_at is not None
        one = ahead_of(rec, deadline=deadline, kept=kept, pod=provider_reading(rec, ctx) if kept else None, now=now)
        if one is not None:
            ahead.append(one)
    return ahead


def provider_reading(rec: PodRecord, ctx: Ctx) -> Pod | None:
    try:
        return ctx.provider(rec.provider).get(rec.pod_id)
    except GpucError:
        return None  # its disk price unknown: the pod is listed as unknown, never counted as $0


def check_budget(q: Quote, opts: UpOptions, ctx: Ctx, records: list[PodRecord] | None) -> None:
    """Refuse, before the create, a pod whose worst case would cross a budget; print the budget lines."""
    weights, notes = weigh_budgets(q, opts, ctx, records)
    for weight in weights:
        ctx.echo(weight.line())
    for note in notes if weights else []:
        ctx.echo(f"budget: {note}")
    over = [w for w in weights if w.over]
    if not over:
        return
    if opts.over_budget:
        ctx.echo(f"budget: {over[0].scope} would be crossed: renting anyway (--over-budget)")
        monthly = [w for w in over if w.variable == "GPUC_MONTHLY_BUDGET"]
        if any(w.spend.total_usd >= w.limit_usd for w in monthly):
            # The watchdog's pull-in (functions/reaper/budget.py) holds for every running pod, this one too.
            ctx.echo(
                f"budget: the month's budget is already spent: the watchdog pulls this pod's deadline in to "
                f"{ctx.settings.budget_pull_in_s / 60:.0f} min from its next pass; `gpuc keep POD --for 2h` "
                "then keeps it longer"
            )
        elif monthly:
            ctx.echo(
                "budget: at worst the month crosses its budget: the watchdog pulls the running pods' deadlines "
                "in to when it would (at its next pass); `gpuc keep POD --for 2h` then keeps one longer"
            )
        return
    raise SafetyRefusal(over_message(over[0], q, opts), hint=over_hint(over[0], q, opts, ctx.settings))


def show_budget(q: Quote, opts: UpOptions, ctx: Ctx) -> None:
    """`up --dry-run`: the budget lines, never a refusal; the watchdog and the ledger asked if they answer."""
    if ctx.settings.monthly_budget is None and ctx.settings.experiment_budget is None:
        return  # no budget: no watchdog call (it may be down, and a dry run must not wait on it)
    try:
        records: list[PodRecord] | None = ctx.watchdog.status().pods
    except GpucError:
        records = None
    try:
        weights, notes = weigh_budgets(q, opts, ctx, records)
    except GpucError as exc:
        ctx.echo(f"  budget: cannot read the ledger ({exc.message})")
        return
    for weight in weights:
        ctx.echo("  " + weight.line() + (" (up would refuse)" if weight.over else ""))
    for note in notes if weights else []:
        ctx.echo(f"  budget: {note}")


def over_message(weight: BudgetWeight, q: Quote, opts: UpOptions) -> str:
    spent = weight.outlook.text(weight.limit_usd)
    if q.envelope is not None:
        return (
            f"{weight.scope} would be crossed: {spent}; this run's envelope across all its attempts is "
            f"{usd(q.envelope.usd)} (${hourly(q) or 0.0:.3f}/h with its disk x --max-hours "
            f"{hours_text(opts.max_hours)}): "
            f"{usd(weight.outlook.total_usd + q.envelope.usd)} > {usd(weight.limit_usd)}"
        )
    if weight.worst_usd is None or q.price_per_hour is None:
        return (
            f"{weight.scope} ({usd(weight.limit_usd)}) cannot be checked: this pod's price is unknown ({q.source}), "
            f"so its worst case has no bound. {spent}"
        )
    total = weight.outlook.total_usd + weight.worst_usd
    return (
        f"{weight.scope} would be crossed: {spent}; this pod's worst case is {usd(weight.worst_usd)} "
        f"(${q.price_per_hour:.3f}/h x {hours_words(opts)}): {usd(total)} > {usd(weight.limit_usd)}"
    )


def hours_words(opts: UpOptions) -> str:
    """The hours a pod's worst case counts: --max-hours, or a warm pod's job and warm time (client/pods/warm.py)."""
    if opts.warm_job_s:
        return f"{short_span(opts.max_hours * 3600)}, a job and its warm time"
    return f"--max-hours {hours_text(opts.max_hours)}"


def hourly(q: Quote) -> float | None:
    """What the run may cost per hour of --max-hours: its envelope's rate (GPU cap and disk), or the price."""
    return q.envelope.price_cap + q.envelope.disk_per_hour if q.envelope is not None else q.price_per_hour


def over_hint(weight: BudgetWeight, q: Quote, opts: UpOptions, settings: Settings) -> str:
    raise_it = f"raise {weight.variable} (in {settings.env_file} or your environment)"
    biggest = max(((a.name, w) for a, w in weight.outlook.ahead if w), key=lambda aw: aw[1], default=None)
    down = "" if biggest is None else f"end a running pod (`gpuc down {biggest[0]}` frees {usd(biggest[1])}), "
    rate = hourly(q)
    if rate is None:
        return f"give the price (--price, $/h), {down}rent anyway with --over-budget, or {raise_it}"
    left = weight.limit_usd - weight.outlook.total_usd
    hours = math.floor(10 * left / rate) / 10 if rate > 0 else 0.0
    fits = f"--max-hours {hours_text(hours)} fits, {usd(hours * rate)}"
    shorter = fits if hours >= 0.1 else "none fits what is left"
    return f"rent for fewer hours ({shorter}), {down}rent anyway with --over-budget, or {raise_it}"
