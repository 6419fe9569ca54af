"""Results to the experiment's git repo: small files committed on the run's own branch and pushed, never forced
(GitSync); with `git_remote` set, files of GIT_MAX_BYTES or more go to the results bucket instead (SplitSync).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuc.core.destinations import (
    GitRunner,
    check_remote,
    git_auth_args,
    git_runner,
)
from gpuc.core.errors import SyncError
from gpuc.core.podsecrets import GIT_TOKEN_ENV
from gpuc.core.redact import redact
from gpuc.instance_side.manifest import (
    BucketSync,
    Manifest,
    check_run_names,
    listing_matches,
    nothing_to_sync,
    push_all,
)
from gpuc.instance_side.scan import scan_results, shown
from gpuc.instance_side.storekeys import assign_keys, escape_name, is_utf8

# GitHub refuses files over 100 MB and a repo full of checkpoints is slow to clone for ever after:
# only small files travel with the code.
GIT_MAX_BYTES = 10 * 1024 * 1024


GIT_TIMEOUT_S = 600.0


PUSH_ATTEMPTS = 3


RUN_BRANCH_PREFIX = "gpuc-results/"


def run_branch(run_id: str) -> str:
    """The branch a run's small results are pushed to, and the only one: `gpuc-results/<run_id>`."""
    return f"{RUN_BRANCH_PREFIX}{run_id}"


