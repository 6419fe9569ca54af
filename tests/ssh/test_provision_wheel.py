"""The code `up` uploads: gpuc's pod bundle, built from the installed package (editable here), reproducible,
holding exactly what a pod runs and nothing from a package index."""

from __future__ import annotations

import io
import json
import zipfile

from gpuc.client.onpod.bundle import LAPTOP_ONLY, MANIFEST, WIRE_SCHEMA, arcname, build_bundle, pod_imports


def test_the_bundle_is_reproducible_and_holds_only_what_a_pod_runs() -> None:
    first, second = build_bundle(), build_bundle()
    assert first.data == second.data and first.filename == "gpuc-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    modules, _ = pod_imports()
    code = {n for n in names if n.endswith(".py")}
    expected = {arcname(m, f) for m, f in modules.items()}
    assert code == expected | {"pynvml.py"}
    assert "gpuc/instance_side/agent.py" in names and "gpuc/core/providers/podkey.py" in names
    for laptop in ("gpuc/client/", "gpuc/functions/", "gpuc/testkit/", "gpuc/core/api.py", "gpuc/core/settings.py"):
        assert not any(n.startswith(laptop) for n in names), laptop
    assert not any(m.replace(".", "/") + ".py" in names for m in LAPTOP_ONLY)


def test_it_declares_no_dependency_and_a_valid_record() -> None:
    bundle = zipfile.ZipFile(io.BytesIO(build_bundle().data))
    metadata = bundle.read("gpuc-0.1.0.dist-info/METADATA").decode()
    assert "Requires-Dist" not in metadata and "Requires-Python: >=3.9" in metadata
    record = bundle.read("gpuc-0.1.0.dist-info/RECORD").decode().splitlines()
    assert len(record) == len(bundle.namelist())
    manifest = json.loads(bundle.read(MANIFEST))
    assert manifest["python"] == ">=3.9" and "gpuc.instance_side.agent" in manifest["modules"]
    schemas = json.loads(bundle.read(WIRE_SCHEMA))
    assert {"PodConfig", "BootAnswer", "HeartbeatAnswer", "HeartbeatBody", "PodEvent", "BootRequest"} <= set(schemas)


def test_it_is_small() -> None:
    size = len(build_bundle().data)
    assert size < 1_000_000, size  # the old venv install took 57 MB from the package index
