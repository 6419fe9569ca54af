"""The ssh check against the process table OpenSSH really leaves, before and after 9.8 (which split the
per-connection code out of sshd into sshd-session). If the idle watch stops seeing a session, it
destroys the pod under a user who is typing in it.

What each process shows, from openssh-portable (tags V_9_7_P1, V_9_8_P1, V_10_0_P1):
- /proc/<pid>/comm is the basename of the executable (truncated to 15 bytes): OpenSSH never calls
  prctl(PR_SET_NAME), and setproctitle only rewrites argv. So "sshd" for the listener in every version;
  "sshd" for every per-connection process before 9.8 (sshd re-executes itself, sshd.c rexec_argv[0] =
  saved_argv[0]); "sshd-session" from 9.8 on (sshd.c: rexec_argv[0] = options.sshd_session_path,
  /usr/lib/openssh/sshd-session on Debian); 10.0 also execs "sshd-auth" for the pre-auth phase.
- /proc/<pid>/cmdline is the title: `__progname + ": " + text` (openbsd-compat/setproctitle.c, Linux
  SPT_REUSEARGV, padded with NULs over the old argv and environ). The listener: "sshd: /usr/sbin/sshd
  -D [listener] 0 of 10-100 startups" (sshd.c, the startups counters). The privileged monitor:
  "<prog>: root [priv]" (monitor.c). The post-auth child that holds the session: "<prog>: root@pts/0",
  or "root@notty" without a terminal (session.c session_proctitle / session_tty_list).
- The user's shell is forked by the post-auth child, its stdin the session's pts (session.c do_exec_pty).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuc.instance_side.sshscan import SshScanner, SshSession
from gpuc.testkit.podfakes import FakeProcTree

LISTENER = "sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"
TYPED_AT = 1_790_000_100.0


def title(text: str) -> list[str]:
    """A cmdline as setproctitle leaves it: the title, then NULs over the rest of the old argv+environ."""
    return [text, *[""] * 40]


def openssh_tree(proc: FakeProcTree, session_prog: str, *, with_preauth: bool = False) -> None:
    """One listener, one interactive session on pts/0, one `ssh pod cmd` without a terminal, and (10.x)
    one connection still authenticating. `session_prog`: "sshd" before 9.8, "sshd-session" after."""
    proc.add(50, "sshd", title(LISTENER))
    proc.add(100, session_prog, title(f"{session_prog}: root [priv]"), ppid=50)
    proc.add(101, session_prog, title(f"{session_prog}: root@pts/0"), ppid=100)
    proc.add(102, "bash", ["-bash"], ppid=101, stdin="/dev/pts/0")
    proc.add(103, "python3", ["python3", "train.py"], ppid=102, stdin="/dev/pts/0")
    proc.add(200, session_prog, title(f"{session_prog}: root [priv]"), ppid=50)
    proc.add(201, session_prog, title(f"{session_prog}: root@notty"), ppid=200)
    proc.add(202, "rsync", ["rsync", "--server", "-logDtpre.iLsfxCIvu", ".", "/workspace"], ppid=201, stdin="pipe:[91]")
    if with_preauth:
        proc.add(300, session_prog, title(f"{session_prog}: [accepted]"), ppid=50)
        proc.add(301, "sshd-auth", title("sshd-auth: [session-auth early]"), ppid=300, stdin="socket:[77]")


def dev_with_pts(tmp_path: Path) -> Path:
    dev = tmp_path / "dev"
    (dev / "pts").mkdir(parents=True)
    (dev / "pts" / "0").touch()
    os.utime(dev / "pts" / "0", (TYPED_AT, TYPED_AT))
    return dev


@pytest.mark.parametrize(
    ("version", "session_prog", "preauth"),
    [
        ("OpenSSH 9.2-9.7 (Debian 12, Ubuntu 24.04)", "sshd", False),
        ("OpenSSH 9.8-9.9 (sshd-session)", "sshd-session", False),
        ("OpenSSH 10.x (sshd-session + sshd-auth)", "sshd-session", True),
    ],
)
def test_an_interactive_session_is_seen_on_every_openssh_generation(
    tmp_path: Path, version: str, session_prog: str, preauth: bool
) -> None:
    proc = FakeProcTree(tmp_path / "proc")
    openssh_tree(proc, session_prog, with_preauth=preauth)
    assert SshScanner(proc.root, dev_with_pts(tmp_path)).sessions() == [SshSession("pts/0", TYPED_AT)], version


@pytest.mark.parametrize("session_prog", ["sshd", "sshd-session"])
def test_the_shell_alone_shows_the_session_when_the_title_is_unreadable(tmp_path: Path, session_prog: str) -> None:
    """A title that says nothing (an empty cmdline: the process is exiting, or hidepid) still leaves the
    shell, a child of the session process, with the pts on its stdin."""
    proc = FakeProcTree(tmp_path / "proc")
    proc.add(50, "sshd", title(LISTENER))
    proc.add(101, session_prog, [], ppid=50)
    proc.add(102, "bash", ["-bash"], ppid=101, stdin="/dev/pts/0")
    assert SshScanner(proc.root, dev_with_pts(tmp_path)).sessions() == [SshSession("pts/0", TYPED_AT)]
