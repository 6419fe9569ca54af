"""A rehearsal reaches nothing real, whatever the user's shell holds.

The user's ~/.bashrc exports real keys; they `. rehearse.sh` in that shell, as `gpuc demo --serve` tells
them. Tried with a real bash: after the `.` line no variable of the user's that gpuc reads is left (every
setting's variable, derived from Settings, so a setting added tomorrow is checked too), and `gpuc ls` /
`gpuc up -p vast` connect to loopback only (every socket connect and name lookup of the gpuc process is
recorded by a sitecustomize). Keys or URLs re-exported afterwards are the second line: the rehearsal's
commands refuse any endpoint, watchdog or destination that is not its own, naming the setting.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.errors import ConfigError
from gpuc.core.rehearsal import endpoint_fields
from gpuc.core.settings import SECRET_ENV, SETTING_ENV_NAMES, SETTING_NAMES, env_name
from gpuc.core.settingsload import load_settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.rehearse import CLEARED_PREFIXES, cleared_names, rehearsal_environ, write_shell_file

ROOT = Path(__file__).resolve().parents[2]
# What a user's ~/.bashrc may export: real-looking values for every name gpuc reads, one planted value
# each, plus a setting gpuc does not have yet (the prefix rule must clear it too).
REAL = {name: f"REAL-{name.lower()}-0a1b2c3d4e5f" for name in sorted(SETTING_ENV_NAMES | cleared_names())}
REAL |= {
    "GPUC_A_SETTING_ADDED_TOMORROW": "REAL-tomorrow-0a1b2c3d4e5f",
    "VAST_API_KEY": "5f" * 32,  # Vast's shape: 64 hex characters, no prefix
    "GPUC_VAST_URL": "https://console.vast.ai/api/v0",
    "GPUC_RUNPOD_GRAPHQL_URL": "https://api.runpod.io/graphql",
    "GPUC_NOTIFY_URLS": "tgram://123456789:AAREALtelegrambottoken0a1b2c3d4e5f6a7b/42",
    "GPUC_RESULTS_BUCKET": "s3://real-bucket/runs",
    "GPUC_HOME": "/root/.gpuc-real",
}
RECORDER = """
import os, socket
_log = os.environ.get("TESTLOG_CONNECTS")
if _log:
    def _note(what):
        with open(_log, "a") as fh:
            fh.write(repr(what) + "\\n")
    _connect, _lookup = socket.socket.connect, socket.getaddrinfo
    def connect(self, address):
        _note(("connect", address))
        return _connect(self, address)
    def getaddrinfo(host, *args, **kwargs):
        _note(("lookup", host))
        return _lookup(host, *args, **kwargs)
    socket.socket.connect = connect
    socket.getaddrinfo = getaddrinfo
"""


@pytest.fixture
def rehearsal(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A rehearsal's shell file (as serve_rehearsal writes it) against a RunPod emulator on loopback."""
    home = tmp_path / "rehearse"
    home.mkdir()
    (home / ".env").write_text("")
    (home / ".env").chmod(0o600)
    with EmulatorServer(RunPodEmulator(api_key="emulator-test-key-000")) as emulator:
        environ = {
            **emulator.client_env(),
            "GPUC_HOME": str(home),
            "GPUC_ENV_FILE": str(home / ".env"),
            "GPUC_PROVIDER": "runpod",
            "GPUC_RESULTS_BUCKET": f"file://{home / 'results'}",
        }
        shell = write_shell_file(home, rehearsal_environ(home, environ))
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(RECORDER)
        yield shell, site


def in_bash(shell: Path, site: Path, tmp_path: Path, after: str) -> tuple[subprocess.CompletedProcess[str], str]:
    """The user's shell: their real keys exported, then `. rehearse.sh`, then `after`."""
    log = tmp_path / "connects.log"
    log.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(CLEARED_PREFIXES) and k not in REAL}
    exports = "".join(f"export {name}={shlex.quote(value)}\n" for name, value in REAL.items())
    gpuc = f"{shlex.quote(sys.executable)} -m gpuc.client.cli"
    script = f'{exports}. {shlex.quote(str(shell))}\ngpuc() {{ {gpuc} "$@"; }}\n{after}\n'
    env = {**base, "PYTHONPATH": f"{site}:{os.environ.get('PYTHONPATH', '')}", "TESTLOG_CONNECTS": str(log)}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, check=False)
    return done, log.read_text() if log.exists() else ""


