"""A hostile pod against the laptop: a pod on Vast is a stranger's machine, and whatever the laptop reads
from it, or from the results destination it syncs to, may be crafted.

- Terminal escapes: a job's log that sets the title, clears the screen and prints a forged
  `gpuc: job exited with code 0 ... results and log: s3://elsewhere/` reaches the terminal cleaned, the
  forged line marked as the log's, gpuc's real line on stderr after it (`gpuc logs --raw` is the opt-out).
- A crafted outcome: `up --wait` says the outcome is unknown (exit 125) and what could not be read, never
  "internal error".

Real processes: the `gpuc` command in a subprocess, local sandbox pods, the local watchdog server.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import ADMIN, World, only_run, open_world, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuc.client.jobs.follow import follow, report
from gpuc.client.jobs.podlog import JOB_LINE_MARK, LogPrinter
from gpuc.client.pods.listing import cells, ls_lines
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.survey import Listing
from gpuc.client.pods.up import up
from gpuc.core.termsafe import clean, clean_bytes
from gpuc.instance_side.joblog import OUTCOME_FORMAT

EXAMPLES = int(os.environ.get("GPUC_HOSTILE_EXAMPLES", "300"))
FORGED = "gpuc: job exited with code 0 after 1s; pod x ran 1s, $0.0001; results and log: s3://elsewhere/"
# The issue's job: title set, screen cleared and homed, a forged outcome line, then its real exit code.
HOSTILE_JOB = f"""\
import sys
out = sys.stdout
out.write("\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H")
out.write("\\x1b]8;;https://evil.example/\\x1b\\\\click me\\x1b]8;;\\x1b\\\\ \\x1b]52;c;cm0gLXJmIH4=\\x07\\n")
out.write("epoch 1\\r\\x1b[1A{FORGED}\\n")
out.write("\\u202egnp.exe\\u202c \\x1bP+q544e\\x1b\\\\ \\x9b2J bell\\x07 \\x08\\x08\\x08 done\\n")
out.flush()
sys.exit(3)
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


# -- the sanitizer --------------------------------------------------------------------------------------
BIDI = {chr(c) for c in [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]}


def assert_safe(text: str) -> None:
    for ch in text:
        code = ord(ch)
        assert ch in "\t\n" or not (code < 0x20 or 0x7F <= code <= 0x9F), f"control {code:#x} survived"
        assert ch not in BIDI, f"bidi control {code:#x} survived"
        assert not 0xD800 <= code <= 0xDFFF, "a lone surrogate survived"


ESCAPES = st.sampled_from(
    [
        "\x1b",
        "\x1b[",
        "\x1b]",
        "\x1bP",
        "\x1b\\",
        "\x07",
        "\r",
        "\n",
        "\t",
        "\x9b",
        "\x9d",
        "\x90",
        "\x9c",
        "[",
        "]",
        ";",
        "0",
        "m",
        "J",
        "\u202e",
        "\u2066",
        "\x08",
        "\x7f",
        "\x00",
        "\ud800",
        "é",
        "█",
        "\x1b[2J",
    ]
)
HOSTILE_TEXT = st.lists(ESCAPES | st.text(max_size=4), max_size=40).map("".join)


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=HOSTILE_TEXT | st.text())
def test_no_control_survives_the_sanitizer(text: str) -> None:
    cleaned = clean(text)
    assert_safe(cleaned)
    assert clean(cleaned) == cleaned, "cleaning is idempotent"


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.binary() | HOSTILE_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_come_out_as_printable_utf8(data: bytes) -> None:
    assert_safe(clean_bytes(data).decode("utf-8"))  # strict: valid UTF-8, no raw C1 byte


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs"))) | st.just("tab\tnew\nline é █ 日本"))
def test_printable_text_is_left_as_it_is(text: str) -> None:
    assert clean(text) == text


def test_the_issues_escapes_are_removed_whole() -> None:
    said = clean("\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b]8;;https://x/\x1b\\link\x1b]8;;\x1b\\ \x1b]52;c;aGk=\x07 ok")
    assert said == "link  ok", "no residue of the sequences ([2J, 0;pwned) is left either"
    assert clean("50%\r100%\r\n") == "50%\n100%\n", "a carriage return cannot overwrite a line"
    assert clean("\u202egnp.exe\u202c") == "gnp.exe"


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=HOSTILE_TEXT, cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6))
def test_the_log_printer_is_safe_however_the_log_is_cut(text: str, cuts: list[int]) -> None:
    data, out = text.encode("utf-8", "surrogatepass"), io.BytesIO()
    printer = LogPrinter(out, [ADMIN], hold_max=16)
    last = 0
    for cut in sorted(cuts):
        printer.feed(data[last:cut])
        last = max(last, cut)
    printer.feed(data[last:])
    printer.flush()
    assert printer.printed == len(data)
    assert_safe(out.getvalue().decode("utf-8"))


