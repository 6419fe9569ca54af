"""`gpuc drill` row for a pod whose host is hostile (docs/secrets.md "What a pod holds").

F34   the host reads everything on the pod (its token, its claim, its config: no S3 key is there) and, while
      the job runs and for 20 minutes after it ended, asks the watchdog for grants as the pod does: its own
      objects, another run's (`../`), an absolute name, a DELETE. The real grant route (functions/grants.py)
      and the real presigner (functions/bucket.py) answer: only URLs naming objects under the run's own
      prefix, PUT or GET, refused for everything else and for everything once the run ended. Measured: how
      long after the run's end the last URL it ever got stays valid.

The bucket is never reached: a presigned URL is signed where it is minted (no request), and what each one
names, and for how long, is read off the URL itself. What S3 does with a URL bent to another object (a 403)
is tests/hostile/test_pod_grants.py's, against a real S3 API.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from gpuc.core import api
from gpuc.core.destinations import S3_KEY_ENV, S3_SECRET_ENV
from gpuc.core.s3client import s3_client
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, sign
from gpuc.functions.bucket import ResultsBucket
from gpuc.functions.edge import Request
from gpuc.functions.grants import GRANT_TTL_S
from gpuc.functions.handlers import dispatch
from gpuc.testkit.drill_stage import EXPERIMENT, RowResult, Stage

MIN = 60.0
BUCKET = "drill-results"
ENDPOINT = "https://s3.drill.invalid"  # never reached: presigning makes no request
KEY_ID, SECRET = "AKIADRILLRESULTS0001", "drill-results-secret-" + "0" * 20
FORGED = ("../other-run/ckpt.pt", f"../../{EXPERIMENT}/other-run/ckpt.pt", "/etc/passwd", "a/./b", "ckpt//x")


class _Host:
    """What the host holds after reading the pod: its token and claim. It signs what it likes with them."""

    def __init__(self, stage: Stage, pod_id: str, token: str, claim: str) -> None:
        self.stage, self.pod_id, self.token, self.claim = stage, pod_id, token, claim
        self.seq = 10**12

    def ask(self, op: str, names: list[str]) -> tuple[int, dict[str, Any]]:
        self.seq += 1
        body = json.dumps({"pod_id": self.pod_id, "op": op, "names": names}).encode()
        now = int(self.stage.now)
        signature = sign(derive_key(self.token), now, self.seq, body)
        headers = {api.H_POD: self.pod_id, api.H_TIMESTAMP: str(now), api.H_SEQ: str(self.seq),
                   api.H_SIGNATURE: signature, api.H_CLAIM: self.claim}  # fmt: skip
        answer = dispatch(Request("POST", "/v1/grant", headers, body), self.stage.deps, self.stage.now)
        return answer.status, answer.body


def f34_hostile_host_reads_the_pod(stage: Stage) -> RowResult:
    settings = stage.settings.with_overrides(
        results_bucket=f"s3://{BUCKET}/runs", s3_endpoint_url=ENDPOINT,
        s3_access_key_id=SecretStr(KEY_ID), s3_secret_access_key=SecretStr(SECRET),
    )  # fmt: skip
    stage.deps.settings = settings  # the watchdog holds the results key; the pod never does
    keys = {S3_KEY_ENV: KEY_ID, S3_SECRET_ENV: SECRET}
    stage.deps.bucket = ResultsBucket(s3_client(ENDPOINT, keys, environ={}, presign_v4=True), BUCKET)
    pod = stage.launch("f34-pod")
    pod.busy()
    prefix = f"runs/{EXPERIMENT}/{pod.pod_id}"
    # `up`'s registration names the run's prefix (a retried register of the same pod: as `up` sends it).
    request = stage._request(pod.pod_id, None).model_copy(update={"results_at": f"s3://{BUCKET}/{prefix}"})
    claim = str(stage._register(request)["claim"])
    held = pod.paths.secrets.read_text() + pod.paths.config.read_text()
    host = _Host(stage, pod.pod_id, pod.token, claim)
    problems = [f"the pod's files hold the results {what}" for what, v in (("key id", KEY_ID), ("secret", SECRET))
                if v in held]  # fmt: skip
    granted: list[tuple[float, str]] = []  # (when, URL)
    for _ in range(6):  # the job runs for 30 min: the host asks every 5
        status, body = host.ask("put", ["ckpt/step.pt", "metrics.json"])
        granted += [(stage.now, str(u["url"])) for u in body.get("urls", []) if isinstance(u, dict)]
        if status != 200 and not stage.in_window("store unavailable"):
            problems.append(f"its own objects were refused ({status})")
        for name in FORGED:
            forged, _ = host.ask("get", [name])
            if forged < 400:
                problems.append(f"granted {name!r}")
        for op in ("delete", "DELETE"):
            if host.ask(op, ["metrics.json"])[0] < 400:
                problems.append(f"granted a {op}")
        stage.run(5 * MIN)
    status, body = host.ask("put", ["last.txt"])  # the last moment before the end: the longest-lived URL
    granted += [(stage.now, str(u["url"])) for u in body.get("urls", []) if isinstance(u, dict)]
    pod.job_exit(0, 30 * MIN)
    ended_at = stage.now
    for _ in range(20):  # after the end: nothing
        status, _ = host.ask("get", ["ckpt/step.pt"])
        if status != 403 and not (status == 500 and stage.in_window("store unavailable")):
            problems.append(f"a grant {(stage.now - ended_at) / MIN:.0f} min after the run's end answered {status}")
        stage.run(MIN)
    last_valid = ended_at
    for at, url in granted:
        parsed = urlparse(url)
        if not unquote(parsed.path).startswith(f"/{BUCKET}/{prefix}/"):
            problems.append(f"a URL names {parsed.path}, outside the run's prefix")
        last_valid = max(last_valid, at + int(parse_qs(parsed.query)["X-Amz-Expires"][0]))
    if not granted:
        problems.append("no URL was ever granted: the row proved nothing")
    return RowResult(
        "F34",
        "a hostile host reads the pod and asks for grants (another run's objects, `../`, DELETE, after the end)",
        "watchdog grants (functions/grants.py): the pod holds no S3 key",
        (last_valid - ended_at) / MIN,
        GRANT_TTL_S / MIN,
        f"only its own run's prefix, PUT or GET, never a delete; no grant after the run's end, and the last URL "
        f"dies within {GRANT_TTL_S / MIN:.0f} min of it",
        notifications=stage.notifications(pod.pod_id),
        problems=problems,
    )
