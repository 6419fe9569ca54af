"""`up`'s results destination check against moto (server mode, IAM enforced): it passes only when the
destination's own keys can write AND list, and leaves nothing behind."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from fakes.up import Created, FakeProvider, make_deps, nothing_spent, rented_settings, runpod_4090

from gpuc.client.context import Ctx
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.destcheck import check_destination
from gpuc.core.errors import ConfigError
from gpuc.core.grantapi import GrantScope
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

BUCKET = "results"


def admin(service: str, url: str, key_id: str = "testing", secret: str = "testing") -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service, endpoint_url=url, region_name="us-east-1", aws_access_key_id=key_id, aws_secret_access_key=secret
    )


@dataclass(frozen=True)
class Keys:
    key_id: str
    secret: str


@dataclass(frozen=True)
class Moto:
    url: str
    full: Keys  # write, list, delete
    list_only: Keys  # may list, may not write
    write_only: Keys  # may write and delete, may not list
    no_delete: Keys  # may write and list, may not delete

    def objects(self) -> dict[str, int]:
        s3 = admin("s3", self.url, self.full.key_id, self.full.secret)
        return {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}


def _user(iam: Any, name: str, actions: list[str]) -> Keys:
    iam.create_user(UserName=name)
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}
    iam.put_user_policy(UserName=name, PolicyName="p", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return Keys(key["AccessKeyId"], key["SecretAccessKey"])


def _auth(url: str, count: str) -> None:
    httpx.post(f"{url}/moto-api/reset-auth", content=count.encode(), timeout=10.0).raise_for_status()


@pytest.fixture
def moto(moto_url: str) -> Iterator[Moto]:
    httpx.post(f"{moto_url}/moto-api/reset", timeout=10.0).raise_for_status()
    admin("s3", moto_url).create_bucket(Bucket=BUCKET)
    iam = admin("iam", moto_url)
    world = Moto(
        moto_url,
        full=_user(iam, "full", ["s3:PutObject", "s3:ListBucket", "s3:DeleteObject"]),
        list_only=_user(iam, "lister", ["s3:ListBucket"]),
        write_only=_user(iam, "writer", ["s3:PutObject", "s3:DeleteObject"]),
        no_delete=_user(iam, "keeper", ["s3:PutObject", "s3:ListBucket"]),
    )
    _auth(moto_url, "0")  # from here on every request is checked against the user's policy
    try:
        yield world
    finally:
        _auth(moto_url, "inf")


def settings(
    tmp_path: Path,
    keys: Keys | None,
    bucket: str = f"s3://{BUCKET}/gpuc",
    endpoint: str | None = None,
) -> Settings:
    return Settings(
        home=tmp_path,
        results_bucket=bucket,
        s3_endpoint_url=endpoint,
        s3_access_key_id=SecretStr(keys.key_id) if keys else None,
        s3_secret_access_key=SecretStr(keys.secret) if keys else None,
    )


def refusal(s: Settings) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check_destination(s, "exp")
    return caught.value


def said(exc: ConfigError) -> str:
    return f"{exc.message} {exc.hint}"


def test_a_bucket_the_keys_can_write_and_list_passes_and_keeps_nothing(moto: Moto, tmp_path: Path) -> None:
    result = check_destination(settings(tmp_path, moto.full, endpoint=moto.url), "exp")
    assert result.lines == (
        f"results: s3://{BUCKET}/gpuc/exp/ via {moto.url} takes a write and answers a list with "
        "GPUC_S3_ACCESS_KEY_ID (probe removed)",
    )
    assert result.warnings == ()
    assert moto.objects() == {}, "the probe was left in the bucket"


def test_keys_that_may_list_but_not_write_are_refused(moto: Moto, tmp_path: Path) -> None:
    """The check that matters: without a real write this would pass, and the pod's sync would fail."""
    exc = refusal(settings(tmp_path, moto.list_only, endpoint=moto.url))
    assert "refused the write (AccessDenied)" in exc.message and "may not write" in exc.message
    assert f"s3:PutObject on arn:aws:s3:::{BUCKET}/*" in (exc.hint or "")
    assert moto.objects() == {}