class GitSync:
    """Small results committed to the experiment's repo under `results/<run_id>/`, on the run's own branch
    (`gpuc-results/<run_id>`, started from the default branch's tip) and pushed there: never to another
    branch, never forced. So a protected default branch (pushes only through reviewed merges) never meets a
    pod, and what the pod's token could do to it is what the token's own rights allow (docs/secrets.md).

    Works in its own clone (`PodPaths.results_repo`), never in the user's checkout. A push rejected
    because the branch moved (another attempt of the run) is retried on top of the new tip:
    `results/<run_id>/` is this run's alone, so there is nothing to merge.
    """

    def __init__(
        self,
        remote: str,
        experiment: str,
        run_id: str,
        workdir: Path,
        *,
        environ: Mapping[str, str],
        secrets: Iterable[str] = (),
        runner: GitRunner = git_runner,
        pod_id: str = "pod",
    ) -> None:
        check_run_names(experiment, run_id)
        check_remote(remote)
        self.remote = remote
        self.experiment = experiment
        self.run_id = run_id
        self.workdir = workdir
        self.env = dict(environ)
        self._secrets = tuple(secrets)
        self.runner = runner
        self.pod_id = pod_id
        self.subdir = f"results/{run_id}"

    def describe(self) -> str:
        return f"git {redact(self.remote, self._secrets)} {self.subdir}/"

    def push(self, results_dir: Path) -> Manifest:
        return push_all(self, results_dir)

    @property
    def branch(self) -> str:
        return run_branch(self.run_id)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        branch = self._checkout()
        keys = assign_keys(files, _git_storable, _git_escape)
        for attempt in range(1, PUSH_ATTEMPTS + 1):
            self._commit(results_dir, files, keys)
            # Exactly the run's own branch, never forced: a rejected push is tried again on the new tip.
            code, out = self._git(["push", "--quiet", "origin", f"HEAD:refs/heads/{branch}"], check=False)
            if code == 0:
                return Manifest(self.describe(), dict(files), keys=keys)
            if attempt == PUSH_ATTEMPTS:
                raise self._error(f"push to {branch}", out)
            # The branch moved under us: start again from its new tip.
            self._update(branch)
        raise AssertionError("unreachable")

    def verify(self, manifest: Manifest) -> bool:
        if not manifest.files:
            return True
        return listing_matches(manifest.stored(), self.listing())

    def listing(self) -> dict[str, int]:
        """What the run's branch holds under results/<run_id>/, fetched afresh."""
        self._git(["fetch", "--quiet", "--depth", "1", "origin", f"refs/heads/{self.branch}"])
        # -z: paths verbatim (no C-style quoting of unusual names), NUL-terminated.
        _, out = self._git(["ls-tree", "-r", "-l", "-z", "FETCH_HEAD", "--", f"{self.subdir}/"])
        return _blob_sizes(out, self.subdir)

    # -- helpers -------------------------------------------------------------------------------
    def _checkout(self) -> str:
        if not (self.workdir / ".git").is_dir():
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir.parent.mkdir(parents=True, exist_ok=True)
            self._run(["clone", "--quiet", "--depth", "1", self.remote, str(self.workdir)], cwd=None)
        self._update(self.branch)
        self._protect()
        return self.branch

    def _update(self, branch: str) -> None:
        code, _ = self._git(["fetch", "--quiet", "--depth", "1", "origin", f"refs/heads/{branch}"], check=False)
        if code == 0:  # the run's first push has no branch yet: it starts from the default branch's tip (cloned)
            self._git(["reset", "--quiet", "--hard", "FETCH_HEAD"])

    def _commit(self, results_dir: Path, files: Mapping[str, int], keys: Mapping[str, str]) -> None:
        target = self.workdir / self.subdir
        try:
            for rel in files:
                key = keys.get(rel, rel)
                (target / key).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(results_dir / rel, target / key)
        except OSError as exc:
            raise SyncError(
                f"copy into the results clone failed: {exc.strerror or exc}", hint="free space on /workspace"
            ) from None
        # --force: the experiment's .gitignore often hides exactly what a run produces (*.pt, *.log,
        # results/); without it those files never reach the commit and the sync can never verify.
        self._git(["add", "--all", "--force", "--", self.subdir])
        code, _ = self._git(["diff", "--cached", "--quiet"], check=False)
        if code != 0:
            message = f"results: {self.experiment} {self.run_id} ({len(files)} files)"
            self._git(["commit", "--quiet", "--no-verify", "-m", message])
        self._check_committed({keys.get(name, name): size for name, size in files.items()})

    def _protect(self) -> None:
        """The repo's .gitattributes may rewrite what is stored (text=auto turns CRLF into LF, an LFS
        filter stores a pointer, ident, an encoding): the blob would never match what was sent. The
        clone's own info/attributes, which wins over the repo's, stores results/<run_id>/ byte for byte."""
        info = self.workdir / ".git" / "info"
        rule = f"/{self.subdir}/** -text -filter -ident -working-tree-encoding\n"
        try:
            info.mkdir(parents=True, exist_ok=True)
            (info / "attributes").write_text(rule, encoding="utf-8")
        except OSError as exc:
            raise SyncError(
                f"cannot write {info / 'attributes'}: {exc.strerror or exc}", hint="free space on /workspace"
            ) from None

    def _check_committed(self, files: Mapping[str, int]) -> None:
        """Before pushing: every file sent is in the commit, same size. If git would not take one (a
        nested .git folder, a name it refuses), say which and why, once, instead of a push whose
        verification can never pass."""
        if not files:
            return
        _, out = self._git(["ls-tree", "-r", "-l", "-z", "HEAD", "--", f"{self.subdir}/"])
        committed = _blob_sizes(out, self.subdir)
        wrong = [name for name, size in sorted(files.items()) if committed.get(name) != size]
        if wrong:
            named = ", ".join(f"results/{shown(name)}" for name in wrong[:3]) + (" ..." if len(wrong) > 3 else "")
            raise SyncError(
                f"git did not store {len(wrong)} result file(s) as they are: {named}",
                hint="move or rename them (or set GPUC_RESULTS_BUCKET for them), then run:"
                " python -m gpuc.instance_side sync",
            )

    def _git(self, args: list[str], *, check: bool = True) -> tuple[int, str]:
        return self._run(args, cwd=self.workdir, check=check)

    def _run(self, args: list[str], *, cwd: Path | None, check: bool = True) -> tuple[int, str]:
        identity = ["-c", "user.name=gpuc", "-c", f"user.email=gpuc@{self.pod_id}"]
        identity += ["-c", "commit.gpgsign=false"]
        full = [*identity, *git_auth_args(self.remote, self.env), *args]
        code, out = self.runner(full, cwd, self.env, GIT_TIMEOUT_S)
        if check and code != 0:
            raise self._error(args[0], out)
        return code, out

    def _error(self, what: str, output: str) -> SyncError:
        detail = redact(output.strip(), self._secrets)[-300:] or "no output"
        return SyncError(
            f"git {what} for {self.describe()} failed: {detail}",
            hint=f"check git_remote and {GIT_TOKEN_ENV} (it needs push rights), then run:"
            " python -m gpuc.instance_side sync",
        )


