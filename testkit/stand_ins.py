"""Local stand-ins of ntfy and the Telegram Bot API, over real HTTP (testkit/emulators/server.py),
as strict as the services' documented request formats, with a "press" that does what the phone does.

    ntfy = NtfyStandIn(); server = EmulatorServer(ntfy).start()
    channel = NtfyChannel(server.url, "topic")             # publishes JSON to POST /
    ntfy.press(0, "keep 1 h")                               # what the ntfy app does on that tap

- ntfy (docs.ntfy.sh/publish, "Action buttons"): a JSON publish to `/` with at most 3 `actions`, each a
  `view` (the app opens the URL in the browser: a GET), an `http` (the app sends the request itself:
  `method`, default POST, `headers`, `body`, default empty) or a `broadcast` (an Android intent).
- Telegram (core.telegram.org/bots/api): `sendMessage` with `reply_markup.inline_keyboard`, each button
  exactly one of `callback_data` (1-64 bytes) or `url`; `setWebhook` with `secret_token` (1-256 of
  A-Za-z0-9_-). Pressing a callback button POSTs an Update with a `callback_query` to the webhook, with the
  `X-Telegram-Bot-Api-Secret-Token` header; a method given in the webhook's JSON answer (answerCallbackQuery)
  is performed and recorded, as Telegram does ("Making requests when getting updates"). Pressing a URL
  button opens the URL (a GET). Telegram refuses a button URL on a loopback or private address (reported
  by users, not in the docs: UNCONFIRMED); `refuse_local_urls` shows that hazard.
"""

from __future__ import annotations

import html
import ipaddress
import itertools
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from gpuc.core.clock import Clock
from gpuc.testkit.emulators.common import Emulator, EmuRequest, EmuResponse, Route

NTFY_ACTIONS_MAX = 3
NTFY_ACTION_KINDS = frozenset({"view", "http", "broadcast"})
_NTFY_ACTION_KEYS = frozenset({"action", "label", "url", "method", "headers", "body", "clear", "intent", "extras"})
_NTFY_KEYS = frozenset(
    {
        "topic",
        "message",
        "title",
        "tags",
        "priority",
        "actions",
        "click",
        "attach",
        "markdown",
        "icon",
        "filename",
        "delay",
        "email",
        "call",
    }
)
TELEGRAM_TEXT_MAX = 4096
CALLBACK_DATA_MAX = 64
_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")
PRESS_TIMEOUT_S = 10.0
log = logging.getLogger("gpuc.testkit.ntfy")


class _StandIn(Emulator):
    """An Emulator with no provider semantics: no drift, no billing to track."""

    def fault_answer(self, op: str, kind: str) -> EmuResponse:
        status = int(kind.split("_")[0]) if kind[:3].isdigit() else 500
        return EmuResponse.json(status, {"error": f"injected {kind}"})

    def drift(self, op: str, kind: str, answer: EmuResponse) -> EmuResponse:
        return answer

    def client_env(self, base_url: str) -> dict[str, str]:
        return {}

    def _track(self) -> None:
        return


