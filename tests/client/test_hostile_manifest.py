"""A gone pod's last push is copied by the manifest the pod left at the destination: the pod's word. A hostile
pod's manifest must not make `gpuc results` or `gpuc cp` read anything but the run's own keys: not another
run's file, not a laptop file by absolute path, not through a link in a file:// destination. Each such key is
refused by name, and nothing of what it points at reaches the copy (file:// with real local pods; s3:// on moto).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_podlife import World, world

from gpuc.client.jobs.cp import cp
from gpuc.client.jobs.places import Destination, copy_pushed, last_push, result_places
from gpuc.client.jobs.results import results
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.errors import GpucError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.instance_side.pushmanifest import MANIFEST_NAME
from gpuc.testkit.local_faults import vanish

__all__ = ["world"]
SECRET = b"-----the laptop's own secret-----\n"
OTHER = b"another run's result\n"


def manifest(files: dict[str, int], keys: dict[str, str] | None = None) -> str:
    return json.dumps(
        {
            "version": 1,
            "destination": "x",
            "at": 1.8e9,
            "files": {n: [size, 0] for n, size in files.items()},
            "keys": keys or {},
            "waiting": [],
        }
    )


def gone_run(world: World, tmp_path: Path) -> tuple[str, Path]:
    """A pod that pushed one honest file, then vanished; its run's folder at the file:// destination."""
    deps, provider, _ = world
    pod = up(UpOptions(experiment="hostile"), deps)
    assert pod is not None
    run = deps.runs.find(pod.id)
    dest = deps.settings.home / "results" / "hostile" / run.run_id
    (dest / "logs").mkdir(parents=True)
    (dest / "fine.txt").write_bytes(b"ok")
    vanish(provider, pod.id)
    return pod.id, dest


def laptop_secret(tmp_path: Path) -> Path:
    folder = tmp_path / "laptop" / ".ssh"
    folder.mkdir(parents=True)
    (folder / "id_rsa").write_bytes(SECRET)
    return folder / "id_rsa"


def another_run(dest: Path) -> Path:
    other = dest.parent / "run-of-another"
    other.mkdir()
    (other / "result.txt").write_bytes(OTHER)
    return other / "result.txt"


def nothing_leaked(root: Path) -> bool:
    return not root.exists() or not any(
        SECRET in p.read_bytes() or OTHER in p.read_bytes() for p in root.rglob("*") if p.is_file()
    )


def files_not_through_links(root: Path) -> list[bytes]:
    """Every regular file under root, read without following a link (the destination holds the hostile ones)."""
    found = []
    for folder, _dirs, names in os.walk(root):
        found += [(Path(folder) / n).read_bytes() for n in names if not (Path(folder) / n).is_symlink()]
    return found


def hostile_cases(dest: Path, tmp_path: Path) -> dict[str, tuple[str, str]]:
    """case -> (the manifest, the name or key the refusal must name)."""
    secret = laptop_secret(tmp_path)
    another_run(dest)
    (dest / "evil").symlink_to(secret.parent, target_is_directory=True)
    (dest / "link.txt").symlink_to(secret)
    size = len(SECRET)
    return {
        "another run's key": (
            manifest({"stolen.txt": len(OTHER)}, {"stolen.txt": "../run-of-another/result.txt"}),
            "../run-of-another/result.txt",
        ),
        "a name with ..": (manifest({"../run-of-another/result.txt": len(OTHER)}), "../run-of-another/result.txt"),
        "an absolute key": (manifest({"stolen.txt": size}, {"stolen.txt": str(secret)}), str(secret)),
        "an absolute name": (manifest({str(secret): size}), str(secret)),
        "a link to a laptop folder": (manifest({"evil/id_rsa": size}), "evil/id_rsa"),
        "a link to a laptop file": (manifest({"link.txt": size}), "link.txt"),
        "a key with a NUL": (manifest({"stolen.txt": size}, {"stolen.txt": "a\x00b"}), "stolen.txt"),
    }


CASES = [
    "another run's key",
    "a name with ..",
    "an absolute key",
    "an absolute name",
    "a link to a laptop folder",
    "a link to a laptop file",
    "a key with a NUL",
]


