"""A day of a typical week's notifications: a user who keeps more than the cap on the
account, one job that ends well, one pod left idle that the agent ends. The balance above the cap is said
once a day at low priority; what costs money now keeps its high priority; nothing is said twice."""

from __future__ import annotations

from collections import Counter

from fakes.watchdog import World
from test_balance_alerts import set_balance

from gpuc.core.notify.channels import NtfyChannel

DAY_S = 24 * 3600.0


def a_day(world: World) -> None:
    set_balance(world, 45.0)  # above the $20 default cap
    world.register("job")
    world.register("idle")
    world.event("job", "agent_start", "agent started")
    world.event("idle", "agent_start", "agent started")
    world.run(1800, keep_alive=("job", "idle"))
    world.event("job", "job_exit", "train.py exited", exit_code=0, duration_s=1700.0)
    world.event("job", "sync_ok", "results/ synced")
    world.event("job", "destroying", "destroying", end_at=world.now)
    world.provider.destroy("job")
    world.run(1200, keep_alive=("idle",))
    world.event("idle", "idle_warning", "idle for 20 min")
    world.run(600, keep_alive=("idle",))
    world.event("idle", "idle_destroy", "idle for 30 min", end_at=world.now, note="nothing ran")
    world.provider.destroy("idle")
    world.run(DAY_S - 3600, period=world.settings.reaper_period_s)


def test_a_day_of_a_typical_week_is_a_handful_of_pushes_and_one_low_cap_alert(world: World) -> None:
    a_day(world)
    sent = world.store.recent_notifications(1000)
    kinds = Counter(n.kind for n in sent)
    assert kinds["balance_cap:fake"] == 1, kinds  # daily, not 24 a day
    assert len(sent) == 8, [(n.kind, n.title) for n in sent]
    cap = next(n for n in sent if n.kind == "balance_cap:fake")
    assert cap.level == "low"
    levels = {n.kind: n.level for n in sent}
    assert levels["idle_warning"] == "warning"  # a pod about to be destroyed stays high priority
    assert len({(n.title, n.message) for n in sent}) == len(sent)  # no push twice


def test_the_next_day_says_the_cap_once_more(world: World) -> None:
    a_day(world)
    world.run(3600 + 60, period=world.settings.reaper_period_s)
    assert Counter(n.kind for n in world.store.recent_notifications(1000))["balance_cap:fake"] == 2


def test_ntfy_sends_a_low_alert_at_priority_two_and_a_kept_pod_at_five() -> None:
    from gpuc.core.notify.message import Message

    sent: list[dict[str, object]] = []

    class Capture(NtfyChannel):
        def post(self, http: object, url: str, **kw: object) -> None:  # type: ignore[override]
            sent.append(kw["json"])  # type: ignore[arg-type]

    channel = Capture("https://ntfy.sh", "t")
    channel.deliver(Message(0.0, "cap", "keep less", level="low"), None)  # type: ignore[arg-type]
    channel.deliver(Message(0.0, "kept", "billing", level="error"), None)  # type: ignore[arg-type]
    assert [m["priority"] for m in sent] == [2, 5]


def test_every_pod_push_opens_with_what_to_do_in_gpucs_words_within_120_characters(world: World) -> None:
    """A lock screen shows the title and the body's first line: what happened and what to do, never the
    pod's quoted (and defanged) words, which follow on the next line."""
    from gpuc.core import api
    from gpuc.functions.podnews import _NEWS, event_text

    world.register("a-pod-with-a-long-id-0123456789")
    pod = world.pod("a-pod-with-a-long-id-0123456789")
    bodies = [api.PodEvent(pod_id=pod.pod_id, kind=kind, message="see https://evil.example") for kind in _NEWS]
    bodies += [
        api.PodEvent(pod_id=pod.pod_id, kind="job_exit", message="m; last line: ValueError: boom", exit_code=code)
        for code in (0, 3)
    ]
    for body in bodies:
        first, _, rest = event_text(pod, body).partition("\n")
        assert 0 < len(first) <= 120 and "pod says" not in first and "[.]" not in first, (body.kind, first)
        assert rest.startswith('pod says: "'), (body.kind, rest)


def test_a_failed_jobs_push_quotes_its_last_error_line_and_counts_in_words(world: World) -> None:
    world.register("p1")
    world.event("p1", "job_exit", "job exited with code 1 after 3s; last line: KeyError: 'lr'", exit_code=1)
    sent = world.store.recent_notifications(1)[0]
    assert "FAILED" in sent.title
    assert sent.message.splitlines()[0] == "See why: `gpuc logs p1`."
    assert "last line: KeyError: 'lr'" in sent.message


def test_counts_read_as_words() -> None:
    from gpuc.core.notify.message import counted

    assert [counted(n, "pod") for n in (0, 1, 2)] == ["0 pods", "1 pod", "2 pods"]