def not_loopback(log: str) -> list[str]:
    out = []
    for line in log.splitlines():
        kind, where = eval(line)
        host = where[0] if kind == "connect" and isinstance(where, tuple) else where
        if kind == "connect" and not isinstance(where, tuple):
            continue  # a unix socket
        try:
            loop = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loop = False
        if not loop:
            out.append(line)
    return out


def test_after_the_dot_line_no_value_of_the_users_shell_that_gpuc_reads_is_left(
    rehearsal: tuple[Path, Path], tmp_path: Path
) -> None:
    shell, site = rehearsal
    done, _ = in_bash(shell, site, tmp_path, "env -0")
    assert done.returncode == 0, done.stderr
    left = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    assert "GPUC_REHEARSAL" in left, "the shell is marked"
    kept = sorted(name for name, value in left.items() if value in REAL.values() or "REAL-" in value)
    assert kept == [], f"the rehearsal shell still holds the user's {kept}"
    assert left["GPUC_HOME"] == str(shell.parent)


def test_every_name_gpuc_reads_is_cleared_by_the_shell_file() -> None:
    """A setting, or a variable the code reads by name, not cleared fails here: the `.` line would leave the
    user's value in place. Names are read from Settings and from the source, not from a list kept here."""
    read = set(SETTING_ENV_NAMES) | set(SECRET_ENV.values())
    pattern = re.compile(r"""environ(?:\.get\(|\[)\s*["']([A-Z][A-Z0-9_]+)["']""")
    for path in [*ROOT.glob("core/**/*.py"), *ROOT.glob("client/**/*.py")]:
        read |= set(pattern.findall(path.read_text(encoding="utf-8")))
    harmless = {
        "HOME",
        "SHELL",
        "NO_COLOR",
        "XDG_CONFIG_HOME",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "PATH",
        "PYDANTIC_DISABLE_PLUGINS",
        "TERM",
        "USER",
        "LOGNAME",
        "EDITOR",
        "VISUAL",
        "COLUMNS",
        "LINES",
        # read on a pod only, by the onstart script core/bootkit.py holds as text: Vast's instance id, and the
        # path the boot puts gpuc's wheel on
        "CONTAINER_ID",
        "PYTHONPATH",
    }
    missed = sorted(n for n in read - harmless if n not in cleared_names() and not n.startswith(CLEARED_PREFIXES))
    assert missed == []
    assert cleared_names() >= SETTING_ENV_NAMES


def test_ls_in_the_rehearsal_reaches_only_loopback(rehearsal: tuple[Path, Path], tmp_path: Path) -> None:
    shell, site = rehearsal
    done, log = in_bash(shell, site, tmp_path, "gpuc ls")
    assert done.returncode == 0, done.stdout + done.stderr
    assert log, "the recorder saw no connection: the check proved nothing"
    assert not_loopback(log) == []
    assert "5f5f5f5f" not in done.stdout + done.stderr


