"""The run-log contract: writer and tolerant reader (pure; no verl)."""

import json

import numpy as np
import pytest

from verl_isocompute import runlog
from verl_isocompute.jsonl import JsonlError, read_jsonl
from verl_isocompute.runlog import (
    RUN_LOG,
    RunLogError,
    RunLogWriter,
    read_run_log,
    write_run_log,
)


def _row(step, rollouts=0, **extra):
    return {"step": step, "n": 4, "b_problem": 2, "rollouts": rollouts, "tokens": 10 * rollouts, "epoch": step / 8, **extra}


def test_writer_header_once_rows_in_order_and_numpy_values(tmp_path):
    log = RunLogWriter(tmp_path)
    log.write_header({"recipe": "r", "n": 4})
    log.write_header({"recipe": "other"})  # a resumed run keeps its own header
    log.append(_row(0))
    log.append(_row(1, rollouts=np.int64(8), lr=np.float32(0.5)))
    lines = (tmp_path / RUN_LOG).read_text().splitlines()
    assert json.loads(lines[0]) == {"header": {"recipe": "r", "n": 4}}
    parsed = read_run_log(tmp_path / RUN_LOG)
    assert parsed.header["recipe"] == "r"
    assert [r["step"] for _, r in parsed.rows] == [0, 1]
    assert parsed.rows[1][1]["rollouts"] == 8 and parsed.rows[1][1]["lr"] == 0.5
    assert parsed.steps() == [1]


def test_rows_missing_contract_keys_are_refused(tmp_path):
    with pytest.raises(RunLogError, match="lacks rollouts"):
        RunLogWriter(tmp_path).append({"step": 1, "n": 4, "b_problem": 2, "tokens": 0, "epoch": 0})


def test_reader_skips_only_a_cut_last_line(tmp_path):
    path = write_run_log(tmp_path, {"recipe": "r"}, [_row(0), _row(1, 8)])
    with open(path, "a") as fh:
        fh.write('{"step": 2, "n": 4, "b_pro')  # a kill mid-write
    parsed = read_run_log(path)
    assert parsed.cut_last_line and [r["step"] for _, r in parsed.rows] == [0, 1]
    path.write_text('{"step": 0, "n"\n' + path.read_text())
    with pytest.raises(RunLogError, match=r"line 1: not valid JSON"):
        read_run_log(path)


def test_reader_accepts_a_byte_order_mark_and_names_non_objects(tmp_path):
    path = tmp_path / RUN_LOG
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"header": {}}).encode() + b"\n" + json.dumps(_row(1)).encode() + b"\n")
    assert read_run_log(path).steps() == [1]
    path.write_text(json.dumps(_row(1)) + "\n[1, 2]\n")
    with pytest.raises(RunLogError, match="line 2: expected a JSON object"):
        read_run_log(path)
    with pytest.raises(JsonlError, match="not a regular file"):
        read_jsonl(tmp_path)


def test_resume_drops_rows_past_the_step_and_returns_the_counters(tmp_path):
    path = write_run_log(tmp_path, {"recipe": "r"}, [_row(0), _row(1, 8), _row(2, 16), _row(3, 24)])
    with open(path, "a") as fh:
        fh.write('{"step": 4, "n": 4')
    last = RunLogWriter(tmp_path).resume(2)
    assert last["rollouts"] == 16 and last["tokens"] == 160
    parsed = read_run_log(path)
    assert not parsed.cut_last_line and [r["step"] for _, r in parsed.rows] == [0, 1, 2]
    assert parsed.header == {"recipe": "r"}
    assert RunLogWriter(tmp_path).resume(0) is None  # a fresh start counts from zero


def test_logged_steps_from_our_log_or_verls_file_logger(tmp_path):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    write_run_log(ours, {}, [_row(0), _row(1, 8), _row(2, 16)])
    assert runlog.logged_steps(ours) == [1, 2]
    theirs.mkdir()
    lines = [{"step": 0, "data": {"val-core/x": 1}}, {"step": 1, "data": {"timing_s/step": 3.0}}]
    (theirs / runlog.VERL_METRICS).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert runlog.logged_steps(theirs) == [1]
    assert runlog.logged_steps(tmp_path / "none") == []


def test_verl_lines_and_training_steps_are_told_apart_once():
    """One reading of verl's file-logger lines for the run log, the resume check and the fit: the validation
    before training (step 0, no step timing) is not a training step; a line of another shape is not verl's."""
    from verl_isocompute.runlog import STEP_TIMING, is_training_step, verl_line

    assert verl_line({"step": 0, "data": {"val/avg@4": 0.1}}) == (0, {"val/avg@4": 0.1})
    assert verl_line({"step": 3, "rollouts": 12}) is None and verl_line([1, 2]) is None
    assert not is_training_step({"val/avg@4": 0.1}) and is_training_step({STEP_TIMING: 2.5})


def test_update_header_adds_fields_and_keeps_every_row(tmp_path):
    import re

    log = RunLogWriter(tmp_path)
    log.update_header(ended_at="x")  # no log yet: nothing to add to, nothing written
    assert not (tmp_path / RUN_LOG).exists()
    log.write_header({"n": 4, "started_at": runlog.utc_now()})
    log.append(_row(1, rollouts=8))
    log.update_header(ended_at=runlog.utc_now())
    parsed = read_run_log(tmp_path / RUN_LOG)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", parsed.header["ended_at"])
    assert parsed.header["n"] == 4 and parsed.header["started_at"] <= parsed.header["ended_at"]
    assert [r["rollouts"] for _, r in parsed.rows] == [8]


def test_train_problem_records_are_kept_up_to_the_resumed_step(tmp_path):
    writer = runlog.ProblemRecordsWriter(tmp_path, runlog.TRAIN_PROBLEMS)
    for step in (1, 2, 3):
        writer.append([{"step": step, "problem": str(step), "k": 4, "correct": 1}])
    writer.resume(2)  # steps 3+ are trained again after a resume from step 2
    writer.append([{"step": 3, "problem": "9", "k": 4, "correct": 0}])
    lines = [json.loads(line) for line in (tmp_path / runlog.TRAIN_PROBLEMS).read_text().splitlines()]
    assert [(r["step"], r["problem"]) for r in lines] == [(1, "1"), (2, "2"), (3, "9")]
