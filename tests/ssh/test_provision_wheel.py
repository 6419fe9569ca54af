"""The code `up` uploads: a wheel built from the installed package (editable here), reproducible, and
complete for everything the pod runs."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

from gpuc.client.onpod.provision import POD_PACKAGES, build_wheel, package_files

# Run with the editable install's finder removed: only what the wheel holds can be imported.
ISOLATED = """
import sys
sys.meta_path = [f for f in sys.meta_path if "__editable__" not in repr(f)]
sys.path.insert(0, sys.argv[1])
import gpuc, gpuc.instance_side.__main__, gpuc.instance_side.bootstrap, gpuc.instance_side.verify
import gpuc.instance_side.context, gpuc.core.providers.runpod, gpuc.core.providers.vast
import gpuc.core.providers.local, gpuc.core.podconfig, gpuc.core.catalog
try:
    import gpuc.client
    print("client shipped")
except ImportError:
    pass
print(gpuc.__file__)
"""


def test_the_wheel_is_reproducible_and_holds_only_the_pods_packages() -> None:
    first, second = build_wheel(), build_wheel()
    assert first.data == second.data and first.filename == "gpuc-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(io.BytesIO(first.data)).namelist()
    packages = {n.rsplit("/", 1)[0] for n in names if not n.startswith("gpuc-")}
    assert packages == {p.replace(".", "/") for p in POD_PACKAGES}
    assert "gpuc/instance_side/agent.py" in names and not any("test" in n for n in names)
    assert {arc for arc, _ in package_files()} <= set(names)


def test_the_wheel_declares_the_runtime_dependencies_and_a_valid_record() -> None:
    wheel = zipfile.ZipFile(io.BytesIO(build_wheel().data))
    metadata = wheel.read("gpuc-0.1.0.dist-info/METADATA").decode()
    requires = [line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert any(r.startswith("pydantic") for r in requires) and any(r.startswith("boto3") for r in requires)
    assert not any("extra" in r or r.startswith("pytest") for r in requires)
    record = wheel.read("gpuc-0.1.0.dist-info/RECORD").decode().splitlines()
    assert len(record) == len(wheel.namelist())


def test_the_wheel_installs_offline_and_runs_without_the_checkout(tmp_path: Path) -> None:
    wheel = build_wheel()
    path = tmp_path / wheel.filename
    path.write_bytes(wheel.data)
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(site),
            str(path),
        ],
        check=True,
    )
    done = subprocess.run([sys.executable, "-c", ISOLATED, str(site)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(site / "gpuc" / "__init__.py")