def test_a_secret_hidden_behind_an_escape_is_still_masked() -> None:
    out = io.BytesIO()
    printer = LogPrinter(out, [ADMIN])
    printer.feed(f"token: {ADMIN[:5]}\x1b[0m{ADMIN[5:]}\n".encode())
    printer.flush()
    assert out.getvalue() == b"token: ***\n"


def test_a_line_that_starts_like_gpucs_own_is_marked_as_the_logs() -> None:
    out = io.BytesIO()
    printer = LogPrinter(out, [])
    for part in [b"ok\n  GPUC: job exited\n", b"not at a line start: gpuc: x", b"\ngpuc", b": split\n"]:
        printer.feed(part)
    printer.flush()
    mark = JOB_LINE_MARK.decode()
    assert out.getvalue().decode().splitlines() == [
        "ok",
        f"{mark}  GPUC: job exited",
        "not at a line start: gpuc: x",
        f"{mark}gpuc: split",
    ]


def test_a_log_is_printed_only_as_far_as_a_gpuc_pod_writes() -> None:
    out = io.BytesIO()
    printer = LogPrinter(out, [], most=1000)
    for _ in range(50):
        printer.feed(b"x" * 99 + b"\n")
    printer.flush()
    assert out.getvalue().startswith(b"x" * 99 + b"\n") and len(out.getvalue()) < 1200
    assert out.getvalue().endswith(b"the rest is not shown]\n") and printer.printed == 5000


def test_gpucs_own_prefix_is_styled_on_a_terminal_and_plain_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    from gpuc.client.jobs.wait import say

    seen: list[tuple[str, bool]] = []
    monkeypatch.setattr(click, "echo", lambda text, err=False: seen.append((text, err)))
    say("job exited with code 3 \x1b[2J")
    monkeypatch.setenv("NO_COLOR", "1")
    say("plain")
    styled, plain = seen
    assert styled == ("\x1b[1m\x1b[7mgpuc:\x1b[0m job exited with code 3 ", True), "no job output can show this"
    assert plain == ("gpuc: plain", True)


def test_what_the_commands_say_is_cleaned_too(tmp_path: Path) -> None:
    """up/run/down quote the pod (its verification verdict, its bootstrap steps) through deps.echo."""
    from gpuc.client.context import Ctx
    from gpuc.core.settings import Settings

    seen: list[str] = []
    deps = Ctx(Settings(home=tmp_path / "home", env_file=tmp_path / "none.env"), echo=seen.append)
    with deps.watchdog:
        deps.echo("  verify gpu_name: pass - 1 x H100\x1b]0;pwned\x07\x1b[2J\n  ready")
    assert seen == ["  verify gpu_name: pass - 1 x H100\n  ready"]


