"""Where things live on a pod, relative to its root: one definition for the laptop and the pod.

Standard library only. The agent imports this for the pod's whole life and is held to <= 30 MB
resident; pydantic (core.podconfig, which re-exports these names) would cost it ~20 MB.

On a rented pod the root is `/` (so the workspace is `/workspace`, the provider's volume); a local
sandbox pod, or a pod over a loopback sshd in tests, has its own root directory. `GPUC_POD_ROOT`
says which.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

POD_ROOT_ENV = "GPUC_POD_ROOT"
TOKEN_ENV = "GPUC_POD_TOKEN"
CLAIM_ENV = "GPUC_POD_CLAIM"  # the claim `up` got at registration, in the pod's secrets beside the token
# A recovered attempt's job starts from the last push: where it is (the watchdog sets it, the pod restores it).
RESUME_ENV = "GPUC_RESUME_FROM"
# The pod's state folder relative to its root, as the laptop names it in put_file (PodPaths.state).
STATE_REL = "workspace/.gpuc"


class PodPaths:
    """Where things live on a pod, relative to its root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workspace = root / "workspace"
        self.state = root / STATE_REL
        self.config = self.state / "config.json"
        self.secrets = self.state / "secrets.env"
        self.seq = self.state / "seq"
        # The pod's latest claim from the watchdog (functions/claims.py): kept across agent restarts, sent
        # with every ping, so a watchdog that lost its store knows the pod again.
        self.claim = self.state / "claim"
        self.exit_code = self.state / "exit_code"
        self.log = self.state / "agent.log"
        self.results = self.workspace / "results"
        self.keep_file = self.workspace / ".keep"
        self.sim_gpu = self.state / "sim_gpu.json"
        # Whoever ends the pod (wrapper, idle watch, `gpuc down`) writes the pod id here: heartbeats stop.
        self.ended = self.state / "ended"
        self.job = self.state / "job.pid"
        # The command and job id the wrapper runs: a container restart (a paused Vast pod resumed, its
        # processes killed, its disk kept) starts the same job again (instance_side/boot.py --again).
        self.job_command = self.state / "job-command.json"
        # The job's output (the wrapper tees it here), its outcome, and the copies the sync sends beside
        # results/ (as logs/job.log and logs/outcome.json) so both outlive the pod.
        self.job_log = self.state / "job.log"
        self.outcome = self.state / "outcome.json"
        # Each job's own log and outcome, kept under its job id (`<id>.log`, `<id>.json`): a warm pod's next job
        # starts a fresh job.log, and each job's copy goes to the destination as logs/jobs/<id>.* (never
        # overwritten by another job's), so a crash's traceback outlives the next run.
        self.jobs = self.state / "jobs"
        self.log_stage = self.state / "log-stage"
        self.end_lock = self.state / "end.lock"
        # "retry the sync now" from the phone, for whichever process holds the kept pod (wrapper or agent)
        self.retry_asked = self.state / "kept.retry"
        self.agent_lock = self.state / "agent.lock"
        self.upload = self.state / "upload"  # the project's archive, in parts, until `ask unpack`
        # `gpuc run --env NAME`: one job's own variables (mode 600), read and removed as the job starts
        self.job_env = self.state / "job-env"
        # The bundle `up` uploads (unpacked into code/site), and the interpreter that runs it (a launcher the
        # install writes: the image's python3 with the site on its path, so every later ssh command finds gpuc).
        self.code = self.state / "code"
        self.python = self.state / "bin" / "python"
        # Bootstrap and verification: done-markers, the timing CSV, the log, the verdict.
        self.bootstrap = self.state / "bootstrap"
        self.bootstrap_plan = self.state / "bootstrap.json"
        self.bootstrap_csv = self.bootstrap / "bootstrap.csv"
        self.bootstrap_log = self.bootstrap / "bootstrap.log"
        self.verdict = self.state / "verify.json"
        self.repo = self.workspace / "repo"
        # On the volume, so a model survives a container restart and is downloaded (and billed) once.
        self.hf_home = self.workspace / ".cache" / "huggingface"
        self.results_repo = self.state / "results-repo"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PodPaths:
        env = os.environ if environ is None else environ
        return cls(Path(env.get(POD_ROOT_ENV, "/")))
