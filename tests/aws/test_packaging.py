"""Packaging follows the tree. setuptools and the Lambda zip both take explicit package lists: a new
subpackage missing from one is silently missing from the wheel (`pip install gpuc` breaks) or from the
zip (the watchdog on AWS fails at import, and reaps nothing). Both lists are checked against the code:
the wheel holds every package of the product, the zip exactly what the functions import, and a built zip
imports its handlers in a clean interpreter that has only what Lambda provides."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from functools import cache
from io import BytesIO
from pathlib import Path

import pytest

from gpuc.functions import bundle

ROOT = Path(__file__).resolve().parents[2]  # the clone: the package `gpuc` itself
PRODUCT = ("core", "client", "functions", "instance_side")  # the product's layers
# Shipped beside the product so an installed gpuc runs `gpuc demo` and the rehearsal;
# no layer of the product imports it at import time.
KIT = ("testkit",)
REHEARSALS = ("gpuc.testkit.demo", "gpuc.testkit.rehearse")
LAMBDA_ENTRY = "gpuc.functions.aws"
# What the python runtime on Lambda has besides the stdlib (bundle.PROVIDED_BY_LAMBDA), by import name.
LAMBDA_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "dateutil", "six")


def tree_packages() -> set[str]:
    """Every folder of the product with an __init__.py, as the package name it installs as."""
    found = {"gpuc"}
    for top in (*PRODUCT, *KIT):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add(".".join(("gpuc", *init.parent.relative_to(ROOT).parts)))
    return found


def wheel_packages() -> set[str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return set(tomllib.load(f)["tool"]["setuptools"]["packages"])


@cache
def module_file(name: str) -> Path | None:
    """The file of a gpuc module, or None when the name is not a module (an attribute of one)."""
    path = ROOT.joinpath(*name.split(".")[1:])
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@cache
def parsed(path: Path) -> ast.Module:
    """Each file parsed once for the module's tests (several walk the same product); never modified."""
    return ast.parse(path.read_text(encoding="utf-8"))


def statements(tree: ast.AST, *, type_checking: bool) -> Iterator[ast.stmt]:
    """Every statement of a module, nested ones included (an import is a statement, never inside an
    expression: the walk steps only through what holds statements). `type_checking=False`: not the body of
    an `if TYPE_CHECKING:`."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.stmt):
            yield node
        for field, value in ast.iter_fields(node):
            if field == "body" and not type_checking and isinstance(node, ast.If) and is_type_checking(node):
                continue
            if isinstance(value, list):
                todo += [v for v in value if isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case))]


def is_type_checking(block: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(block.test)


@cache
def imported_names(path: Path) -> frozenset[str]:
    """The gpuc names a module imports at run time: at the top and inside functions (a lazy import runs
    on Lambda too), not under TYPE_CHECKING."""
    names: set[str] = set()
    for node in statements(parsed(path), type_checking=False):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return frozenset(name for name in names if name == "gpuc" or name.startswith("gpuc."))


def transitive_modules(entry: str) -> set[str]:
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        for imported in imported_names(path):
            parts = imported.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]  # a module's parents run first
    return seen


def package_of(name: str) -> str:
    path = module_file(name)
    return name if path is not None and path.name == "__init__.py" else name.rsplit(".", 1)[0]


def test_the_wheel_lists_every_package_of_the_tree() -> None:
    """A folder added under core/, client/, functions/ or instance_side/ must be listed in pyproject.toml's
    [tool.setuptools] packages, or the wheel ships without it."""
    tree, listed = tree_packages(), wheel_packages()
    assert not tree - listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(tree - listed)}"
    assert not listed - tree, f"listed in pyproject.toml but not in the tree: {sorted(listed - tree)}"


def test_an_installed_gpuc_has_what_the_demo_and_the_rehearsal_import() -> None:
    """`pipx install gpuc` then `gpuc demo --provider runpod --serve`: every gpuc module they reach is in
    the wheel, and every other import is a core dependency or the `rehearse` extra's."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    # cryptography comes with asyncssh; the demo imports it only to quiet asyncssh's warnings, guarded
    core = {req.split(">")[0].split("[")[0].split("=")[0].strip() for req in project["dependencies"]}
    allowed = {"asyncssh", "cryptography", *core}
    # ministack: the rehearsal's S3 API on loopback, run as a process of its own (testkit/s3server.py), never imported
    assert project["optional-dependencies"]["rehearse"] == ["asyncssh>=2.14", "ministack>=1.5.33"]
    reached = set().union(*(transitive_modules(entry) for entry in REHEARSALS))
    assert "gpuc.testkit.platform" in reached and "gpuc.testkit.sshd" in reached
    missing = {package_of(name) for name in reached} - wheel_packages()
    assert not missing, f"the wheel lacks what the demo needs: {sorted(missing)}"
    others = set()
    for name in reached:
        path = module_file(name)
        assert path is not None
        for node in statements(parsed(path), type_checking=True):
            if isinstance(node, ast.Import):
                others |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                others.add(node.module.split(".")[0])
    # By import name: nvidia-ml-py, python-dotenv, boto3's botocore, httpx's httpcore; apprise is its own
    # extra, imported only for an apprise:// channel, with a hint when missing.
    imported_as = {"gpuc", "pynvml", "botocore", "dotenv", "httpcore", "apprise"}
    third = others - set(sys.stdlib_module_names) - imported_as
    assert third <= allowed, f"the demo imports what no install gives it: {sorted(third - allowed)}"


