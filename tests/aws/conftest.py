"""moto in server mode, started once per session on a random loopback port; reset before every test. And
a DynamoDB client answered call by call by botocore's Stubber."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from botocore.stub import Stubber
from moto.server import ThreadedMotoServer

sys.path.insert(0, str(Path(__file__).parent.parent / "functions"))


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    from fakes import lambdaurl as moto_lambda_url

    moto_lambda_url.install()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """boto3 (every client, no endpoint_url argument needed) pointed at a fresh moto."""
    httpx.post(f"{moto_url}/moto-api/reset", timeout=10.0).raise_for_status()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return moto_url


@pytest.fixture
def stub() -> Iterator[Stubber]:
    """A real boto3 DynamoDB client answered by botocore's Stubber, call by call. Explicit region and dummy
    credentials: nothing leaves the process."""
    client = boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()  # every scripted call was made: no write (or page) skipped
