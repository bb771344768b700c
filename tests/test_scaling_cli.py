"""`isocompute fit`: outputs, exit codes, messages, and atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from verl_isocompute.commands.fit import main
from verl_isocompute.scaling import FitError, load_curve
from verl_isocompute.scaling import fit as fit_module
from verl_isocompute.scaling import plots as plots_module
from verl_isocompute.scaling.synthetic import (
    curves_for,
    synthetic_sweep,
    write_run_logs,
)

FIXTURES = Path(__file__).parent / "fixtures" / "scaling"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    truth = load_curve("paper:qwen2.5-7b-easy")
    write_run_logs(synthetic_sweep(curves_for(truth), points_per_run=80, noise=0.01, seed=11), root)
    return root


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_fit_writes_every_output(sweep_dir, tmp_path, capsys):
    out = tmp_path / "fit"
    # one run per n: only the bootstrap over all runs makes intervals (over seeds it says they are not measured)
    code = main([str(sweep_dir), "--out", str(out), "--bootstrap", "40", "--bootstrap-over", "runs",
                 "--compare", "paper:qwen2.5-7b-easy"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    names = {p.name for p in out.iterdir()}
    assert names == {"curve.json", "frontier.csv", "records.csv", "fits.csv", "report.md", "frontier.png", "n_star.png",
                     "compare.json", "compare.csv", "compare.png"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fit.tmp")]  # staging dir removed

    curve = load_curve(out / "curve.json")  # the contract's own loader accepts it
    assert curve.compute_unit == "rollouts" and curve.metric == "val/avg@4"
    assert curve.n_grid == (8, 16, 32, 64, 128, 256, 512, 1024)
    assert curve.c_range[0] < 1e5 < 1e7 < curve.c_range[1]
    assert curve.provenance["num_runs"] == 8 and curve.provenance["command"].startswith("isocompute fit ")
    assert set(curve.provenance["ci95"]) == {"L", "k", "log10_C0", "b"}
    assert f"L={curve.L:.3f}" in captured.out

    grid = pd.read_csv(out / "frontier.csv")
    assert {"C", "reward", "n_star", "log2_n_star_smoothed", "log2_n_star_fit", "residual"} <= set(grid.columns)
    assert grid["C"].is_monotonic_increasing
    records = pd.read_csv(out / "records.csv")
    assert records["reward"].is_monotonic_increasing and set(records["n"]) <= set(curve.n_grid)
    report = (out / "report.md").read_text()
    assert "paper:qwen2.5-7b-easy" in report and "## Per-group fits" in report and f"{curve.L:.3f}" in report
    for png in ("frontier.png", "n_star.png"):
        assert (out / png).read_bytes().startswith(PNG_MAGIC)


def test_no_runs_found_exits_2_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code = main([str(tmp_path / "empty"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "no runs found" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_log_axes_are_labelled_in_plain_text_and_set_labels_are_kept():
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    ax, narrow = fig.subplots(1, 2)
    narrow.plot([1.5e3, 8.5e3], [0, 1])
    narrow.set_xscale("log")  # under a decade: the minor ticks are labelled too
    ax.plot([1e2, 1e5], [1, 8])
    ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_yticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    ax.set_title("a title")
    plots_module.finish_figure(fig)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert {"10²", "10³", "10⁴", "10⁵"} <= set(labels) and not any("$" in t for t in labels)  # not $10^{2}$
    assert "2×10³" in [t.get_text() for t in narrow.xaxis.get_minorticklabels()]
    assert ax.xaxis.get_major_formatter()(1e-3) == "10⁻³"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "4", "8"]


def test_missing_metric_lists_metrics(sweep_dir, tmp_path, capsys):
    code = main([str(sweep_dir), "--out", str(tmp_path / "out"), "--metric", "val/pass@8"])
    err = capsys.readouterr().err
    assert code == 2 and "'val/pass@8' is not in the logs" in err and "val/avg@4" in err


def test_compare_in_another_compute_unit_is_refused(sweep_dir, tmp_path, capsys):
    code = main([str(sweep_dir), "--out", str(tmp_path / "out"), "--compare", "paper:qwen2.5-7b-easy-tokens"])
    assert code == 2 and "--compute tokens" in capsys.readouterr().err
    code = main([str(sweep_dir), "--out", str(tmp_path / "out"), "--compare", "paper:nope"])
    assert code == 2 and "unknown preset" in capsys.readouterr().err


def test_nan_values_are_dropped_with_a_count(sweep_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    for log in sweep_dir.glob("*/isocompute.jsonl"):
        target = runs / log.parent.name / "isocompute.jsonl"
        target.parent.mkdir(parents=True)
        target.write_text(log.read_text())
    log = runs / "n8_bp32_s0" / "isocompute.jsonl"
    lines = log.read_text().splitlines()
    row = json.loads(lines[5])
    lines[5] = json.dumps({**row, "val/avg@4": float("inf")})
    row = json.loads(lines[6])
    lines[6] = json.dumps({**row, "val/avg@4": None})
    log.write_text("\n".join(lines) + "\n")
    assert main([str(runs), "--out", str(tmp_path / "out"), "--bootstrap", "0"]) == 0
    assert "dropped 2 NaN/inf values of val/avg@4" in (tmp_path / "out" / "report.md").read_text()


def test_one_value_of_n_writes_the_frontier_and_exits_1(tmp_path, capsys):
    truth = load_curve("paper:qwen2.5-7b-easy")
    write_run_logs(synthetic_sweep({64: curves_for(truth)[64]}, runs_per_n=2, points_per_run=40, seed=1), tmp_path / "runs")
    out = tmp_path / "out"
    out.mkdir()
    (out / "curve.json").write_text('{"old": true}')
    code = main([str(tmp_path / "runs"), "--out", str(out), "--bootstrap", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "one value of n" in err and "frontier was written" in err
    # not deleted, but set aside: it describes other runs, and a later `allocate` must not use it unknowingly
    assert not (out / "curve.json").exists() and (out / "curve.stale.json").read_text() == '{"old": true}'
    assert (out / "frontier.csv").exists() and (out / "frontier.png").exists()
    assert "No n*(C) curve was fitted" in (out / "report.md").read_text()
    assert "renamed `curve.stale.json`" in (out / "report.md").read_text()


def test_fit_that_does_not_converge_leaves_previous_outputs(sweep_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out), "--bootstrap", "0"]) == 0
    before = _snapshot(out)

    def no_convergence(*args, **kwargs):
        raise FitError("the n*(C) sigmoid fit did not converge from 6 starts")

    monkeypatch.setattr(fit_module, "fit_sigmoid", no_convergence)
    code = main([str(sweep_dir), "--out", str(out), "--bootstrap", "0", "--metric", "val/avg@4"])
    err = capsys.readouterr().err
    assert code == 1 and "did not converge" in err and "untouched" in err
    assert _snapshot(out) == before


def test_failure_while_writing_leaves_previous_outputs(sweep_dir, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main([str(sweep_dir), "--out", str(out), "--bootstrap", "0"]) == 0
    before = _snapshot(out)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plots_module, "save_plots", disk_full)
    code = main([str(sweep_dir), "--out", str(out), "--bootstrap", "0", "--bucket", "0.02"])
    assert code == 2 and "No space left" in capsys.readouterr().err
    assert _snapshot(out) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp")]


def test_verl_logs_fit_end_to_end(tmp_path, capsys):
    code = main([str(FIXTURES / "verl"), "--out", str(tmp_path / "out"), "--metric", "val-core/math/reward/mean@4"])
    err = capsys.readouterr().err
    # two runs, n = 4 and n = 8, with 2 and 3 validation points: the frontier but no curve
    assert code == 1 and "Traceback" not in err
    report = (tmp_path / "out" / "report.md").read_text()
    assert "rollouts not logged: C derived" in report and "taken from the .hydra/config.yaml" in report
