"""The pre-rent checklist as checks: each one passes (✓) or fails (✗) with the command that fixes it.

Pure checks over injected dependencies (a git runner, the watchdog's status call, a balance reader), so
every ✗ is testable without a network, a provider account or a real repository.

The secret guard (`gpuc doctor --install-hook`) is written by setup/hook.py; a check here says whether it
is installed.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuc.client.context import Ctx
from gpuc.client.money.balance import BalanceReport, account_checks, check_balances, provider_factories
from gpuc.client.setup.checks import Check, fail, ok, render, warn
from gpuc.client.setup.doctor_hook import check_hook_setup
from gpuc.client.setup.doctor_live import LiveReport
from gpuc.client.setup.doctor_live import render as render_facts
from gpuc.client.setup.doctor_results import check_results
from gpuc.client.setup.hook import HOOK_MARKER, GitRunner, hooks_dir
from gpuc.core.api import StatusResponse
from gpuc.core.envfile import env_file_mode_ok
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.providers.registry import keyed_providers
from gpuc.core.settings import Settings, env_name
from gpuc.core.settingsload import load_settings_lenient


def run_git(args: list[str], cwd: Path) -> tuple[int, str]:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20, check=False)
    except FileNotFoundError:
        return 127, ""
    except subprocess.TimeoutExpired:
        return 124, ""
    return done.returncode, done.stdout.strip()


# --- .env ------------------------------------------------------------------------------------------------


def env_source(env_file: Path, environ: Mapping[str, str], cwd: Path) -> Check:
    """Which .env gpuc read, and why that one (core.envfile.find_env_file chose it): a key that "is in
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


def check_env_file(env_file: Path, git: GitRunner, renting: bool = True) -> list[Check]:
    """`renting`: GPUC_PROVIDER is a real provider, whose key belongs in the .env. The local provider
    needs no key: there a missing .env is worth a line, not a ✗."""
    if not env_file.exists():
        fix = f"touch {env_file} && chmod 600 {env_file}, then add RUNPOD_API_KEY=... or VAST_API_KEY=..."
        if not renting:
            return [warn(".env exists", f"{env_file} is missing: fine while you use the local provider only", fix)]
        return [fail(".env exists", f"{env_file} is missing", fix)]
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


def check_ssh_key(settings: Settings) -> Check:
    """A rented pod is reached over ssh with this key: missing, readable by others (ssh then refuses to use
    it) or without its .pub (which goes to the provider account), the first `up` fails after renting."""
    key = settings.ssh_key_path.expanduser()
    make = f"ssh-keygen -t ed25519 -f {key}, then add {key}.pub to your provider account's SSH keys"
    if not key.is_file():
        return fail("ssh key", f"no ssh key at {key}: `up` reaches a rented pod over ssh", make)
    mode = key.stat().st_mode & 0o777
    if mode & 0o077:
        return fail(
            "ssh key",
            f"{key} has mode {mode:o}: ssh refuses a private key others can read",
            f"chmod 600 {key}",
        )
    public = key.with_name(key.name + ".pub")
    if not public.is_file():
        make_public = f"ssh-keygen -y -f {key} > {public}, then add it to your provider account's SSH keys"
        missing = f"{key} has no {public.name} beside it"
        if settings.provider == "runpod":  # `up` hands a RunPod pod this public half, and refuses without it
            return fail("ssh key", f"{missing}: `up` hands it to each RunPod pod", make_public)
        return warn("ssh key", f"{missing}: the provider account needs the public half", make_public)
    return ok("ssh key", f"{key} (mode {mode:o}); {public.name} goes to your provider account's SSH keys")


def check_registered_keys(ctx: Ctx, names: tuple[str, ...]) -> list[Check]:
    """For each keyed provider whose pods are handed gpuc's key (RunPod): is that key registered there too
    (client/onpod/keys.py says why a missing one is a warning, not a refusal)."""
    from gpuc.client.onpod.keys import key_standing, public_key_path, read_public_key

    checks: list[Check] = []
    for name in names:
        try:
            provider = ctx.new_provider(name)
        except GpucError:
            continue  # its key's own check says so
        try:
            if not provider.takes_public_key:
                continue
            try:
                key = read_public_key(ctx.settings)
            except ConfigError:
                continue  # the "ssh key" check above says what to do
            standing = key_standing(provider, key, str(public_key_path(ctx.settings)))
        finally:
            provider.close()
        if standing is not None:
            checks.append(Check(name=f"ssh key at {name}", status=standing.status, detail=standing.detail,
                                fix=standing.fix))  # fmt: skip
    return checks


def no_key_checks() -> list[Check]:
    return []


# --- balance ---------------------------------------------------------------------------------------------


def check_balance(report: BalanceReport) -> list[Check]:
    lines = [line for line in report.providers if line.configured]
    if not lines:
        return [warn("balance", "no provider account configured", "add RUNPOD_API_KEY or VAST_API_KEY to .env")]
    checks: list[Check] = []
    for line in lines:
        name = f"balance {line.provider}"
        if line.later:  # rate limited: not read now, which says nothing against the key or the account
            checks.append(warn(name, line.error or "not read now", line.hint or "run `gpuc doctor` again later"))
        elif line.error or line.balance_usd is None:
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
            checks.append(ok(name, f"${line.balance_usd:.2f}, within ${report.low_usd:.2f}-${report.cap_usd:.2f}"))
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


