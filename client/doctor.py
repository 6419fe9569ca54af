"""The pre-rent checklist as checks: each one passes (✓) or fails (✗) with the command that fixes it.

Pure checks over injected dependencies (a git runner, the watchdog's status call, a balance reader), so
every ✗ is testable without a network, a provider account or a real repository.

The secret guard (`gpuc doctor --install-hook`) is a self-contained Python pre-commit hook: it needs
neither gpuc nor a virtualenv at commit time. It refuses a commit whose added lines hold an `hf_`, `rpa_`
or `sk-` style token or a secret value from `.env`, or that adds a `.env` file. It must not become a copy
of the secrets it guards, so it never holds a value in clear text: at commit time it reads `.env` itself
(current values, rotated keys included), and as a fallback for a `.env` that moved it keeps salted
SHA-256 digests of the values (per-install salt, file mode 700), matched by sliding a window of each
value's length over every added line. It prints where a secret is, never what it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from gpuc.client.cmd_balance import BalanceReport, account_checks
from gpuc.core.api import StatusResponse
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.ledger import atomic_write
from gpuc.core.settings import SECRET_ENV, SETTING_NAMES, Settings, env_file_mode_ok, env_name, read_env_file

CheckStatus = Literal["ok", "fail", "warn"]
SYMBOLS: dict[CheckStatus, str] = {"ok": "✓", "fail": "✗", "warn": "!"}
HOOK_MARKER = "gpuc secret guard"
MIN_SECRET_LEN = 8
GitRunner = Callable[[list[str], Path], tuple[int, str]]


class Check(BaseModel):
    name: str
    status: CheckStatus
    detail: str
    fix: str | None = None


def ok(name: str, detail: str) -> Check:
    return Check(name=name, status="ok", detail=detail)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name=name, status="fail", detail=detail, fix=fix)


def warn(name: str, detail: str, fix: str) -> Check:
    return Check(name=name, status="warn", detail=detail, fix=fix)


def run_git(args: list[str], cwd: Path) -> tuple[int, str]:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False
        )
    except FileNotFoundError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    return done.returncode, done.stdout.strip()


# --- .env ------------------------------------------------------------------------------------------------


def env_source(env_file: Path, environ: Mapping[str, str], cwd: Path) -> Check:
    """Which .env gpuc read, and why that one (core.settings.find_env_file chose it): a key that "is in
    .env" but not seen is most often in another .env than the one read."""
    config = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "gpuc" / ".env"
    if environ.get("GPUC_ENV_FILE"):
        why = "GPUC_ENV_FILE names it"
    elif not env_file.exists():
        return ok(".env read", f"none: no .env from {cwd} up to the repo root, nor {config}")
    elif env_file == config:
        why = "your config folder; none from here up to the repo root"
    elif env_file.parent == cwd.resolve():
        why = "this folder"
    else:
        why = "the nearest from this folder up to the repo root"
    return ok(".env read", f"{env_file} ({why})")


def check_env_file(env_file: Path, git: GitRunner) -> list[Check]:
    if not env_file.exists():
        return [
            fail(
                ".env exists",
                f"{env_file} is missing",
                f"touch {env_file} && chmod 600 {env_file}, then add RUNPOD_API_KEY=... or VAST_API_KEY=...",
            )
        ]
    return [ok(".env exists", str(env_file)), check_env_mode(env_file), check_env_ignored(env_file, git)]


def check_env_mode(env_file: Path) -> Check:
    if env_file_mode_ok(env_file):
        return ok(".env mode 600", "only you can read it")
    mode = stat.S_IMODE(env_file.stat().st_mode)
    return fail(".env mode 600", f"mode is {mode:o}: other users can read your keys", f"chmod 600 {env_file}")


def check_env_ignored(env_file: Path, git: GitRunner) -> Check:
    where = env_file.parent
    tracked, _ = git(["ls-files", "--error-unmatch", env_file.name], where)
    if tracked == 0:
        return fail(
            ".env git-ignored",
            f"{env_file} is committed to git: its keys are in the history",
            f"git rm --cached {env_file.name} && echo .env >> .gitignore, then rotate every key in it",
        )
    code, _ = git(["check-ignore", "-q", env_file.name], where)
    if code == 0:
        return ok(".env git-ignored", "git will not commit it")
    if code == 1:
        return fail(
            ".env git-ignored",
            f"{env_file} is not git-ignored: one `git add .` publishes your keys",
            f"echo .env >> {where / '.gitignore'}",
        )
    return ok(".env git-ignored", "not inside a git repository: nothing can commit it")


# --- keys ------------------------------------------------------------------------------------------------


