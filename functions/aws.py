"""The watchdog on AWS Lambda: thin adapters from Lambda events to the same handlers and reaper.

`ingest_handler` serves the Function URL (payload format 2.0) by building a transport-neutral
`Request` and calling `handlers.dispatch`; `reaper_handler` runs one `reap_safely` pass for the
EventBridge Scheduler event. Deps are built once per container (warm invocations reuse the boto3
clients and the provider HTTP pools) from the environment:

    TABLE_NAME        the DynamoDB table (functions.dynamo)
    INGEST_FUNCTION_NAME  the ingest Lambda, whose CloudWatch metrics the reaper reads (F18)
    GPUC_SSM_PREFIX   SecureString parameters <prefix>/<settings field>, e.g. /gpuc/watchdog/admin_token
    GPUC_*            every non-secret Settings field, as on the laptop

Secrets are read at runtime with decryption, never from environment variables (those show in the
console and in GetFunctionConfiguration), and never logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import boto3

from gpuc.core import api
from gpuc.core.settingsload import load_settings
from gpuc.functions.app import Deps, build_deps
from gpuc.functions.dynamo import DynamoStore
from gpuc.functions.edge import Request, Response, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.functions.links import path_for_log
from gpuc.functions.reaper import reap_safely

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

log = logging.getLogger("gpuc.functions")

# The secrets the functions need; deploy stores exactly these, the Lambdas read exactly these.
WATCHDOG_SECRETS = (
    "admin_token",
    "runpod_api_key",
    "vast_api_key",
    "notify_urls",
    "webhook_secret",
    "telegram_secret",
    "slack_signing_secret",
    "vast_webhook_secret",
    # Deploy's own (never copied from the laptop's settings, see deploy.watchdog_key_values): the watchdog's
    # key (pod claims) and the pods carried in from another watchdog (`deploy --carry`).
    "watchdog_key",
    "watchdog_carried",
    # The results bucket the watchdog grants pods their runs' prefixes in (functions/grants.py), and its key:
    # the key stays here and on the laptop, never on a pod. The bucket and endpoint are not secrets; they ride
    # with the key so one deploy sets all four.
    "results_bucket",
    "s3_endpoint_url",
    "s3_access_key_id",
    "s3_secret_access_key",
)
SSM_NAMES_PER_CALL = 10  # GetParameters takes at most 10 names
DEPLOY_OWN = ("watchdog_key", "watchdog_carried")
DEFAULT_SSM_PREFIX = "/gpuc/watchdog"
LAMBDA_HOME = "/tmp/gpuc"  # the only writable path on Lambda: the notifier's outbox lives there

_deps: Deps | None = None
_deps_lock = threading.Lock()


def read_secrets(ssm: SSMClient, prefix: str) -> dict[str, str]:
    """The SecureString parameters under prefix, decrypted: {settings field: value}."""
    names = [f"{prefix.rstrip('/')}/{field}" for field in WATCHDOG_SECRETS]
    found: dict[str, str] = {}
    for start in range(0, len(names), SSM_NAMES_PER_CALL):
        got = ssm.get_parameters(Names=names[start : start + SSM_NAMES_PER_CALL], WithDecryption=True)
        found.update({p["Name"].rsplit("/", 1)[-1]: p["Value"] for p in got.get("Parameters", []) if p.get("Value")})
    return found


def emulated_settings(text: str) -> dict[str, str]:
    """The stack's EmulatedSettings (a deployment on a local AWS emulator; deploy refuses it elsewhere):
    non-secret GPUC_ settings as a JSON object, "" for none."""
    if not text:
        return {}
    found = json.loads(text)
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and k.startswith("GPUC_") and isinstance(v, str) for k, v in found.items()
    ):
        raise RuntimeError("GPUC_EMULATED_SETTINGS is not an object of GPUC_ settings: redeploy")
    return found


def deps_from_env(environ: Mapping[str, str] | None = None) -> Deps:
    env = dict(os.environ if environ is None else environ)
    env.setdefault("GPUC_HOME", LAMBDA_HOME)
    env.update(emulated_settings(env.pop("GPUC_EMULATED_SETTINGS", "")))
    prefix = env.get("GPUC_SSM_PREFIX", DEFAULT_SSM_PREFIX)
    secrets = read_secrets(boto3.client("ssm"), prefix)
    if not secrets.get("admin_token"):
        # Without it build_deps would mint a token nobody knows: refuse to start instead.
        raise RuntimeError(f"SSM parameter {prefix}/admin_token is missing: run `gpuc watchdog deploy`")
    settings = load_settings(env).with_overrides(**secrets)
    store = DynamoStore(env["TABLE_NAME"], boto3.client("dynamodb"))
    # Never minted here: each container would hold a key of its own. Without one in SSM (a deployment from
    # before claims) pods register with their own keys, as they did.
    deps = build_deps(settings, store=store, mint_key=False)
    if env.get("INGEST_FUNCTION_NAME"):
        deps.ingest_health = CloudWatchIngestHealth(env["INGEST_FUNCTION_NAME"])
    return deps


class CloudWatchIngestHealth:
    """The ingest Lambda's own metrics (IngestHealth for the reaper, F18): a flood that fills its reserved
    concurrency shows as Throttles, a crashed or timed-out invocation as Errors, any 5xx answer of its
    URL as Url5xxCount. Sparse metrics (no data point = none happened), one-minute periods; a point can
    take a minute or two to appear, so the window reaches a period back (reaper.ingest_trouble)."""

    METRICS = (("Throttles", "was throttled"), ("Errors", "failed"), ("Url5xxCount", "answered 5xx"))

    def __init__(self, function_name: str, client: Any = None) -> None:  # a boto3 "cloudwatch" client
        self.function_name = function_name
        self._client = client  # built on first use: the ingest's cold start never pays for it

    def trouble(self, since: float, now: float) -> str | None:
        if self._client is None:
            self._client = boto3.client("cloudwatch")
        start = datetime.fromtimestamp(since // 60 * 60, tz=UTC)
        end = datetime.fromtimestamp(now // 60 * 60 + 60, tz=UTC)
        found = []
        for metric, words in self.METRICS:
            got = self._client.get_metric_statistics(
                Namespace="AWS/Lambda",
                MetricName=metric,
                Dimensions=[{"Name": "FunctionName", "Value": self.function_name}],
                StartTime=start,
                EndTime=end,
                Period=60,
                Statistics=["Sum"],
            )
            count = int(sum(point.get("Sum", 0.0) for point in got.get("Datapoints", [])))
            if count > 0:
                found.append(f"{words} {count} times")
        return f"({self.function_name}) {' and '.join(found)}" if found else None


def get_deps() -> Deps:
    global _deps
    with _deps_lock:
        if _deps is None:
            _deps = deps_from_env()
        return _deps


def set_deps(deps: Deps | None) -> None:
    """For tests and for a caller that wires Deps itself (e.g. a fake provider)."""
    global _deps
    with _deps_lock:
        _deps = deps


def request_from_event(event: Mapping[str, Any]) -> Request | Response:
    """A Function URL v2 event as a Request, or the 4xx answer for one that cannot be one. Nothing in
    the event is trusted to have its documented shape: any field may be missing, null or of another
    type, and a string may hold a lone surrogate (JSON allows "\\ud800"), which no store can encode."""
    context = event.get("requestContext")
    http = context.get("http") if isinstance(context, Mapping) else None
    method = http.get("method") if isinstance(http, Mapping) else None
    path = event.get("rawPath")
    if not isinstance(method, str) or not isinstance(path, str) or not (_utf8(method) and _utf8(path)):
        return Response(400, {"error": "not a Function URL request"})
    raw = event.get("body")
    raw = "" if raw is None else raw
    encoded = event.get("isBase64Encoded", False)
    if not isinstance(raw, str) or not isinstance(encoded, bool) or not _utf8(raw):
        return Response(400, {"error": "malformed body"})
    # Checked before decoding: base64 is 4/3 of the body, so this bounds the work for a huge one
    if len(raw) > api.MAX_BODY_BYTES * 4 // 3 + 4:
        return Response(413, {"error": f"body larger than {api.MAX_BODY_BYTES} bytes"})
    try:
        body = base64.b64decode(raw, validate=True) if encoded else raw.encode()
    except (binascii.Error, ValueError):
        return Response(400, {"error": "malformed base64 body"})
    headers = event.get("headers")
    headers = {} if headers is None else headers
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and _utf8(k) and _utf8(v) for k, v in headers.items()
    ):
        return Response(400, {"error": "malformed headers: names and values must be text"})
    return Request(method, path, dict(headers), body)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def lambda_response(response: Response) -> dict[str, Any]:
    return {
        "statusCode": response.status,
        "headers": {
            "content-type": response.content_type,
            "cache-control": "no-store",
            **{name.lower(): value for name, value in response.page_headers.items()},
        },
        "body": response_bytes(response).decode(),
        "isBase64Encoded": False,
    }


def ingest_handler(event: Mapping[str, Any], context: object) -> dict[str, Any]:
    parsed = request_from_event(event) if isinstance(event, Mapping) else Response(400, {"error": "bad event"})
    if isinstance(parsed, Response):
        return lambda_response(parsed)
    deps = get_deps()
    learn_public_url(deps, event)
    response = dispatch(parsed, deps, deps.clock.now())
    log.info("%s %s %d", parsed.method, path_for_log(parsed.path), response.status)  # a link's path is the link
    return lambda_response(response)


_FUNCTION_URL_HOST = re.compile(r"[a-z0-9]+\.lambda-url\.[a-z0-9-]+\.on\.aws")


def learn_public_url(deps: Deps, event: Mapping[str, Any]) -> None:
    """The links this function sends (a tap's own notification) must reach it: with no GPUC_PUBLIC_URL,
    its Function URL's domain, which AWS sets in the event (the template cannot hand a function its own
    URL). Anything else in that field is ignored: the links fall back to the settings' URLs."""
    if deps.settings.public_url:
        return
    context = event.get("requestContext")
    domain = context.get("domainName") if isinstance(context, Mapping) else None
    if isinstance(domain, str) and _FUNCTION_URL_HOST.fullmatch(domain):
        deps.settings = deps.settings.with_overrides(public_url=f"https://{domain}")


def reaper_handler(event: Mapping[str, Any], context: object) -> dict[str, Any]:
    """Runs one pass. Never raises: a raise would make Lambda retry a pass that may have destroyed."""
    deps = get_deps()
    report = reap_safely(deps)
    if report is None:
        return {"ok": False}
    summary = {"ok": True, "actions": len(report.actions), "blind": bool(report.blind)}
    log.info("reaper pass: %s", json.dumps(summary))
    return summary
