"""What the user types for a GPU ("h100", "A100", "4090", "RTX_3090") to what each provider calls it.

RunPod creates by `gpuTypeId` ("NVIDIA GeForce RTX 4090"); Vast searches `gpu_name` by equality ("RTX 4090",
"H100 SXM"). A name the catalog (core/catalog.py) pins to one card gets that card's spelling. Otherwise it is
matched (catalog.gpu_matches: every word typed must be in the name) against the provider's known names:
one match is used, several are an error that lists them (renting an H100 NVL when the user meant an SXM is
money spent on the wrong card), none passes the text through for the provider to judge, since a card newer
than these lists is still rentable.

The lists are the providers' own names: RunPod's `gpuTypes` (real answer, 2025-06, in
shared/reference/fixtures) and Vast's `gpu_name` values (server spellings, spaces not underscores).
"""

from __future__ import annotations

import shlex

from gpuc.core.catalog import find_gpu, gpu_matches
from gpuc.core.errors import ConfigError

# (gpuTypeId, displayName)
RUNPOD_NAMES: tuple[tuple[str, str], ...] = (
    ("AMD Instinct MI300X OAM", "MI300X"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("NVIDIA A30", "A30"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GeForce RTX 3070", "RTX 3070"),
    ("NVIDIA GeForce RTX 3080", "RTX 3080"),
    ("NVIDIA GeForce RTX 3080 Ti", "RTX 3080 Ti"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA GeForce RTX 3090 Ti", "RTX 3090 Ti"),
    ("NVIDIA GeForce RTX 4070 Ti", "RTX 4070 Ti"),
    ("NVIDIA GeForce RTX 4080", "RTX 4080"),
    ("NVIDIA GeForce RTX 4080 SUPER", "RTX 4080 SUPER"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 5080", "RTX 5080"),
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40", "L40"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA RTX 2000 Ada Generation", "RTX 2000 Ada"),
    ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada"),
    ("NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),
    ("NVIDIA RTX A2000", "RTX A2000"),
    ("NVIDIA RTX A4000", "RTX A4000"),
    ("NVIDIA RTX A4500", "RTX A4500"),
    ("NVIDIA RTX A5000", "RTX A5000"),
    ("NVIDIA RTX A6000", "RTX A6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000"),
    ("Tesla V100-FHHL-16GB", "V100 FHHL"),
    ("Tesla V100-PCIE-16GB", "Tesla V100"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
)

VAST_NAMES: tuple[str, ...] = (
    "A10", "A100 PCIE", "A100 SXM4", "A100X", "A40", "A800 PCIE", "B200", "GH200 SXM",
    "H100 NVL", "H100 PCIE", "H100 SXM", "H200", "H200 NVL", "L4", "L40", "L40S",
    "Q RTX 4000", "Q RTX 6000", "Q RTX 8000",
    "RTX 2060", "RTX 2070", "RTX 2080", "RTX 2080 Ti", "RTX 3060", "RTX 3060 Ti", "RTX 3070", "RTX 3070 Ti",
    "RTX 3080", "RTX 3080 Ti", "RTX 3090", "RTX 3090 Ti", "RTX 4060", "RTX 4060 Ti", "RTX 4070", "RTX 4070S",
    "RTX 4070S Ti", "RTX 4070 Ti", "RTX 4080", "RTX 4080S", "RTX 4090", "RTX 4090D", "RTX 4500Ada",
    "RTX 5000Ada", "RTX 5060", "RTX 5060 Ti", "RTX 5070", "RTX 5070 Ti", "RTX 5080", "RTX 5090",
    "RTX 5880Ada", "RTX 6000Ada", "RTX A2000", "RTX A4000", "RTX A4500", "RTX A5000", "RTX A6000",
    "RTX PRO 6000 S", "RTX PRO 6000 WS", "Tesla P100", "Tesla P4", "Tesla P40", "Tesla T4", "Tesla V100",
)  # fmt: skip

MAX_SEARCHES = 8  # Vast searches one spelling at a time: a query that names more cards is asked to narrow


def _norm(text: str) -> str:
    return " ".join(text.replace("_", " ").lower().split())


def known_names(provider: str) -> list[tuple[str, str]]:
    """(what the provider's API takes, what to show the user)."""
    if provider == "runpod":
        return list(RUNPOD_NAMES)
    if provider == "vast":
        return [(name, name) for name in VAST_NAMES]
    return []


def vendor_names(provider: str, query: str) -> list[tuple[str, str]]:
    """Every card of `provider` the user's `query` names, as (API spelling, display name)."""
    spec = find_gpu(query)
    vendor = (spec.runpod_id if provider == "runpod" else spec.vast_name) if spec else None
    known = known_names(provider)
    if vendor:
        shown = next((show for send, show in known if send == vendor), spec.key if spec else vendor)
        return [(vendor, shown)]
    wanted = _norm(query)
    exact = [(send, show) for send, show in known if wanted in (_norm(send), _norm(show))]
    if exact:
        return exact[:1]
    return [(send, show) for send, show in known if gpu_matches(query, send) or gpu_matches(query, show)]


def resolve(provider: str, query: str) -> str:
    """The one spelling `up` sends: an ambiguous name is refused with the choices, before any money."""
    if provider not in ("runpod", "vast"):
        return query
    found = vendor_names(provider, query)
    if len(found) == 1:
        return found[0][0]
    if not found:
        return query  # unknown here: the provider's own lookup decides, and says what it has
    shown = [show for _, show in found]
    raise ConfigError(
        f"--gpu {query!r} names {len(found)} cards at {provider}: {', '.join(shown)}",
        hint=f"name one, e.g. --gpu {shlex.quote(shown[0])}; "
        f"`gpuc offers --gpu {shlex.quote(query)}` shows their prices",
    )


def search_names(provider: str, query: str | None) -> list[str | None]:
    """The spellings `gpuc offers` asks `provider` for; [None] = every card."""
    if query is None:
        return [None]
    found = vendor_names(provider, query)
    if provider == "runpod" and len(found) != 1:
        # RunPod's offer list matches a fragment of the name itself ("h100" finds all three H100 types).
        return [query]
    if len(found) > MAX_SEARCHES:
        names = ", ".join(show for _, show in found[:MAX_SEARCHES])
        raise ConfigError(
            f"--gpu {query!r} names {len(found)} cards at {provider} ({names}, ...)",
            hint="name fewer, e.g. --gpu 4090 or --gpu 'H100 SXM'",
        )
    return [send for send, _ in found] or [query]
