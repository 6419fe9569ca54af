from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuc.client.money.commands import pick as pick_command
from gpuc.client.money.picker import (
    MODELS,
    PRESETS,
    known_names,
    model_key,
    parse_model,
    pick,
    price_quotes,
    split_counts,
)
from gpuc.core.catalog import CATALOG, table_price
from gpuc.core.errors import ConfigError


def offline(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(pick_command, ["--offline", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("name", "kv_bytes"),
    [
        ("llama-2-7b", 2 * 32 * 32 * 128 * 2),  # full multi-head attention: 524 KB
        ("llama-3-8b", 2 * 32 * 8 * 128 * 2),  # grouped-query, 8 KV heads: 131 KB
        ("llama-3-70b", 2 * 80 * 8 * 128 * 2),
        ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),
        ("gemma-2-9b", 2 * 42 * 8 * 256 * 2),
        ("phi-3-mini", 2 * 32 * 32 * 96 * 2),
        ("tinyllama-1.1b", 2 * 22 * 4 * 64 * 2),
    ],
)
def test_it_computes_kv_per_token_from_the_architecture(name: str, kv_bytes: int) -> None:
    model = parse_model(name)
    assert model.kv_bytes_per_token == kv_bytes
    assert not model.kv_estimated
    assert model.architecture is not None and "layers" in model.architecture


def test_the_table_holds_every_model_the_issue_names() -> None:
    names = set(known_names())
    wanted = [
        *("llama-2-7b", "llama-2-13b", "llama-3-8b", "llama-3.1-8b", "llama-3-70b", "llama-3.1-70b"),
        *("mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b"),
        *("gemma-2-9b", "phi-3-mini", "tinyllama-1.1b", "7b", "1.1b"),
    ]
    assert set(wanted) <= names
    for known in MODELS:
        assert known.kv_heads <= known.attention_heads and known.attention_heads % known.kv_heads == 0


def test_the_seeds_presets_keep_their_figures() -> None:
    assert (PRESETS["7b"].fp16_weights_gb, PRESETS["7b"].kv_bytes_per_token) == (13.5, 512e3)
    assert (PRESETS["1.1b"].fp16_weights_gb, PRESETS["1.1b"].kv_bytes_per_token) == (2.2, 22.5e3)
    assert parse_model("7b") is PRESETS["7b"]
    # The TinyLlama row and the 1.1b preset agree: 22,528 bytes is the seeds' 22.5 KB.
    assert parse_model("tinyllama-1.1b").kv_bytes_per_token == pytest.approx(22.5e3, rel=0.01)


def test_weights_are_two_bytes_a_parameter() -> None:
    assert parse_model("llama-3-70b").fp16_weights_gb == pytest.approx(141, abs=0.5)
    assert parse_model("llama-3-8b").weights_gb("int4") == pytest.approx(8.03 / 2)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("meta-llama/Meta-Llama-3-8B", "Llama-3-8B"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3-8B"),
        ("LLAMA_3.1_8B", "Llama-3-8B"),
        ("llama3.1:8b", "Llama-3-8B"),
        ("meta-llama/Llama-3.1-70B", "Llama-3-70B"),
        ("meta-llama/Llama-2-7b-chat-hf", "Llama-2-7B"),
        ("Llama-2-13B", "Llama-2-13B"),
        ("mistralai/Mistral-7B-Instruct-v0.2", "Mistral-7B"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "Mixtral-8x7B"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("qwen2_5_72b", "Qwen2.5-72B"),
        ("google/gemma-2-9b-it", "Gemma-2-9B"),
        ("microsoft/Phi-3-mini-4k-instruct", "Phi-3-mini"),
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "TinyLlama-1.1B"),
        ("  Mistral-7B  ", "Mistral-7B"),
    ],
)
def test_it_matches_names_forgivingly(text: str, canonical: str) -> None:
    assert parse_model(text).name == canonical


@pytest.mark.parametrize("text", ["Qwen2-57B", "qwen25-7b", "llama-3-9b", "mistral", "gpt-4"])
def test_it_never_guesses_a_different_model(text: str) -> None:
    # Deleting separators would read "Qwen2-57B" as qwen2.5-7b: a 57B model sized as a 7B one.
    with pytest.raises(ConfigError):
        parse_model(text)


def test_separators_stay_token_boundaries() -> None:
    assert model_key("Qwen2-57B") != model_key("qwen2.5-7b")
    assert model_key("meta-llama/Meta-Llama-3-8B") == model_key("llama-3-8b")


def test_an_unknown_name_says_which_names_are_known() -> None:
    with pytest.raises(ConfigError) as err:
        parse_model("lama-3-8b")
    hint = err.value.hint or ""
    assert "did you mean llama-3-8b?" in hint
    for name in ("mixtral-8x7b", "tinyllama-1.1b", "7b", "13b"):
        assert name in hint


