"""Once a pod is gone (destroyed from outside), `gpuc results`, `gpuc cp POD:results/...` and
`gpuc logs` read what its last verified push left at the destination, and say so: the last push (when), not
the pod. The push is the pod's own code (instance_side/push.py), the pod a real local sandbox."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fakes.localworld import wait_for
from test_podlife import World, world

from gpuc.client.jobs.cp import cp
from gpuc.client.jobs.logs import show
from gpuc.client.jobs.results import results
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.clock import SystemClock
from gpuc.core.errors import NotFound
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.pushrun import push_once
from gpuc.instance_side.sync import make_sync, with_job_log
from gpuc.testkit.local_faults import vanish

__all__ = ["world"]


def test_results_cp_and_logs_of_a_gone_pod_come_from_its_last_push(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deps, provider, _ = world
    said: list[str] = []
    deps.echo = said.append
    pod = up(UpOptions(experiment="pushed"), deps)
    assert pod is not None
    paths = provider.paths(pod.id)
    (paths.results / "ckpt").mkdir(parents=True)
    old = time.time() - 600
    for name, data in {"ckpt/step1.pt": os.urandom(3000), "metrics.json": b'{"loss": 0.2}'}.items():
        (paths.results / name).write_bytes(data)
        os.utime(paths.results / name, (old, old))
    paths.job_log.write_text("epoch 1\nepoch 2\n")
    sync = with_job_log(make_sync(AgentConfig.load(paths.config), paths=paths), paths)
    report = push_once(sync, paths, SystemClock())  # the agent's periodic push, while the job runs
    assert report is not None and report.error is None and report.files == 2
    pushed = {n: (paths.results / n).read_bytes() for n in ("ckpt/step1.pt", "metrics.json")}
    (paths.results / "late.txt").write_text("written after the push")  # goes with the pod
    vanish(provider, pod.id)  # destroyed from outside: the watchdog, the provider

    here = results(pod.id, deps, to=tmp_path / "here")
    assert here is not None
    # The layout of a kept pod's copy (client/jobs/copyout.py): results/ and, beside it, the job's log.
    assert {n: (here / "results" / n).read_bytes() for n in pushed} == pushed
    assert (here / "logs" / "job.log").read_text() == "epoch 1\nepoch 2\n"
    assert not (here / "results" / "late.txt").exists() and not (here / "late.txt").exists()
    assert any("is gone: copied 2 files" in s and "from the last push (" in s and "not from the pod" in s for s in said)
    assert any("what its job wrote after that push is not in them" in s for s in said), "the job had not ended"

    said.clear()
    into = tmp_path / "one"
    into.mkdir()
    assert cp(f"{pod.id}:results/ckpt/step1.pt", str(into), deps) == str(into / "step1.pt")
    assert (into / "step1.pt").read_bytes() == pushed["ckpt/step1.pt"]
    assert cp(f"{pod.id}:results/ckpt", str(into), deps) == str(into / "ckpt")
    assert (into / "ckpt" / "step1.pt").read_bytes() == pushed["ckpt/step1.pt"]
    assert any("from the last push (" in s and "not from the pod" in s for s in said)
    with pytest.raises(NotFound, match="went with it"):
        cp(f"{pod.id}:data/x", str(into), deps)

    show(deps, pod.id, False)
    out = capsys.readouterr()
    assert "epoch 1\nepoch 2\n" in out.out
    assert "as of the last push (" in out.err and "not the pod's" in out.err


JOB = "import os; os.makedirs('results', exist_ok=True); open('results/out.txt', 'w').write('42'); print('trained')"


def test_results_of_a_pod_that_ended_cleanly_are_its_final_sync_with_the_log_in_the_kept_layout(
    world: World, tmp_path: Path
) -> None:
    deps, provider, _ = world
    said: list[str] = []
    deps.echo = said.append
    pod = up(UpOptions(experiment="clean", command=["python", "-c", JOB]), deps)
    assert pod is not None
    assert wait_for(lambda: provider.get(pod.id) is None), "the job's end synced, then destroyed the pod"
    here = results(pod.id, deps, to=tmp_path / "here")
    assert here is not None
    assert sorted(p.relative_to(here).as_posix() for p in here.rglob("*") if p.is_file()) == [
        "logs/job.log",
        "logs/outcome.json",
        "results/out.txt",
    ], "as `gpuc results` of a kept pod lays it out"
    assert (here / "results" / "out.txt").read_text() == "42" and "trained" in (here / "logs" / "job.log").read_text()
    words = " ".join(said)
    assert "final sync" in words and "after its job exited with code 0" in words, words
    assert "not in them" not in words and "not from the pod" not in words, words
