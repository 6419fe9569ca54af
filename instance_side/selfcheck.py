"""`python -m gpuc.instance_side selfcheck`: can this pod run gpuc's pod side? Says the python (version and
path), imports every module the bundle holds (the agent, the wrapper, the push and sync, the boot, the
self-destroy: what they import lazily too), reads the wire's schema, and says whether NVML is there (the agent
runs without it: a pod with no driver reports no GPU). One JSON line with `--json`. Exit 0 when all of it
imports; 1, naming what did not, when not. It reads no config and no secret: it runs before either exists.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import gpuc

MANIFEST = Path(gpuc.__file__).parent / "instance_side" / "bundle.json"
# Without a bundle's manifest (a clone, the laptop): the pod's package, and the modules it loads lazily.
_LAZY = ("gpuc.core.providers.podkey", "gpuc.core.untar", "gpuc.core.catalog", "gpuc.core.destinations")


def modules() -> tuple[list[str], str]:
    """(the modules to import, where the list comes from)."""
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
        return list(manifest["modules"]), f"bundle of gpuc {manifest.get('gpuc')}"
    except (OSError, ValueError, KeyError, TypeError):
        import pkgutil

        import gpuc.instance_side as pod

        names = [f"gpuc.instance_side.{m.name}" for m in pkgutil.iter_modules(pod.__path__)]
        return [*names, *_LAZY], "no bundle manifest: the pod package as installed"


def nvml() -> str:
    try:
        import pynvml
    except ImportError:
        return "absent (no GPU readings: the idle watch counts the pod as busy, never idle, on a GPU it cannot read)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded: a machine without an NVIDIA driver
        return f"pynvml present, no driver here ({type(exc).__name__})"
    try:
        return f"pynvml present, {int(pynvml.nvmlDeviceGetCount())} GPU(s)"
    finally:
        pynvml.nvmlShutdown()


def check() -> dict[str, Any]:
    names, source = modules()
    failed: dict[str, str] = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure to import is what this reports
            failed[name] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        from gpuc.core import wire

        documents = sorted(wire.schemas())
    except Exception as exc:
        failed["gpuc.core.wire (schema)"] = f"{type(exc).__name__}: {exc}"[:300]
        documents = []
    return {
        "ok": not failed,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "modules": len(names),
        "source": source,
        "failed": failed,
        "wire": documents,
        "nvml": nvml(),
    }


def main(as_json: bool) -> int:
    report = check()
    if as_json:
        print(json.dumps(report, sort_keys=True))
    else:
        print(f"gpuc selfcheck: python {report['python']} at {report['executable']}")
        print(f"  modules: {report['modules'] - len(report['failed'])}/{report['modules']} import ({report['source']})")
        for name, why in report["failed"].items():
            print(f"  FAILED {name}: {why}")
        print(f"  wire schema: {', '.join(report['wire']) or 'MISSING'}")
        print(f"  nvml: {report['nvml']}")
        print("  ok" if report["ok"] else "  NOT OK: this pod cannot run gpuc's pod side")
    return 0 if report["ok"] else 1
