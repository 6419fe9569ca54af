"""Results to S3 (ministack on loopback, through the watchdog's grants: the pod holds no key) and to git (a
local bare repo over file://): pushed, then verified against the remote's own listing. No network."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuc.core.destinations import git_auth_args, git_runner
from gpuc.core.errors import SyncError
from gpuc.core.podsecrets import GIT_TOKEN_ENV
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.gitsync import GitSync, SplitSync
from gpuc.instance_side.podfiles import AgentConfig, PodPaths
from gpuc.instance_side.s3sync import S3Sync
from gpuc.instance_side.sync import Unavailable, make_sync

TOKEN = "ghp_" + "T0ken" * 8


def git(*args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=someone", "-c", "user.email=someone@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    (root / "ckpt").mkdir(parents=True)
    (root / "metrics.json").write_text('{"loss": 0.1}')
    (root / "ckpt" / "model.bin").write_bytes(b"\1" * 4096)
    return root


# -- S3 (a real S3 API through the watchdog's grants: tests/fakes/s3world.py) ---------------------------------
def s3_sync(grants: Any, tmp_path: Path, run_id: str = "run01") -> S3Sync:
    grants.register(f"pod-{run_id}", run_id)
    sync = grants.sync(tmp_path / f"pod-{run_id}", f"pod-{run_id}", run_id)
    assert isinstance(sync, S3Sync)
    return sync


def test_s3_uploads_under_prefix_experiment_run_and_verifies(grants: Any, results: Path, tmp_path: Path) -> None:
    sync = s3_sync(grants, tmp_path)
    manifest = sync.push(results)
    assert manifest.files == {"metrics.json": 13, "ckpt/model.bin": 4096}
    base = f"{grants.prefix}/exp/run01"
    assert grants.objects() == {f"{base}/metrics.json": 13, f"{base}/ckpt/model.bin": 4096}
    assert sync.verify(manifest)
    assert sync.describe() == f"s3://results/{base}/ via {grants.stack.url}"


def test_s3_verification_catches_a_size_mismatch_and_a_missing_object(
    grants: Any, results: Path, tmp_path: Path
) -> None:
    sync = s3_sync(grants, tmp_path)
    manifest = sync.push(results)
    owner, key = grants.stack.client("s3"), f"{grants.prefix}/exp/run01/ckpt/model.bin"
    owner.put_object(Bucket="results", Key=key, Body=b"\1" * 4000)
    assert not sync.verify(manifest)
    owner.delete_object(Bucket="results", Key=key)
    assert not sync.verify(manifest)


UNDECODABLE = os.fsdecode(b"caf\xe9 100%.txt")  # latin-1, as an old tool writes it: not UTF-8


def no_data_entries(results: Path) -> dict[str, str]:
    """What jobs leave in results/ that holds no data: a `latest` link to a rotated checkpoint, a loop of
    links, a link back to a folder above. Returns what the manifest must record for them."""
    (results / "latest").symlink_to("ckpt-0300")
    (results / "self").symlink_to(results / "self")
    (results / "ckpt" / "up").symlink_to("..")
    return {"latest": "ckpt-0300", "self": str(results / "self"), "ckpt/up": ".."}


def test_s3_records_links_and_stores_an_undecodable_name_under_an_escaped_key(
    grants: Any, results: Path, tmp_path: Path
) -> None:
    """The incident: one file name that is not UTF-8 failed the whole sync, and the pod was kept, billing. A
    control character in a name is escaped as well: it would reach a URL and an XML listing."""
    links = no_data_entries(results)
    (results / UNDECODABLE).write_bytes(b"z" * 9)
    (results / "two\nlines.txt").write_bytes(b"n" * 3)
    sync = s3_sync(grants, tmp_path)
    manifest = sync.push(results)
    assert manifest.links == links
    assert manifest.keys == {UNDECODABLE: "caf%E9 100%25.txt", "two\nlines.txt": "two%0Alines.txt"}
    base = f"{grants.prefix}/exp/run01"
    keys = grants.objects()
    assert keys[f"{base}/caf%E9 100%25.txt"] == 9 and keys[f"{base}/two%0Alines.txt"] == 3 and len(keys) == 4
    assert sync.verify(manifest)
    assert manifest.summary().endswith("; 3 links recorded, 2 names escaped")
    grants.stack.client("s3").delete_object(Bucket="results", Key=f"{base}/caf%E9 100%25.txt")
    assert not sync.verify(manifest)  # verified under its key: a lost object is still caught


def test_s3_listing_pages_through_many_objects(grants: Any, tmp_path: Path) -> None:
    many = tmp_path / "many"
    many.mkdir()
    for i in range(1005):  # S3 answers at most 1000 keys per page, and so does the watchdog's listing
        (many / f"f{i:04d}.txt").write_text("x" * (i % 7))
    sync = s3_sync(grants, tmp_path)
    manifest = sync.push(many)
    assert len(sync.listing()) == 1005 and sync.verify(manifest)


def test_an_s3_failure_is_a_sync_error_that_names_the_destination(grants: Any, results: Path, tmp_path: Path) -> None:
    sync = s3_sync(grants, tmp_path)
    grants.stop()  # the watchdog is gone: no grant, no upload, and the pod is kept
    sync.objects.calls().budget_s = 1.0  # type: ignore[attr-defined]
    with pytest.raises(SyncError, match="the watchdog could not be reached for a results grant") as exc:
        sync.push(results)
    assert exc.value.hint


def test_the_agent_does_not_import_boto3_for_an_s3_sync(tmp_path: Path) -> None:
    """The pod holds no S3 key and needs no S3 client: urllib and the watchdog's grants."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from gpuc.instance_side.podfiles import AgentConfig, PodPaths\n"
        "from gpuc.instance_side.sync import make_sync\n"
        "cfg = AgentConfig(pod_id='p', provider='runpod', experiment='exp', run_id='run01',"
        " watchdog_url='x', results_bucket='s3://b/p', git_remote='https://example.com/r.git')\n"
        f"sync = make_sync(cfg, {{}}, paths=PodPaths(Path({str(tmp_path)!r})))\n"
        "print(type(sync).__name__, 'boto3' in sys.modules, 'botocore' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["SplitSync", "False", "False"]


