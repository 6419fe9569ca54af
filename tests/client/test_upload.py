"""The project onto the pod: what is sent, the size limit, the unpack on a real local pod, and the check
that what the command runs is there."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuc.client.onpod.script import check_command, named_files, put_project
from gpuc.client.onpod.upload import collect, prepare, upload
from gpuc.core.errors import ConfigError
from gpuc.core.models import PodSpec
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "src" / "model.py").write_text("x = 1\n")
    (root / "data").mkdir()
    (root / "data" / "shard.bin").write_bytes(b"\0" * 5000)
    (root / "results" / "old").mkdir(parents=True)
    (root / "results" / "old" / "loss.csv").write_text("1\n")
    (root / ".env").write_text("HF_TOKEN=hf_secretsecret\n")
    (root / ".env.example").write_text("HF_TOKEN=\n")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "torch.so").write_bytes(b"\0" * 100)
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_a_git_project_sends_what_git_keeps_untracked_files_included(project: Path) -> None:
    git(project, "init", "-q")
    (project / ".gitignore").write_text("data/\n.venv/\n__pycache__/\n")
    git(project, "add", "train.py", ".gitignore")
    bundle = collect(project)
    assert bundle.how == "git ls-files"
    assert sorted(bundle.files) == [".env.example", ".gitignore", "src/model.py", "train.py"]
    assert ".env" in bundle.skipped and "results/" in bundle.skipped


def test_a_tracked_file_deleted_from_the_work_tree_is_not_sent(project: Path) -> None:
    git(project, "init", "-q")
    git(project, "add", "train.py", "src/model.py")
    (project / "src" / "model.py").unlink()
    assert "src/model.py" not in collect(project).files


def test_a_plain_folder_skips_venvs_caches_secrets_and_old_results(project: Path) -> None:
    bundle = collect(project)
    assert bundle.how == "folder walk"
    assert sorted(bundle.files) == [".env.example", "data/shard.bin", "src/model.py", "train.py"]


def test_over_the_limit_is_refused_naming_the_biggest_files(project: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        prepare(project, max_mb=0.001)
    assert "data/shard.bin (5.0 KB)" in refused.value.message and "upload limit" in refused.value.message
    assert "--no-upload" in (refused.value.hint or "") and "GPUC_UPLOAD_MAX_MB" in (refused.value.hint or "")
    assert prepare(project, max_mb=1).total_bytes < 6000


def test_a_link_out_of_the_project_is_not_sent(project: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("private")
    (project / "leak").symlink_to(tmp_path / "outside.txt")
    (project / "alias.py").symlink_to("train.py")
    bundle = collect(project)
    assert "leak" not in bundle.files and "leak" not in bundle.links
    assert bundle.links == {"alias.py": "train.py"}


@pytest.mark.parametrize(
    ("command", "program", "files"),
    [
        (["python", "train.py", "--out", "results/model.pt"], "python", ["train.py"]),
        (["python3", "-u", "-W", "ignore", "scripts/train.py"], "python3", ["scripts/train.py"]),
        (["python", "-m", "pkg.train"], "python", []),
        (["python", "-c", "print(1)"], "python", []),
        (["./run.sh", "--fast"], None, ["./run.sh"]),
        (["bash", "run.sh"], "bash", ["run.sh"]),
        (["bash", "-ec", "python train.py"], "bash", []),
        (["torchrun", "--nproc_per_node", "8", "train.py", "--cfg", "a.yaml"], "torchrun", ["train.py"]),
        (["accelerate", "launch", "train.py"], "accelerate", ["train.py"]),
        (["nvidia-smi"], "nvidia-smi", []),
    ],
)
def test_only_what_the_command_surely_runs_is_checked(
    command: list[str], program: str | None, files: list[str]
) -> None:
    assert named_files(command) == (program, files)


@pytest.fixture
def local_pod(tmp_path: Path) -> tuple[LocalProvider, str]:
    home = tmp_path / "home"
    provider = LocalProvider(home, settings=Settings(home=home, local_boot_s=0.0))
    pod = provider.create(PodSpec(experiment="up", run_id="run0001", provider="local", gpu_type="RTX 4090"))
    return provider, pod.id


def test_the_project_lands_in_the_workspace_and_the_check_finds_its_script(
    project: Path, local_pod: tuple[LocalProvider, str]
) -> None:
    provider, pod_id = local_pod
    access = provider.access(pod_id)
    bundle = collect(project)
    said: list[str] = []
    upload(access, bundle, said.append, part_bytes=1000)  # several parts, joined on the pod
    check_command(access, ["python", "src/model.py"], bundle)
    workspace = provider.paths(pod_id).workspace
    assert (workspace / "src" / "model.py").read_text() == "x = 1\n"
    assert (workspace / "data" / "shard.bin").stat().st_size == 5000
    assert not (workspace / ".env").exists() and not (workspace / "results").exists()
    assert not list((provider.paths(pod_id).state / "upload").glob("part-*")), "the parts are removed"
    assert any("project uploaded" in line for line in said)


def test_a_script_missing_on_the_pod_is_named_with_the_folder_it_was_looked_for_in(
    project: Path, local_pod: tuple[LocalProvider, str]
) -> None:
    provider, pod_id = local_pod
    access = provider.access(pod_id)
    bundle = collect(project)
    with pytest.raises(ConfigError) as refused:
        put_project(access, bundle, ["python", "trian.py"], lambda _: None)
    assert "trian.py not in the job's folder" in refused.value.message
    assert str(provider.paths(pod_id).workspace) in refused.value.message
    assert "destroyed" in (refused.value.hint or "")
    with pytest.raises(ConfigError, match="no program 'pythn'"):
        check_command(access, ["pythn", "train.py"], bundle)
    check_command(access, ["python", "train.py", "--out", "results/new.pt"], bundle)  # an output: fine


def test_no_credentials_and_not_gpuc_s_own_home_ever_travel(tmp_path: Path) -> None:
    """A GPUC_HOME kept in the project holds the admin token and every pod's key: it is left out. A laptop's
    .ssh/.aws hold the user's keys: they stop the upload, by name, .gitignore or not (the folder of
    credentials in tests/client/test_upload_secrets.py has the rest)."""
    project = tmp_path / "proj"
    for rel in (
        "train.py",
        "home/config.json",
        "home/watchdog.db",
        ".ssh/id_ed25519",
        "cfg/.aws/credentials",
        "keys/id_rsa",
        "deploy.pem",
        ".netrc",
        "src/.git-credentials",
        "id_ed25519.pub",
    ):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text("x")
    with pytest.raises(ConfigError) as refused:
        prepare(project, 200.0, gpuc_home=project / "home")
    named = [line.strip().split(":")[0] for line in refused.value.message.splitlines()[1:]]
    assert named == [
        ".netrc",
        ".ssh/id_ed25519",
        "cfg/.aws/credentials",
        "deploy.pem",
        "keys/id_rsa",
        "src/.git-credentials",
    ]
    (project / ".gpucignore").write_text("\n".join(named) + "\n")
    bundle = prepare(project, 200.0, gpuc_home=project / "home")
    assert sorted(bundle.files) == [".gpucignore", "id_ed25519.pub", "train.py"]
    assert "gpuc home" in bundle.skipped


def test_up_from_the_home_folder_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("PRIVATE")
    with pytest.raises(ConfigError, match="whole home folder"):
        prepare(tmp_path, 200.0)
