"""The docs hold: every link in README.md and docs/ reaches a file of this repository (and its anchor),
none points outside it, and the pages made from the code (testkit/docgen.py) are what the code makes now."""

from __future__ import annotations

import re
from pathlib import Path

import click
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


def _click_version() -> tuple[int, ...]:
    from importlib.metadata import version

    return tuple(int(part) for part in version("click").split(".")[:2])


@pytest.mark.skipif(_click_version() < (8, 5), reason="docgen renders the usage lines as click 8.5 does")
def test_the_usage_lines_docgen_renders_are_clicks_own() -> None:
    """docgen renders every usage line itself (the same page under every click pyproject accepts); under a
    click that renders them as docgen does (8.5 on), each is click's own: a click that changes its usage
    lines, or a parameter docgen does not render yet, fails here rather than drift the page."""
    walked = list(docgen._walk(__import__("gpuc.client.cli", fromlist=["cli"]).cli, ["gpuc"], None))
    differ = []
    for path, text in walked:
        from_click = _clicks_usage(path)
        if not text.startswith(from_click + "\n"):
            differ.append((" ".join(path), from_click, text.split("\n\n", 1)[0]))
    assert len(walked) > 20 and differ == []


def _clicks_usage(path: list[str]) -> str:
    from click.testing import CliRunner

    from gpuc.client.cli import cli

    shown = CliRunner().invoke(cli, [*path[1:], "--help"], prog_name="gpuc", terminal_width=docgen.WIDTH)
    assert shown.exit_code == 0, shown.output
    return shown.output.split("\n\n", 1)[0]


def test_the_commands_page_is_the_same_whatever_usage_line_click_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """click wrote its usage lines differently within `click>=8.1` (8.4: `[[a|b]]`, `COMMAND [ARGS]...` for a
    group that runs alone): docgen writes them itself, so a click that writes another usage line makes the
    same page. Checked by hand under click 8.1.8, 8.2.1, 8.3.1, 8.4.0 and 8.5.1: the same docs/commands.md."""

    def another_usage(self: click.Command, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("cli", "[[OLD|STYLE]] COMMAND [ARGS]...")

    monkeypatch.setattr(click.Command, "format_usage", another_usage)
    assert docgen.commands_page() == (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
