"""Before a rented pod is created: can its results go anywhere?

A pod whose sync fails is KEPT, billing, until someone copies its results out (F16): the one failure
worse than a few more minutes is losing the results. So `up` proves the destination first, with what the
pod itself will use, and refuses (costing nothing) when it does not answer:

- it is set: `GPUC_RESULTS_BUCKET` and/or `GPUC_GIT_REMOTE`;
- it parses, and is one a rented pod can reach (a `file://` folder on a rented pod is the pod's own disk,
  destroyed with it; a git remote over ssh needs a key the pod does not have);
- it takes a write and answers a list, with the destination's OWN credentials: `GPUC_S3_ACCESS_KEY_ID` /
  `GPUC_S3_SECRET_ACCESS_KEY` (the key the watchdog signs the pod's grants with, from its own copy: the pod
  never holds it, functions/grants.py; `up` checks the watchdog holds one for this bucket,
  client/pods/plan.py check_results_grant) and `GPUC_GIT_TOKEN` (the pod's, core/podsecrets.py). Never the
  laptop's AWS chain, git credential helpers or ssh agent: a check that passes on them would pass for a
  destination the pod then cannot write.

One small probe is made and removed: the S3 object `<prefix>/<experiment>/gpuc-probe-<random>` (beside
the run folders the pod writes), a file of that name in a `file://` folder, or for git the ref
`refs/gpuc-probe/<random>` (a root commit of the empty tree). A ref outside refs/heads and refs/tags is
the least invasive write that proves push rights: no branch appears, no CI runs on it, nothing is merged,
and deleting it leaves the repo as it was. `git push --dry-run` proves nothing (it never asks the server
to accept anything), and `git ls-remote` proves only read access. What it cannot prove: that a protected
branch accepts the pod's push (a rule on `main` applies to branches only); the README says so.
"""

from __future__ import annotations

import contextlib
import os
import secrets as pysecrets
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from gpuc.core.destinations import S3Location, check_remote, git_auth_args, git_environ, git_runner
from gpuc.core.errors import ConfigError, SyncError
from gpuc.core.podsecrets import GIT_TOKEN_ENV, S3_KEYS
from gpuc.core.redact import redact
from gpuc.core.s3client import s3_client
from gpuc.core.settings import Settings

BUCKET_ENV = "GPUC_RESULTS_BUCKET"
ENDPOINT_ENV = "GPUC_S3_ENDPOINT_URL"
GIT_REMOTE_ENV = "GPUC_GIT_REMOTE"
PROBE_BODY = b"gpuc: a probe of the results destination, removed at once; safe to delete\n"
GIT_PROBE_TIMEOUT_S = 60.0
# One working value per kind: the refusal shows them, the README's "Your first rental" step 3 too.
EXAMPLES = (
    f"S3: {BUCKET_ENV}=s3://my-bucket/gpuc with {S3_KEYS[0]}/{S3_KEYS[1]} (a key for that bucket only)",
    f"R2: the same plus {ENDPOINT_ENV}=https://<account id>.r2.cloudflarestorage.com",
    f"git: {GIT_REMOTE_ENV}=https://github.com/you/exp.git with {GIT_TOKEN_ENV} (push rights; files < 10 MB)",
    f"file: {BUCKET_ENV}=file:///path/to/results (the local provider only: it is a folder on the pod's machine)",
)
S3ClientFactory = Callable[[str | None, Mapping[str, str]], Any]
GitRun = Callable[[list[str], Path, Mapping[str, str]], tuple[int, str]]


