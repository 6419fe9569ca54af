"""`gpuc ledger reconcile` end to end: the ledger gpuc wrote, the bill each emulator computes from its pods'
real lives, over real HTTP on loopback. Every test runs against RunPod and against Vast."""

from __future__ import annotations

import re

import pytest
from fakes.reconcile import HOUR, MONTH, World, reconcile, reconcile_json

from gpuc.client import cli as cli_module


def test_a_ledger_that_matches_the_bill_has_no_flags(world: World) -> None:
    world.run_pod(2.0)
    world.run_pod(0.5)
    result = reconcile("--provider", world.name)
    assert result.exit_code == 0, result.output
    assert "2/2 row(s) match" in result.output and "the ledger matches the bill" in result.output
    code, body = reconcile_json("--provider", world.name)
    assert code == 0
    assert (body["rows_checked"], body["rows_ok"]) == (2, 2)
    assert body["mismatches"] == body["unmatched"] == body["disk_while_stopped"] == []
    # The bill came from the pods' lives (2.5 h of a ~0.35-0.75 $/h card), not from the ledger.
    assert body["billed_total_usd"] == pytest.approx(body["ledger_total_usd"], rel=0.03)
    assert body["billed_total_usd"] > 0.5


def test_a_pod_billed_more_than_10_percent_over_its_row_is_flagged(world: World) -> None:
    over = world.run_pod(2.0)
    near = world.run_pod(2.0)
    world.set_charge_factor(over, 1.25)
    world.set_charge_factor(near, 1.05)  # within the 10 % tolerance: not a finding
    code, body = reconcile_json("--provider", world.name)
    assert code == 1
    assert [(m["pod_id"], m["reason"]) for m in body["mismatches"]] == [(over, "amount")]
    assert body["mismatches"][0]["diff_pct"] == pytest.approx(25.0, abs=2.0)
    assert body["rows_ok"] == 1
    text = reconcile("--provider", world.name).output
    assert re.search(rf"mismatch \[amount\] {world.name} {over} tiny-llama: .*\(\+2[4-7] %\)", text), text


def test_a_planted_extra_charge_on_a_pod_is_flagged(world: World) -> None:
    pod = world.run_pod(1.0)
    world.plant_charge(pod, "gpu", 0.30, world.clock.now() - 1800, world.clock.now() - 900)
    code, body = reconcile_json("--provider", world.name)
    assert code == 1
    (mismatch,) = body["mismatches"]
    assert mismatch["pod_id"] == pod and mismatch["billed_usd"] > mismatch["ledger_usd"] + 0.29


def test_a_charge_with_no_ledger_row_is_flagged(world: World) -> None:
    world.run_pod(1.0)
    outside = world.run_pod(3.0, record=False)  # rented by gpuc, its row lost (or started by hand)
    world.plant_charge("77777777", "gpu", 1.5, world.clock.now() - HOUR, world.clock.now())
    code, body = reconcile_json("--provider", world.name)
    assert code == 1
    unmatched = {u["pod_id"]: u for u in body["unmatched"]}
    assert set(unmatched) == {outside, "77777777"}
    assert unmatched[outside]["amount_usd"] == pytest.approx(3 * world.last_price, rel=0.05)
    assert unmatched["77777777"]["amount_usd"] == pytest.approx(1.5)
    assert body["mismatches"] == []
    text = reconcile("--provider", world.name).output
    assert f"no ledger row: {world.name} {outside} billed $" in text


def test_disk_billed_while_a_pod_was_stopped_is_flagged(world: World) -> None:
    stopped_at = world.clock.now() + HOUR
    pod = world.run_pod(1.0, stopped_hours=5.0)
    code, body = reconcile_json("--provider", world.name)
    assert code == 1
    (disk,) = body["disk_while_stopped"]
    assert disk["pod_id"] == pod
    assert disk["first"] >= stopped_at - 1 and disk["last"] <= stopped_at + 5 * HOUR + 1
    # 5 h of a 30 GB volume: RunPod's stopped rate $0.20/GB/month, Vast's offer storage_cost $0.15.
    expected = {"runpod": 5 * 30 * 0.20 / 720, "vast": 5 * 30 * 0.15 / 720}[world.name]
    assert disk["amount_usd"] == pytest.approx(expected, rel=0.1)
    assert body["mismatches"] == [], "the hour of work itself matches its row"
    assert f"disk billed while stopped: {world.name} {pod} $0.0" in reconcile("--provider", world.name).output


def test_a_pod_destroyed_without_stopping_bills_no_stopped_disk(world: World) -> None:
    world.run_pod(3.0)
    code, body = reconcile_json("--provider", world.name)
    assert code == 0 and body["disk_while_stopped"] == []


def test_a_drifted_billing_body_is_a_clear_error_without_traceback(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    world.run_pod(1.0)
    world.emulator.faults.add("billing", "schema_drift")
    with pytest.raises(SystemExit) as done:
        cli_module.main(["ledger", "reconcile", "--month", MONTH, "--provider", world.name])
    assert done.value.code not in (0, None)
    err = capsys.readouterr()
    assert err.out == ""
    lines = err.err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"error: {world.name}: unexpected"), err.err
    assert "charges" in lines[0] or "billing" in lines[0]
    assert lines[1].startswith("  fix: ")
    assert "Traceback" not in err.err and world.key not in err.err


def test_the_json_report_has_the_documented_fields(world: World) -> None:
    world.run_pod(1.0)
    world.run_pod(1.0, record=False)
    mismatched = world.run_pod(1.0)
    world.set_charge_factor(mismatched, 2.0)
    world.run_pod(1.0, stopped_hours=2.0)
    code, body = reconcile_json("--provider", world.name)
    assert code == 1
    documented = documented_fields()
    assert set(body) == documented["top"]
    assert body["month"] == MONTH and body["providers"] == [world.name]
    for section in ("mismatches", "unmatched", "disk_while_stopped"):
        assert body[section], f"the scenario produces {section}"
        assert all(set(item) == documented[section] for item in body[section]), section


def documented_fields() -> dict[str, set[str]]:
    """The field names `gpuc ledger reconcile --help` promises, read from the help itself."""
    text = " ".join(reconcile("--help").output.split())
    fields = text.split("--json fields:", 1)[1].split("Options:", 1)[0]
    sections = dict(re.findall(r"(mismatches|unmatched|disk_while_stopped|below_ledger)\[\] \{([^}]*)\}", fields))
    top = re.sub(r"(mismatches|unmatched|disk_while_stopped|below_ledger)\[\] \{[^}]*\}( \([^)]*\))?", r"\1", fields)
    names = {n.strip().rstrip("[]") for n in top.rstrip(". ").split(",")}
    out = {"top": {n for n in names if n}}
    for name, inner in sections.items():
        out[name] = {part.split(":")[0].strip() for part in inner.split(",")}
    return out
