"""The pre-commit secret guard `gpuc doctor --install-hook` writes into an experiment repository.

It is a self-contained Python pre-commit hook: it needs neither gpuc nor a virtualenv at commit time. It
refuses a commit whose added lines hold an `hf_`, `rpa_` or `sk-` style token or a secret value from
`.env`, or that adds a `.env` file. It must not become a copy of the secrets it guards, so it never holds
a value in clear text: at commit time it reads `.env` itself (current values, rotated keys included), and
as a fallback for a `.env` that moved it keeps salted SHA-256 digests of the values (per-install salt,
file mode 700), matched by sliding a window of each value's length over every added line. It prints where
a secret is, never what it is.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from gpuc.core.atomicfile import atomic_write
from gpuc.core.envfile import read_env_file
from gpuc.core.errors import ConfigError
from gpuc.core.settings import OLD_ENV_NAMES, SECRET_ENV, SETTING_NAMES, env_name

HOOK_MARKER = "gpuc secret guard"
MIN_SECRET_LEN = 8
GitRunner = Callable[[list[str], Path], tuple[int, str]]


def hooks_dir(repo: Path, git: GitRunner) -> Path | None:
    """Where git looks for hooks (core.hooksPath respected), or None outside a repository."""
    code, out = git(["rev-parse", "--git-path", "hooks"], repo)
    if code != 0 or not out:
        return None
    path = Path(out)
    return path if path.is_absolute() else repo / path


def non_secret_env_names() -> list[str]:
    """gpuc settings that are not secrets (GPUC_PROVIDER=vast must not block every commit saying "vast")."""
    return sorted({env_name(f) for f in SETTING_NAMES if f not in SECRET_ENV} | set(OLD_ENV_NAMES))


def guarded_values(values: Mapping[str, str]) -> list[str]:
    skip = set(non_secret_env_names())
    return sorted({v for k, v in values.items() if k not in skip and len(v) >= MIN_SECRET_LEN})


def digest(salt: str, value: str) -> str:
    return hashlib.sha256((salt + value).encode("utf-8")).hexdigest()


def hook_script(env_files: list[Path], values: list[str], salt: str | None = None) -> str:
    salt = salt or secrets.token_hex(16)
    digests: dict[str, list[str]] = {}
    for value in values:
        digests.setdefault(str(len(value)), []).append(digest(salt, value))
    config = {
        "env_files": [str(p) for p in env_files],
        "salt": salt,
        "digests": digests,
        "skip_names": non_secret_env_names(),
        "min_len": MIN_SECRET_LEN,
    }
    return HOOK_TEMPLATE.replace("@CONFIG@", json.dumps(config, sort_keys=True))


def install_hook(repo: Path, env_file: Path, git: GitRunner) -> Path:
    """Write the guard into the repository's hooks; keep another pre-commit hook as pre-commit.local."""
    hooks = hooks_dir(repo, git)
    if hooks is None:
        raise ConfigError(f"{repo} is not a git repository", hint="run it inside your experiment repo, or --repo PATH")
    hook = hooks / "pre-commit"
    if hook.exists() and HOOK_MARKER not in hook.read_text(encoding="utf-8", errors="replace"):
        raise ConfigError(
            f"{hook} already exists and is not gpuc's",
            hint=f"mv {hook} {hook}.local (the guard runs it after its own checks), then run this again",
        )
    env_file = env_file.resolve()
    values = guarded_values(read_env_file(env_file)) if env_file.exists() else []
    hooks.mkdir(parents=True, exist_ok=True)
    # Mode 700: the digests are as private as the .env they come from.
    hook.unlink(missing_ok=True)
    atomic_write(hook, hook_script([env_file], values), mode=0o700)
    return hook


HOOK_TEMPLATE = r'''#!/usr/bin/env python3
# gpuc secret guard: refuses commits that add hf_/rpa_/sk- tokens, values from .env, or a .env file.
# Installed by `gpuc doctor --install-hook`. It holds no secret in clear text: it reads .env at commit
# time and keeps salted digests as a fallback. Bypass a false positive with `git commit --no-verify`.
import hashlib
import json
import os
import re
import subprocess
import sys

CONFIG = json.loads(r"""@CONFIG@""")
PATTERNS = [
    ("an hf_ token", re.compile(r"hf_[A-Za-z0-9]{16,}")),
    ("an rpa_ token", re.compile(r"rpa_[A-Za-z0-9]{16,}")),
    ("an sk- token", re.compile(r"sk-[A-Za-z0-9_-]{16,}")),
]


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def env_values(path):
    values = set()
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return values
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip()
        if key.startswith("export "):
            key = key[len("export "):].strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key not in CONFIG["skip_names"] and len(value) >= CONFIG["min_len"]:
            values.add(value)
    return values


def digest_hit(text):
    salt = CONFIG["salt"]
    for length, digests in CONFIG["digests"].items():
        n = int(length)
        wanted = set(digests)
        for i in range(len(text) - n + 1):
            if hashlib.sha256((salt + text[i:i + n]).encode("utf-8")).hexdigest() in wanted:
                return True
    return False


def added_lines():
    diff = git("diff", "--cached", "--no-color", "--no-ext-diff", "-U0", "--diff-filter=ACMR")
    path, number = "?", 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else line[4:]
        elif line.startswith("@@"):
            match = re.search(r"\+(\d+)", line)
            number = int(match.group(1)) if match else 0
        elif line.startswith("+"):
            yield path, number, line[1:]
            number += 1


def main():
    root = git("rev-parse", "--show-toplevel").strip()
    files = CONFIG["env_files"] + [os.path.join(root, ".env")]
    values = set()
    for path in files:
        values |= env_values(path)
    problems = []
    for name in git("diff", "--cached", "--name-only", "--diff-filter=ACMR").splitlines():
        base = os.path.basename(name)
        if base == ".env" or (base.startswith(".env.") and not base.endswith((".example", ".sample"))):
            problems.append(f"{name}: a .env file (secrets belong outside git)")
    for path, number, text in added_lines():
        for label, pattern in PATTERNS:
            if pattern.search(text):
                problems.append(f"{path}:{number}: {label}")
        if any(v in text for v in values) or digest_hit(text):
            problems.append(f"{path}:{number}: a secret value from .env")
    if problems:
        print("gpuc secret guard: commit refused", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print("  fix: remove it (read secrets from the environment) and `git add` again;", file=sys.stderr)
        print("       if this is a false positive: git commit --no-verify", file=sys.stderr)
        return 1
    local = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pre-commit.local")
    if os.access(local, os.X_OK):
        return subprocess.call([local] + sys.argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
