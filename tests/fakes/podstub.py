"""A stand-in for the functions' two pod routes, checking signatures with the pod's token like the
real ones and recording what arrived (shared by the pod-CLI and the ssh-provisioning tests)."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

from gpuc.core.api import HeartbeatBody, PodEvent
from gpuc.core.signing import derive_key, verify


class RecordingFunctions(BaseHTTPRequestHandler):
    token: ClassVar[str] = ""
    heartbeats: ClassVar[list[HeartbeatBody]]
    events: ClassVar[list[PodEvent]]
    problems: ClassVar[list[str]]

    @classmethod
    def reset(cls) -> None:
        cls.heartbeats, cls.events, cls.problems = [], [], []

    def do_POST(self) -> None:
        cls = type(self)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ts, seq = int(self.headers["X-Gpuc-Timestamp"]), int(self.headers["X-Gpuc-Seq"])
        if not verify(derive_key(cls.token), ts, seq, body, self.headers["X-Gpuc-Signature"]):
            cls.problems.append("bad signature")
        try:
            if self.path == "/v1/heartbeat":
                cls.heartbeats.append(HeartbeatBody.model_validate_json(body))
            else:
                cls.events.append(PodEvent.model_validate_json(body))
        except ValueError as exc:
            cls.problems.append(str(exc))
        payload = json.dumps({"ok": True, "server_time": time.time(), "lease_until": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: Any) -> None:
        return


def recording_functions(token: str) -> type[RecordingFunctions]:
    """A fresh handler class (its own records) that accepts pings signed with `token`."""

    class Functions(RecordingFunctions):
        pass

    Functions.token = token
    Functions.reset()
    return Functions