def test_a_real_key_exported_again_reaches_nothing_real(rehearsal: tuple[Path, Path], tmp_path: Path) -> None:
    """The issue's repro: `gpuc up -p vast` in the rehearsal with the user's Vast key re-exported."""
    shell, site = rehearsal
    after = (
        f"export VAST_API_KEY={REAL['VAST_API_KEY']}\ngpuc ls; echo ls=$?\ngpuc up -p vast -y -- echo hi; echo up=$?"
    )
    done, log = in_bash(shell, site, tmp_path, after)
    assert "up=0" not in done.stdout, done.stdout + done.stderr
    assert not_loopback(log) == [], log
    assert REAL["VAST_API_KEY"] not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("GPUC_VAST_URL", "https://console.vast.ai/api/v0"),
        ("GPUC_RUNPOD_GRAPHQL_URL", "https://api.runpod.io/graphql"),
        ("GPUC_WATCHDOG_URL", "https://watchdog.example.com"),
        ("GPUC_NOTIFY_URLS", "ntfys://ntfy.sh/my-real-topic-0a1b2c"),
        ("GPUC_RESULTS_BUCKET", "s3://real-bucket/runs"),
    ],
)
def test_a_real_endpoint_exported_again_is_refused_naming_it(
    rehearsal: tuple[Path, Path], tmp_path: Path, name: str, value: str
) -> None:
    shell, site = rehearsal
    done, log = in_bash(shell, site, tmp_path, f"export {name}={shlex.quote(value)}\ngpuc ls")
    assert done.returncode == 2, done.stdout + done.stderr
    assert name in done.stderr and "rehearsal" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not_loopback(log) == []


def test_real_cloud_credentials_exported_again_are_refused(rehearsal: tuple[Path, Path], tmp_path: Path) -> None:
    shell, site = rehearsal
    done, _ = in_bash(shell, site, tmp_path, "export AWS_ACCESS_KEY_ID=AKIAREAL0000\ngpuc ls")
    assert done.returncode == 2 and "AWS_ACCESS_KEY_ID" in done.stderr, done.stderr
    done, _ = in_bash(shell, site, tmp_path, "unset AWS_SHARED_CREDENTIALS_FILE\ngpuc ls")
    assert done.returncode == 2 and "AWS_SHARED_CREDENTIALS_FILE" in done.stderr, done.stderr


# -- the second line, judged setting by setting -------------------------------------------------------
OWN = {
    "GPUC_REHEARSAL": "/tmp/gpuc-rehearsal-x",
    "GPUC_ENV_FILE": "/nonexistent/.env",
    "AWS_SHARED_CREDENTIALS_FILE": "/tmp/gpuc-rehearsal-x/aws/c",
    "AWS_CONFIG_FILE": "/tmp/gpuc-rehearsal-x/aws/f",
    # every provider URL on loopback; no S3 endpoint (an s3:// bucket is then AWS's, a real one)
    **{
        env_name(n): "http://127.0.0.1:9/x"
        for n in endpoint_fields(SETTING_NAMES)
        if n.endswith("_url") and n != "s3_endpoint_url"
    },
}
REAL_VALUE = {
    "results_bucket": "s3://real-bucket",
    "git_remote": "https://github.com/me/repo.git",
    "notify_urls": "tgram://123456789:AAREALtelegrambottoken0a1b2c3d4e5f6a7b/42",
}


@pytest.mark.parametrize("field", endpoint_fields(SETTING_NAMES))
def test_every_endpoint_setting_is_judged_in_a_rehearsal(field: str) -> None:
    """Derived from the settings' names: a provider URL added tomorrow is judged without a change."""
    variable = env_name(field)
    real = REAL_VALUE.get(field, "https://api.example.com/v1")
    with pytest.raises(ConfigError) as refused:
        load_settings({**OWN, variable: real})
    assert variable in refused.value.message and real not in refused.value.message + (refused.value.hint or "")
    outside = {**OWN}
    outside.pop("GPUC_REHEARSAL")
    load_settings({**outside, variable: real})  # outside a rehearsal: the same value is fine


def test_the_rehearsal_s_own_endpoints_pass() -> None:
    settings = load_settings(
        {
            **OWN,
            "GPUC_RESULTS_BUCKET": "file:///tmp/gpuc-rehearsal-x/results",
            "GPUC_NOTIFY_URLS": "ntfy://tok0a1b2c3d4e5f6a@127.0.0.1:8080/topic",
            "GPUC_GIT_REMOTE": "/tmp/gpuc-rehearsal-x/remote.git",
        }
    )
    assert settings.rehearsal == Path("/tmp/gpuc-rehearsal-x")
    with pytest.raises(ConfigError, match="GPUC_RESULTS_BUCKET"):
        load_settings({**OWN, "GPUC_RESULTS_BUCKET": "file:///home/me/real-results"})
