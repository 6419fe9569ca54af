"""`gpuc balance`: what each provider account holds, burns per hour, and how long that lasts.

Two warnings bound the money at risk: a balance above the cap is what a leaked key or a runaway pod can
spend (keep the account topped up only to what a month of experiments needs); a balance below the low
mark stops pods mid-run (RunPod stops them when under ~10 minutes of credit are left).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial

import click
from pydantic import BaseModel

from gpuc.core.errors import ConfigError, ProviderError
from gpuc.core.models import Balance
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import KEY_FIELDS, get_provider, has_key
from gpuc.core.settings import Settings, env_name, load_settings

BALANCE_PROVIDERS = ("local", "runpod", "vast")
ProviderFactory = Callable[[], Provider]


class BalanceLine(BaseModel):
    provider: str
    configured: bool
    balance_usd: float | None = None
    spend_per_hour: float | None = None
    hours_left: float | None = None  # null when nothing is running (or not known)
    warnings: list[str] = []
    error: str | None = None
    hint: str | None = None


class BalanceReport(BaseModel):
    cap_usd: float
    low_usd: float
    providers: list[BalanceLine]

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
    except (ProviderError, ConfigError) as exc:
        return BalanceLine(provider=name, configured=True, error=exc.message, hint=exc.hint)
    return BalanceLine(
        provider=name,
        configured=True,
        balance_usd=balance.balance_usd,
        spend_per_hour=balance.spend_per_hour,
        hours_left=balance.hours_left,
        warnings=balance_warnings(balance, settings.balance_cap_usd, settings.balance_low_usd),
    )


def check_balances(settings: Settings, factories: Mapping[str, ProviderFactory | None]) -> BalanceReport:
    """One line per provider; a factory of None means "not configured" (no key), which is not an error."""
    return BalanceReport(
        cap_usd=settings.balance_cap_usd,
        low_usd=settings.balance_low_usd,
        providers=[read_balance(name, factory, settings) for name, factory in factories.items()],
    )


def provider_factories(
    settings: Settings, names: tuple[str, ...] = BALANCE_PROVIDERS
) -> dict[str, ProviderFactory | None]:
    return {
        name: partial(get_provider, name, settings) if has_key(name, settings) else None
        for name in names
    }


def render(report: BalanceReport) -> str:
    lines = [f"{'provider':<8} {'balance':>9} {'spend/h':>8} {'hours left':>10}"]
    for line in report.providers:
        if not line.configured:
            lines.append(f"{line.provider:<8} not configured" + (f" ({line.hint})" if line.hint else ""))
        elif line.error:
            lines.append(f"{line.provider:<8} error: {line.error}" + (f" ({line.hint})" if line.hint else ""))
        else:
            left = f"{line.hours_left:.1f}" if line.hours_left is not None else "-"
            lines.append(
                f"{line.provider:<8} {line.balance_usd:>9.2f} {line.spend_per_hour:>8.3f} {left:>10}"
            )
    lines.extend(f"warning: {w}" for w in report.warnings)
    return "\n".join(lines)


@click.command("balance")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (fields below).")
def balance(as_json: bool) -> None:
    """Provider balances, spend per hour, hours left, and warnings against the cap and the low mark.

    Every provider is listed; one without an API key is "not configured", not an error. Warnings:
    balance above the cap (GPUC_BALANCE_CAP_USD, default 20) or below the low mark
    (GPUC_BALANCE_LOW_USD, default 5).

    \b
    --json fields: cap_usd, low_usd, providers[]: provider, configured, balance_usd,
    spend_per_hour, hours_left (null when nothing is running), warnings[], error, hint.
    """
    settings = load_settings()
    report = check_balances(settings, provider_factories(settings))
    click.echo(json.dumps(report.model_dump(), indent=2) if as_json else render(report))
