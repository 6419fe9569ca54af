"""The upload and `cp PATH POD:` refuse the secret VALUES gpuc itself holds, and judge whole files and the
folder sent by its own path.

Before: the scan knew token shapes only, so a script holding the user's Vast key (64 hex characters, no
prefix), a note with the watchdog's admin token and a gcloud `authorized_user` login went into the pod's
archive; the scan read the first 64 KB of a file only; `gpuc cp ~/.kube POD:` sent `config` because the
folder rules looked only at paths inside what was copied.

Every value here is made at run time: no token-shaped literal sits in the repo.
"""

from __future__ import annotations

import json
import os
import secrets
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.localworld import World, open_world

from gpuc.client.onpod.secretscan import OVERLAP, READ_BYTES, scan
from gpuc.client.onpod.upload import prepare
from gpuc.core.errors import ConfigError
from gpuc.core.settings import SECRET_FIELDS, Settings, env_name
from gpuc.core.settingvalues import SecretStr

HEX = "0123456789abcdef"


def rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "aZ" + "".join(secrets.choice(alphabet) for _ in range(n - 2))


def held() -> dict[str, str]:
    """One value per secret setting, as a user's .env holds them (a Vast key is bare hex: no shape)."""
    values = {field: rand(32) for field in SECRET_FIELDS}
    values["vast_api_key"] = "".join(secrets.choice(HEX) for _ in range(64))
    values["notify_urls"] = f"tgram://{secrets.randbelow(10**9) + 10**8}:{rand(35)}/4242,ntfy://{rand(24)}@ntfy.sh/t"
    return values


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print('hi')\n")
    return root


def refused(root: Path, settings: Settings) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        prepare(root, 200.0, known=settings.named_secrets({}))
    return caught.value


@pytest.mark.parametrize("field", SECRET_FIELDS)
def test_a_file_holding_a_value_gpuc_holds_is_refused_naming_the_setting_never_the_value(
    project: Path, field: str
) -> None:
    """Every secret setting, derived from Settings: a secret added tomorrow is refused as it is declared."""
    values = held()
    chosen: dict[str, Any] = {field: SecretStr(values[field])}
    settings = Settings(env_file=Path("/nonexistent/.env"), **chosen)
    secret = values[field] if field != "notify_urls" else values[field].split(":")[2].split("/")[0]
    (project / "scripts").mkdir()
    (project / "scripts" / "launch.sh").write_text(f"#!/bin/sh\ncurl -H 'X: {secret}' https://example.com\n")
    error = refused(project, settings)
    text = error.message + (error.hint or "")
    assert "scripts/launch.sh" in error.message and env_name(field) in error.message
    assert secret not in text and values[field] not in text


def test_the_issue_s_three_files_are_refused(project: Path) -> None:
    values = held()
    settings = Settings(
        env_file=Path("/nonexistent/.env"),
        vast_api_key=SecretStr(values["vast_api_key"]),
        admin_token=SecretStr(values["admin_token"]),
    )
    (project / "run.py").write_text(f"KEY = '{values['vast_api_key']}'\n")
    (project / "notes.md").write_text(f"watchdog admin: {values['admin_token']}\n")
    adc = {
        "client_id": "x.apps.googleusercontent.com",
        "client_secret": rand(24),
        "refresh_token": "1//" + rand(60),
        "type": "authorized" + "_user",  # in two parts: the repository's own upload scan stays clean
    }
    (project / "adc.json").write_text(json.dumps(adc, indent=2))
    error = refused(project, settings)
    assert "run.py: holds the value of VAST_API_KEY" in error.message
    assert "notes.md: holds the value of GPUC_ADMIN_TOKEN" in error.message
    assert "adc.json: a Google Cloud user login" in error.message


def test_the_aws_keys_and_the_pod_secrets_gpuc_passes_on_are_known_values(project: Path) -> None:
    wandb, aws = rand(40), rand(40)
    settings = Settings(env_file=Path("/nonexistent/.env"), pod_secrets="WANDB_API_KEY")
    known = settings.named_secrets({"WANDB_API_KEY": wandb, "AWS_SECRET_ACCESS_KEY": aws, "OTHER": rand(40)})
    assert sorted(known.values()) == ["AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY"]
    (project / "cfg.yaml").write_text(f"wandb: {wandb}\n")
    with pytest.raises(ConfigError, match=r"cfg\.yaml: holds the value of WANDB_API_KEY"):
        prepare(project, 200.0, known=known)


def test_a_service_account_json_is_known_by_content(project: Path) -> None:
    body = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC" + rand(60)
    (project / "sa.json").write_text(
        json.dumps(
            {
                "type": "service_account",
                "private_key": f"-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n",
            }
        )
    )
    assert [f.path for f in scan(project, ["sa.json"])] == ["sa.json"]


# -- whole files ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "offset",
    [2048, 70_000, READ_BYTES + 100, READ_BYTES - 10],
    ids=["after the first KB", "after 64 KB", "past the first chunk", "across two chunks"],
)
def test_a_key_anywhere_in_a_file_is_found(project: Path, offset: int) -> None:
    value = rand(40)
    hf = "hf_" + rand(34)
    for name, secret, known in (("k.py", value, {value.encode(): "GPUC_ADMIN_TOKEN"}), ("t.py", hf, {})):
        path = project / name
        path.write_bytes(b"# " + b"x" * (offset - 3) + b"\n" + secret.encode() + b"\n")
        assert [f.path for f in scan(project, [name], known)] == [name], (name, offset)


