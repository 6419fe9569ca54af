"""`gpuc cp` both ways, as a user runs it: the real command, a local pod, names from
`gpuc ls`. A copy from the pod lands whole or not at all and overwrites nothing here; a copy to the pod is
checked as an upload is, before the pod is touched; neither reaches outside the pod's workspace."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, open_world

from gpuc.client.jobs.cp import split_target, workspace_rel
from gpuc.core.errors import ConfigError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[World, Path]]:
    with open_world(tmp_path) as opened:
        assert opened.gpuc("up", "cpx", "-y").returncode == 0
        (pod,) = opened.provider().list_pods()
        yield opened, opened.provider().paths(pod.id).workspace


def test_a_folder_comes_from_the_pod_whole_and_named(world: tuple[World, Path], tmp_path: Path) -> None:
    w, workspace = world
    (workspace / "results" / "run1").mkdir(parents=True)
    (workspace / "results" / "run1" / "metrics.json").write_text('{"loss": 0.1}')
    (workspace / "results" / "run1" / "w.bin").write_bytes(os.urandom(300_000))
    os.symlink("/etc/passwd", workspace / "results" / "run1" / "outside")
    here = tmp_path / "here"
    here.mkdir()
    done = w.gpuc("cp", "cpx:results/run1", str(here))
    assert done.returncode == 0, done.stderr
    assert (here / "run1" / "metrics.json").read_text() == '{"loss": 0.1}'
    assert (here / "run1" / "w.bin").read_bytes() == (workspace / "results" / "run1" / "w.bin").read_bytes()
    assert (
        not (here / "run1" / "outside").exists()
        and "outside -> /etc/passwd" in (here / "run1.LINKS-NOT-COPIED.txt").read_text()
    )
    assert sorted(p.name for p in here.iterdir()) == ["run1", "run1.LINKS-NOT-COPIED.txt"], "no staging left"
    again = w.gpuc("cp", "cpx:results/run1", str(here))
    assert again.returncode != 0 and "already exists: nothing is copied over it" in again.stderr


def test_nothing_outside_the_workspace_is_reached(world: tuple[World, Path], tmp_path: Path) -> None:
    w, workspace = world
    os.symlink("..", workspace / "up")
    for path in ("../secrets.env", "/etc/passwd", ".gpuc/config.json", "up/secrets.env", "up"):
        refused = w.gpuc("cp", f"cpx:{path}", str(tmp_path))
        assert refused.returncode != 0 and "Traceback" not in refused.stderr, path
        assert "workspace" in refused.stderr, (path, refused.stderr)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".gpuc-cp")) == []


def test_a_folder_goes_to_the_pod_checked_as_an_upload(world: tuple[World, Path], tmp_path: Path) -> None:
    w, workspace = world
    data = w.project / "data"
    data.mkdir()
    (data / "train.csv").write_text("a,b\n1,2\n")
    (data / ".env").write_text("RUNPOD_API_KEY=x\n")
    done = w.gpuc("cp", "data", "cpx:inputs")
    assert done.returncode == 0, done.stderr
    assert (workspace / "inputs" / "data" / "train.csv").read_text() == "a,b\n1,2\n"
    assert not (workspace / "inputs" / "data" / ".env").exists(), ".env is never sent"


def test_a_credential_is_refused_before_the_pod_is_touched(world: tuple[World, Path]) -> None:
    w, workspace = world
    data = w.project / "keys"
    data.mkdir()
    block = "OPENSSH PRIVATE " + "KEY-----"  # in two parts: the repository's own upload scan stays clean
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"  # a key's shape, no key
    (data / "deploy").write_text(f"-----BEGIN {block}\n{body}\n-----END {block}\n")
    refused = w.gpuc("cp", "keys", "cpx:")
    assert refused.returncode != 0 and "deploy" in refused.stderr and "Traceback" not in refused.stderr
    assert not (workspace / "keys").exists()
    dotenv = w.gpuc("cp", str(w.project / "keys" / "deploy"), "cpx:")
    assert dotenv.returncode != 0
    (w.project / ".env").write_text("X=1\n")
    assert w.gpuc("cp", ".env", "cpx:").returncode != 0 and not (workspace / ".env").exists()


def test_one_side_must_be_a_pod() -> None:
    assert split_target("pod1:results") == ("pod1", "results")
    assert split_target("./a:b") == (None, "./a:b") and split_target("/tmp/a:b") == (None, "/tmp/a:b")
    for bad in ("../x", "/abs", ".gpuc/x"):
        with pytest.raises(ConfigError):
            workspace_rel(bad, folder=True)
    assert workspace_rel("", folder=True) == "."


def test_two_local_paths_are_refused_with_how(world: tuple[World, Path]) -> None:
    w, _ = world
    refused = w.gpuc("cp", "a", "b")
    assert refused.returncode == 2 and "one side of `gpuc cp` must be a pod" in refused.stderr


def test_the_links_file_never_replaces_a_file_here_or_in_the_copy(world: tuple[World, Path], tmp_path: Path) -> None:
    """The links file went over a file of the same name, beside the copy or in it."""
    w, workspace = world
    run = workspace / "results" / "run1"
    run.mkdir(parents=True)
    (run / "w.txt").write_text("w")
    os.symlink("w.txt", run / "latest")
    os.symlink("/etc/hostname", run / "outside")
    here = tmp_path / "here"
    here.mkdir()
    (here / "run1.LINKS-NOT-COPIED.txt").write_text("my own notes\n")
    done = w.gpuc("cp", "cpx:results/run1", str(here))
    assert done.returncode == 0, done.stderr
    assert (here / "run1.LINKS-NOT-COPIED.txt").read_text() == "my own notes\n"
    written = (here / "run1.LINKS-NOT-COPIED-2.txt").read_text()
    assert "latest -> w.txt" in written and "outside -> /etc/hostname" in written
    assert not (here / "run1" / "latest").exists(), "a link from the pod is written down, never made"
    # A folder of the pod named as the links file: copied whole, its links written down beside it
    odd = workspace / "LINKS-NOT-COPIED.txt"
    odd.mkdir()
    (odd / "a.txt").write_text("a")
    os.symlink("a.txt", odd / "b")
    done = w.gpuc("cp", "cpx:LINKS-NOT-COPIED.txt", str(here))
    assert done.returncode == 0, done.stderr
    assert (here / "LINKS-NOT-COPIED.txt" / "a.txt").read_text() == "a"
    assert "b -> a.txt" in (here / "LINKS-NOT-COPIED.txt.LINKS-NOT-COPIED.txt").read_text()
    assert sorted(p.name for p in here.iterdir() if p.name.startswith(".")) == [], "no staging left"
