"""The doc pages that restate code, made from it: the commands (click's own help), the settings (the
`Settings` fields, their variables, defaults and comments) and the failure matrix (the drill's rows).

`python -m gpuc.testkit.docgen` writes them into docs/; tests/docs/test_docs.py fails when a page differs
from what this makes, so a new option, setting or drill row cannot go undocumented.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
WIDTH = 100  # help text wrapped the same on every machine, whatever the terminal
MADE = "<!-- made by `python -m gpuc.testkit.docgen` from the code: edit the code, then run it -->"


def _walk(command: click.Command, path: list[str], parent: click.Context | None) -> Iterator[tuple[list[str], str]]:
    # The command's own context settings (the root's -h alias, inherited below), as `gpuc` itself builds them:
    # click caches each command's help option, so a context built otherwise would print per test order.
    settings = {"max_content_width": WIDTH, "terminal_width": WIDTH, **command.context_settings}
    ctx = click.Context(command, info_name=path[-1], parent=parent, **settings)
    # click keeps the first help option it made for a command (a test that invoked the command alone made it
    # with `--help` only): made again here from this context's names, as `gpuc` itself would.
    if hasattr(command, "_help_option"):
        command._help_option = None
    yield path, _with_usage(command.get_help(ctx), usage(command, ctx))
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, [*path, name], ctx)


# click's own usage line changed within the range pyproject accepts (`click>=8.1`): before 8.5 an optional
# Choice argument read `[[a|b]]` and a group that runs without a subcommand `COMMAND [ARGS]...`. The page is
# made the same under every click: the usage line is rendered here, from the command's parameters, as click
# 8.5 renders it; the rest of the help is click's (unchanged from 8.1 to 8.5 for gpuc's commands).
_DEFAULT_SUBCOMMAND_METAVARS = ("COMMAND [ARGS]...", "[COMMAND] [ARGS]...")


def usage(command: click.Command, ctx: click.Context) -> str:
    """`Usage: gpuc <path> [OPTIONS] ARGS...`, wrapped as click wraps it."""
    pieces = [command.options_metavar] if command.options_metavar else []
    pieces += [_argument_metavar(p) for p in command.get_params(ctx) if isinstance(p, click.Argument)]
    if isinstance(command, click.Group):
        pieces.append(_subcommand_metavar(command))
    formatter = ctx.make_formatter()
    formatter.write_usage(ctx.command_path, " ".join(pieces))
    return formatter.getvalue().rstrip("\n")


def _argument_metavar(argument: click.Argument) -> str:
    if argument.metavar is not None:
        return argument.metavar
    if isinstance(argument.type, click.Choice):
        shown = "|".join(str(c) for c in argument.type.choices)
        found = f"{{{shown}}}" if argument.required else f"[{shown}]"
    elif type(argument.type).get_metavar is click.ParamType.get_metavar and argument.name:
        found = argument.name.upper()
    else:  # a type that names its own metavar: say how click shows it here, once, rather than guess
        raise TypeError(f"docgen cannot render the usage of a {type(argument.type).__name__} argument: teach it here")
    if not argument.required and not found.startswith("["):
        found = f"[{found}]"
    return found + ("..." if argument.nargs != 1 else "")


def _subcommand_metavar(group: click.Group) -> str:
    if group.chain or group.subcommand_metavar not in _DEFAULT_SUBCOMMAND_METAVARS:
        return group.subcommand_metavar  # the group's own words
    return "[COMMAND] [ARGS]..." if group.invoke_without_command else "COMMAND [ARGS]..."


def _with_usage(help_text: str, usage_line: str) -> str:
    """click's help with its usage paragraph (up to the first blank line) replaced by `usage_line`."""
    said, blank, rest = help_text.partition("\n\n")
    if not said.startswith("Usage:"):
        raise ValueError(f"click's help does not start with its usage line: {said[:60]!r}")
    return usage_line + blank + rest


def commands_page() -> str:
    from gpuc.client.cli import cli

    parts = [MADE, "", "# Commands", "", "Every command and option, as `gpuc … --help` prints it.", ""]
    walked = list(_walk(cli, ["gpuc"], None))
    parts += [f"- [`{' '.join(p)}`](#{'-'.join(p)})" for p, _ in walked[1:]]
    for path, text in walked:
        title = " ".join(path)
        parts += ["", f'<a id="{"-".join(path)}"></a>', "", f"## `{title}`", "", "```text", text.rstrip(), "```"]
    return "\n".join(parts) + "\n"