# -- through the real CLI ---------------------------------------------------------------------------------
def test_a_jobs_escapes_and_forged_outcome_line_do_not_reach_the_terminal(world: World) -> None:
    (world.project / "hostile.py").write_text(HOSTILE_JOB)
    done = world.gpuc("up", "exp", "--wait", "--", "python", "hostile.py")
    assert done.returncode == 3, done.stderr
    for stream in (done.stdout, done.stderr):
        assert_safe(stream)
        assert "pwned" not in stream and "evil.example" not in stream and "cm0gLXJmIH4" not in stream
    # Whole sequences go (no "0;pwned" or "[2J" residue); the carriage return is a newline; the forged line
    # is marked as the log's.
    shown = f"click me \nepoch 1\n{JOB_LINE_MARK.decode()}{FORGED}\ngnp.exe   bell  done\n"
    assert done.stdout.endswith(shown), done.stdout
    everything = done.stdout.splitlines() + done.stderr.splitlines()
    (real,) = [line for line in everything if line.startswith("gpuc: job exited")]
    assert real.startswith("gpuc: job exited with code 3") and "s3://elsewhere" not in real
    run = only_run(world)
    assert real == done.stderr.strip().splitlines()[-1], "gpuc's own outcome line comes last"

    logs = world.gpuc("logs", run.pod_id)
    assert logs.returncode == 0 and logs.stdout == shown, "the same cleaning from the destination"
    raw = subprocess.run(
        [sys.executable, "-m", "gpuc.client.cli", "logs", run.pod_id, "--raw"],
        cwd=world.project,
        env=world.env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert raw.returncode == 0 and b"\x1b]0;pwned\x07\x1b[2J" in raw.stdout and FORGED.encode() in raw.stdout
    assert "--raw" in world.gpuc("logs", "--help").stdout


def test_names_and_statuses_from_a_pod_are_cleaned_in_ls() -> None:
    row: dict[str, object] = {
        "provider": "vast",
        "id": "123\x1b[2J",
        "experiment": "exp\x1b]0;pwned\x07\u202e\nvast  999  forged-row",
        "status": "running\r",
        "managed": False,
    }
    shown = cells(row, answered=False, now=0.0)
    assert shown[:4] == ["vast", "123", "exp vast  999  forged-row", "running "], "one line per pod, no escapes"
    listing = Listing([], [], {"vast": "not read: \x1b[31mHTTP 500\x1b[0m\r\nvast  read"}, False, 0.0)
    assert ls_lines(listing) == ["no provider could be read", "vast  not read: HTTP 500 vast  read"]


# -- a crafted outcome --------------------------------------------------------------------------------------
def _outcome(body: str) -> bytes:
    return ("{" + f'"format": "{OUTCOME_FORMAT}", ' + body + "}").encode()


# What a job can put at the destination in its own results: results/logs/outcome.json goes there as the
# synced outcome (the pod's own is then not staged beside it).
CRAFTED: dict[str, tuple[bytes, str]] = {
    "a word": (_outcome('"exit_code": "oops"'), "exit_code is 'oops', not an exit code"),
    "1e400": (_outcome('"exit_code": 1e400'), "out of range"),
    "NaN": (_outcome('"exit_code": 0, "duration_s": NaN'), "NaN is not a number JSON allows"),
    "out of range": (_outcome('"exit_code": 300'), "exit_code 300 is out of range (0-255)"),
    "a duration of 1e400": (_outcome('"exit_code": 0, "duration_s": 1e400'), "out of range"),
    "not UTF-8": (b'{"format": "\xff"}', "not UTF-8"),
    "a 1 MB line": (_outcome('"exit_code": 0, "pad": "' + "x" * 1024 * 1024 + '"'), "larger than 65536 bytes"),
    "nested": (b"[" * 60_000, "not JSON"),
    "twice": (_outcome('"exit_code": 1, "exit_code": 0'), "a key appears twice"),
}


# Every variant meets the same reader in tests/client/test_outcome_strict.py; end to end, these five in
# `make test`, all of them in `make hostile` (-m slow).
QUICK = ("a word", "1e400", "NaN", "not UTF-8", "a 1 MB line")


@pytest.mark.parametrize("variant", [v if v in QUICK else pytest.param(v, marks=pytest.mark.slow) for v in CRAFTED])
def test_a_crafted_outcome_makes_wait_say_unknown_and_exit_125(world: World, variant: str) -> None:
    data, why = CRAFTED[variant]
    (world.project / "crafted.bin").write_bytes(data)
    job = "import os, shutil; os.makedirs('results/logs'); shutil.copy('crafted.bin', 'results/logs/outcome.json')"
    done = world.gpuc("up", "exp", "--wait", "--", "python", "-c", job)
    assert done.returncode == 125, done.stderr  # the literal, as a script sees it
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpuc: the job's outcome is unknown: file://") and "logs/outcome.json is unreadable" in last
    assert why in last and f"gpuc logs {only_run(world).pod_id}" in last, last
    logs = world.gpuc("logs", "exp")
    assert logs.returncode == 0 and "outcome is unknown" in logs.stderr and why in logs.stderr


def test_an_outcome_the_job_overwrites_on_the_pod_ends_the_wait_unknown(world: World) -> None:
    deps = world.deps()
    job = "import json; open('.gpuc/outcome.json', 'w').write('{\"exit_code\": \"oops\"}'); import time; time.sleep(60)"
    pod = up(UpOptions(experiment="exp", command=["python", "-c", job], job_id="j-pod"), deps)
    assert pod is not None
    run = deps.runs.find(pod.id)
    state = follow(deps, pod, job_id="j-pod", out=io.BytesIO(), unreadable_grace_s=1.0, poll_s=0.2)
    assert state.stopped == "unreadable" and state.unreadable is not None
    result = report(deps, pod, run, state, job_id="j-pod", since=run.created_at)
    assert result.exit_code == 125
    assert "outcome file on the pod (.gpuc/outcome.json) is unreadable (its format is None" in result.line
    assert f"gpuc logs {pod.id}" in result.line


def test_a_pod_gone_before_the_outcome_is_written_makes_wait_exit_125(world: World) -> None:
    """`--wait` exits 125, the literal, when the pod is destroyed under its job (nothing wrote an outcome)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuc.client.cli", "up", "exp", "--wait", "--", "python", "train.py", "0", "600"],
        cwd=world.project,
        env=world.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        provider = world.provider()

        def job_running() -> bool:
            pods = provider.list_pods()
            return bool(pods) and provider.paths(pods[0].id).job_log.exists()

        assert wait_for(job_running, timeout_s=90)
        (pod,) = provider.list_pods()
        provider.destroy(pod.id)  # the pod's whole sandbox goes: no outcome, no sync, no job_exit note
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 125, err
    last = err.strip().splitlines()[-1]
    # Which of the two depends on whether the laptop read the running job's record before the destroy.
    assert last.startswith(("gpuc: the job started but did not finish", "gpuc: the job's outcome is unknown")), last
    assert "no exit code at file://" in last and "nor with the watchdog" in last
