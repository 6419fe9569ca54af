"""The pod's grant calls (instance_side/grants.py, standard library) against the one declaration of the wire
(core/api.py): every payload it sends is the shared model's, every answer the model makes it reads, every path
is a watchdog route. And PodClient.exchange: what passes is retried inside its budget, what cannot is handed
back at once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gpuc.core import grantapi
from gpuc.core.clock import FakeClock
from gpuc.core.errors import SyncError
from gpuc.functions import grants as routes
from gpuc.functions.handlers import route
from gpuc.instance_side.grants import GRANT_PATH, LIST_PATH, UPLOAD_PATH, GrantCalls
from gpuc.instance_side.heartbeat import PodClient
from gpuc.instance_side.podhttp import HttpResult, TransportError
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.signer import SeqCounter, Signer

TOKEN = "t" * 43


class Recorded:
    """A PodClient stand-in: what was sent, and the model answered."""

    def __init__(self, answer: BaseModel | None = None, status: int = 200, body: bytes | None = None) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.answer, self.status, self.body = answer, status, body

    def exchange(self, path: str, payload: Mapping[str, Any], budget_s: float) -> HttpResult:
        self.sent.append((path, dict(payload)))
        if self.body is not None:
            return HttpResult(self.status, self.body)
        return HttpResult(self.status, self.answer.model_dump_json().encode() if self.answer else b"{}")


def calls(client: Recorded) -> GrantCalls:
    return GrantCalls(client, "pod-1")  # type: ignore[arg-type]


def test_the_pods_requests_are_the_shared_models_on_the_watchdogs_routes() -> None:
    url = "https://s3.example/b/k?X-Amz-Signature=x"
    granted = Recorded(grantapi.GrantAnswer(urls=[grantapi.GrantedUrl(name="a/b.pt", url=url)], expires_in_s=900))
    assert calls(granted).urls("put", ["a/b.pt"]) == ({"a/b.pt": url}, 900.0)
    listed = Recorded(grantapi.ListAnswer(objects=[grantapi.ListedObject(name="a", size=3)], more=True))
    assert calls(listed).page("0") == ({"a": 3}, True)
    parts = Recorded(grantapi.UploadAnswer(upload_id="u1", urls=[grantapi.PartUrl(part=1, url=url)], expires_in_s=600))
    assert calls(parts).part_urls("big.pt", "u1", [1]) == ({1: url}, 600.0)
    started = Recorded(grantapi.UploadAnswer(upload_id="u1"))
    assert calls(started).upload("start", "big.pt")["upload_id"] == "u1"
    calls(started).upload("complete", "big.pt", upload_id="u1", count=2, size=10)
    models: dict[str, type[BaseModel]] = {
        GRANT_PATH: grantapi.GrantRequest,
        LIST_PATH: grantapi.ListRequest,
        UPLOAD_PATH: grantapi.UploadRequest,
    }
    handlers = {GRANT_PATH: routes.grant, LIST_PATH: routes.grant_list, UPLOAD_PATH: routes.grant_upload}
    for client in (granted, listed, parts, started):
        for path, payload in client.sent:
            models[path].model_validate_json(json.dumps(payload), strict=True)  # the watchdog's own parse
            assert route("POST", path)[0] is handlers[path]


def test_a_refusal_is_a_sync_error_saying_the_watchdogs_reason() -> None:
    refused = Recorded(status=403, body=b'{"error": "no grant: this pod\'s run has ended"}')
    with pytest.raises(SyncError, match="refused the results grant: HTTP 403 no grant: this pod's run has ended"):
        calls(refused).urls("get", ["a"])


@pytest.mark.parametrize(
    "answer",
    [
        b"not json",
        b'{"urls": [{"name": "other", "url": "https://x"}], "expires_in_s": 9}',
        b'{"urls": [{"name": "a", "url": "file:///etc/passwd"}], "expires_in_s": 9}',
    ],
)
def test_an_answer_that_is_not_the_grant_asked_for_is_refused(answer: bytes) -> None:
    with pytest.raises(SyncError):
        calls(Recorded(body=answer)).urls("get", ["a"])


class Scripted:
    """Answers in turn: an HttpResult, or TransportError to raise."""

    def __init__(self, *answers: HttpResult | type[TransportError]) -> None:
        self.answers = list(answers)
        self.posts = 0

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        self.posts += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, HttpResult):
            return answer
        raise answer("unreachable")


def client(tmp_path: Path, transport: Scripted) -> PodClient:
    clock = FakeClock()
    signer = Signer("pod-1", TOKEN, SeqCounter(tmp_path / "seq", clock), clock)
    return PodClient("http://watchdog", signer, transport, clock, PodLog(tmp_path / "log", clock, role="test"))


def test_exchange_retries_what_can_pass_and_hands_back_what_cannot(tmp_path: Path) -> None:
    ok = HttpResult(200, b"{}")
    passing = Scripted(TransportError, HttpResult(503, b'{"error": "bucket"}'), HttpResult(429, b"{}"), ok)
    assert client(tmp_path, passing).exchange("/v1/grant", {"pod_id": "pod-1"}, 60.0) is ok
    assert passing.posts == 4
    refusal = HttpResult(403, b'{"error": "no grant"}')
    final = Scripted(refusal, ok)
    assert client(tmp_path, final).exchange("/v1/grant", {}, 60.0) is refusal and final.posts == 1
    down = Scripted(HttpResult(503, b"{}"))
    with pytest.raises(TransportError, match="HTTP 503"):
        client(tmp_path, down).exchange("/v1/grant", {}, 5.0)
    assert 1 < down.posts < 10, "retried inside its budget, then given up"
