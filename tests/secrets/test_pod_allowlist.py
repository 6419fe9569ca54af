"""Only an allowlist of secrets reaches a pod: HF_TOKEN, the git token, and what GPUC_POD_SECRETS names.
Never the provider keys, the admin token, the notification channels, the webhook secret, the keys that
deploy the watchdog or the results bucket's key, from `.env` or from the environment.

The end-to-end tests run the real `gpuc up --wait` on the local provider and on the emulated rented path
(RunPod emulator, loopback sshd), with every forbidden secret planted in `.env` AND in the environment
(the results bucket's key too: the laptop and the watchdog hold it), and a job that dumps its environment
and the pod's secrets file into results/ (synced to a moto S3 server through the URLs the watchdog grants
the pod). Then every byte is searched: the pod's secrets file, the job's environment, the argv of every
process seen, `up`'s output, every file gpuc wrote.

Every value is made at run time: no token-shaped literal sits in the repo."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from test_secret_hygiene import ArgvSampler

from gpuc.client.context import Ctx
from gpuc.client.pods import allowlist
from gpuc.core.errors import ConfigError
from gpuc.core.podconfig import choose_pod_secrets, pod_secrets
from gpuc.core.podpaths import TOKEN_ENV
from gpuc.core.podsecrets import NEVER_ON_POD, named
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.server import start_in_thread
from gpuc.instance_side.wrapper import job_environ
from gpuc.testkit.platform import client_environ, start_platform, write_env_file
from gpuc.testkit.sshd import LoopbackSshd, start_loopback_sshd


def value(name: str) -> str:
    return f"PLANT{name.lower().replace('_', '')}{secrets.token_hex(8)}"


FORBIDDEN = (
    "RUNPOD_API_KEY",
    "VAST_API_KEY",
    "GPUC_ADMIN_TOKEN",
    "GPUC_NOTIFY_URLS",
    "GPUC_WEBHOOK_SECRET",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)
BUILTIN = ("HF_TOKEN",)
RESULTS_KEY = ("GPUC_S3_ACCESS_KEY_ID", "GPUC_S3_SECRET_ACCESS_KEY")  # the laptop's and the watchdog's, never a pod's


def test_every_forbidden_name_is_covered() -> None:
    assert set(FORBIDDEN) | set(RESULTS_KEY) <= set(NEVER_ON_POD) and TOKEN_ENV in NEVER_ON_POD


# -- the rule -----------------------------------------------------------------------------------------
def settings_with(tmp_path: Path, **extra: Any) -> Settings:
    return Settings(
        home=tmp_path,
        hf_token=SecretStr("hf-value"),
        s3_access_key_id=SecretStr("s3-id"),
        s3_secret_access_key=SecretStr("s3-secret"),
        git_token=SecretStr("git-value"),
        runpod_api_key=SecretStr("rp"),
        admin_token=SecretStr("adm"),
        notify_urls=SecretStr("tgram://bot/chat"),
        webhook_secret=SecretStr("wh"),
        **extra,
    )


def test_the_pod_gets_the_job_s_keys_and_what_is_named_never_the_bucket_s(tmp_path: Path) -> None:
    """An s3:// destination sends no key: the pod is granted its own run's prefix by the watchdog."""
    settings = settings_with(tmp_path, results_bucket="s3://b/p", pod_secrets="WANDB_API_KEY, OPENAI_API_KEY,NOPE")
    env_file = {k: "from-env-file" for k in FORBIDDEN} | {"WANDB_API_KEY": "wandb-file", "OTHER": "x"}
    environ = {k: "from-environ" for k in FORBIDDEN} | {"OPENAI_API_KEY": "openai-env", "WANDB_API_KEY": "wandb-env"}
    chosen = choose_pod_secrets(settings, env_file, environ)
    assert chosen.values == {
        "HF_TOKEN": "hf-value",
        "WANDB_API_KEY": "wandb-env",  # the environment wins over .env, as for every setting
        "OPENAI_API_KEY": "openai-env",
    }
    assert chosen.missing == ("NOPE",)
    assert chosen.names_line() == (
        "secrets to the pod: HF_TOKEN, WANDB_API_KEY (GPUC_POD_SECRETS), OPENAI_API_KEY (GPUC_POD_SECRETS)"
    )
    assert chosen.warnings() == [
        "warning: NOPE is named in GPUC_POD_SECRETS but is in neither .env nor the environment: not sent"
    ]
    written = pod_secrets(chosen.values, "tok")
    assert written == {**chosen.values, TOKEN_ENV: "tok"}