@dataclass(frozen=True)
class DestinationCheck:
    """What was proven, in words (`lines`, for `up` to print), and what is worth knowing (`warnings`:
    a probe left behind, large files with nowhere to go). A failure is a ConfigError, never a field here."""

    lines: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def check_destination(
    settings: Settings,
    experiment: str,
    *,
    s3_factory: S3ClientFactory | None = None,
    git_run: GitRun | None = None,
) -> DestinationCheck:
    """Prove, for a rented pod, that its results can go somewhere; raise ConfigError naming what is wrong
    and how to fix it. The factories are for tests (a fake must be as strict as the real thing)."""
    bucket, remote = settings.results_bucket, settings.git_remote
    if not bucket and not remote:
        raise _nowhere()
    lines: list[str] = []
    warnings: list[str] = []
    probe = f"gpuc-probe-{pysecrets.token_hex(4)}"
    if bucket:
        line, warning = _check_bucket(settings, bucket, experiment, probe, s3_factory)
        lines.append(line)
        warnings += [warning] if warning else []
    if remote:
        lines.append(_check_git(settings, remote, probe, git_run))
        if not bucket:
            warnings.append(
                f"results of 10 MB or more have nowhere to go (git takes smaller ones only): set {BUCKET_ENV} "
                "too if the job writes any"
            )
    return DestinationCheck(tuple(lines), tuple(warnings))


def check_setting(settings: Settings) -> str:
    """What can be said of the destination without a request (`gpuc doctor`): it is set, it parses, it
    is one a rented pod can reach, and its keys are there; ConfigError otherwise, as `up` would raise.
    The write and the list are `up`'s to prove, before it rents."""
    bucket, remote = settings.results_bucket, settings.git_remote
    if not bucket and not remote:
        raise _nowhere()
    kinds: list[str] = []
    if bucket:
        if _folder_of(bucket) is not None:
            _folder_allowed(settings)
            kinds.append(f"a folder ({BUCKET_ENV})")
        else:
            _s3_target(bucket, "exp", "probe")
            _s3_credentials(settings)
            kinds.append(f"an S3 bucket ({BUCKET_ENV}, its keys set)")
    if remote:
        _git_target(settings, remote)
        kinds.append(f"a git remote ({GIT_REMOTE_ENV}{', token set' if settings.git_token else ''})")
    return " and ".join(kinds) + "; `up` proves a write and a list before it rents"


def _nowhere() -> ConfigError:
    return ConfigError(
        f"a rented pod would have nowhere to send its results: {BUCKET_ENV} is not set (nor {GIT_REMOTE_ENV}), "
        "so its sync would fail and the pod stay KEPT, billing",
        hint="set one in your .env: " + "; ".join(EXAMPLES),
    )


def require_destination(settings: Settings, experiment: str, echo: Callable[[str], None]) -> None:
    """`up`'s call: the check, its lines printed; refuses (ConfigError) before anything is rented."""
    result = check_destination(settings, experiment)
    for line in (*result.lines, *(f"warning: {w}" for w in result.warnings)):
        echo(line)


# -- s3:// and file:// -----------------------------------------------------------------------------------
def _check_bucket(
    settings: Settings, bucket: str, experiment: str, probe: str, factory: S3ClientFactory | None
) -> tuple[str, str | None]:
    folder = _folder_of(bucket)
    if folder is not None:
        return _check_folder(settings, folder / experiment, probe), None
    return _check_s3(settings, bucket, experiment, probe, factory)


def _folder_of(bucket: str) -> Path | None:
    """The folder of a file:// destination; None for s3://; refused otherwise."""
    url = urlparse(bucket)
    if url.scheme == "file" and url.path:
        return Path(unquote(url.path))
    if url.scheme != "s3":
        raise ConfigError(
            # The scheme only: a URL may hold a password, and secrets never print.
            f"{BUCKET_ENV} is neither s3://bucket/prefix nor file:///path (its scheme: {url.scheme or 'none'!r})",
            hint="use s3://bucket/prefix (R2 and friends: with " + ENDPOINT_ENV + "), or: " + "; ".join(EXAMPLES),
        )
    return None


def _folder_allowed(settings: Settings) -> None:
    if settings.ssh_sandbox_root is None:
        raise ConfigError(
            f"{BUCKET_ENV}=file://... is a folder on the pod's own disk for a rented pod: it is destroyed with "
            "the pod, and the results with it",
            hint="use a bucket or a git remote: " + "; ".join(EXAMPLES[:3]),
        )


