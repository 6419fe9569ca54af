"""Every reference in the code resolves: a failure-matrix row cited in a comment (F5, F11s ...) is a row of
docs/failure-matrix.md (made from the drill's rows), and no comment cites a tracker issue by number, which
a reader of the repository cannot open: the reason is written out instead."""

from __future__ import annotations

import re
from collections.abc import Iterator

from gpuc.testkit import docgen

ROOT = docgen.ROOT
FOLDERS = ("core", "client", "functions", "instance_side", "testkit", "tests", "bench", "infra")
ROW = re.compile(r"\bF\d+[a-z]*\b")
NOQA = re.compile(r"#\s*noqa(?::\s*[A-Z]+\d+(?:\s*,\s*[A-Z]+\d+)*)?")  # a noqa's codes are ruff's, not rows
TRACKER = re.compile(r"\b[Ii]ssues? \d+")


def python_lines() -> Iterator[tuple[str, int, str]]:
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                yield rel, n, line


def matrix_rows() -> set[str]:
    page = (ROOT / "docs" / "failure-matrix.md").read_text(encoding="utf-8")
    return set(re.findall(r'<a id="(f\d+[a-z]*)"></a>', page))


def test_every_cited_row_is_in_the_failure_matrix() -> None:
    rows = matrix_rows()
    assert {"f1", "f5", "f11s", "f26f"} <= rows  # the page is read as it is made
    unknown = [
        f"{rel}:{n}: {cited}"
        for rel, n, line in python_lines()
        for cited in ROW.findall(NOQA.sub("", line))
        if cited.lower() not in rows
    ]
    assert unknown == [], "rows cited in the code but not in docs/failure-matrix.md"


def test_no_comment_cites_a_tracker_issue_by_number() -> None:
    cited = [f"{rel}:{n}: {line.strip()}" for rel, n, line in python_lines() if TRACKER.search(line)]
    assert cited == [], "write the reason itself, not the issue's number"


def test_the_checks_see_a_bad_citation() -> None:
    row, issue = "F" + "99z", "iss" + "ue 12"  # spelt apart, so this file does not cite them itself
    assert ROW.findall(NOQA.sub("", f"x = 1  # noqa: F401, F811 see {row}")) == [row]
    assert TRACKER.search(f"# see {issue} for why")
