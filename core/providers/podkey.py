"""A pod's own end with the key the platform scopes to it, never an account key: RunPod's pod key (GraphQL
`podTerminate`, `podStop`, `pod(...)`) and Vast's instance key (DELETE, PUT state, GET of the one instance).

Standard library only (urllib): this runs on the pod, under whatever python3 >= 3.9 the image has, with
neither httpx nor pydantic. The requests are the ones the laptop's clients send for the same calls (the same
URLs, the same `Authorization: Bearer`, the same JSON bodies, no redirect followed, TLS verified, the
environment's proxies) and the answers are read by the same rules, shared from here where the laptop needs
them too (RunPod's GraphQL errors, Vast's "not found").

Each call has one deadline for the whole of it (SELF_DEADLINE_S: terminate, the read of itself, the stop, and
every retry between them). A 429, a 502/503/504 or a connection that failed is tried again inside it; a 429
(or a GraphQL error that says "rate limit": RunPod limits GraphQL in stages since 2026-09-17) is "later",
never a refusal: it never makes the pod stop itself instead, and past the deadline it raises RateLimited, the
ending reports destroy_failed and the watchdog's reaper, which holds the account key, ends the pod.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from gpuc.core.clock import Clock
from gpuc.core.errors import ConfigError, ProviderAuthError, ProviderError, ProviderSchemaError
from gpuc.core.providers.answers import (
    GRAPHQL_ERROR_STATUSES,
    GRAPHQL_GONE_STATUSES,
    GRAPHQL_LIMIT_WORDS,
    MAX_MESSAGE,
    NOT_FOUND_TO_TERMINATE,
    RUNPOD_KEY_ENV,
    SELF_READ_QUERY,
    STOP_MUTATION,
    TERMINATE_MUTATION,
    VAST_INSTANCE_ID_RE,
    VAST_RELEASED,
    GraphQLError,
    RateLimited,
    _require,
    graphql_data,
    vast_not_found,
)
from gpuc.core.providers.base import SelfDestroyer
from gpuc.core.providers.endpoints import RUNPOD_GRAPHQL_ENV, RUNPOD_GRAPHQL_URL, VAST_URL, VAST_URL_ENV, vast_host
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.podhttp import SELF_DEADLINE_S, PodKeyHttp, Reply, Send


# -- the decision, once for every provider -----------------------------------------------------------
class TerminateRefused(Exception):
    """The provider refused this pod's terminate with the pod's own key; `reason` in its words (redacted)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SelfWords:
    """A provider's words for what the decision says: "podTerminate was refused (...); stopped pod ..."."""

    provider: str  # "runpod"
    noun: str  # "pod"
    call: str  # "podTerminate": what was refused
    short: str  # "terminate": "terminate and stop both found nothing"
    done: str  # "terminated"
    not_found: str  # "answered 'pod not found to terminate'"
    disk: str  # "volume": what a stopped pod still bills for
    kept: str  # "its volume (/workspace) stays": what a stop keeps


@dataclass(frozen=True)
class PodKey:
    """Where the platform puts this pod's id and its pod-scoped key in the container's environment."""

    id_env: str  # "RUNPOD_POD_ID"
    key_env: str  # "RUNPOD_API_KEY"
    role: str  # "the pod-scoped key": what the key is called in an error
    hint: str  # how to get them to the agent when they are missing


D = TypeVar("D", bound="ScopedSelfDestroyer")


