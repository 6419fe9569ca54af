"""What the laptop's commands touch (settings, the run store, the clock, the watchdog client, provider
clients), built once from Settings by the CLI; tests build `Deps` directly with fakes.

Its own module so that `podlife` (the pod's life) and `provision` (getting gpuc onto a pod) both take it
without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuc.client.functions_client import FunctionsClient
from gpuc.client.state import RunStore
from gpuc.core.clock import Clock, SystemClock
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import get_provider
from gpuc.core.settings import Settings
from gpuc.core.termsafe import clean

if TYPE_CHECKING:
    from gpuc.core.ledger import Ledger

Echo = Callable[[str], None]


@dataclass
class Deps:
    """What the pod-life functions touch; the CLI builds it from Settings, tests inject fakes."""

    settings: Settings
    runs: RunStore
    clock: Clock
    echo: Echo
    functions: FunctionsClient
    providers: dict[str, Provider] = field(default_factory=dict)

    def provider(self, name: str) -> Provider:
        if name not in self.providers:
            self.providers[name] = get_provider(name, self.settings)
        return self.providers[name]

    def ledger(self) -> Ledger:
        # Startup: `gpuc ls` with no watchdog never reads the ledger; the CSV code loads when it does.
        from gpuc.core.ledger import Ledger

        return Ledger(self.settings.ledger)


def build_deps(settings: Settings, echo: Echo | None = None) -> Deps:
    return Deps(
        settings=settings,
        runs=RunStore(settings.home),
        clock=SystemClock(),
        echo=cleaned(echo or print),
        functions=FunctionsClient(settings),
    )


def cleaned(echo: Echo) -> Echo:
    """`echo` of text without terminal controls: what the commands say quotes the pod (its verification
    verdict, its bootstrap steps, a provider's status), and a pod is a stranger's machine."""

    def say(text: str) -> None:
        echo(clean(text))

    return say
