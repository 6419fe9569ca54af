"""The docs hold: every link in README.md and docs/ reaches a file of this repository (and its anchor),
none points outside it, and the pages made from the code (testkit/docgen.py) are what the code makes now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuc.testkit import docgen

ROOT = docgen.ROOT
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "infra" / "README.md"]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_BYTES = 8 * 1024


def gh_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (but - and _), spaces to -."""
    text = re.sub(r"`|\*\*|<[^>]+>", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(gh_slug(line.lstrip("#")))
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return LINK.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_a_page_of_this_repository_and_its_anchor(page: Path) -> None:
    dead = []
    for target in links(page):
        if re.match(r"[a-z]+://|mailto:", target):
            continue  # the web: not ours to check offline
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.is_relative_to(ROOT):
            dead.append(f"{target} (outside the repository)")
        elif not where.exists():
            dead.append(f"{target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            dead.append(f"{target} (no such heading)")
    assert not dead, f"{page.relative_to(ROOT)}: " + "; ".join(dead)


def test_the_readme_is_a_few_pages() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= README_MAX_BYTES


@pytest.mark.parametrize("name", ["commands.md", "settings.md"])
def test_a_page_made_from_the_code_is_current(name: str) -> None:
    made = docgen.PAGES[name]()
    assert (ROOT / "docs" / name).read_text(encoding="utf-8") == made, (
        f"docs/{name} is out of date: run `python -m gpuc.testkit.docgen {name}`"
    )


def test_the_slug_is_githubs() -> None:
    assert gh_slug("What it costs on AWS (10 pods, one ping a minute, reaper every 5 min)") == (
        "what-it-costs-on-aws-10-pods-one-ping-a-minute-reaper-every-5-min"
    )
    assert gh_slug("`gpuc up`") == "gpuc-up"
