"""An interruptible run outbid mid-job with the laptop gone, end to end: the real CLI rents on the Vast emulator
(over HTTP, pods reached through a loopback sshd), `up` returns and its process is gone, the emulator outbids
the pod (its container stops: the job is killed), and only the watchdog (a local watchdog server whose reaper
runs every half second) and the re-rented pod's own onstart are left to finish the job.

What is read afterwards is what the user would read: the bucket (the job's steps continue from the last push,
none done twice past it), the provider (every instance gone), the ledger (one row for the run, its attempts in
the note, its cost inside the envelope), and the phone's outbox (the recovery said, with its attempt and money).
"""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuc.core.budget import run_envelope_usd
from gpuc.core.ledger.rows import LedgerRow, row_cost
from gpuc.core.ledger.store import Ledger
from gpuc.core.notify.notifier import OUTBOX_NAME, read_outbox
from gpuc.core.settingsload import load_settings
from gpuc.core.signing import new_token
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState
from gpuc.testkit.platform import client_environ, start_platform, write_env_file
from gpuc.testkit.sshd import LoopbackSshd, start_loopback_sshd

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]

BID = 0.22  # per GPU; the emulator's RTX 4090 offers take bids from 0.19-0.20
STEPS = 120
STEP_S = 0.25
WAIT_S = 2.0  # GPUC_RECOVER_WAIT_S, scaled as the demo scales minutes to seconds
SETTLE_S = 0.5
DISK_PER_HOUR = 0.15 * 30 / (30 * 24)
TRAIN = f"""
import glob, json, os, time
os.makedirs("results", exist_ok=True)
done = sorted(glob.glob("results/ckpt-*.json"))
step = json.load(open(done[-1]))["step"] if done else 0
with open("results/attempts.log", "a") as log:
    log.write(f"start {{step}}\\n")
while step < {STEPS}:
    time.sleep({STEP_S})
    step += 1
    with open(f"results/ckpt-{{step:05d}}.json", "w") as f:
        json.dump({{"step": step}}, f)
print("trained", step)
"""


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[LoopbackSshd]:
    server = start_loopback_sshd(tmp_path / "sshd")
    yield server
    server.stop()


