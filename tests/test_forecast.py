"""``isocompute forecast`` (issue 44, item 1): the target, calibrated intervals, honest refusals, the command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from verl_isocompute.commands.cli import main
from verl_isocompute.scaling.forecast import forecast, load_calibration, target_value
from verl_isocompute.scaling.forecast_suite import HELD_OUT, suite_sweep, truncated

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_forecast  # noqa: E402

BUDGET = 4096.0


def _suite(count: int = 40) -> list:
    return [(suite_sweep(seed, BUDGET), BUDGET, "train/reward") for seed in range(HELD_OUT, HELD_OUT + count)]


@pytest.fixture(scope="module")
def backtest() -> pd.DataFrame:
    return bench_forecast.backtest(_suite(), 0.8)


def test_run_intervals_hold_their_level_on_held_out_known_truth_sweeps(backtest):
    """Pooled over the fractions, 80 % intervals cover 80 % (+- 8 points for 40 sweeps). Narrower or wider fails."""
    runs = backtest[(backtest["kind"] == "run") & backtest["made"]]
    assert len(runs) > 300
    assert 0.72 <= runs["covered"].astype(bool).mean() <= 0.88
    groups = backtest[(backtest["kind"] == "group") & backtest["made"]]
    assert 0.70 <= groups["covered"].astype(bool).mean() <= 0.90


def test_at_a_fifth_of_the_budget_the_forecast_beats_both_naive_baselines(backtest):
    at = backtest[(backtest["kind"] == "run") & backtest["made"] & (backtest["fraction"] == 0.2)]
    assert at["error"].mean() < at["last"].mean() and at["error"].mean() < at["line"].mean()


def test_narrower_intervals_fail_the_calibration():
    """The check above can fail: the same forecasts with the calibration's quantiles halved cover far less."""
    table = load_calibration()
    narrow = dict(table, run=[[[z / 2 for z in row] for row in rows] for rows in table["run"]])
    covered = []
    for points, budget, metric in _suite(15):
        truth = {run: target_value(p, budget, False) for run, p in points.groupby("run")}
        for f in forecast(truncated(points, 0.3 * budget), budget, metric, 0.8, calibration=narrow).runs:
            if f.low is not None:
                covered.append(f.low <= truth[f.run] <= f.high)
    assert np.mean(covered) < 0.65


def test_group_intervals_hold_their_level_both_for_steep_and_for_shallow_slopes():
    """Calibrated per cell of the slope's t as well as of the horizon: groups rising steeply (t >= 6) and the rest
    each hold ~80 % of their 80 % intervals on 200 held-out sweeps (+- 6 points for ~190 groups). With one table
    for every t (horizon cells only), the steep groups held 72.5 % and fail this."""
    from verl_isocompute.scaling.forecast_suite import T_EDGES

    covered: dict[bool, list[bool]] = {True: [], False: []}
    for seed in range(HELD_OUT, HELD_OUT + 200):
        points = suite_sweep(seed, BUDGET)
        truth = {run: target_value(p, BUDGET, False) for run, p in points.groupby("run")}
        for fraction in (0.2, 0.3, 0.5):
            for g in forecast(truncated(points, fraction * BUDGET), BUDGET, "train/reward", 0.8).groups:
                if g.low is not None and g.sd:
                    covered[g.t >= T_EDGES[-1]].append(g.low <= np.mean([truth[r] for r in g.runs]) <= g.high)
    assert min(len(covered[True]), len(covered[False])) > 150
    assert 0.75 <= np.mean(covered[True]) <= 0.88 and 0.75 <= np.mean(covered[False]) <= 0.88


def test_a_sparse_calibration_cell_borrows_the_lower_slope_bins_at_its_horizon():
    """A cell with fewer than MIN_CELL tuning errors takes every lower t bin's errors at the same horizon, so no
    quantile rests on a handful of points; a full cell keeps its own."""
    from verl_isocompute.scaling.forecast_suite import MIN_CELL, PERCENT, calibration_table

    rng = np.random.default_rng(0)
    rows = [("run", 0.5, 1.0, z) for z in rng.normal(0.0, 1.0, 400)]  # t bin 0, h bin 0: wide
    rows += [("run", 0.5, 4.0, z) for z in rng.normal(0.0, 0.1, 400)]  # t bin 1, h bin 0: narrow, full
    rows += [("run", 0.5, 9.0, z) for z in rng.normal(5.0, 0.1, MIN_CELL - 1)]  # t bin 2: sparse, far off
    rows += [("group", 0.5, t, z) for t in (1.0, 4.0, 9.0) for z in rng.normal(0.0, 1.0, 200)]
    for h in (1.0, 1.5, 2.5):
        rows += [(kind, h, t, z) for kind in ("run", "group") for t in (1.0, 4.0, 9.0) for z in rng.normal(0, 1, 200)]
    table = calibration_table(pd.DataFrame(rows, columns=["kind", "h", "t", "z"]))
    median = PERCENT.index(50)
    assert abs(table["run"][1][0][median]) < 0.05  # its own narrow errors
    pooled = [r[3] for r in rows if r[0] == "run" and r[1] == 0.5]  # every t bin at that horizon
    assert table["run"][2][0][median] == pytest.approx(np.percentile(pooled, 50), abs=1e-3)


