"""The mutant table stays applicable (part of `make test`; `make mutants` runs the mutants themselves):
code that moves under a mutant must update the table, never turn the mutant into a silent no-op."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mutant import Mutant
from run import ROOT, check, folders, in_parallel, main, run_mutant, tracked_changes
from table import MUTANTS


def test_every_mutant_applies_exactly_once_and_names_existing_tests() -> None:
    assert len({m.id for m in MUTANTS}) == len(MUTANTS), "mutant ids are unique"
    problems = {m.id: why for m in MUTANTS if (why := check(m)) is not None}
    assert problems == {}


def test_every_mutant_compiles() -> None:
    for mutant in MUTANTS:
        text = (ROOT / mutant.file).read_text(encoding="utf-8").replace(mutant.original, mutant.mutated, 1)
        compile(text, mutant.file, "exec")  # a syntax error would count as an error, not a kill


def test_a_run_puts_the_file_back_byte_for_byte_even_when_pytest_fails(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text("SAFE = True\n")
    (tmp_path / "test_mod.py").write_text("from mod import SAFE\n\n\ndef test_safe() -> None:\n    assert SAFE\n")
    before = (tmp_path / "mod.py").stat().st_mtime_ns
    mutant = Mutant("m", "unsafe", "mod.py", "SAFE = True", "SAFE = False", ("test_mod.py",))
    outcome, _ = run_mutant(mutant, tmp_path, timeout_s=120, tests=["test_mod.py", "--rootdir", str(tmp_path)])
    assert outcome == "killed"
    assert (tmp_path / "mod.py").read_text() == "SAFE = True\n"
    assert (tmp_path / "mod.py").stat().st_mtime_ns == before  # the cached bytecode of the original stays valid


def test_it_refuses_a_dirty_tree_before_touching_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "f.py").write_text("x = 1\n")
    git("add", "f.py")
    git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "c")
    assert tracked_changes(tmp_path) == []
    (tmp_path / "f.py").write_text("x = 2\n")
    assert tracked_changes(tmp_path) == [" M f.py"]
    assert main(["--only", "dry-destroy"], root=tmp_path) == 2
    assert "refusing to run" in capsys.readouterr().err
    assert (tmp_path / "f.py").read_text() == "x = 2\n"


def test_a_mutant_is_also_run_against_the_folders_of_its_tests() -> None:
    mutant = Mutant("m", "x", "f.py", "a", "b", ("tests/functions/test_a.py::test_x", "tests/aws/test_b.py"))
    assert folders(mutant) == ["tests/aws", "tests/functions"]
    assert all(folders(m) and all((ROOT / f).is_dir() for f in folders(m)) for m in MUTANTS)


def test_a_failure_under_xdist_is_a_kill(tmp_path: Path) -> None:
    """The folder runs use pytest-xdist, where -x ends a run with exit 2 (interrupted), not 1."""
    (tmp_path / "mod.py").write_text("SAFE = True\n")
    (tmp_path / "test_mod.py").write_text("from mod import SAFE\n\n\ndef test_safe() -> None:\n    assert SAFE\n")
    mutant = Mutant("m", "unsafe", "mod.py", "SAFE = True", "SAFE = False", ("test_mod.py",))
    tests = [*in_parallel(2), "test_mod.py", "--rootdir", str(tmp_path)]
    assert run_mutant(mutant, tmp_path, timeout_s=120, tests=tests)[0] == "killed"
