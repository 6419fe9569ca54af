"""`gpuc watchdog serve` keeps its key in config.json beside the admin token, never in its store: a serve
restarted after watchdog.db was deleted knows a pinging pod again by its claim, over real HTTP
with the pod's own stdlib client."""

from __future__ import annotations

import json
from pathlib import Path

from gpuc.core.api import RegisterRequest
from gpuc.core.clock import SystemClock
from gpuc.core.models import PodSpec
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settingsload import load_settings
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.server import start_in_thread
from gpuc.functions.store import SqliteStore
from gpuc.instance_side.heartbeat import PodClient, heartbeat_body
from gpuc.instance_side.podhttp import UrllibTransport
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.signer import ClaimFile, SeqCounter, Signer


def serve_settings(tmp_path: Path, home: Path):  # type: ignore[no-untyped-def]
    """What `gpuc watchdog serve` reads at each start: the environment, .env, then config.json."""
    return load_settings(
        {"GPUC_HOME": str(home), "GPUC_ENV_FILE": str(tmp_path / "none.env"), "GPUC_ADMIN_TOKEN": "a" * 40}
    )


def pod_client(state: Path, url: str, token: str, claim: str, pod_id: str) -> PodClient:
    clock = SystemClock()
    signer = Signer(pod_id, token, SeqCounter(state / "seq", clock), clock, ClaimFile(state / "claim", claim))
    return PodClient(url, signer, UrllibTransport(), clock, PodLog(state / "agent.log", clock, role="agent"))


def test_a_serve_restarted_on_a_deleted_store_knows_its_pods_by_their_claims(tmp_path: Path) -> None:
    home, state = tmp_path / "home", tmp_path / "pod"
    state.mkdir()
    server = start_in_thread(serve_settings(tmp_path, home), port=0)
    # A pod at the (local) provider: a store that lost it re-creates only what a listing shows.
    spec = PodSpec(experiment="exp", run_id="pod-1", provider="local", gpu_type="RTX 4090")
    made = LocalProvider(home, serve_settings(tmp_path, home)).create(spec)
    try:
        settings = serve_settings(tmp_path, home).with_overrides(watchdog_url=server.url)
        with WatchdogClient(settings) as client:
            answer = client.register(
                RegisterRequest(pod_id=made.id, provider="local", name=made.name, experiment="exp")
            )
            watchdog_id = client.status().watchdog_id
        assert answer.token and answer.claim and watchdog_id
        pod = pod_client(state, server.url, answer.token, answer.claim, made.id)
        pod.queue_heartbeat(heartbeat_body(made.id))
        assert pod.flush(0.0) is not None
    finally:
        server.stop()
    key = json.loads((home / "config.json").read_text())["watchdog_key"]
    assert all(key.encode() not in f.read_bytes() for f in home.glob("watchdog.db*"))  # never in the store
    for f in home.glob("watchdog.db*"):
        f.unlink()
    again = start_in_thread(serve_settings(tmp_path, home), port=0)
    try:
        with WatchdogClient(serve_settings(tmp_path, home).with_overrides(watchdog_url=again.url)) as client:
            client.reap()  # its first pass lists the pod (a stray to it until its claim is shown)
        pod = pod_client(state, again.url, answer.token, answer.claim, made.id)
        pod.queue_heartbeat(heartbeat_body(made.id))
        assert pod.flush(0.0) is not None, (state / "agent.log").read_text()
    finally:
        again.stop()
    store = SqliteStore(home / "watchdog.db")
    rec = store.get_pod(made.id)
    store.close()
    assert rec is not None and (rec.origin, rec.state, rec.provider) == ("registered", "ok", "local")
