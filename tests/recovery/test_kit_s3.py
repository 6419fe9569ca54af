"""The boot kit at an s3:// results bucket (moto): both files under `<prefix>/.gpuc-kits/<run_id>/`, written
with the results keys, fetched by presigned GETs that live the run's hours + 1 h (at most S3's 7 days)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from moto import mock_aws

from gpuc.client.onpod.upload import prepare
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.recovery.prepare import kit_files, remove_kit
from gpuc.core.errors import ConfigError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

RUN = "r1234abcd"


def settings_for(tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path / "home",
        env_file=tmp_path / "none.env",
        results_bucket="s3://results/gpuc",
        s3_access_key_id=SecretStr("AKIAKITTEST"),
        s3_secret_access_key=SecretStr("kitsecret"),
    )


@pytest.mark.parametrize(("hours", "expires"), [(2.0, 3 * 3600), (300.0, 7 * 24 * 3600)], ids=["2h", "capped"])
def test_the_kit_goes_to_the_bucket_with_presigned_gets(tmp_path: Path, hours: float, expires: int) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    opts = UpOptions(experiment="exp1", provider="vast", max_hours=hours, upload=prepare(project, 10))
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="results")
        files = kit_files(opts, settings_for(tmp_path), RUN)
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="results")["Contents"])
        assert keys == sorted([f"gpuc/.gpuc-kits/{RUN}/{files.wheel_name}", f"gpuc/.gpuc-kits/{RUN}/project.tar.gz"])
        wheel = s3.get_object(Bucket="results", Key=f"gpuc/.gpuc-kits/{RUN}/{files.wheel_name}")["Body"].read()
        assert hashlib.sha256(wheel).hexdigest() == files.wheel_sha256
        for url in (files.wheel_url, files.project_url or ""):
            query = parse_qs(urlparse(url).query)
            assert url.startswith("https://") and query["X-Amz-Expires"] == [str(expires)]
            assert "kitsecret" not in url and query["X-Amz-Credential"][0].startswith("AKIAKITTEST/")
        assert remove_kit(settings_for(tmp_path), RUN)
        assert "Contents" not in s3.list_objects_v2(Bucket="results")


def test_a_bucket_that_refuses_the_kit_is_a_clear_refusal(tmp_path: Path) -> None:
    opts = UpOptions(experiment="exp1", provider="vast", max_hours=2.0)
    with mock_aws(), pytest.raises(ConfigError) as caught:  # no such bucket
        kit_files(opts, settings_for(tmp_path), RUN)
    assert "cannot write the run's boot kit" in caught.value.message and "nothing was rented" in caught.value.message
    assert "kitsecret" not in caught.value.message
