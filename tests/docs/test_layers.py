"""The layers hold: lint-imports keeps every contract in pyproject.toml (lazy imports inside functions
count), and docs/architecture.json says the same layers the contracts check, so the picture cannot drift
from the proof. `make test` runs lint-imports too; this file lets `make quick` catch a broken layer."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

from gpuc.testkit import docgen

ROOT = docgen.ROOT


def contracts() -> dict[str, dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


@contextlib.contextmanager
def logging_as_it_was() -> Iterator[None]:
    """lint-imports configures logging with dictConfig, whose default disables every logger that exists: run
    in this process, it switched gpuc's loggers off for every test after it in the worker (a test that reads
    what the watchdog logs then failed in the full run and passed alone). Each logger is put back."""
    loggers = [
        logging.getLogger(),
        *(g for g in logging.Logger.manager.loggerDict.values() if isinstance(g, logging.Logger)),
    ]
    saved = [(g, g.disabled, g.level, g.propagate, list(g.handlers)) for g in loggers]
    try:
        yield
    finally:
        for logger, disabled, level, propagate, handlers in saved:
            logger.disabled, logger.level, logger.propagate, logger.handlers = disabled, level, propagate, handlers
        for made in logging.Logger.manager.loggerDict.values():
            if isinstance(made, logging.Logger) and made not in loggers:
                made.handlers = []  # its handler writes to the stdout this test redirected


def test_every_import_contract_is_kept(tmp_path: Path) -> None:
    from importlinter.cli import lint_imports

    out = io.StringIO()
    cwd = Path.cwd()
    os.chdir(ROOT)  # lint-imports reads the contracts from the pyproject.toml where it runs
    try:
        with logging_as_it_was(), contextlib.redirect_stdout(out):
            code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
    assert code == 0, out.getvalue()[-4000:]


def test_the_architecture_page_states_the_contracts_layers() -> None:
    picture = json.loads((ROOT / "docs" / "architecture.json").read_text(encoding="utf-8"))
    held = contracts()
    assert picture["layers"] == held["layers"]["layers"]
    assert [picture["outside_the_product"]] == held["testkit"]["forbidden_modules"]
    # No waiver: nothing of the product imports the test kit, and no cycle is ignored at any level.
    assert "ignore_imports" not in held["testkit"] and "ignore_imports" not in held["acyclic"]
    assert picture["may_reach_the_test_kit"] == []
    assert held["acyclic"]["type"] == "acyclic_siblings" and held["acyclic"]["ancestors"] == ["gpuc"]
    assert set(picture["parts"]) == {"gpuc.core", "gpuc.instance_side", "gpuc.functions", "gpuc.client", "gpuc.testkit"}
