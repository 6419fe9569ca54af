"""A hostile host reads everything on its pod (docs/secrets.md "What a pod holds"): the pod's token, its
claim, its config. What can it do with them at an s3:// destination? Ask the watchdog for grants, exactly as
the pod does (signed with the token), and use them, or bend them, against a real S3 API that checks every
signature and expiry (ministack with AUTH on, tests/fakes/s3world.py). Another run's results sit in the same
bucket: none of it may be listed, read, overwritten or deleted, and nothing at all once the run has ended.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from gpuc.core import api
from gpuc.core.destinations import git_runner
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_watchdog_key, sign
from gpuc.functions.grants import GRANT_MARGIN_S, GRANT_TTL_S
from gpuc.functions.store import SqliteStore, StoredPod
from gpuc.instance_side.gitsync import GitSync

THEIRS = {"ckpt/step900.pt": b"another run's checkpoint", "metrics.json": b'{"loss": 0.01}'}


class Host:
    """The host of pod `pod_id`: it holds what the pod holds (the token; the claim when there is one) and
    signs whatever it likes with it."""

    def __init__(self, world: Any, pod_id: str, claim: str | None = None) -> None:
        self.world, self.pod_id, self.claim = world, pod_id, claim
        self.seq = int(time.time() * 1000)

    def call(self, path: str, body: Mapping[str, object], seq: int | None = None) -> httpx.Response:
        if seq is None:
            self.seq += 1
            seq = self.seq
        raw = json.dumps(body).encode()
        now = int(time.time())
        headers = {
            api.H_POD: self.pod_id,
            api.H_TIMESTAMP: str(now),
            api.H_SEQ: str(seq),
            api.H_SIGNATURE: sign(derive_key(self.world.tokens[self.pod_id]), now, seq, raw),
            "Content-Type": "application/json",
        }
        if self.claim:
            headers[api.H_CLAIM] = self.claim
        return httpx.post(self.world.url + path, content=raw, headers=headers, timeout=30)

    def urls(self, op: str, names: Sequence[str]) -> dict[str, str]:
        answer = self.call("/v1/grant", {"pod_id": self.pod_id, "op": op, "names": list(names)})
        assert answer.status_code == 200, answer.text
        return {u["name"]: u["url"] for u in answer.json()["urls"]}


def s3(method: str, url: str, data: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read()


@pytest.fixture
def two_runs(grants: Any) -> tuple[Host, str]:
    """Pod `mine` of run01 (the hostile host's), and run02's results beside it in the same bucket, plus a
    run whose id starts like run01's."""
    grants.register("mine", "run01")
    owner = grants.stack.client("s3")
    for name, data in THEIRS.items():
        owner.put_object(Bucket="results", Key=f"{grants.prefix}/exp/run02/{name}", Body=data)
    owner.put_object(Bucket="results", Key=f"{grants.prefix}/exp/run01x/secret.txt", Body=b"not run01's")
    return Host(grants, "mine"), f"{grants.prefix}/exp/run01"


def untouched(grants: Any) -> None:
    """run02's results as they were: nothing overwritten, nothing deleted."""
    owner = grants.stack.client("s3")
    for name, data in THEIRS.items():
        assert owner.get_object(Bucket="results", Key=f"{grants.prefix}/exp/run02/{name}")["Body"].read() == data


def test_a_grant_names_the_pods_own_objects_short_lived(grants: Any, two_runs: tuple[Host, str]) -> None:
    host, base = two_runs
    for op in ("put", "get"):
        for name, url in host.urls(op, ["a.txt", "ckpt/step1.pt"]).items():
            parsed = urlparse(url)
            assert parsed.path == f"/results/{base}/{name}"
            query = parse_qs(parsed.query)
            assert int(query["X-Amz-Expires"][0]) <= GRANT_TTL_S and query["X-Amz-SignedHeaders"] == ["host"]
            assert grants.key[1] not in url, "a URL never carries the secret"
    url = host.urls("put", ["a.txt"])["a.txt"]
    assert s3("PUT", url, b"mine")[0] == 200
    assert s3("GET", host.urls("get", ["a.txt"])["a.txt"])[1] == b"mine"


@pytest.mark.parametrize(
    "name",
    [
        "../run02/metrics.json",
        "a/../../run02/x",
        "/results/x",
        "./a",
        "a//b",
        "a/",
        "",
        "a\x00b",
        "line\nbreak",
        "x" * 701,
    ],
)
def test_a_name_outside_the_prefix_is_refused_and_nothing_is_stored(two_runs: tuple[Host, str], name: str) -> None:
    host, _ = two_runs
    seq = host.seq + 1
    refused = host.call("/v1/grant", {"pod_id": "mine", "op": "put", "names": ["ok.txt", name]}, seq=seq)
    assert refused.status_code == 400 and "url" not in refused.text
    up = host.call("/v1/grant/upload", {"pod_id": "mine", "op": "start", "name": name}, seq=seq)
    assert up.status_code == 400
    assert host.call("/v1/grant/list", {"pod_id": "mine", "after": name}, seq=seq).status_code == 400
    # Nothing was stored for the refusals: the same seq still buys a grant.
    assert host.call("/v1/grant", {"pod_id": "mine", "op": "put", "names": ["ok.txt"]}, seq=seq).status_code == 200


def test_a_url_bent_to_another_object_method_or_run_is_refused_by_s3(grants: Any, two_runs: tuple[Host, str]) -> None:
    host, base = two_runs
    put, get = host.urls("put", ["a.txt"])["a.txt"], host.urls("get", ["a.txt"])["a.txt"]
    assert s3("PUT", put, b"mine")[0] == 200
    theirs = put.replace(f"{base}/a.txt", f"{grants.prefix}/exp/run02/metrics.json")
    assert s3("PUT", theirs, b"planted")[0] == 403, "overwrite another run's result"
    assert s3("GET", get.replace(f"{base}/a.txt", f"{grants.prefix}/exp/run02/metrics.json"))[0] == 403
    dotted = put.replace(f"{base}/a.txt", f"{base}/../run02/metrics.json")
    assert s3("PUT", dotted, b"planted")[0] == 403
    assert s3("GET", put)[0] == 403, "a PUT URL is no GET"
    assert s3("PUT", get, b"x")[0] == 403, "a GET URL is no PUT"
    for url in (put, get):
        assert s3("DELETE", url)[0] == 403, "no URL deletes"
    listing = f"{grants.stack.url}/results?list-type=2&prefix={grants.prefix}/&" + urlparse(get).query
    assert s3("GET", listing)[0] == 403, "a GET URL lists nothing"
    untouched(grants)
    assert grants.objects()[f"{base}/a.txt"] == 4


def test_the_listing_holds_the_pods_own_run_only(grants: Any, two_runs: tuple[Host, str]) -> None:
    host, _ = two_runs
    s3("PUT", host.urls("put", ["mine.txt"])["mine.txt"], b"1")
    answer = host.call("/v1/grant/list", {"pod_id": "mine"})
    assert answer.status_code == 200 and answer.json() == {"objects": [{"name": "mine.txt", "size": 1}], "more": False}


def test_no_route_deletes(two_runs: tuple[Host, str]) -> None:
    host, _ = two_runs
    for op in ("delete", "DELETE", "remove"):
        assert host.call("/v1/grant", {"pod_id": "mine", "op": op, "names": ["a.txt"]}).status_code == 400
        assert host.call("/v1/grant/upload", {"pod_id": "mine", "op": op, "name": "a.txt"}).status_code == 400


def test_an_expired_url_is_refused(grants: Any, two_runs: tuple[Host, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL the host kept past its life: signed (in the watchdog, this process) a TTL and a minute ago."""
    import botocore.auth

    host, _ = two_runs
    host.urls("put", ["warm.txt"])  # the watchdog's client is built (and its bucket's region asked) now
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    then = now - datetime.timedelta(seconds=GRANT_TTL_S + 60)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *args, **kwargs: then)
    stale = host.urls("put", ["late.txt"])["late.txt"]
    monkeypatch.undo()
    status, body = s3("PUT", stale, b"late")
    assert status == 403 and b"expired" in body
    assert s3("PUT", host.urls("put", ["late.txt"])["late.txt"], b"late")[0] == 200, "a fresh one works"


def test_no_grant_once_the_run_ended_or_past_its_deadline(grants: Any, two_runs: tuple[Host, str]) -> None:
    host, _ = two_runs
    assert grants.admin("POST", "/v1/pods/mine/end", {"end_at": time.time(), "by": "down"}).status_code == 200
    for path, body in (
        ("/v1/grant", {"pod_id": "mine", "op": "get", "names": ["a.txt"]}),
        ("/v1/grant/list", {"pod_id": "mine"}),
        ("/v1/grant/upload", {"pod_id": "mine", "op": "start", "name": "a.txt"}),
    ):
        refused = host.call(path, body)
        assert refused.status_code == 403 and "ended" in refused.json()["error"]
    grants.register("late", "run03", deadline_at=time.time() - GRANT_MARGIN_S - 5)
    refused = Host(grants, "late").call("/v1/grant", {"pod_id": "late", "op": "put", "names": ["a.txt"]})
    assert refused.status_code == 403 and "past its deadline" in refused.json()["error"]


def test_a_grant_never_outlives_the_deadline_and_its_margin(grants: Any) -> None:
    grants.register("closing", "run04", deadline_at=time.time() - GRANT_MARGIN_S + 30)
    url = Host(grants, "closing").urls("put", ["a.txt"])["a.txt"]
    assert int(parse_qs(urlparse(url).query)["X-Amz-Expires"][0]) <= 30


def test_a_replayed_grant_request_is_refused(two_runs: tuple[Host, str]) -> None:
    host, _ = two_runs
    body = {"pod_id": "mine", "op": "get", "names": ["a.txt"]}
    seq = host.seq + 1
    assert host.call("/v1/grant", body, seq=seq).status_code == 200
    assert host.call("/v1/grant", body, seq=seq).status_code == 409


def test_a_pod_without_an_s3_destination_is_granted_nothing(grants: Any) -> None:
    grants.register("plain", "run05", results_at=None)
    refused = Host(grants, "plain").call("/v1/grant", {"pod_id": "plain", "op": "get", "names": ["a.txt"]})
    assert refused.status_code == 403 and "no s3:// results destination" in refused.json()["error"]


@pytest.mark.parametrize(
    "results_at",
    [
        "s3://other-bucket/runs/exp/run06",
        "s3://results/elsewhere/exp/run06",
        "s3://results/{prefix}/exp/run07",
        "s3://results/{prefix}",
        "s3://results/{prefix}/../exp/run06",
        "file:///tmp/exp/run06",
    ],
)
def test_a_registration_naming_a_prefix_outside_its_run_is_refused(grants: Any, results_at: str) -> None:
    body = {"pod_id": "odd", "provider": "runpod", "name": "gpuc-run06", "experiment": "exp", "key": "0" * 64,
            "results_at": results_at.format(prefix=grants.prefix)}  # fmt: skip
    answer = grants.admin("POST", "/v1/pods", body)
    assert answer.status_code == 400, answer.text
    assert grants.admin("GET", "/v1/status").json()["pods"] == [], "nothing stored"


def seen_listed(db: Path, pod_id: str, name: str) -> None:
    """What the new store's first reaper pass records of a pod its provider lists (reaper.sight.adopt_strays):
    a claim re-creates a pod only over that stray record (functions/claims.py restore)."""
    store = SqliteStore(db)
    now = time.time()
    store.adopt(StoredPod(pod_id=pod_id, provider="runpod", name=name, experiment="exp", registered_at=now,
                          origin="adopted", deadline_at=now + 3600))  # fmt: skip
    store.close()


def test_a_store_rebuilt_from_the_claim_grants_the_same_prefix_never_a_wider_one(grants: Any, tmp_path: Path) -> None:
    """The watchdog loses its store; the pod's claim (signed, the prefix in it) re-creates its record. A claim
    the host edits is no claim."""
    key = new_watchdog_key()
    grants.stop()
    grants.watchdog_key = SecretStr(key)
    grants.start()
    body = {"pod_id": "claimed", "provider": "runpod", "name": "gpuc-run08", "experiment": "exp",
            "started_at": time.time(), "results_at": f"s3://results/{grants.prefix}/exp/run08"}  # fmt: skip
    answer = grants.admin("POST", "/v1/pods", body).json()
    grants.tokens["claimed"] = answer["token"]
    claim = answer["claim"]
    grants.stop()
    grants.home = tmp_path / "lost"  # a new store, the same key
    seen_listed(grants.settings.home / "watchdog.db", "claimed", "gpuc-run08")
    grants.start()
    host = Host(grants, "claimed", claim)
    url = host.urls("put", ["a.txt"])["a.txt"]
    assert urlparse(url).path == f"/results/{grants.prefix}/exp/run08/a.txt"
    version, payload, mac = claim.split(".")
    fields = json.loads(base64.urlsafe_b64decode(payload))
    fields["g"] = f"s3://results/{grants.prefix}"
    wider = base64.urlsafe_b64encode(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).decode()
    forged = Host(grants, "claimed", f"{version}.{wider}.{mac}")
    grants.stop()
    grants.home = tmp_path / "lost-again"
    grants.start()
    refused = forged.call("/v1/grant", {"pod_id": "claimed", "op": "put", "names": ["../run02/x"]})
    assert refused.status_code in (400, 401)
    refused = forged.call("/v1/grant", {"pod_id": "claimed", "op": "put", "names": ["a.txt"]})
    assert refused.status_code == 401, "an edited claim proves nothing"


# -- git: the run's own branch, never forced ---------------------------------------------------------------
def test_the_git_push_goes_to_the_runs_own_branch_only_never_forced(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(remote)], check=True)
    pushes: list[list[str]] = []

    def recording(args: Sequence[str], cwd: Path | None, env: Mapping[str, str], timeout_s: float) -> tuple[int, str]:
        if "push" in args:
            pushes.append(list(args[args.index("push") :]))
        return git_runner(args, cwd, env, timeout_s)

    results = tmp_path / "results"
    results.mkdir()
    (results / "m.json").write_text("{}")
    sync = GitSync(f"file://{remote}", "exp", "run01", tmp_path / "clone", environ={}, runner=recording)
    assert sync.verify(sync.push(results))
    assert pushes == [["push", "--quiet", "origin", "HEAD:refs/heads/gpuc-results/run01"]]
    assert not any(a.startswith(("-f", "--force", "+")) for push in pushes for a in push)


def test_an_upload_is_completed_only_with_the_parts_the_pod_names(grants: Any, two_runs: tuple[Host, str]) -> None:
    """The watchdog completes a multipart upload itself: only when parts 1..count hold `size` bytes."""
    host, base = two_runs
    start = host.call("/v1/grant/upload", {"pod_id": "mine", "op": "start", "name": "big.bin"}).json()
    upload_id = start["upload_id"]
    parts = host.call("/v1/grant/upload", {"pod_id": "mine", "op": "parts", "name": "big.bin",
                                           "upload_id": upload_id, "parts": [1]}).json()  # fmt: skip
    [part] = parts["urls"]
    assert urlparse(part["url"]).path == f"/results/{base}/big.bin" and s3("PUT", part["url"], b"p" * 10)[0] == 200
    done = {"pod_id": "mine", "op": "complete", "name": "big.bin", "upload_id": upload_id}
    assert host.call("/v1/grant/upload", {**done, "count": 2, "size": 10}).status_code == 409
    assert host.call("/v1/grant/upload", {**done, "count": 1, "size": 11}).status_code == 409
    assert f"{base}/big.bin" not in grants.objects()
    assert host.call("/v1/grant/upload", {**done, "count": 1, "size": 10}).status_code == 200
    assert grants.objects()[f"{base}/big.bin"] == 10
    # Another run's upload id names another key: the watchdog signs for this pod's key only, S3 refuses.
    other = host.call("/v1/grant/upload", {"pod_id": "mine", "op": "parts", "name": "../run02/x",
                                           "upload_id": upload_id, "parts": [1]})  # fmt: skip
    assert other.status_code == 400
