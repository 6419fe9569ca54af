"""`up --interruptible --recover N` (issue 30): refused where no outbid can happen or no bid bounds a re-rent;
the watchdog's inputs ride on the pod's env; --recover 0 changes nothing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gpuc.client.pods.commands import up
from gpuc.client.pods.plan import UpOptions, check_recover
from gpuc.client.pods.up import recover_env
from gpuc.core.errors import ConfigError


def test_recover_needs_an_interruptible_rent_with_a_bid() -> None:
    with pytest.raises(ConfigError, match="--interruptible with --bid"):
        check_recover(UpOptions("e1", provider="vast", recover=2))
    with pytest.raises(ConfigError, match="--interruptible with --bid"):
        check_recover(UpOptions("e1", provider="vast", interruptible=True, recover=2))  # a bid with no price
    check_recover(UpOptions("e1", provider="vast", interruptible=True, bid=0.12, recover=2))


def test_recover_is_refused_on_runpod_and_on_demand_last_needs_recover() -> None:
    with pytest.raises(ConfigError, match="for Vast"):
        check_recover(UpOptions("e1", provider="runpod", interruptible=True, bid=0.12, recover=1))
    with pytest.raises(ConfigError, match="needs --recover"):
        check_recover(UpOptions("e1", provider="vast", interruptible=True, bid=0.12, recover_on_demand=True))


def test_the_watchdog_reads_the_recovery_from_the_pods_env_and_recover_zero_adds_nothing() -> None:
    assert recover_env(UpOptions("e1")) == {}
    asked = UpOptions("e1", provider="vast", interruptible=True, bid=0.12, recover=3, recover_on_demand=True)
    assert recover_env(asked) == {"GPUC_RECOVER": "3", "GPUC_RECOVER_ON_DEMAND": "1"}


def test_help_says_recover_zero_is_todays_behaviour() -> None:
    out = CliRunner().invoke(up, ["--help"]).output
    assert "--recover" in out and "0: today's" in " ".join(out.split())
