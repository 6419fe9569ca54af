from __future__ import annotations

import pytest

from gpuc.core.catalog import CATALOG, PRICE_TABLE, find_gpu, gpu_matches, name_tokens, table_price

# Every GPU type id RunPod listed in a real gpuTypes answer (June 2025), with the catalog card it is.
RUNPOD_REAL_IDS = {
    "NVIDIA A100 80GB PCIe": "A100 80GB PCIe",
    "NVIDIA A100-SXM4-80GB": "A100 80GB SXM",
    "NVIDIA GeForce RTX 3090": "RTX 3090",
    "NVIDIA GeForce RTX 4090": "RTX 4090",
    "NVIDIA H100 80GB HBM3": "H100 80GB SXM",
    "NVIDIA L4": "L4",
    # not in the catalog: a near name must not borrow another card's bandwidth
    "NVIDIA GeForce RTX 3090 Ti": None,
    "NVIDIA H100 NVL": None,
    "NVIDIA H100 PCIe": None,
    "NVIDIA L40": None,
    "NVIDIA L40S": None,
    "NVIDIA A40": None,
    "NVIDIA A30": None,
    "NVIDIA GeForce RTX 4080": None,
    "NVIDIA GeForce RTX 5090": None,
    "NVIDIA H200": None,
    "NVIDIA RTX 4000 Ada Generation": None,
    "Tesla V100-SXM2-16GB": None,
    "AMD Instinct MI300X OAM": None,
    "unknown": None,
}


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "RTX 4090", "4090", "rtx4090", "RTX_4090", "geforce 4090"])
def test_it_reads_every_spelling_of_a_4090(name: str) -> None:
    spec = find_gpu(name)
    assert spec is not None and spec.key == "RTX 4090"


@pytest.mark.parametrize(("name", "key"), sorted(RUNPOD_REAL_IDS.items()))
def test_it_maps_runpods_real_ids_and_nothing_near_them(name: str, key: str | None) -> None:
    spec = find_gpu(name)
    assert (spec.key if spec else None) == key


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Tesla T4", "T4"),
        ("T4", "T4"),
        ("A100 PCIE", "A100 80GB PCIe"),
        ("A100 SXM4", "A100 80GB SXM"),
        ("H100 SXM", "H100 80GB SXM"),
        ("H100", None),  # SXM or PCIe: ambiguous, and their bandwidths differ by 40 %
        ("A100", None),
        ("A100 40GB PCIe", None),
        ("RTX 4090 D", None),
        ("", None),
        (None, None),
    ],
)
def test_it_refuses_to_guess_between_variants(name: str | None, key: str | None) -> None:
    spec = find_gpu(name)
    assert (spec.key if spec else None) == key


def test_each_card_finds_itself_under_its_vendor_names() -> None:
    for spec in CATALOG:
        for name in (spec.key, spec.runpod_id, spec.vast_name):
            assert find_gpu(name) is spec, name


def test_it_matches_loose_queries_to_offer_names() -> None:
    assert gpu_matches("h100", "H100 SXM")
    assert gpu_matches("h100", "H100 PCIe")
    assert gpu_matches("4090", "NVIDIA GeForce RTX 4090")
    assert not gpu_matches("4090", "RTX 3090")
    assert not gpu_matches("3090", "RTX 3090 Ti")
    assert not gpu_matches("", "RTX 3090")
    assert name_tokens("NVIDIA A100-SXM4-80GB") == {"a100", "sxm4"}


def test_ridge_points_are_the_seeds() -> None:
    ridge = {s.key: round(s.ridge_flop_per_byte) for s in CATALOG}
    assert ridge == {
        "T4": 203,
        "RTX 3090": 76,
        "RTX 4090": 164,
        "L4": 403,
        "A100 80GB PCIe": 161,
        "A100 80GB SXM": 153,
        "H100 80GB SXM": 295,
    }


def test_only_the_t4_lacks_bf16() -> None:
    assert [s.key for s in CATALOG if not s.bf16] == ["T4"]


def test_the_table_prices_the_seeds_quoted() -> None:
    assert set(PRICE_TABLE) == {s.key for s in CATALOG}
    assert table_price("RTX 4090", "runpod") == 0.74
    assert PRICE_TABLE["RTX 4090"].runpod_community == 0.34
    assert table_price("RTX 4090", "vast") == 0.37  # the median, not one host's minimum
    assert table_price("T4", "runpod") is None
    assert table_price("nonsense", "runpod") is None
