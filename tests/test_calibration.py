"""The per-n reward intervals hold their level on known-truth sweeps (issue 43, item 2): a small suite here, the
full one in ``benchmarks/bench_calibration.py``. Percentile intervals from the bootstrap draws held the truth ~80 %
of the time on the exact tie with 5 seeds; the t interval on seeds - 1 df must hold >= 90 % of 48 intervals."""

from __future__ import annotations

import numpy as np
import pytest

from verl_isocompute.scaling.calibration import CASES, coverage
from verl_isocompute.scaling.compare_spread import t_interval

SMALL = [c for c in CASES if c.name in ("tie", "rising", "3 seeds")]


def test_the_intervals_of_a_small_known_truth_suite_hold_their_level():
    results = [coverage(case, datasets=8, bootstrap=40, seed=3) for case in SMALL]
    given, held = sum(r["given"] for r in results), sum(r["held"] for r in results)
    assert given >= 80 and held / given >= 0.9, [(c.name, r) for c, r in zip(SMALL, results)]


def test_one_seed_gives_no_interval():
    one = next(c for c in CASES if c.name == "1 seed")
    r = coverage(one, datasets=1, bootstrap=40)
    assert r["given"] == 0 and r["none"] > 0


def test_the_t_interval_holds_its_estimate_and_corrects_for_few_seeds():
    draws = np.random.default_rng(0).normal(0.5, 0.01, size=400)
    low, high = t_interval(0.5, draws, seeds=3)
    # t(2) = 4.303 and sqrt(3 / 2): about 5.27 SDs each side, where a percentile interval gives ~1.96
    assert low < 0.5 < high and (high - low) / 2 == pytest.approx(4.303 * np.sqrt(1.5) * draws.std(ddof=1), rel=1e-3)
    assert all(np.isnan(t_interval(0.5, draws, seeds=1)))


def test_flat_resamples_count_in_a_moving_fits_intervals(tmp_path):
    """Issue 43 item 3: the sigmoid's bootstrap skipped every resample on which n* did not move, so its intervals
    were conditional on n* moving. On a truly flat sweep (n = 2 ahead wherever both run) whose full-data envelope
    moves by noise, the flat resamples are kept as L = 0 draws, counted, and the fit says it cannot tell."""
    from verl_isocompute.scaling.calibration import write_case
    from verl_isocompute.scaling.pipeline import FitConfig, run_fit

    write_case(next(c for c in CASES if c.name == "flat"), tmp_path, np.random.default_rng(5))
    result = run_fit([tmp_path], None, FitConfig(metric="train/reward", group_by="n", bootstrap=100, seed=0)).result
    assert result.flat is None and result.curve is not None and result.curve.L > 0  # the full data: n* moves
    stats = result.bootstrap
    assert stats["succeeded"] + stats["failed"] == stats["requested"] == 100
    assert stats["flat"] >= 20 and int((result.bootstrap_params[:, 0] == 0).sum()) == stats["flat"]
    assert result.ci is not None and result.ci.set_index("param").loc["L", "low"] == 0.0  # flat draws in the interval
    assert any("cannot tell a moving n* from a flat one" in w for w in result.warnings)
    assert result.curve.provenance["bootstrap_flat"] == stats["flat"]
