"""What `gpuc ls` (and `gpuc watchdog status`) know: every pod at every provider that can be read, joined
with the laptop's runs and the watchdog's view, and the warnings about what could not be read.

The watchdog and every provider are read at once (core/together.py). The watchdog's status is its one
declaration (core/api.py's StatusResponse), read by the client's one reader; the ledger's code loads only
when there is an end to take in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from gpuc.client.context import Ctx
from gpuc.client.runs import CLOSED, RunRecord
from gpuc.core.clock import iso
from gpuc.core.errors import GpucError
from gpuc.core.providers.registry import KEY_FIELDS, keyed_providers
from gpuc.core.settings import Settings, env_name

if TYPE_CHECKING:
    from gpuc.core.api import PodRecord, RunRecovery, StatusResponse
    from gpuc.core.ledger.intake import WatchdogRecord
    from gpuc.core.pod import Pod

LS_FIELDS = (
    "provider",
    "id",
    "name",
    "experiment",
    "status",
    "gpu",
    "price_per_hour",
    "created_at",
    "managed",
)


# Fields that hold a time: epoch seconds in the rows, ISO 8601 UTC in `gpuc ls --json`.
LS_TIMES = ("created_at", "last_seen", "lease_until", "destroy_at", "deadline_at")
HOURS_PER_MONTH = 730.0  # a disk priced per GB-month, billed per hour
READ = "read"
NOT_READ = "not read"


def providers_to_list(settings: Settings) -> list[str]:
    """The providers `gpuc ls` lists: local always, each rented one with a key."""
    return ["local", *keyed_providers(settings)]


@dataclass
class Listing:
    """What `gpuc ls` found. `providers` says, for every provider the user set up or asked for (asked_for),
    whether it was read: an empty list means "no pods" only when each says READ (a provider without a key
    was never asked)."""

    rows: list[dict[str, object]]
    warnings: list[str]
    providers: dict[str, str]  # name -> READ | "not checked (no key: set ...)" | "not read: why"
    watchdog: bool  # the watchdog answered (its view is in the rows)
    now: float

    @property
    def complete(self) -> bool:
        return all(state == READ for state in self.providers.values())

    @property
    def unread(self) -> list[str]:
        """Providers holding a key that could not be read: their pods may be billing unseen."""
        return [name for name, state in self.providers.items() if state.startswith(NOT_READ)]


def survey(ctx: Ctx) -> Listing:
    """Every pod at every configured provider, joined with what the laptop and the watchdog know. The
    watchdog and every provider are read at once (core/together.py): the network costs the slowest read,
    and one stuck endpoint delays no other's answer beyond its own deadline."""
    from gpuc.core.together import read_together

    all_runs = ctx.runs.all()
    local = {r.pod_id: r for r in all_runs if r.pod_id}
    configured = providers_to_list(ctx.settings)
    watchdog = ctx.watchdog  # built here, not in a thread: Ctx builds each client once
    listers = {name: ctx.provider(name).list_pods for name in configured}
    reads = read_together({"": watchdog.status, **{f"p:{name}": read for name, read in listers.items()}})
    warnings: list[str] = []
    watch: dict[str, PodRecord] = {}
    runs: dict[str, RunRecovery | None] = {}
    server_time: float | None = None
    try:
        status = cast("StatusResponse", reads[""].get())
        watch = {p.pod_id: p for p in status.pods}
        server_time = status.server_time
        runs = recovering_read(ctx, status.pods)
        warnings.extend(ledger_intake(ctx, status.pods, runs))
        warnings.extend(status_warnings(status))
    except GpucError as exc:
        warnings.append(f"watchdog unreachable: {exc.message}")
    now = ctx.clock.now()
    asked = asked_for(ctx.settings, all_runs, watch.values())
    states = {
        name: f"not checked (no key: set {env_name(field)})" for name, field in KEY_FIELDS.items() if name in asked
    }
    rows: list[dict[str, object]] = []
    for name in configured:
        try:
            pods = cast("list[Pod]", reads[f"p:{name}"].get())
        except GpucError as exc:
            words = exc.message.removeprefix(f"{name}: ")  # a provider's error already names it
            warnings.append(f"{name}: {words}" + (f" ({exc.hint})" if exc.hint else ""))
            states[name] = f"{NOT_READ}: {words}"
            continue
        states[name] = READ
        for pod in pods:
            row = ls_row(pod, local.get(pod.id), watch.get(pod.id), now, server_time)
            row = money_fields(row, pod, local.get(pod.id), watch.get(pod.id), ctx.settings.idle_destroy_s)
            row["attempt"] = attempt_of(watch.get(pod.id), runs)
            rows.append(row)
    order = ["local", *KEY_FIELDS]
    providers = {name: states[name] for name in order if name in states}
    return Listing(rows, warnings, providers, server_time is not None, now)