def read_once(status: Callable[[], StatusResponse]) -> Callable[[], StatusResponse]:
    """The watchdog's status read once for every check that needs it, its failure too."""
    got: list[StatusResponse | GpucError] = []

    def answer() -> StatusResponse:
        if not got:
            try:
                got.append(status())
            except GpucError as exc:
                got.append(exc)
        if isinstance(got[0], GpucError):
            raise got[0]
        return got[0]

    return answer


def check_channels(status: Callable[[], StatusResponse], settings: Settings) -> Check:
    """The channels of .env, and whether the watchdog (which sends a pod's failure) has them too.
    Channels are named by number and kind, never by URL (a URL holds its token)."""
    from gpuc.functions.channels import channel_gaps, describe, gap_fix, is_local_watchdog, settings_channels

    name = "notification channels"
    try:
        laptop = describe(settings_channels(settings))
    except ConfigError as exc:
        return fail(name, exc.message, exc.hint or "fix GPUC_NOTIFY_URLS (README: Notifications)")
    if not laptop:
        return warn(
            name,
            "GPUC_NOTIFY_URLS is not set: a failed job or a kept pod reaches no phone",
            "set GPUC_NOTIFY_URLS in .env, e.g. ntfy://<an unguessable topic> (README: Notifications)",
        )
    kinds = ", ".join(f"{c.index} ({c.kind})" for c in laptop)
    try:
        held = status().channels
    except GpucError:  # unreachable: its own ✗ above says so
        return warn(name, f"{kinds} in .env; whether the watchdog has them is unknown", "start the watchdog")
    local = is_local_watchdog(settings.watchdog_url)
    if gaps := channel_gaps(laptop, held, local=local):
        fix = gap_fix(local=local)
        return fail(name, "; ".join(g.removesuffix(f": {fix}") for g in gaps), fix)
    return ok(name, f"{kinds}; the watchdog has them too")


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


# --- the pre-commit secret guard (setup/hook.py) -----------------------------------------------------


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


# --- all of it -------------------------------------------------------------------------------------------


@dataclass
class DoctorDeps:
    settings: Settings
    repo: Path
    git: GitRunner
    status: Callable[[], StatusResponse]
    balances: Callable[[], BalanceReport]
    registered_keys: Callable[[], list[Check]] = no_key_checks  # RunPod: is gpuc's ssh key registered there


def env_path(settings: Settings, cwd: Path) -> Path:
    return settings.env_file if settings.env_file.is_absolute() else cwd / settings.env_file


def run_checks(deps: DoctorDeps, cwd: Path, environ: Mapping[str, str] | None = None) -> list[Check]:
    env_file = env_path(deps.settings, cwd)
    checks = [env_source(env_file, os.environ if environ is None else environ, cwd)]
    checks += check_env_file(env_file, deps.git, renting=deps.settings.provider != "local")
    checks += check_keys(deps.settings)
    if deps.settings.provider != "local":  # the local provider's pods need no ssh
        checks.append(check_ssh_key(deps.settings))
        checks += deps.registered_keys()
    checks.append(check_deadline(deps.settings))
    checks.append(check_results(deps.settings))  # nowhere to sync: a rented pod KEPT, billing
    balances = deps.balances()
    checks += check_balance(balances) + [Check(**c) for c in account_checks(balances, deps.settings)]
    if _has(deps.settings, "admin_token"):  # without one, the token's ✗ above says the one thing to do
        status = read_once(deps.status)
        checks += check_watchdog(status, deps.settings.watchdog_url)
        checks.append(check_channels(status, deps.settings))
    hook = check_hook_setup(deps.settings)  # Vast's outbid webhook, if set up: can Vast reach the watchdog?
    checks += [hook] if hook is not None else []
    checks.append(check_hook(deps.repo, deps.git))
    return checks


def settings_checks(ctx: Ctx) -> list[Check]:
    """A bad setting (GPUC_IDLE_DESTROY_S=20 min) is one ✗ naming its file, not the end of every check:
    the others run with that setting at its default."""
    try:
        ctx.settings  # noqa: B018 (the property loads them)
    except ConfigError:
        ctx.settings, bad = load_settings_lenient()
        return [fail("setting", error.message, error.hint or "") for error in bad]
    return []


def doctor_deps(ctx: Ctx, repo: Path) -> DoctorDeps:
    """What the checks read, from the Ctx: the watchdog's status, each keyed account's balance, real git."""
    remote = tuple(keyed_providers(ctx.settings))
    return DoctorDeps(
        settings=ctx.settings,
        repo=repo,
        git=run_git,
        status=ctx.watchdog.status,
        balances=lambda: check_balances(ctx.settings, provider_factories(ctx, remote)),
        registered_keys=lambda: check_registered_keys(ctx, remote),
    )


def doctor_text(checks: list[Check], facts: LiveReport | None, installed: Path | None) -> str:
    lines = [f"installed the secret guard: {installed}"] if installed else []
    lines.append(render([*checks, *(facts.checks if facts else [])]))
    if facts is not None:
        lines.append(render_facts(facts))
    return "\n".join(lines)


def doctor_json(checks: list[Check], facts: LiveReport | None, installed: Path | None) -> str:
    """--json: ok (no check failed), installed_hook, checks[]; with --live also facts[]."""
    every = [*checks, *(facts.checks if facts else [])]
    passed = all(c.status != "fail" for c in every)
    body: dict[str, object] = {"ok": passed, "installed_hook": str(installed) if installed else None}
    if facts is not None:
        body["facts"] = [f.model_dump() for f in facts.facts]
    return json.dumps({**body, "checks": [c.model_dump() for c in every]}, indent=2)
