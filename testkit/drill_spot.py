"""Drill rows for an interruptible Vast run outbid, recovered inside its one envelope, or stopped.

Each row rents on the Vast emulator through the real VastProvider, with the drill's clock, registers the run
with the watchdog's real handlers as `up --recover N` does, and lets the watchdog's real reaper passes act on
it (functions/recovery/: read twice, wait, destroy confirmed, re-rent, boot ticket; rules in decide.py), on
a real store (testkit/spot_world.py); no laptop is involved after the first create (the laptop is gone:
these are its figures). The job is the drill's plain-Python stand-in for the PyTorch example in
docs/interruptible.md: a step counter checkpointed into results/ every STEP_EVERY_S, pushed to a file://
destination (with its push manifest) every PUSH_EVERY_S, resuming from the newest checkpoint restored from
GPUC_RESUME_FROM (instance_side/resume.py). An outbid kills its process (the emulator's on_pause); what it
wrote after the last push is lost, by design.

What the drill PLAYS rather than runs: the containers. Once the emulator shows a re-rented instance running,
its boot spends the ticket at the real /v1/boot route, restores what the answer names, and starts the job.
The real boot (Vast's onstart, gpuc's wheel from the kit, the agent and the wrapper as processes) runs in
tests/recovery/test_recovery_e2e.py, with the real CLI.

S30a outbid once mid-job: recovered within GPUC_RECOVER_WAIT_S + a pass + boot; the steps continue from
     the last push; the run's cost inside its envelope; 0 instances left at the end.
S30b outbid more than N times: recovery stops, 0 instances left, the pushed results kept, the user told.
S30c a bid that loses at create, on a server that ignores cancel_unavail: 0 instances left.
S30d the webhook as Vast sends it (X-Vast-Signature-256: sha256=..., the slug `outbid`), through the real route
     (POST /v1/hooks/vast): the genuine one is answered with no provider call and the pass after it reads the
     pod (twice) and decides as it always does; a forged one, the old bare-hex header, a stale or a replayed
     one are refused or ignored, and nothing acts.
S30e `gpuc down` during a re-rent: its stop lands at every step of the watchdog's re-rent (before the paused
     instance's destroy, after it, after the create, after the register, before the ticket is saved, after
     it); the pass destroys what it rented after the stop, `down` destroys what the run names once the pass is
     over: 0 instances left billing each time.
S30f a re-rent cut at each step (after the create, after the register, before the ticket is saved: a failed
     store write, a Lambda that times out): the new pod's boot is told "later" (409) and asked again, the next
     pass finds the pod by its attempt's name and makes its ticket valid (or destroys it, when the stop came
     meanwhile), the user told which; never a second create.
S30g a 2-GPU run outbid: re-rented on a 2-GPU machine at its bid per GPU x 2, though a cheaper 1-GPU machine
     is listed; the new pod's verification expects 2 GPUs.
S30h outbid 3 times at seeded moments, twice inside a push (killed as it starts a random request): here the
     pushes are the product's own (instance_side/push.py's push_once to the run's file:// destination, the
     job's end its whole sync) and so are the restores; the job writes a step file, then ckpt.pt with a rename,
     then a line of metrics.jsonl. Each restore is a prefix of what the job wrote, and no step written before
     the last verified push's settle window is lost. (The other rows play the push: the files the destination
     lacks, then a manifest naming them all.)
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from pathlib import Path

from gpuc.core.api import BootAnswer, EndRequest, RunRecovery
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.models import PodSpec
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.functions.recovery import runs
from gpuc.functions.recovery.claim import ACT_LEASE_S
from gpuc.functions.recovery.runs import StoredRun
from gpuc.functions.recovery.webhook import SEEN, SIGNATURE_HEADER, WINDOW_S
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest, PushReport
from gpuc.instance_side.pushplan import SETTLE_S
from gpuc.instance_side.pushrun import push_once
from gpuc.instance_side.resume import RestoreError, restore
from gpuc.instance_side.scan import local_listing
from gpuc.instance_side.sync import with_job_log
from gpuc.testkit.drill_push import CutBucket, Outbid
from gpuc.testkit.drill_stage import MIN, RowResult, Stage
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState
from gpuc.testkit.spot_world import (
    BID,
    CUT_STEPS,
    MAX_HOURS,
    OFFER,
    RUN_ID,
    STOP_STEPS,
    make_rec_world,
)  # fmt: skip

STEP_EVERY_S = 5.0
PUSH_EVERY_S = 60.0
PASS_S = 60.0  # the watchdog's look at recovering runs
WAIT_S = 5 * MIN  # GPUC_RECOVER_WAIT_S's default
STEPS = 600  # the job's whole work: 50 minutes at one step per 5 s
HOOK_SECRET = "drill-vast-webhook-secret"  # GPUC_VAST_WEBHOOK_SECRET, as Vast's account shows it
BOOT_RETRY_S = 30.0  # how often a new pod's onstart asks /v1/boot again after "later" (409)


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
    """The incremental push's effect: the files the destination lacks, then the manifest naming them all. The
    job's files are written once (a checkpoint per step), so one the destination holds at its size is sent."""
    files = local_listing(results)
    for name, size in files.items():
        there = dest / name
        if there.is_file() and there.stat().st_size == size:
            continue
        there.parent.mkdir(parents=True, exist_ok=True)
        there.write_bytes((results / name).read_bytes())
    manifest = PushManifest(f"file://{dest}", now, {n: (s, 0) for n, s in files.items()})
    (dest / MANIFEST_NAME).parent.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST_NAME).write_text(manifest.to_json(), encoding="utf-8")


