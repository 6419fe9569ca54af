"""What a provider's answer says, read by one set of rules on the laptop and on the pod: RunPod's GraphQL
errors (retired, rate-limited, refused), Vast's "not found", a message fit to show.

Standard library only: the pod imports this (core/providers/podkey.py) under any python3 >= 3.9."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from gpuc.core.errors import ProviderAuthError, ProviderError, ProviderSchemaError, ProviderUnavailable

MAX_MESSAGE = 300
MESSAGE_KEYS = ("detail", "msg", "message", "error", "title")


# RunPod's GraphQL, for what REST v2 has no route (core/providers/runpod.py's docstring). Values pass as
# variables, never inlined.
SELF_READ_QUERY = "query Pod($podId: String!) { pod(input: {podId: $podId}) { id desiredStatus } }"
STOP_MUTATION = "mutation Stop($podId: String!) { podStop(input: {podId: $podId}) { id desiredStatus } }"
# podTerminate returns a scalar: no selection set.
TERMINATE_MUTATION = "mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }"
NOT_FOUND_TO_TERMINATE = "pod not found to terminate"
# GraphQL errors may come with HTTP 200 or a 4xx (UNCONFIRMED which): read the body for both.
GRAPHQL_ERROR_STATUSES = (400, 404, 409, 410, 422)
# How RunPod will say GraphQL is gone is not published: a 410, a 404 without GraphQL errors, or an error
# that says so in words.
GRAPHQL_GONE_STATUSES = (404, 410)
GRAPHQL_GONE_WORDS = re.compile(r"retired|deprecated|sunset|decommission|no longer (available|supported)", re.I)
GRAPHQL_RETIRED = "RunPod's GraphQL API answered that it is retired: upgrade gpuc"
GRAPHQL_AUTH_WORDS = re.compile(r"unauthori[sz]ed|not authori[sz]ed|forbidden", re.I)
# A limit said in a GraphQL error rather than a 429 (UNCONFIRMED that RunPod does; read as "later" if it does).
GRAPHQL_LIMIT_WORDS = re.compile(r"rate.?limit|too many requests|throttl", re.I)
RUNPOD_KEY_ENV = "RUNPOD_API_KEY"

# Vast: an instance id, and the error words that mean "no such instance".
VAST_INSTANCE_ID_RE = re.compile(r"^[0-9]{1,12}$")
VAST_NOT_FOUND_ERRORS = ("not_found", "no_such_instance")
VAST_RELEASED = "unloaded"  # cur_state of an instance whose contract is released: destroyed


# -- what the providers say, read the same way on the laptop and on the pod -----------------------------
def message_from_body(body: Any) -> str:
    """The provider's own words: GraphQL errors[0].message, RFC 9457 detail, Vast msg, or plain text."""
    if not isinstance(body, dict):
        return ""
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        return str(errors[0].get("message", ""))
    if isinstance(errors, list) and errors and isinstance(errors[0], str):
        return errors[0]
    for key in MESSAGE_KEYS:
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def vast_not_found(body: Any) -> bool:
    """Vast's "no such instance" body (it also answers some with HTTP 200 and success: false)."""
    if not isinstance(body, dict) or body.get("success") is not False:
        return False
    msg = str(body.get("msg") or body.get("message") or "").lower()
    return body.get("error") in VAST_NOT_FOUND_ERRORS or "not found" in msg or "no longer exists" in msg


class GraphQLError(ProviderError):
    """RunPod answered with `errors`: the request was understood and refused."""

    def __init__(self, messages: list[str], codes: list[str], *, status: int, request_id: str | None) -> None:
        super().__init__(
            messages[0] if messages else "GraphQL error without a message",
            provider="runpod",
            status=status if status != 200 else None,
            request_id=request_id,
        )
        self.messages = messages
        self.codes = codes

    @property
    def pod_not_found(self) -> bool:
        return any(m.strip().lower() == NOT_FOUND_TO_TERMINATE for m in self.messages) or "POD_NOT_FOUND" in self.codes