def hostile_run(world: World, tmp_path: Path, case: str) -> tuple[str, str]:
    """A gone pod whose destination holds the case's manifest (and links, another run, a laptop secret):
    (its pod id, the name or key a refusal must name)."""
    pod_id, dest = gone_run(world, tmp_path)
    text, named = hostile_cases(dest, tmp_path)[case]
    (dest / MANIFEST_NAME).write_text(text)
    return pod_id, named


@pytest.mark.parametrize("case", CASES)
def test_results_of_a_gone_pod_reads_only_the_runs_own_keys(world: World, tmp_path: Path, case: str) -> None:
    pod_id, named = hostile_run(world, tmp_path, case)
    into = tmp_path / "copy"
    with pytest.raises(GpucError) as refused:
        results(pod_id, world[0], to=into)
    said = refused.value.message
    assert repr(named)[1:-1] in said or named in said, said
    assert "outside" in said or "link" in said, said
    assert nothing_leaked(into)
    assert not any(SECRET in data for data in files_not_through_links(tmp_path) if data != SECRET), "no copy"
    assert [data for data in files_not_through_links(tmp_path) if data == SECRET] == [SECRET], "only the laptop's"


@pytest.mark.parametrize("case", ["another run's key", "an absolute key", "a link to a laptop folder"])
def test_cp_from_a_gone_pod_reads_only_the_runs_own_keys(world: World, tmp_path: Path, case: str) -> None:
    pod_id, named = hostile_run(world, tmp_path, case)
    into = tmp_path / "here"
    into.mkdir()
    wanted = "results/evil/id_rsa" if "link" in case else "results/stolen.txt"
    with pytest.raises(GpucError) as refused:
        cp(f"{pod_id}:{wanted}", str(into), world[0])
    assert named in refused.value.message, refused.value.message
    assert nothing_leaked(into) and list(into.iterdir()) == []


def test_an_honest_manifest_still_copies(world: World, tmp_path: Path) -> None:
    deps, _, _ = world
    pod_id, dest = gone_run(world, tmp_path)
    (dest / MANIFEST_NAME).write_text(manifest({"fine.txt": 2}))
    here = results(pod_id, deps, to=tmp_path / "copy")
    assert here is not None and (here / "results" / "fine.txt").read_bytes() == b"ok"


# -- s3:// -------------------------------------------------------------------------------------------------
KEY, SECRET_KEY = "AKIAEXAMPLEKEY000003", "s3cr3t-laptop-value-3"


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"stolen.txt": "../run02/result.txt"}, "../run02/result.txt"),
        ({"stolen.txt": "/runs/exp/run02/result.txt"}, "/runs/exp/run02/result.txt"),
        ({"stolen.txt": "./../run02/result.txt"}, "./../run02/result.txt"),
        ({"stolen.txt": "a//b"}, "a//b"),
    ],
)
def test_s3_reads_only_keys_under_the_runs_prefix(s3: Any, tmp_path: Path, keys: dict[str, str], named: str) -> None:
    s3.put_object(Bucket="results", Key="runs/exp/run02/result.txt", Body=OTHER)
    s3.put_object(Bucket="results", Key="runs/exp/run01/fine.txt", Body=b"ok")
    s3.put_object(
        Bucket="results", Key=f"runs/exp/run01/{MANIFEST_NAME}", Body=manifest({"stolen.txt": len(OTHER)}, keys)
    )
    laptop = Settings(
        home=tmp_path / "home",
        results_bucket="s3://results/runs",
        s3_access_key_id=SecretStr(KEY),
        s3_secret_access_key=SecretStr(SECRET_KEY),
    )
    where = Destination(result_places(laptop, "runpod", "exp", "run01"))
    push = last_push(where)
    assert push is not None
    into = tmp_path / "copy"
    with pytest.raises(GpucError) as refused:
        copy_pushed(where, push, sorted(push.files), into)
    assert named in refused.value.message and "outside" in refused.value.message
    assert nothing_leaked(into)
    for bad in (named, "../run02/result.txt"):  # the place itself refuses too, before any request
        with pytest.raises(GpucError, match="outside"):
            where.read(bad)
