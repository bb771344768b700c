"""The fit's batched pieces agree with the one-at-a-time ones they replace in the bootstrap.

- ``fit.envelope`` smooths as pandas' centred rolling mean over the covered grid points;
- ``lsq.least_squares_batch`` refits land where scipy's ``least_squares`` does (``fit_saturating``,
  ``fit_sigmoid``) from the same start;
- ``frontier.record_mask`` picks the points ``record_breaking`` picks;
- ``FitConfig.check`` refuses each bad option of a sweep plan's ``fit:`` block in one line.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from verl_isocompute.scaling import ScalingError, load_curve
from verl_isocompute.scaling.curve import sigmoid_log2_n
from verl_isocompute.scaling.envelope import running_mean
from verl_isocompute.scaling.saturating import SaturatingCurve, bin_points, fit_saturating, refit_batch
from verl_isocompute.scaling.sigmoid_fit import fit_sigmoid, sigmoid_batch
from verl_isocompute.scaling.points import record_breaking, record_mask
from verl_isocompute.scaling.pipeline import FitConfig


@pytest.mark.parametrize("window", range(1, 9))
def test_running_mean_is_pandas_rolling_over_the_valid_points(window):
    rng = np.random.default_rng(window)
    values = rng.normal(size=(6, 40))
    valid = rng.random((6, 40)) > 0.3
    valid[0] = True
    valid[1, :] = False
    out = running_mean(values, valid, window)
    for row in range(6):
        expected = pd.Series(values[row][valid[row]]).rolling(window, center=True, min_periods=1).mean().to_numpy()
        np.testing.assert_allclose(out[row][valid[row]], expected, rtol=1e-12, atol=1e-12)
        assert np.isnan(out[row][~valid[row]]).all()


def _noisy_curve(seed: int, n_points: int = 60):
    rng = np.random.default_rng(seed)
    truth = SaturatingCurve(R0=0.45, A=0.55 + 0.1 * rng.random(), C_mid=10 ** (4 + 2 * rng.random()), beta=0.5 + rng.random())
    c = np.geomspace(1e2, 1e8, n_points)
    return c, np.clip(truth(c) + rng.normal(0, 0.01, n_points), 0, 1), rng.integers(1, 4, n_points).astype(float)


@pytest.mark.parametrize("shared_r0", [True, False])
def test_batched_refits_land_where_scipy_does(shared_r0):
    problems = [bin_points(*_noisy_curve(seed)) for seed in range(12)]
    r0 = 0.45 if shared_r0 else None
    starts = [fit_saturating(c, y, w, r0=r0)[0] for c, y, w in problems]
    # perturbed starts, as a resample starts from the full-data fit and not from its own answer
    starts = [SaturatingCurve(s.R0, s.A * 0.98, s.C_mid * 1.5, s.beta * 1.2) for s in starts]
    width = max(len(c) for c, _, _ in problems)
    u, y, w = (np.zeros((len(problems), width)) for _ in range(3))
    for i, (c, yy, ww) in enumerate(problems):
        u[i, : len(c)], y[i, : len(c)], w[i, : len(c)] = np.log(c), yy, ww
    batched = refit_batch(u, y, w, None if r0 is None else np.full(len(problems), r0), starts)
    for (c, yy, ww), start, row in zip(problems, starts, batched):
        scipy_fit = fit_saturating(c, yy, ww, r0=r0, start=start)[0]
        got = SaturatingCurve(row[0], row[1], math.exp(row[2]), row[3])
        np.testing.assert_allclose(got(c), scipy_fit(c), atol=2e-4)


def test_batched_sigmoid_refits_land_where_scipy_does():
    curve = load_curve("paper:qwen2.5-7b-easy")
    rng = np.random.default_rng(0)
    x = np.linspace(3.0, 8.0, 80)
    rows = [sigmoid_log2_n(x, curve.L, curve.k, curve.log10_C0, curve.b) + rng.normal(0, 0.2, len(x)) for _ in range(8)]
    start = np.array([curve.L, curve.k, curve.log10_C0, curve.b]) * 1.05
    fitted, converged = sigmoid_batch(np.tile(x, (8, 1)), np.array(rows), np.ones((8, len(x))), start, (3.0, 10.0), 50.0)
    assert converged.all()
    for y, got in zip(rows, fitted):
        want = fit_sigmoid(x, y, (3.0, 10.0), start=start)
        np.testing.assert_allclose(sigmoid_log2_n(x, *got), sigmoid_log2_n(x, want.L, want.k, want.log10_C0, want.b), atol=1e-4)


@pytest.mark.parametrize("bucket", [0.0, 0.01, 0.05])
def test_record_mask_picks_what_record_breaking_picks(bucket):
    rng = np.random.default_rng(3)
    points = pd.DataFrame({
        "run": rng.choice(["a", "b", "c"], 300), "step": rng.integers(0, 50, 300),
        "C": rng.choice(np.geomspace(1e2, 1e6, 40), 300), "reward": np.round(rng.random(300), 2),
    })
    records = record_breaking(points, bucket)
    ordered = points.sort_values(["C", "reward", "run", "step"], ascending=[True, False, True, True], kind="mergesort")
    mask = record_mask(ordered["C"].to_numpy(), ordered["reward"].to_numpy(), bucket)
    pd.testing.assert_frame_equal(ordered[mask].reset_index(drop=True), records)


BAD_OPTIONS = [
    ({"bucket": float("nan")}, "--bucket must be a finite number >= 0, got nan"),
    ({"bucket": "lots"}, "--bucket must be a finite number >= 0, got 'lots'"),
    ({"seed": -1}, "--seed must be an integer >= 0, got -1"),
    ({"seed": 1.5}, "--seed must be an integer >= 0, got 1.5"),
    ({"bootstrap": -5}, "--bootstrap must be an integer >= 0"),
    ({"window": 0}, "--window must be an integer >= 1"),
    ({"half_life": -1.0}, "--half-life must be a finite number >= 0"),
    ({"half_life": float("nan")}, "--half-life must be a finite number >= 0"),
    ({"k_max": float("inf")}, "--k-max must be a finite number > 0.001"),
    ({"group_by": "b_problem"}, "--group-by must be n or n,b_problem"),
    ({"fit_on": "best"}, "--fit-on must be records or all"),
    ({"compute": "flops"}, "--compute must be rollouts or tokens"),
    ({"metric": ""}, "--metric must be a logged metric name"),
    ({"n": 0}, "--n must be an integer >= 1"),
    ({"shared_r0": "yes"}, "--shared-r0 must be true or false"),
]


@pytest.mark.parametrize(("values", "message"), BAD_OPTIONS, ids=[m for _, m in BAD_OPTIONS])
def test_fit_options_check_refuses_in_one_line(values, message):
    with pytest.raises(ScalingError) as info:
        FitConfig.from_dict(values).check()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_fit_options_from_a_plan_read_yaml_exponents():
    options = FitConfig.from_dict({"bucket": "1e-2", "k_max": "5e1"}).check()  # YAML 1.1 reads these as strings
    assert (options.bucket, options.k_max) == (0.01, 50.0)
    assert FitConfig().check() == FitConfig()