# -- git ---------------------------------------------------------------------------------------------
@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """The experiment's repo: a bare repo with one commit on main, reached over file://."""
    bare = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    git("clone", "--quiet", str(bare), str(seed))
    (seed / "train.py").write_text("print('hi')\n")
    git("checkout", "--quiet", "-b", "main", cwd=seed)
    git("add", ".", cwd=seed)
    git("commit", "--quiet", "-m", "code", cwd=seed)
    git("push", "--quiet", "origin", "main", cwd=seed)
    return bare


def git_sync(remote: Path, workdir: Path, **kw: Any) -> GitSync:
    return GitSync(f"file://{remote}", "exp", "run01", workdir, environ=dict(os.environ), **kw)


RUN_BRANCH = "gpuc-results/run01"  # the run's own branch: the only one its pods push to


def remote_tree(remote: Path, branch: str = RUN_BRANCH) -> dict[str, int]:
    out = git("--git-dir", str(remote), "ls-tree", "-r", "-l", branch)
    return {line.split("\t")[1]: int(line.split()[3]) for line in out.splitlines()}


def branches(remote: Path) -> list[str]:
    return git("--git-dir", str(remote), "for-each-ref", "--format=%(refname)").split()


def test_git_commits_results_under_the_run_and_verifies_the_remote(remote: Path, results: Path, tmp_path: Path) -> None:
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(results)
    assert sync.verify(manifest)
    assert remote_tree(remote) == {
        "train.py": 12,
        "results/run01/metrics.json": 13,
        "results/run01/ckpt/model.bin": 4096,
    }
    log = git("--git-dir", str(remote), "log", "--format=%s", RUN_BRANCH)
    assert log.splitlines() == ["results: exp run01 (2 files)", "code"], "started from the default branch's tip"
    assert remote_tree(remote, "main") == {"train.py": 12}, "the default branch is never pushed to"
    assert branches(remote) == ["refs/heads/gpuc-results/run01", "refs/heads/main"]


