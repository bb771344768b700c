"""What a fixed n costs: C_n(R*)/C and R_n(C) from per-n curves, fitted ranges, curve.json field, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from verl_isocompute.commands.cli import main as cli_main
from verl_isocompute.scaling import CurveError, load_curve
from verl_isocompute.scaling.compare import (
    ABOVE,
    BEFORE,
    BELOW,
    FITTED,
    NO_BUDGET,
    NOT_REACHED,
    REACHED,
    compare_at,
    format_table,
)
from verl_isocompute.scaling.curve import REWARD_CURVES_KEY, Curve
from verl_isocompute.scaling.reward_curves import (
    CompareError,
    RewardCurve,
    compute_to_reach,
    reward_curves_field,
    reward_curves_from,
    select,
)
from verl_isocompute.scaling.saturating import SaturatingCurve
from verl_isocompute.scaling.synthetic import (
    curves_for,
    synthetic_sweep,
    write_run_logs,
)

# R(C) = C / (C + C_mid) (R0 = 0, A = 1, beta = 1): n=8 is n=16 delayed by a factor 4 in compute, so
# reaching n=16's reward at C takes n=8 exactly 4 C, and n=8's reward at C is C / (C + 4e4).
FAST = SaturatingCurve(R0=0.0, A=1.0, C_mid=1e4, beta=1.0)
SLOW = SaturatingCurve(R0=0.0, A=1.0, C_mid=4e4, beta=1.0)
RANGE = (1e3, 1e6)


def _pair(slow_range=RANGE):
    return [RewardCurve(8, 32, SLOW, slow_range), RewardCurve(16, 32, FAST, RANGE)]


def _row(table, c, n):
    rows = table[(table["C"] == c) & (table["n"] == n)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_compute_to_reach_inverts_the_curve():
    curve = SaturatingCurve(R0=0.45, A=0.68, C_mid=3e5, beta=0.8)
    c = np.geomspace(1e3, 1e8, 30)
    np.testing.assert_allclose(compute_to_reach(curve, curve(c)), c, rtol=1e-9)
    assert compute_to_reach(curve, 0.68) == np.inf and compute_to_reach(curve, 0.7) == np.inf
    assert compute_to_reach(curve, 0.45) == 0.0


def test_multiplier_and_reward_match_the_closed_form():
    budgets = [2e3, 1e4, 1e5, 2.5e5]
    table = compare_at(_pair(), budgets)
    for c in budgets:
        best, slow = _row(table, c, 16), _row(table, c, 8)
        assert best["n_best"] == 16 and best["R_star"] == pytest.approx(c / (c + 1e4))
        assert best["multiplier"] == 1.0 and best["reach_status"] == REACHED
        assert slow["reach_status"] == REACHED
        assert slow["multiplier"] == pytest.approx(4.0, rel=1e-9)
        assert slow["compute_needed"] == pytest.approx(4 * c, rel=1e-9)
        assert slow["reward"] == pytest.approx(c / (c + 4e4), rel=1e-12) and slow["reward_status"] == FITTED


def test_not_reached_within_the_fitted_range_gives_a_lower_bound_not_an_extrapolation():
    table = compare_at(_pair(), [5e5])  # n=8 would need 2e6, its runs end at 1e6
    slow = _row(table, 5e5, 8)
    assert slow["reach_status"] == NOT_REACHED
    assert np.isnan(slow["multiplier"]) and np.isnan(slow["compute_needed"])
    assert slow["multiplier_bound"] == pytest.approx(2.0)  # > C_max / C
    assert not slow["never_reached"]  # A = 1 > R*: the curve would get there, past the data


def test_asymptote_below_the_optimum_is_never_reached():
    low = SaturatingCurve(R0=0.0, A=0.5, C_mid=1e3, beta=1.0)
    curves = [RewardCurve(8, 32, low, RANGE), RewardCurve(16, 32, FAST, RANGE)]
    row = _row(compare_at(curves, [1e5]), 1e5, 8)  # R* = 0.909 > A = 0.5
    assert row["reach_status"] == NOT_REACHED and row["never_reached"]


def test_the_optimal_n_costs_1x_even_on_a_curve_already_at_its_asymptote():
    """On a curve that saturated before its range (a steep fit, as on the real CPU pilot), R_n(C) equals A
    to float precision: inverting it gives "never reached". The n that defines R* reaches it at C."""
    flat = SaturatingCurve(R0=0.42, A=0.7321428909496309, C_mid=63.6, beta=20.0)
    curves = [RewardCurve(2, 8, flat, (64.0, 512.0)), RewardCurve(4, 8, SLOW, (64.0, 512.0))]
    row = _row(compare_at(curves, [500.0]), 500.0, 2)
    assert row["optimal"] and row["R_star"] >= flat.A  # the case: the inverse of R* is inf
    assert row["reach_status"] == REACHED and row["multiplier"] == 1.0 and row["compute_needed"] == 500.0
    assert not row["never_reached"]


def test_budget_outside_a_curves_range_marks_its_reward_and_outside_all_ranges_compares_nothing():
    curves = [RewardCurve(8, 32, SLOW, (1e3, 1e5)), RewardCurve(16, 32, FAST, (5e3, 1e6))]
    table = compare_at(curves, [2e3, 5e5, 1e2, 1e7])
    assert _row(table, 2e3, 16)["reward_status"] == BELOW and np.isnan(_row(table, 2e3, 16)["reward"])
    assert _row(table, 2e3, 8)["n_best"] == 8  # only n=8 covers C = 2e3
    assert _row(table, 5e5, 8)["reward_status"] == ABOVE and np.isnan(_row(table, 5e5, 8)["reward"])
    for c in (1e2, 1e7):
        part = table[table["C"] == c]
        assert (part["reach_status"] == NO_BUDGET).all() and part["R_star"].isna().all()
        assert part["multiplier"].isna().all()


def test_reached_before_a_curves_range_is_an_upper_bound():
    # n=64 starts at C = 1e5 where it already beats what n=8 reaches at 1e4
    curves = [RewardCurve(8, 32, SLOW, (1e3, 1e6)), RewardCurve(64, 32, FAST, (1e5, 1e6))]
    row = _row(compare_at(curves, [1e4]), 1e4, 64)
    assert row["reach_status"] == BEFORE and row["multiplier_bound"] == pytest.approx(10.0)


def test_select_n_values():
    curves = _pair()
    assert [rc.n for rc in select(curves, "n=8")] == [8]
    assert [rc.n for rc in select(curves, "8,16")] == [8, 16]
    assert [rc.n for rc in select(curves, "all")] == [8, 16]
    with pytest.raises(CompareError, match="n=48: not a fitted n of the sweep; fitted n: 8, 16"):
        select(curves, "n=8,48")
    with pytest.raises(CompareError, match="n=N,N"):
        select(curves, "n=eight")


def _curve_with(field=None) -> Curve:
    extra = {} if field is None else {REWARD_CURVES_KEY: field}
    return Curve(L=6.0, k=5.0, log10_C0=5.8, b=2.7, c_range=(1e3, 1e6), n_grid=(8, 16), extra=extra)


def test_reward_curves_round_trip_through_the_curve_file(tmp_path):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(_curve_with(reward_curves_field(_pair())).to_dict()))
    loaded = reward_curves_from(load_curve(path), str(path))
    assert loaded == _pair()


def test_preset_says_what_it_can_and_cannot_compare():
    with pytest.raises(CompareError) as info:
        reward_curves_from(load_curve("paper:qwen2.5-7b-easy"), "paper:qwen2.5-7b-easy", budget=1e6)
    message = str(info.value)
    assert "\n" not in message
    assert "carries only the n*(C) sigmoid" in message and "n* = 118 at C = 1e+06" in message
    assert "not what another n costs" in message and "isocompute fit" in message


@pytest.mark.parametrize(
    "field",
    [
        {"curves": []},
        {"curves": [{"n": 8, "R0": 0, "A": 1, "C_mid": 1e4}]},
        {"curves": [{"n": 8, "R0": 0, "A": 1, "C_mid": -1.0, "beta": 1, "c_range": [1, 2]}]},
    ],
)
def test_bad_reward_curves_field_names_the_field_and_the_fix(field):
    with pytest.raises(CurveError, match=f"{REWARD_CURVES_KEY}.*isocompute fit"):
        reward_curves_from(_curve_with(field), "curve.json")


# --- through the commands -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> tuple[Path, dict]:
    """A noise-free synthetic sweep (the paper's Easy sigmoid) fitted by `isocompute fit`."""
    root = tmp_path_factory.mktemp("compare")
    truth = curves_for(load_curve("paper:qwen2.5-7b-easy"))
    write_run_logs(synthetic_sweep(truth, points_per_run=60, noise=0.0, seed=3), root / "runs")
    assert cli_main(["fit", str(root / "runs"), "--out", str(root / "fit"), "--bootstrap", "0"]) == 0
    return root / "fit", truth


def test_fit_writes_the_comparison_and_the_per_n_curves(fitted):
    out, truth = fitted
    assert {"compare.json", "compare.csv", "compare.png"} <= {p.name for p in out.iterdir()}
    curve = load_curve(out / "curve.json")
    stored = {rc.n: rc for rc in reward_curves_from(curve, "curve.json")}
    assert sorted(stored) == sorted(truth)
    table = pd.read_csv(out / "compare.csv")
    data = json.loads((out / "compare.json").read_text())
    assert [b["C"] for b in data["budgets"]] == sorted(table["C"].unique()) == [1e3, 1e4, 1e5, 1e6, 1e7]
    # Noise-free: the fitted multipliers are the true curves' multipliers.
    true_curves = [RewardCurve(n, 32, c, stored[n].c_range) for n, c in truth.items()]
    expected = compare_at(true_curves, [1e5, 1e6])
    for row in expected[expected["reach_status"] == REACHED].to_dict("records"):
        got = table[(table["C"] == row["C"]) & (table["n"] == row["n"])].iloc[0]
        assert got["reach_status"] == REACHED
        assert got["multiplier"] == pytest.approx(row["multiplier"], rel=0.03), row
    assert "## What the choice of n costs" in (out / "report.md").read_text()


def test_allocate_compare_prints_the_table(fitted, capsys):
    out, _ = fitted
    code = cli_main(["allocate", "--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "n=8,128,1024"])
    text = capsys.readouterr().out
    assert code == 0
    assert "C = 1e+06 rollouts: the compute-optimal n = 128 reaches val/avg@4" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and line.split()[0].isdigit()}
    assert set(lines) == {"8", "128", "1024"}
    assert "<- compute-optimal" in lines["128"] and "<- allocated" in lines["128"] and "1.00x" in lines["128"]
    assert "> " in lines["8"] and "(fit ends)" in lines["8"]  # n=8 saturates below R*
    assert float(lines["1024"].split()[-1].rstrip("x")) > 1.5


def test_allocate_compare_json_and_bad_uses(fitted, capsys):
    out, _ = fitted
    assert (
        cli_main(["allocate", "--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "--format", "json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["n"] == 128 and data["compare"]["n_best"] == 128 and len(data["compare"]["rows"]) == 8

    for argv, expected in [
        (["--curve", "paper:qwen2.5-7b-easy", "--budget", "1e6", "--compare"], "carries only the n*(C) sigmoid"),
        (
            ["--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "--format", "overrides"],
            "--format table",
        ),
        (["--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "n=48"], "fitted n: 8, 16"),
    ]:
        assert cli_main(["allocate", *argv]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and expected in captured.err and len(captured.err.strip().splitlines()) == 1

    assert cli_main(["allocate", "--curve", str(out / "curve.json"), "--budget", "1e9", "--compare"]) == 0
    assert "budget outside fitted range" in capsys.readouterr().out


def test_allocate_compare_always_shows_the_reference_and_the_allocated_n(fitted, capsys):
    out, _ = fitted
    assert cli_main(["allocate", "--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "n=8"]) == 0
    text = capsys.readouterr().out
    shown = [line.split()[0] for line in text.splitlines() if line.startswith("  ") and line.split()[0].isdigit()]
    assert shown == ["8", "128"]


def test_joint_groups_mark_the_optimal_cell_not_every_cell_of_its_n():
    curves = [
        RewardCurve(8, 32, SLOW, RANGE),
        RewardCurve(16, 32, SaturatingCurve(0.0, 1.0, 2e4, 1.0), RANGE),
        RewardCurve(16, 64, FAST, RANGE),
    ]
    table = compare_at(curves, [1e4])
    assert table["optimal"].tolist() == [False, False, True]
    assert _row(table, 1e4, 8)["multiplier"] == pytest.approx(4.0)  # still against the best cell
    text = format_table(table, "val/avg@4", "rollouts")
    assert "the compute-optimal n = 16 (b_problem = 64)" in text and text.count("<- compute-optimal") == 1


def test_fit_without_an_n_star_curve_still_writes_the_comparison(tmp_path):
    write_run_logs(synthetic_sweep({16: FAST}, points_per_run=20, noise=0.0, c_max=1e6), tmp_path / "runs")
    assert cli_main(["fit", str(tmp_path / "runs"), "--out", str(tmp_path / "fit"), "--bootstrap", "0"]) == 1
    assert not (tmp_path / "fit" / "curve.json").exists()
    data = json.loads((tmp_path / "fit" / "compare.json").read_text())
    assert {row["reach_status"] for b in data["budgets"] for row in b["rows"]} == {REACHED}


def test_the_documented_example_output(tmp_path, capsys):
    """docs/ALLOCATION.md's `--compare` example, on the synthetic sweep of docs/SCALING.md's quick start."""
    docs = (Path(__file__).parent.parent / "docs" / "ALLOCATION.md").read_text()
    block = re.search(r"```(?:console)?\n\$ (isocompute allocate [^\n]*--compare[^\n]*)\n(.*?)```", docs, re.DOTALL)
    command, shown = block.group(1), block.group(2)
    write_run_logs(
        synthetic_sweep(curves_for(load_curve("paper:qwen2.5-7b-easy")), noise=0.01), tmp_path / "runs" / "synthetic"
    )
    assert (
        cli_main(
            [
                "fit",
                str(tmp_path / "runs" / "synthetic"),
                "--out",
                str(tmp_path / "fits" / "synthetic"),
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    capsys.readouterr()
    argv = command.replace("fits/synthetic", str(tmp_path / "fits" / "synthetic")).split()[1:]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out

    def rows(text):
        return [line.split() for line in text.splitlines() if line.startswith("  ") and line.split()[0].isdigit()]

    expected, got = rows(shown), rows(printed)
    assert [r[0] for r in got] == [r[0] for r in expected]
    for want, have in zip(expected, got):
        assert [w for w in want if w.startswith(("<-", "compute"))] == [
            h for h in have if h.startswith(("<-", "compute"))
        ]
        assert float(have[2]) == pytest.approx(float(want[2]), abs=2e-4)  # reward at C
        times = [
            (float(w.rstrip("x")), float(h.rstrip("x")))
            for w, h in zip(want, have)
            if w.endswith("x") and w[0].isdigit()
        ]
        assert all(h == pytest.approx(w, abs=0.02) for w, h in times)  # C_n(R*)/C
    assert [line for line in shown.splitlines() if line.startswith("C = ")] == [
        line for line in printed.splitlines() if line.startswith("C = ")
    ]


def test_allocate_compare_gives_a_following_override_back_to_the_recipe(fitted, capsys):
    """``--compare KEY=VALUE``: argparse hands the optional value the override; it goes back to the overrides."""
    out, _ = fitted
    argv = ["allocate", "--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "trainer.total_epochs=2"]
    assert cli_main(argv) == 2  # an override without --recipe: the overrides saw it (not --compare's n list)
    assert "overrides trainer.total_epochs=2 need a recipe" in capsys.readouterr().err
