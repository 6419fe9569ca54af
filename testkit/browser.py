"""A real browser for the tests: Debian's headless Chromium, driven over W3C WebDriver with httpx.

No selenium: the dozen WebDriver calls a person's visit needs (open, read, tap, screenshot) are plain JSON
over HTTP to chromedriver, which httpx already speaks. The window is a phone's (360 x 800 CSS px, 2x), so
a page that overflows a phone's width or hides a button below a wide table shows in the screenshot.

`find()` says where Chromium and its driver are, or why not; tests/browser skips LOUDLY without them
(INSTALL names the command; `make test` runs it where it can).
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

INSTALL = "apt-get install -y chromium chromium-driver"
PHONE = {"width": 360, "height": 800, "pixelRatio": 2.0}
_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
_READY = {"script": "return document.readyState", "args": []}
_NAVIGATING = ("aborted by navigation", "Not attached to an active page", "no such execution context")
_BROWSERS = ("chromium", "chromium-browser", "google-chrome")
_DRIVERS = ("chromedriver", "chromium-driver")
START_TIMEOUT_S = 60.0
# A busy 2-core CI machine takes seconds per navigation; a hang still fails, in minutes, not never.
WEBDRIVER_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Found:
    browser: str
    driver: str


def find() -> Found | str:
    """Chromium and chromedriver on this machine, or a sentence saying what is missing."""
    browser = next((p for name in _BROWSERS if (p := shutil.which(name))), None)
    driver = next((p for name in _DRIVERS if (p := shutil.which(name))), None)
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
        return f"no {missing} on this machine: install them with `{INSTALL}` (as root)"
    return Found(browser, driver)


class WebDriverError(Exception):
    pass


class Driver:
    """chromedriver, started on a free loopback port; `session()` opens a phone-sized headless browser."""

    def __init__(self, found: Found) -> None:
        self.port = _free_port()
        # stdout/stderr to DEVNULL: chromedriver's chatter is not the test's; a refusal comes back as JSON.
        self.process = subprocess.Popen(
            [found.driver, f"--port={self.port}", *_log_args()], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.found = found
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=WEBDRIVER_TIMEOUT_S)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:  # real time: chromedriver's own start-up, not the product's clock
            if self.process.poll() is not None:
                raise WebDriverError(f"chromedriver exited with {self.process.returncode}")
            try:
                if self.http.get("/status").json()["value"]["ready"]:
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        raise WebDriverError(f"chromedriver did not start within {START_TIMEOUT_S:g} s")

    def session(self) -> Browser:
        options = {
            "binary": self.found.browser,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
            "mobileEmulation": {"deviceMetrics": PHONE},
        }
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        value = _value(self.http.post("/session", json=caps))
        return Browser(self.http, str(value["sessionId"]))

    def close(self) -> None:
        self.http.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Browser:
    """One browser session: what a person does with a page."""

    def __init__(self, http: httpx.Client, session_id: str) -> None:
        self.http = http
        self.base = f"/session/{session_id}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return _value(self.http.request(method, self.base + path, json=body if method == "POST" else None))

    def open(self, url: str) -> None:
        self._call("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self._settled("GET", "/url"))

    def text(self, css: str = "body") -> str:
        return str(self._settled("GET", f"/element/{self._find(css)}/text"))

    def source(self) -> str:
        return str(self._settled("GET", "/source"))

    def tap(self, label: str, *, card: str | None = None) -> None:
        """Tap the button with this label (a form's submit), as a thumb would, and wait for the answer.
        `card`: the button inside the first `.card` whose text holds these words (a pod's name)."""
        before = self.url
        root = self._find("html")
        for element in self._buttons(card):
            if str(self._call("GET", f"/element/{element}/text")).strip() == label:
                self._call("POST", f"/element/{element}/click", {})
                self._wait_left(before, root)
                return
        raise WebDriverError(f"no button labelled {label!r} on {before}" + (f" in the card of {card}" if card else ""))

    def buttons(self, card: str | None = None) -> list[str]:
        """The labels of the buttons on the page, or in the card of `card`."""
        return [str(self._call("GET", f"/element/{e}/text")).strip() for e in self._buttons(card)]

    def _buttons(self, card: str | None) -> list[str]:
        if card is None:
            return self._find_all("button")
        for box in self._find_all(".card"):
            if card in str(self._call("GET", f"/element/{box}/text")):
                found = self._call("POST", f"/element/{box}/elements", {"using": "css selector", "value": "button"})
                return [str(e[_ELEMENT]) for e in found]
        raise WebDriverError(f"no card about {card!r} on {self.url}")

    def _wait_left(self, before: str, root: str) -> None:
        """Until the form's answer has loaded. chromedriver's click returns once the touch is dispatched,
        which can be before the POST's navigation starts; a command sent into that gap hangs. A form that
        posts to its own URL (a link's confirmation page) leaves the URL as it was: its old page is gone."""
        deadline = time.monotonic() + WEBDRIVER_TIMEOUT_S
        while time.monotonic() < deadline:
            left = self.url != before or self._stale(root)
            if left and self._settled("POST", "/execute/sync", _READY) == "complete":
                return
            time.sleep(0.05)
        raise WebDriverError(f"the tap on {before} led nowhere within {WEBDRIVER_TIMEOUT_S:g} s")

    def _settled(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A command sent just after a navigation (Chromium swaps the page's renderer) may be refused as
        "aborted by navigation" / "not attached to an active page": asked again once the page has loaded."""
        for _ in range(20):
            try:
                return self._call(method, path, body)
            except WebDriverError as exc:
                if not any(word in str(exc) for word in _NAVIGATING):
                    raise
            time.sleep(0.25)
            with contextlib.suppress(WebDriverError):
                self._call("POST", "/execute/sync", _READY)
        return self._call(method, path, body)

    def _stale(self, element: str) -> bool:
        response = self.http.get(f"{self.base}/element/{element}/name")
        return response.status_code == 404 and "stale" in response.text

    def form_actions(self) -> list[str]:
        return [self.attribute(e, "action") for e in self._find_all("form")]

    def hrefs(self) -> list[str]:
        return [self.attribute(e, "href") for e in self._find_all("a[href]")]

    def attribute(self, element: str, name: str) -> str:
        # "property" resolves a relative action/href to the absolute URL the browser would use.
        return str(self._call("GET", f"/element/{element}/property/{name}"))

    def page_width(self) -> int:
        """The page's laid-out width in CSS px: wider than the phone means a sideways scroll."""
        return int(
            self._call("POST", "/execute/sync", {"script": "return document.documentElement.scrollWidth", "args": []})
        )

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the first screen too), as a PNG."""
        shot = self._settled(
            "POST",
            "/goog/cdp/execute",
            {"cmd": "Page.captureScreenshot", "params": {"format": "png", "captureBeyondViewport": True}},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def quit(self) -> None:
        self.http.delete(self.base)

    def _find(self, css: str) -> str:
        found = self._settled("POST", "/element", {"using": "css selector", "value": css})
        return str(found[_ELEMENT])

    def _find_all(self, css: str) -> list[str]:
        found = self._settled("POST", "/elements", {"using": "css selector", "value": css})
        return [str(e[_ELEMENT]) for e in found]


def _value(response: httpx.Response) -> Any:
    data = response.json()
    value = data.get("value") if isinstance(data, dict) else None
    if response.status_code >= 400:
        error = value.get("message", "") if isinstance(value, dict) else ""
        raise WebDriverError(f"webdriver refused ({response.status_code}): {str(error)[:300]}")
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _log_args() -> list[str]:
    import os

    path = os.environ.get("GPUC_WEBDRIVER_LOG")
    return [f"--log-path={path}", "--verbose"] if path else []
