"""A deploy that stops half-way says what it left behind and how to remove each, never
"internal error"; a stack a failed first create left behind is named with its fix before anything is made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, WaiterError

from gpuc.core.settingsload import load_settings
from gpuc.functions import deploy as dep
from gpuc.functions import deployplan

KEY = "rp-secret-key-123456"
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")


class Breaking:
    """A boto3 session whose CloudFormation fails the way AWS does half-way; every other client is moto's."""

    def __init__(self, fail: str) -> None:
        self.real = boto3.Session(region_name="us-east-1")
        self.fail = fail

    def client(self, name: str) -> Any:
        client: Any = self.real.client(name)  # type: ignore[call-overload]
        if name == "cloudformation" and self.fail == "create":
            client.create_stack = self._refuse
        if name == "cloudformation" and self.fail == "waiter":
            client.get_waiter = lambda _name: _TimesOut()
        return client

    @staticmethod
    def _refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "InsufficientCapabilitiesException", "Message": "no"}}, "CreateStack")


class _TimesOut:
    def wait(self, **_: Any) -> None:
        raise WaiterError("StackCreateComplete", "Max attempts exceeded", {})


@pytest.fixture
def plan(aws: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> deployplan.Plan:
    monkeypatch.setenv("GPUC_PROVIDER", "runpod")
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setattr(dep, "build_zip", lambda: b"PK\x05\x06" + bytes(18))
    return deployplan.make_plan(load_settings(), "us-east-1", "gw")


def deploy(plan: deployplan.Plan, session: Any) -> dep.DeployError:
    with pytest.raises(dep.DeployError) as info:
        dep.deploy(load_settings(), plan, session=session, echo=lambda _: None, waiter_delay_s=0)
    return info.value


def test_a_refused_stack_names_the_zip_and_the_secrets_it_left_and_their_removal(plan: deployplan.Plan) -> None:
    err = deploy(plan, Breaking("create"))
    assert "applying the CloudFormation stack gw" in err.message
    assert "InsufficientCapabilitiesException" in err.message
    hint = err.hint or ""
    assert "aws s3 rm s3://gpuc-artifacts-" in hint
    assert "aws ssm delete-parameters --region us-east-1 --names /gpuc/watchdog/admin_token" in hint
    assert "/gpuc/watchdog/runpod_api_key" in hint
    assert KEY not in err.message + hint
    assert not (load_settings().home / "config.json").exists()  # no URL saved for a watchdog that is not there


def test_a_waiter_timeout_is_a_deploy_error_that_names_the_stack(plan: deployplan.Plan) -> None:
    err = deploy(plan, Breaking("waiter"))
    assert "applying the CloudFormation stack gw" in err.message and "Max attempts exceeded" in err.message
    assert "the stack gw is" in (err.hint or "")


def test_ctrl_c_half_way_is_reported_with_what_was_left(plan: deployplan.Plan, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*_: Any, **__: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(dep, "store_secrets", interrupted)
    err = deploy(plan, boto3.Session(region_name="us-east-1"))
    assert "storing the secrets in SSM: interrupted (Ctrl-C)" in err.message
    assert "aws s3 rm" in (err.hint or "")


def test_a_stack_left_dead_by_a_failed_create_is_refused_before_anything_is_made(plan: deployplan.Plan) -> None:
    class DeadStack:
        def client(self, name: str) -> Any:
            client: Any = boto3.client(name, region_name="us-east-1")  # type: ignore[call-overload]
            if name == "cloudformation":
                client.describe_stacks = lambda **_: {"Stacks": [{"StackStatus": "ROLLBACK_COMPLETE"}]}
            return client

    err = deploy(plan, DeadStack())
    assert "left the stack gw in ROLLBACK_COMPLETE" in err.message
    assert "aws cloudformation delete-stack --region us-east-1 --stack-name gw" in (err.hint or "")
    assert boto3.client("s3").list_buckets()["Buckets"] == []  # nothing uploaded
    assert boto3.client("ssm").describe_parameters()["Parameters"] == []
