"""gpuc's pod bundle: exactly the modules a pod runs, built by the laptop from the gpuc it runs (a clone's
editable install or an installed wheel alike), never from git and never from a package index.

What goes in: every module of `gpuc.instance_side`, the `gpuc.core` modules they import (followed through every
import, lazy ones inside functions included, TYPE_CHECKING ones not), `pynvml.py` copied from the laptop's
installed nvidia-ml-py (the pod's NVML; the agent runs without it where a pod has no driver), the wire's JSON
Schema (core/wireschema.py: the watchdog's own pydantic models, for the pod's stdlib reader), and a manifest.
It is shaped as a pure wheel (`gpuc-<version>-py3-none-any.whl`, a RECORD of every file), so the boot kit can
name it as before and a pod unpacks it with its own python's zipfile (core/podinstall.py).

Reproducible byte for byte (fixed timestamps, sorted entries): the same code gives the same sha256, and
re-provisioning the same code skips the install.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from gpuc.core.errors import GpucError

DIST = "gpuc"
POD_ROOT = "gpuc.instance_side"  # every module of it runs on a pod
# Imported by pod code, but never run on a rented pod, so not in the bundle (the test of the pod's imports
# names them, and nothing else may be left out):
LAPTOP_ONLY = {
    # the local provider's sandbox pods run the laptop's own interpreter and gpuc (LocalAccess), never a bundle
    "gpuc.core.providers.local": "the local sandbox's pods run the laptop's interpreter",
    # the wire's schema, made from the pydantic models where the bundle carries none (a clone, the laptop)
    "gpuc.core.wireschema": "a bundle carries the schema it makes",
}
BUNDLED_THIRD_PARTY = ("pynvml",)  # copied as it is installed on the laptop (nvidia-ml-py: one module)
MANIFEST = "gpuc/instance_side/bundle.json"
WIRE_SCHEMA = "gpuc/core/wire.json"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same code gives the same bundle and hash


class BundleError(GpucError):
    """The pod's bundle cannot be built from this install of gpuc."""


@dataclass(frozen=True)
class Bundle:
    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def module_file(name: str) -> Path | None:
    """Where module `name` is, in this install (editable or not); None when it is not a module of this gpuc."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def package_modules(package: str) -> list[str]:
    """Every module of `package`, itself included (found through the import system: in an editable install the
    package's folder is the checkout's)."""
    init = module_file(package)
    if init is None:
        raise BundleError(f"{package} is not importable here", hint="reinstall gpuc: pip install -e .")
    return [package, *sorted(f"{package}.{p.stem}" for p in init.parent.glob("*.py") if p.stem != "__init__")]


def imports_of(path: Path) -> list[str]:
    """What a module imports, at any depth of its code, except under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)  # a submodule, if it is one
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def pod_imports() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """(gpuc's modules a pod runs -> their files, every other module they import -> which of them import it)."""
    todo = package_modules(POD_ROOT)
    mine: dict[str, Path] = {}
    others: dict[str, set[str]] = {}
    while todo:
        name = todo.pop()
        if name in mine or name in LAPTOP_ONLY:
            continue
        path = module_file(name)
        if path is None:
            continue  # `from gpuc.x import name`: a name, not a submodule
        mine[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # its packages' __init__
        for imported in imports_of(path):
            if imported.split(".")[0] == DIST:
                todo.append(imported)
            else:
                others.setdefault(imported.split(".")[0], set()).add(name)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    return mine, {k: v for k, v in others.items() if k not in stdlib}


def arcname(module: str, path: Path) -> str:
    return "/".join(module.split(".")) + ("/__init__.py" if path.name == "__init__.py" else ".py")


def third_party_files() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for name in BUNDLED_THIRD_PARTY:
        path = module_file(name)
        if path is None or path.name == "__init__.py":
            raise BundleError(f"{name} is not installed here as one module", hint="pip install nvidia-ml-py")
        out.append((f"{name}.py", path.read_bytes()))
    return out


def wire_schema() -> bytes:
    from gpuc.core.wireschema import schemas  # the pydantic models: the laptop has them

    return json.dumps(schemas(), sort_keys=True, separators=(",", ":")).encode()


def build_bundle() -> Bundle:
    version = importlib.metadata.version(DIST)
    modules, _ = pod_imports()
    entries = sorted((arcname(name, path), path.read_bytes()) for name, path in modules.items())
    entries += third_party_files()
    entries.append((WIRE_SCHEMA, wire_schema()))
    manifest = {
        "gpuc": version,
        "python": ">=3.9",
        "modules": sorted(modules),
        "pynvml": _version_of("nvidia-ml-py"),
    }
    entries.append((MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode()))
    dist_info = f"{DIST}-{version}.dist-info"
    metadata = (
        f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\nRequires-Python: >=3.9\n"
        "Summary: gpuc's pod side (agent, job wrapper, sync, push, bootstrap, verify, boot): standard library only\n"
    )
    wheel_meta = "Wheel-Version: 1.0\nGenerator: gpuc.client.onpod.bundle\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries += [(f"{dist_info}/METADATA", metadata.encode()), (f"{dist_info}/WHEEL", wheel_meta.encode())]
    record = "".join(f"{arc},sha256={_b64_digest(data)},{len(data)}\n" for arc, data in entries)
    entries.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arc, data in entries:
            info = zipfile.ZipInfo(arc, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return Bundle(f"{DIST}-{version}-py3-none-any.whl", buffer.getvalue())


def _version_of(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _b64_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


if __name__ == "__main__":  # `make typecheck`: the modules mypy checks as python 3.9 sees them
    if sys.argv[1:] == ["--mypy-modules"]:
        print(" ".join(f"-m {name}" for name in sorted(pod_imports()[0])))
