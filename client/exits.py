"""`--wait`'s exit codes besides the job's own: each ending its own, so a script can tell "the job failed"
from "gpuc ended the pod under it" from "nobody knows" (125 was all three). No imports: `--help` reads it."""

from __future__ import annotations

KEPT_SYNC_FAILED_EXIT = 120  # the job exited (its code is in the line) but results/ did not sync: KEPT, billing
ENDED_EXITS = {  # the pod was ended under a job that never exited (the outcome's ended_by)
    "deadline_destroy": 121,
    "idle_destroy": 122,
    "phone_destroy": 123,
}
WAIT_TIMEOUT_EXIT = 124  # as timeout(1): still running when the wait gave up
OUTCOME_UNKNOWN_EXIT = 125  # the job's exit code could not be learnt
STOPPED_WAITING_EXIT = 130  # Ctrl-C: the job goes on
EXIT_CODES_HELP = (
    "Exit codes with --wait: the job's own; 120 the job exited but the results sync FAILED (pod KEPT, "
    "billing); 121 the pod was ended at its deadline (--max-hours) before the job exited; 122 ended idle; "
    "123 destroyed from the phone; 124 --timeout passed (the job goes on); 125 the outcome could not be "
    "learnt; 130 Ctrl-C (the job goes on)."
)
