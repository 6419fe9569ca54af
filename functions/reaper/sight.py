"""What the providers showed in one pass. Every provider read happens here, first, before any decision:
a provider that cannot be read is blind for the pass, and nothing it half-answered is kept. A pod this
store never registered but gpuc named is a stray, kept from first sight; a pod taken for gone that is
listed again is watched again."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpuc.core.pod import Pod, is_gpuc_name
from gpuc.functions.app import Deps, describe
from gpuc.functions.reaper.rules import SILENCE_STATUSES
from gpuc.functions.reaper.state import Pass
from gpuc.functions.store import StoredPod
from gpuc.functions.transitions import revive

# A provider's reads in one pass (its list, a `get` per pod missing from it) end within this many request
# deadlines, or it is blind for the pass.
PASS_READ_FACTOR = 2.0


@dataclass
class Sight:
    """What the providers showed in this pass."""

    pods: dict[str, Pod] = field(default_factory=dict)  # pod id -> live pod of a known record
    gone: set[str] = field(default_factory=set)  # positively gone (absent, and `get` agrees)
    strays: list[tuple[str, Pod]] = field(default_factory=list)  # gpuc pods with no live record
    blind: dict[str, str] = field(default_factory=dict)  # provider -> why it could not be read
    read: list[str] = field(default_factory=list)  # providers listed without error this pass

    def merge(self, other: Sight) -> None:
        self.pods.update(other.pods)
        self.gone |= other.gone
        self.strays += other.strays


def look(deps: Deps, records: list[StoredPod]) -> Sight:
    """Every provider read of the pass, before any decision: a provider that cannot be read is blind
    for this pass, and nothing it half-answered is kept (a `get` that fails after a good list must
    not leave some of its pods "seen" and others "gone")."""
    from gpuc.core.together import read_together

    sight = Sight()
    names = dict.fromkeys([r.provider for r in records] + list(deps.providers.scan))
    # Every provider at once, under one deadline for the pass: a slow or stuck provider is blind for this
    # pass (as one that fails), and never delays the judgement of another's pods.
    parts = read_together(
        {name: partial(look_at, deps, name, [r for r in records if r.provider == name]) for name in names},
        deadline_s=read_deadline_s(deps),
    )
    for name, outcome in parts.items():
        try:
            part = outcome.get()
        except Exception as exc:
            sight.blind[name] = describe(exc, deps)
        else:
            sight.merge(part)
            sight.read.append(name)
    return sight


def read_deadline_s(deps: Deps) -> float:
    """How long a pass waits for one provider's reads (a list, then a `get` per absent pod), each request
    within its own deadline (GPUC_PROVIDER_TIMEOUT_S)."""
    return PASS_READ_FACTOR * deps.settings.provider_timeout_s


def look_at(deps: Deps, name: str, records: list[StoredPod]) -> Sight:
    sight = Sight()
    _look_at(deps, name, records, sight)
    return sight


def _look_at(deps: Deps, name: str, records: list[StoredPod], sight: Sight) -> None:
    provider = deps.providers.get(name)
    known = {r.pod_id for r in records}
    for pod in provider.list_pods():
        if pod.status == "terminated":
            continue
        if pod.id in known:
            sight.pods[pod.id] = pod
        elif pod.managed:  # a stray if gpuc-named; or a record this store took for gone
            sight.strays.append((name, pod))
    for rec in records:
        if rec.pod_id in sight.pods:
            continue
        # Absent from a listing is not proof: a list call that returns too little is how a peer went
        # blind. Only `get` saying "gone" counts.
        current = provider.get(rec.pod_id)
        if current is None or current.status == "terminated":
            sight.gone.add(rec.pod_id)
        else:
            sight.pods[rec.pod_id] = current


def track_status(run: Pass, rec: StoredPod, sight: Sight) -> StoredPod:
    """Remember since when the provider has shown the current status: "stopped for 24 h" is measured
    from the first pass that saw it stopped (never earlier, so never too soon). A pod seen again after
    one pass found it gone was a transient "not found": that note is dropped."""
    pod = sight.pods.get(rec.pod_id)
    if pod is not None and rec.gone_seen_at is not None:
        run.act_on(rec, "cancel", "found at the provider again: not gone")
        if not run.dry_run:
            run.deps.store.update_if(rec.pod_id, {"gone_seen_at": rec.gone_seen_at}, {"gone_seen_at": None})
        rec = rec.model_copy(update={"gone_seen_at": None})
    if pod is None or pod.status == rec.provider_status:
        return rec
    changes: dict[str, Any] = {"provider_status": pod.status, "provider_status_since": run.now}
    if rec.provider_status in SILENCE_STATUSES and pod.status in SILENCE_STATUSES:
        # running <-> exited (RunPod restarts an exited container) is one state for the silence clock:
        # a crash-looping container that never pinged must not restart its clock on every flip.
        changes.pop("provider_status_since")
    if not run.dry_run:
        run.deps.store.update_if(rec.pod_id, {"provider_status": rec.provider_status}, changes)
    return rec.model_copy(update=changes)


def adopt_strays(run: Pass, sight: Sight) -> list[StoredPod]:
    """gpuc pods at a provider that this store never registered (the laptop crashed mid-`up`, F11;
    or the store is new): keep a record from first sight. Their clock starts then, never at their
    creation time: a store that lost its records must not find every healthy pod long overdue. A pod
    this store took for gone (or destroyed) that is listed again is watched again."""
    out: list[StoredPod] = []
    for provider, pod in sight.strays:
        known = run.deps.store.get_pod(pod.id)
        if known is not None:
            if known.state == "destroyed":
                listed_again(run, known, pod)
            continue  # a live record (registered meanwhile) or finished: not a stray
        if not is_gpuc_name(pod.name):
            continue  # both ownership markers, or never touched
        rec = StoredPod(
            pod_id=pod.id,
            provider=provider,
            name=pod.name,
            experiment=pod.experiment or "?",
            gpu=pod.gpu,
            price_per_hour=pod.price_per_hour,
            started_at=pod.created_at,
            registered_at=run.now,
            interruptible=pod.interruptible,
            origin="adopted",
            provider_status=pod.status,
            provider_status_since=run.now,
            deadline_at=run.now + run.deps.settings.max_hours * 3600,  # from first sight, as its other clocks
        )
        if run.dry_run or run.deps.store.adopt(rec):
            sight.pods[pod.id] = pod
            out.append(rec)
    return out


def listed_again(run: Pass, rec: StoredPod, pod: Pod) -> None:
    reason = f"the provider lists it again ({pod.status})"
    run.act_on(rec, "alert", f"taken for gone, but {reason}: watching it again")
    if not run.dry_run:
        revive(run.deps, rec.pod_id, run.now, reason)