class World:
    def __init__(self, tmp_path: Path, sshd: LoopbackSshd, recover: int, train: str = TRAIN) -> None:
        self.server, self.platform = start_platform("vast", sshd)
        emulator = self.server.emulator
        assert isinstance(emulator, VastEmulator)
        self.vast = emulator
        # Hosts for the re-rents: the first machine's going price is above our bid after the outbid.
        for offer_id in (11684800, 11684801, 11684802):
            self.vast.add_offer(VastOfferState(offer_id, "RTX 4090", 0.33, 0.19))
        self.home = tmp_path / "home"
        write_env_file(self.home)
        (self.home / "config.json").write_text(json.dumps({"bootstrap_apt": "", "bootstrap_torch": "skip"}))
        self.token = new_token()
        env = client_environ(self.server, sshd, self.home)
        fast = {
            "GPUC_HEARTBEAT_INTERVAL_S": "0.5",
            "GPUC_IDLE_CHECK_INTERVAL_S": "0.5",  # the periodic push goes on the agent's checks
            "GPUC_SYNC_INTERVAL_S": "1",
            "GPUC_SYNC_SETTLE_S": str(SETTLE_S),  # 5 s scaled as the interval is (10 min -> 1 s)
            "GPUC_SILENCE_LIMIT_S": "40",
            "GPUC_DESTROY_GRACE_S": "10",
            "GPUC_RECOVER_WAIT_S": str(WAIT_S),
        }
        settings = load_settings({**env, **fast}, admin_token=self.token)
        self.functions: ServerHandle = start_in_thread(settings, port=0, reaper_interval_s=0.5)
        self.env = {**env, **fast, "GPUC_WATCHDOG_URL": self.functions.url, "GPUC_ADMIN_TOKEN": self.token}
        self.project = tmp_path / "proj"
        self.project.mkdir()
        (self.project / "train.py").write_text(train)
        self.recover = recover
        self.bucket = self.home / "results"

    def gpuc(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", *args],
            env=self.env, cwd=self.project, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def up(self) -> str:
        up = self.gpuc(
            "up", "spot-exp", "--provider", "vast", "--interruptible", "--bid", str(BID),
            "--recover", str(self.recover), "--max-hours", "1", "-y", "--", "python", "train.py",
        )  # fmt: skip
        assert up.returncode == 0, up.stdout + up.stderr
        (pod_id,) = self.platform.alive()
        return pod_id

    def run_dir(self) -> Path:
        (found,) = (self.bucket / "spot-exp").iterdir()
        return found

    def pushed_steps(self, folder: str = "") -> list[int]:
        try:
            names = [p.name for p in (self.run_dir() / folder).glob("*-*.json")]
        except (OSError, ValueError):  # nothing pushed yet
            return []
        return sorted(int(n[5:10]) for n in names)

    def pushed_at_least(self, steps: int) -> bool:
        return len(self.pushed_steps(folder="steps")) >= steps

    def re_rented(self, gone: str) -> bool:
        alive = self.platform.alive()
        return gone not in alive and len(alive) == 1

    def settled_steps(self) -> int:
        """The newest step the last push counts as whole (a file still being written is `waiting`)."""
        manifest = PushManifest.load(self.run_dir() / MANIFEST_NAME)
        return max(int(n[5:10]) for n in manifest.files if n.startswith("ckpt-") and n not in manifest.waiting)

    def ledger_row(self) -> LedgerRow:
        """The run's one row once `gpuc ledger` has taken in the run's end (the watchdog marks the run done at
        its next pass after the last pod's end: a moment after the instance is gone)."""

        def closed() -> bool:
            self.gpuc("ledger")
            return all(r.end for r in Ledger(self.home / "gpu-ledger.csv").rows())

        wait_for(closed, 60, "the ledger row closed")
        (row,) = Ledger(self.home / "gpu-ledger.csv").rows()
        return row

    def close(self) -> None:
        self.platform.close()
        self.server.stop()
        self.functions.stop()


def wait_for(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_outbid_run_recovers_from_its_last_push_with_the_laptop_gone(sshd: LoopbackSshd, tmp_path: Path) -> None:
    world = World(tmp_path, sshd, recover=2)
    try:
        first = world.up()  # `up` returned: the laptop's process is gone from here on
        wait_for(lambda: len(world.pushed_steps()) >= 12, 90, "a push with a dozen steps")
        pushed_before = world.settled_steps()
        world.vast.outbid(first, by=BID + 0.05)
        wait_for(lambda: first not in world.platform.alive(), 60, "the paused instance destroyed")
        wait_for(lambda: STEPS in world.pushed_steps(), 180, "the job's last step pushed")
        wait_for(lambda: not world.platform.alive(), 60, "every instance gone")
        attempts = (world.run_dir() / "attempts.log").read_text().split()
        steps = world.pushed_steps()
        manifest = (world.run_dir() / MANIFEST_NAME).read_text()
        row = world.ledger_row()
        outbox = "\n".join(f"{m.title} {m.message}" for m in read_outbox(world.home / OUTBOX_NAME))
    finally:
        world.close()
    assert world.platform.leftovers() == {}
    assert attempts[0:2] == ["start", "0"] and len(attempts) == 4, attempts
    resumed_at = int(attempts[3])
    assert pushed_before <= resumed_at < STEPS, (attempts, pushed_before)  # from the last push, not from scratch
    assert steps == list(range(1, STEPS + 1)), (attempts, pushed_before, manifest)
    assert len(world.vast.destroyed) == 2
    cost = row_cost(row)
    envelope = run_envelope_usd(BID, DISK_PER_HOUR, 1.0)
    assert row.end and cost is not None and 0 < cost <= envelope, (row, envelope)
    assert "2 attempts" in row.note, row.note
    assert "recovering, attempt 2 of 3" in outbox, outbox


def test_outbid_past_its_recoveries_stops_with_nothing_left_and_says_what_it_cost(
    sshd: LoopbackSshd, tmp_path: Path
) -> None:
    world = World(tmp_path, sshd, recover=1)
    try:
        first = world.up()
        wait_for(lambda: len(world.pushed_steps()) >= 8, 90, "a first push")
        world.vast.outbid(first, by=BID + 0.05)
        wait_for(lambda: len(world.platform.alive()) == 1 and first not in world.platform.alive(), 60, "a re-rent")
        (second,) = world.platform.alive()
        wait_for(lambda: (world.run_dir() / "attempts.log").read_text().count("start") == 2, 60, "attempt 2 runs")
        world.vast.outbid(second, by=BID + 0.05)
        wait_for(lambda: not world.platform.alive(), 60, "the paused second attempt destroyed")
        time.sleep(2.0)  # a few more reaper passes: nothing more is rented
        kept = world.pushed_steps()
        row = world.ledger_row()
        outbox = "\n".join(f"{m.title} {m.message}" for m in read_outbox(world.home / OUTBOX_NAME))
    finally:
        world.close()
    assert world.platform.leftovers() == {}
    assert len(world.vast.ops("create")) == 2 and len(world.vast.destroyed) == 2  # N = 1: one re-rent, no more
    assert kept and STEPS not in kept  # the job did not finish, and what it pushed is kept
    assert "recovery stopped" in outbox and "kept at file://" in outbox, outbox
    cost = row_cost(row)
    assert row.end and cost is not None and 0 < cost <= run_envelope_usd(BID, DISK_PER_HOUR, 1.0), row
    assert "2 attempts" in row.note, row.note


# -- outbid at random moments, again and again ---------------------------------------------------------------
OUTBIDS = 3
SEED = 34  # the number: a failure names it, and the same schedule runs again
# Resumes from its newest step file (docs/interruptible.md's numbered checkpoints) and also saves ckpt.json after each
# step, with a rename, over the last one. At each start it says what it found: a restore that is not a prefix of what
# it wrote shows as a step file past a missing one, or a ckpt.json ahead of the step files.
RESUMING = f"""
import glob, json, os, time
os.makedirs("results/steps", exist_ok=True)
found = sorted(int(p[-10:-5]) for p in glob.glob("results/steps/step-*.json"))
step = max(found, default=0)
ckpt = json.load(open("results/ckpt.json"))["step"] if os.path.exists("results/ckpt.json") else 0
gaps = [s for s in range(1, step + 1) if s not in found]
with open("results/attempts.log", "a") as log:
    log.write(json.dumps({{"start": step, "gaps": gaps, "ckpt": ckpt}}) + "\\n")
while step < {STEPS}:
    time.sleep({STEP_S})
    step += 1
    with open(f"results/steps/step-{{step:05d}}.json", "w") as f:
        json.dump({{"step": step, "at": time.time()}}, f)
    with open("results/ckpt.json.tmp", "w") as f:
        json.dump({{"step": step}}, f)
    os.replace("results/ckpt.json.tmp", "results/ckpt.json")
print("trained", step)
"""


def due_before_the_kill(root: Path) -> int:
    """Read on the outbid pod's disk (kept while it is paused): the newest step every step up to which was written
    before the last VERIFIED push's settle window (push.json's `at`, the push's own clock after its listing).
    What the rule promises a resume: none of these lost, whatever the moment of the kill."""
    report = json.loads((root / "workspace/.gpuc/push.json").read_text())
    horizon = float(report["at"]) - SETTLE_S
    steps = [json.loads(p.read_text()) for p in (root / "workspace/results/steps").glob("step-*.json")]
    written = sorted(s["step"] for s in steps if s["at"] <= horizon)
    return max((s for i, s in enumerate(written, 1) if s == i), default=0)


def test_outbid_at_random_moments_three_times_each_resume_is_a_prefix_and_nothing_before_the_last_push_is_lost(
    sshd: LoopbackSshd, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    world = World(tmp_path, sshd, recover=OUTBIDS, train=RESUMING)
    owed: list[int] = []
    try:
        pod = world.up()
        for attempt in range(OUTBIDS):
            # A random moment of this attempt: after a few of its own steps were pushed, then anywhere in a push.
            goal = len(world.pushed_steps(folder="steps")) + rng.randint(4, 14)
            wait_for(functools.partial(world.pushed_at_least, goal), 120, f"attempt {attempt + 1}")
            time.sleep(rng.uniform(0.0, 1.0))
            world.vast.outbid(pod, by=BID + 0.05)  # its container stops here: the job and any push under way
            owed.append(due_before_the_kill(world.platform.root(pod)))
            wait_for(functools.partial(world.re_rented, pod), 90, "a re-rent")
            (pod,) = world.platform.alive()
        wait_for(lambda: STEPS in world.pushed_steps(folder="steps"), 240, "the job's last step pushed")
        wait_for(lambda: not world.platform.alive(), 60, "every instance gone")
        starts = [json.loads(line) for line in (world.run_dir() / "attempts.log").read_text().splitlines()]
        steps = world.pushed_steps(folder="steps")
    finally:
        world.close()
    print(f"seed {SEED}: the last verified push held steps up to {owed}; the attempts found {starts}")
    assert world.platform.leftovers() == {}
    assert len(starts) == OUTBIDS + 1, starts
    prefix = all(not start["gaps"] and start["ckpt"] <= start["start"] for start in starts)
    assert prefix, f"a restore that is not a prefix of what the job wrote: {starts}"
    for kill, due in enumerate(owed, 1):
        assert starts[kill]["start"] >= due, f"outbid {kill}: resumed at {starts[kill]}, the last push held {due}"
    assert steps == list(range(1, STEPS + 1)), f"steps lost for good: {sorted(set(range(1, STEPS + 1)) - set(steps))}"
