"""gpuc's exit codes. `--wait` exits with the job's own code, or with one of these when the job's code cannot
tell what happened: each ending its own, so a script can tell "the job failed" from "gpuc ended the pod under
it" from "nobody knows" (125 was all three). Every other command: 0, or the error's (core/errors.py: 1, 2 a
usage or setting to fix, 3 not found, 4 refused for money or safety), 70 a bug. No imports: `--help` reads it."""

from __future__ import annotations

KEPT_SYNC_FAILED_EXIT = 120  # the job exited (its code is in the line) but results/ did not sync: KEPT, billing
ENDED_EXITS = {  # the pod was ended under a job that never exited (the outcome's ended_by)
    "deadline_destroy": 121,
    "idle_destroy": 122,
    "phone_destroy": 123,
}
ENDED_BY_DOWN_EXIT = 119  # `gpuc down` (or `gpuc results`) ended the pod under the job: its sync ran first
# The watchdog's record of who ended a pod (PodRecord.ended_by), when the pod's own outcome does not say: its
# agent did not end it (`gpuc down` from another shell, the phone's "destroy anyway").
RECORDED_ENDS = {"down": ENDED_BY_DOWN_EXIT, "phone": ENDED_EXITS["phone_destroy"]}
WAIT_TIMEOUT_EXIT = 124  # as timeout(1): still running when the wait gave up
OUTCOME_UNKNOWN_EXIT = 125  # the job's exit code could not be learnt
STOPPED_WAITING_EXIT = 130  # Ctrl-C: the job goes on
EXIT_CODES_HELP = (
    "Exit codes: 0 done; 1 an error (said, with the fix); 2 a usage error or a setting to fix; 3 not found (no "
    "such pod, run or offer); 4 refused for money or safety (the budget, a pod not gpuc's, results not synced); "
    "70 a bug (GPUC_DEBUG=1 shows it); 128+N a signal (130 Ctrl-C) before the job started: what up created is "
    "destroyed. With --wait: the job's "
    "own; 119 the pod was ended by gpuc down before the job exited; 120 the job exited but the results sync "
    "FAILED (pod KEPT, billing); 121 the pod was ended at its deadline (--max-hours) before the job exited; 122 "
    "ended idle; 123 destroyed from the phone; 124 --timeout passed (the job goes on); 125 the outcome could "
    "not be learnt; 130 Ctrl-C (the job goes on)."
)
