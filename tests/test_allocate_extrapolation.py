"""No silent extrapolation (issue 43 item 4): a budget more than 2x outside the compute range a curve was fitted on
warns on stderr in every output format, the json carries it, and --strict refuses it (exit 2). Before, a curve
fitted on [16, 1,008] rollouts allocated 1e7 rollouts with one line of reason in the table and none elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_isocompute.commands import cli
from verl_isocompute.scaling.pipeline import FitConfig, run_fit

CELLS = Path(__file__).parent / "fixtures" / "nstar_cpu" / "cells"


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    out = tmp_path_factory.mktemp("fit")
    run_fit([CELLS], out, FitConfig(metric="train/reward", group_by="n", bootstrap=0))
    return str(out / "curve.json")


@pytest.mark.parametrize("fmt", ["table", "json", "overrides"])
def test_an_extrapolated_budget_warns_in_every_format(curve, fmt, capsys):
    assert cli.main(["allocate", "--curve", curve, "--budget", "1e7", "--b-problem", "8", "--format", fmt]) == 0
    captured = capsys.readouterr()
    assert "warning: C = 1e+07 is" in captured.err and "above the compute range the curve was fitted on" in captured.err
    if fmt == "json":
        beyond = json.loads(captured.out)["extrapolation"]
        assert beyond["C"] == 1e7 and beyond["factor"] > 2 and beyond["c_range"][0] == 16.0


def test_strict_refuses_an_extrapolated_budget_and_a_budget_inside_the_range_passes(curve, capsys):
    assert cli.main(["allocate", "--curve", curve, "--budget", "1e7", "--b-problem", "8", "--strict"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--strict refuses an extrapolation beyond 2x" in err
    assert cli.main(["allocate", "--curve", curve, "--budget", "512", "--b-problem", "8", "--strict",
                     "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and json.loads(captured.out)["extrapolation"] is None
    # within 2x of the range's end: read a little past the data, as the grid's ends are; said in the json only
    assert cli.main(["allocate", "--curve", curve, "--budget", "1500", "--b-problem", "8", "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and 1 < json.loads(captured.out)["extrapolation"]["factor"] < 2


def test_the_curve_records_the_runs_lr_settings_and_allocate_uses_them(curve, capsys):
    """Issue 43 item 4: allocate printed the recipe default (lr 1.25e-7, 10 warm-up steps at n = 2) for a curve fitted
    on runs at lr 1.25e-6 with 2 warm-up steps, and curve.json did not record them."""
    settings = json.loads(Path(curve).read_text())["provenance"]["lr_settings"]
    assert (settings["lr_rule"], settings["warmup_steps"]) == ("sqrt", 2)
    assert {(r["lr"], r["batch_rollouts"]) for r in settings["runs"].values()} == {(1.25e-6, 16.0), (2.5e-6, 64.0)}
    assert cli.main(["allocate", "--curve", curve, "--budget", "512", "--b-problem", "8", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["n"] == 2 and got["lr"] == pytest.approx(1.25e-6) and got["warmup_steps"] == 2
    assert any(r.startswith("lr: the settings of the runs behind the curve") for r in got["reasons"])
    assert cli.main(["allocate", "--curve", curve, "--budget", "512", "--b-problem", "8", "--warmup-steps", "5",
                     "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["warmup_steps"] == 5 and any("not the settings of the runs behind the curve" in r for r in got["reasons"])


def test_a_multiplier_clamped_where_the_runs_start_reads_as_a_bound():
    """At C = 16 n = 8 (first step at 64 rollouts) read "<= 4x [4.00x, 9.83x]": resamples clamped at C_min / C were
    printed as values. They read "<= 4.00x" now; an end past the range still reads "past fit"."""
    from verl_isocompute.scaling.compare_spread import interval_text

    assert interval_text(4.0, 9.83, ".2f", "x", floor=4.0) == " [<= 4.00x, 9.83x]"
    assert interval_text(4.0, float("inf"), ".2f", "x", floor=4.0) == " [<= 4.00x, past fit]"
    assert interval_text(1.0, 1.5, ".2f", "x") == " [1.00x, 1.50x]"
