"""The status page through the Lambda Function URL adapter, on DynamoDB and SSM in moto: the same page, as
HTML with the page headers, and the same refusals."""

from __future__ import annotations

import json
from typing import Any

from fakes.watchdog import ADMIN
from test_aws_handlers import FUNCTION_URL_HOST, LambdaWorld, url_event, world

from gpuc.functions import aws as lam
from gpuc.functions.edge import Request

__all__ = ["world"]  # the moto-backed LambdaWorld fixture, shared with test_aws_handlers


def call(req: Request) -> dict[str, Any]:
    return lam.ingest_handler(url_event(req), None)


def test_the_page_through_lambda_is_html_with_the_page_headers(world: LambdaWorld) -> None:
    world.register("pod-a", gpu="RTX 4090", price_per_hour=0.5)
    world.ping("pod-a")
    headers = {
        "Authorization": f"Bearer {ADMIN}",
        "Host": FUNCTION_URL_HOST,  # as AWS sets it, and its domainName in the event
        "X-Forwarded-Proto": "https",
    }
    minted = call(Request("POST", "/v1/page-link", headers, b'{"for_s": 3600}'))
    assert minted["statusCode"] == 200, minted
    url = json.loads(minted["body"])["url"]
    assert url.startswith(f"https://{FUNCTION_URL_HOST}/p/")
    page = call(Request("GET", "/p/" + url.rsplit("/", 1)[1]))
    assert page["statusCode"] == 200
    head = page["headers"]
    assert head["content-type"] == "text/html; charset=utf-8"
    assert head["referrer-policy"] == "no-referrer" and head["x-frame-options"] == "DENY"
    assert "default-src 'none'" in head["content-security-policy"]
    assert "pod-a" in page["body"] and "RTX 4090" in page["body"] and 'action="/a/' in page["body"]


def test_an_expired_session_through_lambda_is_a_clear_410(world: LambdaWorld) -> None:
    world.register("pod-a")
    minted = call(Request("POST", "/v1/page-link", {"Authorization": f"Bearer {ADMIN}"}, b'{"for_s": 60}'))
    token = json.loads(minted["body"])["url"].rsplit("/", 1)[1]
    world.clock.advance(61)
    page = call(Request("GET", f"/p/{token}"))
    assert page["statusCode"] == 410 and page["headers"]["content-type"].startswith("text/html")
    assert "expired" in page["body"] and "pod-a" not in page["body"]
