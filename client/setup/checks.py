"""One check of `gpuc doctor` (and of `doctor --live`): passes (✓), fails (✗) with its fix, or warns (!)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

CheckStatus = Literal["ok", "fail", "warn"]
SYMBOLS: dict[CheckStatus, str] = {"ok": "✓", "fail": "✗", "warn": "!"}


class Check(BaseModel):
    name: str
    status: CheckStatus
    detail: str
    fix: str | None = None


def ok(name: str, detail: str) -> Check:
    return Check(name=name, status="ok", detail=detail)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name=name, status="fail", detail=detail, fix=fix)


def warn(name: str, detail: str, fix: str) -> Check:
    return Check(name=name, status="warn", detail=detail, fix=fix)


def render(checks: list[Check]) -> str:
    lines: list[str] = []
    for check in checks:
        lines.append(f"{SYMBOLS[check.status]} {check.name:<26} {check.detail}")
        if check.fix and check.status != "ok":
            lines.append(f"    fix: {check.fix}")
    return "\n".join(lines)
