"""The command table, kept free of imports so `gpuc --help` can print without loading click."""

from __future__ import annotations

# name -> "module:attribute"; a module is imported only when its command runs (or shows its help).
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("gpuc.client.cmd_pod:up", "Start a pod for an experiment (and optionally run a job on it)."),
    "run": ("gpuc.client.cmd_pod:run", "Run a job on a pod under the wrapper (sync, notify, destroy)."),
    "down": (
        "gpuc.client.cmd_pod:down",
        "Sync results, destroy a pod, confirm it is gone, close its ledger row.",
    ),
    "ls": ("gpuc.client.cmd_pod:ls", "List pods at every configured provider, and the watchdog's health."),
    "keep": ("gpuc.client.cmd_pod:keep", "Suspend a pod's idle destroy for a while (a lease)."),
    "extend": ("gpuc.client.cmd_pod:extend", "Move a pod's deadline (--max-hours) later, within your cap."),
    "results": ("gpuc.client.cmd_results:results", "Copy a kept or stopped pod's results here, then end it."),
    "logs": ("gpuc.client.cmd_logs:logs", "Show a job's output: from the live pod, or from its results once gone."),
    "ledger": ("gpuc.client.cmd_ledger:ledger", "What was spent: month summary, plot, reconcile."),
    "pick": ("gpuc.client.cmd_pick:pick", "Choose a GPU for a model: fit, bandwidth, price."),
    "offers": (
        "gpuc.client.cmd_offers:offers",
        "Live offers from Vast.ai and RunPod, filtered, with bid advice.",
    ),
    "balance": ("gpuc.client.cmd_balance:balance", "Provider balances, spend per hour, hours left."),
    "doctor": (
        "gpuc.client.cmd_doctor:doctor",
        "Check the setup before you rent: keys, .env, watchdog, hook.",
    ),
    "watchdog": (
        "gpuc.client.cmd_watchdog:watchdog",
        "The out-of-band watchdog: serve, reap, deploy, status.",
    ),
    "page": ("gpuc.client.pagelink:page", "A link (or QR code) to the watchdog's status page for your phone."),
    "demo": ("gpuc.client.cmd_demo:demo", "Run the whole pod life end to end on the embedded default."),
    "drill": (
        "gpuc.client.cmd_drill:drill",
        "Run the failure matrix F1-F14 and report the money each wastes.",
    ),
    "completion": (
        "gpuc.client.cli:completion",
        'Print the shell completion script: eval "$(gpuc completion bash)".',
    ),
}


HELP_HEAD = """Usage: gpuc [OPTIONS] COMMAND [ARGS]...

  gpuc: rented GPUs that destroy themselves, watched out of band, with every
  cent on record.

  Start with `gpuc demo` (no accounts needed), then `gpuc doctor`.

Options:
  --version   Show the version and exit.
  -h, --help  Show this message and exit.

Commands:
"""


def top_help() -> str:
    width = max(len(n) for n in COMMANDS) + 2
    return HELP_HEAD + "".join(f"  {n:<{width}}{COMMANDS[n][1]}\n" for n in sorted(COMMANDS))


def require_testkit(command: str) -> None:
    """`gpuc demo` and `gpuc drill` run on gpuc.testkit (emulators, fakes), which the wheel leaves out."""
    # Lazy: this module is read on every `gpuc --help` and must import nothing.
    import importlib.util

    from gpuc.core.errors import ConfigError

    if importlib.util.find_spec("gpuc.testkit") is None:
        raise ConfigError(
            f"`gpuc {command}` runs from a clone of the gpuc repository: its emulators and fakes (gpuc.testkit) "
            "are not part of the installed package",
            hint="clone the repository and run `make demo` there (it installs gpuc from the clone)",
        )