class ScopedSelfDestroyer(SelfDestroyer):
    """Destroy this pod with the key the platform scopes to it, never an account key: the decision, once.

    Two answers are not proof the pod is gone:
    - a refusal: stop it instead and say so;
    - "not found": a pod key may hear it because it is refused, not because the pod is gone. The pod reads
      itself: gone, and it is done; still there, or unreadable, and it stops itself and says so. Only a stop
      that also finds nothing, after a read that could not tell, means the pod is gone.
    A stopped pod still bills its disk: the answer is a StoppedInstead, which the ending turns into a
    notification, and the reaper destroys the pod with the account key (F9). Any other failure raises (a
    rate limit included: "later" is no refusal): the ending reports destroy_failed and the reaper's silence
    limit does the rest.

    A provider implements only its calls: terminate, stop, read_self, and which stop error means "not found".
    """

    words: ClassVar[SelfWords]
    key: ClassVar[PodKey]
    http: PodKeyHttp | None = None

    @classmethod
    def from_environ(
        cls: type[D],
        environ: Mapping[str, str],
        *,
        send: Send | None = None,
        clock: Clock | None = None,
        deadline_s: float = SELF_DEADLINE_S,
    ) -> D:
        """This pod's destroyer, from the env the provider injects into the container: never the account key,
        which must not live on a pod."""
        own_id, key = environ.get(cls.key.id_env, ""), environ.get(cls.key.key_env, "")
        if not own_id or not key:
            raise ConfigError(f"{cls.key.id_env} and {cls.key.key_env} are not both set", hint=cls.key.hint)
        http = PodKeyHttp(
            cls.words.provider,
            key,
            f"{cls.key.key_env} ({cls.key.role})",
            deadline_s=deadline_s,
            clock=clock,
            send=send,
        )
        return cls.with_client(own_id, http, environ)

    @classmethod
    @abstractmethod
    def with_client(cls: type[D], own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> D:
        """This pod's destroyer over `http`, the client that holds its pod key."""

    @property
    @abstractmethod
    def own_id(self) -> str: ...

    @abstractmethod
    def terminate(self) -> bool:
        """Terminate this pod: True when the provider did, False when it answered "not found". Raises
        TerminateRefused for a refusal; anything else raised is not an answer, and propagates."""

    @abstractmethod
    def stop(self) -> None:
        """Stop this pod with its own key (GPU billing ends, the disk stays)."""

    @abstractmethod
    def stop_found_nothing(self, exc: ProviderError) -> bool:
        """Whether the stop's error says the provider has no such pod."""

    @abstractmethod
    def read_self(self) -> bool | None:
        """Whether this pod still exists, read with its own key; None when the read itself fails."""

    def destroy_self(self) -> str:
        if self.http is not None:
            self.http.begin()
        try:
            terminated = self.terminate()
        except TerminateRefused as exc:
            return self._stop_refused(exc.reason)
        return f"{self.words.done} {self._me}" if terminated else self._after_not_found()

    def stop_self(self) -> str:
        """The kept window is over (F16): stop, never destroy; the disk with results/ stays."""
        if self.http is not None:
            self.http.begin()
        self.stop()
        return f"stopped {self._me}: GPU billing ended, {self.words.kept}"

    @property
    def _me(self) -> str:
        return f"{self.words.noun} {self.own_id}"

    @property
    def _http(self) -> PodKeyHttp:
        if self.http is None:
            raise ConfigError(f"{self.words.provider}: no client for the pod key", hint="from_environ makes one")
        return self.http

    def _stop_refused(self, refusal: str) -> str:
        w = self.words
        self.stop()
        return StoppedInstead(
            f"{w.call} was refused ({refusal}); stopped {self._me} instead: its {w.disk} still bills until the"
            " reaper destroys it"
        )

    def _after_not_found(self) -> str:
        w = self.words
        still = self.read_self()
        if still is False:
            return f"{self._me} was already gone"
        try:
            self.stop()
        except ProviderError as exc:
            if still is None and self.stop_found_nothing(exc):
                return f"{self._me} was already gone ({w.short} and stop both found nothing)"
            raise
        # The stop worked, so the pod was there: "not found" was a refusal in disguise.
        return StoppedInstead(
            f"{w.call} {w.not_found} but {self._me} is still there; stopped {self._me} instead: its {w.disk}"
            " still bills until the reaper destroys it"
        )


# -- RunPod: GraphQL with the pod key ---------------------------------------------------------------------
class RunPodSelfDestroyer(ScopedSelfDestroyer):
    """This pod's end with the pod-scoped key RunPod injects (RUNPOD_API_KEY), never the account key: the
    calls only, the decision is ScopedSelfDestroyer's.

    GraphQL: the reference does not say the pod key may use REST v2, and the one field report saw REST answer
    it 403 while GraphQL `pod(...)` and `podTerminate` served it. Whether it may podTerminate is UNCONFIRMED
    (self-stop is documented); it may hear "pod not found to terminate" while the pod lives on. When GraphQL
    is retired the self-destroy fails loudly (GraphQLRetired) and the watchdog's reaper, which holds the
    account key and uses v2, is the one that ends the pod."""

    words = SelfWords(
        "runpod", noun="pod", call="podTerminate", short="terminate", done="terminated",
        not_found=f"answered {NOT_FOUND_TO_TERMINATE!r}", disk="volume", kept="its volume (/workspace) stays",
    )  # fmt: skip
    key = PodKey("RUNPOD_POD_ID", RUNPOD_KEY_ENV, role="the pod-scoped key", hint="RunPod injects them into the"
                 " container's main process; pass them on to the agent's env")  # fmt: skip

    def __init__(self, pod_id: str, http: PodKeyHttp, *, graphql_url: str = RUNPOD_GRAPHQL_URL) -> None:
        self.pod_id = pod_id
        self.http = http
        self.graphql_url = graphql_url

    @classmethod
    def with_client(cls, own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> RunPodSelfDestroyer:
        return cls(own_id, http, graphql_url=environ.get(RUNPOD_GRAPHQL_ENV) or RUNPOD_GRAPHQL_URL)

    @property
    def own_id(self) -> str:
        return self.pod_id

    def graphql(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        http = self._http
        reply = http.request(
            "POST",
            self.graphql_url,
            json_body={"query": query, "variables": dict(variables)},
            accept=GRAPHQL_ERROR_STATUSES,
            limited=_graphql_limited,
            not_json_ok=GRAPHQL_GONE_STATUSES,
        )
        return graphql_data(reply.status, reply.body, reply.request_id, http.scrub, not_json=reply.not_json)

    def terminate(self) -> bool:
        try:
            self.graphql(TERMINATE_MUTATION, {"podId": self.pod_id})
        except GraphQLError as exc:
            if exc.pod_not_found:
                return False
            raise TerminateRefused(exc.message) from None
        except ProviderAuthError as exc:
            raise TerminateRefused(exc.message) from None
        return True

    def stop(self) -> None:
        """podStop with the pod key: the one self-control RunPod documents (R7). The volume (/workspace,
        where results/ is) stays; the container disk is wiped."""
        self.graphql(STOP_MUTATION, {"podId": self.pod_id})

    def stop_found_nothing(self, exc: ProviderError) -> bool:
        return isinstance(exc, GraphQLError) and "not found" in exc.message.lower()

    def read_self(self) -> bool | None:
        """Read this pod with its own key: True/False, or None when the read itself fails."""
        try:
            found = self.graphql(SELF_READ_QUERY, {"podId": self.pod_id}).get("pod")
        except ProviderError:
            return None
        if found is None:
            return False  # null for a deleted id (UNCONFIRMED; the reaper re-checks with the account key)
        if not (isinstance(found, dict) and isinstance(found.get("id"), str)):
            raise ProviderSchemaError("unexpected pod: id: a string is expected", provider="runpod")
        status = found.get("desiredStatus")
        if status is not None and not isinstance(status, str):
            raise ProviderSchemaError("unexpected pod: desiredStatus: a string is expected", provider="runpod")
        return status != "TERMINATED"


def _graphql_limited(reply: Reply) -> bool:
    if not isinstance(reply.body, dict) or not isinstance(reply.body.get("errors"), list):
        return False
    for error in reply.body["errors"]:
        if not isinstance(error, dict):
            continue
        code = str((error.get("extensions") or {}).get("code", "")) if isinstance(error.get("extensions"), dict) else ""
        if GRAPHQL_LIMIT_WORDS.search(str(error.get("message", ""))) or GRAPHQL_LIMIT_WORDS.search(code):
            return True
    return False


# -- Vast: the instance key ---------------------------------------------------------------------------------
class VastSelfDestroyer(ScopedSelfDestroyer):
    """This instance's end with CONTAINER_API_KEY, the key Vast scopes to it (documented to start, stop or
    destroy only this instance): the calls only, the decision is ScopedSelfDestroyer's."""

    words = SelfWords(
        "vast", noun="instance", call="destroy", short="destroy", done="destroyed",
        not_found="answered not found", disk="disk", kept="its disk stays",
    )  # fmt: skip
    key = PodKey("CONTAINER_ID", "CONTAINER_API_KEY", role="the instance key", hint="Vast injects them into the"
                 " container; ssh sessions see them only once exported")  # fmt: skip

    def __init__(self, instance_id: str, http: PodKeyHttp, *, url: str = VAST_URL) -> None:
        if not VAST_INSTANCE_ID_RE.match(instance_id):
            raise ConfigError(f"CONTAINER_ID {instance_id[:20]!r} is not a Vast instance id", hint=self.key.hint)
        self.instance_id = instance_id
        self.http = http
        self.url = f"{vast_host(url)}/api/v0/instances/{instance_id}/"

    @classmethod
    def with_client(cls, own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> VastSelfDestroyer:
        return cls(own_id, http, url=environ.get(VAST_URL_ENV) or VAST_URL)

    @property
    def own_id(self) -> str:
        return self.instance_id

    def terminate(self) -> bool:
        try:
            reply = self._http.request("DELETE", self.url, json_body={}, accept=(404,))
        except (ProviderSchemaError, RateLimited):
            raise  # an answer gpuc cannot read, or "later": no refusal to act on
        except ProviderError as exc:
            raise TerminateRefused(exc.message) from None
        if reply.status == 404:
            _require(vast_not_found(reply.body), "vast", "404 without Vast's not-found body")
            return False
        if isinstance(reply.body, dict) and reply.body.get("success") is True:
            return True
        if vast_not_found(reply.body):
            return False
        # success:false with HTTP 200 is a failure, never a destroy (vast-cli's destroy_instance bug)
        raise TerminateRefused(self._said(reply) or "success: false")

    def stop(self) -> None:
        """PUT state stopped with the instance key (documented to start, stop or destroy only this instance,
        V7). The instance disk stays; exactly what a stop keeps of it is UNCONFIRMED (README)."""
        reply = self._http.request("PUT", self.url, json_body={"state": "stopped"})
        if not (isinstance(reply.body, dict) and reply.body.get("success") is True):
            said = self._said(reply) or "success: false"
            raise ProviderError(
                f"stopped of instance {self.instance_id} refused: {said}",
                provider="vast",
                status=reply.status,
                request_id=reply.request_id,
            )

    def _said(self, reply: Reply) -> str:
        body = reply.body if isinstance(reply.body, dict) else {}
        return self._http.scrub(str(body.get("msg") or body.get("error") or ""))[:MAX_MESSAGE]

    def stop_found_nothing(self, exc: ProviderError) -> bool:
        return exc.status == 404

    def read_self(self) -> bool | None:
        """Read this instance with its own key: True/False, or None when the read itself fails."""
        try:
            reply = self._http.request("GET", self.url, params={"owner": "me"})
        except ProviderError:
            return None
        body = reply.body
        if not (isinstance(body, dict) and "instances" in body):
            return None
        if body["instances"] is None:
            return False  # Vast's positive "not found or no longer exists"
        if not isinstance(body["instances"], dict):
            return None
        return body["instances"].get("cur_state") != VAST_RELEASED
