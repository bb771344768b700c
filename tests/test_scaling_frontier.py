"""Record-breaking points and the frontier f(C): unit tests and properties (hypothesis)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_isocompute.scaling import (
    ScalingError,
    bucket_index,
    frontier_value,
    record_breaking,
    smooth_in_compute,
)


def _points(rows):
    """rows: (run, C, reward) -> a points table as build_frontier makes it."""
    df = pd.DataFrame(rows, columns=["run", "C", "reward"])
    df["run"] = df["run"].map(lambda r: f"run{r}")
    df["step"] = df.groupby("run").cumcount()
    df["n"] = 8
    df["b_problem"] = 32
    return df.astype({"C": float, "reward": float})


def test_record_breaking_keeps_first_point_of_each_higher_bucket():
    pts = _points([(0, 1, 0.300), (0, 2, 0.305), (0, 3, 0.312), (0, 4, 0.309), (0, 5, 0.331), (0, 6, 0.320)])
    rec = record_breaking(pts, bucket=0.01)
    assert rec["C"].tolist() == [1.0, 3.0, 5.0]  # 0.305 stays in bucket 30; 0.312 opens 31; 0.331 opens 33
    exact = record_breaking(pts, bucket=0)
    assert exact["C"].tolist() == [1.0, 2.0, 3.0, 5.0]


def test_bucket_index_puts_round_values_in_their_own_bucket():
    assert bucket_index(np.array([0.29, 0.3, 0.57]), 0.01).tolist() == [29, 30, 57]
    with pytest.raises(ScalingError):
        bucket_index(np.array([0.5]), -0.1)


def test_records_across_runs_with_equal_compute_keep_the_best():
    pts = _points([(0, 10, 0.5), (1, 10, 0.6), (2, 20, 0.55), (2, 30, 0.7)])
    rec = record_breaking(pts, bucket=0.01)
    assert list(zip(rec["C"], rec["run"])) == [(10.0, "run1"), (30.0, "run2")]
    assert frontier_value(pts, [5, 10, 25, 30, 100]).tolist()[1:] == [0.6, 0.6, 0.7, 0.7]
    assert np.isnan(frontier_value(pts, [5])[0])


def test_records_by_group_are_each_groups_own_frontier():
    pts = _points([(0, 1, 0.5), (0, 2, 0.6), (1, 1, 0.4), (1, 3, 0.45)])
    pts.loc[pts["run"] == "run1", "n"] = 64
    rec = record_breaking(pts, bucket=0.01, by=["n"])
    assert rec.groupby("n")["C"].apply(list).to_dict() == {8: [1.0, 2.0], 64: [1.0, 3.0]}


def test_smoothing_in_compute_stays_within_each_run_and_is_the_exact_kernel_average():
    pts = _points([(0, 1, 0.0), (0, 2, 1.0), (1, 1, 1.0), (1, 2, 1.0)])
    out = smooth_in_compute(pts, 1.0)
    run0 = out[out["run"] == "run0"]
    # f rises linearly from 0 at C = 1 to 1 at C = 2; weight 2^-(2 - c): S = int (c - 1) 2^(c - 2) / int 2^(c - 2)
    lam = np.log(2.0)
    want = (1.0 / lam - (1.0 - 0.5) / lam**2) / ((1.0 - 0.5) / lam)
    assert run0["reward"].iloc[0] == 0.0 and run0["reward"].iloc[1] == pytest.approx(want, rel=1e-12)
    assert out.loc[out["run"] == "run1", "reward"].tolist() == [1.0, 1.0]
    assert run0["reward_raw"].tolist() == [0.0, 1.0]
    off = smooth_in_compute(pts, 0.0)
    assert off["reward"].tolist() == off["reward_raw"].tolist()
    with pytest.raises(ScalingError, match="half_life"):
        smooth_in_compute(pts, -1.0)


def test_smoothing_in_compute_does_not_depend_on_how_densely_a_run_logged():
    """The same straight line logged every 16 or every 64 units of C smooths to the same values at common C (a
    per-step EMA lags 4x more in C for the sparse run)."""
    dense = pd.DataFrame({"run": "a", "n": 2, "b_problem": 8, "step": range(65), "C": np.arange(65) * 16.0})
    sparse = pd.DataFrame({"run": "b", "n": 8, "b_problem": 8, "step": range(17), "C": np.arange(17) * 64.0})
    for frame in (dense, sparse):
        frame["reward"] = 0.2 + frame["C"] / 2048.0
    out = smooth_in_compute(pd.concat([dense, sparse], ignore_index=True), 128.0)
    a = out[out["run"] == "a"].set_index("C")["reward"]
    b = out[out["run"] == "b"].set_index("C")["reward"]
    assert np.allclose(a.loc[b.index], b, atol=1e-12)


# --- properties ------------------------------------------------------------------------------------

point_rows = st.lists(
    st.tuples(st.integers(0, 4), st.integers(1, 10_000), st.floats(0.0, 1.0, allow_nan=False)),
    min_size=1,
    max_size=60,
    unique_by=lambda row: (row[0], row[1]),  # one point per (run, C), as in a run log
)
buckets = st.sampled_from([0.0, 0.01, 0.05, 0.2])


@settings(max_examples=150, deadline=None)
@given(rows=point_rows, bucket=buckets)
def test_frontier_of_records_equals_frontier_of_all_points(rows, bucket):
    pts = _points(rows)
    rec = record_breaking(pts, bucket)
    grid = np.unique(np.concatenate([pts["C"].to_numpy(), pts["C"].to_numpy() + 0.5, [0.5, 20_000.0]]))
    f_all, f_rec = frontier_value(pts, grid), frontier_value(rec, grid)
    assert np.array_equal(np.isnan(f_all), np.isnan(f_rec))
    seen = ~np.isnan(f_all)
    if bucket == 0:
        assert np.array_equal(f_all[seen], f_rec[seen])
    else:
        # Same bucket everywhere; the record is the first point of that bucket, so at most one bucket lower.
        assert np.array_equal(bucket_index(f_all[seen], bucket), bucket_index(f_rec[seen], bucket))
        assert np.all(f_all[seen] - f_rec[seen] >= 0)
        assert np.all(f_all[seen] - f_rec[seen] < bucket + 1e-9)


@settings(max_examples=150, deadline=None)
@given(rows=point_rows, bucket=buckets)
def test_bucketisation_never_creates_non_monotonicity(rows, bucket):
    rec = record_breaking(_points(rows), bucket)
    assert np.all(np.diff(rec["C"].to_numpy()) > 0)
    assert np.all(np.diff(rec["reward"].to_numpy()) > 0)
    assert np.all(np.diff(bucket_index(rec["reward"], bucket)) > 0)


@settings(max_examples=100, deadline=None)
@given(rows=point_rows, bucket=buckets, data=st.data())
def test_records_do_not_depend_on_run_order(rows, bucket, data):
    pts = _points(rows)
    shuffled = pts.iloc[data.draw(st.permutations(list(range(len(pts)))))].reset_index(drop=True)
    cols = ["run", "C", "reward", "step"]
    a = record_breaking(pts, bucket)[cols].reset_index(drop=True)
    b = record_breaking(shuffled, bucket)[cols].reset_index(drop=True)
    pd.testing.assert_frame_equal(a, b)