def test_git_verifies_names_git_would_quote(remote: Path, tmp_path: Path) -> None:
    odd = tmp_path / "odd"
    (odd / "über dir").mkdir(parents=True)
    (odd / "über dir" / 'tab\there "q".txt').write_text("x" * 7)
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(odd)
    assert manifest.files == {'über dir/tab\there "q".txt': 7} and sync.verify(manifest)


def test_git_pushing_the_same_results_again_adds_no_commit(remote: Path, results: Path, tmp_path: Path) -> None:
    sync = git_sync(remote, tmp_path / "clone")
    sync.push(results)
    again = sync.push(results)
    assert sync.verify(again)
    assert len(git("--git-dir", str(remote), "log", "--format=%H", RUN_BRANCH).splitlines()) == 2


def test_git_push_lands_on_top_of_a_commit_pushed_in_between(remote: Path, results: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    git("clone", "--quiet", str(remote), str(other))
    pushes: list[int] = []

    def racing(args: Sequence[str], cwd: Path | None, env: Mapping[str, str], timeout_s: float) -> tuple[int, str]:
        if "push" in args and not pushes:  # another attempt of the run pushes to its branch just before we do
            (other / "notes.md").write_text("from the laptop\n")
            git("add", ".", cwd=other)
            git("commit", "--quiet", "-m", "notes", cwd=other)
            git("push", "--quiet", "origin", f"HEAD:refs/heads/{RUN_BRANCH}", cwd=other)
        code, out = git_runner(args, cwd, env, timeout_s)
        if "push" in args:
            pushes.append(code)
        return code, out

    sync = git_sync(remote, tmp_path / "clone", runner=racing)
    manifest = sync.push(results)
    assert pushes[0] != 0 and pushes[-1] == 0  # rejected once, then landed on the new tip
    assert sync.verify(manifest)
    tree = remote_tree(remote)
    assert tree["notes.md"] == 16 and tree["results/run01/metrics.json"] == 13


def test_git_verification_catches_a_remote_that_differs(remote: Path, results: Path, tmp_path: Path) -> None:
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(results)
    other = tmp_path / "other"
    git("clone", "--quiet", "--branch", RUN_BRANCH, str(remote), str(other))
    (other / "results" / "run01" / "metrics.json").write_text("{}")
    git("commit", "--quiet", "-am", "clobber", cwd=other)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{RUN_BRANCH}", cwd=other)
    assert not sync.verify(manifest)


def test_a_git_push_that_fails_is_a_sync_error_without_the_token(results: Path, tmp_path: Path) -> None:
    sync = GitSync(
        f"file://{tmp_path}/missing.git",
        "exp",
        "run01",
        tmp_path / "clone",
        environ={**os.environ, GIT_TOKEN_ENV: TOKEN},
        secrets=[TOKEN],
    )
    with pytest.raises(SyncError, match="git clone for git file://") as exc:
        sync.push(results)
    assert TOKEN not in str(exc.value)


def test_the_git_token_reaches_git_only_through_the_environment() -> None:
    args = git_auth_args("https://github.com/me/exp.git", {GIT_TOKEN_ENV: TOKEN})
    assert args and TOKEN not in " ".join(args)
    assert git_auth_args("file:///srv/exp.git", {GIT_TOKEN_ENV: TOKEN}) == []
    # The helper answers git's credential request from the environment (no network involved).
    done = subprocess.run(
        ["git", *args, "credential", "fill"],
        input="protocol=https\nhost=github.com\npath=me/exp.git\n\n",
        env={**os.environ, GIT_TOKEN_ENV: TOKEN, "GIT_TERMINAL_PROMPT": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"password={TOKEN}" in done.stdout.splitlines()


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(
        self, args: Sequence[str], cwd: Path | None, env: Mapping[str, str], timeout_s: float
    ) -> tuple[int, str]:
        self.calls.append((list(args), dict(env)))
        return git_runner(args, cwd, env, timeout_s)


def test_an_https_remote_gets_the_token_in_git_env_and_never_in_argv(results: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    sync = GitSync(
        "https://127.0.0.1:9/me/exp.git",  # nothing listens there: the clone fails fast, offline
        "exp",
        "run01",
        tmp_path / "clone",
        environ={"PATH": os.environ["PATH"], GIT_TOKEN_ENV: TOKEN, "GIT_TERMINAL_PROMPT": "0"},
        secrets=[TOKEN],
        runner=recorder,
    )
    with pytest.raises(SyncError) as exc:
        sync.push(results)
    assert TOKEN not in str(exc.value)
    [(argv, env)] = recorder.calls
    assert "clone" in argv and all(TOKEN not in a for a in argv) and env[GIT_TOKEN_ENV] == TOKEN


def test_a_remote_with_credentials_in_the_url_is_refused(tmp_path: Path) -> None:
    cfg = AgentConfig(
        pod_id="p",
        provider="runpod",
        experiment="exp",
        run_id="run01",
        watchdog_url="x",
        git_remote=f"https://me:{TOKEN}@github.com/me/exp.git",
    )
    sync = make_sync(cfg, {}, paths=PodPaths(tmp_path))
    assert isinstance(sync, Unavailable) and "credentials in the URL" in sync.error.message
    assert TOKEN not in sync.describe()


def seed_remote(remote: Path, tmp_path: Path, files: dict[str, bytes]) -> None:
    """The user's repo gains files (a .gitignore, a .gitattributes) before the run."""
    seed = tmp_path / "seed"
    for name, content in files.items():
        (seed / name).write_bytes(content)
    git("add", ".", cwd=seed)
    git("commit", "--quiet", "-m", "repo settings", cwd=seed)
    git("push", "--quiet", "origin", "main", cwd=seed)


def test_git_carries_results_the_repos_gitignore_hides(remote: Path, results: Path, tmp_path: Path) -> None:
    """The incident: `*.pt` and `*.log` never reached the commit, so the sync could never verify."""
    seed_remote(remote, tmp_path, {".gitignore": b"*.pt\n*.log\nckpt/\n"})
    (results / "model.pt").write_bytes(b"\2" * 2048)
    (results / "train.log").write_text("step 1 loss 2.3\n")
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(results)
    assert sync.verify(manifest)
    tree = remote_tree(remote)
    assert tree["results/run01/model.pt"] == 2048 and tree["results/run01/train.log"] == 16
    assert tree["results/run01/ckpt/model.bin"] == 4096


def test_git_stores_results_byte_for_byte_whatever_the_repos_gitattributes_say(
    remote: Path, results: Path, tmp_path: Path
) -> None:
    seed_remote(remote, tmp_path, {".gitattributes": b"* text=auto eol=lf\n*.csv ident\n"})
    (results / "table.csv").write_bytes(b"a,b\r\n1,2\r\n$Id$\r\n")  # CRLF, and an ident keyword
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(results)
    assert sync.verify(manifest)
    assert remote_tree(remote)["results/run01/table.csv"] == 16


def test_git_records_links_and_escapes_the_names_it_cannot_store(remote: Path, results: Path, tmp_path: Path) -> None:
    links = no_data_entries(results)
    (results / UNDECODABLE).write_bytes(b"z" * 9)  # git stores bytes, but lists them back to us as text
    (results / "GIT~1").write_text("an NTFS short name for .git: git refuses it\n")
    nested = results / "vendor" / "lib"
    nested.mkdir(parents=True)
    git("init", "--quiet", str(nested))  # the job cloned a repo into results/: its .git is data too
    (nested / "README").write_text("hi\n")
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(results)
    assert manifest.links == links
    assert manifest.keys[UNDECODABLE] == "caf%E9 100%25.txt" and manifest.keys["GIT~1"] == "GIT%7E1"
    assert manifest.keys["vendor/lib/.git/HEAD"] == "vendor/lib/%2Egit/HEAD"
    assert sync.verify(manifest)
    tree = remote_tree(remote)
    assert tree["results/run01/caf%E9 100%25.txt"] == 9 and tree["results/run01/vendor/lib/README"] == 3
    assert tree["results/run01/vendor/lib/%2Egit/HEAD"] == (nested / ".git" / "HEAD").stat().st_size


def test_git_still_names_results_it_did_not_store(
    remote: Path, results: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The net under the escaping: were a name to get past it, git's own commit is checked before the push."""
    monkeypatch.setattr("gpuc.instance_side.gitsync._git_storable", lambda name: True)
    nested = results / "vendor" / "lib"
    nested.mkdir(parents=True)
    git("init", "--quiet", str(nested))
    (nested / "README").write_text("hi\n")
    sync = git_sync(remote, tmp_path / "clone")
    with pytest.raises(SyncError, match=r"git did not store \d+ result file\(s\) as they are: results/vendor/lib/"):
        sync.push(results)


def test_git_follows_links_in_results(remote: Path, results: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "samples.txt").write_text("a\nb\n")
    (results / "samples").symlink_to(elsewhere)
    sync = git_sync(remote, tmp_path / "clone")
    manifest = sync.push(results)
    assert sync.verify(manifest)
    assert remote_tree(remote)["results/run01/samples/samples.txt"] == 4


# -- split: small to git, large to the bucket ---------------------------------------------------------
def test_a_split_push_records_links_and_keeps_each_destinations_keys(
    remote: Path, results: Path, tmp_path: Path
) -> None:
    (results / "latest").symlink_to("ckpt-0300")
    (results / UNDECODABLE).write_bytes(b"z" * 9)
    sync = SplitSync(git_sync(remote, tmp_path / "clone"), FileBucketSync(tmp_path / "bucket", "exp", "run01"), 1000)
    manifest = sync.push(results)
    assert manifest.links == {"latest": "ckpt-0300"} and manifest.keys == {UNDECODABLE: "caf%E9 100%25.txt"}
    assert sync.verify(manifest) and manifest.summary().endswith("; 1 link recorded, 1 name escaped")


def test_small_files_go_to_git_and_large_ones_to_the_bucket(remote: Path, results: Path, tmp_path: Path) -> None:
    bucket = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    sync = SplitSync(git_sync(remote, tmp_path / "clone"), bucket, limit=1000)
    manifest = sync.push(results)
    assert sync.verify(manifest)
    assert "results/run01/metrics.json" in remote_tree(remote)
    assert "results/run01/ckpt/model.bin" not in remote_tree(remote)
    assert (tmp_path / "bucket" / "exp" / "run01" / "ckpt" / "model.bin").stat().st_size == 4096
    (tmp_path / "bucket" / "exp" / "run01" / "ckpt" / "model.bin").write_bytes(b"")
    assert not sync.verify(manifest)


def test_large_files_without_a_bucket_fail_the_sync(remote: Path, results: Path, tmp_path: Path) -> None:
    sync = SplitSync(git_sync(remote, tmp_path / "clone"), None, limit=1000)
    with pytest.raises(SyncError, match="1 results are 0 MB or more and no bucket is set"):
        sync.push(results)


def test_make_sync_splits_when_a_git_remote_is_configured(remote: Path, results: Path, tmp_path: Path) -> None:
    cfg = AgentConfig(
        pod_id="p",
        provider="runpod",
        experiment="exp",
        run_id="run01",
        watchdog_url="x",
        git_remote=f"file://{remote}",
        results_bucket=f"file://{tmp_path}/bucket",
    )
    sync = make_sync(cfg, {}, paths=PodPaths(tmp_path / "pod"))
    assert isinstance(sync, SplitSync)
    manifest = sync.push(results)
    assert sync.verify(manifest) and set(manifest.files) == {"metrics.json", "ckpt/model.bin"}
    assert (tmp_path / "pod" / "workspace" / ".gpuc" / "results-repo" / ".git").is_dir()
