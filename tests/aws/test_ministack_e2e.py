"""The AWS deployment as a whole, offline: `gpuc watchdog deploy` puts the real stack (CloudFormation,
both Lambda functions, the Function URL, DynamoDB, the EventBridge Scheduler schedule, SSM) on ministack,
a local AWS emulator run as a process on loopback. A pod at the Vast emulator registers and pings through
the Function URL, then freezes; the schedule fires the deployed reaper, which destroys it at the emulator,
records its end and sends the notification: row F5 on the real engine. Then a second deploy (an update),
and the stack's removal. moto cannot do this: its CloudFormation skips the Function URL and the Scheduler.

ministack ignores the table's TTL (so does moto): the TTL is asserted on its own, on the item and the table.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from fakes.s3world import Ministack
from fakes.s3world import ministack as start_ministack

from gpuc.core import api
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_token, sign
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

pytestmark = pytest.mark.e2e  # a real schedule fires once a minute: minutes, run in parallel with the rest

GPUC = str(Path(sys.executable).parent / "gpuc")
VAST_KEY = "e2e" + "7" * 61
AWS_KEY = "AKIAMINISTACK0E2E0000"  # any key: ministack checks none
OFFER = "11684738"  # the emulator's RTX 4090 offer
REGION = "us-east-1"
SILENCE_S, GRACE_S = 20, 10  # scaled: the reaper judges a pod silent after 20 s, destroys 10 s after the mark


@pytest.fixture(scope="module")
def ministack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ministack]:
    """Without AUTH: the deployment's keys are any (tests/fakes/s3world.py starts and stops it by pid)."""
    with start_ministack(tmp_path_factory.mktemp("ministack"), auth=False) as stack:
        yield stack


