"""The `s3://bucket/prefix` destination (S3, or R2 and friends through `s3_endpoint_url`): the run's objects go
through URLs the watchdog grants for the run's own prefix (instance_side/grants.py); the pod holds no key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from gpuc.core.destinations import (
    S3Location,
)
from gpuc.instance_side.manifest import Manifest, check_run_names, listing_matches, push_all
from gpuc.instance_side.storekeys import assign_keys, escape_name, is_utf8


class RunObjects(Protocol):
    """The run's own objects at an s3:// destination, by name relative to `<prefix>/<experiment>/<run_id>/`:
    the transport under S3Sync and the restore. The pod's is instance_side/grants.py (URLs the watchdog
    grants: it holds no key); what is sent, and in what order, is the sync's to decide."""

    def describe(self) -> str: ...

    def put(self, name: str, source: Path, size: int) -> None: ...

    def put_many(self, files: Sequence[tuple[str, Path, int]]) -> None: ...

    def get(self, name: str, target: Path, *, size: int | None = None, limit: int | None = None) -> bool: ...

    def list(self) -> dict[str, int]: ...


class S3Sync:
    """`s3://bucket/prefix` -> `s3://bucket/prefix/<experiment>/<run_id>/...`, through `objects`."""

    def __init__(
        self, url: str, experiment: str, run_id: str, *, objects: RunObjects, endpoint_url: str | None = None
    ) -> None:
        check_run_names(experiment, run_id)
        where = S3Location.parse(url)
        self.bucket = where.bucket
        self.base = where.run_base(experiment, run_id)
        self.endpoint_url = endpoint_url
        self.objects = objects

    def describe(self) -> str:
        via = f" via {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.base}/{via}"

    def push(self, results_dir: Path) -> Manifest:
        return push_all(self, results_dir)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        # An S3 key is UTF-8 and goes into a URL and an XML listing: another byte, or a control character,
        # is stored under its escaped key (core.destinations.grant_name_problem is the watchdog's rule).
        keys = assign_keys(files, _s3_storable, _s3_escape)
        # In the order given: push.py sends oldest first (a cut push leaves a prefix).
        self.objects.put_many([(keys.get(rel, rel), results_dir / rel, size) for rel, size in files.items()])
        return Manifest(self.describe(), dict(files), keys=keys)

    def verify(self, manifest: Manifest) -> bool:
        if not manifest.files:
            return True
        return listing_matches(manifest.stored(), self.listing())

    def listing(self) -> dict[str, int]:
        return self.objects.list()


def _s3_control(ch: str) -> bool:
    return ord(ch) < 32 or ord(ch) == 127


def _s3_storable(name: str) -> bool:
    return is_utf8(name) and not any(_s3_control(ch) for ch in name)


def _s3_escape(name: str) -> str:
    return escape_name(name, _s3_control)