def test_keys_that_may_write_but_not_list_are_refused_and_the_probe_removed(moto: Moto, tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path, moto.write_only, endpoint=moto.url))
    assert "refused the list (AccessDenied)" in exc.message and "verifies every sync by listing" in exc.message
    assert f"s3:ListBucket on arn:aws:s3:::{BUCKET}" in (exc.hint or "")
    assert moto.objects() == {}, "a failed check left its probe behind"


def test_a_probe_that_cannot_be_deleted_is_named_not_a_failure(moto: Moto, tmp_path: Path) -> None:
    result = check_destination(settings(tmp_path, moto.no_delete, endpoint=moto.url), "exp")
    assert result.lines[0].endswith("(probe left)")
    (left,) = moto.objects()
    assert left.startswith("gpuc/exp/gpuc-probe-") and left in result.warnings[0]


def test_a_bucket_that_does_not_exist_is_named(moto: Moto, tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path, moto.full, bucket="s3://no-such-bucket/gpuc", endpoint=moto.url))
    assert exc.message == f"bucket 'no-such-bucket' does not exist via {moto.url}"
    assert "GPUC_RESULTS_BUCKET" in (exc.hint or "") and "GPUC_S3_ENDPOINT_URL" in (exc.hint or "")


def test_a_wrong_secret_is_named_and_never_printed(moto: Moto, tmp_path: Path) -> None:
    wrong = Keys(moto.full.key_id, "not-the-secret-at-all-0123456789")
    exc = refusal(settings(tmp_path, wrong, endpoint=moto.url))
    assert "are not a valid key pair there" in exc.message
    for secret in (wrong.secret, moto.full.secret):
        assert secret not in said(exc)