def _has(settings: Settings, field: str) -> bool:
    value = getattr(settings, field)
    return value is not None and bool(value.get_secret_value())


def check_keys(settings: Settings) -> list[Check]:
    """Presence only: a key's value is never read into a message."""
    remote = {"runpod": "runpod_api_key", "vast": "vast_api_key"}
    present = [env_name(f) for f in remote.values() if _has(settings, f)]
    checks: list[Check] = []
    wanted = remote.get(settings.provider)
    if wanted is not None and not _has(settings, wanted):
        checks.append(
            fail(
                "provider key",
                f"GPUC_PROVIDER is {settings.provider} but {env_name(wanted)} is not set",
                f"add {env_name(wanted)}=... to {settings.env_file} (mode 600)",
            )
        )
    elif present:
        checks.append(ok("provider key", ", ".join(present) + " set"))
    else:
        checks.append(
            warn(
                "provider key",
                "no RunPod or Vast key: only the local provider works",
                f"add RUNPOD_API_KEY=... or VAST_API_KEY=... to {settings.env_file} (mode 600)",
            )
        )
    if _has(settings, "admin_token"):
        checks.append(ok("watchdog admin token", "GPUC_ADMIN_TOKEN set"))
    else:
        checks.append(
            fail(
                "watchdog admin token",
                "GPUC_ADMIN_TOKEN is not set: gpuc cannot talk to its watchdog",
                "run `gpuc watchdog serve` once (it stores one in your gpuc home), or set GPUC_ADMIN_TOKEN",
            )
        )
    return checks


def check_deadline(settings: Settings) -> Check:
    """What bounds a pod that looks alive, on every provider: gpuc's own deadline, held in two places."""
    hours, cap = settings.max_hours, settings.max_lifetime_hours
    if hours > cap:
        return fail(
            "money bound (deadline)",
            f"GPUC_MAX_HOURS {hours:g} is above GPUC_MAX_LIFETIME_HOURS {cap:g}: `up` refuses every pod",
            f"lower GPUC_MAX_HOURS to at most {cap:g}, or raise GPUC_MAX_LIFETIME_HOURS",
        )
    return ok(
        "money bound (deadline)",
        f"a pod ends at its deadline (--max-hours, default {hours:g} h; `gpuc extend` up to {cap:g} h from its "
        "start), held by the pod's agent (sync first) and by the watchdog if the agent does not, whatever its "
        "pings and GPU say. RunPod and Vast alike: no provider-side limit counts (RunPod's terminateAfter is "
        "sent but never enforced, runpodctl #330; Vast has none)",
    )


# --- balance ---------------------------------------------------------------------------------------------


def check_balance(report: BalanceReport) -> list[Check]:
    lines = [line for line in report.providers if line.configured]
    if not lines:
        return [
            warn("balance", "no provider account configured", "add RUNPOD_API_KEY or VAST_API_KEY to .env")
        ]
    checks: list[Check] = []
    for line in lines:
        name = f"balance {line.provider}"
        if line.error or line.balance_usd is None:
            checks.append(fail(name, f"cannot read it: {line.error}", line.hint or "check the key and retry"))
        elif line.balance_usd > report.cap_usd:
            checks.append(
                fail(
                    name,
                    f"${line.balance_usd:.2f} is above the ${report.cap_usd:.2f} cap",
                    "do not top up past the cap (a leaked key spends it all); or raise GPUC_BALANCE_CAP_USD",
                )
            )
        elif line.balance_usd < report.low_usd:
            checks.append(
                fail(
                    name,
                    f"${line.balance_usd:.2f} is below the ${report.low_usd:.2f} low mark: pods stop at 0",
                    f"top up to at most ${report.cap_usd:.2f} before the next run",
                )
            )
        else:
            checks.append(
                ok(name, f"${line.balance_usd:.2f}, within ${report.low_usd:.2f}-${report.cap_usd:.2f}")
            )
    return checks


# --- the watchdog ----------------------------------------------------------------------------------------


def check_watchdog(status: Callable[[], StatusResponse], url: str) -> list[Check]:
    try:
        answer = status()
    except GpucError as exc:
        return [
            fail(
                "watchdog reachable",
                f"{url}: {exc.message}",
                exc.hint or "start it: `gpuc watchdog serve` (local) or `gpuc watchdog deploy` (AWS)",
            )
        ]
    checks = [ok("watchdog reachable", url)]
    last, period = answer.reaper_last_run, answer.reaper_period_s
    if last is None:
        checks.append(
            fail(
                "reaper ran recently",
                "the reaper has never run: nothing destroys a pod whose agent died",
                "`gpuc watchdog serve` runs it on a timer; on AWS check the schedule (gpuc watchdog status)",
            )
        )
        return checks
    # The server's own clock on both sides: a laptop clock that is off must not fake a stale reaper.
    age = answer.server_time - last
    if age > 2 * period:
        checks.append(
            fail(
                "reaper ran recently",
                f"last run {age / 60:.0f} min ago, period {period / 60:.0f} min: it is stale",
                "restart it: `gpuc watchdog serve`, or redeploy with `gpuc watchdog deploy`",
            )
        )
    else:
        checks.append(ok("reaper ran recently", f"{age / 60:.0f} min ago (period {period / 60:.0f} min)"))
    checks.append(check_blind(answer))
    return checks


