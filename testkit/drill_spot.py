"""Drill rows for an interruptible Vast run outbid, recovered inside its one envelope, or stopped.

Each row rents on the Vast emulator through the real VastProvider, with the drill's clock, and lets the
watchdog's real recovery (functions/reaper/respawn.py, rules in recover.py) act on it pass by pass; no
laptop is involved after the first create (the laptop is gone: the same figures). The job is the drill's
plain-Python stand-in for the PyTorch example in docs/interruptible.md: a step counter checkpointed into
results/ every STEP_EVERY_S, pushed to a file:// destination (with its push manifest) every PUSH_EVERY_S,
resuming from the newest checkpoint that GPUC_RESUME_FROM restores (instance_side/resume.py). An outbid
kills its process (the emulator's on_pause); what it wrote after the last push is lost, by design.

What the drill PLAYS rather than runs: the new pod's boot (Vast's onstart fetching the code bundle and
gpuc's files is not built): once the emulator shows the new instance running, the drill restores the last
push and starts the job there.

S30a outbid once mid-job: recovered within GPUC_RECOVER_WAIT_S + a pass + boot; the steps continue from
     the last push; the run's cost inside its envelope; 0 instances left at the end.
S30b outbid more than N times: recovery stops, 0 instances left, the pushed results kept, the user told.
S30c a bid that loses at create, on a server that ignores cancel_unavail: 0 instances left.
S30d a webhook forged or replayed: refused, and nothing acts (no provider call).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from gpuc.core.budget import Attempt, Envelope, run_envelope_usd, run_spent
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.models import PodSpec
from gpuc.core.pod import RESUME_ENV
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.functions.outbidhook import check_delivery, wants_look
from gpuc.functions.reaper.recover import RecoveryPlan
from gpuc.functions.reaper.respawn import RecoveringRun, recover_pass
from gpuc.instance_side.push import MANIFEST_NAME, PushManifest
from gpuc.instance_side.resume import restore
from gpuc.instance_side.sync import local_listing
from gpuc.testkit.drill_stage import MIN, RowResult, Stage
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState

OFFER = "11684738"  # the emulator's RTX 4090 that passes every default filter (min_bid 0.20)
BID = 0.22
DISK_PER_HOUR = 0.15 * 30 / (30 * 24)  # the offer's storage price x the 30 GB disk
STEP_EVERY_S = 5.0
PUSH_EVERY_S = 60.0
PASS_S = 60.0  # the watchdog's look at recovering runs
WAIT_S = 5 * MIN  # GPUC_RECOVER_WAIT_S's default
MAX_HOURS = 2.0
STEPS = 600  # the job's whole work: 50 minutes at one step per 5 s


class SpotJob:
    """One attempt's job: resumes from the newest checkpoint in results/, one step per STEP_EVERY_S."""

    def __init__(self, results: Path) -> None:
        self.results = results
        results.mkdir(parents=True, exist_ok=True)
        steps = [int(p.stem.split("-")[1]) for p in results.glob("ckpt-*.txt")]
        self.first = max(steps, default=0) + 1
        self.step = self.first - 1
        self.alive = True

    def tick(self) -> None:
        if self.alive and self.step < STEPS:
            self.step += 1
            (self.results / f"ckpt-{self.step:05d}.txt").write_text(str(self.step))


def push(results: Path, dest: Path, now: float) -> None:
    """The incremental push's effect: files at the destination, then the manifest naming them."""
    files = local_listing(results)
    for name in files:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes((results / name).read_bytes())
    manifest = PushManifest(f"file://{dest}", now, {n: (s, 0) for n, s in files.items()})
    (dest / MANIFEST_NAME).parent.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST_NAME).write_text(manifest.to_json(), encoding="utf-8")


