"""What RunPod's refusal of a create means: a documented refusal (R1) is a ProviderError naming the fix; a pool
this account cannot use (403) lets `create` try the next cloud, and says so."""

from __future__ import annotations

from typing import Any

from gpuc.core.errors import ProviderError, ProviderSchemaError
from gpuc.core.providers.answers import message_from_body
from gpuc.core.providers.http import HttpClient, Reply
from gpuc.core.providers.runpod_pods import PROVIDER

# Create refusals v2 documents (R1): 400 rule or NO CAPACITY, 402 balance, 403 a pool this account cannot use,
# 422 contract. None was applied.
CREATE_REFUSALS = (400, 402, 403, 422)
POOL_DENIED = 403


def is_problem_404(body: Any) -> bool:
    """RFC 9457 problem from REST v2. A 404 from anything else (a wrong base URL) must not read as "gone"."""
    return (
        isinstance(body, dict)
        and body.get("status") == 404
        and isinstance(body.get("title") or body.get("detail"), str)
    )


def problem_words(reply: Reply, http: HttpClient) -> str:
    """A v2 problem's own words (detail, then its `errors`), redacted, for an error message."""
    body = reply.body if isinstance(reply.body, dict) else {}
    said = message_from_body({k: v for k, v in body.items() if k != "errors"}) or f"HTTP {reply.status}"
    extra = body.get("errors")
    if isinstance(extra, list) and extra:
        said += ": " + "; ".join(str(e) for e in extra[:3])
    return http.redact(said)[:300]


def create_refused(reply: Reply, http: HttpClient, gpu: str, cloud: str) -> ProviderError:
    """A create v2 refused outright: nothing was created, and nothing is resent."""
    said = problem_words(reply, http)
    common: dict[str, Any] = {"provider": PROVIDER, "status": reply.status, "request_id": reply.request_id}
    if reply.status == 402:
        return ProviderError(
            f"RunPod refused the pod: insufficient balance ({said})",
            hint="add credit at runpod.io (RunPod wants at least one hour of the pod's price in the account)",
            **common,
        )
    if reply.status == 422:
        return ProviderSchemaError(
            f"RunPod refused gpuc's create request as malformed ({said})",
            hint="RunPod's API changed under this gpuc: upgrade gpuc, or report it with the request id",
            **common,
        )
    if reply.status == POOL_DENIED:
        return PoolDenied(
            f"RunPod answered 403 to a {gpu} pod in {cloud} cloud: your account cannot access that pool ({said})",
            cloud=cloud,
            **common,
        )
    return ProviderError(
        f"RunPod has no {gpu} to give in {cloud} cloud now, or refused the request ({said})",
        hint="try another GPU type (`gpuc offers`), another cloud (GPUC_RUNPOD_CLOUD_TYPE), or --provider vast",
        **common,
    )


class PoolDenied(ProviderError):
    """A create's 403: "your account cannot access the requested pool" (the v2 spec's create table). Nothing
    was created; the next candidate may be tried. Not a bad key: the same key just read the catalog."""

    def __init__(self, message: str, *, cloud: str, **common: Any) -> None:
        super().__init__(message, **common)
        self.cloud = cloud
        self.said = message  # without the provider's name and the status: to be put together with others


def pools_denied(denied: list[PoolDenied], skipped: list[str], gpu: str) -> PoolDenied:
    """Every pool tried said 403: said as what it is, with what was not tried and why."""
    said = "; ".join(d.said for d in denied)
    not_tried = f"; not tried: {', '.join(skipped)}" if skipped else ""
    last = denied[-1]
    return PoolDenied(
        f"{said}{not_tried}. Nothing was created",
        cloud=last.cloud,
        provider=PROVIDER,
        status=last.status,
        request_id=last.request_id,
        hint=f"this is not a bad key (it read RunPod's catalog): rent another GPU type than {gpu} (`gpuc offers "
        "--provider runpod`), another cloud (GPUC_RUNPOD_CLOUD_TYPE=SECURE, COMMUNITY or ALL), or ask RunPod "
        "for access to that pool; a Read Only or Restricted key cannot create pods at all",
    )