def _check_folder(settings: Settings, folder: Path, probe: str) -> str:
    _folder_allowed(settings)
    # The sandbox pod runs on this machine: the folder is the one it writes.
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    target = folder / f".{probe}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        target.write_bytes(PROBE_BODY)
        listed = {p.name: p.stat().st_size for p in folder.iterdir()}
    except OSError as exc:
        raise ConfigError(
            f"cannot write the results folder {folder}: {exc.strerror or exc}",
            hint=f"make it writable by you, or point {BUCKET_ENV} elsewhere",
        ) from None
    finally:
        with contextlib.suppress(OSError):
            target.unlink(missing_ok=True)
        for path in made:  # innermost first: only what the probe created, and only if empty
            with contextlib.suppress(OSError):
                path.rmdir()
    if listed.get(target.name) != len(PROBE_BODY):
        raise ConfigError(f"wrote a probe to {folder} but a listing does not show it", hint="check the folder")
    return f"results: file://{folder} takes a write and answers a list (probe removed)"


def _s3_credentials(settings: Settings) -> dict[str, str]:
    pairs = ((S3_KEYS[0], settings.s3_access_key_id), (S3_KEYS[1], settings.s3_secret_access_key))
    found = {name: value.get_secret_value() for name, value in pairs if value and value.get_secret_value()}
    missing = [name for name, _ in pairs if name not in found]
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)} not set: {settings.results_bucket} is written with this key only (the "
            "watchdog signs the pod's short-lived URLs with it; the pod never holds it, nor your AWS_* keys)",
            hint=f"add {S3_KEYS[0]}=... and {S3_KEYS[1]}=... to {settings.env_file}: a key that can write and "
            "list that bucket only",
        )
    return found


def _check_s3(
    settings: Settings, bucket: str, experiment: str, probe: str, factory: S3ClientFactory | None
) -> tuple[str, str | None]:
    sync = _s3_target(bucket, experiment, probe)
    creds = _s3_credentials(settings)
    client = (factory or _pod_s3_client)(settings.s3_endpoint_url, creds)
    where = f"s3://{sync.bucket}/{sync.base.rsplit('/', 1)[0]}/"
    via = f" via {settings.s3_endpoint_url}" if settings.s3_endpoint_url else ""
    shown = _S3Context(settings, sync.bucket, where, via, tuple(creds.values()))
    _write_probe(client, sync, shown)
    try:
        with shown.step("list"):
            page = client.list_objects_v2(Bucket=sync.bucket, Prefix=sync.base)
        sizes = {str(o["Key"]): int(o["Size"]) for o in page.get("Contents", [])}
        if sizes.get(sync.base) != len(PROBE_BODY):
            raise ConfigError(
                f"wrote a probe to {where}{via} but a listing does not show it: the pod's sync, verified by "
                "listing, could never pass",
                hint="check the endpoint is the bucket's own (GPUC_S3_ENDPOINT_URL) and the bucket is not "
                "eventually consistent",
            )
    finally:
        left = _remove_probe(client, sync.bucket, sync.base, shown)
    probe_fate = "probe left" if left else "probe removed"
    return f"results: {where}{via} takes a write and answers a list with {S3_KEYS[0]} ({probe_fate})", left


def _s3_target(bucket: str, experiment: str, probe: str) -> _S3Target:
    try:
        # The pod's own URL rule, and the key is where the pod would write: <prefix>/<experiment>/<probe>.
        where = S3Location.parse(bucket)
        return _S3Target(where.bucket, where.run_base(experiment, probe))
    except SyncError as exc:
        raise ConfigError(f"{BUCKET_ENV}: {exc.message}", hint=exc.hint) from None


def _write_probe(client: Any, sync: _S3Target, shown: _S3Context) -> None:
    """A write whose answer was lost (a timeout, a dropped connection) may have stored the probe: it is
    deleted all the same (S3 answers a delete of a missing key with success), so none is left unnamed. A
    refusal (the server's own error answer) stored nothing."""
    from botocore.exceptions import ClientError

    try:
        client.put_object(Bucket=sync.bucket, Key=sync.base, Body=PROBE_BODY)
    except Exception as exc:
        error = shown.error("write", exc)
        left = None if isinstance(exc, ClientError) else _remove_probe(client, sync.bucket, sync.base, shown)
        if left and isinstance(error, ConfigError):
            error = ConfigError(f"{error.message}; {left}", hint=error.hint)
        raise error from None


