"""`gpuc ledger note RUN TEXT`: a conclusion on a run's ledger row, open or closed. Most runs end
themselves (the job exits, the pod syncs and destroys), so `down --note` never sees them.

RUN is what every command takes (client/runs.py RunStore.find: pod id, run id, pod name, or an
experiment's open run, else its latest), and for a run this machine did not start, a pod id of the ledger
or an experiment with one run there. Only the ledger is written: no provider call, since the pod is
usually gone by the time its conclusion is known.
"""

from __future__ import annotations

from gpuc.client.context import Ctx
from gpuc.core.errors import ConfigError, NotFound
from gpuc.core.ledger.rows import LedgerEntry, LedgerRow, check_note
from gpuc.core.ledger.store import Ledger


def add_note(ctx: Ctx, ref: str, text: str) -> str:
    """Write the note; the line to print. Refuses (with the fix) an empty or multi-line note, a RUN that
    names no row, and an experiment name with several runs."""
    note = check_note(text)  # before any lookup: the note's own fault is named first
    book = ctx.ledger()
    pod_id = _pod_of(ctx, book, ref)
    row = book.note(pod_id, note)
    if row is None:  # the row went between the lookup and the write (edited by hand)
        raise NotFound(f"the ledger has no row for pod {pod_id}", hint="`gpuc ledger --month all` lists the rows")
    return f"note added to {pod_id} ({row.experiment}, started {row.start}): {row.note}"


def _pod_of(ctx: Ctx, book: Ledger, ref: str) -> str:
    entries = [e for e in book.entries() if e.pod_id is not None]
    if any(e.pod_id == ref for e in entries):
        return ref
    try:
        pod_id = ctx.runs.find(ref).pod_id  # the one resolver (two open runs of an experiment: refused there)
    except NotFound:
        pod_id = None
    if pod_id is not None and any(e.pod_id == pod_id for e in entries):
        return pod_id
    same = [e for e in entries if e.row.experiment == ref]
    if len(same) == 1 and same[0].pod_id is not None:
        return same[0].pod_id
    if same:
        raise ConfigError(
            f"ambiguous: experiment {ref!r} has {len(same)} runs in the ledger",
            hint="name one by its pod id: " + "; ".join(_run_line(e) for e in same[-5:]),
        )
    raise NotFound(
        f"the ledger has no run {ref!r} (no pod id, pod name, run id or experiment of that name)",
        hint="`gpuc ledger --month all --json` lists the rows; `gpuc ls` the pods running now",
    )


def _run_line(entry: LedgerEntry) -> str:
    row: LedgerRow = entry.row
    return f"{entry.pod_id} (started {row.start}{', running' if not row.end else ''})"
