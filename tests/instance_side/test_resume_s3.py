"""GPUC_RESUME_FROM at an s3:// destination: the last push restored into results/ with the pod's own S3
client and keys (moto, in process), each file checked against the push manifest as for file://."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuc.core.destinations import S3_KEY_ENV, S3_SECRET_ENV
from gpuc.instance_side.push import MANIFEST_NAME, PushManifest
from gpuc.instance_side.resume import RestoreError, restore

BASE = "runs/exp/run01"
KEYS = {S3_KEY_ENV: "AKIAEXAMPLEKEY000001", S3_SECRET_ENV: "s3cr3t-value-not-printed"}


def pushed(s3: Any, files: dict[str, bytes], sizes: dict[str, int] | None = None, **kw: Any) -> str:
    for name, data in files.items():
        s3.put_object(Bucket="results", Key=f"{BASE}/{name}", Body=data)
    listed = {n: ((sizes or {}).get(n, len(d)), 1) for n, d in files.items()}
    manifest = PushManifest(f"s3://results/{BASE}/", 1.0, listed, **kw).to_json()
    s3.put_object(Bucket="results", Key=f"{BASE}/{MANIFEST_NAME}", Body=manifest.encode())
    return f"s3://results/{BASE}"


def test_the_last_push_at_s3_is_restored_into_results(s3: Any, tmp_path: Path) -> None:
    # A push under way announced step 3 and step 4, oldest first; step 3 arrived, then it was cut.
    sending = (("step-003.pt", 3, 30), ("step-004.pt", 4, 40))
    src = pushed(s3, {"ckpt/step007.pt": b"7" * 100, "metrics.json": b"{}"}, sending=sending)
    s3.put_object(Bucket="results", Key=f"{BASE}/step-003.pt", Body=b"333")
    restored = restore(src, tmp_path / "results", credentials=KEYS)
    assert sorted(restored) == ["ckpt/step007.pt", "metrics.json", "step-003.pt"]
    assert (tmp_path / "results" / "ckpt" / "step007.pt").read_bytes() == b"7" * 100
    assert not (tmp_path / "results" / "step-004.pt").exists(), "announced, never arrived"


def test_an_s3_file_that_does_not_match_the_manifest_is_refused_whole(s3: Any, tmp_path: Path) -> None:
    src = pushed(s3, {"a.pt": b"abc"}, sizes={"a.pt": 9})
    with pytest.raises(RestoreError, match="does not match"):
        restore(src, tmp_path / "r", credentials=KEYS)
    assert not (tmp_path / "r").exists() or list((tmp_path / "r").iterdir()) == [], "no half file named as whole"


def test_an_s3_manifest_naming_a_path_outside_results_is_refused(s3: Any, tmp_path: Path) -> None:
    # Stored under a harmless key, named as a path out of results/: the name is what lands on the pod's disk.
    manifest = PushManifest("x", 1.0, {"../escape": (1, 1)}, keys={"../escape": "ok.bin"}).to_json()
    s3.put_object(Bucket="results", Key=f"{BASE}/ok.bin", Body=b"x")
    s3.put_object(Bucket="results", Key=f"{BASE}/{MANIFEST_NAME}", Body=manifest.encode())
    with pytest.raises(RestoreError, match="not a path inside"):
        restore(f"s3://results/{BASE}", tmp_path / "r", credentials=KEYS)
    assert not (tmp_path / "escape").exists()


def test_nothing_pushed_to_s3_and_an_unreadable_bucket_are_said_without_the_keys(s3: Any, tmp_path: Path) -> None:
    with pytest.raises(RestoreError, match="nothing was pushed"):
        restore(f"s3://results/{BASE}", tmp_path / "r", credentials=KEYS)
    with pytest.raises(RestoreError, match="failed") as caught:
        restore("s3://no-such-bucket/x", tmp_path / "r", credentials=KEYS)
    assert KEYS[S3_SECRET_ENV] not in str(caught.value)


def test_a_git_destination_is_refused_as_not_built(tmp_path: Path) -> None:
    with pytest.raises(RestoreError, match="file:// or s3://"):
        restore("git+https://example.com/x.git", tmp_path / "r")


def test_a_stored_key_that_leads_out_of_the_destination_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "bucket" / "exp" / "run01"
    (dest / "logs").mkdir(parents=True)
    (tmp_path / "bucket" / "exp" / "other-run.txt").write_text("another run's")
    manifest = PushManifest("x", 1.0, {"a.txt": (13, 1)}, keys={"a.txt": "../other-run.txt"}).to_json()
    (dest / MANIFEST_NAME).write_text(manifest)
    with pytest.raises(RestoreError, match="not a path inside"):
        restore(f"file://{dest}", tmp_path / "r")
    assert not (tmp_path / "r" / "a.txt").exists()
