"""What the fit says it does not know (issue 36, item 5), on the real CPU pilot and on synthetic sweeps.

- per-n curves with a parameter on a bound of the fit, and R0 / C_mid the points do not identify, are flagged in
  the report, in fits.csv and in curve.json (and curve files written before these fields still load);
- the shared-R0 refit starts from the same several starts as the free fit, so it finds the better optimum on the
  committed pilot (its single start from the free fit stopped at a local one);
- the bootstrap resamples each n's runs among its own (seeds), so its intervals carry run-to-run variation; with
  one run per n it says that variation is not measured instead of printing intervals.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import real_pilot
from verl_isocompute.scaling import build_frontier, fit_frontier, load_curve
from verl_isocompute.scaling.compare import compare_at
from verl_isocompute.scaling.curve import CurveError, reward_curve_entries
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.pipeline import FitConfig, run_fit
from verl_isocompute.scaling.reward_curves import reward_curves
from verl_isocompute.scaling.saturating import bin_points, fit_saturating
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep
from test_scaling_fit import _logs


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    """`isocompute fit` of the committed pilot with the sweep's own options (bootstrap over seeds: the default)."""
    out = tmp_path_factory.mktemp("pilot_fit")
    outcome = run_fit([real_pilot.FIXTURE / "cells"], out, real_pilot.options())
    return outcome.result, out


def test_pilot_curves_on_their_bounds_are_flagged_in_the_report_fits_and_curve_file(pilot):
    """n = 2 and n = 8 step from R0 to their plateau right at the first validation: beta sits on its upper bound
    (20). n = 4 is flat from its first point on (not on a bound once refitted from every start)."""
    result, out = pilot
    assert {key[0]: f.at_bounds for key, f in result.flags.items()} == {2: {"beta": "upper"}, 4: {}, 8: {"beta": "upper"}}
    assert result.curves[(2,)].beta == pytest.approx(20.0) and result.curves[(8,)].beta == pytest.approx(20.0)
    fits = pd.read_csv(out / "fits.csv", keep_default_na=False).set_index("n")
    assert fits["at_bounds"].to_dict() == {2: "beta=upper", 4: "", 8: "beta=upper"}
    stored = json.loads((out / "curve.json").read_text())["reward_curves"]["curves"]
    assert {c["n"]: c["at_bounds"] for c in stored} == {2: {"beta": "upper"}, 4: {}, 8: {"beta": "upper"}}
    report = (out / "report.md").read_text()
    assert "n=2 (beta = 20, its upper bound); n=8 (beta = 20, its upper bound)" in report
    assert "| fitted | beta=upper |" in report  # the per-group table's column


def test_pilot_r0_and_c_mid_are_reported_not_identified(pilot):
    """Every point of the pilot is at C >= 64, after the rise: no group sees the start of its curve (R0) or where
    it rises (C_mid, 0.84 to 64 against points from 64 to 512)."""
    result, out = pilot
    assert all(f.not_identified == ("R0", "C_mid") for f in result.flags.values()) and len(result.flags) == 3
    assert all(c.C_mid < 64.0 for c in result.curves.values())
    stored = json.loads((out / "curve.json").read_text())["reward_curves"]["curves"]
    assert [c["not_identified"] for c in stored] == [["R0", "C_mid"]] * 3
    report = (out / "report.md").read_text()
    assert "R0 shared by all groups = 0.4212 (not identified by the data" in report
    assert "R0 (the reward at C -> 0, shared = 0.4212) is not identified by the data" in report
    assert "C_mid is not identified by the data for n=2, n=4, n=8" in report
    # read back through the contract's loader, as `allocate --compare` does
    from verl_isocompute.scaling.reward_curves import reward_curves_from

    loaded = reward_curves_from(load_curve(out / "curve.json"), "curve.json")
    assert [(rc.n, rc.at_bounds, rc.not_identified) for rc in loaded] == [
        (2, {"beta": "upper"}, ("R0", "C_mid")), (4, {}, ("R0", "C_mid")), (8, {"beta": "upper"}, ("R0", "C_mid"))]


