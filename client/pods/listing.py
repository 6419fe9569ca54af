"""`gpuc ls` as a table: one line per pod, then one line per provider that was NOT read.

"no pods" is printed only when every provider was read: a provider without a key was never asked, and
an empty table over an unread account is how a forgotten pod stays forgotten. Otherwise the line names the
providers that were read ("no pods at local, runpod"); one the user never set up or asked for gets no line
of its own (client/pods/survey.py asked_for).

Every cell and state is cleaned of terminal controls (core/termsafe.py): names, statuses and the
providers' own texts are the pod's or the provider's word, and a pod on Vast is a stranger's machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuc.client.text import clock_utc, render_table, short_span, table_width
from gpuc.core.providers.registry import KEY_FIELDS
from gpuc.core.termsafe import clean_line

if TYPE_CHECKING:
    from gpuc.client.pods.survey import Listing

# SPENT: price x age so far, an estimate (a stopped pod bills less); `gpuc ledger` keeps the record.
# Times in the WATCHDOG column are UTC, like every time gpuc prints.
# $/H: what the pod bills now (a stopped pod: its disk). NEXT: what ends it or keeps it billing.
HEADERS = ("PROVIDER", "ID", "EXPERIMENT", "STATUS", "GPU", "AGE", "$/H", "SPENT", "WATCHDOG (UTC)", "NEXT")
RIGHT = (5, 6, 7)
# What gives way when the table is too wide, in order (each down to its floor; `--json` has it all).
# Ids and prices are never cut: an id is what `gpuc down` takes.
SHRINK = {2: 10, 4: 8, 8: 16, 3: 8, 9: 24}
_VENDOR_WORDS = ("NVIDIA ", "GeForce ")


def short_gpu(name: object, count: object) -> str:
    if not isinstance(name, str) or not name:
        return "-"
    from gpuc.core.catalog import find_gpu  # small, stdlib only; loaded when there is a row to show

    spec = find_gpu(name)
    label = spec.key if spec else name
    for word in _VENDOR_WORDS:
        label = label.replace(word, "")
    return f"{count}x {label}" if isinstance(count, int) and count > 1 else label


def watchdog_view(row: dict[str, object], answered: bool, now: float) -> str:
    """What the watchdog thinks of the pod, in a few words."""
    if not row.get("managed"):
        return "not gpuc's"
    if not answered:
        return "?"
    state = row.get("watchdog")
    if state is None:
        return "not registered"
    seen = row.get("heartbeat_age_s")
    seen_text = f"seen {short_span(seen)} ago" if isinstance(seen, int | float) else "no heartbeat yet"
    destroy_at = row.get("destroy_at")
    if state == "ok":
        text = f"ok, {seen_text}"
    elif state == "late":
        text = f"LATE, {seen_text}"
    elif state == "down" and isinstance(destroy_at, int | float):
        text = f"DOWN: destroy at {_hhmm(destroy_at, now)}"
    else:
        text = str(state).upper() if state in ("down", "destroying") else str(state)
    lease = row.get("lease_until")
    if isinstance(lease, int | float):
        text += f"; kept to {_hhmm(lease, now)}"
    return text


def next_view(row: dict[str, object], now: float) -> str:
    """What costs money next, in its own words: KEPT, stopped, or the deadline and the idle watch."""
    price, left = row.get("price_per_hour"), row.get("kept_left_s")
    if row.get("kept"):
        text = f"KEPT (sync failed): billing ${price:.2f}/h" if isinstance(price, int | float) else "KEPT (sync failed)"
        return text + (f", stops in {short_span(left)}" if isinstance(left, int | float) else "")
    if row.get("status") in ("stopped", "exited"):
        disk = row.get("disk_per_hour")
        return f"stopped: disk ${disk:.3f}/h" if isinstance(disk, int | float) else "stopped: its disk bills"
    parts = []
    attempt = row.get("attempt")  # a recovering run's pod (`up --recover`): "attempt 2/3"
    if isinstance(attempt, str):
        parts.append(attempt)
    warm = row.get("warm_s")
    if isinstance(warm, int | float):
        parts.append(warm_view(row, warm))
    deadline = row.get("deadline_at")
    if isinstance(deadline, int | float):
        parts.append(f"deadline in {short_span(deadline - now)}")
    idle, ends = row.get("idle_s"), row.get("idle_destroy_in_s")
    if isinstance(warm, int | float):
        pass  # said above, in a warm pod's words
    elif row.get("busy"):
        parts.append("busy")
    elif isinstance(idle, int | float) and isinstance(ends, int | float):
        parts.append(f"idle {short_span(idle)}, ends in {short_span(ends)}")
    return "; ".join(parts) or "-"


def warm_view(row: dict[str, object], warm: float) -> str:
    """A warm pod (`up --warm`): a job running, or how long it has had none and when its warm time ends it."""
    head = f"warm {short_span(warm)}"
    idle, ends = row.get("idle_s"), row.get("idle_destroy_in_s")
    if row.get("job_running"):
        return f"{head}: job running"
    if row.get("busy") is False and isinstance(idle, int | float) and isinstance(ends, int | float):
        return f"{head}: no job for {short_span(idle)}, ends in {short_span(ends)}"
    return f"{head}: no job, busy" if row.get("busy") else head


def _hhmm(ts: float, now: float) -> str:
    return clock_utc(ts, now).removesuffix(" UTC")  # the header says UTC once


def cells(row: dict[str, object], answered: bool, now: float) -> list[str]:
    price, age, cost = row.get("billing_per_hour", row.get("price_per_hour")), row.get("age_s"), row.get("cost_usd")
    return [
        clean_line(cell)
        for cell in (
            row.get("provider"),
            row.get("id"),
            row.get("experiment") or "-",
            row.get("status"),
            short_gpu(row.get("gpu"), row.get("gpu_count")),
            short_span(age) if isinstance(age, int | float) else "?",
            f"{price:.2f}" if isinstance(price, int | float) else "?",
            f"{cost:.2f}" if isinstance(cost, int | float) else "?",
            watchdog_view(row, answered, now),
            next_view(row, now),
        )
    ]


def ls_lines(listing: Listing, width: int | None = None) -> list[str]:
    """`width`: the table's (default: table_width(), the terminal's or none)."""
    unread = [(name, state) for name, state in listing.providers.items() if state != "read"]
    if not listing.rows:
        read = [name for name, state in listing.providers.items() if state == "read"]
        if not unread and set(read) >= {"local", *KEY_FIELDS}:
            return ["no pods"]
        lines = [f"no pods at {', '.join(read)}" if read else "no provider could be read"]
    else:
        rows = [cells(r, listing.watchdog, listing.now) for r in listing.rows]
        # A wider terminal shows NEXT whole (what costs money); a pipe or a file gets every cell whole.
        lines = render_table(HEADERS, rows, shrink=SHRINK, right=RIGHT, width=table_width() if width is None else width)
    width = max(len(name) for name, _ in unread) if unread else 0
    return lines + [f"{name:<{width}}  {clean_line(state)}" for name, state in unread]
