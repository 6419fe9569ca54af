"""The provider interface: what gpuc needs from RunPod, Vast.ai and the local sandbox.

Contract every implementation keeps (tests hold them to it):
- `get` returns None only when the provider POSITIVELY says the pod is gone; any doubt raises
  ProviderError (the reaper never acts on an uncertain reading).
- `list_pods` raises ProviderSchemaError on a body it does not recognise: never "empty account".
- `create` is never retried blindly: after a timeout or 5xx it looks the name up first.
- `destroy` is idempotent: an already-gone pod is success ("already_gone").
- `stop` keeps the pod's disk; `start` resumes it (only `gpuc results` does, to copy a kept pod's results).
- Pods carry `managed=True` only when both ownership markers hold (name prefix + owner env var).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Literal

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import ProviderError

if TYPE_CHECKING:  # startup: the interface needs the models' names only; `gpuc ls` may never build one
    from gpuc.core.models import Balance, Offer, PodSpec
    from gpuc.core.pod import Pod
    from gpuc.core.podpaths import PodPaths

DestroyResult = Literal["destroyed", "already_gone"]


class Provider(ABC):
    name: str = "?"
    # Whether `create` can rent an interruptible (spot/bid) pod; False refuses before any call.
    supports_interruptible: bool = True
    # Whether `create` hands the pod the ssh public key `up` logs in with (PodSpec.ssh_public_key): RunPod's
    # `startSsh` alone puts only the account's registered keys on a pod, and none when none are registered.
    takes_public_key: bool = False

    def check_spec(self, spec: PodSpec) -> None:  # noqa: B027 - most providers take any valid PodSpec
        """Raise ConfigError, before any call, for what this provider would refuse or rent unusable."""

    def registered_ssh_keys(self) -> list[str] | None:
        """The public keys the provider account would put on a new pod; None: gpuc does not read them here."""
        return None

    @abstractmethod
    def create(self, spec: PodSpec) -> Pod: ...

    @abstractmethod
    def get(self, pod_id: str) -> Pod | None: ...

    @abstractmethod
    def list_pods(self) -> list[Pod]: ...

    @abstractmethod
    def stop(self, pod_id: str) -> None: ...

    def start(self, pod_id: str) -> None:
        """Resume a stopped pod (its disk as it was, its processes not). Only `gpuc results` resumes, to copy
        the results a kept pod holds: nothing else ever starts a pod again."""
        raise ProviderError(
            f"{self.name} cannot resume a stopped pod through gpuc",
            provider=self.name,
            hint="resume it in the provider's console, then run the command again",
        )

    @abstractmethod
    def destroy(self, pod_id: str) -> DestroyResult: ...

    @abstractmethod
    def balance(self) -> Balance: ...

    def offers(self, gpu: str | None = None, interruptible: bool = False) -> list[Offer]:
        return []

    def find_by_name(self, name: str) -> Pod | None:
        matches = [p for p in self.list_pods() if p.name == name and p.status != "terminated"]
        if len(matches) > 1:
            raise ProviderError(
                f"{len(matches)} pods are named {name}",
                provider=self.name,
                hint="destroy the extras by id (gpuc ls shows them)",
            )
        return matches[0] if matches else None

    def confirm_gone(self, pod_id: str, clock: Clock | None = None, attempts: int = 5, delay_s: float = 1.0) -> bool:
        """After a destroy: list again until the provider no longer shows the pod alive."""
        clock = clock or SystemClock()
        for attempt in range(attempts):
            pod = self.get(pod_id)
            if pod is None or pod.status == "terminated":
                return True
            if attempt + 1 < attempts:
                clock.sleep(delay_s)
        return False

    def close(self) -> None:  # noqa: B027 - optional hook for clients that hold connections
        pass


class SelfDestroyer(ABC):
    """Inside a pod: destroy this pod with the key the platform scopes to it (never the account key)."""

    @abstractmethod
    def destroy_self(self) -> str: ...

    @abstractmethod
    def stop_self(self) -> str:
        """Stop this pod, never destroy it: the kept window of a pod whose results could not be copied is
        over (F16). GPU billing ends; the disk with results/ stays (and still bills)."""


class PodAccess(ABC):
    """A way onto a running pod: ssh on a rented one, plain processes in a local sandbox.
    Secrets travel through `put_file` (content on stdin / a mode-600 file), never in argv."""

    paths: PodPaths  # where the pod's files are, as this way onto it sees them

    @abstractmethod
    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None: ...

    @abstractmethod
    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]: ...

    def read(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        """`run` for a command that only looks (acts on nothing): ssh may retry it where its connection
        failed. Whatever acts (a job start, a sync, a destroy) goes through `run`, exactly once."""
        return self.run(argv, timeout_s)

    @abstractmethod
    def spawn(self, argv: list[str], role: str) -> None:
        """Start a detached process that outlives this session (the agent, a wrapped job)."""
