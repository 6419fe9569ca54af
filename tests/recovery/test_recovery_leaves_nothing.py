"""What a recovering run leaves in the watchdog's store once it ends, whatever ends it, and a year later:
no secret of its kit (HF_TOKEN and the other allowlisted ones, a presigned URL's signature), and no Vast
webhook dedupe record past its 300 s window. Both stores: SQLite read as a file (its WAL too), DynamoDB
scanned whole (moto; its TTL attribute stands for the deletion AWS does)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fakes.watchdog import moto_store

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.functions.dynamo import TTL_ATTRIBUTE, DynamoStore
from gpuc.functions.recovery import routes, webhook
from gpuc.functions.store import SqliteStore
from gpuc.testkit.spot_world import PLANTED_SECRET, RUN_ID, WAIT_S, RecWorld, make_rec_world

YEAR_S = 366 * 24 * 3600.0
SIGNATURE = "PLANTEDpresignedSIGNATURE0123456789"
HOOK_SECRET = "vast-webhook-secret-for-tests-0123"


@pytest.fixture(params=["sqlite", "dynamodb"])
def world(request: pytest.FixtureRequest, home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    settings: dict[str, Any] = {"vast_webhook_secret": HOOK_SECRET, "destroy_grace_s": 60.0}
    with ExitStack() as stack:
        store = None if request.param == "sqlite" else stack.enter_context(moto_store())
        w = make_rec_world(home, clock, store=store, **settings)
        w.emu.webhook_secret = HOOK_SECRET
        w.kit_url = f"https://bucket.s3.amazonaws.com/.gpuc-kits/{RUN_ID}/gpuc.whl?X-Amz-Signature={SIGNATURE}"
        yield w
        w.close()


def stored_text(world: RecWorld) -> str:
    """Everything the store holds, as text: SQLite's file and WAL bytes, or every DynamoDB item."""
    store = world.store
    if isinstance(store, SqliteStore):
        files = [Path(store.path), Path(store.path + "-wal")]
        return "".join(f.read_bytes().decode("latin-1") for f in files if f.exists())
    assert isinstance(store, DynamoStore)
    return str(scan(store))


def scan(store: DynamoStore) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = store.client.scan(TableName=store.table, **kwargs)
        items += page.get("Items", [])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def job_ends(world: RecWorld) -> None:
    pod_id = world.latest()
    end = api.EndRequest(end_at=world.now, by="wrapper", note="job exited 0")
    assert world.admin("POST", f"/v1/pods/{pod_id}/end", end.model_dump_json().encode()).status == 200
    world.vast.destroy(pod_id)


def stopped_from_the_phone(world: RecWorld) -> None:
    assert routes.ask_stop(world.deps, RUN_ID)
    world.outbid()


def outbid_past_n(world: RecWorld) -> None:
    world.outbid()  # attempt 2 of 2 (--recover 1) outbid: recovery stops after the wait
    world.reap()
    world.clock.advance(WAIT_S + 1)


def the_re_rent_fails(world: RecWorld) -> None:
    for offer in world.emu.offers.values():
        offer.min_bid = 5.0  # no offer under the cap: the run ends after the paused instance's destroy
    world.outbid()
    world.reap()
    world.clock.advance(WAIT_S + 1)


ENDINGS: dict[str, Callable[[RecWorld], None]] = {
    "the job's own end": job_ends,
    "a stop from the phone": stopped_from_the_phone,
    "outbid past --recover": outbid_past_n,
    "a re-rent that cannot rent": the_re_rent_fails,
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_an_ended_run_leaves_no_secret_in_the_store_then_or_a_year_later(world: RecWorld, ending: str) -> None:
    world.up(recover=1)
    world.outbid()
    # A signed Vast delivery: its dedupe record is kept for the signature's window only.
    (delivery,) = world.emu.webhooks
    assert world.call("POST", "/v1/hooks/vast", delivery.body, dict(delivery.headers)).status == 200
    world.reap()
    world.clock.advance(WAIT_S + 1)
    world.reap()  # attempt 2, booted: its kit (and secrets) handed over once
    new = world.latest()
    assert world.boot(new, world.ticket_of(new)).status == 200
    assert PLANTED_SECRET in stored_text(world)  # the search can find: it is there while the run lives
    ENDINGS[ending](world)
    for _ in range(3):
        world.clock.advance(120)
        world.reap()
    run = world.run()
    assert run.done, ending
    text = stored_text(world)
    assert PLANTED_SECRET not in text and SIGNATURE not in text, ending
    assert run.request.kit.secrets == {} and "?" not in run.request.kit.wheel_url
    assert api.RunRecovery.model_validate(world.admin("GET", f"/v1/runs/{RUN_ID}").body).attempts  # kept for the ledger
    world.clock.advance(YEAR_S)
    world.reap()
    text = stored_text(world)
    assert PLANTED_SECRET not in text and SIGNATURE not in text
    assert not once_records(world, live_at=world.now), "a webhook's dedupe record outlived its window"


def once_records(world: RecWorld, *, live_at: float) -> list[str]:
    """The webhook dedupe records the store would still answer from at `live_at`: none once the window ends.
    SQLite sweeps them; on DynamoDB, TTL deletes what `expires_at` says has expired (moto does not delete)."""
    store = world.store
    if isinstance(store, SqliteStore):
        rows = store._db.execute("SELECT key FROM seen_once").fetchall()
        legacy = store._db.execute("SELECT key FROM meta WHERE key LIKE 'vasthook:%'").fetchall()
        return [r[0] for r in rows] + [r[0] for r in legacy]
    assert isinstance(store, DynamoStore)
    return [
        i["sk"]["S"] for i in scan(store) if i["pk"]["S"].startswith("once#") and float(i[TTL_ATTRIBUTE]["N"]) > live_at
    ]


def test_a_dedupe_record_expires_with_the_signature_window(world: RecWorld) -> None:
    world.up()
    world.outbid()
    (delivery,) = world.emu.webhooks
    assert world.call("POST", "/v1/hooks/vast", delivery.body, dict(delivery.headers)).status == 200
    assert once_records(world, live_at=world.now)  # kept while a replay is still fresh
    world.clock.advance(webhook.WINDOW_S + 2)
    world.reap()  # the pass sweeps (SQLite); DynamoDB's TTL has passed
    assert once_records(world, live_at=world.now) == []


def test_an_older_gpucs_dedupe_records_are_swept(home: Path, clock: FakeClock) -> None:
    """An older gpuc kept each delivery's id as a meta record for ever: SQLite's sweep removes them."""
    world = make_rec_world(home, clock)
    try:
        world.store.put_meta("vasthook:evt_000001", {"at": world.now}, None)
        world.reap()
        assert world.store.get_meta("vasthook:evt_000001") is None
    finally:
        world.close()
