"""GPUC_RESUME_FROM at an s3:// destination: the last push restored into results/ through the run's own
objects (the watchdog's grants on a real S3 API, tests/fakes/s3world.py: the pod holds no key), each file checked
against the push manifest as for file://. Only the pod's own run can be resumed from: its grant reaches
nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuc.instance_side.joblogsync import run_objects
from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest
from gpuc.instance_side.resume import RestoreError, restore


def pushed(grants: Any, files: dict[str, bytes], sizes: dict[str, int] | None = None, **kw: Any) -> str:
    """What an earlier attempt of run01 pushed, put there by the bucket's owner."""
    owner, base = grants.stack.client("s3"), f"{grants.prefix}/exp/run01"
    for name, data in files.items():
        owner.put_object(Bucket="results", Key=f"{base}/{name}", Body=data)
    listed = {n: ((sizes or {}).get(n, len(d)), 1) for n, d in files.items()}
    manifest = PushManifest(f"s3://results/{base}/", 1.0, listed, **kw).to_json()
    owner.put_object(Bucket="results", Key=f"{base}/{MANIFEST_NAME}", Body=manifest.encode())
    return f"s3://results/{base}"


def objects(grants: Any, tmp_path: Path, run_id: str = "run01") -> Any:
    grants.register(f"pod-{run_id}", run_id)
    return run_objects(grants.sync(tmp_path / "pod", f"pod-{run_id}", run_id))


def test_the_last_push_at_s3_is_restored_into_results(grants: Any, tmp_path: Path) -> None:
    # A push under way announced step 3 and step 4, oldest first; step 3 arrived, then it was cut. The watchdog's
    # listing of the run's prefix is what says so (the pod holds no key to list it).
    sending = (("step-003.pt", 3, 30), ("step-004.pt", 4, 40))
    src = pushed(grants, {"ckpt/step007.pt": b"7" * 100, "metrics.json": b"{}"}, sending=sending)
    grants.stack.client("s3").put_object(Bucket="results", Key=f"{grants.prefix}/exp/run01/step-003.pt", Body=b"333")
    restored = restore(src, tmp_path / "results", objects=objects(grants, tmp_path))
    assert sorted(restored) == ["ckpt/step007.pt", "metrics.json", "step-003.pt"]
    assert (tmp_path / "results" / "ckpt" / "step007.pt").read_bytes() == b"7" * 100
    assert not (tmp_path / "results" / "step-004.pt").exists(), "announced, never arrived"


def test_an_s3_file_that_does_not_match_the_manifest_is_refused_whole(grants: Any, tmp_path: Path) -> None:
    src = pushed(grants, {"a.pt": b"abc"}, sizes={"a.pt": 9})
    with pytest.raises(RestoreError, match="does not match"):
        restore(src, tmp_path / "r", objects=objects(grants, tmp_path))
    assert not (tmp_path / "r").exists() or list((tmp_path / "r").iterdir()) == [], "no half file named as whole"


def test_an_s3_manifest_naming_a_path_outside_results_is_refused(grants: Any, tmp_path: Path) -> None:
    # Stored under a harmless key, named as a path out of results/: the name is what lands on the pod's disk.
    base = f"{grants.prefix}/exp/run01"
    manifest = PushManifest("x", 1.0, {"../escape": (1, 1)}, keys={"../escape": "ok.bin"}).to_json()
    owner = grants.stack.client("s3")
    owner.put_object(Bucket="results", Key=f"{base}/ok.bin", Body=b"x")
    owner.put_object(Bucket="results", Key=f"{base}/{MANIFEST_NAME}", Body=manifest.encode())
    with pytest.raises(RestoreError, match="not a path inside"):
        restore(f"s3://results/{base}", tmp_path / "r", objects=objects(grants, tmp_path))
    assert not (tmp_path / "escape").exists()


def test_nothing_pushed_to_s3_and_another_runs_prefix_are_refused(grants: Any, tmp_path: Path) -> None:
    mine = objects(grants, tmp_path)
    with pytest.raises(RestoreError, match="nothing was pushed"):
        restore(f"s3://results/{grants.prefix}/exp/run01", tmp_path / "r", objects=mine)
    other = pushed(grants, {"ckpt.pt": b"theirs"}).replace("run01", "run02")
    with pytest.raises(RestoreError, match="not this run's own prefix"):
        restore(other, tmp_path / "r", objects=mine)
    with pytest.raises(RestoreError, match="not this run's own prefix"):
        restore(other, tmp_path / "r")  # no grant at all: nothing is read


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
