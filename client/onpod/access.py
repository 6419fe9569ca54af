"""Reaching a pod: the one local-or-ssh decision and where its results go (where its files are, each way onto a
pod carries itself: PodAccess.paths).

Light on purpose (the ssh code loads only for a rented pod), so that what only needs to find its way onto
a pod (the upload, the log reads) does not load provisioning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuc.core.providers.local import LocalProvider

if TYPE_CHECKING:
    from gpuc.core.pod import Pod
    from gpuc.core.providers.base import PodAccess, Provider
    from gpuc.core.settings import Settings


def pod_access(provider: Provider, pod: Pod, settings: Settings) -> PodAccess:
    if isinstance(provider, LocalProvider):
        return provider.access(pod.id)
    from gpuc.client.onpod.ssh import ssh_access  # startup: ssh only for a rented pod

    return ssh_access(pod, settings)


def results_bucket_for(settings: Settings, *, local: bool) -> str | None:
    """Where a pod's results go (and `gpuc logs` finds them): the setting, or on the local provider a
    folder in the gpuc home."""
    return settings.results_bucket or (f"file://{settings.home / 'results'}" if local else None)