class SpotWorld:
    def __init__(self, root: Path, clock: FakeClock, recover: int) -> None:
        self.clock = clock
        self.emu = VastEmulator(clock=clock, boot_polls=2)
        # A second host that passes the default filters: where a recovery goes (the first is taken).
        self.emu.add_offer(VastOfferState(11684800, "RTX 4090", 0.33, 0.19))
        self.vast = VastProvider(
            self.emu.api_key, url="https://vast.test/api/v0", transport=self.emu.transport(), clock=clock,
            backoff=zero_backoff,
        )  # fmt: skip
        self.dest = root / "bucket" / "spot" / "r1"
        self.dest.mkdir(parents=True)
        self.root = root
        spec = PodSpec(
            experiment="spot", run_id="spot-r1", provider="vast", gpu_type="RTX 4090", interruptible=True,
            bid_per_gpu=BID, offer_id=OFFER, max_hours=MAX_HOURS, env={"GPUC_RUN_ID": "spot-r1"},
        )  # fmt: skip
        pod = self.vast.create(spec)
        envelope = Envelope(clock.now(), MAX_HOURS, run_envelope_usd(BID, DISK_PER_HOUR, MAX_HOURS))
        plan = RecoveryPlan(recover, envelope, price_cap=BID, disk_per_hour=DISK_PER_HOUR)
        self.run = RecoveringRun(
            plan, spec, f"file://{self.dest}", [pod.id], [Attempt(clock.now(), BID, DISK_PER_HOUR)]
        )
        self.jobs: list[SpotJob] = []
        self.emu.on_pause = self._killed
        self.recovered_at: list[float] = []

    def _killed(self, pod_id: str) -> None:
        for job in self.jobs:
            job.alive = False  # "killing running processes"

    def boot_if_up(self) -> None:
        """The new pod boots (played): once running, the last push restored, the job started from it."""
        if len(self.jobs) >= len(self.run.pod_ids) or self.run.done:
            return
        pod = self.vast.get(self.run.pod_ids[-1])
        if pod is None or pod.status != "running":
            return
        results = self.root / f"pod{len(self.jobs) + 1}" / "results"
        env = self.emu.instances[int(pod.id)].env
        if RESUME_ENV in env:
            restore(env[RESUME_ENV], results)
            self.recovered_at.append(self.clock.now())
        self.jobs.append(SpotJob(results))

    def run_for(self, seconds: float, outbid_at: list[float]) -> None:
        end = self.clock.now() + seconds
        next_push = next_pass = self.clock.now()
        while self.clock.now() < end and not self.finished():
            now = self.clock.now()
            self.boot_if_up()
            if outbid_at and now >= outbid_at[0]:
                outbid_at.pop(0)
                self.emu.outbid(self.run.pod_ids[-1], by=BID + 0.05)
            if self.jobs:
                self.jobs[-1].tick()
                if now >= next_push and self.jobs[-1].alive:
                    push(self.jobs[-1].results, self.dest, now)
                    next_push = now + PUSH_EVERY_S
            if now >= next_pass:
                recover_pass(self.vast, self.run, now, WAIT_S)
                next_pass = now + PASS_S
            self.clock.advance(STEP_EVERY_S)

    def finished(self) -> bool:
        return (bool(self.jobs) and self.jobs[-1].step >= STEPS) or self.run.done

    def end_job(self) -> None:
        """The job's own end: the last push, then the pod destroys itself (the agent's, played)."""
        if self.jobs and self.jobs[-1].alive and not self.run.done:
            push(self.jobs[-1].results, self.dest, self.clock.now())
            self.vast.destroy(self.run.pod_ids[-1])
            self.run.done = True

    def pushed_steps(self) -> list[int]:
        names = PushManifest.load(self.dest / MANIFEST_NAME).files
        return sorted(int(n.split("-")[1].split(".")[0]) for n in names if n.startswith("ckpt-"))

    def close(self) -> None:
        self.vast.close()


def _world(recover: int) -> tuple[SpotWorld, tempfile.TemporaryDirectory[str]]:
    tmp = tempfile.TemporaryDirectory(prefix="gpuc-drill-spot-")
    return SpotWorld(Path(tmp.name), FakeClock(), recover), tmp


def s30a_outbid_once(stage: Stage) -> RowResult:
    world, tmp = _world(recover=2)
    with tmp:
        start = world.clock.now()
        world.run_for(MAX_HOURS * 3600, outbid_at=[start + 20 * MIN])
        world.end_job()
        problems = []
        if len(world.jobs) != 2:
            problems.append(f"{len(world.jobs)} attempts ran, not 2")
        reached = world.jobs[0].step if world.jobs else 0
        resumed = world.jobs[1].first if len(world.jobs) > 1 else 0
        if len(world.jobs) > 1 and resumed != last_push_before_outbid(world) + 1:
            problems.append(f"attempt 2 started at step {resumed}, not after the last push")
        if world.pushed_steps()[-1:] != [STEPS]:
            problems.append("the job did not finish its steps")
        spent = run_spent(world.run.attempts, world.clock.now())
        if spent > world.run.plan.envelope.cap_usd:
            problems.append(f"spent {spent:.3f} past the envelope {world.run.plan.envelope.cap_usd:.3f}")
        if world.emu.alive():
            problems.append(f"{len(world.emu.alive())} instances left")
        outbid = start + 20 * MIN
        recovered = (world.recovered_at[0] - outbid) / MIN if world.recovered_at else None
        world.close()
        lost = reached - (resumed - 1)
        if lost * STEP_EVERY_S > PUSH_EVERY_S:
            problems.append(f"{lost} steps lost: more than one push interval")
    return RowResult(
        "S30a", "interruptible pod outbid once mid-job", "watchdog recovery (read twice, wait, re-rent)",
        recovered, (WAIT_S + 2 * PASS_S + 2 * STEP_EVERY_S) / MIN,
        f"recover wait + a pass + boot; steps resumed at {resumed} after {lost} steps lost since the last push "
        f"(<= one push); ${spent:.3f} of ${world.run.plan.envelope.cap_usd:.3f}; 2 attempts, 0 instances left",
        problems=problems,
    )  # fmt: skip


