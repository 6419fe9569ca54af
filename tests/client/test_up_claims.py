"""`up` with a watchdog that holds a key: the pod is marked with the watchdog's id where the
provider shows it, registered without a token of its own, and handed the token and claim the watchdog answered
(its agent keeps and presents the claim: tests/functions/test_claims.py, the drill). The real `up`, local
provider and server over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dotenv import dotenv_values
from fakes.localworld import wait_for

from gpuc.client.context import Ctx
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.podpaths import CLAIM_ENV, TOKEN_ENV
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.claims import read_claim
from gpuc.functions.server import ServerHandle, start_in_thread


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Ctx, LocalProvider, ServerHandle]]:
    home = tmp_path / "home"
    settings = Settings(
        home=home,
        env_file=tmp_path / "none.env",
        admin_token=SecretStr("admin-token-x"),
        heartbeat_interval_s=1.0,
        idle_check_interval_s=1.0,
        local_boot_s=0.0,
    )
    server = start_in_thread(settings, port=0)
    settings = settings.with_overrides(watchdog_url=server.url)
    provider = LocalProvider(home, settings=settings)
    ctx = Ctx(settings, echo=lambda m: None, watchdog=WatchdogClient(settings), providers={"local": provider})
    try:
        yield ctx, provider, server
    finally:
        for pod in provider.list_pods():
            provider.destroy(pod.id)
        ctx.watchdog.close()
        server.stop()


def test_up_marks_the_pod_with_its_watchdog_and_the_agent_presents_its_claim(
    world: tuple[Ctx, LocalProvider, ServerHandle],
) -> None:
    ctx, provider, server = world
    pod = up(UpOptions(experiment="claims"), ctx)
    assert pod is not None
    listed = provider.get(pod.id)
    assert listed is not None and listed.watchdog == server.deps.watchdog_id  # what another watchdog reads
    secrets = dotenv_values(provider.paths(pod.id).secrets)
    claim = read_claim(server.deps, secrets.get(CLAIM_ENV) or "")  # the pod's agent keeps and presents it
    assert claim is not None and (claim.pod_id, claim.watchdog) == (pod.id, server.deps.watchdog_id)
    rec = server.deps.store.get_pod(pod.id)
    assert rec is not None and rec.key
    assert wait_for(lambda: (server.deps.store.get_pod(pod.id) or rec).last_seen is not None)
    assert server.deps.watchdog_key is not None
    assert server.deps.watchdog_key.get_secret_value() not in provider.paths(pod.id).secrets.read_text()
    assert derive_key(secrets[TOKEN_ENV] or "") == rec.key  # the derived token, not one `up` made up
