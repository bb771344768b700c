"""Loading run logs: our isocompute.jsonl, verl's file logger, a wandb/tensorboard CSV export."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from verl_isocompute.scaling import ScalingError, build_frontier, load_runs
from verl_isocompute.scaling.points import validation_points

FIXTURES = Path(__file__).parent / "fixtures" / "scaling"


def _run(logs, fragment):
    (name,) = [r for r in logs.runs["run"] if r.endswith(fragment)]
    return logs.steps[logs.steps["run"] == name].set_index("step"), logs.runs.set_index("run").loc[name]


# --- our run log -----------------------------------------------------------------------------------


def test_isocompute_log_reads_header_steps_and_metrics():
    logs = load_runs([FIXTURES / "sweep"])
    assert len(logs.runs) == 2
    steps, meta = _run(logs, "easy_n16_bp32")
    assert (meta["n"], meta["b_problem"], meta["format"]) == (16, 32, "isocompute")
    assert meta["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert meta["rollouts_source"] == "log" and meta["tokens_source"] == "log"
    assert steps.loc[12, "rollouts"] == 12 * 16 * 32
    assert {"val/avg@4", "val/best@4", "val/worst@4", "val/avg@4/math", "train/reward"} <= set(logs.metrics)
    # validation only every 4th step
    assert steps["val/avg@4"].notna().sum() == 4


def test_isocompute_log_nonfinite_values_are_counted_and_dropped():
    logs = load_runs([FIXTURES / "sweep" / "easy_n16_bp32"])
    assert logs.nonfinite == {"train/reward": 1, "val/best@4": 1}
    steps, _ = _run(logs, "easy_n16_bp32")
    assert np.isnan(steps.loc[3, "train/reward"]) and np.isnan(steps.loc[8, "val/best@4"])
    points, notes = validation_points(logs, "val/best@4")
    assert len(points) == 2  # steps 4 and 12; step 0 is at C = 0, step 8 was null
    assert any("dropped 1 NaN/inf values of val/best@4" in note for note in notes)


def test_nonfinite_values_are_counted_when_every_line_has_every_key(tmp_path):
    # The common big-sweep log: every row carries every key, read as one table; NaN and Infinity are
    # json.dumps literals (orjson refuses them, json reads them), null is what orjson writes.
    rows = [{"step": s, "n": 4, "b_problem": 8, "rollouts": 32.0 * s, "tokens": 0.0, "epoch": 0.0,
             "val/avg@4": 0.5 + 0.01 * s, "train/reward": 0.4} for s in range(6)]
    lines = [json.dumps({"header": {"n": 4, "b_problem": 8}})] + [json.dumps(r) for r in rows]
    lines[2] = lines[2].replace('"val/avg@4": 0.51', '"val/avg@4": NaN')
    lines[3] = lines[3].replace('"train/reward": 0.4', '"train/reward": null')
    lines[4] = lines[4].replace('"val/avg@4": 0.53', '"val/avg@4": -Infinity')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "isocompute.jsonl").write_text("\n".join(lines) + "\n")
    logs = load_runs([tmp_path / "run"])
    assert logs.nonfinite == {"val/avg@4": 2, "train/reward": 1}
    steps, _ = _run(logs, "run")
    assert np.isnan(steps.loc[[1, 3], "val/avg@4"]).all() and np.isnan(steps.loc[2, "train/reward"])
    assert steps.loc[5, "val/avg@4"] == pytest.approx(0.55) and steps["val/avg@4"].notna().sum() == 4


def test_resumed_run_keeps_the_last_value_of_each_duplicate_step():
    logs = load_runs([FIXTURES / "sweep" / "easy_n64_bp32" / "isocompute.jsonl"])
    steps, meta = _run(logs, "easy_n64_bp32")
    assert meta["duplicate_steps"] == 2
    assert list(steps.index) == list(range(11))
    raw = [json.loads(line) for line in (FIXTURES / "sweep" / "easy_n64_bp32" / "isocompute.jsonl").read_text().splitlines()]
    last_step6 = [r for r in raw if r.get("step") == 6][-1]
    assert steps.loc[6, "val/avg@4"] == last_step6["val/avg@4"]
    assert any("duplicate steps" in note for note in logs.notes)


def test_compute_not_increasing_is_refused_and_derive_compute_fixes_it(tmp_path):
    lines = [
        {"step": 1, "n": 8, "b_problem": 32, "rollouts": 256, "val/avg@4": 0.4},
        {"step": 2, "n": 8, "b_problem": 32, "rollouts": 512, "val/avg@4": 0.45},
        {"step": 3, "n": 8, "b_problem": 32, "rollouts": 256, "val/avg@4": 0.5},  # counter restarted
    ]
    (tmp_path / "isocompute.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    logs = load_runs([tmp_path])
    with pytest.raises(ScalingError, match=r"rollouts does not increase.*--derive-compute"):
        build_frontier(logs)
    fixed = build_frontier(load_runs([tmp_path], derive_compute=True))
    assert fixed.points["C"].tolist() == [256.0, 512.0, 768.0]


def test_n_changing_mid_run_is_refused(tmp_path):
    lines = [{"step": 1, "n": 8, "b_problem": 32, "rollouts": 256}, {"step": 2, "n": 16, "b_problem": 32, "rollouts": 768}]
    (tmp_path / "isocompute.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    with pytest.raises(ScalingError, match="n changes mid-run"):
        load_runs([tmp_path])


def test_missing_rollouts_are_derived_and_said(tmp_path):
    lines = [{"header": {"n": 4, "b_problem": 8}}] + [{"step": s, "val/avg@4": 0.1 * s} for s in range(4)]
    (tmp_path / "isocompute.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    logs = load_runs([tmp_path])
    steps, meta = _run(logs, tmp_path.name)
    assert meta["rollouts_source"] == "derived" and meta["n_source"] == "header"
    assert steps["rollouts"].tolist() == [0, 32, 64, 96]
    assert any("rollouts not logged: C derived as step x n x b_problem" in note for note in build_frontier(logs).notes)


def test_truncated_last_line_is_skipped_other_bad_lines_are_refused(tmp_path):
    good = [{"step": s, "n": 4, "b_problem": 8, "rollouts": 32 * s, "val/avg@4": 0.1} for s in range(3)]
    text = "\n".join(json.dumps(x) for x in good)
    (tmp_path / "isocompute.jsonl").write_text(text + '\n{"step": 3, "n": 4, "b_pro')
    logs = load_runs([tmp_path])
    assert len(logs.steps) == 3 and any("cut off" in note for note in logs.notes)
    (tmp_path / "isocompute.jsonl").write_text('{"step": 0, "n"\n' + text)
    with pytest.raises(ScalingError, match="line 1: not valid JSON"):
        load_runs([tmp_path])


# --- verl's file logger ----------------------------------------------------------------------------


def test_verl_file_logger_settings_from_hydra_config_and_from_name():
    logs = load_runs([FIXTURES / "verl"])
    assert len(logs.runs) == 2  # the validation-generations dump is not a run
    steps, meta = _run(logs, "sweep_a")
    assert (meta["n"], meta["n_source"]) == (8, ".hydra/config.yaml")
    assert (meta["b_problem"], meta["b_problem_source"]) == (32, ".hydra/config.yaml")
    assert meta["rollouts_source"] == "derived"
    assert steps.loc[8, "rollouts"] == 8 * 8 * 32
    # tokens: running sum of response_length/mean * n * b_problem
    lengths = steps.loc[1:, "response_length/mean"]
    assert steps.loc[8, "tokens"] == pytest.approx(float(lengths.sum()) * 8 * 32)
    steps, meta = _run(logs, "qwen_easy_n4_bp16")
    assert (meta["n"], meta["b_problem"], meta["n_source"]) == (4, 16, "run name")
    assert any("taken from the run name" in note for note in logs.notes)
    notes = build_frontier(logs, metric="val-core/math/reward/mean@4", compute="tokens").notes
    assert any("tokens not logged: C derived as the running sum of response_length/mean" in note for note in notes)
    assert not any("rollouts not logged" in note for note in notes)
    assert logs.nonfinite["val-core/math/reward/mean@4"] == 1  # orjson writes NaN as null


def test_verl_file_logger_overrides_and_missing_settings(tmp_path):
    log = tmp_path / "experiment.jsonl"
    shutil.copy(FIXTURES / "verl" / "sweep_a" / "isocompute" / "sweep_a.jsonl", log)
    with pytest.raises(ScalingError, match=r"does not say n; pass --run-table FILE .*--n"):
        load_runs([log])
    logs = load_runs([log], n=16, b_problem=64)
    _, meta = _run(logs, "experiment")
    assert (meta["n"], meta["n_source"], meta["b_problem"]) == (16, "--n", 64)
    frontier = build_frontier(logs, metric="val-core/math/reward/mean@4")
    assert frontier.points["C"].min() == 2 * 16 * 64


# --- CSV export ------------------------------------------------------------------------------------


def test_wandb_csv_export_splits_runs_and_reads_config_columns():
    logs = load_runs([FIXTURES / "wandb_export.csv"])
    assert sorted(logs.runs["n"]) == [8, 32]
    assert set(logs.runs["b_problem"]) == {64}
    assert "tags" not in logs.metrics  # a text column is not a metric
    assert logs.nonfinite == {"val/avg@4": 1, "train/reward": 1}
    steps, _ = _run(logs, "run-n8")
    assert steps["val/avg@4"].notna().sum() == 4  # steps 0, 2, 6, 8 (step 4 was NaN)
    assert steps.loc[8, "rollouts"] == 8 * 8 * 64


def test_tensorboard_scalar_export_gets_a_clear_message():
    with pytest.raises(ScalingError, match="TensorBoard single-scalar export"):
        load_runs([FIXTURES / "tensorboard_scalar.csv"])


# --- discovery and bad input -----------------------------------------------------------------------


def test_runs_found_recursively_and_passed_twice_are_read_once():
    logs = load_runs([FIXTURES, FIXTURES / "sweep" / "easy_n16_bp32"])
    # two of ours and two verl logs; CSVs are read only when named
    assert sorted(logs.runs["format"]) == ["isocompute", "isocompute", "verl", "verl"]


def test_no_runs_found(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    with pytest.raises(ScalingError, match="no runs found"):
        load_runs([tmp_path])
    with pytest.raises(ScalingError, match="does not exist"):
        load_runs([tmp_path / "missing"])
    with pytest.raises(ScalingError, match="not a run log"):
        load_runs([tmp_path / "notes.txt"])


def test_missing_metric_lists_the_metrics_that_exist():
    logs = load_runs([FIXTURES / "verl"])
    with pytest.raises(ScalingError, match=r"'val/avg@4' is not in the logs.*val-core/math/reward/mean@4"):
        build_frontier(logs, metric="val/avg@4")


def test_tokens_requested_but_not_logged():
    logs = load_runs([FIXTURES / "wandb_export.csv"])
    with pytest.raises(ScalingError, match="tokens are not logged.*--compute rollouts"):
        build_frontier(logs, compute="tokens")


def test_run_without_the_metric_is_left_out_and_said(tmp_path):
    for name, metric in (("a_n8_bp32", "val/avg@4"), ("b_n16_bp32", "val/best@4")):
        lines = [{"step": s, "n": 8, "b_problem": 32, "rollouts": 256 * s, metric: 0.1 * s} for s in range(1, 4)]
        (tmp_path / name).mkdir()
        (tmp_path / name / "isocompute.jsonl").write_text("\n".join(json.dumps(x) for x in lines))
    frontier = build_frontier(load_runs([tmp_path]))
    assert frontier.points["run"].str.endswith("a_n8_bp32").all()
    assert any("no values of val/avg@4 at C > 0, run left out" in note and "b_n16_bp32" in note for note in frontier.notes)