# git refuses a path with a component it could take for its own folder (`.git`, and as NTFS would read
# it `.git.`, `.git ` or `git~1`, in any case; git 2.39 on Linux). And it stores any byte, but gives its
# listing back to us as text: an undecodable name could never verify. Both are escaped.
_GIT_OWN = re.compile(r"(\.git[. ]*|git~1)", re.IGNORECASE)


def _git_storable(name: str) -> bool:
    return is_utf8(name) and not any(_GIT_OWN.fullmatch(part) for part in name.split("/"))


def _git_escape(name: str) -> str:
    parts = escape_name(name).split("/")
    return "/".join(escape_name(p, lambda ch: ch in ".~") if _GIT_OWN.fullmatch(p) else p for p in parts)


def _blob_sizes(ls_tree_z: str, subdir: str) -> dict[str, int]:
    """`git ls-tree -r -l -z` output -> {path under subdir: size}, blobs only (a submodule is no file)."""
    found: dict[str, int] = {}
    for line in ls_tree_z.split("\0"):
        meta, _, path = line.partition("\t")
        fields = meta.split()
        if len(fields) == 4 and fields[1] == "blob" and fields[3].isdigit():
            found[path.removeprefix(f"{subdir}/")] = int(fields[3])
    return found


class SplitSync:
    def __init__(self, git: GitSync, bucket: BucketSync | None, limit: int = GIT_MAX_BYTES) -> None:
        self.git = git
        self.bucket = bucket
        self.limit = limit

    def describe(self) -> str:
        large = self.bucket.describe() if self.bucket else "nowhere (no results bucket)"
        return f"{self.git.describe()} (files >= {self.limit // (1024 * 1024)} MB: {large})"

    def push(self, results_dir: Path) -> Manifest:
        if not results_dir.is_dir():
            return nothing_to_sync(self.describe(), results_dir)
        listing = scan_results(results_dir)
        return dataclasses.replace(self.push_files(results_dir, listing.files), links=listing.links)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        """`files` of results_dir, each where its size sends it (the incremental push sends a few), in the
        order given: consecutive files bound for one place go together (one commit for a run of small ones)."""
        large = {k: v for k, v in files.items() if v >= self.limit}
        if large and self.bucket is None:
            raise SyncError(
                f"{len(large)} results are {self.limit // (1024 * 1024)} MB or more and no bucket is set",
                hint="set GPUC_RESULTS_BUCKET=s3://bucket/prefix (large files never go to git)",
            )
        parts: list[Manifest] = []
        for to_git, run in _runs(files, self.limit):
            if to_git:
                parts.append(self.git.push_files(results_dir, run))
            elif self.bucket is not None:
                parts.append(self.bucket.push_files(results_dir, run))
        keys = {name: key for part in parts for name, key in part.keys.items()}
        return Manifest(self.describe(), dict(files), parts=tuple(parts), keys=keys)

    def verify(self, manifest: Manifest) -> bool:
        sent = sum(len(p.files) for p in manifest.parts)
        if sent != len(manifest.files):
            return False
        return all(self._owner(part).verify(part) for part in manifest.parts)

    def _owner(self, part: Manifest) -> BucketSync | GitSync:
        if part.destination == self.git.describe() or self.bucket is None:
            return self.git
        return self.bucket


def _runs(files: Mapping[str, int], limit: int) -> list[tuple[bool, dict[str, int]]]:
    """`files` cut into runs of consecutive ones bound for one place: (to git?, the run), in order."""
    runs: list[tuple[bool, dict[str, int]]] = []
    for name, size in files.items():
        to_git = size < limit
        if not runs or runs[-1][0] != to_git:
            runs.append((to_git, {}))
        runs[-1][1][name] = size
    return runs
