"""What each provider account holds, burns per hour, and how long that lasts (`gpuc balance`, and the
account checks of `gpuc doctor`).

Two warnings bound the money at risk: a balance above the cap is what a leaked key or a runaway pod can
spend (keep the account topped up only to what a month of experiments needs); a balance below the low
mark stops pods mid-run (RunPod stops them when under ~10 minutes of credit are left).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Literal, TypedDict

from pydantic import BaseModel

from gpuc.client.context import Ctx
from gpuc.core.errors import ConfigError, ProviderError
from gpuc.core.models import Balance
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import KEY_FIELDS, has_key, keyed_providers
from gpuc.core.settings import Settings, env_name

BALANCE_PROVIDERS = ("local", "runpod", "vast")
ProviderFactory = Callable[[], Provider]
# Said once, by `balance` and `doctor`: no provider-side guard bounds a running pod's total spend, but an
# empty prepaid balance does (phone_actions.md §2).
HARDEST_CAP = (
    "the hardest cap either provider has is a prepaid balance with auto-pay OFF: at zero RunPod and Vast "
    "STOP every pod (stopped disks keep billing, and may be deleted once the balance is gone)"
)
# RunPod's own emails (`myself { notify* }`) worth having on: a stale pod, a low balance.
NOTIFY_WANTED = {"notifyPodsStale": "stale-pod", "notifyLowBalance": "low-balance"}


class BalanceLine(BaseModel):
    provider: str
    configured: bool
    balance_usd: float | None = None
    spend_per_hour: float | None = None
    hours_left: float | None = None  # null when nothing is running (or not known)
    spend_limit: float | None = None  # RunPod's spendLimit; null where the provider has none (Vast)
    spend_rate_source: str | None = None  # "provider" (RunPod currentSpendPerHr) or "computed" (Vast: Σ dph_total)
    notify: dict[str, bool] = {}  # RunPod's notifyPodsStale / notifyPodsGeneral / notifyLowBalance
    warnings: list[str] = []
    error: str | None = None
    hint: str | None = None
    # The provider said "later" (HTTP 429: RunPod has rate-limited GraphQL, where its balance lives, in stages
    # since 2026-09-17): not read now, which is neither a refusal nor a bad key.
    later: bool = False


class BalanceReport(BaseModel):
    cap_usd: float
    low_usd: float
    providers: list[BalanceLine]
    advice: str = HARDEST_CAP

    @property
    def warnings(self) -> list[str]:
        return [f"{line.provider}: {w}" for line in self.providers for w in line.warnings]


def balance_warnings(balance: Balance, cap_usd: float, low_usd: float) -> list[str]:
    warnings: list[str] = []
    if balance.balance_usd > cap_usd:
        warnings.append(
            f"balance ${balance.balance_usd:.2f} is above the ${cap_usd:.2f} cap: that is what a leaked "
            "key or a forgotten pod can spend; top up less (GPUC_BALANCE_CAP_USD sets the cap)"
        )
    if balance.balance_usd < low_usd:
        warnings.append(
            f"balance ${balance.balance_usd:.2f} is below the ${low_usd:.2f} low mark: pods stop when it "
            "runs out; top up before the next run"
        )
    return warnings


def notify_warnings(provider: str, notify: Mapping[str, bool]) -> list[str]:
    """The provider's own alerts that are off (RunPod shows them; Vast has none in its API)."""
    off = [name for name in NOTIFY_WANTED if notify.get(name) is False]
    if not off:
        return []
    what = " and ".join(NOTIFY_WANTED[name] for name in off)
    return [
        f"{provider}'s own {what} emails are OFF ({', '.join(off)}): turn them on in its console's account "
        "settings, a second voice besides gpuc's"
    ]


def limits_text(line: BalanceLine) -> str | None:
    """The account's own limits in words, where the provider has any to show."""
    if line.spend_rate_source == "computed":
        return (
            f"{line.provider}: no spend limit and no spend-rate field at the provider; "
            f"${line.spend_per_hour or 0.0:.3f}/h is the sum of your instances' dph_total"
        )
    if line.spend_limit is None:
        return None
    return (
        f"{line.provider}: spend limit {line.spend_limit:g} (checked when a pod starts; it cannot stop a running "
        f"pod), spending ${line.spend_per_hour or 0.0:.3f}/h now (the provider's currentSpendPerHr)"
    )


