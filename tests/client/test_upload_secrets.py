"""Credentials never leave in the upload: a folder full of them is refused before anything is
rented, each file named with why; `.gpucignore` leaves one out (then `up` goes on) or lets a false positive
through; folders that hold home folders are refused; a normal ML project passes.

Every credential here is made at run time (keys generated, tokens joined from pieces): no token-shaped
literal sits in the repo."""

from __future__ import annotations

import base64
import json
import os
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509 import CertificateBuilder, Name, NameAttribute, random_serial_number
from cryptography.x509.oid import NameOID

from gpuc.client.onpod.secretscan import READ_BYTES, path_reason, scan
from gpuc.client.onpod.upload import collect, prepare
from gpuc.core.errors import ConfigError

ALNUM = string.ascii_letters + string.digits


def rand(n: int, alphabet: str = ALNUM) -> str:
    """Random characters of a token's alphabet, both cases guaranteed (real tokens always have them)."""
    body = "".join(secrets.choice(alphabet) for _ in range(n - 2))
    return "aZ" + body if alphabet == ALNUM else body


def token(prefix: str, n: int) -> str:
    return prefix + rand(n)


def aws_key_id() -> str:
    return "AKIA" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(16))


def aws_secret() -> str:
    return rand(38, ALNUM) + "/+"


def openssh_key() -> bytes:
    return ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )


