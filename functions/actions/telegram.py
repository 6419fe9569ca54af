"""`POST /telegram`: the bot's webhook, where a tap on a notification's inline button comes back.

Telegram signs nothing: the only proof a request is Telegram's is the `X-Telegram-Bot-Api-Secret-Token`
header, the `secret_token` given to `setWebhook` (GPUC_TELEGRAM_SECRET), compared in constant time. Then
the tap must come from an allowed chat (GPUC_TELEGRAM_CHATS, by default the chats of the tgram:// URLs);
in a group, the tapping user must be listed too, since any member can tap. A callback_query whose data is
a link token acts through the verbs (via "telegram": safe verbs only), once.

The answer is Telegram's own `answerCallbackQuery`, given as the webhook's response (Bot API: "Making
requests when getting updates"), so the watchdog needs no outbound call and never the bot token. Anything
else Telegram sends (a text message, an edited one, a tap from another chat) gets a 200 that does nothing,
or Telegram would deliver it again and again. Nothing here is ever a 5xx.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpuc.core.notify.channels import TelegramChannel
from gpuc.core.notify.urls import parse_channels
from gpuc.core.signing import token_matches
from gpuc.functions.actions import wire
from gpuc.functions.app import Deps
from gpuc.functions.edge import HttpError, Request, Response

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
ANSWER_MAX = 200  # answerCallbackQuery's text: 0-200 characters
NOT_SET_UP = "telegram actions are not set up: set GPUC_TELEGRAM_SECRET on the watchdog (README: Actions)"
_CHAT_ID = re.compile(r"-?[0-9]{1,20}")
NOTHING = Response(200, {})  # Telegram: delivered, nothing to do


def webhook(req: Request, deps: Deps, now: float) -> Response:
    secret = deps.settings.telegram_secret
    if secret is None or not secret.get_secret_value():
        raise HttpError(404, NOT_SET_UP)
    presented = req.header(SECRET_HEADER) or ""
    if not presented or not token_matches(presented, secret.get_secret_value()):
        raise HttpError(401, f"missing or wrong {SECRET_HEADER} header")
    update = _json(req.body)
    query = update.get("callback_query")
    if not isinstance(query, dict):
        return NOTHING  # a message typed to the bot, an edit, a join: never a command
    query_id, data = query.get("id"), query.get("data")
    if not isinstance(query_id, str) or not query_id:
        return NOTHING
    if not isinstance(data, str) or not data:
        return answer(query_id, "this button does nothing here", alert=False)
    if not allowed(deps, query):
        return answer(query_id, "this chat may not act on gpuc (GPUC_TELEGRAM_CHATS)", alert=True)
    try:
        sentence = wire.act(deps, data, now, "telegram")
    except wire.Refused as exc:
        return answer(query_id, f"nothing done: {exc}", alert=True)
    return answer(query_id, sentence, alert=False)


def answer(query_id: str, text: str, *, alert: bool) -> Response:
    """Stops the button's spinner and shows `text` (an alert the person must dismiss, for a refusal)."""
    short = text if len(text) <= ANSWER_MAX else text[: ANSWER_MAX - 1] + "\u2026"
    return Response(
        200, {"method": "answerCallbackQuery", "callback_query_id": query_id, "text": short, "show_alert": alert}
    )


def allowed(deps: Deps, query: dict[str, Any]) -> bool:
    """The message's chat is allowed; in a chat other than the tapping user's own, the user too."""
    message, sender = query.get("message"), query.get("from")
    chat = message.get("chat") if isinstance(message, dict) else None
    chat_id = chat.get("id") if isinstance(chat, dict) else None
    user_id = sender.get("id") if isinstance(sender, dict) else None
    if not isinstance(chat_id, int) or not isinstance(user_id, int):
        return False
    ids = allowed_ids(deps)
    return chat_id in ids and (chat_id == user_id or user_id in ids)


def allowed_ids(deps: Deps) -> frozenset[int]:
    settings = deps.settings
    if settings.telegram_chats:
        raw = [part.strip() for part in settings.telegram_chats.split(",")]
    else:
        urls = settings.notify_urls.get_secret_value() if settings.notify_urls else None
        try:
            channels = parse_channels(urls)
        except Exception:  # a malformed list is said at start-up; here it allows nobody
            channels = []
        raw = [ch.chat_id for ch in channels if isinstance(ch, TelegramChannel)]
    return frozenset(int(part) for part in raw if _CHAT_ID.fullmatch(part))


def _json(body: bytes) -> dict[str, Any]:
    try:
        update = json.loads(body)
    except (ValueError, RecursionError):
        raise HttpError(400, "body is not valid JSON: send a Telegram Update") from None
    if not isinstance(update, dict):
        raise HttpError(400, "json validation error: body must be a JSON object (a Telegram Update)")
    return update