def asked_for(settings: Settings, runs: Sequence[RunRecord], records: Iterable[PodRecord]) -> set[str]:
    """The rented providers without a key that `ls` still names as not checked: the one GPUC_PROVIDER names,
    and each where this laptop has a run still open or the watchdog a pod still live (a pod there may bill
    unseen). A provider the user never set up is no line at all: "vast not checked (no key)" under every
    listing of a RunPod-only user said nothing useful."""
    open_runs = {r.provider for r in runs if r.phase not in CLOSED}
    live = {r.provider for r in records if r.end_at is None and r.state not in ("destroyed", "ended")}
    return {settings.provider} | open_runs | live


def ls_row(
    pod: Pod, run: RunRecord | None, rec: PodRecord | None, now: float, server_time: float | None
) -> dict[str, object]:
    row: dict[str, object] = {k: getattr(pod, k) for k in LS_FIELDS}
    if run and not row["experiment"]:
        row["experiment"] = run.experiment
    row["gpu_count"] = pod.gpu_count
    age = max(0.0, now - pod.created_at) if pod.created_at else None
    row["age_s"] = round(age) if age is not None else None
    # An estimate at the listed price (a stopped pod bills less); `gpuc ledger` keeps the record.
    row["cost_usd"] = round(pod.price_per_hour * age / 3600, 4) if age is not None and pod.price_per_hour else None
    row["watchdog"] = rec.state if rec else None
    row["last_seen"] = rec.last_seen if rec else None
    # The watchdog's own clock on both ends: a laptop clock that is off must not make a pod look silent.
    seen = server_time - rec.last_seen if rec and rec.last_seen is not None and server_time is not None else None
    row["heartbeat_age_s"] = round(max(0.0, seen)) if seen is not None else None
    lease = rec.lease_until if rec else None
    row["lease_until"] = lease if lease and lease > (server_time or now) else None
    row["destroy_at"] = rec.destroy_at if rec else None
    row["ssh"] = f"{pod.ssh_host}:{pod.ssh_port}" if pod.ssh_host else None
    return row


def money_fields(
    row: dict[str, object], pod: Pod, run: RunRecord | None, rec: PodRecord | None, idle_destroy_s: float
) -> dict[str, object]:
    """What costs money next: the deadline, the idle state and when the idle watch ends the pod,
    a warm time, a pod KEPT after a failed sync and what it bills, a stopped pod at its disk's price. Times
    are on the watchdog's clock (a heartbeat's age is, too); None where nobody knows."""
    age = row.get("heartbeat_age_s")
    seen = float(age) if isinstance(age, int | float) else 0.0
    deadline = rec.deadline_at if rec else None
    row["deadline_at"] = deadline
    row["warm_s"] = run.warm_s if run and run.warm_s else None
    beat = rec.last_heartbeat if rec else None
    row["job_running"] = None if beat is None else beat.job_running
    row["busy"] = None if beat is None else bool(beat.job_running or beat.idle_minutes == 0)
    if row["warm_s"] and beat is not None and not beat.job_running and beat.busy_reason is None:
        row["busy"] = False  # a warm pod whose job just ended: its warm time runs from 0, not "busy"
    idle_s = None if beat is None or row["busy"] else beat.idle_minutes * 60 + seen
    row["idle_s"] = round(idle_s) if idle_s is not None else None
    limit = row["warm_s"] if isinstance(row["warm_s"], float) else idle_destroy_s
    row["idle_destroy_in_s"] = round(max(0.0, limit - idle_s)) if idle_s is not None else None
    kept = rec is not None and rec.kept_at is not None
    row["kept"] = "sync failed" if kept else None
    row["kept_left_s"] = beat.kept_left_s if kept and beat is not None else None
    disk = (pod.disk_gb * pod.disk_usd_gb_month / HOURS_PER_MONTH) if pod.disk_gb and pod.disk_usd_gb_month else None
    row["disk_per_hour"] = round(disk, 4) if disk is not None else None
    # A stopped pod bills its disk, not its GPU: its running price would overstate it (and hide what it costs).
    row["billing_per_hour"] = row["disk_per_hour"] if pod.status in ("stopped", "exited") else pod.price_per_hour
    return row


