"""A rehearsal as a new user runs it: `gpuc demo --provider P --serve` in one terminal, its banner read, and the
real `gpuc` commands run in a second shell pointed at it by the `.` line it printed (imported by name: every
test folder has a conftest)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from gpuc.testkit.rehearse import SHELL_FILE

CLEAN = ("GPUC_", "RUNPOD_", "VAST_", "AWS_")


def shell_env(path: Path) -> dict[str, str]:
    """What `. rehearse.sh` exports, read as sh would (the lines are shlex-quoted)."""
    env = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0] if value else ""
    return env


class Rehearsal:
    def __init__(self, provider: str, home: Path, project: Path, **shell: str) -> None:
        self.home, self.project = home, project
        base = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuc.client.cli", "demo", "--provider", provider, "--serve", "--home", str(home)],
            env=base, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.banner = ""
        for line in self.proc.stdout:
            self.banner += line
            if "Ctrl-C here" in line:
                break
        assert "Ctrl-C here" in self.banner, self.banner
        self.phone = self._url("The phone")
        self.console = self._url("console (stand-in)")
        # What a user's second shell holds after the `.` line: the rehearsal's exports over their own environment,
        # and what the test sets on top (as a user would export a setting there).
        self.env = {**base, **shell_env(home / SHELL_FILE), **shell}
        self.watchdog = json.loads((home / "config.json").read_text())["watchdog_url"]

    def _url(self, words: str) -> str:
        found = re.search(re.escape(words) + r"[^:]*: (http://127\.0\.0\.1:\d+)", self.banner)
        assert found, self.banner
        return found.group(1)

    def gpuc(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpuc.client.cli", *args], cwd=self.project, env=self.env,
                              capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip

    def messages(self) -> list[dict[str, Any]]:
        """What the phone received, oldest first."""
        return list(httpx.get(f"{self.phone}/json", timeout=10).json())

    def message(
        self, pred: Callable[[dict[str, Any]], bool], timeout_s: float, what: str
    ) -> tuple[int, dict[str, Any]]:
        found: list[tuple[int, dict[str, Any]]] = []

        def seen() -> bool:
            found[:] = [(i, m) for i, m in enumerate(self.messages()) if pred(m)]
            return bool(found)

        wait_for(seen, timeout_s, f"{what} on the phone: {[m.get('title') for m in self.messages()]}")
        return found[-1]

    def account(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.console}/json", timeout=10).json())

    def stop(self) -> str:
        """Ctrl-C, as the banner says; what it printed after the banner."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        out, _ = self.proc.communicate(timeout=120)
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()  # reaps it and closes its pipe (left open, it warns in whichever test runs next)


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.3)
    assert pred(), f"timed out waiting for {what}"


def links(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every URL a notification carries: its buttons' and its click target."""
    found = [str(a["url"]) for m in messages for a in m.get("actions") or [] if a.get("url")]
    return found + [str(m["click"]) for m in messages if m.get("click")]


def answer_line(phone: str, label: str) -> str:
    """What the phone page says under a message after a tap on `label` ("" while the tap is under way)."""
    page = httpx.get(phone, timeout=10).text
    found = re.findall(r'<p class="tap"><i>(tapped ' + re.escape(label) + r"[^<]*)</i>", page)
    return found[-1] if found else ""
