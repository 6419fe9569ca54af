from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fakes.money import FakeProvider, unreachable

from gpuc.client.context import Ctx
from gpuc.client.money.commands import pick as pick_command
from gpuc.client.money.picker import (
    PRESETS,
    PickResult,
    PriceQuote,
    estimated_kv_bytes_per_token,
    live_quotes,
    parse_model,
    pick,
    price_quotes,
)
from gpuc.core.errors import ConfigError
from gpuc.core.models import Offer
from gpuc.core.providers.base import Provider
from gpuc.core.settings import Settings

SEVEN_B = PRESETS["7b"]
TINY = PRESETS["1.1b"]


def by_gpu(result: PickResult) -> dict[str, object]:
    return {r.gpu: r for r in result.rows}


def run(
    model: str = "7b", dtype: str = "fp16", seq: int = 2048, batch: int = 1, provider: str = "runpod"
) -> PickResult:
    return pick(parse_model(model), dtype, seq, batch, price_quotes(provider))


def test_decode_upper_bounds_are_the_seeds_oracles() -> None:
    rows = {r.gpu: r for r in run().rows}
    assert rows["RTX 4090"].decode_tok_s == pytest.approx(75, abs=1)
    assert rows["L4"].decode_tok_s == pytest.approx(22, abs=1)
    assert rows["A100 80GB SXM"].decode_tok_s == pytest.approx(150, abs=2)
    assert rows["RTX 3090"].decode_tok_s == pytest.approx(69, abs=1)
    assert rows["H100 80GB SXM"].decode_tok_s == pytest.approx(248, abs=1)


def test_a_24_gb_card_holds_about_18000_tokens_of_7b_kv() -> None:
    rows = {r.gpu: r for r in run().rows}
    for card in ("RTX 3090", "RTX 4090", "L4"):
        assert rows[card].kv_capacity_tokens == pytest.approx(18_000, rel=0.05)
        assert rows[card].max_batch_at_seq == 8  # "batch 8 x 2048, barely"
    assert rows["A100 80GB SXM"].kv_capacity_tokens == pytest.approx(130_000, rel=0.05)


def test_tinyllama_kv_capacity_and_speed_match_the_seeds() -> None:
    rows = {r.gpu: r for r in run("1.1b").rows}
    assert rows["T4"].kv_capacity_tokens == pytest.approx(550_000, rel=0.02)
    assert rows["RTX 4090"].kv_capacity_tokens == pytest.approx(900_000, rel=0.02)
    assert rows["RTX 4090"].decode_tok_s == pytest.approx(458, abs=1)
    assert rows["T4"].decode_tok_s == pytest.approx(145, abs=1)


def test_batch_8_fits_a_24_gb_card_and_batch_16_does_not() -> None:
    assert {r.gpu: r.fits for r in run(batch=8).rows}["RTX 4090"]
    sixteen = run(batch=16)
    assert not {r.gpu: r.fits for r in sixteen.rows}["RTX 4090"]
    assert sixteen.top in ("A100 80GB PCIe", "A100 80GB SXM", "H100 80GB SXM")


def test_7b_fp16_does_not_fit_a_t4() -> None:
    t4 = {r.gpu: r for r in run().rows}["T4"]
    assert not t4.fits
    assert t4.why_not is not None and "16 GB" in t4.why_not


def test_a_t4_has_no_bf16() -> None:
    t4 = {r.gpu: r for r in run("1.1b", "bf16").rows}["T4"]
    assert not t4.dtype_supported and not t4.fits
    assert t4.why_not == "T4 has no bf16 (use fp16)"
    assert {r.gpu: r for r in run("1.1b", "fp16").rows}["T4"].fits