class SpotWorld:
    """The watchdog's real recovery (handlers and reaper passes on a real store, testkit/spot_world.py) over the
    Vast emulator; the pods' containers are played: a job per attempt, its pushes, its boot through /v1/boot."""

    def __init__(
        self, root: Path, clock: FakeClock, recover: int, hook_secret: str | None = None, gpus: int = 1
    ) -> None:
        self.clock = clock
        self.dest = root / "bucket" / "spot" / RUN_ID
        self.dest.mkdir(parents=True)
        self.root = root
        self.world = make_rec_world(
            root / "watchdog", clock, recover_wait_s=WAIT_S, reaper_period_s=PASS_S, vast_webhook_secret=hook_secret
        )
        if hook_secret is not None:
            self.world.emu.webhook_secret = hook_secret
        self.world.results_at = f"file://{self.dest}"
        self.world.gpus = gpus
        self.emu, self.vast = self.world.emu, self.world.vast
        self.world.up(recover=recover)
        self.jobs: dict[str, SpotJob] = {}
        self.emu.on_pause = self._killed
        self.recovered_at: list[float] = []

    def run(self) -> StoredRun:
        return self.world.run()

    def _killed(self, pod_id: str) -> None:
        if pod_id in self.jobs:
            self.jobs[pod_id].alive = False  # "killing running processes"

    def latest_job(self) -> SpotJob | None:
        return self.jobs.get(self.world.latest())

    def boot_if_up(self) -> None:
        """A re-rented pod boots (played, with the real route): its ticket spent at /v1/boot, the last push
        restored from what the answer names, the job started from it."""
        pod_id = self.world.latest()
        if pod_id in self.jobs or self.run().done:
            return
        pod = self.vast.get(pod_id)
        if pod is None or pod.status != "running":
            return
        results = self._results(pod_id)
        if len(self.jobs) > 0:
            answer = self.world.boot(pod_id, self.world.ticket_of(pod_id))
            if answer.status != 200:
                raise AssertionError(f"/v1/boot refused a fresh ticket: {answer.body}")
            booted = BootAnswer.model_validate(answer.body)
            if booted.resume_from:
                restore(booted.resume_from, results, paths=self._pod_paths(results))
            self.recovered_at.append(self.clock.now())
        self.jobs[pod_id] = self._new_job(results)

    # What S30h replaces with the product's own push (the other rows play it).
    def _results(self, pod_id: str) -> Path:
        return self.root / f"pod-{pod_id}" / "results"

    def _new_job(self, results: Path) -> SpotJob:
        return SpotJob(results)

    def _pod_paths(self, results: Path) -> PodPaths | None:
        return None

    def _push(self, job: SpotJob, now: float, *, final: bool = False) -> None:
        push(job.results, self.dest, now)

    def _can_outbid(self, job: SpotJob | None) -> bool:
        return True

    def _outbid(self, job: SpotJob | None) -> None:
        self.emu.outbid(self.world.latest(), by=BID + 0.05)

    def run_for(self, seconds: float, outbid_at: list[float]) -> None:
        end = self.clock.now() + seconds
        next_push = next_pass = self.clock.now()
        while self.clock.now() < end and not self.finished():
            now = self.clock.now()
            self.boot_if_up()
            job = self.latest_job()
            if outbid_at and now >= outbid_at[0] and self._can_outbid(job):
                outbid_at.pop(0)
                self._outbid(job)
            if job is not None:
                job.tick()
                if now >= next_push and job.alive:
                    self._push(job, now)
                    next_push = now + PUSH_EVERY_S
            if now >= next_pass:
                self.world.reap()
                next_pass = now + PASS_S
            self.clock.advance(STEP_EVERY_S)

    def finished(self) -> bool:
        job = self.latest_job()
        return (job is not None and job.step >= STEPS) or self.run().done

    def end_job(self) -> None:
        """The job's own end: the last push, the pod's end told to the watchdog, then its self-destroy (the
        wrapper's, played); the next pass finds the run's latest pod ended: the run is done."""
        job = self.latest_job()
        if job is None or not job.alive or self.run().done:
            return
        self._push(job, self.clock.now(), final=True)
        pod_id = self.world.latest()
        body = EndRequest(end_at=self.clock.now(), by="wrapper", note="job exited 0").model_dump_json().encode()
        self.world.admin("POST", f"/v1/pods/{pod_id}/end", body)
        self.vast.destroy(pod_id)
        self.world.reap()

    def spent(self) -> float:
        return runs.spent_usd(self.run(), self.clock.now())

    def envelope(self) -> float:
        return self.run().request.envelope_usd

    def told(self) -> list[str]:
        return [m.message for m in self.world.outbox()]

    def pushed_steps(self) -> list[int]:
        names = PushManifest.load(self.dest / MANIFEST_NAME).files
        return sorted(int(n.split("-")[1].split(".")[0]) for n in names if n.startswith("ckpt-"))

    def close(self) -> None:
        self.world.close()


