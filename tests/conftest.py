from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from gpuc.core.clock import FakeClock


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background (`make test &`, a CI step run that way) inherits SIGINT ignored, and so
    would every `gpuc` it starts: Ctrl-C is then rightly nothing to them, and the tests of what Ctrl-C does could
    not send one. A user's terminal delivers it: the tests run as from one. (Exec resets a handler to the
    default, so the processes the tests start get SIGINT as a terminal's would.)"""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No test sees the developer's keys, home or .env."""
    for key in list(os.environ):
        if key.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_", "HF_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GPUC_HOME", str(tmp_path / "gpuc-home"))
    monkeypatch.setenv("GPUC_ENV_FILE", str(tmp_path / "no.env"))
    yield


@pytest.fixture(autouse=True)
def gpuc_logs_left_on() -> Iterator[None]:
    """A test that switches gpuc's loggers off (a library's logging.config.dictConfig disables every logger
    that exists) fails itself, rather than a later test in the worker that reads what gpuc logs."""
    yield
    off = [
        name
        for name, logger in logging.Logger.manager.loggerDict.items()
        if name.startswith("gpuc") and isinstance(logger, logging.Logger) and logger.disabled
    ]
    assert not off, f"this test left gpuc's loggers disabled: {off[:5]}"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "gpuc-home"


@pytest.fixture
def s3() -> Iterator[Any]:
    """A moto S3 with the bucket `results`: where the pods' syncs and the laptop's `gpuc logs` meet."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")
        client.create_bucket(Bucket="results")
        yield client


@pytest.fixture(autouse=True)
def fresh_http_client() -> Iterator[None]:
    """The process's one HTTP client (core/transport.py) reads the environment (proxies, SSL_CERT_FILE) when
    built: each test builds its own, and its kept-open connections close with the test."""
    yield
    from gpuc.core.transport import reset_shared_client

    reset_shared_client()


@pytest.fixture(scope="session")
def s3_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """ministack with AUTH on (every signature and expiry checked), its bucket, and the watchdog's key: one per
    test process (tests/fakes/s3world.py)."""
    from fakes.s3world import BUCKET, ministack, watchdog_key

    with ministack(tmp_path_factory.mktemp("ministack")) as stack:
        stack.client("s3").create_bucket(Bucket=BUCKET)
        yield stack, watchdog_key(stack)


@pytest.fixture
def grants(s3_stack: Any, tmp_path: Path) -> Iterator[Any]:
    """A watchdog holding the results key, on its own prefix of the shared bucket (tests/fakes/s3world.py)."""
    import secrets as pysecrets

    from fakes.s3world import GrantWorld

    stack, key = s3_stack
    world = GrantWorld(stack, key, tmp_path / "grants", prefix=f"runs-{pysecrets.token_hex(4)}").start()
    yield world
    world.stop()
