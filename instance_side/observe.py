"""What one check of the agent reads of the pod: the GPUs, the user's processes outside the job, the ssh sessions
and the job's tree (an Observation, for the idle rule in idle.py). The previous reading of the job's tree and of
the process table is kept: progress is the growth since. A probe that fails is an error in the reading (busy),
never an exception out of the check.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuc.instance_side.gpu import GpuReader, GpuReadError, GpuSample
from gpuc.instance_side.idle import Observation, TreeActivity, job_activity, procs_activity
from gpuc.instance_side.jobtree import JobProbe, JobScanError, JobTree
from gpuc.instance_side.procs import ProcessProbe, ProcTable
from gpuc.instance_side.sshscan import SshProbe, SshSession


@dataclass(frozen=True)
class Probes:
    gpu: GpuReader
    procs: ProcessProbe
    ssh: SshProbe
    job: JobProbe


class Observer:
    def __init__(self, probes: Probes) -> None:
        self.probes = probes
        self._job_tree: JobTree | None = None  # the previous check's reading: progress is the growth since
        self._proc_table: ProcTable | None = None  # the same, for the user's other processes

    def observe(self) -> Observation:
        gpus: tuple[GpuSample, ...] = ()
        gpu_error: str | None = None
        try:
            gpus = tuple(self.probes.gpu.read())
        except GpuReadError as exc:
            gpu_error = str(exc)
        except Exception as exc:
            gpu_error = f"{type(exc).__name__}: {exc}"[:200]
        job, job_error = self._job()
        # The job's tree has its own reading (this check's): the scan of the rest leaves it out.
        job_pids = frozenset(pid for pid, _ in self._job_tree.procs) if job and self._job_tree else frozenset()
        procs, python_procs, probe_error = self._procs(job_pids)
        ssh: tuple[SshSession, ...] = ()
        try:
            ssh = tuple(self.probes.ssh.sessions())
        except Exception as exc:
            probe_error = probe_error or f"{type(exc).__name__}: {exc}"[:200]
        return Observation(
            gpus=gpus,
            gpu_error=gpu_error,
            procs=procs,
            python_procs=python_procs,
            ssh=ssh,
            probe_error=probe_error,
            job=job,
            job_error=job_error,
        )

    def _job(self) -> tuple[TreeActivity | None, str | None]:
        # A failed scan counts as busy, and the previous reading stays: the next check compares
        # across the failed one.
        try:
            tree = self.probes.job.sample()
        except JobScanError as exc:
            return None, str(exc)[:200]
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"[:200]
        activity = None if tree is None else job_activity(self._job_tree, tree)
        self._job_tree = tree
        return activity, None

    def _procs(self, job_pids: frozenset[int]) -> tuple[tuple[TreeActivity, ...], int, str | None]:
        """The user's processes outside the job's tree (which has its own reading), as trees with their
        growth since the previous check. A failed scan is busy; the previous table stays, as above."""
        try:
            table = self.probes.procs.sample(skip=job_pids)
        except Exception as exc:
            return (), 0, f"{type(exc).__name__}: {exc}"[:200]
        trees = procs_activity(self._proc_table, table)
        self._proc_table = table
        return trees, sum(1 for p in table.procs.values() if p.python), None
