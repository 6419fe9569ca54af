"""The two homes gpuc's startup is measured and tested in (bench/cli_startup.py,
tests/client/test_startup_real_home.py).

The empty one, as a new user has it: a fresh GPUC_HOME, no .env, no provider keys, no watchdog token. The
real one, as a user lives in it: a .env with both providers' keys, a watchdog URL and token, a pod at
RunPod that the watchdog watches and the ledger records. There the providers are the emulators and the
watchdog is the real server, in threads of the calling process on loopback: nothing touches the network.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def fresh_env(home: Path) -> dict[str, str]:
    """The caller's environment minus anything that configures gpuc or a provider, in an empty home.
    PYTHONDONTWRITEBYTECODE goes too: a user's install has its bytecode (pip compiles it, an editable
    install writes it on the first run), and without it every run would compile the changed modules anew."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_", "HF_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(HOME=str(home), GPUC_HOME=str(home / "gpuc"), GPUC_ENV_FILE=str(home / "no.env"))
    return env


@contextmanager
def real_home(root: Path) -> Iterator[dict[str, str]]:
    """The environment of a home a user lives in: a .env (mode 600) with the RunPod and Vast keys and the
    watchdog's URL and admin token; a pod at RunPod that the watchdog watches, with its row in the ledger."""
    from gpuc.core import api
    from gpuc.core.ledger.store import Ledger
    from gpuc.core.models import PodSpec
    from gpuc.core.providers.registry import get_provider
    from gpuc.core.settings import Settings
    from gpuc.core.settingsload import load_settings
    from gpuc.core.settingvalues import SecretStr
    from gpuc.core.watchdog_client import WatchdogClient
    from gpuc.functions.server import start_in_thread
    from gpuc.testkit.emulators.server import serve

    token = secrets.token_hex(16)
    env = fresh_env(root)
    env["GPUC_ENV_FILE"] = str(root / ".env")
    watchdog_settings = Settings(home=root / "watchdog", env_file=root / "none.env", admin_token=SecretStr(token))
    runpod, vast = serve("runpod"), serve("vast")
    watchdog = start_in_thread(watchdog_settings, port=0)
    try:
        lines = {**runpod.client_env(), **vast.client_env(), "GPUC_WATCHDOG_URL": watchdog.url}
        lines["GPUC_ADMIN_TOKEN"] = token
        dotenv = root / ".env"
        dotenv.write_text("".join(f"{k}={v}\n" for k, v in lines.items()), encoding="utf-8")
        dotenv.chmod(0o600)
        settings = load_settings(env)
        provider = get_provider("runpod", settings)
        pod = provider.create(PodSpec(experiment="bench", run_id="run-bench1", provider="runpod", gpu_type="RTX 4090"))
        provider.close()
        with WatchdogClient(settings) as client:
            client.register(
                api.RegisterRequest(pod_id=pod.id, provider="runpod", name=pod.name, experiment="bench", key="0" * 64)
            )
        Ledger(settings.ledger).start(
            pod.id, provider="runpod", experiment="bench", gpu="RTX 4090", price_per_hour=0.69, start_ts=time.time()
        )
        yield env
    finally:
        watchdog.stop()
        runpod.stop()
        vast.stop()
