"""`isocompute fit` on the logs of a real CPU pilot sweep (SmolLM2-135M-Instruct, a curated Easy set, one
cell per n: docs/EVIDENCE.md), against the figures recorded when the sweep ran.

A regression test on real, noisy data: every figure (the frontier's reward and n* on its grid of C, each
n's fitted curve, the sigmoid when there is one, the compare multipliers at the largest budget) must lie in
the interval a parametric bootstrap over the logged validation noise gave it (tests/real_pilot.py says
how; no tolerance is chosen by hand)."""

import json
import math

import numpy as np
import pandas as pd
import pytest

import real_pilot
from verl_isocompute.scaling.pipeline import run_fit

pytestmark = pytest.mark.skipif(not real_pilot.EXPECTED.is_file(), reason="no recorded real pilot")


def _outside(got, interval, path=""):
    """Every leaf of ``got`` outside its interval, as 'path: value not in [lo, hi]'."""
    if interval is None:
        return []
    if isinstance(interval, dict):
        return [m for k, v in interval.items() for m in _outside(got.get(k) if got else None, v, f"{path}/{k}")]
    if isinstance(interval, list) and interval and not isinstance(interval[0], (int, float)):
        return [m for i, v in enumerate(interval) for m in _outside(got[i] if got is not None else None, v, f"{path}[{i}]")]
    lo, hi = interval
    if got is None or not math.isfinite(got) or not lo - 1e-9 <= got <= hi + 1e-9:
        return [f"{path}: {got} not in [{lo:.4g}, {hi:.4g}]"]
    return []


def test_fit_of_the_real_pilot_stays_within_the_noise_of_its_data(tmp_path):
    expected = json.loads(real_pilot.EXPECTED.read_text())
    outcome = run_fit([real_pilot.FIXTURE / "cells"], tmp_path, real_pilot.options())
    got = real_pilot.figures(outcome.result, expected["budget"])
    # what the command wrote is what was checked: the frontier file and the per-n curves of curve.json / fits.csv
    written = pd.read_csv(tmp_path / "frontier.csv")
    np.testing.assert_allclose(written["reward"], got["frontier"]["reward"], rtol=1e-9)
    np.testing.assert_allclose(written["C"], expected["estimate"]["frontier"]["C"], rtol=1e-9)
    fits = pd.read_csv(tmp_path / "fits.csv").set_index("n")
    for n, curve in got["curves"].items():
        assert fits.loc[int(n), "status"] == "fitted"
    if expected["estimate"]["sigmoid"] is not None:
        saved = json.loads((tmp_path / "curve.json").read_text())
        assert {k: saved[k] for k in ("L", "k", "log10_C0", "b")} == pytest.approx(got["sigmoid"])
    else:
        assert outcome.result.curve is None and not (tmp_path / "curve.json").exists()
    outside = _outside(got, expected["interval"])
    assert not outside, "figures moved beyond the data's noise:\n" + "\n".join(outside)


def test_the_recorded_figures_are_inside_their_own_intervals():
    """The fixture is consistent: each recorded estimate lies in its recorded interval (else the recorder
    or the file is broken, and the test above would prove nothing), and each interval rests on at least 100
    fitted resamples. Resamples the fit refuses are left out and counted (on these logs about one in ten: a
    per-n saturating fit that does not converge on a curve already flat at its first point)."""
    expected = json.loads(real_pilot.EXPECTED.read_text())
    assert not _outside(expected["estimate"], expected["interval"])
    assert expected["resamples"] - expected["failed_resamples"] >= 100


def test_the_report_quotes_every_cell_and_shares_that_add_up():
    """`python tests/real_pilot.py --report` (docs/EVIDENCE.md's figures): one line per cell, and at each C the
    n* counts cover exactly the fitted resamples."""
    expected = json.loads(real_pilot.EXPECTED.read_text())
    fitted = expected["resamples"] - expected["failed_resamples"]
    assert all(sum(counts.values()) == fitted for counts in expected["n_star_counts"].values())
    text = real_pilot.report()
    cells = sorted((real_pilot.FIXTURE / "cells").iterdir())
    assert [line.split(":")[0].strip() for line in text.splitlines() if line.startswith("  n = ")] == [
        f"n = {p.name.split('_n')[-1]}" for p in cells]
