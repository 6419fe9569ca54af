"""The S3 client of whoever holds the results key: the watchdog that grants pods their prefixes
(functions/bucket.py), `up`'s destination check (core/destcheck.py), the laptop's reads (`gpuc logs`,
`results`) and the recovery kit. Never a pod's: the pod holds no S3 key and never imports this module
(tests/instance_side/test_pod_imports.py), so boto3 is never a pod's need.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gpuc.core.destinations import S3_KEY_ENV, S3_SECRET_ENV


def s3_client(
    endpoint_url: str | None,
    credentials: Mapping[str, str],
    *,
    environ: Mapping[str, str] | None = None,
    attempts: int = 5,
    connect_timeout_s: float = 10.0,
    read_timeout_s: float = 120.0,
    presign_v4: bool = False,
) -> Any:
    """A client with `credentials` (`up`'s destination check passes a shorter retry budget: a user waits on it)."""
    # Lazy: boto3 (~100 ms, tens of MB) only where S3 is reached, never at a command's start.
    import boto3
    from botocore.config import Config

    env = os.environ if environ is None else environ
    key, secret = credentials.get(S3_KEY_ENV), credentials.get(S3_SECRET_ENV)
    region = env.get("AWS_DEFAULT_REGION") or ("auto" if endpoint_url else "us-east-1")
    # A presigned URL (a pod's grant, a recovering run's boot kit) signed SigV4: what R2 takes, and what allows the
    # 7 days S3 caps it at; boto3 otherwise presigns some S3 URLs with the old SigV2.
    signature = Config(signature_version="s3v4") if presign_v4 else Config()
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        # Absent keys fall back to boto3's own chain (AWS_* in the environment, an instance role).
        aws_access_key_id=key or None,
        aws_secret_access_key=secret or None,
        config=Config(
            retries={"max_attempts": attempts, "mode": "standard"},
            connect_timeout=connect_timeout_s,
            read_timeout=read_timeout_s,
        ).merge(signature),
    )


def regional_client(endpoint_url: str | None, credentials: Mapping[str, str], bucket: str, **options: Any) -> Any:
    """A client that signs for `bucket`'s own region: a presigned URL signed for another region is refused (AWS; a
    store that checks, as the rehearsal's does, answers a redirect), and the signer's region (a Lambda's, or
    "auto" for an endpoint) is not the bucket's. Asked once (HeadBucket answers it, even from the wrong region); a
    store that names none (R2) is signed for "auto". `options` are s3_client's; the process's
    AWS_DEFAULT_REGION is never read (on Lambda it is the function's region, not the bucket's)."""

    def build(region: str | None) -> Any:
        return s3_client(endpoint_url, credentials, environ={"AWS_DEFAULT_REGION": region} if region else {},
                         **options)  # fmt: skip

    client = build(None)
    region = bucket_region(client, bucket)
    return client if region is None or region == client.meta.region_name else build(region)


def bucket_region(client: Any, bucket: str) -> str | None:
    """The region the bucket says it is in (AWS, MinIO and most stores answer it on HeadBucket); None when it
    says none (R2 signs with "auto", the client's default for an endpoint)."""
    try:
        answer = client.head_bucket(Bucket=bucket)
    except Exception as exc:  # a 301 from the wrong region still names the right one
        answer = getattr(exc, "response", None) or {}
    headers = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}) if isinstance(answer, Mapping) else {}
    region = headers.get("x-amz-bucket-region")
    return str(region) if region else None