def test_the_destination_decides_which_of_its_keys_go(tmp_path: Path) -> None:
    for bucket in ("file:///r", "s3://b/p"):
        local = choose_pod_secrets(settings_with(tmp_path, results_bucket=bucket), {}, {})
        assert set(local.values) == {"HF_TOKEN"}, f"{bucket}: no S3 key on a pod"
    git = choose_pod_secrets(settings_with(tmp_path, git_remote="https://example.com/r.git"), {}, {})
    assert set(git.values) == {"HF_TOKEN", "GPUC_GIT_TOKEN"}
    assert choose_pod_secrets(Settings(home=tmp_path), {}, {}).names_line() == "secrets to the pod: none"


@pytest.mark.parametrize("name", sorted(NEVER_ON_POD))
def test_naming_a_forbidden_key_is_refused_with_the_reason(tmp_path: Path, name: str) -> None:
    planted = {name: "planted-value-9f8e"}
    with pytest.raises(ConfigError) as refused:
        choose_pod_secrets(settings_with(tmp_path, pod_secrets=f"WANDB_API_KEY,{name}"), planted, planted)
    assert name in refused.value.message and NEVER_ON_POD[name] in refused.value.message
    assert f"remove {name} from GPUC_POD_SECRETS" in (refused.value.hint or "")
    assert "planted-value" not in refused.value.message + (refused.value.hint or ""), "names only"


def test_a_name_that_is_not_a_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="not an environment variable name"):
        named("WANDB_API_KEY=abc")
    assert named(" A, ,B,A ") == ["A", "B"]


def test_the_setting_is_read_from_the_environment(tmp_path: Path) -> None:
    settings = load_settings({"GPUC_HOME": str(tmp_path), "GPUC_POD_SECRETS": "WANDB_API_KEY"})
    assert settings.pod_secrets == "WANDB_API_KEY"


def test_the_job_environment_drops_the_forbidden_names_from_the_file_and_the_pod_s_environment() -> None:
    planted = {k: "x" for k in NEVER_ON_POD}
    env = job_environ({**planted, "PATH": "/bin"}, {**planted, "HF_TOKEN": "hf", "WANDB_API_KEY": "w"}, "pod1")
    assert not set(NEVER_ON_POD) & set(env)
    assert env["HF_TOKEN"] == "hf" and env["WANDB_API_KEY"] == "w" and env["PATH"] == "/bin"


# -- what `up` prints, and the deploy-key warning -------------------------------------------------------
def said(tmp_path: Path, settings: Settings, env_file: dict[str, str], environ: dict[str, str]) -> list[str]:
    lines: list[str] = []
    deps = Ctx(settings, echo=lines.append)
    allowlist.pod_secrets(settings, env_file, deps, {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), **environ})
    return lines


def test_up_prints_the_names_never_the_values_and_warns_what_is_named(tmp_path: Path) -> None:
    settings = settings_with(tmp_path, results_bucket="s3://b/p", pod_secrets="WANDB_API_KEY,GONE")
    lines = said(tmp_path, settings, {"WANDB_API_KEY": "wandb-file-value"}, {})
    text = "\n".join(lines)
    assert lines[0] == "secrets to the pod: HF_TOKEN, WANDB_API_KEY (GPUC_POD_SECRETS)"
    assert "GONE is named in GPUC_POD_SECRETS" in text
    (warning,) = [line for line in lines if "host can read" in line]
    assert warning.startswith("warning: WANDB_API_KEY go onto the pod") and "stranger's machine" in warning
    for secret in ("hf-value", "s3-id", "s3-secret", "wandb-file-value"):
        assert secret not in text
    assert "watchdog" not in text, "no deploy-key warning for keys that differ"


