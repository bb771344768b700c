"""`allocate --compare` and the fit's comparison with intervals over seeds (issue 36, item 6): each n's curve is
refitted on the fit's bootstrap resamples of its own runs, the comparison is redone on every resample, and the
95% intervals and the share of resamples in which each n is compute-optimal are printed and stored."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from verl_isocompute.commands.cli import main as cli_main
from verl_isocompute.scaling import build_frontier, fit_frontier, load_curve
from verl_isocompute.scaling.compare import compare_at, format_table
from verl_isocompute.scaling.curve import CurveError, reward_curve_entries
from verl_isocompute.scaling.pipeline import FitConfig, run_fit
from verl_isocompute.scaling.reward_curves import reward_curves, reward_curves_field, reward_curves_from
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep
from test_scaling_fit import _logs

TRUTH = load_curve("paper:qwen2.5-7b-easy")


def _sweep(runs_per_n: int, noise: float = 0.02) -> pd.DataFrame:
    return synthetic_sweep(curves_for(TRUTH), runs_per_n=runs_per_n, noise=noise, seed=6, points_per_run=40)


def test_seeds_give_intervals_around_the_estimates_and_shares_that_add_up():
    result = fit_frontier(build_frontier(_logs(_sweep(3))), bootstrap=60, seed=1)
    curves = reward_curves(result)
    assert all(rc.draws is not None and rc.draws.shape == (60, 4) for rc in curves)
    budgets = [1e5, 1e6, 1e7]
    table = compare_at(curves, budgets)
    assert (table["resamples"] > 40).all() and (table["resamples"] <= 60).all()
    fitted = table[table["reward_status"] == "fitted"]
    assert (fitted["reward_low"] <= fitted["reward"] + 1e-12).all() and (fitted["reward"] <= fitted["reward_high"] + 1e-12).all()
    assert (fitted["reward_high"] - fitted["reward_low"] > 1e-4).all()  # three noisy seeds: the spread is not a point
    reached = table[table["reach_status"] == "reached"]
    assert (reached["multiplier_low"] <= reached["multiplier"] + 1e-9).all()
    assert table.groupby("C")["best_share"].sum().to_numpy() == pytest.approx([1.0, 1.0, 1.0])
    best = table[table["optimal"]]
    assert (best["best_share"] > 0.5).all()  # the estimate's n* is the usual n* of the resamples
    text = format_table(table, "val/avg@4", "rollouts")
    assert "[95%]: reward: t interval on seeds - 1 df" in text and "n* in" in text


def test_the_intervals_move_with_the_seeds_not_with_the_estimate():
    """Twin copies of every run: each n's resamples are its data again, so every interval collapses onto the
    estimate (what a comparison from the full-data curves would print as an interval)."""
    sweep = _sweep(1)
    twins = pd.concat([sweep, sweep.assign(run=sweep["run"] + "_copy")], ignore_index=True)
    table = compare_at(reward_curves(fit_frontier(build_frontier(_logs(twins)), bootstrap=20, seed=1)), [1e6])
    fitted = table[table["reward_status"] == "fitted"]
    assert np.allclose(fitted["reward_low"], fitted["reward"], atol=1e-6)
    assert np.allclose(fitted["reward_high"], fitted["reward"], atol=1e-6)


def test_one_run_per_n_gives_the_table_without_intervals():
    result = fit_frontier(build_frontier(_logs(_sweep(1))), bootstrap=20, seed=1)
    assert result.curve_draws == {}
    table = compare_at(reward_curves(result), [1e6])
    assert (table["resamples"] == 0).all() and table["reward_low"].isna().all()
    assert "[95%]" not in format_table(table, "val/avg@4", "rollouts")


def test_the_curve_file_carries_the_resamples_and_allocate_compare_prints_them(tmp_path, capsys):
    sweep = _sweep(2)
    logs = tmp_path / "logs.csv"
    sweep.to_csv(logs, index=False)
    out = tmp_path / "fit"
    options = FitConfig.from_dict({"bootstrap": 40, "seed": 2})
    outcome = run_fit([logs], out, options)
    stored = json.loads((out / "curve.json").read_text())["reward_curves"]["curves"]
    assert all(len(c["bootstrap"]) == 40 for c in stored)
    curve = load_curve(str(out / "curve.json"))
    back = reward_curves_from(curve, "curve.json")
    for rc, fitted in zip(back, reward_curves(outcome.result)):
        np.testing.assert_allclose(rc.draws, fitted.draws, rtol=1e-12)  # NaN rows (not refitted) stay NaN
    capsys.readouterr()
    assert cli_main(["allocate", "--curve", str(out / "curve.json"), "--budget", "1e6", "--compare"]) == 0
    text = capsys.readouterr().out
    assert "reward at C [95%]" in text and "[95%]: reward: t interval on seeds - 1 df" in text
    assert cli_main(["allocate", "--curve", str(out / "curve.json"), "--budget", "1e6", "--compare", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["compare"]["rows"]
    assert all(r["resamples"] > 0 and 0.0 <= r["best_share"] <= 1.0 for r in rows)


def test_a_bad_bootstrap_field_is_refused_naming_the_fix():
    result = fit_frontier(build_frontier(_logs(_sweep(2))), bootstrap=10, seed=1)
    field = reward_curves_field(reward_curves(result))
    short = json.loads(json.dumps(field))
    short["curves"][1]["bootstrap"] = short["curves"][1]["bootstrap"][:5]
    with pytest.raises(CurveError, match="bootstrap has 5 resamples, curves\\[0\\] 10: every curve holds the same"):
        reward_curve_entries(short, "val/avg@4", "c.json")
    wrong = json.loads(json.dumps(field))
    wrong["curves"][0]["bootstrap"] = [[0.1, 0.5, "x", 1.0]]
    with pytest.raises(CurveError, match="bootstrap must be a list of \\[R0, A, C_mid, beta\\] rows"):
        reward_curve_entries(wrong, "val/avg@4", "c.json")