class NtfyStandIn(_StandIn):
    provider = "ntfy"

    def __init__(self, token: str | None = None, clock: Clock | None = None) -> None:
        super().__init__(clock)
        self.token = token  # an access-controlled topic: publishing needs `Authorization: Bearer <token>`
        self.published: list[dict[str, Any]] = []
        self.taps: list[tuple[int, str, int]] = []  # (message index, label, the watchdog's HTTP status)
        self.tap_said: dict[int, list[str]] = {}  # message index -> what each tap came to, shown under it
        self._ids = itertools.count(1)

    def route(self, request: EmuRequest) -> Route | None:
        if request.method in ("POST", "PUT") and request.path == "/":
            return "publish", self._publish
        # The rehearsal's phone: a page to read what was sent and tap its buttons.
        if request.method == "GET" and request.path in ("/", "/json"):
            return "read", self._read
        if request.method == "POST" and request.path == "/tap":
            return "tap", self._tap
        return None

    def _read(self, request: EmuRequest) -> EmuResponse:
        if request.path == "/json":
            return EmuResponse.json(200, list(self.published))
        page = phone_page(self.published, self.tap_said)
        return EmuResponse(200, page.encode(), {"content-type": "text/html; charset=utf-8"})

    def _tap(self, request: EmuRequest) -> EmuResponse:
        """A tap from the page: the stand-in sends the button's request as the ntfy app would, in a thread of
        its own (its answer may publish again, which needs this stand-in's lock: held during this call)."""
        form = parse_qs(request.body.decode("utf-8", "replace"))
        try:
            index, label = int(form["m"][0]), form["label"][0]
            actions = self.published[index].get("actions") or []
            next(a for a in actions if a["label"] == label and a["action"] == "http")
        except (KeyError, ValueError, IndexError, StopIteration):
            return EmuResponse.text(400, "no such button")
        threading.Thread(target=self._press_quietly, args=(index, label), daemon=True).start()
        return EmuResponse(303, b"", {"location": "/"})

    def _press_quietly(self, index: int, label: str) -> None:
        """The tap's outcome goes on the page under its message, as the ntfy app shows a failed action: a tap
        that reached nothing was once said only in the rehearsal's terminal, and the page showed nothing."""
        try:
            answer = self.press(index, label)
            self.taps.append((index, label, answer.status_code))
            said = f"tapped {label}: the watchdog answered {answer.status_code} {_page_words(answer)}".rstrip()
        except httpx.HTTPError as exc:
            self.taps.append((index, label, 0))
            log.warning("tap %s on message %d failed: %s", label, index, type(exc).__name__)
            said = f"tapped {label}: FAILED, nothing answered at its link ({type(exc).__name__})"
        with self._lock:
            self.tap_said.setdefault(index, []).append(said)

    def _publish(self, request: EmuRequest) -> EmuResponse:
        if self.token is not None and request.bearer() != self.token:
            return EmuResponse.json(401, {"code": 40101, "http": 401, "error": "unauthorized"})
        try:
            body = request.json()
        except ValueError:
            return _ntfy_bad("invalid request: body is not JSON")
        why = ntfy_problem(body)
        if why is not None:
            return _ntfy_bad(why)
        message = {"id": str(next(self._ids)), "event": "message", **body}
        self.published.append(message)
        return EmuResponse.json(200, {k: message[k] for k in ("id", "event", "topic")})

    def press(self, index: int, label: str) -> httpx.Response:
        """Tap the button `label` of the index-th message, as the ntfy app does."""
        with self._lock:
            actions = self.published[index].get("actions") or []
        action = next(a for a in actions if a["label"] == label)
        if action["action"] == "view":
            return httpx.get(action["url"], timeout=PRESS_TIMEOUT_S)  # opened in the phone's browser
        if action["action"] != "http":
            raise ValueError(f"a {action['action']} action sends no HTTP request")
        return httpx.request(
            action.get("method", "POST"),
            action["url"],
            headers=action.get("headers") or {},
            content=(action.get("body") or "").encode(),
            timeout=PRESS_TIMEOUT_S,
        )