def list_all(ctx: Ctx) -> tuple[list[dict[str, object]], list[str]]:
    found = survey(ctx)
    return found.rows, found.warnings


def recovering_read(ctx: Ctx, records: Sequence[WatchdogRecord]) -> dict[str, RunRecovery | None]:
    """The recovering runs (`up --recover`) whose one row is still open, read at once (client/pods/recovery/runs.py);
    nothing is read, or loaded, when no record names one."""
    if not any(getattr(r, "run_id", None) for r in records):
        return {}
    from gpuc.client.pods.recovery.runs import read_runs, runs_to_read

    return read_runs(ctx, runs_to_read(ctx, records))


def attempt_of(rec: PodRecord | None, runs: dict[str, RunRecovery | None]) -> str | None:
    if rec is None or rec.run_id is None:
        return None
    from gpuc.client.pods.recovery.runs import attempt_label

    return attempt_label(rec, runs)


def ledger_intake(
    ctx: Ctx, records: Sequence[WatchdogRecord], runs: dict[str, RunRecovery | None] | None = None
) -> list[str]:
    """Take the watchdog's ends into the ledger. A ledger problem is the ledger's (said so, with its fix),
    never "watchdog unreachable", and never stops `ls` from listing the pods. A recovering run's one row
    closes once its run is done (`runs`: read here when not given)."""
    if runs is None:
        runs = recovering_read(ctx, records)
    try:
        report = ctx.ledger().sync_from_functions(records, runs)
    except GpucError as exc:
        return [f"ledger: {exc.message}" + (f" (fix: {exc.hint})" if exc.hint else "")]
    except OSError as exc:  # a full disk, say: the ends stay with the watchdog until the next try
        return [f"ledger: could not write the ends recorded by the watchdog ({exc.strerror or exc})"]
    taken = [f"ledger: took in {report.closed} end(s) recorded by the pods or the watchdog"] if report.closed else []
    if any(run is not None and run.done for run in runs.values()):
        from gpuc.client.pods.recovery.runs import tidy_kits

        taken += tidy_kits(ctx, runs)
    return taken + [f"ledger: {w}" for w in report.warnings]


def status_warnings(status: StatusResponse) -> list[str]:
    """What `gpuc ls` and `gpuc watchdog status` warn about: a stale reaper (F14), and each provider the
    reaper cannot read (nothing is destroyed there: a frozen pod on it bills unchecked)."""
    warnings = reaper_warnings(status.reaper_last_run, status.reaper_period_s, status.server_time)
    for blind in status.reaper_blind_since:
        lasted = max(0.0, status.server_time - blind.since)
        why = f": {blind.why}" if blind.why else ""
        warnings.append(
            f"the reaper cannot read {blind.provider} since {iso(blind.since)} ({lasted / 60:.0f} min){why}; "
            f"{blind.provider} pods are not watched until it can"
        )
    return warnings


def reaper_warnings(last_run: float | None, period_s: float, now: float) -> list[str]:
    if last_run is None:
        return ["the watchdog's reaper has never run (F14): deploy or serve it"]
    age = now - last_run
    if age > 2 * period_s:
        return [f"the watchdog's reaper last ran {age / 60:.0f} min ago (period {period_s / 60:.0f} min): it is STALE"]
    return []


def dumps_rows(rows: list[dict[str, object]]) -> str:
    def when(key: str, value: object) -> object:
        return iso(value) if key in LS_TIMES and isinstance(value, int | float) else value

    return json.dumps([{k: when(k, v) for k, v in r.items()} for r in rows], indent=2, default=str)
