"""The status page's mutants stay applicable (issue 25.12): code that moves under one must update it, never
turn it into a silent no-op. Running them (a pytest run each, the file mutated in place) is `make mutants`'
job once the lead merges MUTANTS_PAGE into the table, never the test suite's."""

from __future__ import annotations

from run import ROOT, check
from table import MUTANTS
from table_page import MUTANTS_PAGE


def test_every_page_mutant_applies_once_names_existing_tests_and_is_new() -> None:
    assert len({m.id for m in MUTANTS_PAGE}) == len(MUTANTS_PAGE)
    assert {m.id for m in MUTANTS_PAGE}.isdisjoint({m.id for m in MUTANTS})
    assert {m.id: why for m in MUTANTS_PAGE if (why := check(m)) is not None} == {}


def test_every_page_mutant_compiles() -> None:
    for mutant in MUTANTS_PAGE:
        text = (ROOT / mutant.file).read_text(encoding="utf-8").replace(mutant.original, mutant.mutated, 1)
        compile(text, mutant.file, "exec")
