"""infra/template.yaml: cfn-lint clean, and the safety properties the watchdog relies on are in it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfnlint.decode import decode  # type: ignore[import-untyped]

from gpuc.functions.dynamo import TTL_ATTRIBUTE, table_definition

TEMPLATE = Path(__file__).parents[2] / "infra" / "template.yaml"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    template, errors = decode(str(TEMPLATE))
    assert not errors and template is not None
    return dict(template["Resources"])


def test_cfn_lint_passes() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), str(TEMPLATE)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_table_matches_the_store(resources: dict[str, Any]) -> None:
    props = resources["Table"]["Properties"]
    expected = table_definition("x")
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["KeySchema"] == expected["KeySchema"]
    assert props["AttributeDefinitions"] == expected["AttributeDefinitions"]
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}


def test_the_reaper_runs_alone_and_is_never_retried(resources: dict[str, Any]) -> None:
    assert resources["ReaperFunction"]["Properties"]["ReservedConcurrentExecutions"] == 1
    assert resources["ReaperInvokeConfig"]["Properties"]["MaximumRetryAttempts"] == 0
    schedule = resources["ReaperSchedule"]["Properties"]
    assert schedule["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 0
    assert resources["ReaperFunction"]["Properties"]["Handler"] == "gpuc.functions.aws.reaper_handler"


def test_the_ingest_url_is_public_but_capped(resources: dict[str, Any]) -> None:
    assert resources["IngestUrl"]["Properties"]["AuthType"] == "NONE"
    assert "ReservedConcurrentExecutions" in resources["IngestFunction"]["Properties"]
    assert resources["IngestFunction"]["Properties"]["Handler"] == "gpuc.functions.aws.ingest_handler"


def test_logs_have_retention_and_no_secret_is_in_the_template(resources: dict[str, Any]) -> None:
    groups = [r for r in resources.values() if r["Type"] == "AWS::Logs::LogGroup"]
    assert len(groups) == 2 and all("RetentionInDays" in g["Properties"] for g in groups)
    assert not [r for r in resources.values() if r["Type"] == "AWS::SSM::Parameter"]
    text = TEMPLATE.read_text()
    assert "resolve:ssm" not in text  # secrets are read at runtime, never baked into the stack


def statements(resources: dict[str, Any], role: str) -> list[dict[str, Any]]:
    return [s for policy in resources[role]["Properties"]["Policies"] for s in policy["PolicyDocument"]["Statement"]]


def test_the_reaper_may_read_the_ingests_metrics_and_knows_its_name(resources: dict[str, Any]) -> None:
    """F18: a throttled ingest's refused heartbeats are not silence; the reaper must be able to tell."""
    actions = [s["Action"] for s in statements(resources, "ReaperRole")]
    assert "cloudwatch:GetMetricStatistics" in actions
    assert not any("cloudwatch" in str(a) for a in (s["Action"] for s in statements(resources, "IngestRole")))
    env = resources["ReaperFunction"]["Properties"]["Environment"]["Variables"]
    assert env["INGEST_FUNCTION_NAME"] == {"Ref": "IngestFunction"}
