"""The destination probe (core/destcheck.py) passes only a destination that LISTS BACK what it took: the
pod's sync verifies every upload by listing, so a bucket or a git remote that takes a write and hides it
from the listing would fail every sync, and the pod would stay KEPT, billing. Against moto
(a real S3 client whose listing leaves the object out) and a local bare git repo that hides the probe
refs from `ls-remote` (uploadpack.hideRefs) while it takes the push."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest

from gpuc.core.destcheck import check_destination
from gpuc.core.errors import ConfigError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr


def test_a_bucket_whose_listing_hides_the_probe_is_refused_and_the_probe_removed(s3: Any, tmp_path: Path) -> None:
    def hiding(endpoint_url: str | None, credentials: Mapping[str, str]) -> Any:
        client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")

        def hide(parsed: dict[str, Any], **_: Any) -> None:
            parsed.pop("Contents", None)  # the write was taken; the listing does not show it

        client.meta.events.register("after-call.s3.ListObjectsV2", hide)
        return client

    settings = Settings(
        home=tmp_path / "home",
        results_bucket="s3://results/gpuc",
        s3_access_key_id=SecretStr("test"),
        s3_secret_access_key=SecretStr("test"),
    )
    with pytest.raises(ConfigError) as caught:
        check_destination(settings, "exp", s3_factory=hiding)
    assert "a listing does not show it" in caught.value.message
    assert s3.list_objects_v2(Bucket="results").get("Contents", []) == [], "the probe was left in the bucket"
    # The same bucket, listing honestly, passes: the refusal was the listing's, nothing else.
    honest = check_destination(settings, "exp", s3_factory=lambda url, creds: s3)
    assert "takes a write and answers a list" in honest.lines[0]


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_a_git_remote_whose_listing_hides_the_probe_is_refused_and_the_ref_removed(tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", str(remote))
    settings = Settings(home=tmp_path / "home", git_remote=str(remote))
    assert "takes a push and answers a list" in check_destination(settings, "exp").lines[0]  # honest: passes
    git("config", "uploadpack.hideRefs", "refs/gpuc-probe", cwd=remote)  # takes the push, lists nothing of it
    with pytest.raises(ConfigError) as caught:
        check_destination(settings, "exp")
    assert "does not list it" in caught.value.message
    assert git("for-each-ref", cwd=remote) == "", "the probe ref was left in the remote"