def last_push_before_outbid(world: SpotWorld) -> int:
    """The newest checkpoint attempt 2 found restored (= the last push before the outbid)."""
    results = world.root / "pod2" / "results"
    steps = [int(p.stem.split("-")[1]) for p in results.glob("ckpt-*.txt")]
    restored = [s for s in steps if s < world.jobs[1].first]
    return max(restored, default=0)


def s30b_outbid_past_n(stage: Stage) -> RowResult:
    world, tmp = _world(recover=1)
    with tmp:
        start = world.clock.now()
        world.run_for(MAX_HOURS * 3600, outbid_at=[start + 10 * MIN, start + 25 * MIN])
        problems = []
        if not world.run.done:
            problems.append("recovery did not stop")
        told = [t for t in world.run.told if t.startswith("recovery stopped")]
        if not told or "kept at file://" not in told[0]:
            problems.append("the user was not told why and what was kept")
        if world.emu.alive():
            problems.append(f"{len(world.emu.alive())} instances left")
        if not world.pushed_steps():
            problems.append("no results kept")
        ended = world.run.attempts[-1].end
        billed = None if ended is None else (ended - (start + 25 * MIN)) / MIN
        kept = len(world.pushed_steps())
        if len(world.run.attempts) != 2:
            problems.append(f"{len(world.run.attempts)} attempts, not 2 (--recover 1)")
        world.close()
    return RowResult(
        "S30b", "outbid more than --recover N times", "watchdog recovery stop (N used)",
        billed, (WAIT_S + 2 * PASS_S) / MIN,
        f"paused one waits the recover wait, then destroyed; 0 instances left, {kept} "
        "checkpoints kept, the user told",
        problems=problems,
    )  # fmt: skip


def s30c_bid_loses_at_create(stage: Stage) -> RowResult:
    clock = FakeClock()
    emu = VastEmulator(clock=clock, ignore_cancel_unavail=True)
    emu.offers[int(OFFER)].winning_bid = 0.30
    vast = VastProvider(emu.api_key, url="https://vast.test/api/v0", transport=emu.transport(), clock=clock,
                        backoff=zero_backoff)  # fmt: skip
    spec = PodSpec(experiment="spot", run_id="spot-r2", provider="vast", gpu_type="RTX 4090",
                   interruptible=True, bid_per_gpu=BID, offer_id=OFFER)  # fmt: skip
    problems = []
    try:
        vast.create(spec)
        problems.append("the losing bid was created")
    except ProviderError:
        pass
    vast.close()
    if emu.alive():
        problems.append(f"{len(emu.alive())} instances left")
    return RowResult(
        "S30c", "a bid that loses at create (server ignores cancel_unavail)", "up (new_contract destroyed)",
        0.0, 0.0, "0 instances left: the stopped one the error names is destroyed, confirmed gone",
        problems=problems,
    )  # fmt: skip


def s30d_webhook_forged_or_replayed(stage: Stage) -> RowResult:
    world, tmp = _world(recover=2)
    with tmp:
        world.emu.deliver_twice = True
        world.emu.outbid(world.run.pod_ids[-1])
        world.emu.outbidder_leaves(world.run.pod_ids[-1])  # resumed: nothing for the watchdog to do
        good, replay = world.emu.webhooks
        seen: set[str] = set()

        def first_time(event_id: str) -> bool:
            new = event_id not in seen
            seen.add(event_id)
            return new

        now = world.clock.now()
        forged = dict(good.headers, **{"X-Vast-Signature": "0" * 64})
        answers = [
            check_delivery(forged, good.body, secret=world.emu.webhook_secret, now=now, first_time=first_time),
            check_delivery(good.headers, good.body, secret=world.emu.webhook_secret, now=now + 400,
                           first_time=first_time),
        ]  # fmt: skip
        first = check_delivery(good.headers, good.body, secret=world.emu.webhook_secret, now=now, first_time=first_time)
        answers.append(
            check_delivery(replay.headers, replay.body, secret=world.emu.webhook_secret, now=now, first_time=first_time)
        )
        problems = [f"acted on: {json.dumps(str(a))}" for a in answers if wants_look(a)]
        if not wants_look(first):
            problems.append("the genuine delivery was refused")
        before = len(world.emu.ops("destroy")) + len(world.emu.ops("create"))
        for _ in range(3):  # a look the hint asked for: the pod runs again, nothing is done
            world.clock.advance(WAIT_S)
            recover_pass(world.vast, world.run, world.clock.now(), WAIT_S)
        if len(world.emu.ops("destroy")) + len(world.emu.ops("create")) != before:
            problems.append("a webhook made the watchdog destroy or rent")
        world.vast.destroy(world.run.pod_ids[-1])
        world.close()
    return RowResult(
        "S30d", "a webhook forged, stale or replayed", "webhook check (HMAC, 300 s, event id)",
        None, None, "refused, nothing acts; a genuine one only makes the watchdog read the state (twice)",
        problems=problems,
    )  # fmt: skip
