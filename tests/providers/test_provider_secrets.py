"""No API key, account or pod-scoped, shows up in an exception, a log record, stderr or a request record,
whatever goes wrong."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest
from fakes.providers import RUNPOD_KEY, VAST_KEY, VAST_URL, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import GpucError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.podkey import RunPodSelfDestroyer, VastSelfDestroyer
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

OFFER = "11684738"


def attempt(action: Callable[[], object], errors: list[str]) -> None:
    try:
        action()
    except GpucError as exc:
        errors.extend([str(exc), repr(exc), exc.message, exc.hint or "", repr(exc.args)])


def assert_clean(texts: list[str], secrets: list[str]) -> None:
    for text in texts:
        for secret in secrets:
            assert secret not in text


def test_no_vast_key_leaks_through_failures_logs_or_records(
    vast: VastProvider, vast_emu: VastEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[str] = []
    pod = vast.create(spec("vast", offer_id=OFFER))
    instance_key = vast_emu.pod_environ(pod.id)["CONTAINER_API_KEY"]
    attempt(vast.balance, errors)  # the answer holds the account key
    vast_emu.faults.add(op="balance", kind="schema_drift")  # ... and now fails to parse, key and all
    attempt(vast.balance, errors)
    vast_emu.faults.add(op="list", kind="429", times=None)
    attempt(vast.list_pods, errors)
    vast_emu.faults.clear()
    vast_emu.faults.add(op="destroy", kind="success_false")
    attempt(lambda: vast.destroy(pod.id), errors)
    other = vast.create(spec("vast", "run0002", offer_id="11684741"))
    foreign = {**vast_emu.pod_environ(pod.id), "CONTAINER_ID": other.id}
    attempt(lambda: VastSelfDestroyer.from_environ(foreign, send=vast_emu.pod_send()).destroy_self(), errors)
    wrong = VastProvider("not-the-key", url=VAST_URL, transport=vast_emu.transport(), backoff=zero_backoff)
    attempt(wrong.list_pods, errors)
    assert len(errors) >= 5 * 5
    texts = errors + [r.getMessage() for r in caplog.records] + [repr(vast_emu.requests)]
    assert_clean(texts, [VAST_KEY, instance_key])


def test_a_provider_echoing_the_key_in_its_error_is_scrubbed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)

    def echo(request: httpx.Request) -> httpx.Response:
        said = f"key {RUNPOD_KEY} has no access"
        if request.url.path == "/graphql":
            return httpx.Response(200, json={"errors": [{"message": said}]})
        return httpx.Response(503, text=said)

    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url="http://x/graphql",
        rest_url="http://x/v2",
        transport=httpx.MockTransport(echo),
        clock=FakeClock(),
        backoff=zero_backoff,
    )
    errors: list[str] = []
    attempt(provider.balance, errors)
    attempt(lambda: provider.get("abc123"), errors)
    assert len(errors) == 10
    assert_clean(errors + [r.getMessage() for r in caplog.records], [RUNPOD_KEY])


def test_no_runpod_key_leaks_over_real_http(
    runpod_server: EmulatorServer,
    runpod_emu: RunPodEmulator,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=f"{runpod_server.url}/graphql",
        rest_url=f"{runpod_server.url}/v2",
        timeout_s=2.0,  # wall clock, the connect included: a fraction of a second fails on a loaded machine
        clock=FakeClock(),
        backoff=zero_backoff,
    )
    errors: list[str] = []
    try:
        pod = provider.create(spec("runpod"))
        pod_key = runpod_emu.pod_environ(pod.id)["RUNPOD_API_KEY"]
        runpod_emu.faults.add(op="list", kind="schema_drift")
        attempt(provider.list_pods, errors)
        runpod_emu.faults.add(op="create", kind="timeout", times=None)
        attempt(lambda: provider.create(spec("runpod", "run0002")), errors)
        runpod_emu.faults.clear()
        runpod_emu.pod_key_can_terminate = False
        destroyer = RunPodSelfDestroyer.from_environ(
            {
                "RUNPOD_POD_ID": pod.id,
                "RUNPOD_API_KEY": pod_key,
                "GPUC_RUNPOD_GRAPHQL_URL": f"{runpod_server.url}/graphql",
            }
        )
        said = destroyer.destroy_self()
    finally:
        provider.close()
    out, err = capfd.readouterr()
    assert len(errors) == 10
    texts = [*errors, said, out, err, repr(runpod_emu.requests), *(r.getMessage() for r in caplog.records)]
    assert_clean(texts, [RUNPOD_KEY, pod_key])
