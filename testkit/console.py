"""The rehearsal's stand-in for the provider's own console: the account's balance, its pods, and on Vast the one
thing a rehearsal cannot wait for, another renter outbidding an interruptible instance.

    console = EmulatorServer(ProviderConsole(vast_emulator)).start()
    httpx.post(f"{console.url}/outbid", json={"pod": "31000000"})   # what `gpuc demo outbid POD` sends

An outbid goes through the emulator's own outbid (testkit/emulators/vast.py `outbid`): another bid above the
instance's, the instance paused (actual stopped, intended running), its container's processes killed at once,
its disk kept and billed, the signed outbid webhook queued. What follows is the product's: the watchdog sees
the pause at its next pass and, for a run started with `--recover N`, waits, destroys the paused instance and
rents the same machine again. Nothing here reaches a real provider: it is a page on loopback over an emulator.
"""

from __future__ import annotations

import html
import json
from typing import Any
from urllib.parse import parse_qs

from gpuc.testkit.emulators.common import EmuRequest, EmuResponse, Route
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator
from gpuc.testkit.stand_ins import _StandIn

OUTBID_BY_USD = 0.05  # the other renter's bid over ours, per GPU: above it, so the pause holds until a re-rent


class ProviderConsole(_StandIn):
    provider = "console"

    def __init__(self, emulator: RunPodEmulator | VastEmulator) -> None:
        super().__init__(emulator.clock)
        self.emulator = emulator
        self.outbids: list[str] = []

    def route(self, request: EmuRequest) -> Route | None:
        if request.method == "GET" and request.path in ("/", "/json"):
            return "read", self._read
        if request.method == "POST" and request.path == "/outbid":
            return "outbid", self._outbid
        return None

    def account(self) -> dict[str, Any]:
        """The balance and every pod, as the provider's console would show them."""
        emu = self.emulator
        if isinstance(emu, VastEmulator):
            pods = [
                {"id": str(i.id), "label": i.label or "", "state": i.actual, "bid": i.bid,
                 "price_per_hour": round(i.bid if i.bid is not None else i.offer.dph_base, 4)}
                for i in emu.alive()
            ]  # fmt: skip
            return {"provider": "vast", "balance_usd": round(emu.credit_now(), 4), "pods": pods}
        pods = [
            {"id": p.id, "label": p.name, "state": p.state, "bid": None, "price_per_hour": p.cost} for p in emu.alive()
        ]
        return {"provider": "runpod", "balance_usd": round(emu.balance_now(), 4), "pods": pods}

    def _read(self, request: EmuRequest) -> EmuResponse:
        if request.path == "/json":
            return EmuResponse.json(200, self.account())
        return EmuResponse(200, console_page(self.account()).encode(), {"content-type": "text/html; charset=utf-8"})

    def _outbid(self, request: EmuRequest) -> EmuResponse:
        """Another renter outbids one instance: a JSON `{"pod": id}` (the command) or a form's `pod` (the page)."""
        form = request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded")
        try:
            pod_id = parse_qs(request.body.decode())["pod"][0] if form else str(json.loads(request.body)["pod"])
        except (KeyError, IndexError, ValueError, TypeError, UnicodeDecodeError):
            return EmuResponse.json(400, {"error": 'name the pod: {"pod": "<instance id>"}'})
        problem, answer = self.outbid(pod_id)
        if problem is not None:
            return EmuResponse.json(409 if answer else 404, {"error": problem})
        return EmuResponse(303, b"", {"location": "/"}) if form else EmuResponse.json(200, answer)

    def outbid(self, pod_id: str) -> tuple[str | None, dict[str, Any]]:
        """(why not, {}) or (None, what happened)."""
        emu = self.emulator
        if not isinstance(emu, VastEmulator):
            return "RunPod has no interruptible API in gpuc: only a Vast rehearsal has bids to outbid", {"pod": pod_id}
        inst = emu.instances.get(int(pod_id)) if pod_id.isdigit() else None
        if inst is None or inst.id in emu.destroyed:
            return f"no instance {pod_id} at the Vast emulator (`gpuc ls` lists the pods)", {}
        if inst.bid is None:
            return f"instance {pod_id} is on-demand: only an interruptible (--bid) instance is outbid", {"pod": pod_id}
        if inst.actual != "running":
            return f"instance {pod_id} is {inst.actual}, not running: nothing to outbid", {"pod": pod_id}
        going = round(inst.bid + OUTBID_BY_USD, 4)
        emu.outbid(inst.id, by=going)
        self.outbids.append(pod_id)
        return None, {"pod": pod_id, "bid": inst.bid, "going": going, "state": "paused"}


def console_page(account: dict[str, Any]) -> str:
    rows = []
    for pod in account["pods"]:
        bid = "" if pod["bid"] is None else f"bid ${pod['bid']:.2f}"
        button = (
            f'<form method="post" action="/outbid"><input type="hidden" name="pod" value="{html.escape(pod["id"])}">'
            "<button>outbid it</button></form>"
            if pod["bid"] is not None and pod["state"] == "running"
            else ""
        )
        rows.append(
            f"<li><b>{html.escape(pod['id'])}</b> {html.escape(pod['label'])}: {html.escape(str(pod['state']))}, "
            f"${pod['price_per_hour']:.3f}/h {bid}{button}</li>"
        )
    body = "".join(rows) or "<li>no pods</li>"
    return (
        '<!doctype html><meta name="viewport" content="width=device-width"><title>gpuc rehearsal console</title>'
        f'<meta http-equiv="refresh" content="5"><h1>{account["provider"]} console (stand-in)</h1>'
        f"<p>balance ${account['balance_usd']:.4f}</p><ul>{body}</ul>"
    )