class Inbox:
    """A JSON webhook on loopback (`json://127.0.0.1:PORT/hook`): what the deployed functions notify."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                inbox.messages.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server.server_address[1]}/hook"

    def texts(self) -> str:
        return "\n".join(json.dumps(m) for m in self.messages)


@dataclass
class Deployment:
    env: dict[str, str]
    home: Path
    watchdog_url: str  # the Function URL as ministack serves it on loopback (path-based)
    admin_token: str
    emulator: VastEmulator
    inbox: Inbox

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> httpx.Response:
        return httpx.request(method, self.watchdog_url + path, content=body, headers=headers or {}, timeout=60)

    def admin(self, method: str, path: str, body: bytes = b"") -> httpx.Response:
        return self.call(method, path, body, {"Authorization": f"Bearer {self.admin_token}"})

    def status(self) -> api.StatusResponse:
        answer = self.admin("GET", "/v1/status")
        assert answer.status_code == 200, answer.text
        return api.StatusResponse.model_validate_json(answer.content)


def gpuc(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUC, *args], env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def deployed(ministack: Ministack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("home")
    emulator = VastEmulator(api_key=VAST_KEY, boot_polls=0)
    inbox = Inbox()
    with EmulatorServer(emulator) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUC_", "VAST_", "RUNPOD_"))}
        env.update(
            AWS_ENDPOINT_URL=ministack.url,
            AWS_ACCESS_KEY_ID=AWS_KEY,
            AWS_SECRET_ACCESS_KEY=AWS_KEY,
            AWS_DEFAULT_REGION=REGION,
            GPUC_HOME=str(home),
            GPUC_ENV_FILE=str(home / "none.env"),
            GPUC_PROVIDER="vast",
            GPUC_NOTIFY_URLS=inbox.url,
            **server.client_env(),
        )
        emulated = {
            "GPUC_VAST_URL": server.client_env()["GPUC_VAST_URL"],
            "GPUC_SILENCE_LIMIT_S": str(SILENCE_S),
            "GPUC_DESTROY_GRACE_S": str(GRACE_S),
            "GPUC_REAPER_PERIOD_S": "60",
        }
        flags = [f"--emulated={k}={v}" for k, v in emulated.items()]
        done = gpuc(env, "watchdog", "deploy", "--no-carry", "--reaper-every", "1m", *flags)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "the reaper runs at rate(1 minute)" in done.stderr  # gpuc's own lines go to stderr
        config = json.loads((home / "config.json").read_text())
        url_id = config["watchdog_url"].split("//", 1)[1].split(".", 1)[0]
        yield Deployment(
            env=env,
            home=home,
            watchdog_url=f"{ministack.url}/_aws/lambda-url/{url_id}",
            admin_token=config["admin_token"],
            emulator=emulator,
            inbox=inbox,
        )
    inbox.server.shutdown()
    inbox.server.server_close()


def rent(deployment: Deployment) -> Pod:
    """A pod as `gpuc up` makes it at Vast: gpuc's name and GPUC_MANAGED mark, through the product's provider."""
    settings = Settings(vast_api_key=SecretStr(VAST_KEY), vast_url=deployment.env["GPUC_VAST_URL"])
    provider = VastProvider.from_settings(settings)
    spec = PodSpec(experiment="e2e", run_id=secrets.token_hex(4), provider="vast", gpu_type="RTX 4090")
    return provider.create(spec.model_copy(update={"offer_id": OFFER}))


def alive(deployment: Deployment) -> set[str]:
    return {str(i.id) for i in deployment.emulator.alive()}


def test_deploy_watch_destroy_update_and_remove_on_the_real_engine(deployed: Deployment) -> None:
    pod = rent(deployed)
    frozen_pod_is_destroyed_by_the_schedule(deployed, pod)
    items_expire_on_their_own_attribute(deployed)
    a_second_deploy_updates_the_stack(deployed)
    removal_waits_for_no_pod_then_leaves_nothing(deployed)


def frozen_pod_is_destroyed_by_the_schedule(deployed: Deployment, pod: Pod) -> None:
    token, now = new_token(), time.time()
    register = api.RegisterRequest(
        pod_id=pod.id,
        provider="vast",
        name=pod.name,
        experiment="e2e",
        key=derive_key(token),
        price_per_hour=0.4,
        started_at=now,
        deadline_at=now + 3600,
    )
    assert deployed.admin("POST", "/v1/pods", register.model_dump_json().encode()).status_code == 200
    for seq in (1, 2):  # it pings through the Function URL, as its agent does
        body = api.HeartbeatBody(pod_id=pod.id, seq=seq, sent_at=time.time()).model_dump_json().encode()
        ts = int(time.time())
        headers = {api.H_POD: pod.id, api.H_TIMESTAMP: str(ts), api.H_SEQ: str(seq)}
        headers[api.H_SIGNATURE] = sign(derive_key(token), ts, seq, body)
        answer = deployed.call("POST", "/v1/heartbeat", body, headers)
        assert answer.status_code == 200, answer.text
    # Then it freezes: no more pings. Only the schedule acts from here (the test invokes no pass).
    assert pod.id in alive(deployed)
    deadline = time.monotonic() + 6 * 60
    while pod.id in alive(deployed):
        assert time.monotonic() < deadline, f"not destroyed in 6 min: {deployed.status().model_dump_json()}"
        time.sleep(5)
    status = deployed.status()
    assert status.reaper_last_run is not None  # the schedule fired the deployed reaper
    record = next(p for p in status.pods if p.pod_id == pod.id)
    assert record.state == "destroyed", record  # its end recorded
    sent = [m for m in deployed.inbox.messages if pod.id in json.dumps(m)]
    assert any("destroy" in json.dumps(m).lower() for m in sent), deployed.inbox.texts()


def items_expire_on_their_own_attribute(deployed: Deployment) -> None:
    """The emulators ignore TTL, so it is asserted on its own: the deployed template turns it on for
    `expires_at`, and what the functions wrote carries a future `expires_at` where it should expire at all."""
    template = aws(deployed, "cloudformation").get_template(StackName="gpuc-watchdog")["TemplateBody"]
    assert "TimeToLiveSpecification:\n        AttributeName: expires_at\n        Enabled: true" in str(template)
    dynamodb = aws(deployed, "dynamodb")
    (table,) = dynamodb.list_tables()["TableNames"]
    items = dynamodb.scan(TableName=table)["Items"]
    expiring = [int(i["expires_at"]["N"]) for i in items if "expires_at" in i]
    assert expiring and all(time.time() < at < time.time() + 400 * 86400 for at in expiring)


def a_second_deploy_updates_the_stack(deployed: Deployment) -> None:
    before = deployed.status().server_time
    done = gpuc(deployed.env, "watchdog", "deploy", "--no-carry", "--reaper-every", "1m")
    assert done.returncode == 0, done.stdout + done.stderr
    config = json.loads((deployed.home / "config.json").read_text())
    deployed.admin_token = config["admin_token"]  # every deploy mints a fresh one: the old one is refused now
    assert deployed.status().server_time >= before


def removal_waits_for_no_pod_then_leaves_nothing(deployed: Deployment) -> None:
    token = new_token()
    watched = api.RegisterRequest(
        pod_id="31337",
        provider="vast",
        name="gpuc-watched",
        experiment="e2e",
        key=derive_key(token),
        price_per_hour=0.4,
        started_at=time.time(),
    )
    assert deployed.admin("POST", "/v1/pods", watched.model_dump_json().encode()).status_code == 200
    # The laptop reaches the Function URL through the emulator's port (its own name resolves nowhere here).
    laptop = {**deployed.env, "GPUC_WATCHDOG_URL": deployed.watchdog_url}
    refused = gpuc(laptop, "watchdog", "remove")
    assert refused.returncode != 0 and "still watches 1 pod(s): 31337" in refused.stderr, refused.stderr
    done = gpuc(laptop, "watchdog", "remove", "--force")
    assert done.returncode == 0, done.stdout + done.stderr
    stacks = aws(deployed, "cloudformation").list_stacks()["StackSummaries"]
    assert all(s["StackStatus"] == "DELETE_COMPLETE" for s in stacks if s["StackName"] == "gpuc-watchdog")
    assert aws(deployed, "ssm").get_parameters_by_path(Path="/gpuc/watchdog")["Parameters"] == []
    assert "watchdog_url" not in json.loads((deployed.home / "config.json").read_text())


def aws(deployed: Deployment, service: str) -> Any:
    """A client of the emulator (never AWS itself: the endpoint is given explicitly)."""
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=deployed.env["AWS_ENDPOINT_URL"],
        region_name=REGION,
        aws_access_key_id=AWS_KEY,
        aws_secret_access_key=AWS_KEY,
    )


def test_a_real_deployment_is_refused_the_emulated_settings(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUC_", "VAST_"))}
    env.update(
        AWS_ENDPOINT_URL="https://cloudformation.us-east-1.amazonaws.com",
        AWS_DEFAULT_REGION=REGION,
        GPUC_HOME=str(tmp_path),
        GPUC_PROVIDER="vast",
        VAST_API_KEY=VAST_KEY,
    )
    done = gpuc(env, "watchdog", "deploy", "--dry-run", "--emulated=GPUC_VAST_URL=http://127.0.0.1:1/api/v0")
    assert done.returncode != 0 and "refused for a real one" in done.stderr, done.stderr