def _page_words(answer: httpx.Response) -> str:
    """What the watchdog's answer page says (its first paragraph: the sentence of what was done, or why not),
    for the phone's line under the message."""
    found = re.search(r"<p[^>]*>(.*?)</p>", answer.text, re.S) or re.search(r"<h1[^>]*>(.*?)</h1>", answer.text, re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip() if found else ""
    return f"({text[:200]})" if text else ""


def phone_page(published: list[dict[str, Any]], tap_said: dict[int, list[str]] | None = None) -> str:
    """Every message, newest first, as a phone shows it: priority, title, body, and its buttons (an `http`
    one is a form the stand-in sends on, a `view` one a link to open), then what each tap on them came to."""
    rows = []
    for index in reversed(range(len(published))):
        msg = published[index]
        buttons = []
        for action in msg.get("actions") or []:
            label = html.escape(str(action["label"]))
            if action["action"] == "http":
                buttons.append(
                    f'<form method="post" action="/tap"><input type="hidden" name="m" value="{index}">'
                    f'<input type="hidden" name="label" value="{label}"><button>{label}</button></form>'
                )
            elif action["action"] == "view":
                buttons.append(f'<a href="{html.escape(str(action["url"]))}">{label}</a>')
        taps = "".join(f'<p class="tap"><i>{html.escape(line)}</i></p>' for line in (tap_said or {}).get(index, []))
        rows.append(
            f"<li><small>priority {msg.get('priority', 3)}</small> <b>{html.escape(str(msg.get('title', '')))}</b>"
            f"<p>{html.escape(str(msg.get('message', ''))).replace(chr(10), '<br>')}</p>{''.join(buttons)}{taps}</li>"
        )
    body = "".join(rows) or "<li>nothing yet</li>"
    return (
        '<!doctype html><meta name="viewport" content="width=device-width"><title>gpuc rehearsal phone</title>'
        f'<meta http-equiv="refresh" content="10"><h1>phone (ntfy stand-in)</h1><ul>{body}</ul>'
    )


def _ntfy_bad(why: str) -> EmuResponse:
    return EmuResponse.json(400, {"code": 40000, "http": 400, "error": why})


def ntfy_problem(body: Any) -> str | None:
    """Why ntfy would refuse this JSON publish, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("topic"), str) or not body["topic"]:
        return "invalid request: topic missing"
    if set(body) - _NTFY_KEYS:
        return f"invalid request: unknown field {sorted(set(body) - _NTFY_KEYS)[0]}"
    if not isinstance(body.get("message", ""), str) or not isinstance(body.get("title", ""), str):
        return "invalid request: message and title are strings"
    if body.get("priority", 3) not in (1, 2, 3, 4, 5):
        return "invalid priority"
    actions = body.get("actions", [])
    if not isinstance(actions, list) or len(actions) > NTFY_ACTIONS_MAX:
        return "invalid request: too many actions"
    for action in actions:
        if not isinstance(action, dict) or set(action) - _NTFY_ACTION_KEYS:
            return "invalid action: unknown field"
        if action.get("action") not in NTFY_ACTION_KINDS or not action.get("label"):
            return "invalid action: action and label are required"
        if action["action"] in ("view", "http") and not _http_url(action.get("url")):
            return "invalid action: url must be an http(s) URL"
        if not isinstance(action.get("clear", False), bool):
            return "invalid action: clear is a boolean"
    return None


def _http_url(url: object) -> bool:
    return isinstance(url, str) and urlsplit(url).scheme in ("http", "https") and bool(urlsplit(url).netloc)


@dataclass
class Chat:
    id: int
    type: str = "private"  # private | group | supergroup | channel


@dataclass
class Sent:
    message_id: int
    chat: Chat
    text: str
    keyboard: list[list[dict[str, str]]] = field(default_factory=list)


class TelegramStandIn(_StandIn):
    provider = "telegram"

    def __init__(
        self, bot_token: str, chats: list[Chat], *, refuse_local_urls: bool = True, clock: Clock | None = None
    ) -> None:
        super().__init__(clock)
        self.bot_token = bot_token
        self.chats = {chat.id: chat for chat in chats}
        self.refuse_local_urls = refuse_local_urls
        self.sent: list[Sent] = []
        self.webhook: tuple[str, str | None] | None = None  # (url, secret_token)
        self.calls: list[dict[str, Any]] = []  # the methods the webhook's answers asked for
        self._ids = itertools.count(1)
        self._updates = itertools.count(1000)

    def route(self, request: EmuRequest) -> Route | None:
        match = re.fullmatch(r"/bot([^/]+)/(\w+)", request.path)
        if match is None or request.method not in ("GET", "POST"):
            return None
        if match.group(1) != self.bot_token:
            return "unauthorized", lambda r: _tg_error(401, "Unauthorized")
        handlers = {"sendMessage": self._send_message, "setWebhook": self._set_webhook}
        handler = handlers.get(match.group(2))
        return None if handler is None else (match.group(2), handler)

    def not_found(self, request: EmuRequest) -> EmuResponse:
        return _tg_error(404, "Not Found")

    def _send_message(self, request: EmuRequest) -> EmuResponse:
        body = _json_object(request)
        if body is None:
            return _tg_error(400, "Bad Request: can't parse JSON")
        chat_id = _int(body.get("chat_id"))
        chat = None if chat_id is None else self.chats.get(chat_id)
        if chat is None:
            return _tg_error(400, "Bad Request: chat not found")
        text = body.get("text")
        if not isinstance(text, str) or not text.strip() or len(text) > TELEGRAM_TEXT_MAX:
            return _tg_error(400, "Bad Request: message text is empty or too long")
        markup = body.get("reply_markup", {"inline_keyboard": []})
        keyboard = markup.get("inline_keyboard") if isinstance(markup, dict) else None
        why = self._keyboard_problem(keyboard)
        if why is not None:
            return _tg_error(400, f"Bad Request: {why}")
        sent = Sent(next(self._ids), chat, text, keyboard or [])
        self.sent.append(sent)
        return EmuResponse.json(200, {"ok": True, "result": {"message_id": sent.message_id, "text": text}})

    def _keyboard_problem(self, keyboard: Any) -> str | None:
        if not isinstance(keyboard, list) or not all(isinstance(row, list) for row in keyboard):
            return 'field "inline_keyboard" must be an Array of Arrays'
        for button in (b for row in keyboard for b in row):
            if not isinstance(button, dict) or not isinstance(button.get("text"), str) or not button["text"]:
                return "inline keyboard button text is empty"
            kinds = [k for k in ("callback_data", "url") if k in button]
            if len(kinds) != 1:
                return "inline keyboard button must have exactly one of callback_data and url"
            data = button.get("callback_data")
            if data is not None and not (isinstance(data, str) and 1 <= len(data.encode()) <= CALLBACK_DATA_MAX):
                return "BUTTON_DATA_INVALID"
            url = button.get("url")
            if url is not None and (not _http_url(url) or (self.refuse_local_urls and _local(str(url)))):
                return f"inline keyboard button URL '{url}' is invalid: Wrong HTTP URL"
        return None

    def _set_webhook(self, request: EmuRequest) -> EmuResponse:
        body = _json_object(request)
        if body is None:
            return _tg_error(400, "Bad Request: can't parse JSON")
        secret = body.get("secret_token")
        if not _http_url(body.get("url")) or (secret is not None and not _SECRET_TOKEN.fullmatch(str(secret))):
            return _tg_error(400, "Bad Request: bad webhook url or secret_token")
        self.webhook = (body["url"], secret)
        return EmuResponse.json(200, {"ok": True, "result": True, "description": "Webhook was set"})

    def update(self, payload: dict[str, Any], *, secret: str | None = None) -> httpx.Response:
        """Deliver one Update to the webhook, as Telegram's servers do; perform what its answer asks."""
        if self.webhook is None:
            raise RuntimeError("no webhook: call setWebhook first")
        url, token = self.webhook
        headers = {"Content-Type": "application/json"}
        sent_secret = token if secret is None else secret
        if sent_secret:
            headers["X-Telegram-Bot-Api-Secret-Token"] = sent_secret
        body = json.dumps({"update_id": next(self._updates), **payload}).encode()
        answer = httpx.post(url, content=body, headers=headers, timeout=PRESS_TIMEOUT_S)
        if answer.status_code == 200 and answer.headers.get("content-type", "").startswith("application/json"):
            reply = answer.json()
            if isinstance(reply, dict) and "method" in reply:
                with self._lock:
                    self.calls.append(reply)
        return answer

    def press(
        self, message_id: int, label: str, *, user_id: int | None = None, secret: str | None = None
    ) -> httpx.Response:
        """Tap `label` under a sent message: a callback button's Update to the webhook, or a URL opened."""
        sent = next(s for s in self.sent if s.message_id == message_id)
        button = next(b for row in sent.keyboard for b in row if b["text"] == label)
        if "url" in button:
            return httpx.get(button["url"], timeout=PRESS_TIMEOUT_S)
        who = sent.chat.id if user_id is None else user_id
        query = {
            "id": f"cq{next(self._updates)}",
            "from": {"id": who, "is_bot": False, "first_name": "Ada"},
            "message": {
                "message_id": sent.message_id,
                "date": 0,
                "chat": {"id": sent.chat.id, "type": sent.chat.type},
                "text": sent.text,
            },
            "chat_instance": "42",
            "data": button["callback_data"],
        }
        return self.update({"callback_query": query}, secret=secret)

    def type_text(self, chat_id: int, text: str) -> httpx.Response:
        """The user writes to the bot: an Update with a message, no callback."""
        chat = self.chats[chat_id]
        message = {
            "message_id": 0,
            "date": 0,
            "chat": {"id": chat.id, "type": chat.type},
            "from": {"id": chat.id, "is_bot": False, "first_name": "Ada"},
            "text": text,
        }
        return self.update({"message": message})


def _tg_error(status: int, description: str) -> EmuResponse:
    return EmuResponse.json(status, {"ok": False, "error_code": status, "description": description})


def _json_object(request: EmuRequest) -> dict[str, Any] | None:
    try:
        body = request.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,20}", value):
        return int(value)
    return None


def _local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private
