"""What the phone shows for a pod's event: the title says which experiment and how it went
("kvcache FAILED (exit 3), $0.02"), the body opens with what to do, then the pod's own words (quoted and
defanged: a pod is a stranger's machine), then which pod it is.

The title is gpuc's words only: the kind, the exit code and the cost are checked numbers; nothing the pod
wrote reaches it.
"""

from __future__ import annotations

from gpuc.core import api
from gpuc.core.notify.message import pod_says
from gpuc.core.settings import Settings
from gpuc.core.titles import clock, cost_so_far, exit_outcome, title
from gpuc.core.warm import WARM_SAYS, warm_lead
from gpuc.functions.deadline import deadline_of
from gpuc.functions.store import StoredPod

# kind -> (outcome in the title, what to do first in the body; {pod} is the pod id)
_NEWS: dict[str, tuple[str, str]] = {
    "agent_start": ("started", "Nothing to do: the pod is watched. `gpuc logs {pod}` follows it."),
    "idle_destroy": ("idle: results saved, destroying", "Nothing to do: results/ is synced and verified."),
    "deadline_destroy": ("deadline: results saved, destroying", "Nothing to do: results/ is synced and verified."),
    "phone_destroy": ("destroyed from the phone: results saved", "Nothing to do: results/ is synced and verified."),
    "sync_ok": ("results saved", "Nothing to do."),
    "sync_failed": (
        "results sync FAILED: pod kept, billing",
        "Get the results: `gpuc results {pod}` copies results/ here, then ends the pod.",
    ),
    "destroying": ("destroying", "Nothing to do."),
    "destroy_failed": (
        "destroy FAILED: still billing",
        "Nothing to do yet: the watchdog destroys it; `gpuc ls` shows it until it is gone.",
    ),
    "verify_failed": ("verification FAILED", "See why: `gpuc logs {pod}`; `gpuc down {pod}` ends it."),
    "info": ("says", "Read it below; `gpuc logs {pod}` has the rest."),
    "deadline_warning": ("deadline near", "To keep it longer: `gpuc extend {pod} 2h`."),
    "idle_warning": ("idle", "To keep it: `gpuc keep {pod} --for 2h` (or touch /workspace/.keep on the pod)."),
    "kept_stopping": (
        "kept for its results: stopping soon",
        "Get the results: `gpuc results {pod}`; the pod stops itself soon (its disk is kept).",
    ),
    "kept_stopped": (
        "stopped: GPU billing ended, disk kept",
        "Get the results: `gpuc results {pod}`, then `gpuc down {pod}`.",
    ),
    "stop_failed": ("stop FAILED: still billing", "Get the results: `gpuc results {pod}`, then `gpuc down {pod}`."),
}


def event_title(pod: StoredPod, body: api.PodEvent, now: float, settings: Settings) -> str:
    outcome = _NEWS.get(body.kind, (body.kind.replace("_", " "), ""))[0]
    cost = None
    if body.kind == "job_exit":
        outcome = exit_outcome(body.exit_code)
        cost = cost_so_far(pod.price_per_hour, pod.started_at, body.end_at or now)
    elif body.kind in ("idle_destroy", "deadline_destroy", "phone_destroy"):
        cost = cost_so_far(pod.price_per_hour, pod.started_at, body.end_at or now)
        if body.kind == "idle_destroy" and _warm_waiting(pod, body):
            outcome = "warm time over: results saved, destroying"
    elif body.kind == "sync_failed" and body.note == "periodic":
        outcome = "periodic results push FAILED"
    elif body.kind == "idle_warning" and _warm_waiting(pod, body):
        # A warm pod with no job (`up --warm`): warned core.warm's lead before its warm time ends.
        lead = warm_lead(pod.warm_s or 0.0, settings.idle_destroy_s, settings.idle_warn_s)
        outcome = f"warm, no job: ends at {clock(now + lead)}"
    elif body.kind == "idle_warning":
        # The watchdog's own idle settings (the pod's are its copy of the same .env on a local watchdog):
        # the pod's text says it too, but pod text never reaches a title.
        outcome = f"idle: destroys at {clock(now + max(0.0, settings.idle_destroy_s - settings.idle_warn_s))}"
    elif body.kind == "deadline_warning":
        outcome = f"deadline: destroys at {clock(deadline_of(pod, settings))}"
    return title(outcome, experiment=pod.experiment, cost_usd=cost)


def _warm_waiting(pod: StoredPod, body: api.PodEvent) -> bool:
    """A warm pod's idle watch with no job (`up --warm`), in the agent's own opening words: a job hung on a
    warm pod is warned and ended at the usual idle times, and said as any idle pod is."""
    return bool(pod.warm_s) and body.message.startswith(WARM_SAYS)


def event_text(pod: StoredPod, body: api.PodEvent) -> str:
    todo = _NEWS.get(body.kind, ("", ""))[1]
    if body.kind == "job_exit" and pod.warm_s and body.end_at is None:
        # A warm pod's job ended and the pod stays (no end_at: not ending): the next job is the user's move.
        first = "Results synced; the pod" if body.exit_code == 0 else "See why: `gpuc logs {pod}`; it"
        todo = f"{first} stays warm for the next job: `gpuc run {{pod}} --sync --wait -- CMD`."
    elif body.kind == "job_exit":
        todo = "Nothing to do: results/ is synced." if body.exit_code == 0 else "See why: `gpuc logs {pod}`."
    elif body.kind == "idle_warning" and _warm_waiting(pod, body):
        todo = "Run the next job: `gpuc run {pod} --sync --wait -- CMD`; `gpuc keep {pod} --for 2h` holds it."
    elif body.kind == "sync_failed" and body.note == "periodic":
        todo = "Check the results destination: `gpuc doctor`; the job goes on."
    parts = [pod_says(body.message)]
    # `up --wait` reads these two back from the watchdog's status (client/jobs/follow.py): keep their wording.
    if body.exit_code is not None:
        parts.append(f"gpuc: exit code {body.exit_code}.")
    if body.duration_s is not None:
        parts.append(f"gpuc: ran {body.duration_s / 60:.1f} min.")
    parts.append(f"Pod {pod.pod_id} ({pod.provider}, {pod.experiment}).")
    # A lock screen shows the title and the body's first line: what to do, in gpuc's words alone.
    return f"{todo.format(pod=pod.pod_id)}\n{' '.join(part for part in parts if part)}".lstrip("\n")
