"""A push to a new destination (the results bucket changed in the settings) sends everything the new destination
lacks: the last manifest says what the OLD one holds, so a push that went by it would send the new one only what
changed since, and a resume from the new one would find the run's older files missing."""

from __future__ import annotations

import time
from pathlib import Path

from test_push import Counted, pod, results_sent, run_push, write

from gpuc.instance_side.push import PushManifest, manifest_path
from gpuc.instance_side.sync import FileBucketSync, local_listing


def test_a_new_destination_gets_every_file_it_lacks(tmp_path: Path) -> None:
    paths = pod(tmp_path)
    old = Counted(FileBucketSync(tmp_path / "old-bucket", "exp", "run01"))
    run_push(old, paths)
    assert len(results_sent(old)) == 6
    write(paths.results / "metrics.json", b'{"loss": 0.25}', at=time.time() - 3600)  # one file changed since
    new = Counted(FileBucketSync(tmp_path / "new-bucket", "exp", "run01"))
    report = run_push(new, paths)
    assert sorted(results_sent(new)) == sorted(local_listing(paths.results))  # all six, not the one changed
    there = tmp_path / "new-bucket" / "exp" / "run01"
    assert {n: s for n, s in local_listing(there).items() if not n.startswith("logs/")} == local_listing(paths.results)
    assert report.destination == new.describe()
    assert PushManifest.load(manifest_path(paths)).destination == new.describe()
