"""`gpuc doctor`'s check of Vast's outbid webhook (docs/interruptible.md), as far as it can honestly go.

- GPUC_VAST_WEBHOOK_SECRET unset: nothing to check (the webhook is optional: without it the reaper's passes
  still recover, only later).
- The watchdog's URL must be public HTTPS: Vast calls public HTTPS URLs only, and a redirect is a permanent
  failure (vast-ai/docs notification-webhooks.mdx). A loopback `gpuc watchdog serve` is never reached.
- With `--live`, a Vast key and GPUC_VAST_WEBHOOK_ID: Vast's `POST /api/v0/webhooks/{id}/test/` sends the webhook
  a signed `webhook_test` delivery (documented, the same headers and signature as a real one), and the
  watchdog's status says the last delivery it VERIFIED (StatusResponse.vast_hook_last). Seen after the ask:
  Vast's URL, the signature's header and the secret all agree, end to end. The test route's answer body is
  UNCONFIRMED: only its status is read.
- No GPUC_VAST_WEBHOOK_ID: said, with where to find it. Whether the watchdog holds the same secret as Vast
  cannot be known without a delivery, so it is not claimed.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlparse

from gpuc.client.setup.checks import Check, fail, ok, warn
from gpuc.core.api import StatusResponse
from gpuc.core.clock import Clock
from gpuc.core.errors import GpucError, ProviderError
from gpuc.core.providers.base import Provider
from gpuc.core.settings import Settings

NAME = "vast outbid webhook"
HOOK_PATH = "/v1/hooks/vast"
TEST_NOTIF = "webhook_test"  # functions/recovery/webhook.py TEST: the slug Vast's test delivery carries
HOOK_WAIT_S = 20.0  # Vast delivers within its 10 s timeout; a retry would come later, so this is the bound
HOOK_POLL_S = 1.0
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def check_hook_setup(settings: Settings) -> Check | None:
    """Without a provider call: whether Vast can reach the watchdog at all, and whether --live can test it."""
    if settings.vast_webhook_secret is None:
        return None
    url = settings.watchdog_url
    where = urlparse(url)
    if where.scheme != "https" or (where.hostname or "") in LOOPBACK:
        return warn(
            NAME,
            f"Vast calls public HTTPS URLs only: it cannot reach {url}{HOOK_PATH} (the reaper's passes still "
            "recover, only later)",
            "deploy the watchdog (`gpuc watchdog deploy`) and point the webhook at its Function URL",
        )
    if settings.vast_webhook_id is None:
        return warn(
            NAME,
            "GPUC_VAST_WEBHOOK_SECRET is set, but not GPUC_VAST_WEBHOOK_ID: `gpuc doctor --live` cannot ask Vast "
            "for its signed test delivery, so whether Vast's URL and secret match the watchdog's is not known",
            "set GPUC_VAST_WEBHOOK_ID in .env to the webhook's id (Vast: Account Settings, Notification Settings)",
        )
    return ok(NAME, f"set up for {url}{HOOK_PATH}; `gpuc doctor --live` asks Vast for a signed test delivery")


def check_hook_live(
    settings: Settings, status: Callable[[], StatusResponse], vast: Callable[[], Provider], clock: Clock
) -> Check | None:
    """Vast's signed test delivery, end to end: asked of Vast, then looked for in the watchdog's status."""
    setup = check_hook_setup(settings)
    if setup is None or setup.status != "ok" or settings.vast_webhook_id is None:
        return setup
    url = f"{settings.watchdog_url}{HOOK_PATH}"
    try:
        asked_at = status().server_time
        send_webhook_test(vast(), settings.vast_webhook_id)
    except GpucError as exc:
        return fail(NAME, f"could not ask for Vast's test delivery: {exc.message}", exc.hint or "see the message")
    waited = 0.0
    while waited <= HOOK_WAIT_S:
        try:
            seen = status().vast_hook_last
        except GpucError as exc:
            return fail(NAME, f"the watchdog did not answer: {exc.message}", exc.hint or "see the message")
        if seen is not None and seen.notif_type == TEST_NOTIF and seen.at >= asked_at:
            return ok(NAME, f"Vast's signed test delivery reached {url} and the watchdog verified it")
        clock.sleep(HOOK_POLL_S)
        waited += HOOK_POLL_S
    return fail(
        NAME,
        f"Vast took the ask for a test delivery to webhook {settings.vast_webhook_id}, but the watchdog verified "
        f"none within {HOOK_WAIT_S:.0f} s: every real outbid delivery would be refused or lost the same way",
        f"in Vast's notification settings the webhook's URL must be {url}; the watchdog must hold the secret "
        "Vast shows for it (GPUC_VAST_WEBHOOK_SECRET in .env, then `gpuc watchdog deploy`)",
    )


def send_webhook_test(vast: Provider, webhook_id: int) -> None:
    """`POST /api/v0/webhooks/{id}/test/` (vast-ai/docs notification-webhooks.mdx): Vast sends the webhook a
    signed `webhook_test` event. Nothing on the account changes; the answer's body is not read."""
    from gpuc.core.providers.vast import VastProvider, refused

    if not isinstance(vast, VastProvider):
        raise ProviderError("the webhook test is Vast's", provider=vast.name)
    reply = vast.http.request(
        "POST", f"{vast.api.v0}/webhooks/{webhook_id}/test/", json={}, idempotent=False, accept=(404,)
    )
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 404 or body.get("success") is False:
        error = refused(vast.http, reply, f"the test delivery to webhook {webhook_id} was refused")
        error.hint = "check GPUC_VAST_WEBHOOK_ID: Vast's notification settings list your webhooks and their ids"
        raise error
