"""After a re-rented pod booted, every later container start (a Vast pause resumed: processes killed, disk kept)
restarts the agent and the job with the same command and job id, never a second boot call, restore or
bootstrap. A job that had ended is not started again. A restore that fails starts no job (exit 75) while the
agent watches and the pod's event says why; a machine that fails verification ends itself."""

from __future__ import annotations

from pathlib import Path

from fakes.bootworld import boot_world, job

from gpuc.core.pod import RESUME_ENV
from gpuc.instance_side.joblog import read_outcome
from gpuc.instance_side.wrapper import agent_alive

NOTHING_TO_SET_UP = {"apt": [], "torch": False, "models": [], "python": "python3"}
# Counts its starts, moves the checkpoint on from where results/ is, then waits for the test's word.
STEPS = (
    "import os, time\n"
    "open('results/starts', 'a').write('x')\n"
    "step = int(open('results/ckpt.txt').read()) + 1\n"
    "open('results/ckpt.txt', 'w').write(str(step))\n"
    "t = time.time()\n"
    "while not os.path.exists('stop') and time.time() < t + 90: time.sleep(0.1)\n"
)


def test_a_restarted_container_runs_the_agent_and_the_same_job_on_from_its_own_disk(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        paths = world.paths
        src = world.push({"ckpt.txt": b"41"})
        world.kit(job(STEPS), src, bootstrap=NOTHING_TO_SET_UP)
        world.env[RESUME_ENV] = src  # as the watchdog sets it in the re-rented pod's env, kept across restarts
        world.onstart()
        assert world.wait(lambda: _read(paths.results / "ckpt.txt") == "42"), world.boot_out()
        first_agent = _read(paths.agent_lock)
        bootstrapped = _read(paths.bootstrap_csv)
        assert bootstrapped, "the kit's bootstrap plan ran at the first boot"

        # As if killed between the job's start and the boot's clean-up: boot.json is still there.
        (paths.state / "boot.json").write_bytes(world.functions.answer)
        world.kill_all()  # outbid: paused, every process killed, the disk kept
        assert world.marked() == [] and agent_alive(paths) is False
        world.onstart()  # the bid wins again: Vast resumes the instance and runs onstart again
        assert world.wait(lambda: _read(paths.results / "starts") == "xx"), world.boot_out()
        assert _read(paths.results / "ckpt.txt") == "43", "the job went on from its own disk, not the older push"
        assert not (paths.state / "boot.json").exists(), "a boot that started its job is not done again"
        assert world.wait(lambda: agent_alive(paths) is True, 30)
        assert _read(paths.agent_lock) != first_agent, "a new agent"
        assert len(world.functions.boots) == 1, "the ticket is asked for once"
        assert _read(paths.bootstrap_csv) == bootstrapped, "never a second bootstrap"
        assert (read_outcome(paths) or {}).get("job_id") == "job-0001"

        (paths.workspace / "stop").write_text("")
        assert world.wait(lambda: (read_outcome(paths) or {}).get("exit_code") == 0, 60)
        world.kill_all()
        world.onstart()  # another restart after the job had ended: only the agent
        assert world.wait(lambda: "the job is not started again: it had ended" in world.boot_out(), 60)
        assert world.wait(lambda: agent_alive(paths) is True, 30)
        assert _read(paths.results / "starts") == "xx"


def test_a_restore_that_fails_starts_no_job_and_says_why(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        paths = world.paths
        (tmp_path / "empty").mkdir()
        world.kit(job("open('results/done', 'w')"), f"file://{tmp_path / 'empty'}")
        world.onstart()
        assert world.wait(lambda: "the job is not started (exit 75)" in world.boot_out()), world.boot_out()
        assert world.wait(lambda: any("could not be restored" in e.message for e in world.functions.events), 30)
        assert agent_alive(paths) is True, "the agent keeps watching (its idle watch ends the pod)"
        assert not (paths.results / "done").exists() and not paths.job_command.exists()

        world.kill_all()
        world.onstart()  # a restart: nothing was started, so nothing starts but the agent
        assert world.wait(lambda: "no job was started on this pod" in world.boot_out(), 60)
        assert not (paths.results / "done").exists()


def test_a_machine_that_fails_verification_ends_itself_and_runs_no_job(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        world.env.pop("KEEP_ALIVE")
        world.kit(job("open('results/done', 'w')"), None, config={"gpu_expected": "RTX 4090"})
        world.onstart()
        assert world.wait(lambda: world.local.get(world.pod_id) is None), world.boot_out()
        events = [e for e in world.functions.events if e.kind == "verify_failed"]
        assert events and events[0].end_at is not None, "told, with the end for the ledger"
        assert "verification failed" in events[0].message


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def test_a_machine_that_fails_verification_and_is_kept_still_runs_no_job(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:  # KEEP_ALIVE=1: the ending keeps the pod, as a refused destroy would
        world.kit(job("open('results/done', 'w')"), None, config={"gpu_expected": "RTX 4090"})
        world.onstart()
        assert world.wait(lambda: "pod end: kept_alive" in world.boot_out()), world.boot_out()
        assert any(e.kind == "verify_failed" for e in world.functions.events)
        assert world.wait(lambda: not [p for p in world.marked() if p not in _agents(world)], 30)
        assert not world.paths.job_command.exists() and not (world.paths.results / "done").exists()


def _agents(world: object) -> list[int]:
    from fakes.bootworld import BootWorld

    assert isinstance(world, BootWorld)
    holder = _read(world.paths.agent_lock)
    return [int(holder)] if holder and holder.isdigit() else []


def test_a_first_boot_cut_short_by_a_restart_is_done_again(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        paths, ready = world.paths, tmp_path / "ready"
        slow = {**NOTHING_TO_SET_UP, "smoke": f"test -f {ready} || sleep 60"}  # a long bootstrap step
        world.kit(
            job("open('results/done', 'w').write(open('results/ckpt.txt').read())"),
            world.push({"ckpt.txt": b"41"}),
            bootstrap=slow,
        )
        world.onstart()
        assert world.wait(lambda: any(c.startswith(b"sleep\0") for c in world.cmdlines())), world.boot_out()
        world.kill_all()  # outbid during the bootstrap: config.json is there, the job never started
        ready.write_text("")
        world.onstart()
        assert world.wait(lambda: _read(paths.results / "done") == "41"), world.boot_out()
        assert "the first boot was cut short by a restart: doing it again" in world.boot_out()
        assert not (paths.state / "boot.json").exists() and len(world.functions.boots) == 1