@pytest.mark.parametrize("where", ["environment", ".env", "credentials file"])
def test_up_warns_when_a_named_secret_is_a_key_that_deploys_the_watchdog(tmp_path: Path, where: str) -> None:
    """A job's own S3 access is named by the user (GPUC_POD_SECRETS): it must not be the deploy key."""
    settings = settings_with(tmp_path, results_bucket="s3://b/p", pod_secrets="JOB_S3_KEY")
    pair = {"AWS_ACCESS_KEY_ID": "deploy-id", "AWS_SECRET_ACCESS_KEY": "deploy-secret"}
    environ: dict[str, str] = {**pair} if where == "environment" else {}
    env_file: dict[str, str] = {**pair} if where == ".env" else {}
    env_file["JOB_S3_KEY"] = "deploy-secret"
    if where == "credentials file":
        creds = tmp_path / "credentials"
        creds.write_text("[work]\naws_access_key_id = deploy-id\naws_secret_access_key = deploy-secret\n")
        environ = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_PROFILE": "work"}
    (warning,) = [line for line in said(tmp_path, settings, env_file, environ) if "watchdog" in line]
    assert warning.startswith("warning: JOB_S3_KEY is the AWS key that deploys the watchdog")
    assert "deploy-id" not in warning and "deploy-secret" not in warning
    assert {"environment": "in the environment", ".env": "in .env", "credentials file": "profile [work]"}[
        where
    ] in warning


# -- end to end: the real `gpuc up --wait` -------------------------------------------------------------
JOB = "mkdir -p results; env > results/env.txt; cat .gpuc/secrets.env > results/secrets.txt"


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def bucket(moto_url: str) -> Any:
    client = boto3.client(
        "s3", endpoint_url=moto_url, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    name = f"results-{secrets.token_hex(4)}"
    client.create_bucket(Bucket=name)
    return client, name


def planted() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(forbidden in .env, forbidden in the environment, allowed): every value distinct, so a hit names
    where it came from. The results key is in .env, as a user's is: the laptop's and the watchdog's."""
    in_file = {k: value(k + "file") for k in (*FORBIDDEN, *RESULTS_KEY)}
    in_env = {k: value(k + "env") for k in FORBIDDEN}
    allowed = {k: value(k) for k in BUILTIN} | {"WANDB_API_KEY": value("wandb"), "OPENAI_API_KEY": value("openai")}
    return in_file, in_env, allowed


def watchdog_settings(home: Path, admin: str, in_file: dict[str, str], moto_url: str, bucket_name: str) -> Settings:
    """The watchdog holds the results key (as `gpuc watchdog serve` reads it from the same .env)."""
    return Settings(
        home=home, admin_token=SecretStr(admin), results_bucket=f"s3://{bucket_name}/runs", s3_endpoint_url=moto_url,
        s3_access_key_id=SecretStr(in_file[RESULTS_KEY[0]]), s3_secret_access_key=SecretStr(in_file[RESULTS_KEY[1]]),
    )  # fmt: skip


def run_up(env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[bytes], set[bytes]]:
    with ArgvSampler() as sampler:
        done = subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", "up", "leak-check", "--wait", "--", "sh", "-c", JOB],
            env=env,
            cwd=cwd,
            capture_output=True,
            timeout=240,
            check=False,
        )
    return done, sampler.seen


def search(
    done: subprocess.CompletedProcess[bytes],
    argv: set[bytes],
    roots: list[Path],
    s3: tuple[Any, str],
    forbidden: dict[str, str],
    allowed: dict[str, str],
    env_file: Path,
) -> None:
    out = done.stdout + done.stderr
    assert done.returncode == 0, out.decode()[-4000:]
    client, name = s3
    objects = {
        o["Key"]: client.get_object(Bucket=name, Key=o["Key"])["Body"].read()
        for o in client.list_objects_v2(Bucket=name).get("Contents", [])
    }
    job_env = next(v for k, v in objects.items() if k.endswith("/env.txt"))
    secrets_file = next(v for k, v in objects.items() if k.endswith("/secrets.txt"))
    # The forbidden ones are nowhere: the job's environment, the secrets file, the bucket, argv, the output,
    # every file gpuc or the pod wrote (the pod's own root included). The results key among them: the pod wrote
    # env.txt and secrets.txt to the bucket through the URLs the watchdog granted it.
    places = {"up's output": out, **{f"s3 {k}": v for k, v in objects.items()}}
    places |= {f"argv {a[:60]!r}": a for a in argv}
    for root in roots:
        places |= {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and p != env_file}
    hits = [
        f"{key} in {where}" for key, val in forbidden.items() for where, data in places.items() if val.encode() in data
    ]
    assert hits == [], hits
    # The allowed ones reached the job and the pod's secrets file, under their own names.
    for key, val in allowed.items():
        assert f"{key}={val}".encode() in job_env, f"{key} missing from the job's environment"
        assert f'{key}="{val}"'.encode() in secrets_file, f"{key} missing from the pod's secrets file"
    # The names are printed, the values are not.
    assert b"secrets to the pod: HF_TOKEN, WANDB_API_KEY (GPUC_POD_SECRETS)" in out
    assert [key for key, val in allowed.items() if val.encode() in out] == [], "an allowed value was printed"
    assert argv, "no process was sampled: the argv check proved nothing"