def test_pilot_shared_r0_refit_finds_the_optimum_of_every_start():
    """With R0 shared, n = 4's refit from the free fit alone stopped at SSE 0.024950 (beta = 0.02, A = 0.96,
    R_4(512) = 0.7146); from the free fit's starts it reaches 0.023651 (flat at 0.7129, below n = 2's 0.7321 at
    every C), so `--compare` marks n = 4 "(never)" at C = 512."""
    frontier, result = real_pilot.fit()
    r0 = result.settings["r0"]
    for key, curve in result.curves.items():
        pts = frontier.points[frontier.points["n"] == key[0]]
        c, y = pts["C"].to_numpy(), pts["reward"].to_numpy()
        best, _ = fit_saturating(*bin_points(c, y), r0=r0)
        assert np.sum((curve(c) - y) ** 2) <= np.sum((best(c) - y) ** 2) + 1e-9, key
    pts = frontier.points[frontier.points["n"] == 4]
    sse = float(np.sum((result.curves[(4,)](pts["C"].to_numpy()) - pts["reward"].to_numpy()) ** 2))
    assert sse == pytest.approx(0.023651, abs=1e-6)
    assert float(result.curves[(4,)](512.0)) == pytest.approx(0.7129, abs=1e-4)
    row = compare_at(reward_curves(result), [512.0]).set_index("n").loc[4]
    assert bool(row["never_reached"])


def test_pilot_with_one_run_per_n_says_run_to_run_variation_is_not_measured(pilot):
    """The sweep asked for 200 resamples; over seeds there is nothing to resample with one run per n, so the fit
    makes none and says so, instead of printing the estimate as its own interval."""
    result, out = pilot
    assert result.settings["bootstrap_over"] == "seeds" and result.settings["bootstrap"] == 200
    assert result.ci is None and result.bootstrap["succeeded"] == 0
    assert any("run-to-run variation is not measured" in w for w in result.warnings)
    saved = json.loads((out / "curve.json").read_text())
    assert "ci95" not in saved["provenance"] and saved["provenance"]["bootstrap_over"] == "seeds"
    assert "none made, one run per group (run-to-run variation not measured)" in (out / "report.md").read_text()


def _width(result) -> float:
    ci = result.ci.set_index("param")
    return float((ci["high"] - ci["low"]).abs().max())


def test_bootstrap_over_seeds_resamples_each_n_among_its_own_runs():
    """Two identical copies of every run: no run-to-run variation, so a resample of each n's own runs is the data
    again and the intervals collapse onto the estimate. Drawing from all runs together leaves values of n out,
    which moves n*(C) although no seed differs. Seeds that differ (noise 0.01) give intervals with width."""
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep(curves_for(truth), noise=0.01, seed=6)
    twins = pd.concat([sweep, sweep.assign(run=sweep["run"] + "_copy")], ignore_index=True)
    frontier = build_frontier(_logs(twins))
    over_seeds = fit_frontier(frontier, bootstrap=30, seed=3)
    over_runs = fit_frontier(frontier, bootstrap=30, seed=3, bootstrap_over="runs")
    assert over_seeds.bootstrap["succeeded"] == 30 and _width(over_seeds) < 1e-6
    assert _width(over_runs) > 0.05
    seeds = synthetic_sweep(curves_for(truth), runs_per_n=2, noise=0.01, seed=6)
    differing = fit_frontier(build_frontier(_logs(seeds)), bootstrap=30, seed=3)
    assert differing.bootstrap["succeeded"] >= 25 and _width(differing) > 1e-3
    assert not [w for w in differing.warnings if "single run" in w]


