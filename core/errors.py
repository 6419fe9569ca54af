"""One exception tree for gpuc. Every exception class in the package is drawn here (a test holds the
drawing to the code): the user-facing ones derive from GpucError and are printed as one line plus a fix,
never a traceback; the internal ones never leave the module that raises them.

GpucError                          user-facing: message + how to fix it, no traceback
├── ConfigError                    settings, .env, keys, bad flags
│   └── BidUnderFloor              (core.providers.vast_offers) a Vast bid under every offer's min_bid: refused first
├── NotFound                       unknown pod / run / offer
├── ProviderError                  a provider API call failed (message + request id)
│   ├── ProviderAuthError          401/403: key wrong or missing
│   ├── ProviderUnavailable        5xx / 429 / timeout after retries: state UNKNOWN, never act on it
│   │   ├── AmbiguousOutcome       (core.providers.http) a create may or may not have happened: look first
│   │   └── RateLimited            (core.providers.answers) "later" from the provider until the pod's deadline
│   │       └── GraphQLRateLimited (core.providers.answers) RunPod's GraphQL rate-limits the account: not read now
│   ├── PoolDenied                 (core.providers.runpod_refusals) a 403 on create: the account cannot use that pool
│   ├── ProviderSchemaError        a body we do not recognise: never read as "empty account"
│   ├── GraphQLError               (core.providers.answers) RunPod answered `errors`: understood, refused
│   └── GraphQLRetired             (core.providers.answers) RunPod's GraphQL is gone: upgrade gpuc
├── WatchdogError                  the watchdog answered an error or was unreachable
├── SyncError                      results could not be copied out and verified
├── SafetyRefusal                  gpuc refuses an action that could waste money or lose data
├── SshError                       (client.onpod.ssh) the pod could not be reached, or a transfer failed
├── ProvisionError                 (client.onpod.provision) getting gpuc onto a pod failed: `up` destroys it
│   └── PythonMissing              (client.onpod.provision) the image has no python3 >= 3.9: told before the job
├── PodVerificationFailed          (client.onpod.provision) not the machine we pay for: `up` destroys it
├── PodAnswerError                 (client.onpod.ask) the pod did not answer `ask`, or not readably
│   └── OlderPod                   (client.onpod.ask) the pod's gpuc predates `ask`: down it, up again
├── DeployError                    (functions.deploy) the AWS deployment failed
├── NoAnswerInTime                 (core.together) a read still running at its pass's deadline: unread
├── StreamTooLong                  (client.jobs.copyout) a pod sent more than its listing holds: cut off
├── BootError                      (instance_side.boot) a re-rented pod cannot boot from its kit: nothing started
├── BundleError                    (client.onpod.bundle) the pod's bundle cannot be built from this install
├── SshdUnavailable                (testkit.sshd) no ssh server to stand in for the pods' (tests, demo)
├── S3Unavailable                  (testkit.s3server) no S3 API on loopback for the demo's results
└── OutsideRun                     (client.jobs.places) a name in a gone pod's manifest outside its run: never read

internal, caught where they are raised:
HttpError                          (functions.handlers) becomes a 4xx answer with a stable message
DeliveryFailed                     (core.notify.channels) one failed notification attempt; retried or dropped
TransportError                     (instance_side.podhttp) the watchdog unreachable from the pod: queued
GpuReadError, _Degraded            (instance_side.gpu) a GPU reading failed: counted as busy, never idle
JobScanError                       (instance_side.jobtree) the job's process tree unreadable: counted as busy
ProcScanError                      (instance_side.procs) the process table unreadable: counted as busy
StepFailed                         (instance_side.bootstrap) one bootstrap step failed: reported, pod kept
SettingError                       (core.settingvalues) a setting of a wrong kind: load_settings makes it a ConfigError
Unreadable                         (core.podjson) a pod's answer or file is not what gpuc wrote: "unknown"
LinkRefused                        (functions.links) a phone link that does nothing: a clear 4xx page
ActionRefused                      (functions.actions.verbs) a tap the pod's state refuses: a clear 4xx page
WireError                          (core.wire) a wire document that is not what its schema says: where, never the value
TerminateRefused                   (core.providers.podkey) the pod key's terminate refused: the pod stops itself
SendFailed                         (core.providers.podhttp) one of the pod's exchanges got no answer: tried again
AskError                           (instance_side.ask) no answer to the laptop's question: its JSON `error`
Refused                            (functions.actions.wire) a phone channel's tap that did nothing: answered why
TransportFailure                   (core.transport) one HTTP exchange got no answer: its kind says if it was sent
LostClaim                          (functions.recovery.claim) the act's claim taken by another pass: it stops
NotVerified                        (instance_side.push) a push the destination does not list back: not recorded
ChangedWhileSent                   (instance_side.push) a file rewritten in place while sent: marked, sent again
_Moved                             (instance_side.push) a file changed since the push listed it: it waits
RestoreError                       (instance_side.resume) the last push could not be restored: the job not started
_Again                             (instance_side.grants) one S3 transfer that may pass: retried with a fresh URL
BucketError                        (functions.bucket) the results bucket did not answer the watchdog: a 503, retried
PartsMismatch                      (functions.bucket) an upload's parts are not what the pod sent: not completed (409)
Interrupted                        (client.pods.interrupts) a stop signal while `up` holds a pod: destroy, then exit
CleanupTimeout                     (client.pods.interrupts) the abort's destroy ran out of time: left to the watchdog
_Linked                            (client.jobs.places) a part of a copied path is a link: never followed
NotCleaned                         (instance_side.clean) `run --clean` removed nothing: the pod says why
"""

from __future__ import annotations


class GpucError(Exception):
    """An error the user can act on. `hint` says how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(GpucError):
    exit_code = 2


class NotFound(GpucError):
    exit_code = 3


class ProviderError(GpucError):
    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        request_id: str | None = None,
        hint: str | None = None,
    ) -> None:
        detail = message
        extras = [
            x for x in (f"HTTP {status}" if status else None, f"request {request_id}" if request_id else None) if x
        ]
        if extras:
            detail = f"{message} [{', '.join(extras)}]"
        super().__init__(f"{provider}: {detail}", hint)
        self.provider = provider
        self.status = status
        self.request_id = request_id


class ProviderAuthError(ProviderError):
    pass


class ProviderUnavailable(ProviderError):
    pass


class ProviderSchemaError(ProviderError):
    pass


class WatchdogError(GpucError):
    def __init__(self, message: str, hint: str | None = None, status: int | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


class SyncError(GpucError):
    pass


class SafetyRefusal(GpucError):
    exit_code = 4