def _world(
    recover: int, hook_secret: str | None = None, gpus: int = 1
) -> tuple[SpotWorld, tempfile.TemporaryDirectory[str]]:
    tmp = tempfile.TemporaryDirectory(prefix="gpuc-drill-spot-")
    return SpotWorld(Path(tmp.name), FakeClock(), recover, hook_secret, gpus), tmp


def s30a_outbid_once(stage: Stage) -> RowResult:
    world, tmp = _world(recover=2)
    with tmp:
        start = world.clock.now()
        outbid = start + 20 * MIN
        world.run_for(MAX_HOURS * 3600, outbid_at=[outbid])
        world.end_job()
        world.clock.advance(PASS_S)
        world.world.reap()  # the run's latest pod ended: the run is done
        jobs = list(world.jobs.values())
        problems = []
        if len(jobs) != 2:
            problems.append(f"{len(jobs)} attempts ran, not 2")
        reached = jobs[0].step if jobs else 0
        resumed = jobs[1].first if len(jobs) > 1 else 0
        if len(jobs) > 1 and resumed != last_push_before_outbid(jobs[1]) + 1:
            problems.append(f"attempt 2 started at step {resumed}, not after the last push")
        if world.pushed_steps()[-1:] != [STEPS]:
            problems.append("the job did not finish its steps")
        spent, envelope = world.spent(), world.envelope()
        if spent > envelope:
            problems.append(f"spent {spent:.3f} past the envelope {envelope:.3f}")
        if world.emu.alive():
            problems.append(f"{len(world.emu.alive())} instances left")
        if not world.run().done:
            problems.append("the run is not done after its job's end")
        if not any("recovering, attempt 2 of 3" in t for t in world.told()):
            problems.append("the phone did not hear the recovery")
        recovered = (world.recovered_at[0] - outbid) / MIN if world.recovered_at else None
        world.close()
        lost = reached - (resumed - 1)
        if lost * STEP_EVERY_S > PUSH_EVERY_S:
            problems.append(f"{lost} steps lost: more than one push interval")
    return RowResult(
        "S30a", "interruptible pod outbid once mid-job, the laptop gone",
        "watchdog recovery (read twice, wait, re-rent, boot ticket)",
        recovered, (WAIT_S + 2 * PASS_S + 2 * STEP_EVERY_S) / MIN,
        f"recover wait + a pass + boot; steps resumed at {resumed} after {lost} steps lost since the last push "
        f"(<= one push); ${spent:.3f} of ${envelope:.3f}; 2 attempts, 0 instances left",
        problems=problems,
    )  # fmt: skip


