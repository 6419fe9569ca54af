"""The watchdog's recovery rules for an outbid run: every money rule, one test each."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from gpuc.core.api import AttemptRecord
from gpuc.core.budget import Envelope, attempt_fits, run_envelope_usd, run_spent
from gpuc.core.settingsload import load_settings
from gpuc.functions.recovery.decide import Offer, RecoveryPlan, decide, progress_text, stop_text
from gpuc.functions.recovery.webhook import check_delivery, wants_look

T0 = 1_800_000_000.0
H = 3600.0
DISK = 0.01  # $/h
BID = Offer("901", 0.12, interruptible=True)
PRICEY = Offer("902", 0.20, interruptible=True)
ON_DEMAND = Offer("903", 0.24, interruptible=False)


def plan(recover: int = 2, max_hours: float = 10.0, cap: float | None = None, **kw: bool) -> RecoveryPlan:
    cap = run_envelope_usd(0.12, DISK, max_hours) if cap is None else cap
    return RecoveryPlan(recover, Envelope(T0, max_hours, cap), price_cap=0.12, disk_per_hour=DISK, **kw)


def attempt(
    start: float, price: float, disk: float, paused_at: float | None = None, end: float | None = None
) -> AttemptRecord:
    return AttemptRecord(
        pod_id="p", start=start, price_per_hour=price, disk_per_hour=disk, paused_at=paused_at, end=end
    )


def paused_run(*earlier: AttemptRecord, paused_at: float = T0 + H) -> list[AttemptRecord]:
    start = earlier[-1].end if earlier and earlier[-1].end else T0
    return [*earlier, attempt(start, 0.12, DISK, paused_at=paused_at)]


def after_wait(p: RecoveryPlan, attempts: list[AttemptRecord], now: float, **kw: object) -> str:
    d = decide(p, attempts, "paused", confirmed=True, paused_for_s=301, wait_s=300, now=now, **kw)  # type: ignore[arg-type]
    return d.action


def test_a_paused_pod_waits_for_its_bid_to_win_again_before_anything() -> None:
    d = decide(plan(), paused_run(), "paused", confirmed=True, paused_for_s=120, wait_s=300, now=T0 + H + 120)
    assert d.action == "wait"


def test_one_reading_of_paused_is_not_enough_to_act() -> None:
    d = decide(plan(), paused_run(), "paused", confirmed=False, paused_for_s=900, wait_s=300, now=T0 + 2 * H)
    assert d.action == "none"


def test_after_the_wait_it_rents_the_cheapest_offer_within_the_price_cap() -> None:
    d = decide(plan(), paused_run(), "paused", confirmed=True, paused_for_s=301, wait_s=300,
               now=T0 + H + 301, offers=[PRICEY, BID])  # fmt: skip
    assert (d.action, d.offer, d.why) == ("rerent", BID, "attempt 2 of 3")


def test_a_job_that_exits_is_never_re_rented() -> None:
    d = decide(plan(), paused_run(), "exited", confirmed=True, paused_for_s=9999, wait_s=300, now=T0 + 2 * H,
               offers=[BID])  # fmt: skip
    assert d.action == "none"


def test_recover_zero_is_todays_behaviour() -> None:
    assert after_wait(plan(recover=0), paused_run(), T0 + 2 * H, offers=[BID]) == "none"


def test_it_stops_after_n_recoveries() -> None:
    first = attempt(T0, 0.12, DISK, paused_at=T0 + H, end=T0 + H + 400)
    second = attempt(T0 + H + 400, 0.12, DISK, paused_at=T0 + 2 * H, end=T0 + 2 * H + 400)
    third = attempt(T0 + 2 * H + 400, 0.12, DISK, paused_at=T0 + 3 * H)
    assert after_wait(plan(recover=2), [first, second, third], T0 + 3 * H + 301, offers=[BID]) == "stop"
    assert after_wait(plan(recover=3), [first, second, third], T0 + 3 * H + 301, offers=[BID]) == "rerent"


def test_the_deadline_counts_from_the_first_attempt_not_this_one() -> None:
    p = plan(max_hours=2.0)
    first = attempt(T0, 0.12, DISK, paused_at=T0 + 2 * H - 100, end=T0 + 2 * H + 1)
    assert after_wait(p, paused_run(first, paused_at=T0 + 2 * H + 1), T0 + 2 * H + 302, offers=[BID]) == "stop"


def test_the_next_attempts_worst_case_must_fit_the_envelope() -> None:
    p = plan(max_hours=10.0, cap=1.0)  # spent 0.13 after an hour; 9 h more at 0.13/h = 1.17: over
    assert after_wait(p, paused_run(), T0 + H + 301, offers=[BID]) == "stop"
    roomy = plan(max_hours=10.0, cap=1.40)
    assert after_wait(roomy, paused_run(), T0 + H + 301, offers=[BID]) == "rerent"


def test_the_budget_left_bounds_the_next_attempt() -> None:
    assert after_wait(plan(), paused_run(), T0 + H + 301, offers=[BID], budget_left_usd=0.5) == "stop"
    assert after_wait(plan(), paused_run(), T0 + H + 301, offers=[BID], budget_left_usd=5.0) == "rerent"


def test_no_offer_within_the_price_cap_stops() -> None:
    assert after_wait(plan(), paused_run(), T0 + H + 301, offers=[PRICEY, ON_DEMAND]) == "stop"
    # even when the money would allow it: the cap is the user's bid, never raised by the watchdog
    assert after_wait(plan(cap=50.0), paused_run(), T0 + H + 301, offers=[PRICEY]) == "stop"


def test_the_phone_stops_recovery_at_once() -> None:
    d = decide(plan(), paused_run(), "paused", confirmed=True, paused_for_s=10, wait_s=300, now=T0 + H + 10,
               offers=[BID], stop_asked=True)  # fmt: skip
    assert d.action == "stop" and "you stopped" in d.why


def test_the_last_recovery_goes_on_demand_only_when_asked_and_the_envelope_allows() -> None:
    roomy = run_envelope_usd(0.24, DISK, 10.0)
    asked = decide(plan(recover=1, cap=roomy, on_demand_last=True), paused_run(), "paused", confirmed=True,
                   paused_for_s=301, wait_s=300, now=T0 + H + 301, offers=[BID, ON_DEMAND])  # fmt: skip
    assert asked.offer == ON_DEMAND
    tight = decide(plan(recover=1, on_demand_last=True), paused_run(), "paused", confirmed=True,
                   paused_for_s=301, wait_s=300, now=T0 + H + 301, offers=[BID, ON_DEMAND])  # fmt: skip
    assert tight.offer == BID  # on-demand's worst case would not fit: the bid it is


def test_a_paused_instance_bills_its_disk_and_no_gpu() -> None:
    a = attempt(T0, 0.12, DISK, paused_at=T0 + H)
    assert a.cost(T0 + 2 * H) == pytest.approx(0.12 + 2 * DISK)
    gone = attempt(T0, 0.12, DISK, paused_at=T0 + H, end=T0 + H + 300)
    assert gone.cost(T0 + 5 * H) == pytest.approx(0.12 + DISK * (H + 300) / H)


def test_recoveries_held_to_the_price_cap_stay_inside_one_pods_worst_case() -> None:
    env = Envelope(T0, 10.0, run_envelope_usd(0.12, DISK, 10.0))
    attempts: list[AttemptRecord] = []
    now = T0
    for _ in range(5):  # outbid every 2 h, 5 min wait, re-rent at the cap
        assert attempt_fits(attempts, 0.12, DISK, env, now)
        attempts.append(attempt(now, 0.12, DISK, paused_at=now + 2 * H - 300, end=now + 2 * H))
        now += 2 * H
    assert run_spent(attempts, now) <= env.cap_usd


def test_the_phone_hears_attempt_and_money_and_the_stop_says_what_was_kept() -> None:
    p = plan(recover=2, cap=2.40)
    text = progress_text(p, [attempt(T0, 0.30, 0.01, paused_at=T0 + H)], T0 + H)
    assert text == "outbid: recovering, attempt 2 of 3, $0.31 spent of $2.40"
    d = decide(p, paused_run(), "paused", confirmed=True, paused_for_s=301, wait_s=300, now=T0 + H + 301)
    assert stop_text(d, "s3://b/runs/r1") == (
        "recovery stopped: no offer at or under your price cap ($0.12/h); the paused instance is destroyed; "
        "the last results pushed are kept at s3://b/runs/r1"
    )


def test_recover_wait_defaults_to_five_minutes_and_takes_units() -> None:
    assert load_settings({}).recover_wait_s == 300.0
    assert load_settings({"GPUC_RECOVER_WAIT_S": "2m"}).recover_wait_s == 120.0


SECRET = "whsec"


def signed(
    body: dict[str, object], stamp: float, secret: str = SECRET, event: str = "evt_1"
) -> tuple[dict[str, str], bytes]:
    raw = json.dumps(body).encode()
    mac = hmac.new(secret.encode(), f"{int(stamp)}.".encode() + raw, hashlib.sha256).hexdigest()
    # As Vast sends it (vast-ai/docs notification-webhooks.mdx): `sha256=` and the hex digest, in the -256 header
    return {"X-Vast-Timestamp": str(int(stamp)), "X-Vast-Signature-256": f"sha256={mac}", "X-Vast-Event-Id": event}, raw


OUTBID = {"event_id": "evt_1", "notif_type": "outbid", "message": "outbid", "timestamp": T0}


@pytest.mark.parametrize(
    ("case", "headers_body", "now"),
    [
        ("forged", signed(OUTBID, T0, secret="not-ours"), T0),
        ("stale", signed(OUTBID, T0), T0 + 301),
        ("future", signed(OUTBID, T0 + 400), T0),
        ("body-changed", (signed(OUTBID, T0)[0], b'{"notif_type": "outbid", "x": 1}'), T0),
        ("unsigned", ({"X-Vast-Event-Id": "e"}, json.dumps(OUTBID).encode()), T0),
    ],
    ids=["forged", "stale", "future", "body-changed", "unsigned"],
)
def test_a_forged_stale_or_altered_webhook_is_refused(
    case: str, headers_body: tuple[dict[str, str], bytes], now: float
) -> None:
    headers, body = headers_body
    out = check_delivery(headers, body, secret=SECRET, now=now, first_time=lambda _e: True)
    assert isinstance(out, str) and not wants_look(out), case


def test_a_replayed_webhook_is_ignored_and_a_good_one_only_asks_for_a_look() -> None:
    seen: set[str] = set()

    def first_time(event_id: str) -> bool:
        new = event_id not in seen
        seen.add(event_id)
        return new

    headers, body = signed(OUTBID, T0)
    assert wants_look(check_delivery(headers, body, secret=SECRET, now=T0 + 10, first_time=first_time))
    assert not wants_look(check_delivery(headers, body, secret=SECRET, now=T0 + 20, first_time=first_time))


def test_the_signature_is_read_as_vast_sends_it_and_nothing_else() -> None:
    """`X-Vast-Signature-256: sha256=<hex>` (vast-ai/docs notification-webhooks.mdx): the same digest bare, or
    under the old `X-Vast-Signature` name, is not Vast's delivery."""
    headers, body = signed(OUTBID, T0)
    digest = headers["X-Vast-Signature-256"].removeprefix("sha256=")
    bare = {k: v for k, v in headers.items() if k != "X-Vast-Signature-256"}
    for wrong in ({**bare, "X-Vast-Signature-256": digest}, {**bare, "X-Vast-Signature": digest}):
        assert isinstance(check_delivery(wrong, body, secret=SECRET, now=T0, first_time=lambda _e: True), str)
    taken = check_delivery(headers, body, secret=SECRET, now=T0, first_time=lambda _e: True)
    assert wants_look(taken)


def test_the_short_slug_is_an_outbid_and_a_test_delivery_is_not() -> None:
    """The body's notif_type is the short slug (`outbid`); `webhook_test` is Vast's signed test delivery."""
    for notif, look in (("outbid", True), ("webhook_test", False), ("low_credit", False)):
        headers, body = signed({**OUTBID, "notif_type": notif}, T0)
        assert wants_look(check_delivery(headers, body, secret=SECRET, now=T0, first_time=lambda _e: True)) is look
