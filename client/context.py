"""The one object every command gets: `Ctx`, passed by click (`@pass_ctx`), and taken by the functions the
commands call. It holds the settings and what the laptop touches (the run store, the clock, the watchdog
client, provider clients, the ledger, the way onto a pod), each built the first time it is asked for.

It is the one seam of the tests: `CliRunner().invoke(cli, [...], obj=Ctx(settings=..., watchdog=fake,
providers={"runpod": fake}))`; a command invoked without one gets `Ctx()`, built from the environment.

Startup: this module imports nothing heavy, and nothing is built before a command asks for it (`gpuc ls`
in an empty home never opens the ledger, `gpuc --help` never reads the settings). The watchdog client,
the provider registry, the ledger and the ssh code load inside the methods that build them.

HTTP: every client built here (the watchdog's, the providers', the notifier's) sends with the process's one
httpx client (core/transport.py `shared_client()`), built on the first request: one pool of kept-open
connections per host, shared by the reads a command makes together (core/together.py).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import click

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.core.termsafe import clean

if TYPE_CHECKING:
    from gpuc.client.runs import RunStore
    from gpuc.core.ledger.store import Ledger
    from gpuc.core.pod import Pod
    from gpuc.core.providers.base import PodAccess, Provider
    from gpuc.core.watchdog_client import WatchdogClient

Echo = Callable[[str], None]
ProviderFactory = Callable[[str, Settings], "Provider"]
AccessFactory = Callable[["Provider", "Pod", Settings], "PodAccess"]


class Ctx:
    """Settings and deps, lazily. Every argument is optional: what is not given is built from the settings
    (and the settings from the environment) on first use."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        runs: RunStore | None = None,
        clock: Clock | None = None,
        echo: Echo | None = None,
        watchdog: WatchdogClient | None = None,
        providers: Mapping[str, Provider] | None = None,
        provider_factory: ProviderFactory | None = None,
        access: AccessFactory | None = None,
        terminal: Callable[[], bool] | None = None,
    ) -> None:
        self._settings = settings
        self._runs = runs
        self._watchdog = watchdog
        self._own_watchdog = False
        self.clock: Clock = clock or SystemClock()
        self._echo_given = echo is not None
        self.echo: Echo = cleaned(echo or talk)
        self._given: dict[str, Provider] = dict(providers or {})
        self.providers: dict[str, Provider] = dict(self._given)
        self._provider_factory = provider_factory
        self._access = access
        self._terminal = terminal

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        """New settings (`watchdog deploy` saved a URL and a token): the watchdog client built from the old
        ones goes with them."""
        if self._own_watchdog:
            self.close()
            self._watchdog, self._own_watchdog = None, False
        self._settings = settings

    @property
    def runs(self) -> RunStore:
        if self._runs is None:
            from gpuc.client.runs import RunStore  # sqlite: only for the commands that read runs

            self._runs = RunStore(self.settings.home)
        return self._runs

    @property
    def watchdog(self) -> WatchdogClient:
        if self._watchdog is None:
            from gpuc.core.watchdog_client import WatchdogClient

            self._watchdog = WatchdogClient(self.settings)
            self._own_watchdog = True
        return self._watchdog

    @watchdog.setter
    def watchdog(self, client: WatchdogClient) -> None:
        self.close()
        self._watchdog, self._own_watchdog = client, False

    def provider(self, name: str) -> Provider:
        """The provider's client, one for the life of this Ctx."""
        if name not in self.providers:
            self.providers[name] = self.new_provider(name)
        return self.providers[name]

    def new_provider(self, name: str) -> Provider:
        """A client of its own, which the caller closes (a report that reads each account once); one the
        caller gave (`providers=`) is that one."""
        if name in self._given:
            return self._given[name]
        if self._provider_factory is not None:
            return self._provider_factory(name, self.settings)
        # Startup: each provider's client (httpx for the rented ones) loads only when it is asked for.
        from gpuc.core.providers.registry import get_provider

        return get_provider(name, self.settings)

    def ledger(self) -> Ledger:
        # Startup: `gpuc ls` with no watchdog never reads the ledger; the CSV code loads when it does.
        from gpuc.core.ledger.store import Ledger

        return Ledger(self.settings.ledger)

    def pod_access(self, provider: Provider, pod: Pod) -> PodAccess:
        """The way onto `pod`: its sandbox on the local provider, ssh on a rented one."""
        if self._access is not None:
            return self._access(provider, pod, self.settings)
        from gpuc.client.onpod.access import pod_access  # startup: ssh only for the commands that reach a pod

        return pod_access(provider, pod, self.settings)

    def on_terminal(self) -> bool:
        """Whether a question can be asked (stdin is a terminal)."""
        return self._terminal() if self._terminal is not None else sys.stdin.isatty()

    def prefer_echo(self, echo: Echo) -> None:
        """A command's own way of printing (`gpuc logs`: its `gpuc:` lines), unless the caller gave one."""
        if not self._echo_given:
            self.echo = cleaned(echo)

    def close(self) -> None:
        """Close the connection of the watchdog client built here, if one was (a given one is the giver's)."""
        if self._watchdog is not None and self._own_watchdog:
            self._watchdog.close()

    def __enter__(self) -> Ctx:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def talk(text: str) -> None:
    """One of gpuc's own lines: on stderr. stdout is the command's data alone (a table, `--json`, the job's
    output that `--wait` follows), so `gpuc up ... | tee log` and `gpuc ls --json | jq` each get what they
    expect (docs/using.md, "Output")."""
    click.echo(text, err=True)


def cleaned(echo: Echo) -> Echo:
    """`echo` of text without terminal controls: what the commands say quotes the pod (its verification
    verdict, its bootstrap steps, a provider's status), and a pod is a stranger's machine."""

    def say(text: str) -> None:
        echo(clean(text))

    return say


pass_ctx = click.make_pass_decorator(Ctx, ensure=True)
