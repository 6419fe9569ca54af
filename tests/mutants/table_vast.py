"""The Vast traps caught before renting: each mutant lets one through, and `tests` must fail on it."""

from __future__ import annotations

from mutant import Mutant

PLAN = "client/pods/plan.py"
VAST = "core/providers/vast.py"
UP = "tests/client/test_plan_vast.py"
SPOT = "tests/providers/test_vast_spot.py"
PROVIDER = "tests/providers/test_vast_provider.py"

MUTANTS_VAST: tuple[Mutant, ...] = (
    Mutant(
        "vast-up-bid-under-floor",
        "`up` rents an offer whose min_bid the bid does not clear (Vast refuses it after the question)",
        PLAN,
        "                best = offer_for_bid(found, spec.bid_per_gpu, spec.gpu_type, spec.gpu_count)\n",
        "",
        (f"{UP}::test_up_refuses_a_bid_under_every_offers_floor_naming_the_floor_and_the_command",),
    ),
    Mutant(
        "vast-up-named-offer-under-floor",
        "`up --offer ID` bids under that offer's min_bid",
        PLAN,
        "    offer_for_bid([found], spec.bid_per_gpu, spec.gpu_type, spec.gpu_count, named=True)\n",
        "",
        (f"{UP}::test_up_refuses_a_bid_under_the_floor_of_the_offer_it_names",),
    ),
    Mutant(
        "vast-provider-bid-under-floor",
        "the provider bids on the cheapest offer whatever its floor",
        VAST,
        "            best = offer_for_bid(found, spec.bid_per_gpu, spec.gpu_type, spec.gpu_count)\n",
        "            pass\n",
        (f"{SPOT}::test_a_bid_under_every_offers_floor_is_refused_before_renting_with_the_floor_and_the_command",),
    ),
    Mutant(
        "vast-busy-fraction-as-percent",
        "a gpu_util of 0.93 (the spec's fraction) read as 0.93 %: a working pod loses its busy veto",
        "core/providers/vast_instances.py",
        "    if util is not None and 0 < util <= 1:\n",
        "    if False:\n",
        (f"{PROVIDER}::test_a_gpu_reading_that_may_be_a_fraction_is_read_as_the_busier_one",),
    ),
)
