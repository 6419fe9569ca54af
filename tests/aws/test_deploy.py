"""`gpuc watchdog deploy` against moto in server mode: the stack, the table and the SSM parameters
exist afterwards, the config has the URL and is mode 600; --dry-run touches nothing."""

from __future__ import annotations

import json
import stat
import zipfile
from io import BytesIO
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from gpuc.client.watchdog.commands import watchdog
from gpuc.core.errors import ConfigError
from gpuc.functions import deploy as dep

KEY = "rp-secret-key-123456"
# moto's CloudFormation skips the Scheduler schedule and the EventInvokeConfig with this warning;
# test_template.py checks those two statically.
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")


@pytest.fixture
def user(aws: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUC_PROVIDER", "runpod")
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    monkeypatch.setattr(dep, "build_zip", small_zip)  # the real one: test_packaging.py
    return home


def small_zip() -> bytes:
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("gpuc/__init__.py", "")
    return out.getvalue()


def test_dry_run_touches_nothing(user: Path) -> None:
    result = CliRunner().invoke(watchdog, ["deploy", "--dry-run", "--region", "us-east-1"])
    assert result.exit_code == 0, result.output
    assert "SSM SecureString /gpuc/watchdog/runpod_api_key" in result.output
    assert KEY not in result.output
    assert boto3.client("cloudformation").describe_stacks()["Stacks"] == []
    assert boto3.client("ssm").describe_parameters()["Parameters"] == []
    assert not (user / "config.json").exists()


def test_deploy_creates_the_stack_stores_secrets_and_saves_the_url(user: Path) -> None:
    result = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gw"])
    assert result.exit_code == 0, result.output
    assert KEY not in result.output
    stack = boto3.client("cloudformation").describe_stacks(StackName="gw")["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    table = boto3.client("dynamodb").describe_table(TableName=outputs["TableName"])["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ssm = boto3.client("ssm")
    got = ssm.get_parameter(Name="/gpuc/watchdog/runpod_api_key", WithDecryption=True)["Parameter"]
    assert (got["Type"], got["Value"]) == ("SecureString", KEY)
    token = ssm.get_parameter(Name="/gpuc/watchdog/admin_token", WithDecryption=True)["Parameter"]["Value"]
    function = boto3.client("lambda").get_function(FunctionName="gw-ingest")
    assert function["Concurrency"]["ReservedConcurrentExecutions"] == 5
    url = boto3.client("lambda").get_function_url_config(FunctionName="gw-ingest")
    assert (url["FunctionUrl"], url["AuthType"]) == (outputs["IngestUrl"], "NONE")
    # The reaper sends most buttons: their links reach the ingest, never the loopback default.
    reaper_env = boto3.client("lambda").get_function(FunctionName="gw-reaper")["Configuration"]["Environment"]
    assert reaper_env["Variables"]["GPUC_PUBLIC_URL"] == outputs["IngestUrl"]
    config = user / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    saved = json.loads(config.read_text())
    assert saved["watchdog_url"] == outputs["IngestUrl"] and saved["watchdog_url"] in result.output
    assert saved["admin_token"] == token and token not in result.output
    # Deploying again updates in place and rotates the token
    again = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gw"])
    assert again.exit_code == 0, again.output
    assert json.loads(config.read_text())["admin_token"] != token


def test_a_custom_public_url_reaches_both_functions(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUC_PUBLIC_URL", "https://watchdog.example.org")
    result = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gw"])
    assert result.exit_code == 0, result.output
    for name in ("gw-reaper", "gw-ingest"):
        env = boto3.client("lambda").get_function(FunctionName=name)["Configuration"]["Environment"]["Variables"]
        assert env["GPUC_PUBLIC_URL"] == "https://watchdog.example.org", name


def test_a_plain_http_public_url_is_refused_before_anything_is_made(
    user: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUC_PUBLIC_URL", "http://watchdog.example.org")
    result = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gw"])
    assert isinstance(result.exception, ConfigError) and "must be an https:// address" in str(result.exception)
    assert boto3.client("cloudformation").describe_stacks()["Stacks"] == []
    assert boto3.client("ssm").describe_parameters()["Parameters"] == []


def test_deploy_refuses_the_local_provider(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(watchdog, ["deploy", "--dry-run", "--region", "us-east-1"])
    assert result.exit_code != 0
    assert "runpod or vast" in str(result.exception) or "runpod or vast" in result.output


def test_the_results_key_goes_to_ssm_for_the_grants_and_the_functions_read_it_all(
    user: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pods hold no S3 key: the watchdog signs their grants with its own copy (functions/grants.py). All
    of WATCHDOG_SECRETS is read back, past GetParameters' 10 names a call."""
    from gpuc.functions.aws import WATCHDOG_SECRETS, read_secrets

    results = {"GPUC_RESULTS_BUCKET": "s3://results/gpuc", "GPUC_S3_ENDPOINT_URL": "https://acct.r2.example",
               "GPUC_S3_ACCESS_KEY_ID": "AKIARESULTS", "GPUC_S3_SECRET_ACCESS_KEY": "results-secret-value"}  # fmt: skip
    for name, value in results.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gw"])
    assert result.exit_code == 0, result.output
    assert "results grants: pods get short-lived URLs" in result.output and "results-secret-value" not in result.output
    ssm = boto3.client("ssm")
    for name in ("s3_access_key_id", "s3_secret_access_key", "results_bucket", "s3_endpoint_url"):
        stored = ssm.get_parameter(Name=f"/gpuc/watchdog/{name}", WithDecryption=True)["Parameter"]
        assert stored["Type"] == "SecureString"
    assert len(WATCHDOG_SECRETS) > 10
    for name in WATCHDOG_SECRETS:  # every one set, so a read that stopped at 10 would lose some
        ssm.put_parameter(Name=f"/gpuc/watchdog/{name}", Value=f"v-{name}", Type="SecureString", Overwrite=True)
    assert read_secrets(ssm, "/gpuc/watchdog") == {name: f"v-{name}" for name in WATCHDOG_SECRETS}
