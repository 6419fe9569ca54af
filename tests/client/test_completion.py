from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuc.client.command_table import COMMANDS

GPUC = str(Path(sys.executable).parent / "gpuc")
BIN = str(Path(sys.executable).parent)


def gpuc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUC, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=60)


def complete(words: str, cword: int | str, shell: str = "bash") -> list[str]:
    """What gpuc answers a shell asking for completions (the protocol click's scripts speak; fish sends
    the word being completed as COMP_CWORD, bash and zsh its index)."""
    env = {"_GPUC_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    proc = gpuc(env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def modules_loaded_by(argv: list[str], env: dict[str, str]) -> tuple[str, list[str]]:
    """Run gpuc's entry point in a fresh interpreter; return its output and the modules it imported."""
    code = (
        "import sys\n"
        f"sys.argv = {argv!r}\n"
        "from gpuc.client.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "sys.stdout.flush()\n"
        "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=60
    )
    loaded = proc.stderr.split("MODULES", 1)[1].split()
    return proc.stdout, loaded


def test_it_completes_command_names_without_importing_the_commands() -> None:
    env = {"_GPUC_COMPLETE": "bash_complete", "COMP_WORDS": "gpuc ", "COMP_CWORD": "1"}
    output, loaded = modules_loaded_by(["gpuc"], env)
    assert [line.split(",")[1] for line in output.splitlines()] == sorted(COMMANDS)
    commands = [m for m in loaded if m.startswith("gpuc.client.") and m.endswith(".commands")]
    assert commands == [], "no command module: the import-free table only"
    assert "gpuc.client.command_table" in loaded
    assert not {"httpx", "pydantic", "boto3"} & set(loaded)


def test_the_top_level_help_still_skips_click() -> None:
    output, loaded = modules_loaded_by(["gpuc", "--help"], {})
    assert "Usage: gpuc" in output and "completion" in output
    assert "click" not in loaded


def test_it_completes_a_prefix_options_and_choices() -> None:
    assert complete("gpuc le", 1) == ["plain,ledger"]
    assert complete("gpuc ledger --p", 2) == ["plain,--plot"]
    assert complete("gpuc pick --dtype ", 3) == [f"plain,{d}" for d in ("bf16", "fp16", "int4", "int8")]


def test_zsh_and_fish_get_the_short_help_from_the_table() -> None:
    assert complete("gpuc pi", 1, "zsh") == ["plain", "pick", COMMANDS["pick"][1]]
    fish = complete("gpuc pi", "pi", "fish")
    assert fish == [f"plain,pick\t{COMMANDS['pick'][1]}"]


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _gpuc_completion gpuc"),
        ("zsh", "#compdef gpuc"),
        ("fish", "complete --no-files --command gpuc"),
    ],
)
def test_it_prints_each_shells_script(shell: str, marker: str) -> None:
    proc = gpuc("completion", shell)
    assert proc.returncode == 0, proc.stderr
    assert marker in proc.stdout and "_GPUC_COMPLETE" in proc.stdout
    assert proc.stdout == gpuc(env={"_GPUC_COMPLETE": f"{shell}_source"}).stdout  # click's own, unchanged


def test_it_takes_the_shell_from_shell_or_asks_for_it() -> None:
    assert "#compdef gpuc" in gpuc("completion", env={"SHELL": "/usr/bin/zsh"}).stdout
    proc = gpuc("completion", env={"SHELL": "/bin/tcsh"})
    assert proc.returncode == 2
    assert "cannot tell which shell" in proc.stderr and "gpuc completion bash|zsh|fish" in proc.stderr
    assert gpuc("completion", "powershell").returncode == 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_through_the_printed_script() -> None:
    script = (
        'eval "$(gpuc completion bash)"\n'
        'COMP_WORDS=(gpuc led); COMP_CWORD=1; _gpuc_completion gpuc; echo "${COMPREPLY[*]}"\n'
        "COMPREPLY=(); COMP_WORDS=(gpuc ledger --pl); COMP_CWORD=2; _gpuc_completion gpuc; "
        'echo "${COMPREPLY[*]}"\n'
    )
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["ledger", "--plot"]