class AccountCheck(TypedDict):
    """A `gpuc doctor` check (client/setup/checks.py Check), built here where the balance lines are read."""

    name: str
    status: Literal["ok", "warn"]
    detail: str
    fix: str | None


def account_checks(report: BalanceReport, settings: Settings) -> list[AccountCheck]:
    """For doctor: each account's own limits where its provider shows them (warned when one of its own
    alerts is off), then the caps that bound a month's money, said once."""
    out: list[AccountCheck] = []
    for line in report.providers:
        text = limits_text(line) if line.configured and not line.error else None
        if text is None:
            continue
        off = notify_warnings(line.provider, line.notify)
        fix = "turn them on in the provider console's account settings (notifications)" if off else None
        name, detail = f"account limits {line.provider}", f"{text}; {off[0]}" if off else text
        out.append(AccountCheck(name=name, status="warn" if off else "ok", detail=detail, fix=fix))
    # No budget is legal but leaves a month unbounded but for the prepaid balance: said as a warning, with the line.
    fix = None if settings.monthly_budget is not None else f"add GPUC_MONTHLY_BUDGET=40 (USD) to {settings.env_file}"
    caps = AccountCheck(name="money caps", status="ok" if fix is None else "warn", detail=caps_text(settings), fix=fix)
    return [*out, caps]


def caps_text(settings: Settings) -> str:
    """Which caps bound a month's money: gpuc's own budget, and the hardest one the providers enforce."""
    budget = settings.monthly_budget
    ours = (
        f"GPUC_MONTHLY_BUDGET ${budget:,.2f}: `up` refuses past it, the watchdog ends running pods at 100 %"
        if budget is not None
        else "GPUC_MONTHLY_BUDGET not set: gpuc keeps no monthly cap"
    )
    return f"{ours}; {HARDEST_CAP}"


def read_balance(name: str, factory: ProviderFactory | None, settings: Settings) -> BalanceLine:
    if factory is None:
        key = env_name(KEY_FIELDS[name]) if name in KEY_FIELDS else f"{name}'s key"
        return BalanceLine(provider=name, configured=False, hint=f"set {key} in .env to see it")
    try:
        provider = factory()
        try:
            balance = provider.balance()
        finally:
            provider.close()
    except ProviderError as exc:
        if exc.status == 429:
            return BalanceLine(provider=name, configured=True, later=True, error=f"not read now: {exc.message}",
                               hint=exc.hint or "rate limited: try again in a minute")  # fmt: skip
        return BalanceLine(provider=name, configured=True, error=exc.message, hint=exc.hint)
    except ConfigError as exc:
        return BalanceLine(provider=name, configured=True, error=exc.message, hint=exc.hint)
    return BalanceLine(
        provider=name,
        configured=True,
        balance_usd=balance.balance_usd,
        spend_per_hour=balance.spend_per_hour,
        hours_left=balance.hours_left,
        spend_limit=balance.spend_limit,
        spend_rate_source=balance.spend_rate_source,
        notify=balance.notify,
        warnings=balance_warnings(balance, settings.balance_cap_usd, settings.balance_low_usd)
        + notify_warnings(balance.provider, balance.notify),
    )


def check_balances(settings: Settings, factories: Mapping[str, ProviderFactory | None]) -> BalanceReport:
    """One line per provider; a factory of None means "not configured" (no key), which is not an error.
    Every account is read at once (core/together.py)."""
    from gpuc.core.together import read_together

    reads = read_together({name: partial(read_balance, name, factory, settings) for name, factory in factories.items()})
    return BalanceReport(
        cap_usd=settings.balance_cap_usd,
        low_usd=settings.balance_low_usd,
        advice=caps_text(settings),
        providers=[outcome.get() for outcome in reads.values()],
    )


def providers_in_use(settings: Settings) -> tuple[str, ...]:
    """The providers `balance` lists: the configured one (GPUC_PROVIDER) and each with a key. A provider the
    user never signed up for is no line at all ("runpod not configured" on a Vast-only setup said nothing useful)."""
    keyed = keyed_providers(settings)
    return tuple(name for name in BALANCE_PROVIDERS if name == settings.provider or name in keyed)


def provider_factories(ctx: Ctx, names: tuple[str, ...] = BALANCE_PROVIDERS) -> dict[str, ProviderFactory | None]:
    """A client of its own for each provider with a key (read_balance closes it); None: no key."""
    return {name: partial(ctx.new_provider, name) if has_key(name, ctx.settings) else None for name in names}