def last_push_before_outbid(job: SpotJob) -> int:
    """The newest checkpoint attempt 2 found restored (= the last push before the outbid)."""
    steps = [int(p.stem.split("-")[1]) for p in job.results.glob("ckpt-*.txt")]
    return max([s for s in steps if s < job.first], default=0)


def s30b_outbid_past_n(stage: Stage) -> RowResult:
    world, tmp = _world(recover=1)
    with tmp:
        start = world.clock.now()
        world.run_for(MAX_HOURS * 3600, outbid_at=[start + 10 * MIN, start + 25 * MIN])
        run = world.run()
        problems = []
        if not run.done:
            problems.append("recovery did not stop")
        told = [t for t in world.told() if t.startswith("recovery stopped")]
        if not told or "kept at file://" not in told[0]:
            problems.append("the user was not told why and what was kept")
        if world.emu.alive():
            problems.append(f"{len(world.emu.alive())} instances left")
        if not world.pushed_steps():
            problems.append("no results kept")
        ended = run.attempts[-1].end
        billed = None if ended is None else (ended - (start + 25 * MIN)) / MIN
        kept = len(world.pushed_steps())
        if len(run.attempts) != 2:
            problems.append(f"{len(run.attempts)} attempts, not 2 (--recover 1)")
        spent, envelope = world.spent(), world.envelope()
        if spent > envelope:
            problems.append(f"spent {spent:.3f} past the envelope {envelope:.3f}")
        world.close()
    return RowResult(
        "S30b", "outbid more than --recover N times", "watchdog recovery stop (N used)",
        billed, (WAIT_S + 2 * PASS_S) / MIN,
        f"paused one waits the recover wait, then destroyed; 0 instances left, {kept} checkpoints kept, "
        f"the user told; ${spent:.3f} of ${envelope:.3f}",
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
    world, tmp = _world(recover=2, hook_secret=HOOK_SECRET)
    with tmp:
        w = world.world
        w.emu.deliver_twice = True
        pod_id = w.latest()
        w.emu.outbid(pod_id)
        good, replay = w.emu.webhooks  # the same event, delivered twice (attempt 1, attempt 2)
        forged = dict(good.headers, **{SIGNATURE_HEADER: "sha256=" + "0" * 64})
        digest = good.headers[SIGNATURE_HEADER].removeprefix("sha256=")
        old_style = {k: v for k, v in good.headers.items() if k != SIGNATURE_HEADER} | {"X-Vast-Signature": digest}
        problems: list[str] = []

        def hook(headers: dict[str, str], body: bytes, want: int, case: str) -> None:
            before = len(w.emu.requests)
            answer = w.call("POST", "/v1/hooks/vast", body, headers)
            if answer.status != want:
                problems.append(f"{case}: answered {answer.status}, not {want}")
            if len(w.emu.requests) > before:
                problems.append(f"{case}: a provider call inside the webhook's answer")
            if case == "replayed" and answer.body.get("ignored") != SEEN:
                problems.append("the replay was not said to be ignored")

        if '"notif_type": "outbid"' not in good.body.decode():
            problems.append("the emulator does not send the short slug `outbid`")
        hook(forged, good.body, 401, "forged")
        hook(old_style, good.body, 401, "the bare-hex X-Vast-Signature")
        hook(good.headers, good.body, 200, "genuine")  # answered at once: no read, no act
        before = len(w.emu.ops("get"))
        w.reap()  # the pass the hint asks for: the pod read twice, paused, the wait starts
        if len(w.emu.ops("get")) - before < 2 or w.run().paused_since is None:
            problems.append("the pass after the hint did not read the pod twice and note the pause")
        hook(replay.headers, replay.body, 200, "replayed")  # 200: a 4xx is a permanent failure at Vast
        w.emu.outbidder_leaves(pod_id)  # resumed: nothing for the watchdog to do
        world.clock.advance(WINDOW_S + 1)
        hook(good.headers, good.body, 401, "stale")
        acts = len(w.emu.ops("destroy")) + len(w.emu.ops("create"))
        for _ in range(3):  # the passes after it: the pod runs again, nothing is done
            world.clock.advance(WAIT_S)
            w.reap()
        if acts != 1 or len(w.emu.ops("destroy")) + len(w.emu.ops("create")) != acts:  # 1: `up`'s create
            problems.append("a webhook made the watchdog destroy or rent")
        world.vast.destroy(pod_id)
        world.close()
    return RowResult(
        "S30d", "Vast's webhook: genuine, forged, old-style, stale or replayed",
        "POST /v1/hooks/vast (X-Vast-Signature-256, 300 s, event id)",
        None, None, "answered with no provider call; the forged, old-style, stale and replayed ones change nothing; "
        "the genuine one only wakes a pass, which reads the pod twice",
        problems=problems,
    )  # fmt: skip


def s30e_stop_during_a_re_rent(stage: Stage) -> RowResult:
    problems: list[str] = []
    billed: list[float] = []
    undone = 0
    for step in STOP_STEPS:
        world, tmp = _world(recover=2)
        with tmp:
            w = world.world
            w.outbid_and_wait()
            w.stop_at(step)
            w.reap()  # the watchdog's re-rent, with `gpuc down`'s stop landing at `step`
            busy = RunRecovery.model_validate(w.admin("GET", f"/v1/runs/{RUN_ID}").body).busy
            if busy is not None:
                problems.append(f"{step}: the run is still busy after the pass ({busy})")
            else:
                w.down_after()  # `down` destroys what the run still names as live
            for _ in range(3):
                if not w.billing():
                    break
                world.clock.advance(PASS_S)
                w.reap()
            if w.billing():
                problems.append(f"{step}: {len(w.billing())} instance(s) left billing")
            if w.stopped_at is None:
                problems.append(f"{step}: the stop never landed")
            else:
                billed.append((world.clock.now() - w.stopped_at) / MIN)
            rented_after = w.creates() - 2 if step == "after the ticket is saved" else w.creates() - 1
            undone += rented_after
            run = w.run()
            if not run.done and step != "after the ticket is saved":
                problems.append(f"{step}: the run is not done")
            if rented_after and not any(f"({run.attempts[-1].pod_id}) is destroyed" in m for m in world.told()):
                problems.append(f"{step}: the user was not told the attempt rented as they stopped was destroyed")
            world.close()
    return RowResult(
        "S30e", "`gpuc down` during a re-rent, at each of its 6 steps", "the re-rent reads the stop before and "
        "after each provider call", max(billed, default=None), PASS_S / MIN,
        f"0 instances left billing at every step; {undone} attempt(s) rented just before the stop landed were "
        "destroyed in the same pass, confirmed gone, their minutes counted",
        problems=problems,
    )  # fmt: skip


def s30f_re_rent_cut(stage: Stage) -> RowResult:
    problems: list[str] = []
    waited: list[float] = []
    for step in (*CUT_STEPS, "after the create, then a stop"):
        world, tmp = _world(recover=2)
        with tmp:
            w = world.world
            w.outbid_and_wait()
            w.cut_at(step.removesuffix(", then a stop"))
            w.reap()  # cut at `step`: the claim stays until its lease lapses
            new = next((str(i.id) for i in w.emu.alive()), None)
            rented = world.clock.now()
            if new is None or w.creates() != 2:
                problems.append(f"{step}: no pod rented before the cut")
                world.close()
                continue
            if step.endswith("a stop"):
                w.ask_stop()
            booted, refused, next_pass = None, False, world.clock.now() + PASS_S
            while world.clock.now() - rented < ACT_LEASE_S + 4 * PASS_S:
                if booted is None and not refused:
                    answer = w.boot(new, w.ticket_of(new))  # onstart, asking again on "later"
                    booted = world.clock.now() if answer.status == 200 else None
                    refused = answer.status not in (200, 409)  # "never": onstart gives up
                if w.run().acting is None and (booted is not None or refused):
                    break  # the next pass saw it through
                world.clock.advance(BOOT_RETRY_S)
                if world.clock.now() >= next_pass:
                    w.reap()
                    next_pass = world.clock.now() + PASS_S
            told = " ".join(world.told())
            if step.endswith("a stop"):
                if booted is not None or w.billing() or f"({new}) is destroyed" not in told:
                    problems.append(f"{step}: the pod was not destroyed and said")
            elif booted is None or "A pass was cut short" not in told:
                problems.append(f"{step}: the pod never booted, or the user was not told")
            else:
                waited.append((booted - rented) / MIN)
            if w.creates() != 2:
                problems.append(f"{step}: {w.creates() - 1} re-rents, not 1")
            world.close()
    bound = (ACT_LEASE_S + PASS_S + BOOT_RETRY_S) / MIN
    return RowResult(
        "S30f", "a re-rent cut after its create, its register, or before its ticket is saved",
        "the intent before the create; the next pass finds the pod by name", max(waited, default=None), bound,
        "the pod's boot answered 409 'later' until the next pass took the claim over (its lease) and made its "
        "ticket valid, then it booted; with a stop meanwhile it was destroyed; the user told which; one create",
        problems=problems,
    )  # fmt: skip


def s30g_two_gpus_re_rented_on_two(stage: Stage) -> RowResult:
    world, tmp = _world(recover=2, gpus=2)
    problems: list[str] = []
    with tmp:
        w = world.world
        w.outbid_and_wait()
        w.reap()
        new = w.emu.instances.get(int(w.latest()))
        if new is None or w.creates() != 2:
            problems.append("not re-rented")
        else:
            if new.offer.num_gpus != 2:
                problems.append(f"re-rented on {new.offer.num_gpus} GPU(s)")
            if new.bid is None or abs(new.bid - 2 * BID) > 1e-9:
                problems.append(f"bid {new.bid} for the machine, not 2 x {BID}")
            answer = w.boot(w.latest(), w.ticket_of(w.latest()))
            if answer.status != 200 or BootAnswer.model_validate(answer.body).kit.config.get("gpu_count") != 2:
                problems.append("the new pod's verification does not expect 2 GPUs")
        cheaper = [o for o in w.emu.offers.values() if o.num_gpus == 1 and o.min_bid <= 2 * BID]
        if not cheaper:
            problems.append("no cheaper 1-GPU machine was listed: the row proves nothing")
        for pod in w.billing():
            world.vast.destroy(str(pod))
        world.close()
    return RowResult(
        "S30g", "a 2-GPU run outbid", "the re-rent asks for the run's GPU count and bids per GPU as `up` did",
        None, None, f"re-rented on a 2-GPU machine at 2 x ${BID:.2f}/h though a 1-GPU machine was listed "
        "cheaper; the new pod verifies 2 GPUs",
        problems=problems,
    )  # fmt: skip


# -- S30h: the product's own push and restore, outbid at random moments ---------------------------------------
# Seeded moments: this seed's outbids land inside a push where a restore that followed the last verified manifest
# alone would take a newer checkpoint than its steps, and a push that sent a newer file past an older one held
# back would leave the log ahead of them (the drill's own test breaks both and sees the row fail).
S30H_SEED = 7
S30H_OUTBIDS = 3  # the pushes use GPUC_SYNC_SETTLE_S's default (push.SETTLE_S)


class PushedJob(SpotJob):
    """One attempt's job on its own pod disk: each step a file steps/step-N.txt, then ckpt.pt saved with a rename
    (its size never changes: a stale manifest would take a newer one), then a line appended to metrics.jsonl;
    stamped with the drill's clock (at a seeded moment inside the step), as a real job's files are with the real
    one. It resumes from its newest step file (docs/interruptible.md) and notes what the restore gave it."""

    def __init__(self, results: Path, clock: FakeClock, rng: random.Random) -> None:
        self.results = results
        self.paths = PodPaths(results.parent.parent)
        self.paths.state.mkdir(parents=True, exist_ok=True)
        (results / "steps").mkdir(parents=True, exist_ok=True)
        self.clock = clock
        self.rng = rng
        found = sorted(int(p.stem.split("-")[1]) for p in (results / "steps").glob("step-*.txt"))
        self.first = max(found, default=0) + 1
        self.step = self.first - 1
        self.alive = True
        ckpt = int(self._read("ckpt.pt") or 0)
        lines = len(self._read("metrics.jsonl").split())
        self.restored_problems: list[str] = []
        if found != list(range(1, len(found) + 1)):
            self.restored_problems.append(f"a restore gave step files with a gap: {found}")
        if ckpt > len(found) or lines > len(found):
            self.restored_problems.append(f"a restore gave a checkpoint ({ckpt}) or a log ({lines}) past its steps")
        self.written_at: dict[int, float] = {}

    def _read(self, name: str) -> str:
        path = self.results / name
        return path.read_text() if path.is_file() else ""

    def tick(self) -> None:
        if not self.alive or self.step >= STEPS:
            return
        self.step += 1
        at = self.clock.now() - self.rng.uniform(0.5, STEP_EVERY_S - 0.5)
        self._stamp(f"steps/step-{self.step:05d}.txt", str(self.step), at)
        self._stamp(".ckpt.pt.tmp", f"{self.step:06d}", at + 0.3)
        os.replace(self.results / ".ckpt.pt.tmp", self.results / "ckpt.pt")
        with (self.results / "metrics.jsonl").open("a") as fh:
            fh.write(f"{self.step}\n")
        os.utime(self.results / "metrics.jsonl", ns=(int((at + 0.4) * 1e9),) * 2)
        self.written_at[self.step] = at

    def _stamp(self, name: str, text: str, at: float) -> None:
        (self.results / name).write_text(text)
        os.utime(self.results / name, ns=(int(at * 1e9),) * 2)

    def due(self) -> int:
        """The newest step every step up to which was written before the last verified push's settle window: what
        the push promises a resume whatever the moment of the kill."""
        report = PushReport.load(self.paths)
        if report is None or report.at is None:
            return 0
        horizon = report.at - SETTLE_S
        done = [s for s, at in sorted(self.written_at.items()) if at <= horizon]
        return max((s for i, s in enumerate(done, self.first) if s == i), default=self.first - 1)


class PushingSpotWorld(SpotWorld):
    """S30h's world: the pods' pushes are instance_side/push.py's IncrementalPush to the run's file:// destination
    (the job's end: the real whole sync), the new pods' restores resume.py's; an outbid lands between two pushes or
    cuts one at a random request."""

    def __init__(self, root: Path, clock: FakeClock, recover: int, seed: int) -> None:
        super().__init__(root, clock, recover)
        for offer_id in (11684801, 11684802):  # a host for each further re-rent (an outbid machine's price is up)
            self.emu.add_offer(VastOfferState(offer_id, "RTX 4090", 0.33, 0.19))
        self.rng = random.Random(seed)
        self.kills: list[tuple[int, int, bool]] = []  # (steps written, due, mid-push) per outbid
        self.restore_refused: str | None = None
        self.failed_pushes = 0

    def _results(self, pod_id: str) -> Path:
        return PodPaths(self.root / f"pod-{pod_id}").results

    def _new_job(self, results: Path) -> SpotJob:
        return PushedJob(results, self.clock, self.rng)

    def _pod_paths(self, results: Path) -> PodPaths | None:
        paths = PodPaths(results.parent.parent)
        paths.state.mkdir(parents=True, exist_ok=True)  # the pod's boot wrote its config there first
        return paths

    def _push(self, job: SpotJob, now: float, *, final: bool = False) -> None:
        assert isinstance(job, PushedJob)
        bucket = FileBucketSync(self.dest.parent.parent, "spot", RUN_ID)
        if final:  # the job's end: the whole sync, verified, recorded as a push (sync.py, as ending.py runs it)
            sync = with_job_log(bucket, job.paths)
            if not sync.verify(sync.push(job.results)):
                raise AssertionError("the final sync did not verify")
            return
        report = push_once(bucket, job.paths, self.clock, settle_s=SETTLE_S)
        if report is None or report.error:
            self.failed_pushes += 1

    def _can_outbid(self, job: SpotJob | None) -> bool:
        return job is not None and job.alive and job.step > job.first + 12  # a few pushes into this attempt

    def _outbid(self, job: SpotJob | None) -> None:
        assert isinstance(job, PushedJob)
        mid = len(self.kills) % 2 == 0  # the first and the third
        if mid:  # the outbid lands inside a push: killed as it starts a random one of its requests
            cut = CutBucket(self.dest.parent.parent, "spot", RUN_ID, cut_at=self.rng.randint(1, 16))
            with contextlib.suppress(Outbid):
                push_once(cut, job.paths, self.clock, settle_s=SETTLE_S)
        self.kills.append((job.step, job.due(), mid))
        super()._outbid(job)


def s30h_outbid_at_random_moments(stage: Stage) -> RowResult:
    tmp = tempfile.TemporaryDirectory(prefix="gpuc-drill-spot-")
    with tmp:
        rng = random.Random(S30H_SEED)
        world = PushingSpotWorld(Path(tmp.name), FakeClock(), S30H_OUTBIDS, S30H_SEED)
        start = world.clock.now()
        outbids, at = [], start
        for _ in range(S30H_OUTBIDS):  # seeded moments, each well into an attempt (the row waits for one)
            at += rng.uniform(6, 16) * MIN
            outbids.append(at)
        try:
            world.run_for(MAX_HOURS * 3600, outbid_at=outbids)
            world.end_job()
        except RestoreError as exc:  # the new pod would not start its job (exit 75): the recovery is lost
            world.restore_refused = str(exc)
        world.clock.advance(PASS_S)
        world.world.reap()
        jobs = [j for j in world.jobs.values() if isinstance(j, PushedJob)]
        problems = [p for j in jobs for p in j.restored_problems]
        if world.restore_refused:
            problems.append(f"a restore refused: {world.restore_refused}")
        if len(jobs) != S30H_OUTBIDS + 1:
            problems.append(f"{len(jobs)} attempts ran, not {S30H_OUTBIDS + 1}")
        resumed = [j.first - 1 for j in jobs[1:]]
        pairs = [(world.kills[i], resumed[i]) for i in range(min(len(world.kills), len(resumed)))]
        beyond = sum(max(0, due - at) for (_written, due, _mid), at in pairs)
        redone = [written - at for (written, _due, _mid), at in pairs]
        final = PushManifest.load(world.dest / MANIFEST_NAME).files
        missing = [s for s in range(1, STEPS + 1) if f"steps/step-{s:05d}.txt" not in final]
        if missing:
            problems.append(f"{len(missing)} steps never reached the destination: {missing[:3]}...")
        if world.emu.alive():
            problems.append(f"{len(world.emu.alive())} instances left")
        mid = sum(1 for *_, m in world.kills if m)
        spent, envelope = world.spent(), world.envelope()
        if spent > envelope:
            problems.append(f"spent {spent:.3f} past the envelope {envelope:.3f}")
        world.close()
    return RowResult(
        "S30h", "outbid at random moments, pushes cut: no step lost beyond the last push interval",
        "the push's order + the restore's rule (instance_side/push.py, resume.py)",
        None, None,
        f"{len(world.kills)} outbids at seeded moments ({mid} inside a push, cut at a random request): each restore "
        f"a prefix of what the job wrote (no gap, checkpoint and log never ahead); resumed at {resumed}, "
        f"{redone} steps redone, all written after the last verified push's settle window; {beyond} lost before it",
        results_lost=beyond + len(missing),
        problems=problems,
    )  # fmt: skip