def test_an_h100_buys_less_bandwidth_per_dollar_than_a_3090() -> None:
    for provider in ("runpod", "vast"):
        rows = {r.gpu: r for r in run(provider=provider).rows}
        h100, r3090 = rows["H100 80GB SXM"], rows["RTX 3090"]
        assert h100.price_per_hour and r3090.price_per_hour
        assert h100.bandwidth_gbps / h100.price_per_hour < r3090.bandwidth_gbps / r3090.price_per_hour
        assert h100.tok_s_per_dollar_hour is not None and r3090.tok_s_per_dollar_hour is not None
        assert h100.tok_s_per_dollar_hour < r3090.tok_s_per_dollar_hour


def test_dollars_per_million_tokens_follow_the_formula() -> None:
    # The seeds: A100 SXM at $1.39/h and ~150 tok/s -> $2.57; a 4090 at $0.34/h and ~75 tok/s -> $1.26.
    quotes = {
        "A100 80GB SXM": PriceQuote(price_per_hour=1.39, source="live runpod"),
        "RTX 4090": PriceQuote(price_per_hour=0.34, source="live runpod"),
    }
    rows = {r.gpu: r for r in pick(SEVEN_B, "fp16", 2048, 1, quotes).rows}
    assert rows["A100 80GB SXM"].usd_per_1m_tokens == pytest.approx(2.57, abs=0.03)
    assert rows["RTX 4090"].usd_per_1m_tokens == pytest.approx(1.26, abs=0.02)
    row = rows["RTX 4090"]
    assert row.usd_per_1m_tokens == pytest.approx(0.34 * 1e6 / (row.decode_tok_s * 3600))
    assert row.tok_s_per_dollar_hour == pytest.approx(row.decode_tok_s / 0.34)


def test_it_ranks_fit_first_then_tokens_per_dollar_and_says_why() -> None:
    result = run()
    assert result.top == "RTX 3090"
    assert [r.rank for r in result.rows] == list(range(1, len(result.rows) + 1))
    fitting = [r for r in result.rows if r.fits]
    assert result.rows[: len(fitting)] == fitting
    values = [r.tok_s_per_dollar_hour or 0 for r in fitting]
    assert values == sorted(values, reverse=True)
    assert result.why.startswith("RTX 3090 wins: fits 7B fp16")
    assert "tok/s per $/h" in result.why and "fastest is H100 80GB SXM" in result.why


def test_it_says_so_when_nothing_fits() -> None:
    result = run(batch=64)
    assert result.top is None
    assert not any(r.fits for r in result.rows)
    assert result.why.startswith("no card in the catalog fits 7B fp16 at batch 64 x 2048")
    assert "int8/int4" in result.why


def test_quantised_weights_shrink_and_speed_up() -> None:
    int4 = {r.gpu: r for r in run(dtype="int4").rows}["RTX 4090"]
    assert int4.weights_gb == pytest.approx(13.5 / 4)
    assert int4.decode_tok_s == pytest.approx(1008 / (13.5 / 4))
    assert {r.gpu: r for r in run(dtype="int8").rows}["T4"].fits


@pytest.mark.parametrize(("text", "params"), [("13b", 13e9), ("350m", 350e6), ("6.7e9", 6.7e9), ("70B", 70e9)])
def test_it_reads_parameter_counts(text: str, params: float) -> None:
    model = parse_model(text)
    assert model.params == pytest.approx(params)
    assert model.fp16_weights_gb == pytest.approx(params * 2 / 1e9)
    assert model.kv_estimated


def test_the_kv_estimate_lands_near_the_known_7b_figure_and_can_be_overridden() -> None:
    assert estimated_kv_bytes_per_token(SEVEN_B.params) == pytest.approx(512e3, rel=0.1)
    assert parse_model("13b", kv_kb=800).kv_bytes_per_token == 800e3
    assert not parse_model("13b", kv_kb=800).kv_estimated
    assert parse_model("7b", kv_kb=128).kv_bytes_per_token == 128e3


