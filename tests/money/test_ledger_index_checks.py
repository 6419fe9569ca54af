"""The ledger's index is read without pydantic (startup of `gpuc ledger` and `gpuc ls`): each hand-written
check in core/ledger/book.py `index_entry` has a case here that a missing check would let through. An index
gpuc cannot trust is a ConfigError with its fix, never a row closed on a guess."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fakes.money import T0

from gpuc.core.errors import ConfigError
from gpuc.core.ledger.store import Ledger

Entry = dict[str, Any]


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "gpu-ledger.csv")
    ledger.start("pod1", provider="runpod", experiment="exp", gpu="RTX 4090", price_per_hour=0.5, start_ts=T0)
    return ledger


def edit_entry(book: Ledger, change: Callable[[Entry], object]) -> None:
    index = json.loads(book.index_path.read_text(encoding="utf-8"))
    replaced = change(index["pods"]["pod1"])
    if replaced is not None:
        index["pods"]["pod1"] = replaced
    book.index_path.write_text(json.dumps(index), encoding="utf-8")


BROKEN: dict[str, Callable[[Entry], object]] = {
    "entry not an object": lambda e: ["row", 0],
    "row not an integer": lambda e: e.update(row="0"),
    "row a bool": lambda e: e.update(row=False),
    "committed not a bool": lambda e: e.update(committed="yes"),
    "start_row not an object": lambda e: e.update(start_row="2026-01-01,exp"),
    "start_row unknown column": lambda e: e["start_row"].update(pod="pod1"),
    "start_row missing column": lambda e: e["start_row"].pop("start"),
    "start_row cell not text": lambda e: e["start_row"].update(price_per_hour=0.5),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_an_index_entry_of_the_wrong_shape_is_refused(book: Ledger, case: str) -> None:
    edit_entry(book, BROKEN[case])
    with pytest.raises(ConfigError) as err:
        book.end("pod1", end_ts=T0 + 3600)
    assert "is not a gpuc ledger index" in err.value.message and err.value.hint and "mv" in err.value.hint
    assert book.path.read_text(encoding="utf-8").splitlines()[1].endswith(",,,")  # nothing closed on a guess


def test_what_the_index_may_leave_out_or_add_is_read(book: Ledger) -> None:
    """A newer gpuc's extra key in an entry is ignored; `committed` defaults to true; the last three columns
    of the start row may be missing (the pydantic model's defaults, kept)."""

    def loosen(entry: Entry) -> None:
        entry["written_by"] = "gpuc 9"
        del entry["committed"]
        for column in ("end", "cost_usd", "note"):
            entry["start_row"].pop(column, None)

    edit_entry(book, loosen)
    closed = book.end("pod1", end_ts=T0 + 3600)
    assert closed is not None and closed.end and closed.cost_usd == "0.5000"
