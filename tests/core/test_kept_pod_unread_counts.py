"""A kept pod whose provider was not read counts at its worst case as far as it is known: its GPU to its deadline
(a missing reading is no evidence it stopped), its disk listed as unknown; never as a stopped pod, never as $0.
(The watchdog's recovery weighs a re-rent with no reading of other pods: core/budget.py is its whole rule.)"""

from __future__ import annotations

import pytest

from gpuc.core.api import PodRecord
from gpuc.core.budget import ahead_of, outlook
from gpuc.core.ledger.months import current_month, month_window
from gpuc.core.pod import Pod

NOW = 1_790_000_000.0
H = 3600.0
KEPT = PodRecord(
    pod_id="kept-1", provider="vast", name="gpuc-kept-1", experiment="e", price_per_hour=0.5,
    started_at=NOW - H, registered_at=NOW - H, kept_at=NOW - 60,
)  # fmt: skip


def test_an_unread_kept_pod_runs_to_its_deadline_and_counts_its_gpu() -> None:
    ahead = ahead_of(KEPT, deadline=NOW + 4 * H, kept=True, pod=None, now=NOW)
    assert ahead is not None and ahead.until == NOW + 4 * H
    view = outlook([], [ahead], NOW)
    assert view.worst_usd == pytest.approx(2.0) and view.total_usd == pytest.approx(2.0)  # $0.5/h x 4 h
    assert view.crosses(1.5)
    assert view.unknown == ("kept-1 ($0.500/h x 4.0 h to its deadline, then disk unknown $/h to the month's end "
                            "(kept for its results))",)  # fmt: skip


def test_a_kept_pod_read_as_stopped_counts_its_disk_only() -> None:
    stopped = Pod(provider="vast", id="kept-1", name="gpuc-kept-1", status="stopped", disk_gb=50.0,
                  disk_usd_gb_month=0.2)  # fmt: skip
    ahead = ahead_of(KEPT, deadline=NOW + 4 * H, kept=True, pod=stopped, now=NOW)
    assert ahead is not None and ahead.until == NOW
    month_end = month_window(current_month(NOW))[1]
    assert ahead.disk_per_hour is not None
    assert ahead.worst(NOW) == pytest.approx(ahead.disk_per_hour * (month_end - NOW) / H)  # its disk only, no GPU
