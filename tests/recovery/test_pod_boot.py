"""A re-rented pod boots with no laptop: the onstart fetches its kit for its one-time ticket, installs gpuc,
writes its config and secrets (mode 600), starts the agent, restores the last push, then starts the job. A kit
that does not match its sha256, or a refused ticket, starts nothing; the ticket is never logged nor in argv."""

from __future__ import annotations

import time
from pathlib import Path

from fakes.bootworld import HF_TOKEN, TICKET, TOKEN, boot_world, job, mode

from gpuc.core.bootkit import BOOT_FILE, ONSTART_MAX, onstart_script
from gpuc.instance_side.joblog import read_outcome
from gpuc.instance_side.wrapper import agent_alive

RESUMES = (
    "import os\n"
    "assert open('results/ckpt.txt').read() == '41', 'the last push was not restored first'\n"
    "assert os.path.exists('train.sh'), 'the project was not unpacked'\n"
    "open('results/done', 'w').write('ok')\n"
)


def test_onstart_fits_vast_and_holds_no_secret() -> None:
    script = onstart_script()
    assert len(script) <= ONSTART_MAX, len(script)
    assert "GPUC_BOOT_TICKET" in script and TICKET not in script and TOKEN not in script


def test_a_re_rented_pod_boots_restores_then_runs_its_job(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        src = world.push({"ckpt.txt": b"41"})
        world.kit(job(RESUMES), src, over_http=True)
        world.onstart()
        paths = world.paths
        assert world.wait(lambda: (paths.results / "done").exists() or "boot failed" in world.boot_out()), (
            world.boot_out()
        )
        assert (paths.results / "done").read_text() == "ok", world.boot_out()
        said = world.boot_out()
        assert said.index("restored 1 files of the last push") < said.index("job started under the wrapper")
        assert [b.pod_id for b in world.functions.boots] == [world.pod_id], "one boot call, for this pod"
        assert world.functions.boot_file_modes == [0o600], "boot.json, with the secrets, is the owner's only"
        assert mode(paths.config) == 0o600 and mode(paths.secrets) == 0o600
        secrets = paths.secrets.read_text()
        assert TOKEN in secrets and HF_TOKEN in secrets and TICKET not in secrets
        assert not (paths.state / BOOT_FILE).exists(), "boot.json goes once its secrets are in secrets.env"
        assert world.wait(lambda: agent_alive(paths) is True, 30), "the agent runs"
        assert world.wait(lambda: (read_outcome(paths) or {}).get("exit_code") == 0, 60), world.boot_out()
        assert (read_outcome(paths) or {}).get("job_id") == "job-0001"
        # The outcome is written before the end's sync (wrapper.py): the sync's files arrive a moment later.
        assert world.wait(lambda: (world.dest / "done").is_file(), 30), "the job's end synced results/ as always"
        assert (world.dest / "done").read_text() == "ok"
        cmdlines = world.cmdlines()
        assert cmdlines, "the agent is one of the boot's processes"
        assert all(TICKET.encode() not in c and TOKEN.encode() not in c for c in cmdlines)
        logs = [world.boot_out(), paths.log.read_text(), (paths.state / "agent.out").read_text()]
        assert all(TICKET not in text and TOKEN not in text and HF_TOKEN not in text for text in logs)


def test_a_wheel_that_does_not_match_its_sha256_installs_and_starts_nothing(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        world.kit(job("open('results/done', 'w')"), None, wheel_sha256="0" * 64)
        world.onstart()
        assert world.wait(lambda: "nothing started" in world.boot_out() and not world.marked(), 60), world.boot_out()
        _nothing_installed_nor_started(world.paths)
        assert not (world.paths.code / "boot-site").exists(), "not even unpacked"
        assert TICKET not in world.boot_out()


def test_a_refused_ticket_starts_nothing(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        world.kit(job("open('results/done', 'w')"), None)
        world.functions.status = 403
        world.onstart()
        assert world.wait(lambda: "nothing started" in world.boot_out() and not world.marked(), 60), world.boot_out()
        assert "refused the ticket (403)" in world.boot_out()
        assert len(world.functions.boots) == 1, "a 4xx is final: never retried"
        _nothing_installed_nor_started(world.paths)
        assert not (world.paths.code / "boot-site").exists()
        assert TICKET not in world.boot_out()


def test_a_not_yet_from_the_watchdog_is_tried_again_and_the_pod_boots(tmp_path: Path) -> None:
    """The watchdog answers 409 while the re-rent is still being registered: "not yet", never "never"."""
    with boot_world(tmp_path) as world:
        world.kit(job("open('results/done', 'w')"), None)
        world.functions.first = [409, 409]
        world.onstart()
        assert world.wait(lambda: "job started under the wrapper" in world.boot_out()), world.boot_out()
        assert world.boot_out().count("/v1/boot answered 409; again") == 2 and len(world.functions.boots) == 3


def test_an_image_without_a_usable_python_says_so_and_starts_nothing(tmp_path: Path) -> None:
    with boot_world(tmp_path) as world:
        world.kit(job("open('results/done', 'w')"), None)
        world.env["GPUC_PYTHON"] = str(tmp_path / "no-python3")  # the image's only python: not there
        started = time.monotonic()
        world.onstart()
        assert time.monotonic() - started < 30  # never hangs: the container's start goes on
        assert "no python3 >= 3.9 in this image" in world.boot_out() and "nothing started" in world.boot_out()
        assert world.functions.boots == [], "the ticket is not spent on a pod that cannot boot"
        _nothing_installed_nor_started(world.paths)


def _nothing_installed_nor_started(paths: object) -> None:
    from gpuc.instance_side.podfiles import PodPaths

    assert isinstance(paths, PodPaths)
    assert not paths.python.exists() and not (paths.code / "site").exists(), "nothing installed"
    assert not paths.config.exists() and not paths.secrets.exists()
    assert not (paths.state / BOOT_FILE).exists(), "the answer's secrets are not left behind"
    assert not (paths.results / "done").exists()
    assert agent_alive(paths) is None, "no agent ever ran"


def test_onstart_waits_out_a_re_rent_cut_after_its_create() -> None:
    """A re-rent cut after its create answers the pod's boot 409 ("later") until the watchdog's act lease lapses
    and the next pass registers it: onstart's retries must outlast that, or the pod never boots and is reaped."""
    from gpuc.core.bootkit import BOOT_ATTEMPTS, BOOT_WAIT_CAP_S, onstart_script
    from gpuc.core.settings import Settings
    from gpuc.functions.recovery.claim import ACT_LEASE_S

    waited = sum(min(2**i, BOOT_WAIT_CAP_S) for i in range(BOOT_ATTEMPTS))
    assert waited >= ACT_LEASE_S + Settings.reaper_period_s + 5 * 60.0
    assert f"time.sleep(min(2**i,{BOOT_WAIT_CAP_S}))" in onstart_script()