@pytest.mark.parametrize("text", ["llama", "7q", "-3b", "0"])
def test_it_refuses_a_model_it_cannot_read(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_model(text)
    assert err.value.hint


def test_it_refuses_bad_sizes() -> None:
    with pytest.raises(ConfigError):
        pick(SEVEN_B, "fp8", 2048, 1, {})
    with pytest.raises(ConfigError):
        pick(SEVEN_B, "fp16", 0, 1, {})


def test_live_quotes_take_the_cheapest_per_gpu_hour_of_each_card() -> None:
    offers = [
        Offer(provider="vast", id="1", gpu="RTX 4090", price_per_hour=0.40),
        Offer(provider="vast", id="2", gpu="RTX 4090", price_per_hour=0.60, gpu_count=2),
        Offer(provider="vast", id="3", gpu="RTX 4090 D", price_per_hour=0.10),
        Offer(provider="vast", id="4", gpu="Mystery 9000", price_per_hour=0.01),
    ]
    quotes = live_quotes("vast", offers)
    assert set(quotes) == {"RTX 4090"}
    assert quotes["RTX 4090"].price_per_hour == pytest.approx(0.30)
    merged = price_quotes("vast", quotes)
    assert merged["RTX 4090"].live and merged["RTX 4090"].source == "live vast"
    assert merged["RTX 3090"].source == "table vast 2026-09"
    assert "T4" not in merged


def only(provider: FakeProvider) -> Ctx:
    """The command's Ctx, whose one provider is `provider` (asking for another fails the test)."""

    def get_provider(name: str, settings: Settings) -> Provider:
        assert name == provider.name
        return provider

    return Ctx(provider_factory=get_provider)


def test_the_cli_uses_live_prices_when_the_provider_answers() -> None:
    offers = [Offer(provider="runpod", id="NVIDIA GeForce RTX 4090", gpu="RTX 4090", price_per_hour=0.59)]
    fake = FakeProvider("runpod", offers=offers)
    result = CliRunner().invoke(pick_command, ["--json"], obj=only(fake))
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    rows = {r["gpu"]: r for r in body["rows"]}
    assert rows["RTX 4090"]["price_per_hour"] == 0.59 and rows["RTX 4090"]["price_source"] == "live runpod"
    assert rows["RTX 3090"]["price_source"] == "table runpod 2026-09"
    assert fake.asked == [(None, False)] and fake.closed


def test_the_cli_falls_back_to_the_dated_table_when_offers_are_unreachable() -> None:
    fake = FakeProvider("vast", fail=unreachable("vast"))
    result = CliRunner().invoke(pick_command, ["--provider", "vast", "--model", "1.1b", "--json"], obj=only(fake))
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert all(r["price_source"] in (None, "table vast 2026-09") for r in body["rows"])
    assert "live prices unavailable" in body["price_note"] and "table" in body["price_note"]
    expected = {
        "model",
        "params",
        "dtype",
        "seq",
        "batch",
        "needed_tokens",
        "weights_gb",
        "kv_bytes_per_token",
    }
    assert expected | {"kv_estimated", "rows", "top", "why", "price_note"} == set(body)


def test_the_cli_prints_a_table_with_the_reason() -> None:
    result = CliRunner().invoke(pick_command, ["--offline", "--batch", "8"])
    assert result.exit_code == 0, result.output
    assert "RTX 3090 wins" in result.output
    assert "table runpod 2026-09" in result.output
    assert "--json fields" in CliRunner().invoke(pick_command, ["--help"]).output


def test_the_cli_reports_a_bad_model_as_a_gpuc_error() -> None:
    result = CliRunner().invoke(pick_command, ["--offline", "--model", "huge"])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)


def test_the_model_is_taken_as_typed_or_by_option() -> None:
    """`gpuc pick 7b` is what a user types: the same pick as `--model 7b`; two different models are refused."""

    def run(*args: str) -> str:
        result = CliRunner().invoke(pick_command, [*args, "--offline", "--json"], obj=Ctx(Settings()))
        assert result.exit_code == 0, result.output
        return result.output

    assert run("llama-3-8b") == run("--model", "llama-3-8b") != run()
    refused = CliRunner().invoke(pick_command, ["7b", "--model", "13b", "--offline"], obj=Ctx(Settings()))
    assert refused.exit_code == 2 and "name one" in refused.output
