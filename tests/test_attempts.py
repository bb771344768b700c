"""A run directory across attempts (training/attempts.py), with verl's own file logger and no Ray: a new run
moves a previous run's files aside; a resume keeps verl's metrics up to the checkpoint (verl reopens its
file from scratch); a kill between the two loses nothing. The real kill + resume is in test_recipe_e2e.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from verl.utils.tracking import FileLogger

from verl_isocompute.runlog import RUN_LOG, TRAIN_PROBLEMS, VAL_PROBLEMS, VERL_METRICS, ProblemRecordsWriter, read_run_log
from verl_isocompute.scaling.run_logs import load_runs
from verl_isocompute.training import attempts


def _config(run_dir, logger=("console", "file"), **trainer):
    return OmegaConf.create({"trainer": {
        "logger": list(logger), "project_name": "p", "experiment_name": "e", "resume_mode": "auto",
        "default_local_dir": f"{run_dir}/checkpoints", "validation_data_dir": f"{run_dir}/validation",
        "rollout_data_dir": None, **trainer}})


def _verl_rows(path, steps):
    path.write_text("".join(json.dumps({"step": s, "data": {"isocompute/rollouts": 32 * s, "m": float(s)}}) + "\n" for s in steps))


@pytest.fixture
def metrics_path(tmp_path, monkeypatch):
    path = tmp_path / "run" / VERL_METRICS
    path.parent.mkdir()
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return path


def test_file_logger_path_follows_verls_rules(tmp_path, monkeypatch):
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path / "logs"))
    cfg = _config(tmp_path)
    assert attempts.file_logger_path(cfg) == tmp_path / "logs" / "p" / "e.jsonl"
    assert FileLogger("p", "e").filepath == str(tmp_path / "logs" / "p" / "e.jsonl")  # verl agrees
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "m.jsonl"))
    assert attempts.file_logger_path(cfg) == tmp_path / "m.jsonl"
    assert attempts.file_logger_path(_config(tmp_path, logger=["console"])) is None


def test_a_new_run_moves_the_previous_runs_records_aside(tmp_path, metrics_path, capsys):
    run_dir = metrics_path.parent
    (run_dir / RUN_LOG).write_text('{"header": {"n": 99}}\n{"step": 0}\n')
    _verl_rows(metrics_path, [0, 1])
    (run_dir / "validation").mkdir()
    (run_dir / "validation" / "7.jsonl").write_text("{}\n")
    (run_dir / VAL_PROBLEMS).write_text('{"step": 0}\n')
    (run_dir / TRAIN_PROBLEMS).write_text('{"step": 1}\n')
    (run_dir / "checkpoints" / "global_step_7").mkdir(parents=True)
    (run_dir / "data.parquet").write_text("not a record")  # anything else stays
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)

    assert attempts.move_previous_run(run_dir, attempts.run_files(_config(run_dir), run_dir), now) is not None
    dest = run_dir / "previous" / "20260102T030405Z"
    assert read_run_log(dest / RUN_LOG).header == {"n": 99}
    assert (dest / VERL_METRICS).is_file() and (dest / "validation" / "7.jsonl").is_file() and (dest / VAL_PROBLEMS).is_file()
    assert (dest / TRAIN_PROBLEMS).is_file()
    assert (dest / "checkpoints" / "global_step_7").is_dir()
    assert sorted(p.name for p in run_dir.iterdir()) == ["data.parquet", "previous"]

    (run_dir / RUN_LOG).write_text('{"header": {"n": 4}}\n')  # the next run in the same second: its own folder
    attempts.start_attempt(_config(run_dir), run_dir, resumed_step=0)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "a new run (trainer.resume_mode=auto, no checkpoint loaded)" in out[0] and "moved isocompute.jsonl" in out[0]
    assert len(list((run_dir / "previous").iterdir())) == 2


def test_a_new_run_in_an_empty_or_foreign_directory_moves_nothing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert attempts.move_previous_run(run_dir, attempts.run_files(_config(run_dir), run_dir)) is None
    elsewhere = _config(run_dir, default_local_dir=str(tmp_path / "ckpt"), validation_data_dir=str(run_dir))
    assert attempts.run_files(elsewhere, run_dir) == [run_dir / RUN_LOG, run_dir / VAL_PROBLEMS, run_dir / TRAIN_PROBLEMS]  # only what lies inside the run dir
    attempts.start_attempt(_config(run_dir), run_dir, resumed_step=0)
    assert capsys.readouterr().out == ""


def test_a_resume_keeps_verls_rows_up_to_the_checkpoint(metrics_path, capsys):
    """verl's FileLogger truncates its file when it opens it; the rows before the checkpoint come back, in
    verl's own format, and the re-run steps replace the ones after it. fit's reader sees every step."""
    _verl_rows(metrics_path, [0, 1, 2, 3])
    cfg = _config(metrics_path.parent)
    history = attempts.start_attempt(cfg, metrics_path.parent, resumed_step=2)
    assert "resuming from the checkpoint of step 2" in capsys.readouterr().out
    tracking = SimpleNamespace(logger={"file": FileLogger("p", "e")})  # what verl's Tracking holds: file emptied
    assert metrics_path.read_text() == ""
    history.restore(tracking)
    history.restore(tracking)  # once only (the trainer calls it from two hooks)
    for step in (2, 3, 4):  # the resumed run: validation at its first step, then steps 3 and 4
        tracking.logger["file"].log({"isocompute/rollouts": 32 * step, "m": 10.0 * step}, step)
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 2, 3, 4] and history.rows == 3
    assert rows[4]["data"]["m"] == 30.0  # step 3 of the first attempt (m = 3.0) is gone
    assert not metrics_path.with_name(metrics_path.name + attempts.ASIDE_SUFFIX).exists()
    steps = load_runs([metrics_path], n=4, b_problem=8).steps
    assert steps["step"].tolist() == [0, 1, 2, 3, 4] and steps["rollouts"].tolist() == [0, 32, 64, 96, 128]


def test_a_kill_before_the_rows_are_written_back_loses_nothing(metrics_path):
    _verl_rows(metrics_path, [0, 1, 2, 3])
    with open(metrics_path, "a") as fh:
        fh.write('{"step": 4, "da')  # the attempt was killed mid-line
    cfg = _config(metrics_path.parent)
    attempts.start_attempt(cfg, metrics_path.parent, resumed_step=2)
    FileLogger("p", "e").log({"m": 0.5}, 2)  # verl reopened the file and logged before the kill (no restore)
    history = attempts.start_attempt(cfg, metrics_path.parent, resumed_step=2)  # the next attempt
    tracking = SimpleNamespace(logger={"file": FileLogger("p", "e")})
    history.restore(tracking)
    assert [json.loads(line)["step"] for line in metrics_path.read_text().splitlines()] == [0, 1, 2]


def test_a_resume_without_a_metrics_file_or_file_logger(tmp_path, metrics_path):
    history = attempts.start_attempt(_config(metrics_path.parent), metrics_path.parent, resumed_step=2)
    history.restore(SimpleNamespace(logger={}))  # nothing to keep, nothing raised
    _verl_rows(metrics_path, [0, 1, 2])
    history = attempts.start_attempt(_config(metrics_path.parent), metrics_path.parent, resumed_step=2)
    history.restore(SimpleNamespace(logger={}))  # verl logs no file after all: the history stays where it was
    assert [json.loads(line)["step"] for line in metrics_path.read_text().splitlines()] == [0, 1, 2]


def test_a_resume_whose_checkpoint_step_was_never_logged_says_so():
    """verl saves step s's checkpoint before logging step s: a run stopped in between resumes past a step its
    counters never saw. One line says so (C cannot be recovered)."""
    assert attempts.missing_step_notice({"step": 2, "rollouts": 64}, 2, 32) is None
    assert attempts.missing_step_notice(None, 0, 32) is None  # a new run
    notice = attempts.missing_step_notice({"step": 1, "rollouts": 32}, 2, 32)
    assert notice.startswith("[isocompute] warning: the run log has no row for step 2") and "at least 32" in notice


def test_a_resume_keeps_the_per_problem_validations_up_to_the_checkpoint(tmp_path):
    writer = ProblemRecordsWriter(tmp_path)
    writer.append([{"step": 0, "problem": "1"}, {"step": 0, "problem": "2"}])
    writer.append([{"step": 2, "problem": "1"}])
    writer.append([{"step": 4, "problem": "1"}])
    writer.resume(2)
    assert [json.loads(line)["step"] for line in (tmp_path / VAL_PROBLEMS).read_text().splitlines()] == [0, 0, 2]
    # resumed from step 2 with validation before training: step 2 is validated again and replaces its records
    writer.append([{"step": 2, "problem": "1", "correct": 3}])
    lines = [json.loads(line) for line in (tmp_path / VAL_PROBLEMS).read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 0, 2] and lines[-1]["correct"] == 3