def test_kv_kb_still_overrides_a_known_model() -> None:
    model = parse_model("llama-3-8b", kv_kb=64)
    assert model.kv_bytes_per_token == 64e3 and model.fp16_weights_gb == pytest.approx(16.06)


def test_a_70b_in_fp16_gets_a_multi_gpu_suggestion_with_the_price_of_all_cards() -> None:
    result = pick(parse_model("llama-3-70b"), "fp16", 2048, 1, price_quotes("runpod"))
    assert result.top is None
    options = {o.gpu: o for o in result.multi_gpu}
    h100 = options["H100 80GB SXM"]
    assert h100.count == 2
    assert h100.price_per_hour == pytest.approx(2 * (table_price("H100 80GB SXM", "runpod") or 0))
    assert h100.memory_gb == 160 and h100.needed_gb <= h100.memory_gb
    # 24 GB cards: 7 would hold it, but 7 does not divide 64 heads; 8 does.
    assert options["RTX 4090"].count == 8
    assert "T4" not in options  # 8 x 16 GB = 128 GB: less than the weights
    assert [o.count for o in result.multi_gpu] == sorted(o.count for o in result.multi_gpu)
    assert "gpuc up --gpus 2" in result.why and "2 x " in result.why
    assert result.why.startswith("no card in the catalog fits Llama-3-70B fp16")


def test_every_card_pays_its_own_overhead() -> None:
    result = pick(parse_model("llama-3-70b"), "fp16", 2048, 1, price_quotes("runpod"))
    for option in result.multi_gpu:
        kv_gb = 327_680 * 2048 / 1e9
        assert option.needed_gb == pytest.approx(141.2 + kv_gb + option.count * 1.5)


def test_a_model_that_fits_one_card_gets_no_split() -> None:
    assert pick(parse_model("llama-3-8b"), "fp16", 2048, 1, price_quotes("runpod")).multi_gpu == []


def test_split_counts_divide_the_attention_heads() -> None:
    assert split_counts(parse_model("llama-3-70b")) == [2, 4, 8]
    assert split_counts(parse_model("llama-2-13b")) == [2, 4, 5, 8]
    assert split_counts(parse_model("300b")) == [2, 4, 8]  # heads unknown: powers of two


def test_no_count_up_to_8_is_said_plainly() -> None:
    result = pick(parse_model("2t"), "fp16", 2048, 1, price_quotes("runpod"))
    assert result.multi_gpu == []
    assert "no count up to 8 of one card holds it" in result.why


def test_a_bf16_split_leaves_out_cards_without_bf16() -> None:
    result = pick(parse_model("llama-3-70b"), "bf16", 2048, 1, price_quotes("runpod"))
    assert "T4" not in {o.gpu for o in result.multi_gpu}


def test_a_mixture_of_experts_decodes_at_its_active_weights() -> None:
    result = pick(parse_model("mixtral-8x7b"), "fp16", 2048, 1, price_quotes("runpod"))
    h100 = {o.gpu: o for o in result.multi_gpu}["H100 80GB SXM"]
    bandwidth = {s.key: s.bandwidth_gbps for s in CATALOG}["H100 80GB SXM"]
    assert h100.decode_tok_s == pytest.approx(2 * bandwidth / (12.9e9 * 2 / 1e9))
    assert result.weights_gb == pytest.approx(93.4)  # memory still holds every expert


def test_the_cli_shows_the_arithmetic_for_a_hub_id() -> None:
    code, output = offline("--model", "meta-llama/Meta-Llama-3-8B")
    assert code == 0, output
    assert "Llama-3-8B fp16" in output and "131.1 KB/token" in output
    assert "2 x 32 layers x 8 KV heads x 128 head dim x 2 bytes" in output


def test_the_cli_prints_the_split_table_for_70b() -> None:
    code, output = offline("--model", "llama-3.1-70b")
    assert code == 0, output
    assert "2 x H100 80GB SXM" in output and "6.58" in output
    assert "gpuc up NAME --gpu 'A100 80GB PCIe' --gpus 2" in output


def test_the_cli_json_carries_the_split_only_when_needed() -> None:
    code, output = offline("--model", "llama-3-70b", "--json")
    assert code == 0, output
    body = json.loads(output)
    assert {"gpu": "H100 80GB SXM", "count": 2}.items() <= {
        k: v for o in body["multi_gpu"] for k, v in o.items() if o["gpu"] == "H100 80GB SXM"
    }.items()
    assert body["architecture"].startswith("2 x 80 layers")
    small = json.loads(offline("--model", "1.1b", "--json")[1])
    assert "multi_gpu" not in small and "architecture" not in small


def test_the_cli_help_lists_every_known_name() -> None:
    output = CliRunner().invoke(pick_command, ["--help"]).output
    for name in known_names():
        assert name in output


def test_the_cli_reports_an_unknown_model_with_the_known_ones() -> None:
    result = CliRunner().invoke(pick_command, ["--offline", "--model", "llama-9"])
    assert isinstance(result.exception, ConfigError)
    assert "qwen2.5-72b" in (result.exception.hint or "")
