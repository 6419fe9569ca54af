"""`python -m gpuc.instance_side bootstrap`: make the pod ready for the experiment. Re-runnable by hand.

Steps, in order: system tools, torch check, git clone, python deps, HF login, model prefetch, smoke.
Each is data (a `Step`): what its result depends on (`inputs`, hashed into a done-marker), whether
that result is still in place (`check_done`), and the work (`run`). A second run skips every step
whose marker matches and whose work is still there, so re-running after a fix costs only what failed.

Every step is timed into `bootstrap.csv` (`step,seconds,status`, status ok|skipped|failed|
not-configured) and logged to `bootstrap.log`. Secrets come only from the pod's secrets file and
environment; they reach commands through the environment or a mode-600 file, never argv, and the log
is scrubbed of them. Nothing here traces commands (`set -x` would print what the env holds).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Optional, TextIO

from gpuc.core.clock import Clock
from gpuc.core.destinations import git_auth_args, git_environ
from gpuc.core.errors import ConfigError
from gpuc.core.podinstall import image_environ
from gpuc.instance_side.podfiles import TOKEN_ENV, AgentConfig, PodPaths, atomic_write, load_secrets
from gpuc.instance_side.podlog import PodLog

Status = Literal["ok", "skipped", "failed", "not-configured"]
HF_TOKEN_ENV = "HF_TOKEN"
COMMAND_TIMEOUT_S = 3600.0
LOG_TAIL_LINES = 200

# One JSON line: the torch the image ships, and whether it sees the GPU.
TORCH_PROBE = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, 'available': ok,"
    " 'devices': torch.cuda.device_count() if ok else 0}))\n"
)
PREFETCH = (
    "import sys\n"
    "from huggingface_hub import snapshot_download\n"
    "for repo in sys.argv[1:]:\n"
    "    print(repo, '->', snapshot_download(repo_id=repo))\n"
)


class StepFailed(Exception):
    """A step could not do its work; the message says why and what to do."""


@dataclass(frozen=True)
class BootstrapPlan:
    """What the bootstrap does on this pod (`bootstrap.json`, written by `gpuc up` from its settings)."""

    repo_url: str | None = None
    requirements: str = "requirements.txt"
    apt: tuple[str, ...] = ("git",)
    models: tuple[str, ...] = ()
    smoke: str | None = None
    # The image's interpreter: the experiment's deps go where its job runs, not into gpuc's own venv.
    python: str = "python3"
    torch: bool = True  # False: GPUC_BOOTSTRAP_TORCH=skip, an image without torch on purpose

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> BootstrapPlan:
        def text(name: str, default: str | None) -> str | None:
            value = data.get(name, default)
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"bootstrap plan {name!r} should be a string", hint="re-run gpuc up")
            return value

        def names(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
            value = data.get(name, list(default))
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"bootstrap plan {name!r} should be a list of strings", hint="re-run gpuc up")
            return tuple(v for v in value if v)

        def flag(name: str, default: bool) -> bool:
            value = data.get(name, default)
            if not isinstance(value, bool):
                raise ConfigError(f"bootstrap plan {name!r} should be true or false", hint="re-run gpuc up")
            return value

        return cls(
            repo_url=text("repo_url", None),
            requirements=text("requirements", "requirements.txt") or "requirements.txt",
            apt=names("apt", ("git",)),
            models=names("models", ()),
            smoke=text("smoke", None),
            python=text("python", "python3") or "python3",
            torch=flag("torch", True),
        )

    @classmethod
    def load(cls, paths: PodPaths) -> BootstrapPlan:
        """The plan `up` uploaded; without one, what the pod's config implies (its repo, defaults)."""
        try:
            data = json.loads(paths.bootstrap_plan.read_text(encoding="utf-8"))
        except FileNotFoundError:
            cfg = AgentConfig.load(paths.config)
            return cls(repo_url=cfg.git_remote)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read {paths.bootstrap_plan}: {type(exc).__name__}", hint="re-run gpuc up"
            ) from None
        if not isinstance(data, dict):
            raise ConfigError(f"{paths.bootstrap_plan} is not a JSON object", hint="re-run gpuc up")
        return cls.from_mapping(data)

    def to_json(self) -> str:
        data = asdict(self)
        data["apt"], data["models"] = list(self.apt), list(self.models)
        return json.dumps(data, indent=2)


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Step:
    name: str
    inputs: Callable[[], str | None]  # what the result depends on; None: the step is not configured
    run: Callable[[], str]  # does the work, returns a one-line note; raises StepFailed
    check_done: Callable[[], bool] = _always  # the work is still in place (a marker alone is no proof)


