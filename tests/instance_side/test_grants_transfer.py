"""The pod's S3 transport (instance_side/grants.py) on a real S3 API through the watchdog's grants
(tests/fakes/s3world.py): a file over the one-PUT limit goes in parts, a restore streams it back, a URL that
expired is signed again, a file that changed since it was listed fails the push (never sent torn)."""

from __future__ import annotations

import datetime
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from gpuc.core.errors import SyncError
from gpuc.functions.grants import GRANT_TTL_S

MIB = 1024 * 1024


def objects_of(grants: Any, tmp_path: Path, run_id: str = "run01") -> Any:
    grants.register(f"pod-{run_id}", run_id)
    return grants.sync(tmp_path / "pod", f"pod-{run_id}", run_id).objects


def big_file(path: Path, size: int) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = os.urandom(MIB)
    with path.open("wb") as out:
        left = size
        while left:
            out.write(block[: min(left, MIB)])
            left -= min(left, MIB)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_over_the_one_put_limit_goes_in_parts_and_comes_back_whole(grants: Any, tmp_path: Path) -> None:
    objects = objects_of(grants, tmp_path)
    objects.single_put_max = objects.part_bytes = 5 * MIB  # S3's smallest part: 3 parts for 11 MiB and a byte
    source = tmp_path / "results" / "ckpt" / "model.pt"
    size = 11 * MIB + 1
    digest = big_file(source, size)
    (tmp_path / "results" / "small.txt").write_text("ok")
    objects.put_many([("ckpt/model.pt", source, size), ("small.txt", tmp_path / "results" / "small.txt", 2)])
    assert objects.list() == {"ckpt/model.pt": size, "small.txt": 2}
    back = tmp_path / "back.pt"
    assert objects.get("ckpt/model.pt", back, size=size)
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest
    assert not objects.get("nothing.pt", tmp_path / "none", size=1), "not there: False, not an error"
    uploads = grants.stack.client("s3").list_multipart_uploads(Bucket="results", Prefix=grants.prefix + "/")
    assert uploads.get("Uploads", []) == [], "no upload left open (they bill storage)"


def test_a_file_that_changed_since_it_was_listed_fails_the_push(grants: Any, tmp_path: Path) -> None:
    objects = objects_of(grants, tmp_path)
    source = tmp_path / "grew.log"
    source.write_bytes(b"x" * 100)
    with pytest.raises(SyncError, match="changed while the push ran"):
        objects.put("grew.log", source, 50)  # listed at 50 bytes: it is 100 now
    assert objects.list() == {}, "nothing sent as if whole"


def test_a_url_that_expired_before_its_use_is_signed_again(
    grants: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's URL used after its life (a slow uplink): S3 refuses it, the pod asks again and sends."""
    import botocore.auth

    objects = objects_of(grants, tmp_path)
    objects.list()  # the watchdog's client is built now (its bucket's region asked with the true time)
    calls: list[int] = []

    def first_one_stale(*args: Any, **kwargs: Any) -> datetime.datetime:
        calls.append(1)
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)  # as botocore's own
        return now - datetime.timedelta(seconds=GRANT_TTL_S + 60) if len(calls) == 1 else now

    monkeypatch.setattr(botocore.auth, "get_current_datetime", first_one_stale)
    monkeypatch.setattr(objects.clock, "sleep", lambda _s: None)
    source = tmp_path / "a.txt"
    source.write_text("hello")
    objects.put("a.txt", source, 5)
    assert objects.list() == {"a.txt": 5} and len(calls) >= 2, "signed again after the refusal"
