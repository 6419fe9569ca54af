"""One tap from the phone through the Lambda Function URL adapter, on DynamoDB and SSM in moto: the same
pages, the same single use (DynamoDB's conditional write), the same refusals."""

from __future__ import annotations

import base64
from typing import Any

from test_aws_handlers import LambdaWorld, url_event, world  # noqa: F401 - the fixture

from gpuc.functions import aws as lam
from gpuc.functions.actions.verbs import offer
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
    keep = next(o for o in offer(world.deps, world.pod("p1"), "pending_destroy", world.now) if o.verb == "keep")
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
    anyway = next(o for o in offer(world.deps, world.pod("p1"), "kept", world.now) if o.verb == "anyway")
    forged = anyway.token.replace(".p1.", ".p2.")
    assert tap(forged)["statusCode"] == 403
    assert lambda_call("POST", f"/a/{anyway.token}")["statusCode"] == 403  # never from a bare button
    assert world.provider.destroyed == []
    assert tap(anyway.token)["statusCode"] == 200
    assert world.provider.destroyed == ["p1"]
    assert world.pod("p1").state == "destroyed"