def _remove_probe(client: Any, bucket: str, key: str, shown: _S3Context) -> str | None:
    """The pod never deletes, so a key that may not is no failure: the leftover is named."""
    try:
        with shown.step("delete"):
            client.delete_object(Bucket=bucket, Key=key)
    except ConfigError as exc:
        return f"the probe s3://{bucket}/{key} could not be removed ({exc.message}): delete it by hand"
    return None


def _pod_s3_client(endpoint_url: str | None, credentials: Mapping[str, str]) -> Any:
    # The region rule without the laptop's environment (its AWS_DEFAULT_REGION stays here), and two
    # attempts: a wrong endpoint fails in seconds.
    return s3_client(endpoint_url, credentials, environ={}, attempts=2, connect_timeout_s=5.0, read_timeout_s=30.0)


@dataclass(frozen=True)
class _S3Target:
    """The probe's bucket and key: `base` is where the pod would write its results."""

    bucket: str
    base: str


@dataclass(frozen=True)
class _S3Context:
    settings: Settings
    bucket: str
    where: str
    via: str
    secrets: tuple[str, ...]

    @contextmanager
    def step(self, what: str) -> Iterator[None]:
        try:
            yield
        except ConfigError:
            raise
        except Exception as exc:
            raise self.error(what, exc) from None

    def error(self, what: str, exc: Exception) -> Exception:
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            return self._refused(what, code, redact(str(exc), self.secrets)[:300])
        if isinstance(exc, EndpointConnectionError | BotoCoreError | OSError):
            endpoint = self.settings.s3_endpoint_url or "AWS S3"
            return ConfigError(
                f"cannot reach {endpoint} to {what} {self.where}: {redact(str(exc), self.secrets)[:200]}",
                hint=f"check {ENDPOINT_ENV} (R2: https://<account id>.r2.cloudflarestorage.com; unset for AWS S3) "
                "and this machine's network",
            )
        return exc

    def _refused(self, what: str, code: str, detail: str) -> ConfigError:
        arn = f"arn:aws:s3:::{self.bucket}"
        head = f"{self.where}{self.via} refused the {what} ({code or 'error'})"
        if code == "NoSuchBucket":
            return ConfigError(
                f"bucket {self.bucket!r} does not exist{self.via}",
                hint=f"create it, or fix {BUCKET_ENV} (s3://bucket/prefix)"
                + (f" and {ENDPOINT_ENV}" if self.via else ""),
            )
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return ConfigError(
                f"{head}: {S3_KEYS[0]} / {S3_KEYS[1]} are not a valid key pair there",
                hint=f"copy the key pair again into {self.settings.env_file}"
                + (f"; R2 keys work only with your account's {ENDPOINT_ENV}" if self.via else ""),
            )
        if code in ("AccessDenied", "403", "AllAccessDisabled"):
            need = {"write": f"s3:PutObject on {arn}/*", "list": f"s3:ListBucket on {arn}"}.get(what)
            why = {"write": "the pod uploads its results", "list": "the pod verifies every sync by listing"}
            if need is not None:
                return ConfigError(
                    f"{head}: the key in {S3_KEYS[0]} may not {what} there ({why[what]})",
                    hint=f"grant that key {need} (R2: an API token with Object Read & Write on the bucket)",
                )
        return ConfigError(f"{head}: {detail}", hint=f"check {BUCKET_ENV}, {ENDPOINT_ENV} and the keys")


# -- git -------------------------------------------------------------------------------------------------
def _ssh_remote(remote: str) -> bool:
    if remote.startswith("ssh://"):
        return True
    return "://" not in remote and ":" in remote.split("/", 1)[0]  # git@github.com:you/exp.git


def _git_target(settings: Settings, remote: str) -> None:
    if _ssh_remote(remote) and settings.ssh_sandbox_root is None:
        raise ConfigError(
            f"{GIT_REMOTE_ENV} is an ssh remote: a rented pod has no ssh key for it, so its clone and its "
            "results push would fail",
            hint=f"use the https URL (https://github.com/you/exp.git) and put a token with push rights in "
            f"{GIT_TOKEN_ENV}",
        )
    try:
        check_remote(remote)
    except SyncError as exc:
        raise ConfigError(f"{GIT_REMOTE_ENV}: {exc.message}", hint=exc.hint) from None


