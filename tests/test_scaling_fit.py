"""Fitting: per-n curves, envelope, n*(C) and its sigmoid, on synthetic sweeps with a known answer.

The sweeps (verl_isocompute.scaling.synthetic) have per-n curves whose upper envelope switches n exactly
where the playbook's fitted sigmoid (arXiv 2603.12151) rounds to the next power of two, so the fit
should give back that sigmoid. Stated tolerance on log2 n*(C) over C in [1e5, 1e7]:
0.3 without noise (the grid starts at n = 8 while the paper's floor 2^b is ~7, so the data cannot show
n* below 8), 0.5 (a factor sqrt(2) on n*) with validation noise 0.01 (~ avg@4 on 300 problems).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from verl_isocompute.scaling import (
    FitError,
    RunLogs,
    ScalingError,
    build_frontier,
    fit_frontier,
    fit_saturating,
    fit_sigmoid,
    load_curve,
)
from verl_isocompute.scaling.curve import sigmoid_log2_n
from verl_isocompute.scaling.saturating import SaturatingCurve
from verl_isocompute.scaling.synthetic import (
    PAPER_N_GRID,
    crossover,
    curves_for,
    synthetic_sweep,
)

BUDGETS = np.logspace(5, 7, 81)
TOL_CLEAN, TOL_NOISY = 0.3, 0.5


def _logs(sweep: pd.DataFrame) -> RunLogs:
    runs = sweep.groupby("run", sort=True).agg(n=("n", "first"), b_problem=("b_problem", "first")).reset_index()
    runs["tokens_source"] = "log"
    return RunLogs(steps=sweep, runs=runs)


def _max_error(curve, truth) -> float:
    return float(np.max(np.abs(curve.log2_n_star(BUDGETS) - truth.log2_n_star(BUDGETS))))


# --- the synthetic sweep itself --------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard"])
def test_synthetic_curves_switch_n_where_the_sigmoid_rounds(preset):
    truth = load_curve(f"paper:{preset}")
    curves = curves_for(truth, PAPER_N_GRID)
    grid = np.logspace(3, 8, 500)
    values = np.array([c(grid) for c in curves.values()])
    best_n = np.array(list(curves))[values.argmax(axis=0)]
    expected = np.clip(np.floor(truth.log2_n_star(grid) + 0.5), 3, 10)
    assert np.array_equal(np.log2(best_n), expected)
    assert crossover(truth, 8) == pytest.approx(10 ** (truth.log10_C0 - math.log(truth.L / (3.5 - truth.b) - 1) / truth.k))


# --- step 3 and step 5 on their own ----------------------------------------------------------------


def test_saturating_fit_recovers_a_known_curve():
    true = SaturatingCurve(R0=0.42, A=0.66, C_mid=3e5, beta=0.9)
    c = np.geomspace(1e3, 1e8, 80)
    curve, rmse = fit_saturating(c, true(c))
    assert rmse < 1e-6
    assert (curve.R0, curve.A, curve.beta) == pytest.approx((true.R0, true.A, true.beta), abs=1e-4)
    assert curve.C_mid == pytest.approx(true.C_mid, rel=1e-3)
    fixed, _ = fit_saturating(c, true(c), r0=0.42)
    assert fixed.R0 == 0.42 and fixed.A == pytest.approx(0.66, abs=1e-4)


def test_saturating_fit_is_monotone_even_on_decreasing_data():
    c = np.geomspace(1e3, 1e7, 30)
    curve, _ = fit_saturating(c, np.linspace(0.7, 0.4, 30))
    assert curve.A >= curve.R0 and np.all(np.diff(curve(c)) >= 0)
    with pytest.raises(ScalingError, match="need at least 4"):
        fit_saturating(c[:3], np.array([0.1, 0.2, 0.3]))


@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard", "qwen2.5-7b-easy-tokens"])
def test_sigmoid_fit_recovers_paper_parameters(preset):
    truth = load_curve(f"paper:{preset}")
    x = np.linspace(truth.log10_C0 - 2, truth.log10_C0 + 2, 81)
    fit = fit_sigmoid(x, truth.log2_n_star(10**x), (3.0, 10.0))
    assert (fit.L, fit.k, fit.log10_C0, fit.b) == pytest.approx((truth.L, truth.k, truth.log10_C0, truth.b), abs=1e-4)
    assert fit.r2 == pytest.approx(1.0)


def test_sigmoid_k_at_its_bound_is_reported():
    truth = load_curve("paper:qwen2.5-7b-hard-joint")  # the paper's k = 50.00
    x = np.linspace(5, 7.5, 60)
    fit = fit_sigmoid(x, truth.log2_n_star(10**x), (3.0, 10.0), k_max=20)
    assert "k" in fit.at_bounds and fit.k == pytest.approx(20)


def test_sigmoid_fit_that_does_not_converge_raises():
    truth = load_curve("paper:qwen2.5-7b-easy")
    x = np.linspace(4, 8, 40)
    with pytest.raises(FitError, match="did not converge"):
        fit_sigmoid(x, truth.log2_n_star(10**x), (3.0, 10.0), max_nfev=1)


# --- the whole chain: recovery of n*(C) -----------------------------------------------------------


@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard"])
def test_recovers_paper_n_star_without_noise(preset):
    truth = load_curve(f"paper:{preset}")
    result = fit_frontier(build_frontier(_logs(synthetic_sweep(curves_for(truth), noise=0.0))), bootstrap=0)
    assert _max_error(result.curve, truth) <= TOL_CLEAN
    assert result.r2 > 0.98


@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_recovers_paper_n_star_with_noise(preset, seed):
    truth = load_curve(f"paper:{preset}")
    sweep = synthetic_sweep(curves_for(truth), noise=0.01, seed=seed)
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=0)
    assert _max_error(result.curve, truth) <= TOL_NOISY
    assert result.curve.n_grid == PAPER_N_GRID
    assert result.curve.c_range[0] < 1e5 and result.curve.c_range[1] > 1e7


def test_joint_grouping_by_n_and_b_problem():
    truth = load_curve("paper:qwen2.5-7b-easy")
    curves = curves_for(truth)
    sweep = pd.concat(
        [synthetic_sweep(curves, b_problem=b, noise=0.005, seed=b) for b in (32, 128)], ignore_index=True
    )
    by_n = fit_frontier(build_frontier(_logs(sweep)), group_by="n", bootstrap=0)
    assert any("--group-by n,b_problem" in w for w in by_n.warnings)
    joint = fit_frontier(build_frontier(_logs(sweep)), group_by="n,b_problem", bootstrap=0)
    assert len(joint.groups) == 2 * len(PAPER_N_GRID)
    assert set(joint.grid["b_problem_star"]) <= {32, 128}
    assert _max_error(joint.curve, truth) <= TOL_NOISY


def test_tokens_shift_c0_by_the_tokens_per_rollout():
    truth = load_curve("paper:qwen2.5-7b-easy")
    logs = _logs(synthetic_sweep(curves_for(truth), noise=0.005, seed=4, tokens_per_rollout=500.0))
    by_rollouts = fit_frontier(build_frontier(logs, compute="rollouts"), bootstrap=0).curve
    by_tokens = fit_frontier(build_frontier(logs, compute="tokens"), bootstrap=0).curve
    assert by_tokens.compute_unit == "tokens"
    assert by_tokens.log10_C0 - by_rollouts.log10_C0 == pytest.approx(math.log10(500.0), abs=1e-3)
    assert (by_tokens.L, by_tokens.k, by_tokens.b) == pytest.approx((by_rollouts.L, by_rollouts.k, by_rollouts.b), abs=1e-3)


@pytest.mark.parametrize("bootstrap_over", ["seeds", "runs"])
def test_result_does_not_depend_on_run_order(bootstrap_over):
    truth = load_curve("paper:qwen2.5-7b-hard")
    sweep = synthetic_sweep(curves_for(truth), runs_per_n=2, noise=0.01, seed=5)
    shuffled = sweep.sample(frac=1.0, random_state=0).reset_index(drop=True)
    a = fit_frontier(build_frontier(_logs(sweep)), bootstrap=20, bootstrap_over=bootstrap_over).curve
    b = fit_frontier(build_frontier(_logs(shuffled)), bootstrap=20, bootstrap_over=bootstrap_over).curve
    assert (a.L, a.k, a.log10_C0, a.b) == (b.L, b.k, b.log10_C0, b.b)
    assert a.provenance["ci95"] == b.provenance["ci95"]


def test_bootstrap_intervals_bracket_the_fit_and_are_reproducible():
    truth = load_curve("paper:qwen2.5-7b-easy")
    frontier = build_frontier(_logs(synthetic_sweep(curves_for(truth), runs_per_n=2, noise=0.01, seed=6)))
    result = fit_frontier(frontier, bootstrap=60, seed=3)
    assert result.bootstrap["succeeded"] + result.bootstrap["failed"] == 60 and result.bootstrap["succeeded"] >= 50
    ci = result.ci.set_index("param")
    assert np.all(ci["low"] <= ci["high"])
    table = result.n_star_table([1e6])
    assert table["n_star_low"][0] <= table["n_star_fit"][0] <= table["n_star_high"][0]
    again = fit_frontier(frontier, bootstrap=60, seed=3)
    pd.testing.assert_frame_equal(result.ci, again.ci)
    assert np.all(result.grid["log2_n_star_low"] <= result.grid["log2_n_star_high"])


@pytest.mark.parametrize("runs_per_n", [1, 2])
def test_a_sweep_with_one_run_per_n_is_told_its_bootstrap_shows_no_noise(runs_per_n):
    """With one run per n a resample of all runs (``bootstrap_over="runs"``) can only leave whole values of n
    out: its intervals show which n were run, not the noise of the points (on the real CPU pilot, 3 groups,
    they collapse onto the estimate). The fit says so; with two runs per n it has no reason to."""
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep(curves_for(truth), runs_per_n=runs_per_n, noise=0.01, seed=6)
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=40, seed=3, bootstrap_over="runs")
    said = [w for w in result.warnings if "single run" in w]
    assert len(said) == (runs_per_n == 1)
    assert not said or "run several seeds per n" in said[0]


# --- what cannot be fitted --------------------------------------------------------------------------


def test_one_value_of_n_gives_the_frontier_but_no_curve():
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep({64: curves_for(truth)[64]}, runs_per_n=2, noise=0.01)
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=0)
    assert result.curve is None and "one value of n" in result.no_curve_reason
    assert result.groups["status"].tolist() == ["fitted"]
    assert (result.grid["n_star"] == 64).all() and len(result.frontier.records) > 0


def test_n_star_constant_over_the_range_gives_a_flat_curve_the_allocation_reads(tmp_path):
    """One n best at every C is an answer, not a failed fit: a flat curve (L = 0) that allocate turns into that n.
    Before, no curve.json was written and `isocompute allocate` had nothing to read."""
    from verl_isocompute.scaling.curve import Curve, load_curve as load

    truth = load_curve("paper:qwen2.5-7b-easy")
    curves = curves_for(truth)
    sweep = synthetic_sweep({n: curves[n] for n in (512, 1024)}, runs_per_n=3, noise=0.0)  # 1024 never wins
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=20)
    c = result.curve
    assert result.no_curve_reason is None and result.n_star_flat == 512 and (c.L, c.b) == (0.0, 9.0)
    assert (result.grid["n_star"] == 512).all() and np.allclose(c.n_star(result.grid["C"]), 512)
    assert c.provenance["flat"] and c.provenance["not_identified"] == ["k", "log10_C0"]
    assert result.flat == {"requested": 20, "succeeded": 20, "failed": 0, "flat": 20}  # no noise: every resample agrees
    assert result.summary().startswith("n*(C) = 512 at every C in [") and "20 of 20 bootstrap resamples" in result.summary()
    # 512 is the smallest n run and above 2: the truth may lie below the grid
    assert any("smallest n run (512)" in w for w in result.warnings), result.warnings
    path = tmp_path / "curve.json"
    path.write_text(__import__("json").dumps(c.to_dict()))
    assert isinstance(load(str(path)), Curve) and load(str(path)).n_star(1e12) == pytest.approx(512)


def test_a_flat_n_star_at_the_largest_n_run_says_the_optimum_may_lie_above():
    """n = 8 above n = 4 at every C (same start, higher ceiling): n* = 8, the largest n run, may be an edge of
    the grid rather than the optimum. Without a bootstrap the summary claims no support."""
    rise = {"R0": 0.1, "C_mid": 3e4, "beta": 1.0}
    # B = 256 rollouts per step for both (b_problem 64 x 4, 32 x 8), so both are first evaluated at the same C
    # (with one b_problem the smaller n is evaluated first and is n* alone there)
    sweep = pd.concat([synthetic_sweep({4: SaturatingCurve(A=0.5, **rise)}, b_problem=64, noise=0.0, c_max=1e6),
                       synthetic_sweep({8: SaturatingCurve(A=0.8, **rise)}, b_problem=32, noise=0.0, c_max=1e6)])
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=0)
    assert result.n_star_flat == 8, result.summary()
    assert any("largest n run (8)" in w and "may be larger" in w for w in result.warnings), result.warnings
    assert result.flat["succeeded"] == 0 and "bootstrap" not in result.summary()


def test_group_with_too_few_points_is_left_out_with_a_warning():
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep(curves_for(truth), noise=0.005, seed=7)
    sweep = sweep[(sweep["n"] != 1024) | (sweep["step"] <= 3)]  # n=1024 validated 3 times only
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=0)
    row = result.groups.set_index("n").loc[1024]
    assert row["status"].startswith("too few points")
    assert (1024,) not in result.curves and any("n=1024: only 3" in w for w in result.warnings)
    assert result.curve is not None


def test_seeds_validated_at_one_c_are_one_value_of_c_not_five_points():
    """Five seeds of n = 1024 validated only at the same C: five points, one value of C. The warning said
    "only 5 points, need 4", which reads as a contradiction."""
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep(curves_for(truth), runs_per_n=5, noise=0.005, seed=7)
    first = sweep[(sweep["n"] == 1024) & (sweep["step"] > 0)]["step"].min()
    sweep = sweep[(sweep["n"] != 1024) | (sweep["step"] == first)]
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=0)
    assert any("n=1024: only 5 points at 1 value of C, need 4 values of C: not fitted" in w for w in result.warnings), \
        result.warnings


def test_fits_that_do_not_converge_raise():
    truth = load_curve("paper:qwen2.5-7b-easy")
    frontier = build_frontier(_logs(synthetic_sweep(curves_for(truth), noise=0.01)))
    with pytest.raises(FitError, match="did not converge"):
        fit_frontier(frontier, bootstrap=0, max_nfev=1)


def test_other_metrics_give_their_own_n_star():
    truth = load_curve("paper:qwen2.5-7b-hard")
    sweep = synthetic_sweep(curves_for(truth), noise=0.0, metric="val/best@4")
    result = fit_frontier(build_frontier(_logs(sweep), metric="val/best@4"), bootstrap=0)
    assert result.curve.metric == "val/best@4"
    assert sigmoid_log2_n(6.0, result.curve.L, result.curve.k, result.curve.log10_C0, result.curve.b) == pytest.approx(
        result.curve.log2_n_star(1e6)
    )