def test_no_layer_of_the_product_imports_the_test_kit_at_import_time() -> None:
    for top in PRODUCT:
        for path in (ROOT / top).rglob("*.py"):
            for node in parsed(path).body:  # module level only: a command's lazy import runs only when asked for
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                assert not any(n.startswith("gpuc.testkit") for n in names), f"{path} imports the test kit"


def test_the_zip_lists_exactly_the_packages_the_functions_import() -> None:
    needed = {package_of(name) for name in transitive_modules(LAMBDA_ENTRY)}
    listed = set(bundle.GPUC_PACKAGES)
    assert not needed - listed, f"add to functions/bundle.py GPUC_PACKAGES: {sorted(needed - listed)}"
    unused = sorted(listed - needed)
    assert not unused, f"the functions never import these: drop them from GPUC_PACKAGES: {unused}"
    assert "gpuc.client" not in listed and "gpuc.testkit" not in listed


def test_the_import_walk_sees_lazy_imports_and_skips_type_checking_ones(tmp_path: Path) -> None:
    """The check above is only as good as its walk: a function-level import counts (it runs on Lambda),
    a TYPE_CHECKING one does not (it never runs)."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gpuc.client.cli import cli\n"
        "def f():\n    from gpuc.core.providers.vast import VastProvider\n"
    )
    assert imported_names(module) == {"gpuc.core.providers.vast", "gpuc.core.providers.vast.VastProvider"}


@pytest.fixture(scope="module")
def code_zip() -> bytes:
    return bundle.build_zip()  # the real build, vendored dependencies and all: built once for this module


def test_the_code_zip_holds_the_handlers_and_their_dependencies(code_zip: bytes) -> None:
    names = set(zipfile.ZipFile(BytesIO(code_zip)).namelist())
    assert {"gpuc/functions/aws.py", "gpuc/functions/dynamo.py", "gpuc/core/api.py"} <= names
    assert {"gpuc/functions/reaper/__init__.py", "gpuc/functions/reaper/sweep.py"} <= names
    assert "pydantic/__init__.py" in names and "httpx/__init__.py" in names
    assert any(n.startswith("pydantic_core/_pydantic_core") for n in names)
    assert not any(n.startswith("boto3/") or "__pycache__" in n for n in names)
    assert not any(n.startswith(("gpuc/client/", "gpuc/testkit/", "gpuc/instance_side/", "click/")) for n in names)


def lambda_runtime(where: Path) -> Path:
    """A folder with what Lambda's python provides besides the stdlib (boto3 and its requirements),
    linked from this environment: nothing else of it, so not click, not this clone."""
    where.mkdir()
    for name in LAMBDA_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (where / source.name).symlink_to(source)
    return where


IMPORT_HANDLERS = """
import sys
sys.path[:0] = sys.argv[1:3]
from gpuc.functions.aws import ingest_handler, reaper_handler
assert callable(ingest_handler) and callable(reaper_handler)
loaded = sorted(m for m in sys.modules if m == "gpuc" or m.startswith("gpuc."))
assert all(m.startswith(("gpuc.core", "gpuc.functions")) or m == "gpuc" for m in loaded), loaded
assert all(not m.startswith(("click", "gpuc.client")) for m in sys.modules)
print(len(loaded), "gpuc modules")
"""


def test_a_built_zip_imports_its_handlers_in_a_clean_interpreter(code_zip: bytes, tmp_path: Path) -> None:
    """-I -S: no site-packages, no PYTHONPATH, no editable install of this clone; only the zip and what
    Lambda provides. A package missing from GPUC_PACKAGES, or a dependency missing from the vendored ones,
    fails here as it would on AWS."""
    unpacked = tmp_path / "zip"
    zipfile.ZipFile(BytesIO(code_zip)).extractall(unpacked)
    runtime = lambda_runtime(tmp_path / "runtime")
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", IMPORT_HANDLERS, str(unpacked), str(runtime)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "gpuc modules" in done.stdout