def rsa_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def certificate_pem() -> tuple[bytes, rsa.RSAPrivateKey, object]:
    import datetime

    key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    name = Name([NameAttribute(NameOID.COMMON_NAME, "test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key, cert


def pkcs12_bytes() -> bytes:
    _pem, key, cert = certificate_pem()
    return pkcs12.serialize_key_and_certificates(
        b"test",
        key,
        cert,  # type: ignore[arg-type]
        None,
        serialization.BestAvailableEncryption(b"pw"),
    )


def pgp_block() -> bytes:
    body = base64.encodebytes(os.urandom(600)).decode()
    return f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{body}=abcd\n-----END PGP PRIVATE KEY BLOCK-----\n".encode()


def service_account() -> bytes:
    return json.dumps(
        {
            "type": "service_account",
            "project_id": "p",
            "private_key_id": rand(40),
            "private_key": rsa_pem().decode(),
            "client_email": "x@p.iam.gserviceaccount.com",
        },
        indent=2,
    ).encode()


def aws_credentials() -> bytes:
    return f"[default]\naws_access_key_id = {aws_key_id()}\naws_secret_access_key = {aws_secret()}\n".encode()


# The files a review once found uploaded to a pod, each made here, and the words the refusal names it with.
ISSUE_FILES: dict[str, tuple[bytes, str]] = {
    ".envrc": (f"export OPENAI_API_KEY={token('sk-', 48)}\n".encode(), "direnv"),
    ".npmrc": (f"//registry.npmjs.org/:_authToken={rand(36)}\n".encode(), "npm"),
    ".pgpass": (b"db.example.com:5432:*:admin:hunter2\n", "PostgreSQL"),
    ".streamlit/secrets.toml": (b'db_password = "hunter2"\n', "a secrets file"),
    "gcp/service-account.json": (service_account(), "service-account"),
    "kaggle.json": (json.dumps({"username": "u", "key": rand(32)}).encode(), "Kaggle"),
    "cache/huggingface/token": (token("hf_", 34).encode(), "Hugging Face"),
    "deploy_key": (openssh_key(), "an OpenSSH private key"),
    "backup/credentials": (aws_credentials(), "credentials"),
    "infra/terraform.tfvars": (f'aws_secret = "{aws_secret()}"\n'.encode(), "Terraform"),
    "certs/cert.p12": (pkcs12_bytes(), "PKCS#12"),
    "prod.env": (f"DATABASE_URL=postgres://u:{rand(20)}@h/db\n".encode(), "an env file"),
    ".config/gh/hosts.yml": (f"github.com:\n    oauth_token: {token('gho_', 36)}\n".encode(), "GitHub CLI"),
}
# Found by content alone, under names that say nothing.
BY_CONTENT: dict[str, tuple[bytes, str]] = {
    "notes/a.txt": (rsa_pem(), "a private key (PEM)"),
    "notes/b.txt": (pgp_block(), "a PGP private key"),
    "notes/c.yaml": (f"key: {aws_key_id()}\nsecret: {aws_secret()}\n".encode(), "an AWS access key with its secret"),
    "notes/d.py": (f'TOKEN = "{token("hf_", 34)}"\n'.encode(), "Hugging Face"),
    "notes/e.sh": (f"git clone https://{token('ghp_', 36)}@github.com/x/y\n".encode(), "GitHub"),
    "notes/f.json": (json.dumps({"pat": token("github_pat_", 70)}).encode(), "GitHub"),
    "notes/g.cfg": (f"slack = xoxb-{secrets.randbelow(10**12):012d}-{rand(24)}\n".encode(), "Slack"),
    "notes/h.md": (f"key {token('sk-proj-', 64)}\n".encode(), "OpenAI-style"),
    "notes/i.ini": (f"runpod = rpa_{rand(40).upper()}7\n".encode(), "RunPod"),
    "notes/j.txt": (f"bot {secrets.randbelow(10**9) + 10**8}:A{rand(34, ALNUM + '_-')}aZ\n".encode(), "Telegram"),
    "notes/k.bin": (pkcs12_bytes(), "PKCS#12 key store (by its bytes)"),
    "notes/l.conf": (f"AWS_SECRET_ACCESS_KEY={aws_secret()}\n".encode(), "an AWS secret access key"),
    "notes/m.pem": (rsa_pem(), "private key"),
    "id_ed25519": (b"whatever", "an ssh private key"),
    "server.key": (b"whatever", "a private key file"),
    ".ssh/config": (b"Host x\n", ".ssh/, a folder of ssh keys"),
    "ops/logs/.bash_history": (b"ls\n", "shell history"),
}


def write(root: Path, files: dict[str, tuple[bytes, str]]) -> None:
    for rel, (data, _why) in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print('hi')\n")
    return root


def refusal(root: Path) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        prepare(root, 200.0)
    return refused.value


@pytest.mark.parametrize("files", [ISSUE_FILES, BY_CONTENT], ids=["the issue's files", "by content"])
def test_a_folder_full_of_credentials_is_refused_naming_each_file_and_why(
    project: Path, files: dict[str, tuple[bytes, str]]
) -> None:
    write(project, files)
    refused = refusal(project)
    lines = refused.message.splitlines()
    assert "nothing was rented" in lines[0]
    for rel, (_data, why) in files.items():
        (line,) = [line for line in lines if line.strip().startswith(f"{rel}: ")]
        assert why in line, (rel, line)
    assert "train.py" not in refused.message
    assert ".gpucignore" in (refused.hint or "") and "!" in (refused.hint or "")


def test_a_git_project_is_scanned_too_tracked_or_not(project: Path) -> None:
    write(project, {"deploy_key": ISSUE_FILES["deploy_key"], "kaggle.json": ISSUE_FILES["kaggle.json"]})
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "add", "deploy_key"], cwd=project, check=True)
    message = refusal(project).message
    assert "deploy_key: an OpenSSH private key" in message and "kaggle.json: a Kaggle API key" in message


def test_a_gpucignore_that_leaves_them_out_lets_up_go_on(project: Path) -> None:
    write(project, ISSUE_FILES)
    lines = [rel for rel in ISSUE_FILES if "/" not in rel] + [
        "gcp/",
        "cache/",
        "backup/",
        "infra/",
        "certs/",
        ".config/",
        ".streamlit/",
    ]
    (project / ".gpucignore").write_text("# kept on this laptop\n" + "\n".join(lines) + "\n")
    bundle = prepare(project, 200.0)
    assert sorted(bundle.files) == [".gpucignore", "train.py"]
    assert any(".gpucignore" in s for s in bundle.skipped)


def test_a_false_positive_is_sent_with_a_negation_and_nothing_else_is(project: Path) -> None:
    write(project, {"keys/server.key": (b"not a key, a Keynote file", "")})
    write(project, {"keys/real.key": (rsa_pem(), "")})
    (project / ".gpucignore").write_text("!keys/server.key\n")
    refused = refusal(project)
    assert "keys/real.key" in refused.message and "keys/server.key" not in refused.message
    (project / ".gpucignore").write_text("keys/real.key\n!keys/server.key\n")
    assert sorted(prepare(project, 200.0).files) == [".gpucignore", "keys/server.key", "train.py"]


def test_a_broken_gpucignore_is_an_error_naming_its_line(project: Path) -> None:
    (project / ".gpucignore").write_text("data/\n\\\n")
    refused = refusal(project)
    assert "line 2 is not a gitignore pattern" in refused.message


def test_an_ignored_folder_is_not_even_walked(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "data" / "deep").mkdir(parents=True)
    (project / "data" / "deep" / "x.bin").write_bytes(b"\0")
    (project / ".gpucignore").write_text("data/\n")
    walked: list[str] = []
    real = os.walk

    def spy(top: str | os.PathLike[str]) -> object:
        for folder, dirs, files in real(top):
            walked.append(str(folder))
            yield folder, dirs, files

    monkeypatch.setattr(os, "walk", spy)
    assert sorted(prepare(project, 200.0).files) == [".gpucignore", "train.py"]
    assert not any("data" in w for w in walked)


@pytest.mark.parametrize("name", [".env", ".env.local", ".env.production", ".env.dev.local"])
def test_dotenv_files_never_travel(project: Path, name: str) -> None:
    """The mutant: `.env.local` / `.env.production` uploaded. They are left out by rule (and would be
    refused by the scan if the rule went)."""
    (project / name).write_text("HF_TOKEN=x\n")
    (project / ".env.example").write_text("HF_TOKEN=\n")
    bundle = prepare(project, 200.0)
    assert name not in bundle.files and name in bundle.skipped
    assert ".env.example" in bundle.files
    assert path_reason(name) is not None


def test_a_normal_ml_project_passes(project: Path) -> None:
    vocab = {f"tok{i}": i for i in range(5000)}
    files = {
        "tokenizer.json": json.dumps({"model": {"vocab": vocab, "type": "BPE"}}).encode(),
        "config.json": json.dumps({"hidden_size": 768, "token": None, "hf_hub": "gpt2", "id2label": {}}).encode(),
        "README.md": (
            b"Set your OpenAI key (it starts with sk- and is secret) in WANDB_API_KEY...\n"
            b"We use sk-learn-style pipelines. hf_hub_download fetches weights. Commit "
            b"0123456789abcdef0123456789abcdef01234567. AKIAIOSFODNN7EXAMPLE is AWS's doc key.\n"
            b"Keys look like -----BEGIN OPENSSH PRIVATE KEY----- (never commit one).\n"
        ),
        "src/auth.py": (
            b"import os\nTOKEN = os.environ['HF_TOKEN']\n"
            b"aws_secret_access_key = os.environ['AWS_SECRET_ACCESS_KEY']\n"
            b"HEADER = '-----BEGIN RSA PRIVATE KEY-----'\n"
        ),
        "id2label.json": b'{"0": "cat"}',
        "id_mapping.csv": b"id,label\n",
        "certs/ca.pem": certificate_pem()[0],
        "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}" + os.urandom(4096),
        "data/train.csv": ("\n".join(f"{i},{secrets.token_hex(20)}" for i in range(2000))).encode(),
        "keys.txt": b"keyboard shortcuts\n",
        "credentials.md": b"how to get credentials\n",
        ".env.example": b"HF_TOKEN=\n",
        "tokens.py": b"def tokens(s): return s.split()\n",
    }
    write(project, {rel: (data, "") for rel, data in files.items()})
    bundle = prepare(project, 200.0)
    assert set(files) <= set(bundle.files)


def test_only_a_bounded_prefix_is_read(project: Path) -> None:
    big = project / "weights.bin"
    with big.open("wb") as fh:
        fh.write(b"\0" * (READ_BYTES + 10))
        fh.write(rsa_pem())  # past the prefix: a binary file is checked by its magic bytes only
    assert scan(project, ["weights.bin"]) == []


# -- folders that hold home folders -------------------------------------------------------------------
def test_a_folder_of_home_folders_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "me" / "home"))
    (tmp_path / "me" / "home").mkdir(parents=True)
    homes = tmp_path / "homes"
    (homes / "alice" / ".ssh").mkdir(parents=True)
    (homes / "bob").mkdir()
    (homes / "bob" / ".bash_history").write_text("export HF_TOKEN=...\n")
    refused = refusal(homes)
    assert "alice/, a home folder (it has its own .ssh)" in refused.message
    assert "project's folder" in (refused.hint or "")
    (homes / "alice" / ".ssh").rmdir()
    assert "bob/, a home folder (it has its own .bash_history)" in refusal(homes).message


