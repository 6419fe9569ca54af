"""GPUC_RESUME_FROM: the last push restored into results/ before a recovered attempt's job starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest
from gpuc.instance_side.resume import RestoreError, restore


def pushed(dest: Path, files: dict[str, bytes], waiting: tuple[str, ...] = (), **listed: int) -> str:
    for name, data in files.items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    sizes = {n: (listed.get(n.replace("/", "_").replace(".", "_"), len(d)), 1) for n, d in files.items()}
    (dest / MANIFEST_NAME).parent.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST_NAME).write_text(PushManifest(f"file://{dest}", 1.0, sizes, waiting=waiting).to_json())
    return f"file://{dest}"


def test_the_last_push_is_restored_into_results(tmp_path: Path) -> None:
    src = pushed(tmp_path / "b", {"ckpt/step007.txt": b"7", "metrics.json": b"{}"})
    assert restore(src, tmp_path / "results") == ["ckpt/step007.txt", "metrics.json"]
    assert (tmp_path / "results" / "ckpt" / "step007.txt").read_bytes() == b"7"


def test_a_file_at_a_size_no_push_sent_is_refused_whole(tmp_path: Path) -> None:
    bad = pushed(tmp_path / "c", {"a.pt": b"abc"}, a_pt=9)
    with pytest.raises(RestoreError, match="does not match"):
        restore(bad, tmp_path / "r2")
    assert not (tmp_path / "r2" / "a.pt").exists()


def test_a_file_still_being_written_at_an_older_pushs_manifest_is_not_restored(tmp_path: Path) -> None:
    """A manifest written by a gpuc before ordered pushes (version 1) listed a file still being written as
    waiting: it may be torn."""
    dest = tmp_path / "b"
    src = pushed(dest, {"a.pt": b"abc", "b.pt": b"x"})
    old = PushManifest(src, 1.0, {"a.pt": (3, 1), "b.pt": (1, 1)}, waiting=("b.pt",), version=1)
    (dest / MANIFEST_NAME).write_text(old.to_json())
    assert restore(src, tmp_path / "r") == ["a.pt"]


def test_a_cut_push_restores_what_arrived_up_to_the_first_that_did_not(tmp_path: Path) -> None:
    """The push announced step 3, the new checkpoint and step 4, oldest first, and was cut after the checkpoint:
    what arrived is restored (the stale manifest alone would have missed step 3 and taken the new checkpoint
    anyway, at its unchanged size); step 4 did not arrive, and nothing after it is taken."""
    dest = tmp_path / "b"
    src = pushed(dest, {"step-1": b"1", "step-2": b"2", "ckpt": b"c2"})
    (dest / "step-3").write_bytes(b"3")
    (dest / "ckpt").write_bytes(b"c3")  # overwritten in place by the cut push: same size
    (dest / "late").write_bytes(b"left by someone")
    sending = (("step-3", 1, 30), ("ckpt", 2, 31), ("step-4", 1, 40), ("late", 15, 50))
    last = PushManifest.load(dest / MANIFEST_NAME)
    (dest / MANIFEST_NAME).write_text(PushManifest(src, 1.0, last.files, sending=sending).to_json())
    assert sorted(restore(src, tmp_path / "r")) == ["ckpt", "step-1", "step-2", "step-3"]
    assert (tmp_path / "r" / "ckpt").read_bytes() == b"c3"


def test_a_file_the_manifest_lists_but_the_destination_lost_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "b"
    src = pushed(dest, {"step-1": b"1", "step-2": b"2"})
    (dest / "step-1").unlink()
    with pytest.raises(RestoreError, match="not at the destination"):
        restore(src, tmp_path / "r")


def test_the_jobs_log_and_outcome_beside_the_results_are_not_restored_into_them(tmp_path: Path) -> None:
    dest = tmp_path / "b"
    src = pushed(dest, {"a.pt": b"abc", "logs/job.log": b"attempt 1\n", "logs/outcome.json": b"{}"})
    last = PushManifest.load(dest / MANIFEST_NAME)
    beside = ("logs/job.log", "logs/outcome.json")
    (dest / MANIFEST_NAME).write_text(PushManifest(src, 1.0, last.files, beside=beside).to_json())
    assert restore(src, tmp_path / "r") == ["a.pt"]


def test_a_manifest_naming_a_path_outside_results_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "b"
    (dest / "logs").mkdir(parents=True)
    (dest / MANIFEST_NAME).write_text(PushManifest("x", 1.0, {"../escape": (1, 1)}).to_json())
    with pytest.raises(RestoreError, match="not a path inside"):
        restore(f"file://{dest}", tmp_path / "r")
    assert not (tmp_path / "escape").exists()


def test_nothing_pushed_is_said(tmp_path: Path) -> None:
    with pytest.raises(RestoreError, match="nothing was pushed"):
        restore(f"file://{tmp_path}", tmp_path / "r")