def test_a_wrong_endpoint_says_which_setting_to_fix(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on: refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    exc = refusal(settings(tmp_path, Keys("AKIDEXAMPLE", "secret"), endpoint=f"http://127.0.0.1:{port}"))
    assert exc.message.startswith(f"cannot reach http://127.0.0.1:{port} to write s3://{BUCKET}/gpuc/exp/")
    assert "GPUC_S3_ENDPOINT_URL" in (exc.hint or "") and "r2.cloudflarestorage.com" in (exc.hint or "")


def test_missing_bucket_keys_are_refused_even_with_aws_keys_on_the_laptop(
    moto: Moto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The laptop's AWS chain would pass; the pod never gets those keys, so its sync would fail."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", moto.full.key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", moto.full.secret)
    exc = refusal(settings(tmp_path, None, endpoint=moto.url))
    assert exc.message.startswith("GPUC_S3_ACCESS_KEY_ID and GPUC_S3_SECRET_ACCESS_KEY not set")
    assert moto.objects() == {}


def test_credentials_in_the_url_are_refused_before_any_request(tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path, Keys("a", "b"), bucket="s3://AKID:hunter22@results/gpuc"))
    assert "holds credentials" in exc.message and "hunter22" not in said(exc)


# -- through `up`: a refusal rents nothing and leaves nothing; a probe left is said, the rental goes on ------
def rented_up(tmp_path: Path, moto: Moto, keys: Keys, lines: list[str]) -> tuple[Ctx, FakeProvider]:
    s3 = {"s3_access_key_id": SecretStr(keys.key_id), "s3_secret_access_key": SecretStr(keys.secret)}
    rented = rented_settings(tmp_path).with_overrides(
        git_remote=None, results_bucket=f"s3://{BUCKET}/gpuc", s3_endpoint_url=moto.url, **s3
    )
    provider = runpod_4090()
    deps = make_deps(rented, provider, lines)
    deps.watchdog.results_grant = GrantScope(bucket=f"s3://{BUCKET}/gpuc", endpoint_url=moto.url)  # type: ignore[attr-defined]
    return deps, provider


def test_up_with_a_bucket_that_denies_the_write_rents_nothing_and_leaves_nothing(moto: Moto, tmp_path: Path) -> None:
    deps, provider = rented_up(tmp_path, moto, moto.list_only, [])
    with pytest.raises(ConfigError) as caught:
        up(UpOptions(experiment="exp", provider="runpod"), deps)
    assert "may not write there" in caught.value.message and "s3:PutObject" in (caught.value.hint or "")
    assert nothing_spent(deps, provider) and moto.objects() == {}


def test_up_with_a_bucket_that_denies_the_list_rents_nothing_and_removes_its_probe(moto: Moto, tmp_path: Path) -> None:
    deps, provider = rented_up(tmp_path, moto, moto.write_only, [])
    with pytest.raises(ConfigError, match="refused the list"):
        up(UpOptions(experiment="exp", provider="runpod"), deps)
    assert nothing_spent(deps, provider) and moto.objects() == {}


def test_up_with_a_bucket_that_denies_the_delete_rents_and_names_the_probe_left(moto: Moto, tmp_path: Path) -> None:
    """The pod never deletes: the results can go there. What is left is named, with how to remove it."""
    lines: list[str] = []
    deps, provider = rented_up(tmp_path, moto, moto.no_delete, lines)
    with pytest.raises(Created):
        up(UpOptions(experiment="exp", provider="runpod"), deps)
    assert len(provider.created) == 1
    (left,) = moto.objects()
    assert any(
        line.startswith("warning: the probe s3://") and left in line and "delete it by hand" in line for line in lines
    ), lines


class LostWriteAnswer:
    """The real moto client, except that the probe's write is stored and its answer then lost (a read
    timeout): what a slow endpoint does."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def put_object(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ReadTimeoutError

        self.client.put_object(**kwargs)
        raise ReadTimeoutError(endpoint_url="http://moto")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_a_write_whose_answer_is_lost_is_refused_and_its_probe_removed(moto: Moto, tmp_path: Path) -> None:
    def lossy(endpoint: str | None, creds: Any) -> Any:
        return LostWriteAnswer(admin("s3", moto.url, moto.full.key_id, moto.full.secret))

    with pytest.raises(ConfigError) as caught:
        check_destination(settings(tmp_path, moto.full, endpoint=moto.url), "exp", s3_factory=lossy)
    assert "cannot reach" in caught.value.message and "to write" in caught.value.message
    assert moto.objects() == {}, "the probe the lost write stored was left in the bucket"


def test_a_refused_write_deletes_nothing(moto: Moto, tmp_path: Path) -> None:
    deletes: list[Any] = []

    def counting(endpoint: str | None, creds: Any) -> Any:
        client = admin("s3", moto.url, moto.list_only.key_id, moto.list_only.secret)
        client.meta.events.register("before-call.s3.DeleteObject", lambda **kw: deletes.append(kw))
        return client

    with pytest.raises(ConfigError, match="refused the write"):
        check_destination(settings(tmp_path, moto.list_only, endpoint=moto.url), "exp", s3_factory=counting)
    assert deletes == []


@pytest.mark.parametrize("grant", [None, "s3://other-bucket/gpuc", f"s3://{BUCKET}/elsewhere", "endpoint"])
def test_up_refuses_before_renting_when_the_watchdog_cannot_grant_the_bucket(
    moto: Moto, tmp_path: Path, grant: str | None
) -> None:
    """The pod holds no S3 key: the watchdog grants its run's prefix. One that holds no key for this bucket (or
    signs for another endpoint) would leave every result on the pod: nothing is rented, the fix is named."""
    deps, provider = rented_up(tmp_path, moto, moto.full, [])
    scope = None if grant is None else GrantScope(bucket=grant, endpoint_url=moto.url)
    if grant == "endpoint":
        scope = GrantScope(bucket=f"s3://{BUCKET}", endpoint_url="https://other.r2.cloudflarestorage.com")
    deps.watchdog.results_grant = scope  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as caught:
        up(UpOptions(experiment="exp", provider="runpod"), deps)
    assert "nothing was created" in caught.value.message and "gpuc watchdog" in (caught.value.hint or "")
    assert nothing_spent(deps, provider) and moto.objects() == {}


def test_up_takes_a_watchdog_granting_a_prefix_above_the_laptops(moto: Moto, tmp_path: Path) -> None:
    deps, provider = rented_up(tmp_path, moto, moto.full, [])
    deps.watchdog.results_grant = GrantScope(bucket=f"s3://{BUCKET}", endpoint_url=moto.url + "/")  # type: ignore[attr-defined]
    with pytest.raises(Created):
        up(UpOptions(experiment="exp", provider="runpod"), deps)
    assert len(provider.created) == 1
