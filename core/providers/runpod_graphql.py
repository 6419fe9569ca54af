"""RunPod's GraphQL, the one door for what REST v2 has no route (the account balance and spend): retiring
"early 2027", so it says plainly when RunPod answers that it is gone. Values pass as variables, never inlined."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuc.core.errors import ProviderSchemaError, ProviderUnavailable
from gpuc.core.providers.answers import (
    GRAPHQL_ERROR_STATUSES,
    GRAPHQL_GONE_STATUSES,
    GraphQLRateLimited,
    GraphQLRetired,
    graphql_data,
)
from gpuc.core.providers.common import Number, ProviderAnswer
from gpuc.core.providers.http import HttpClient

# GraphQL, for what v2 has no route (see the module docstring). Values pass as variables, never inlined.
# R5, the fields runpodctl's GetUser reads (CONFIRMED); the notify* flags are the account's own emails.
BALANCE_QUERY = (
    "query Balance { myself { clientBalance currentSpendPerHr spendLimit "
    "notifyPodsStale notifyPodsGeneral notifyLowBalance } }"
)
NOTIFY_FIELDS = ("notifyPodsStale", "notifyPodsGeneral", "notifyLowBalance")


class UserBalance(ProviderAnswer):
    clientBalance: Number
    currentSpendPerHr: Number | None = None
    spendLimit: Number | None = None
    notifyPodsStale: bool | None = None
    notifyPodsGeneral: bool | None = None
    notifyLowBalance: bool | None = None


# ---- GraphQL: the one door, for what REST v2 has no route ----------------------------------------------


def legacy_graphql(
    http: HttpClient, url: str, query: str, variables: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The one way the laptop reaches RunPod's GraphQL (retiring "early 2027"): variables in, `data` out, `errors`
    raised (read as the pod reads them, core/providers/answers.py), and GraphQLRetired when RunPod answers that it
    is gone, GraphQLRateLimited when it says "later" (a 429 still there after the choke point's retries, or
    an error in those words). Only for what REST v2 has no route."""
    try:
        reply = http.request(
            "POST", url, json={"query": query, "variables": dict(variables or {})}, accept=GRAPHQL_ERROR_STATUSES
        )
    except ProviderSchemaError as exc:  # a 404/410 page that is not JSON: the endpoint itself is gone
        if exc.status in GRAPHQL_GONE_STATUSES:
            raise GraphQLRetired("", status=exc.status, request_id=exc.request_id) from None
        raise
    except ProviderUnavailable as exc:
        if exc.status == 429:
            raise GraphQLRateLimited("HTTP 429", request_id=exc.request_id) from None
        raise
    return graphql_data(reply.status, reply.body, reply.request_id, http.redact)