def _check_git(settings: Settings, remote: str, probe: str, run: GitRun | None) -> str:
    _git_target(settings, remote)
    token = settings.git_token.get_secret_value() if settings.git_token else ""
    secrets = {GIT_TOKEN_ENV: token} if token else {}
    env = {**_fresh_git_env(), **git_environ({}, secrets)}
    ref = f"refs/gpuc-probe/{probe}"
    # Only the pod's credential helper (or none): the laptop's keychain and global config stay out.
    auth = ["-c", "credential.helper=", *git_auth_args(remote, env)]
    with tempfile.TemporaryDirectory(prefix="gpuc-git-probe-") as tmp:
        work = Path(tmp)
        git = _GitProbe(remote, work, env, auth, tuple(secrets.values()), run or _run_git)
        git.local(["init", "--quiet"])
        tree = git.local(["hash-object", "-t", "tree", "-w", "--stdin"]).strip()
        commit = git.local(["commit-tree", tree, "-m", "gpuc: results destination probe"]).strip()
        git.remote_step("push", ["push", "--quiet", remote, f"{commit}:{ref}"])
        try:
            listed = git.remote_step("list", ["ls-remote", remote, ref])
            if commit not in listed:
                raise ConfigError(
                    f"pushed a probe to {git.shown} but `git ls-remote` does not list it",
                    hint="the pod verifies every push by fetching it back: check the remote is the repo itself",
                )
        finally:
            code, _ = git.run(["push", "--quiet", remote, f":{ref}"])
    removed = "probe ref removed" if code == 0 else f"probe {ref} left: delete it with git push origin :{ref}"
    return f"results: git {git.shown} takes a push and answers a list ({removed})"


def _fresh_git_env() -> dict[str, str]:
    """What git needs to run, as on a fresh pod: no global or system config (an insteadOf rule that turns
    https into ssh would use this laptop's agent), no prompt."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    return {
        **keep,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
        "GIT_AUTHOR_NAME": "gpuc",
        "GIT_AUTHOR_EMAIL": "gpuc@probe",
        "GIT_COMMITTER_NAME": "gpuc",
        "GIT_COMMITTER_EMAIL": "gpuc@probe",
    }


@dataclass(frozen=True)
class _GitProbe:
    remote: str
    work: Path
    env: Mapping[str, str]
    auth: list[str]
    secrets: tuple[str, ...]
    runner: GitRun

    @property
    def shown(self) -> str:
        return redact(self.remote, self.secrets)

    def run(self, args: list[str]) -> tuple[int, str]:
        return self.runner([*self.auth, *args], self.work, self.env)

    def local(self, args: list[str]) -> str:
        code, out = self.run(args)
        if code != 0:
            raise ConfigError(
                f"git {args[0]} failed on this machine: {redact(out.strip(), self.secrets)[-200:]}",
                hint="install git (the pod uses it too), then run up again",
            )
        return out

    def remote_step(self, what: str, args: list[str]) -> str:
        code, out = self.run(args)
        if code == 0:
            return out
        detail = _git_said(redact(out.strip(), self.secrets))
        raise ConfigError(
            f"git {self.shown} refused the {what} of a probe ref: {detail}",
            hint=f"the pod pushes its results there: check {GIT_REMOTE_ENV} and that {GIT_TOKEN_ENV} holds a "
            "token with push (contents: write) rights on that repo",
        )


def _git_said(output: str) -> str:
    """What the server said (`remote:`, `fatal:`, `! [rejected]` lines), not git's own framing."""
    said = [line.strip() for line in output.splitlines() if line.lstrip().startswith(("remote:", "fatal:", "!"))]
    return "; ".join(said)[:400] or output[-300:] or "no output"


def _run_git(args: list[str], cwd: Path, env: Mapping[str, str]) -> tuple[int, str]:
    # The pod's own runner (stdin closed, output captured).

    return git_runner(args, cwd, env, GIT_PROBE_TIMEOUT_S)