def test_a_binary_file_is_searched_for_known_values(project: Path) -> None:
    value = rand(40)
    (project / "state.pkl").write_bytes(b"\x80\x04\0\0" + os.urandom(200_000) + value.encode() + os.urandom(100))
    found = scan(project, ["state.pkl"], {value.encode(): "RUNPOD_API_KEY"})
    assert [f.line() for f in found] == [
        "state.pkl: holds the value of RUNPOD_API_KEY, a secret gpuc holds (never shown)"
    ]


def test_a_file_let_through_by_name_still_never_carries_a_known_value(project: Path) -> None:
    value = rand(40)
    (project / "deploy.key").write_text(f"token {value}\n")
    (project / ".gpucignore").write_text("!deploy.key\n")
    prepare(project, 200.0, known={})  # let through: its name alone refused it
    with pytest.raises(ConfigError, match=r"deploy\.key: holds the value of GPUC_GIT_TOKEN"):
        prepare(project, 200.0, known={value: "GPUC_GIT_TOKEN"})


def test_a_big_file_is_read_in_chunks_never_whole(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "big.txt").write_bytes(b"plain text line\n" * (3 * READ_BYTES // 16))
    sizes: list[int] = []
    real = os.read

    def read(fd: int, n: int) -> bytes:
        sizes.append(n)
        return real(fd, n)

    monkeypatch.setattr(os, "read", read)  # the scan's reads: secretscan calls os.read
    assert scan(project, ["big.txt"], {rand(40).encode(): "X"}) == []
    assert len(sizes) >= 3 and max(sizes) <= READ_BYTES
    assert OVERLAP >= 1024


# -- credential folders, by their own path and below the top -------------------------------------------
@pytest.mark.parametrize("rel", ["deploy/.kube/config", "ops/backup/.docker/config.json", "a/b/.ssh/known_hosts"])
def test_a_credential_folder_below_the_top_level_is_refused(project: Path, rel: str) -> None:
    (project / rel).parent.mkdir(parents=True)
    (project / rel).write_text("apiVersion: v1\n")
    assert [f.path for f in scan(project, [rel])] == [rel]


def test_aws_sso_cached_tokens_are_refused_by_path_and_by_content(project: Path) -> None:
    cache = project / ".aws" / "sso" / "cache"
    cache.mkdir(parents=True)
    (cache / "0a1b2c.json").write_text('{"startUrl": "https://example.awsapps.com/start"}')
    token = {
        "startUrl": "https://x.awsapps.com/start",
        "region": "eu-west-1",
        "accessToken": rand(80),
        "expiresAt": "2026-12-05T10:00:00Z",
    }
    (project / "notes").mkdir()
    (project / "notes" / "session.json").write_text(json.dumps(token))
    found = {f.path: f.why for f in scan(project, [".aws/sso/cache/0a1b2c.json", "notes/session.json"])}
    assert ".aws/" in found[".aws/sso/cache/0a1b2c.json"]
    assert "AWS SSO" in found["notes/session.json"]


@pytest.mark.parametrize(
    ("head", "says"),
    [
        (b"\xfe\xed\xfe\xed\x00\x00\x00\x02\x00\x00\x00\x01", "Java key store (JKS"),
        (b"\xce\xce\xce\xce\x00\x00\x00\x02\x00\x00\x00\x01", "Java key store (JCEKS"),
    ],
    ids=["JKS", "JCEKS"],
)
def test_a_java_key_store_under_another_name_is_known_by_its_bytes(project: Path, head: bytes, says: str) -> None:
    (project / "model.bin").write_bytes(head + os.urandom(2000))
    (found,) = scan(project, ["model.bin"])
    assert says in found.why


def test_up_from_inside_a_credential_folder_is_refused(tmp_path: Path) -> None:
    kube = tmp_path / "me" / ".kube"
    kube.mkdir(parents=True)
    (kube / "config").write_text("apiVersion: v1\n")
    with pytest.raises(ConfigError, match=r"\.kube"):
        prepare(kube, 200.0)


# -- `gpuc cp PATH POD:`, as the user runs it ------------------------------------------------------------
@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[World, Path]]:
    with open_world(tmp_path) as opened:
        assert opened.gpuc("up", "cpx", "-y").returncode == 0
        (pod,) = opened.provider().list_pods()
        yield opened, opened.provider().paths(pod.id).workspace


def test_cp_refuses_credential_folders_by_their_own_name_and_known_values(
    world: tuple[World, Path], tmp_path: Path
) -> None:
    w, workspace = world
    home = tmp_path / "userhome"
    for rel in (".kube/config", ".docker/config.json", ".config/gcloud/credentials.db", ".aws/sso/cache/x.json"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text("{}\n")
    for sent in (".kube", ".docker", ".config/gcloud", ".kube/config", ".aws/sso"):
        done = w.gpuc("cp", str(home / sent), "cpx:")
        assert done.returncode == 2 and "credential" in done.stderr and "Traceback" not in done.stderr, (sent, done)
    assert sorted(p.name for p in workspace.iterdir() if p.name in (".kube", ".docker", "gcloud", "config")) == []
    key = "".join(secrets.choice(HEX) for _ in range(64))
    (w.project / "launch.sh").write_text(f"VAST={key} python train.py\n")
    done = w.gpuc("cp", "launch.sh", "cpx:", VAST_API_KEY=key)
    assert done.returncode == 2 and "launch.sh: holds the value of VAST_API_KEY" in done.stderr, done.stderr
    assert key not in done.stdout + done.stderr and not (workspace / "launch.sh").exists()
    assert w.gpuc("cp", "launch.sh", "cpx:").returncode == 0, "the same file, no key held: it goes"