def test_groups_with_a_single_run_are_named_when_others_have_seeds():
    truth = load_curve("paper:qwen2.5-7b-easy")
    sweep = synthetic_sweep(curves_for(truth), runs_per_n=2, noise=0.01, seed=6)
    sweep = sweep[~sweep["run"].isin(["n8_bp32_s1", "n16_bp32_s1"])]
    result = fit_frontier(build_frontier(_logs(sweep)), bootstrap=20, seed=3)
    said = [w for w in result.warnings if "cannot resample" in w]
    assert len(said) == 1 and said[0].startswith("n=8, n=16: a single run")
    assert result.bootstrap["succeeded"] > 0  # the other groups' seeds are still resampled


def test_bootstrap_over_is_an_option_of_the_command_and_checked():
    import argparse

    from verl_isocompute.commands.fit import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = " ".join(parser.format_help().split())  # argparse wraps lines
    assert "--bootstrap-over {seeds,runs}" in text and "run-to-run variation" in text
    assert FitConfig().bootstrap_over == "seeds"
    with pytest.raises(ScalingError, match=r"--bootstrap-over must be seeds or runs, got 'problems'"):
        FitConfig(bootstrap_over="problems").check()


def _entry(**extra):
    return {"n": 8, "R0": 0.2, "A": 0.6, "C_mid": 1e4, "beta": 1.0, "c_range": [1e3, 1e6], **extra}


def test_curve_files_without_flags_still_load_and_bad_flags_are_refused():
    """A curve file written before the flags (no at_bounds / not_identified) reads as a curve with none; a flag
    that names no parameter of the curve, or no side, is refused naming the field."""
    old = reward_curve_entries({"curves": [_entry()]}, "val/avg@4", "old.json")
    assert old[0]["at_bounds"] == {} and old[0]["not_identified"] == ()
    new = reward_curve_entries({"curves": [_entry(at_bounds={"beta": "upper"}, not_identified=["C_mid"])]},
                               "val/avg@4", "new.json")
    assert new[0]["at_bounds"] == {"beta": "upper"} and new[0]["not_identified"] == ("C_mid",)
    with pytest.raises(CurveError, match=r"new.json: reward_curves.curves\[0\] \(n=8\): at_bounds must map"):
        reward_curve_entries({"curves": [_entry(at_bounds={"k": "upper"})]}, "val/avg@4", "new.json")
    with pytest.raises(CurveError, match="not_identified must be a list"):
        reward_curve_entries({"curves": [_entry(not_identified="R0")]}, "val/avg@4", "new.json")


@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard"])
def test_curves_the_points_do_determine_carry_no_flags(preset):
    """Synthetic sweeps that see each curve rise from R0 to its plateau (C from 256 to 3e7): no flag, no warning
    about bounds or identification (the flags do not fire on every fit)."""
    truth = load_curve(f"paper:{preset}")
    result = fit_frontier(build_frontier(_logs(synthetic_sweep(curves_for(truth), noise=0.01, seed=2))), bootstrap=0)
    assert len(result.flags) == 8 and not any(f.at_bounds or f.not_identified for f in result.flags.values())
    assert not [w for w in result.warnings if "bound" in w or "identified" in w]


def test_pilot_free_fits_on_their_bounds_are_flagged_within_the_tolerance():
    """With R0 per group, n = 4 is flat (R0 = A) with C_mid and beta on their bounds (beta = 0.02); the solver
    stops n = 2's beta at 19.96, short of 20 on a flat cost, and the tolerance still calls it the bound."""
    frontier, _ = real_pilot.fit()
    result = fit_frontier(frontier, shared_r0=False, bootstrap=0)
    assert 19.9 < result.curves[(2,)].beta < 20.0 - 1e-3
    assert {key[0]: f.at_bounds for key, f in result.flags.items()} == {
        2: {"beta": "upper"}, 4: {"R0": "upper", "C_mid": "upper", "beta": "lower"}, 8: {"beta": "upper"}}
    assert result.curves[(4,)].beta == pytest.approx(0.02, abs=1e-6)
    assert "R0" in result.flags[(4,)].not_identified
