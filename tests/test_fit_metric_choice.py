"""Which metric `isocompute fit` maximises when none is named, and what it says when the one named is missing
(issue 19, section 5): runs with our pieces on verl's ppo_trainer validate with val_kwargs.n=1 and log
val/avg@1, not the default val/avg@4; verl's own logs carry ~200 metric names, the validation ones last
alphabetically."""

from __future__ import annotations

import json

from verl_isocompute.commands import cli
from verl_isocompute.scaling import load_curve
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep, write_run_logs


def _sweep_logging(tmp_path, metric: str):
    sweep = synthetic_sweep(curves_for(load_curve("paper:qwen2.5-7b-easy")), points_per_run=12, noise=0.0)
    write_run_logs(sweep.rename(columns={"val/avg@4": metric}), tmp_path / "runs")
    return tmp_path / "runs"


def test_without_metric_fit_takes_the_logged_val_avg_at_k(tmp_path, capsys):
    runs = _sweep_logging(tmp_path, "val/avg@1")
    assert cli.main(["fit", str(runs), "--out", str(tmp_path / "fit"), "--bootstrap", "0"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "fit" / "curve.json").read_text())["metric"] == "val/avg@1"
    assert "note: fitting val/avg@1, the val/avg@k these runs logged" in capsys.readouterr().err
    # a metric named on the command line is taken as named
    assert cli.main(["fit", str(runs), "--out", str(tmp_path / "fit4"), "--metric", "val/avg@4"]) == 2
    assert "'val/avg@4' is not in the logs" in capsys.readouterr().err


def test_a_missing_metric_lists_every_validation_metric(tmp_path, capsys):
    validation = [f"val-core/math/reward/mean@{k}" for k in (1, 2, 4, 8)] + [f"val-aux/math/acc/mean@{k}" for k in (1, 2, 4)]
    training = [f"critic/values/q{i:03d}" for i in range(60)] + [f"actor/metric_{i:03d}" for i in range(140)]
    lines = [{"step": s, "data": {**{m: 0.1 for m in training}, **({m: 0.3 for m in validation} if s % 2 else {})}}
             for s in range(4)]
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "exp_n8_bp32.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli.main(["fit", str(tmp_path / "proj"), "--out", str(tmp_path / "fit"), "--metric", "val/avg@4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(m in err for m in validation), err
    assert err.index("val-core/math/reward/mean@8") < err.index("actor/metric_000")
    assert "and 167 training metrics (207 in all)" in err
