"""One exception tree for gpuc.

GpucError                      user-facing: message + how to fix it, no traceback
├── ConfigError                settings, .env, keys, bad flags
├── NotFound                   unknown pod / run / offer
├── ProviderError              a provider API call failed (message + request id)
│   ├── ProviderAuthError      401/403: key wrong or missing
│   ├── ProviderUnavailable    5xx / 429 / timeout after retries: state UNKNOWN, never act on it
│   └── ProviderSchemaError    a body we do not recognise: never read as "empty account"
├── FunctionsError             the watchdog functions answered an error or were unreachable
├── SyncError                  results could not be copied out and verified
└── SafetyRefusal              gpuc refuses an action that could waste money or lose data
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
            x
            for x in (f"HTTP {status}" if status else None, f"request {request_id}" if request_id else None)
            if x
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


class FunctionsError(GpucError):
    def __init__(self, message: str, hint: str | None = None, status: int | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


class SyncError(GpucError):
    pass


class SafetyRefusal(GpucError):
    exit_code = 4