def _settings_fields() -> list[tuple[str, str, str, str, str]]:
    """(section, field, type, default, comment) in source order, read from core/settings.py itself: a
    one-line comment with no colon after a blank line heads a section; other comments describe a field."""
    source = (ROOT / "core" / "settings.py").read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Settings")
    found = []
    section = ""
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        comment, starts_block = _comment_above(lines, node.lineno - 1)
        if starts_block and comment and ":" not in comment and len(comment) < 48:
            section, comment = comment, ""
        end = lines[(node.end_lineno or node.lineno) - 1]
        if "  # " in end:
            comment = (comment + " " + end.split("  # ", 1)[1]).strip()
        name = node.target.id
        found.append((section, name, ast.unparse(node.annotation), _default(name, node.value), comment))
    return found


def _comment_above(lines: list[str], index: int) -> tuple[str, bool]:
    """The comment block right above a line, and whether a blank line (or the class line) precedes it."""
    above: list[str] = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        above.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(above), bool(above) and (i < 0 or not lines[i].strip() or lines[i].rstrip().endswith('"""'))


def _default(name: str, value: ast.expr | None) -> str:
    if value is None:
        return "(required)"
    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
        chosen = next((kw for kw in value.keywords if kw.arg in ("default", "default_factory")), None)
        if chosen is None:
            return "(required)"
        if chosen.arg == "default_factory":
            return f"`{ast.unparse(chosen.value)}()`"
        value = chosen.value
    try:  # arithmetic on literals (20 * 60.0): shown as the value, times with their unit
        number = eval(compile(ast.Expression(value), "<default>", "eval"), {"__builtins__": {}}, {})
    except Exception:
        return f"`{ast.unparse(value)}`"
    if isinstance(number, float) and name.endswith("_s"):
        return _duration(number)
    return f"`{number!r}`" if not isinstance(number, float) else f"`{number:g}`"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"`{seconds / size:g}{unit}`"
    return f"`{seconds:g}s`"


def settings_page() -> str:
    from gpuc.core.settings import env_name

    parts = [
        MADE,
        "",
        "# Settings",
        "",
        "Every setting gpuc reads. Precedence: the environment, then `.env`, then `$GPUC_HOME/config.json`,",
        "then the default. Times take units (`20m`, `90s`, `2h`, `1d`; a bare number is seconds, hours for",
        "`GPUC_MAX_HOURS` and `GPUC_MAX_LIFETIME_HOURS`). Secrets never print; they keep their usual names.",
        "How they are read and checked: [using gpuc](using.md#settings).",
    ]
    section = None
    for where, name, kind, default, comment in _settings_fields():
        if where != section:
            section = where
            parts += ["", f"## {where or 'where gpuc keeps its files'}", "", "| variable | type | default | what |"]
            parts.append("|---|---|---|---|")
        variable = env_name(name)
        cells = (f"`{variable}`", f"`{kind}`", default, comment)
        parts.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(parts) + "\n"


def failure_matrix_page(rows: list[dict[str, Any]] | None = None) -> str:
    """From a drill's rows (`gpuc drill --json`'s, or a run of its own): their ids, failures, catchers and
    bounds, never its measured figures (they vary by a second from run to run)."""
    from gpuc.testkit.drill import run_drill

    rows = rows if rows is not None else run_drill().as_json()["rows"]
    parts = [
        MADE,
        "",
        "# The failure matrix",
        "",
        "Each row is a way a rented GPU wastes money, the part of gpuc that catches it, and the bound on what",
        "it may cost. Code comments cite rows by their id (F5, F16b...). Each row is also a scenario of",
        "`gpuc drill`, which runs the product's own rules on fakes of the world (scaled clocks, emulated",
        "providers) and prints the billed minutes measured against the bound; `gpuc drill --faults` adds",
        "provider errors. How the layers fit together: [how the money is bounded](money.md).",
        "",
        "| row | failure | caught by | bound |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cells = (row["failure"], row["caught_by"], row["bound_text"])
        escaped = " | ".join(str(c).replace("|", "\\|") for c in cells)
        parts.append(f'| <a id="{str(row["row"]).lower()}"></a>{row["row"]} | {escaped} |')
    return "\n".join(parts) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "commands.md": commands_page,
    "settings.md": settings_page,
    "failure-matrix.md": failure_matrix_page,
}


def main(argv: list[str]) -> int:
    names = argv or list(PAGES)
    for name in names:
        (DOCS / name).write_text(PAGES[name](), encoding="utf-8")
        print(f"wrote docs/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
