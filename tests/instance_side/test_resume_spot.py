"""GPUC_RESUME_FROM: the last push restored into results/ before a recovered attempt's job starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuc.instance_side.push import MANIFEST_NAME, PushManifest
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


def test_a_file_torn_or_still_being_written_is_not_restored_as_whole(tmp_path: Path) -> None:
    src = pushed(tmp_path / "b", {"a.pt": b"abc", "b.pt": b"x"}, waiting=("b.pt",))
    assert restore(src, tmp_path / "r") == ["a.pt"]
    bad = pushed(tmp_path / "c", {"a.pt": b"abc"}, a_pt=9)
    with pytest.raises(RestoreError, match="does not match"):
        restore(bad, tmp_path / "r2")


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
