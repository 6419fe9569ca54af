"""The results bucket as the watchdog reaches it, with the key it holds (GPUC_S3_ACCESS_KEY_ID /
GPUC_S3_SECRET_ACCESS_KEY in its own settings: SSM on AWS, `.env` or the environment for `gpuc watchdog serve`).
The pods hold no key: what they may do, functions/grants.py decides; this module only does it.

Presigned URLs are SigV4 (what R2 takes), signed for the bucket's own region: a URL signed for another region
is refused, and the Lambda's region is not the bucket's, so it is asked once (HeadBucket answers it, even
from the wrong region); a store that names none (R2) is signed for "auto".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from gpuc.core.destinations import S3_KEY_ENV, S3_SECRET_ENV, S3Location
from gpuc.core.s3client import regional_client
from gpuc.core.settings import Settings

LIST_PAGE = 1000  # S3's own page


class BucketError(Exception):
    """The bucket could not be reached or refused the watchdog's key: what S3 said, never a key."""


class PartsMismatch(Exception):
    """A multipart upload holds other parts than the pod says it sent: it is not completed."""


@dataclass(frozen=True)
class Listed:
    keys: list[tuple[str, int]]  # full key -> size
    more: bool


class ResultsBucket:
    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def presign(self, method: Literal["PUT", "GET"], key: str, expires_s: int) -> str:
        operation = "put_object" if method == "PUT" else "get_object"
        return str(
            self.client.generate_presigned_url(
                operation, Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_s, HttpMethod=method
            )
        )

    def presign_part(self, key: str, upload_id: str, part: int, expires_s: int) -> str:
        params = {"Bucket": self.bucket, "Key": key, "UploadId": upload_id, "PartNumber": part}
        url = self.client.generate_presigned_url("upload_part", Params=params, ExpiresIn=expires_s, HttpMethod="PUT")
        return str(url)

    def listing(self, prefix: str, after: str | None, most: int = LIST_PAGE) -> Listed:
        args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": most}
        if after is not None:
            args["StartAfter"] = after
        with _said("listing"):
            page = self.client.list_objects_v2(**args)
        keys = [(str(item["Key"]), int(item["Size"])) for item in page.get("Contents", [])]
        return Listed(keys, bool(page.get("IsTruncated")) and bool(keys))

    def start_upload(self, key: str) -> str:
        with _said("starting an upload"):
            return str(self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"])

    def complete_upload(self, key: str, upload_id: str, count: int, size: int) -> None:
        """Completed only when parts 1..count are there and hold `size` bytes in all: what the watchdog signs
        is what the pod says it sent, never a part left over from a failed try read as the file."""
        parts = self._parts(key, upload_id)
        numbers = [number for number, _, _ in parts]
        if numbers != list(range(1, count + 1)) or sum(s for _, _, s in parts) != size:
            raise PartsMismatch(f"the upload holds {len(parts)} parts of {sum(s for _, _, s in parts)} bytes")
        done = {"Parts": [{"PartNumber": n, "ETag": etag} for n, etag, _ in parts]}
        with _said("completing an upload"):
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload=done)

    def abort_upload(self, key: str, upload_id: str) -> None:
        """An unfinished upload's parts only (never an object): what a failed push leaves would bill storage."""
        with _said("aborting an upload"):
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)

    def _parts(self, key: str, upload_id: str) -> list[tuple[int, str, int]]:
        found: list[tuple[int, str, int]] = []
        marker = 0
        while True:
            with _said("listing an upload's parts"):
                page = self.client.list_parts(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumberMarker=marker, MaxParts=1000
                )
            found += [(int(p["PartNumber"]), str(p["ETag"]), int(p["Size"])) for p in page.get("Parts", [])]
            if not page.get("IsTruncated") or not page.get("Parts"):
                return sorted(found)
            marker = int(page["NextPartNumberMarker"])


@contextmanager
def _said(what: str) -> Iterator[None]:
    """boto3's errors as BucketError: the operation and S3's error code, never the request or a key."""
    try:
        yield
    except BucketError:
        raise
    except Exception as exc:
        response = getattr(exc, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, Mapping) else None
        raise BucketError(f"{what} failed: {code or type(exc).__name__}") from None


_built: dict[tuple[str, str | None, str], ResultsBucket] = {}
_lock = threading.Lock()


def results_bucket(settings: Settings) -> ResultsBucket:
    """The bucket of `settings.results_bucket` with the watchdog's key, built once per process (a Lambda
    container keeps it between invocations). The caller checked the key is there (grants.scope_of)."""
    where = S3Location.parse(settings.results_bucket or "")
    key_id = settings.s3_access_key_id.get_secret_value() if settings.s3_access_key_id else ""
    cache_key = (where.bucket, settings.s3_endpoint_url, key_id)
    with _lock:
        if cache_key not in _built:
            _built[cache_key] = ResultsBucket(_client(settings, where.bucket), where.bucket)
        return _built[cache_key]


def _client(settings: Settings, bucket: str) -> Any:
    creds = {
        S3_KEY_ENV: settings.s3_access_key_id.get_secret_value() if settings.s3_access_key_id else "",
        S3_SECRET_ENV: settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else "",
    }
    return regional_client(settings.s3_endpoint_url, creds, bucket, attempts=3, read_timeout_s=20.0, presign_v4=True)