@pytest.mark.parametrize("where", ["home", "parent", "root"])
def test_the_home_folder_and_everything_above_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    home = tmp_path / "Users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    root = {"home": home, "parent": tmp_path / "Users", "root": Path("/")}[where]
    refused = refusal(root)
    assert ("whole home folder" if where == "home" else f"holds your home folder {home}") in refused.message
    assert "cd into it" in (refused.hint or "")


def test_a_copy_of_a_home_is_refused_as_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "elsewhere"))
    copy = tmp_path / "backup-of-alice"
    copy.mkdir()
    (copy / ".zsh_history").write_text("ls\n")
    assert "a home folder (it has .zsh_history)" in refusal(copy).message


def test_a_project_with_ordinary_sub_folders_is_not_a_home(project: Path) -> None:
    (project / "src" / ".config").mkdir(parents=True)
    (project / "docs").mkdir()
    assert "train.py" in prepare(project, 200.0).files


# -- the real command: refused before anything is rented ------------------------------------------------
def test_up_refuses_before_renting_and_goes_on_once_gpucignore_leaves_it_out(project: Path, tmp_path: Path) -> None:
    write(project, {"deploy_key": ISSUE_FILES["deploy_key"]})
    home = tmp_path / "gpuc-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_", "HF_"))}
    env.update(GPUC_HOME=str(home), GPUC_ENV_FILE=str(tmp_path / "none.env"))

    def up() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", "up", "exp", "--dry-run", "--", "python", "train.py"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    refused = up()
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "deploy_key: an OpenSSH private key" in refused.stderr and "Traceback" not in refused.stderr
    assert ".gpucignore" in refused.stderr
    assert not (home / "local").exists(), "nothing was rented (the local provider never started)"
    (project / ".gpucignore").write_text("deploy_key\n")
    went_on = up()
    assert went_on.returncode == 0, went_on.stdout + went_on.stderr
    assert "upload the project: 2 files" in went_on.stderr


def test_gpuc_s_own_repository_passes_its_own_scan() -> None:
    """Tests run `gpuc up` from the repository (test_cli_basics, the remote demo): a token-shaped literal
    anywhere in it refuses those uploads. Build such a value at run time ("hf_" + "...") instead."""
    repo = Path(__file__).resolve().parents[2]
    bundle = collect(repo)
    assert [f.line() for f in scan(repo, bundle.files)] == []


@pytest.mark.parametrize("git", [False, True], ids=["folder walk", "git work tree"])
def test_a_negation_under_an_ignored_folder_reads_the_same_in_both_listings(project: Path, git: bool) -> None:
    (project / "data").mkdir()
    (project / "data" / "keep.txt").write_text("k\n")
    (project / "data" / "drop.txt").write_text("d\n")
    (project / ".gpucignore").write_text("data/\n!data/keep.txt\n")
    if git:
        subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    assert sorted(prepare(project, 200.0).files) == [".gpucignore", "data/keep.txt", "train.py"]
