"""`gpuc up --env NAME`: a variable of the user's environment or `.env` reaches the job by
its name. The value goes where GPUC_POD_SECRETS' values go (the pod's mode-600 secrets file, then the job's
environment) and nowhere else: not argv, not `up`'s output, not the pod's settings at the provider. A value
typed on the command line (`--env KEY=VAL`) is refused without being repeated; an account key is refused as
it is in GPUC_POD_SECRETS; a name found nowhere is refused before anything is rented.

Every value is made at run time: no token-shaped literal sits in the repo."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from test_pod_allowlist import clean_base, settings_with
from test_secret_hygiene import ArgvSampler

from gpuc.core.errors import ConfigError
from gpuc.core.podconfig import choose_pod_secrets
from gpuc.core.podsecrets import flagged
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.server import start_in_thread
from gpuc.testkit.platform import write_env_file


def test_a_named_variable_goes_from_the_environment_or_env(tmp_path: Path) -> None:
    chosen = choose_pod_secrets(
        settings_with(tmp_path),
        {"WANDB_API_KEY": "wandb-file", "MY_TOKEN": "mine-file"},
        {"MY_TOKEN": "mine-env"},
        ("MY_TOKEN", "WANDB_API_KEY", "MY_TOKEN"),
    )
    assert chosen.values["MY_TOKEN"] == "mine-env"  # the environment wins over .env, as for every setting
    assert chosen.values["WANDB_API_KEY"] == "wandb-file"
    line = chosen.names_line()
    assert "MY_TOKEN (--env)" in line and "WANDB_API_KEY (--env)" in line
    assert "mine-env" not in line and "wandb-file" not in line


def test_a_value_on_the_command_line_is_refused_and_never_repeated() -> None:
    value = secrets.token_hex(8)
    with pytest.raises(ConfigError) as caught:
        flagged([f"MY_TOKEN={value}"])
    said = f"{caught.value.message} {caught.value.hint}"
    assert "--env MY_TOKEN" in said and ".env" in said and value not in said


@pytest.mark.parametrize("name", ["RUNPOD_API_KEY", "GPUC_ADMIN_TOKEN", "GPUC_NOTIFY_URLS", "AWS_ACCESS_KEY_ID"])
def test_an_account_key_is_refused_with_the_reason(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=f"--env names what never goes onto a pod.*{name} is"):
        choose_pod_secrets(settings_with(tmp_path), {name: "x"}, {}, (name,))


def test_a_name_found_nowhere_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--env MY_TOKEN: MY_TOKEN is neither in your environment nor in \.env"):
        choose_pod_secrets(settings_with(tmp_path), {"MY_TOKEN": ""}, {}, ("MY_TOKEN",))


# -- end to end: the real `gpuc up --env ... --wait` on the local provider ----------------------------------
JOB = "mkdir -p results; env > results/env.txt"


def test_up_env_reaches_the_job_and_nothing_else(tmp_path: Path) -> None:
    from_env, from_file = f"PLANTenv{secrets.token_hex(8)}", f"PLANTfile{secrets.token_hex(8)}"
    home, results, project = tmp_path / "home", tmp_path / "results", tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text("print(1)\n")
    env_file = write_env_file(home, {"FROM_FILE": from_file, "NOT_ASKED": "PLANTnotasked"})
    functions = start_in_thread(Settings(home=tmp_path / "functions", admin_token=SecretStr("adm-x")), port=0)
    env = {
        **clean_base(),
        "GPUC_HOME": str(home),
        "GPUC_ENV_FILE": str(env_file),
        "GPUC_WATCHDOG_URL": functions.url,
        "GPUC_ADMIN_TOKEN": "adm-x",
        "GPUC_RESULTS_BUCKET": f"file://{results}",
        "GPUC_LOCAL_BOOT_S": "0.2",
        "GPUC_HEARTBEAT_INTERVAL_S": "0.5",
        "FROM_ENV": from_env,
    }
    argv = [sys.executable, "-m", "gpuc.client.cli", "up", "envcheck", "--env", "FROM_ENV", "--env", "FROM_FILE"]
    try:
        with ArgvSampler() as sampler:
            done = subprocess.run(
                [*argv, "--wait", "--", "sh", "-c", JOB], env=env, cwd=project, capture_output=True, timeout=240
            )
    finally:
        functions.stop()
    out = done.stdout + done.stderr
    assert done.returncode == 0, out.decode()[-4000:]
    (job_env,) = [p.read_text() for p in results.rglob("env.txt")]
    assert f"FROM_ENV={from_env}" in job_env and f"FROM_FILE={from_file}" in job_env
    assert "NOT_ASKED" not in job_env  # the rest of .env stays on the laptop
    assert b"FROM_ENV (--env), FROM_FILE (--env)" in out
    for value in (from_env, from_file):
        assert value.encode() not in out, "a value was printed"
        assert not [a for a in sampler.seen if value.encode() in a], "a value was in a process's argv"
        # On the laptop's side, only the pod's secrets file (mode 600) holds it: not the run store, the
        # provider's pod record (its env), the ledger, the logs or the outbox.
        holders = sorted(
            str(p.relative_to(home))
            for p in home.rglob("*")
            if p.is_file() and p != env_file and value.encode() in p.read_bytes()
        )
        assert all(h.endswith(".gpuc/secrets.env") for h in holders), holders  # the pod root goes with the pod
    assert sampler.seen, "no process was sampled: the argv check proved nothing"