class GraphQLRetired(ProviderError):
    """RunPod's GraphQL is gone: no retry, no guess, one message that says what to do."""

    def __init__(self, said: str, *, status: int | None, request_id: str | None) -> None:
        super().__init__(
            GRAPHQL_RETIRED + (f" ({said})" if said else ""),
            provider="runpod",
            status=status,
            request_id=request_id,
            hint="gpuc uses GraphQL only for the RunPod balance and a pod's own self-destroy; a gpuc release "
            "reads them elsewhere (pip install -U gpuc). Pods, `ls`, `down` and the reaper use REST v2 and "
            "are not affected",
        )


class RateLimited(ProviderUnavailable):
    """The provider said "later" (a 429, or a limit in words) until the deadline: never a refusal."""


class GraphQLRateLimited(RateLimited):
    """RunPod's GraphQL said "too many requests" (rate-limited in stages since 2026-09-17): what was asked is
    not done NOW. Nothing was refused, and the key is fine: read it again later."""

    def __init__(self, said: str, *, request_id: str | None) -> None:
        super().__init__(
            "RunPod's GraphQL is rate limiting this account now: not read now" + (f" ({said})" if said else ""),
            provider="runpod",
            status=429,
            request_id=request_id,
            hint="try again in a minute or two: RunPod has rate-limited GraphQL in stages since 2026-09-17; "
            "your key is fine and nothing was refused",
        )


def graphql_error(
    status: int, body: Mapping[str, Any], request_id: str | None, scrub: Callable[[str], str]
) -> ProviderError:
    """What a GraphQL answer with `errors` means: retired, a refused key, a limit, or a refusal in its words."""
    items = [e for e in body["errors"] if isinstance(e, dict)] if isinstance(body["errors"], list) else []
    messages = [scrub(str(e.get("message", "")))[:MAX_MESSAGE] for e in items]
    codes = [str((e.get("extensions") or {}).get("code", "")) for e in items if isinstance(e.get("extensions"), dict)]
    shown = status if status != 200 else None
    if status == 410 or any(GRAPHQL_GONE_WORDS.search(m) for m in messages):
        return GraphQLRetired(messages[0] if messages else "", status=shown, request_id=request_id)
    if any(GRAPHQL_LIMIT_WORDS.search(m) for m in [*messages, *codes]):
        return GraphQLRateLimited(messages[0] if messages else "", request_id=request_id)
    if any(GRAPHQL_AUTH_WORDS.search(m) for m in messages):
        return ProviderAuthError(
            messages[0],
            provider="runpod",
            status=shown,
            request_id=request_id,
            hint=f"check {RUNPOD_KEY_ENV} (environment or .env): is it current, and allowed to do this?",
        )
    return GraphQLError(messages or [""], codes, status=status, request_id=request_id)


def graphql_data(
    status: int, body: Any, request_id: str | None, scrub: Callable[[str], str], *, not_json: bool = False
) -> dict[str, Any]:
    """A GraphQL answer (HTTP `status`, its JSON `body`) as its `data`, or the error it is."""
    has_errors = isinstance(body, dict) and bool(body.get("errors"))
    if not_json and status in GRAPHQL_GONE_STATUSES:  # a 404/410 page that is not JSON: the endpoint is gone
        raise GraphQLRetired("", status=status, request_id=request_id)
    if status == 410 or (status == 404 and not has_errors):
        said = message_from_body(body) if isinstance(body, dict) else ""
        raise GraphQLRetired(scrub(said)[:200], status=status, request_id=request_id)
    _require(isinstance(body, dict), "runpod", "GraphQL answer is not an object")
    if has_errors:
        raise graphql_error(status, body, request_id, scrub)
    _require(status < 300, "runpod", f"GraphQL HTTP {status} without errors")
    data = body.get("data")
    _require(isinstance(data, dict), "runpod", "GraphQL answer has no data")
    return dict(data)


def _require(condition: bool, provider: str, what: str) -> None:
    if not condition:
        raise ProviderSchemaError(
            f"unexpected answer: {what}",
            provider=provider,
            hint="the provider API may have changed; gpuc will not guess (report it with the request id)",
        )
