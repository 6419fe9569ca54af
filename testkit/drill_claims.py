"""`gpuc drill` rows for pods that carry their own proof.

F26s  the watchdog's store is lost while three pods work and one stray (`up` died before registering it)
      bills: every healthy pod presents its claim and is re-created and judged as before (0 destroyed);
      the stray, which never pings, is destroyed by the unregistered grace from the new store's first
      sight, never before it.
F26w  a second watchdog runs against the same account (a migration, a second laptop): it leaves the
      first one's pods alone (each is marked with the first one's id where the provider shows it) and
      says so once a day, naming that watchdog; its own stray it still destroys by the grace.

Both with the real agent, handlers and reaper; each row ends with the pods' jobs exiting, synced (0
results lost).
"""

from __future__ import annotations

from gpuc.core.api import ReapReport
from gpuc.core.notify.notifier import Notifier
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.app import Deps, ProviderPool, build_deps
from gpuc.functions.reaper import reap_once
from gpuc.functions.reaper.owners import KIND as OTHER_WATCHDOG
from gpuc.functions.store import META_STORE, SqliteStore
from gpuc.testkit.drill_stage import DrillPod, RowResult, Stage, lose_store, no_gpu_reading, survivors_killed, unclaimed

MIN = 60.0
STRAY = "f26s-stray"


def _end_jobs(stage: Stage, pods: list[DrillPod]) -> list[str]:
    """The jobs finish: each pod syncs and destroys itself (a destroy the fault plan fails is the watchdog's
    to finish, as in F1). A pod still billing an hour later is a problem."""
    for pod in pods:
        if stage.provider.alive(pod.pod_id):
            pod.job_exit(0, 60 * MIN)
    stage.run(3600, until=lambda: not any(stage.provider.alive(p.pod_id) for p in pods))
    return [f"{p.pod_id} still billing an hour after its job ended" for p in pods if stage.provider.alive(p.pod_id)]


def f26s_store_lost_three_pods_and_a_stray(stage: Stage) -> RowResult:
    pods = [stage.launch(f"f26s-pod-{i}") for i in (1, 2, 3)]
    for pod in pods:
        no_gpu_reading(stage, pod)  # heartbeats the only sign of life: no GPU reading vetoes a wrong kill
    stage.run(35 * MIN)  # past one periodic results push
    stage.provider.add(STRAY, watchdog=stage.deps.watchdog_id)  # `up` died between create and register
    stage.run(5 * MIN)
    lose_store(stage)
    lost_at = stage.now
    stage.run(3 * 3600, until=lambda: not stage.provider.alive(STRAY))
    # Past twice the grace and more: the longest an unverifiable ping could have delayed a destroy.
    stage.run(max(0.0, lost_at + 3 * stage.settings.unregistered_grace_s - stage.now))
    grace, period = stage.settings.unregistered_grace_s, stage.period
    killed = survivors_killed(stage, pods)
    problems = [f"{p} was not re-created from its claim" for p in unclaimed(stage, [p.pod_id for p in pods])]
    gone = stage.provider.destroyed_at.get(STRAY)
    if gone is not None and gone < lost_at + grace:
        problems.append(f"the stray was destroyed {(lost_at + grace - gone) / MIN:.0f} min before its grace")
    problems += _end_jobs(stage, pods)
    lost = sum(p.results_lost() for p in pods)
    return RowResult(
        "F26s",
        "store lost with 3 healthy pods and 1 stray",
        "the pods' claims; the stray by the unregistered grace",
        stage.billed_min(STRAY, lost_at),
        (grace + 2 * period) / MIN + stage.slack(lost_at),
        f"0 healthy destroyed; the stray: grace + 2 periods after the loss{stage.bound_note(lost_at)}",
        false_kills=killed,
        results_lost=lost,
        notifications=stage.notifications(),
        problems=problems,
    )


def second_watchdog(stage: Stage) -> Deps:
    """Another watchdog on the same account: its own home, key, store (serving for a day: no young-store
    hold) and phone, the same provider and clock."""
    home = stage.root / "second-home"
    settings = Settings(home=home, admin_token=SecretStr("second-admin-" + "0" * 24))
    store = SqliteStore(home / "watchdog.db")
    store.put_meta(META_STORE, {"created_at": stage.now - 86400.0}, None)
    notifier = Notifier(home / "outbox.jsonl", clock=stage.clock, sleep=lambda s: None)
    return build_deps(
        settings, clock=stage.clock, store=store, notifier=notifier, providers=ProviderPool.of(stage.provider)
    )


def f26w_two_watchdogs(stage: Stage) -> RowResult:
    other = second_watchdog(stage)
    others_destroys: list[str] = []
    first_reaper = stage.reaper

    def both(deps: Deps, now: float) -> ReapReport:
        report = reap_once(other, now)
        others_destroys.extend(a.pod_id for a in report.actions if a.action == "destroy")
        return first_reaper(deps, now)

    stage.reaper = both
    pods = [stage.launch(f"f26w-pod-{i}") for i in (1, 2)]
    for pod in pods:
        no_gpu_reading(stage, pod)
    stage.provider.add("f26w-stray-of-the-second", watchdog=other.watchdog_id)
    start = stage.now
    stage.run(3 * 3600)
    mine = [p.pod_id for p in pods]
    killed = {p for p in mine if p in others_destroys or not stage.provider.alive(p)}  # before their jobs end
    problems = []
    alerts = [n for n in other.store.recent_notifications(1000) if n.kind == OTHER_WATCHDOG]
    if len(alerts) != 1:
        problems.append(f"{len(alerts)} alerts about the other watchdog's pods in 3 h (once a day expected)")
    elif str(stage.deps.watchdog_id) not in alerts[0].title or mine[0] not in alerts[0].message:
        problems.append("the alert does not name the other watchdog and its pods")
    if stage.provider.alive("f26w-stray-of-the-second"):
        problems.append("the second watchdog did not destroy its own stray")
    problems += _end_jobs(stage, pods)
    other.store.close()
    return RowResult(
        "F26w",
        "two watchdogs on one account",
        "the watchdog's mark on each pod",
        None,
        None,
        f"0 pods destroyed by the other one in {(stage.now - start) / 3600:.0f} h; one alert a day naming it",
        false_kills=len(killed),
        results_lost=sum(p.results_lost() for p in pods),
        notifications=stage.notifications(),
        problems=problems,
    )