@dataclass(frozen=True)
class StepResult:
    step: str
    seconds: float
    status: Status
    note: str = ""


@dataclass(frozen=True)
class CommandResult:
    code: int
    output: str


Runner = Callable[[Sequence[str], Mapping[str, str], Optional[Path], float], CommandResult]  # 3.9: no `|` at run time


def subprocess_runner(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, timeout_s: float) -> CommandResult:
    try:
        proc = subprocess.run(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CommandResult(124, f"timed out after {timeout_s:.0f}s")
    except OSError as exc:
        return CommandResult(127, f"{argv[0]}: {exc.strerror or exc}")
    return CommandResult(proc.returncode, proc.stdout or "")


def bootstrap_environ(environ: Mapping[str, str], secrets: Mapping[str, str], paths: PodPaths) -> dict[str, str]:
    """What the steps' commands see: the user's secrets (HF_TOKEN, the git token), never the pod's
    heartbeat token; model downloads on the volume."""
    env = image_environ({**secrets, **environ})  # the user's pip and smoke test: the image's PYTHONPATH
    env.pop(TOKEN_ENV, None)
    env.setdefault("HF_HOME", str(paths.hf_home))
    env["DEBIAN_FRONTEND"] = "noninteractive"
    env["PIP_NO_INPUT"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return git_environ(env, secrets)


def digest(text: str) -> str:
    return hashlib.sha256(b"gpuc-bootstrap-v1\0" + text.encode()).hexdigest()


class Bootstrap:
    def __init__(
        self,
        paths: PodPaths,
        plan: BootstrapPlan,
        *,
        env: Mapping[str, str],
        runner: Runner,
        clock: Clock,
        log: PodLog,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.paths = paths
        self.plan = plan
        self.env = dict(env)
        self.runner = runner
        self.clock = clock
        self.log = log
        self.which = which

    # -- the loop ------------------------------------------------------------------------------
    def steps(self) -> list[Step]:
        return [
            Step("system", self._system_inputs, self._system_run, self._system_present),
            Step("torch", self._torch_inputs, self._torch_run),
            Step("git", self._git_inputs, self._git_run, self._git_present),
            Step("deps", self._deps_inputs, self._deps_run),
            Step("hf_login", self._hf_inputs, self._hf_run, self._hf_present),
            Step("models", self._models_inputs, self._models_run, self._models_present),
            Step("smoke", self._smoke_inputs, self._smoke_run),
        ]

    def run(
        self, steps: Sequence[Step] | None = None, progress: Callable[[StepResult], None] | None = None
    ) -> list[StepResult]:
        self.paths.bootstrap.mkdir(parents=True, exist_ok=True)
        results = []
        for step in self.steps() if steps is None else steps:
            results.append(self._one(step))
            if progress is not None:
                progress(results[-1])
        write_csv(self.paths.bootstrap_csv, results)
        return results

    def _one(self, step: Step) -> StepResult:
        start = self.clock.now()
        status, note = self._attempt(step)
        seconds = max(0.0, self.clock.now() - start)
        self.log.line(f"{step.name}: {status} in {seconds:.2f}s{' - ' + note if note else ''}")
        return StepResult(step.name, round(seconds, 3), status, self.log.scrub(note))

    def _attempt(self, step: Step) -> tuple[Status, str]:
        marker = self.paths.bootstrap / f"{step.name}.done"
        try:
            inputs = step.inputs()
            if inputs is None:
                return "not-configured", ""
            wanted = digest(inputs)
            if _read(marker) == wanted and step.check_done():
                return "skipped", "done before"
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
            note = step.run()
        except StepFailed as exc:
            return "failed", str(exc)
        except Exception as exc:  # one broken step must not hide how the others went
            return "failed", f"{type(exc).__name__}: {exc}"
        atomic_write(marker, wanted + "\n", 0o644)
        return "ok", note

    def command(self, argv: Sequence[str], *, cwd: Path | None = None, what: str) -> str:
        """Run one command; its output goes to the log (scrubbed), a failure raises StepFailed."""
        result = self.runner(argv, self.env, cwd, COMMAND_TIMEOUT_S)
        lines = result.output.splitlines()
        for line in lines[-LOG_TAIL_LINES:]:
            self.log.line(f"  | {line}")
        if result.code != 0:
            tail = self.log.scrub(lines[-1].strip()) if lines else "no output"
            raise StepFailed(f"{what} failed (exit {result.code}): {tail[:300]}")
        return result.output

    # -- system tools --------------------------------------------------------------------------
    def _system_inputs(self) -> str | None:
        return " ".join(sorted(self.plan.apt)) if self.plan.apt else None

    def _missing_packages(self) -> list[str]:
        if self.which("dpkg-query") is None:
            return [p for p in self.plan.apt if self.which(p) is None]
        missing = []
        for package in self.plan.apt:
            probe = self.runner(["dpkg-query", "-W", "-f=${Status}", package], self.env, None, 60.0)
            if probe.code != 0 or "install ok installed" not in probe.output:
                missing.append(package)
        return missing

    def _system_present(self) -> bool:
        return not self._missing_packages()

    def _system_run(self) -> str:
        missing = self._missing_packages()
        if not missing:
            return "all present"
        if self.which("apt-get") is None:
            raise StepFailed(f"{', '.join(missing)} missing and this image has no apt-get: install them yourself")
        self.command(["apt-get", "update", "-qq"], what="apt-get update")
        self.command(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], what="apt-get install")
        return "installed " + " ".join(missing)

    # -- torch ---------------------------------------------------------------------------------
    def _torch_inputs(self) -> str | None:
        return f"torch via {self.plan.python}" if self.plan.torch else None

    def _torch_run(self) -> str:
        result = self.runner([self.plan.python, "-c", TORCH_PROBE], self.env, None, 300.0)
        if result.code != 0:
            raise StepFailed(f"torch is not importable with {self.plan.python}: use an image that ships it")
        try:
            info = json.loads(result.output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise StepFailed("the torch probe printed nothing readable") from None
        described = f"torch {info.get('version')} (CUDA {info.get('cuda')})"
        if not info.get("available"):
            raise StepFailed(f"{described} sees no CUDA device")
        return f"{described}, {info.get('devices')} device(s)"

    # -- the experiment's repo -------------------------------------------------------------------
    def _git_inputs(self) -> str | None:
        return self.plan.repo_url

    def _git_present(self) -> bool:
        return (self.paths.repo / ".git").is_dir()

    def _git_run(self) -> str:
        url = self.plan.repo_url
        assert url is not None
        repo = self.paths.repo
        if (repo / ".git").is_dir():
            current = self.command(["git", "-C", str(repo), "remote", "get-url", "origin"], what="git remote")
            if current.strip() != url:
                raise StepFailed(f"{repo} is a clone of another repo: move it away, then re-run")
            return "already cloned"
        if repo.exists() and any(repo.iterdir()):
            raise StepFailed(f"{repo} exists and is not a git clone: move it away, then re-run")
        self.command(["git", *git_auth_args(url, self.env), "clone", "--quiet", url, str(repo)], what="git clone")
        return f"cloned into {repo}"

    # -- python deps ---------------------------------------------------------------------------
    def _requirements(self) -> Path:
        base = self.paths.repo if self.plan.repo_url else self.paths.workspace
        return base / self.plan.requirements

    def _deps_inputs(self) -> str | None:
        req = self._requirements()
        if not req.is_file():
            return None
        return f"{self.plan.python}\0{req}\0{_requirements_text(req)}"

    def _deps_run(self) -> str:
        req = self._requirements()
        loose = unpinned(req)
        if loose:
            shown = ", ".join(loose[:5]) + (" ..." if len(loose) > 5 else "")
            raise StepFailed(f"unpinned requirements in {req.name}: {shown} (pin them with ==, e.g. pip freeze)")
        self.command(
            [self.plan.python, "-m", "pip", "install", "--no-input", "-r", str(req)],
            cwd=req.parent,
            what="pip install",
        )
        return f"installed {req.name}"

    # -- Hugging Face login ----------------------------------------------------------------------
    def _hf_token(self) -> str | None:
        return self.env.get(HF_TOKEN_ENV) or None

    def _hf_inputs(self) -> str | None:
        token = self._hf_token()
        return None if token is None else f"hf-token {digest(token)} at {self._hf_token_file()}"

    def _hf_token_file(self) -> Path:
        return Path(self.env.get("HF_HOME") or self.paths.hf_home) / "token"

    def _hf_present(self) -> bool:
        return _read(self._hf_token_file()) == self._hf_token()

    def _hf_run(self) -> str:
        # What `huggingface-cli login` writes, without the token ever being an argument.
        path = self._hf_token_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, self._hf_token() or "", 0o600)
        return f"token stored in {path} (mode 600)"

    # -- model prefetch ------------------------------------------------------------------------
    def _models_inputs(self) -> str | None:
        if not self.plan.models:
            return None
        return f"{self.plan.python}\0{self.env.get('HF_HOME')}\0" + "\0".join(self.plan.models)

    def _model_dir(self, repo_id: str) -> Path:
        hub = Path(self.env.get("HF_HOME") or self.paths.hf_home) / "hub"
        return hub / ("models--" + repo_id.replace("/", "--"))

    def _models_present(self) -> bool:
        return all((self._model_dir(m) / "snapshots").is_dir() for m in self.plan.models)

    def _models_run(self) -> str:
        self.command([self.plan.python, "-c", PREFETCH, *self.plan.models], what="model download")
        return f"{len(self.plan.models)} model(s) in {self.env.get('HF_HOME')}"

    # -- smoke test ----------------------------------------------------------------------------
    def _smoke_inputs(self) -> str | None:
        return self.plan.smoke

    def _smoke_run(self) -> str:
        assert self.plan.smoke is not None
        cwd = self.paths.repo if self._git_present() else self.paths.workspace
        self.command(["sh", "-c", self.plan.smoke], cwd=cwd, what="smoke test")
        return "passed"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


_PIN = re.compile(r"(===?|\s@\s)")
_INCLUDE = re.compile(r"^(-r|-c|--requirement|--constraint)[\s=]+(\S+)")


def _logical_lines(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    return [line.split(" #", 1)[0].strip() for line in text.splitlines()]


def _requirements_text(path: Path, depth: int = 0) -> str:
    """The file and what it includes: a change anywhere re-runs the install."""
    parts = [path.read_text(encoding="utf-8")]
    for line in _logical_lines(path):
        match = _INCLUDE.match(line)
        if match and depth < 5:
            included = path.parent / match.group(2)
            parts.append(_requirements_text(included, depth + 1) if included.is_file() else f"missing {included}")
    return "\0".join(parts)


def unpinned(path: Path, depth: int = 0) -> list[str]:
    """Requirement lines without an exact version (==) or a direct reference (name @ url)."""
    loose: list[str] = []
    for line in _logical_lines(path):
        if not line or line.startswith("#"):
            continue
        include = _INCLUDE.match(line)
        if include:
            nested = path.parent / include.group(2)
            loose += unpinned(nested, depth + 1) if nested.is_file() and depth < 5 else [line]
            continue
        if line.startswith("--"):
            continue  # --index-url, --extra-index-url, --hash...: options, not requirements
        requirement = line.split(";", 1)[0].strip()
        if line.startswith("-") or not _PIN.search(requirement):
            loose.append(requirement)
    return loose


def write_csv(path: Path, results: Sequence[StepResult]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["step", "seconds", "status"])
    for result in results:
        writer.writerow([result.step, f"{result.seconds:.3f}", result.status])
    atomic_write(path, buffer.getvalue(), 0o644)


def read_csv(path: Path) -> list[tuple[str, float, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    return [(r[0], float(r[1]), r[2]) for r in rows[1:]]


def summary_line(result: StepResult) -> str:
    return f"  {result.step:<9} {result.seconds:>8.2f}s  {result.status:<15}{result.note}".rstrip()


def main(paths: PodPaths, clock: Clock, out: TextIO | None = None) -> int:
    """The CLI: 0 when no step failed, 1 otherwise (the CSV and the log say which and why)."""
    out = out or sys.stdout
    plan = BootstrapPlan.load(paths)
    secrets = load_secrets(paths.secrets)
    env = bootstrap_environ(os.environ, secrets, paths)
    log = PodLog(paths.bootstrap_log, clock, role="bootstrap", secrets=[v for v in secrets.values() if v])
    paths.bootstrap.mkdir(parents=True, exist_ok=True)
    bootstrap = Bootstrap(paths, plan, env=env, runner=subprocess_runner, clock=clock, log=log)
    results = bootstrap.run(progress=lambda r: print(summary_line(r), file=out, flush=True))
    failed = [r.step for r in results if r.status == "failed"]
    verdict = f"bootstrap: {len(failed)} step(s) failed: {', '.join(failed)}" if failed else "bootstrap: ready"
    print(f"{verdict} (times in {paths.bootstrap_csv}, log in {paths.bootstrap_log})", file=out)
    return 1 if failed else 0