def check_blind(answer: StatusResponse) -> Check:
    """A provider the reaper cannot read is one where nothing is destroyed: a frozen pod there bills."""
    if not answer.reaper_blind_since:
        return ok("reaper sees every provider", "its last pass read every provider")
    parts = []
    for blind in answer.reaper_blind_since:
        lasted = max(0.0, answer.server_time - blind.since)
        parts.append(f"{blind.provider} since {lasted / 60:.0f} min ago" + (f" ({blind.why})" if blind.why else ""))
    names = ", ".join(b.provider for b in answer.reaper_blind_since)
    return fail(
        "reaper sees every provider",
        f"cannot read {'; '.join(parts)}: pods there are not watched",
        f"check the {names} API key the watchdog uses (revoked? expired?) and the provider's status page; "
        "`gpuc watchdog status` shows when it recovers",
    )


# --- the pre-commit secret guard -------------------------------------------------------------------------


def hooks_dir(repo: Path, git: GitRunner) -> Path | None:
    """Where git looks for hooks (core.hooksPath respected), or None outside a repository."""
    code, out = git(["rev-parse", "--git-path", "hooks"], repo)
    if code != 0 or not out:
        return None
    path = Path(out)
    return path if path.is_absolute() else repo / path


def check_hook(repo: Path, git: GitRunner) -> Check:
    hooks = hooks_dir(repo, git)
    if hooks is None:
        return warn(
            "pre-commit secret guard",
            f"{repo} is not a git repository",
            "run `gpuc doctor` inside your experiment repository (or pass --repo PATH)",
        )
    hook = hooks / "pre-commit"
    if not hook.exists():
        return fail("pre-commit secret guard", f"no pre-commit hook in {repo}", "gpuc doctor --install-hook")
    if HOOK_MARKER not in hook.read_text(encoding="utf-8", errors="replace"):
        return fail(
            "pre-commit secret guard",
            f"{hook} is another hook",
            f"mv {hook} {hook}.local (the guard runs it after its checks), then gpuc doctor --install-hook",
        )
    if not os.access(hook, os.X_OK):
        return fail("pre-commit secret guard", f"{hook} is not executable", f"chmod 700 {hook}")
    return ok("pre-commit secret guard", str(hook))


def non_secret_env_names() -> list[str]:
    """gpuc settings that are not secrets (GPUC_PROVIDER=vast must not block every commit saying "vast")."""
    return sorted(env_name(f) for f in SETTING_NAMES if f not in SECRET_ENV)


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
        raise ConfigError(
            f"{repo} is not a git repository", hint="run it inside your experiment repo, or --repo PATH"
        )
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


# --- all of it -------------------------------------------------------------------------------------------


@dataclass
class DoctorDeps:
    settings: Settings
    repo: Path
    git: GitRunner
    status: Callable[[], StatusResponse]
    balances: Callable[[], BalanceReport]


def env_path(settings: Settings, cwd: Path) -> Path:
    return settings.env_file if settings.env_file.is_absolute() else cwd / settings.env_file


def run_checks(deps: DoctorDeps, cwd: Path, environ: Mapping[str, str] | None = None) -> list[Check]:
    env_file = env_path(deps.settings, cwd)
    checks = [env_source(env_file, os.environ if environ is None else environ, cwd)]
    checks += check_env_file(env_file, deps.git)
    checks += check_keys(deps.settings)
    checks.append(check_deadline(deps.settings))
    balances = deps.balances()
    checks += check_balance(balances) + [Check(**c) for c in account_checks(balances, deps.settings)]
    checks += check_watchdog(deps.status, deps.settings.functions_url)
    checks.append(check_hook(deps.repo, deps.git))
    return checks


def render(checks: list[Check]) -> str:
    lines: list[str] = []
    for check in checks:
        lines.append(f"{SYMBOLS[check.status]} {check.name:<26} {check.detail}")
        if check.fix and check.status != "ok":
            lines.append(f"    fix: {check.fix}")
    return "\n".join(lines)
