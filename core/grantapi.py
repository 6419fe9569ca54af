"""The pod's grants, on the wire: the pod holds no S3 key, so it asks the watchdog (POST /v1/grant, /v1/grant/list,
/v1/grant/upload; routes in core/api.py) for short-lived URLs naming objects of its own run's prefix
(functions/grants.py answers, instance_side/grants.py asks). One declaration per document, as in core/api.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from gpuc.core.destinations import OBJECT_NAME_MAX, grant_name_problem
from gpuc.core.models import Strict

# -- a pod's own run prefix at an s3:// destination (functions/grants.py, instance_side/grants.py) --------
# The pod holds no S3 key: the watchdog, which does, signs short-lived URLs for the pod's own objects, by name
# relative to its run's prefix (RegisterRequest.results_at). Never a DELETE, never a name outside the prefix.
GRANT_BATCH = 50  # names (or parts) in one request: its answer of presigned URLs stays well under a megabyte
GRANT_NAME_MAX = OBJECT_NAME_MAX
PARTS_MAX = 10_000  # S3's part numbers


def _names_ok(names: list[str]) -> list[str]:
    for name in names:
        if grant_name_problem(name) is not None:
            raise ValueError("not a name inside the run's prefix")  # never echoed: stable wording at the edge
    return names


class GrantRequest(Strict):
    """Presigned URLs to PUT or GET these objects of the pod's run (a name: `ckpt/step7.pt`)."""

    pod_id: str = Field(min_length=1, max_length=128)
    op: Literal["put", "get"]
    names: list[str] = Field(min_length=1, max_length=GRANT_BATCH)

    @field_validator("names")
    @classmethod
    def _names_ok(cls, names: list[str]) -> list[str]:
        return _names_ok(names)


class GrantedUrl(Strict):
    name: str
    url: str


class GrantAnswer(Strict):
    urls: list[GrantedUrl]
    expires_in_s: float  # each URL's life from now (S3 checks it as a request starts)


class ListRequest(Strict):
    """One page of the run's own objects (names and sizes), listed by the watchdog with its key."""

    pod_id: str = Field(min_length=1, max_length=128)
    after: str | None = Field(None, min_length=1, max_length=GRANT_NAME_MAX)  # the last name of the page before


class ListedObject(Strict):
    name: str
    size: int


class ListAnswer(Strict):
    objects: list[ListedObject]
    more: bool = False  # another page follows, after the last name of this one


class UploadRequest(Strict):
    """A file too large for one PUT, in parts: `start` (the watchdog creates the upload), `parts` (URLs for
    these part numbers), `complete` (the watchdog checks `count` parts holding `size` bytes are there, then
    completes), `abort`."""

    pod_id: str = Field(min_length=1, max_length=128)
    op: Literal["start", "parts", "complete", "abort"]
    name: str = Field(min_length=1, max_length=GRANT_NAME_MAX)
    upload_id: str | None = Field(None, min_length=1, max_length=1024)
    parts: list[Annotated[int, Field(ge=1, le=PARTS_MAX)]] = Field(default_factory=list, max_length=GRANT_BATCH)
    count: int | None = Field(None, ge=1, le=PARTS_MAX)
    size: int | None = Field(None, ge=0, le=5 * 1024**4)  # S3's largest object: 5 TiB

    @field_validator("name")
    @classmethod
    def _name_ok(cls, name: str) -> str:
        return _names_ok([name])[0]


class PartUrl(Strict):
    part: int
    url: str


class UploadAnswer(Strict):
    upload_id: str | None = None
    urls: list[PartUrl] = Field(default_factory=list)
    expires_in_s: float | None = None


class GrantScope(Strict):
    """What a watchdog grants pods: the s3:// destination it holds a key for, and the endpoint it signs for."""

    bucket: str  # s3://bucket or s3://bucket/prefix
    endpoint_url: str | None = None