def test_target_is_the_mean_over_the_last_quarter_or_the_nearest_validation():
    pts = pd.DataFrame({"C": [100.0, 700.0, 800.0, 1000.0, 1100.0], "reward": [0.1, 0.2, 0.4, 0.6, 0.9]})
    assert target_value(pts, 1000.0, validation=False) == pytest.approx(0.5)  # (750, 1000]: 800 and 1000
    assert target_value(pts, 1000.0, validation=True) == pytest.approx(0.6)
    assert target_value(pts, 1080.0, validation=True) == pytest.approx(0.9)


def test_a_flat_start_and_too_few_points_are_refused_per_run_not_guessed():
    rng = np.random.default_rng(0)
    c = np.arange(1, 40) * 16.0
    flat = pd.DataFrame({"run": "flat", "n": 2, "b_problem": 8, "C": c, "reward": 0.3 + rng.normal(0, 0.05, len(c))})
    short = pd.DataFrame({"run": "short", "n": 8, "b_problem": 8, "C": [64.0, 128.0, 192.0], "reward": [0.2, 0.3, 0.4]})
    out = forecast(pd.concat([flat, short]), 4096.0, "train/reward")
    why = {f.run: f.why for f in out.runs}
    assert why["flat"].startswith("cannot forecast: no rise yet")
    assert why["short"].startswith("cannot forecast: 2 points")
    assert all(f.low is None for f in out.runs)


def test_a_run_already_past_the_budget_reports_what_it_logged():
    sweep = suite_sweep(HELD_OUT, BUDGET)
    out = forecast(sweep, 2048.0, "train/reward")
    for f in out.runs:
        assert f.predicted == f.low == f.high == target_value(sweep[sweep["run"] == f.run], 2048.0, False)


def _partial_sweep(tmp_path: Path) -> Path:
    for cell in (ROOT / "tests/fixtures/nstar_cpu/cells").iterdir():
        lines = (cell / "isocompute.jsonl").read_text().splitlines()
        (tmp_path / cell.name).mkdir()
        (tmp_path / cell.name / "isocompute.jsonl").write_text("\n".join(lines[: 42 if "_n2" in cell.name else 12]) + "\n")
    return tmp_path


def test_command_json_has_the_issue_keys_and_says_why_per_run(tmp_path, capsys):
    runs = _partial_sweep(tmp_path)
    assert main(["forecast", str(runs), "--at", "1024", "--metric", "train/reward", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"at", "metric", "level", "runs", "groups"}
    assert {"run", "n", "b_problem", "fitted_upto", "predicted", "low", "high"} <= set(out["runs"][0])
    assert {"n", "b_problem", "runs", "fitted_upto", "predicted", "low", "high"} <= set(out["groups"][0])
    n2 = [r for r in out["runs"] if r["n"] == 2]
    assert len(n2) == 11 and all(r["low"] < r["predicted"] < r["high"] for r in n2)
    n8 = [r for r in out["runs"] if r["n"] == 8]
    assert all(r["low"] is None and r["why"].startswith("cannot forecast") for r in n8)


@pytest.mark.parametrize("args, says", [
    (["--at", "-5", "--metric", "train/reward"], "--at must be a budget > 0"),
    (["--at", "1024", "--metric", "train/reward", "--level", "0.999"], "--level must be in"),
    (["--at", "1024", "--metric", "no/such"], "no/such"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    runs = _partial_sweep(tmp_path)
    assert main(["forecast", str(runs), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err


def test_verl_file_logger_logs_are_forecast_too(capsys):
    """verl's own file logger (the pilot's verl_metrics.jsonl): a forecast where the log supports one, a line where not."""
    logs = sorted(str(p) for p in (ROOT / "tests/fixtures/real_pilot/cells").glob("*/verl_metrics.jsonl"))
    assert main(["forecast", *logs, "--at", "1024", "--metric", "critic/score/mean", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["n"] for r in out["runs"]} == {2, 4, 8}
    made = [r for r in out["runs"] if r["low"] is not None]
    assert made and all(0.0 <= r["low"] < r["predicted"] < r["high"] <= 1.0 for r in made)
    assert all(r["why"].startswith("cannot forecast") for r in out["runs"] if r["low"] is None)


def test_replay_of_random_sweeps_stops_some_n_and_never_the_best_at_the_budget():
    """The replay's wrong-stop row: on held-out random suite sweeps the rule stops an n in some and never the one
    whose mean target at the budget is the best."""
    results = [bench_forecast.replay(suite_sweep(seed, BUDGET), BUDGET, "train/reward")
               for seed in range(HELD_OUT, HELD_OUT + 12)]
    assert any(r["stopped"] for r in results)
    assert not any(r["full_pick"] in r["stopped"] for r in results)
