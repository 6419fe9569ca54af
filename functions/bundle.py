"""The functions' code zip: gpuc's own packages the functions import and, vendored from this machine's
site-packages, their runtime dependencies (boto3 is in the Lambda runtime). pydantic-core is a compiled wheel,
so the zip runs on Lambda only when built on Linux with the same Python and CPU architecture (deploy.py sets
the stack's runtime and architecture from this interpreter)."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import io
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

# Top-level requirements of the functions at runtime; their own requirements are followed.
ROOT_DISTRIBUTIONS = ("pydantic", "httpx", "python-dotenv")
PROVIDED_BY_LAMBDA = frozenset({"boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil", "six"})
# What the functions import, package by package, and nothing else (no gpuc.client): every .py of each is
# zipped. tests/aws/test_packaging.py checks this list against the imports of functions/aws.py.
GPUC_PACKAGES = (
    "gpuc",
    "gpuc.core",
    "gpuc.core.ledger",
    "gpuc.core.notify",
    "gpuc.core.providers",
    "gpuc.functions",
    "gpuc.functions.reaper",
    "gpuc.functions.actions",
    "gpuc.functions.recovery",
)
_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _requirement_names(dist: md.Distribution) -> Iterable[str]:
    for req in dist.requires or []:
        if "extra ==" in req or "extra==" in req:
            continue  # optional extras are not needed at runtime
        match = _REQ_NAME.match(req)
        if match:
            yield match.group(1)


def runtime_distributions() -> list[md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    todo = list(ROOT_DISTRIBUTIONS)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen or name in PROVIDED_BY_LAMBDA:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional requirement on another platform or python
        seen[name] = dist
        todo.extend(_requirement_names(dist))
    return list(seen.values())


def _vendored_files(dist: md.Distribution) -> Iterable[tuple[Path, str]]:
    for rel in dist.files or []:
        text = str(rel)
        if text.startswith("..") or "__pycache__" in text or text.endswith(".pyc"):
            continue
        yield Path(str(dist.locate_file(rel))), text


def _gpuc_files() -> Iterable[tuple[Path, str]]:
    for name in GPUC_PACKAGES:
        module = importlib.import_module(name)
        folder = Path(next(iter(module.__path__)))
        arcdir = name.replace(".", "/")
        for path in sorted(folder.glob("*.py")):
            yield path, f"{arcdir}/{path.name}"


def build_zip() -> bytes:
    """Deterministic (fixed timestamps, sorted), so an unchanged build keeps its S3 key."""
    files = dict(_gpuc_files())
    for dist in runtime_distributions():
        files.update(_vendored_files(dist))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arcname in sorted(files.items(), key=lambda kv: kv[1]):
            if not path.is_file():
                continue
            info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    return out.getvalue()
