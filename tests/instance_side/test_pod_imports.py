"""What a pod imports: the standard library, gpuc's own bundled modules, pynvml; nothing else, at any depth
(lazy imports inside functions included). And the checks that keep the pod's code on python3 >= 3.9 cover
exactly the modules the bundle ships (ruff's per-file target here, mypy's in `make typecheck`)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from gpuc.client.onpod.bundle import BUNDLED_THIRD_PARTY, LAPTOP_ONLY, imports_of, module_file, pod_imports

ROOT = Path(__file__).resolve().parents[2]


def test_a_pod_imports_nothing_but_the_standard_library_and_what_the_bundle_brings() -> None:
    _, others = pod_imports()
    unexpected = {name: sorted(users) for name, users in others.items() if name not in BUNDLED_THIRD_PARTY}
    assert unexpected == {}, (
        f"a pod module imports a package the pod does not have (stdlib only, python3 >= 3.9): {unexpected}"
    )


def test_what_the_bundle_leaves_out_is_imported_only_where_it_is_named() -> None:
    modules, _ = pod_imports()
    users = {
        laptop: sorted(name for name, path in modules.items() if any(i.startswith(laptop) for i in imports_of(path)))
        for laptop in LAPTOP_ONLY
    }
    assert users == {
        "gpuc.core.providers.local": ["gpuc.instance_side.selfdestroy"],  # the local sandbox only
        "gpuc.core.wireschema": ["gpuc.core.wire"],  # where no bundle's schema is there
    }


def test_ruff_holds_exactly_the_bundles_modules_to_python_3_9() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = set(config["tool"]["ruff"]["per-file-target-version"])
    assert set(config["tool"]["ruff"]["per-file-target-version"].values()) == {"py39"}
    modules, _ = pod_imports()
    shipped = {str(path.relative_to(ROOT)) for path in modules.values()}
    expanded = {str(p.relative_to(ROOT)) for pattern in declared for p in ROOT.glob(pattern)}
    assert expanded == shipped, f"pyproject's [tool.ruff.per-file-target-version] should list: {sorted(shipped)}"
    assert module_file("gpuc.instance_side.agent") is not None
