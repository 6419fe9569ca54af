"""One tap from the phone through the Lambda Function URL adapter, on DynamoDB and SSM in moto: the same
pages, the same single use (DynamoDB's conditional write), the same refusals."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from fakes.phone import leased, tap_token
from test_aws_handlers import FUNCTION_URL_HOST, TABLE, LambdaWorld, lambda_world, url_event, world  # noqa: F401
from test_phone_taps import BOT_TOKEN, CHAT, SLACK_SECRET, TG_SECRET, slack, slack_body, telegram, update

from gpuc.core.clock import FakeClock
from gpuc.functions import aws as lam
from gpuc.functions.buttons import offer
from gpuc.functions.edge import Request


def lambda_call(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> dict[str, Any]:
    # A Function URL hands a form body over base64-encoded.
    event = url_event(Request(method, path, headers or {}, body), b64=bool(body))
    out: dict[str, Any] = lam.ingest_handler(event, None)
    if out.get("isBase64Encoded"):
        out["body"] = base64.b64decode(out["body"]).decode()
    return out


def tap(token: str) -> dict[str, Any]:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    return lambda_call("POST", f"/a/{token}", b"confirm=yes", form)


def test_a_tap_through_lambda_keeps_the_pod_once(world: LambdaWorld) -> None:  # noqa: F811
    world.register("p1")
    world.ping("p1")
    offers = offer(world.deps.store, world.deps.settings, world.pod("p1"), "pending_destroy", world.now)
    keep = next(o for o in offers if o.verb == "keep")
    page = lambda_call("GET", f"/a/{keep.token}")
    assert page["statusCode"] == 200 and page["headers"]["content-type"].startswith("text/html")
    assert "no-referrer" in page["headers"].get("referrer-policy", "").lower()
    assert world.pod("p1").lease_until is None  # the GET did nothing
    first = tap(keep.token)
    assert first["statusCode"] == 200, first["body"]
    assert world.pod("p1").lease_until == world.now + 3600
    again = tap(keep.token)
    assert again["statusCode"] == 410 and "already used" in again["body"]
    assert world.kinds("p1").count("action") == 1


def test_destroy_anyway_through_lambda_and_forged_links_refused(world: LambdaWorld) -> None:  # noqa: F811
    world.register("p1")
    world.ping("p1")
    assert world.event("p1", "sync_failed", "kept alive: sync failed", kept_left_s=7200).status == 200
    offers = offer(world.deps.store, world.deps.settings, world.pod("p1"), "kept", world.now)
    anyway = next(o for o in offers if o.verb == "anyway")
    forged = anyway.token.replace(".p1.", ".p2.")
    assert tap(forged)["statusCode"] == 403
    assert lambda_call("POST", f"/a/{anyway.token}")["statusCode"] == 403  # never from a bare button
    assert world.provider.destroyed == []
    assert tap(anyway.token)["statusCode"] == 200
    assert world.provider.destroyed == ["p1"]
    assert world.pod("p1").state == "destroyed"


def outbox_links(world: LambdaWorld) -> list[str]:  # noqa: F811
    import json

    sent = [json.loads(line) for line in world.notifier.outbox.read_text().splitlines()]
    return [a["url"] for m in sent for a in m.get("actions", [])]


def test_the_links_a_deployed_ingest_sends_reach_its_own_function_url(world: LambdaWorld) -> None:  # noqa: F811
    """No GPUC_PUBLIC_URL on the ingest (the template cannot hand a function its own URL): the buttons of
    the notification a pod's event sends name the Function URL the event came in on, not a loopback."""
    world.register("p1")
    world.ping("p1")
    assert world.event("p1", "sync_failed", "kept alive: sync failed", kept_left_s=7200).status == 200
    links = outbox_links(world)
    assert links and all(url.startswith(f"https://{FUNCTION_URL_HOST}/a/") for url in links), links


def test_a_host_that_is_not_a_function_url_is_not_taken_for_one(world: LambdaWorld) -> None:  # noqa: F811
    event = url_event(Request("GET", "/v1/status", {}, b""))
    event["requestContext"]["domainName"] = "evil.example"
    lam.ingest_handler(event, None)
    assert world.deps.settings.public_url is None


# -- the channels' taps through the Lambda handler (Telegram's webhook, Slack's Request URL) ------------
@pytest.fixture
def channels(aws: str, home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaWorld]:
    secrets = {
        "telegram_secret": TG_SECRET,
        "slack_signing_secret": SLACK_SECRET,
        "notify_urls": f"tgram://{BOT_TOKEN}/{CHAT}",
    }
    yield from lambda_world(home, clock, monkeypatch, secrets)


def table_items() -> list[dict[str, Any]]:
    return list(boto3.client("dynamodb").scan(TableName=TABLE)["Items"])


def test_a_telegram_tap_through_lambda_acts_once_and_a_forged_one_stores_nothing(channels: LambdaWorld) -> None:
    tg = channels
    tg.register("p1")
    body = update(tap_token(tg))
    before = table_items()
    assert telegram(tg, body, "wrong-secret")[0] == 401
    assert table_items() == before and leased(tg) is None
    status, answer = telegram(tg, body)
    assert status == 200 and str(answer["text"]).startswith("kept 1 h more") and leased(tg) is not None
    status, again = telegram(tg, body)
    assert status == 200 and "already used" in str(again["text"])


def test_a_slack_tap_through_lambda_acts_once_and_a_bad_signature_stores_nothing(channels: LambdaWorld) -> None:
    sl = channels
    sl.register("p1")
    body = slack_body(tap_token(sl))
    before = table_items()
    assert slack(sl, body, secret="wrong")[0] == 401
    assert table_items() == before and leased(sl) is None
    status, answer = slack(sl, body)
    assert status == 200 and str(answer["text"]).startswith("kept 1 h more") and leased(sl) is not None
    assert "already used" in str(slack(sl, body)[1]["text"])