def env_for(
    home: Path,
    base: dict[str, str],
    in_file: dict[str, str],
    in_env: dict[str, str],
    allowed: dict[str, str],
    moto_url: str,
    bucket_name: str,
) -> tuple[dict[str, str], Path]:
    env_values = {
        **in_file,
        **{k: allowed[k] for k in (*BUILTIN, "WANDB_API_KEY")},
        "GPUC_POD_SECRETS": "WANDB_API_KEY,OPENAI_API_KEY",
    }
    env_file = write_env_file(home, env_values)
    env = {
        **base,
        **in_env,
        "OPENAI_API_KEY": allowed["OPENAI_API_KEY"],
        "GPUC_ENV_FILE": str(env_file),
        "GPUC_RESULTS_BUCKET": f"s3://{bucket_name}/runs",
        "GPUC_S3_ENDPOINT_URL": moto_url,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    return env, env_file


def clean_base() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_", "HF_"))}


def test_local_up_sends_the_allowlist_and_nothing_else(tmp_path: Path, moto_url: str) -> None:
    in_file, in_env, allowed = planted()
    home = tmp_path / "home"
    admin = in_env["GPUC_ADMIN_TOKEN"]  # the watchdog's real admin token: it must not reach the pod either
    s3 = bucket(moto_url)
    functions = start_in_thread(watchdog_settings(tmp_path / "functions", admin, in_file, moto_url, s3[1]), port=0)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    try:
        base = {
            **clean_base(),
            "GPUC_HOME": str(home),
            "GPUC_WATCHDOG_URL": functions.url,
            "GPUC_LOCAL_BOOT_S": "0.2",
            "GPUC_HEARTBEAT_INTERVAL_S": "0.5",
        }
        env, env_file = env_for(home, base, in_file, in_env, allowed, moto_url, s3[1])
        done, argv = run_up(env, project)
    finally:
        functions.stop()
    search(done, argv, [home], s3, {**{k + " (.env)": v for k, v in in_file.items()}, **in_env}, allowed, env_file)


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[LoopbackSshd]:
    server = start_loopback_sshd(tmp_path / "sshd")
    yield server
    server.stop()


@pytest.mark.sshd
@pytest.mark.e2e
def test_rented_up_sends_the_allowlist_and_nothing_else(sshd: LoopbackSshd, tmp_path: Path, moto_url: str) -> None:
    in_file, in_env, allowed = planted()
    emulator, platform = start_platform("runpod", sshd)
    admin = in_env["GPUC_ADMIN_TOKEN"]
    s3 = bucket(moto_url)
    functions = start_in_thread(watchdog_settings(tmp_path / "functions", admin, in_file, moto_url, s3[1]), port=0)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    home = tmp_path / "home"
    try:
        base = client_environ(emulator, sshd, home, clean_base())
        (home / "config.json").parent.mkdir(parents=True, exist_ok=True)
        (home / "config.json").write_text(json.dumps({"bootstrap_apt": ""}))
        base.update({"GPUC_WATCHDOG_URL": functions.url})
        # The provider key `up` rents with is the emulator's account key: planted as the one in the environment.
        in_env["RUNPOD_API_KEY"] = base["RUNPOD_API_KEY"]
        env, env_file = env_for(home, base, in_file, in_env, allowed, moto_url, s3[1])
        done, argv = run_up(env, project)
    finally:
        platform.close()
        emulator.stop()
        functions.stop()
    search(
        done,
        argv,
        [home, sshd.sandbox],
        s3,
        {**{k + " (.env)": v for k, v in in_file.items()}, **in_env},
        allowed,
        env_file,
    )
