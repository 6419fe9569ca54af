"""`gpuc run --env NAME`: a job on a kept pod gets a variable by name, as `up --env` gives
one. The value goes over stdin into a mode-600 file the job's wrapper reads and removes; it is never in
argv, in what gpuc prints, nor left on the pod for the next job. A value on the command line, a name found
nowhere and an account key are refused before the pod is touched."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, open_world

VALUE = "wandb-PLANTED-value-7c1f"
# The job itself looks: by the time it runs, its wrapper has read the file and removed it (the pod is
# destroyed when the job ends, so only the job can see what was left while it ran).
PRINT_IT = (
    "import os, hashlib; print('got', hashlib.sha256(os.environ['WANDB_API_KEY'].encode()).hexdigest()[:12]); "
    "d = '.gpuc/job-env'; print('left', os.listdir(d) if os.path.isdir(d) else [])"
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[World, Path]]:
    with open_world(tmp_path) as opened:
        assert opened.gpuc("up", "envx", "-y").returncode == 0
        (pod,) = opened.provider().list_pods()
        yield opened, opened.provider().paths(pod.id).root


def test_the_job_gets_the_variable_and_nothing_keeps_it(world: tuple[World, Path]) -> None:
    import hashlib

    w, _ = world
    done = w.gpuc(
        "run", "envx", "--env", "WANDB_API_KEY", "--wait", "--", "python", "-c", PRINT_IT, WANDB_API_KEY=VALUE
    )
    assert done.returncode == 0, done.stderr
    assert f"got {hashlib.sha256(VALUE.encode()).hexdigest()[:12]}" in done.stdout
    assert "variables to the job: WANDB_API_KEY" in done.stdout + done.stderr
    assert VALUE not in done.stdout + done.stderr
    assert "left []" in done.stdout, "read once, then removed: never there for the next job"


@pytest.mark.parametrize(
    ("flag", "env", "said"),
    [
        (f"WANDB_API_KEY={VALUE}", {}, "puts a value on the command line"),
        ("WANDB_API_KEY", {}, "is neither in your environment nor in .env"),
        ("RUNPOD_API_KEY", {"RUNPOD_API_KEY": "rpa_x"}, "never goes onto a pod"),
    ],
    ids=["value-in-argv", "found-nowhere", "account-key"],
)
def test_refused_before_the_pod_is_touched(
    world: tuple[World, Path], flag: str, env: dict[str, str], said: str
) -> None:
    w, root = world
    w.env.update(env)
    refused = w.gpuc("run", "envx", "--env", flag, "--", "python", "-c", "print(1)")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert said in refused.stderr, refused.stderr
    assert VALUE not in refused.stdout + refused.stderr
    assert not (root / "workspace" / ".gpuc" / "job-env").exists(), "nothing was put on the pod"
