"""Bad input to `isocompute fit`, `isocompute allocate` and curve files (issue 9, section 6): one row per class.

Each row builds its input from a small synthetic sweep whose answer is known, runs the real command
(`isocompute <command> ...` through the console entry, in this process where it cannot hang and in a
subprocess where it could), and asserts the exit status and the fragment of the one-line message that
names the problem. A silently different answer (exit 0 after dropping a column, a run or a point, or
re-deriving C) is what these rows exist to catch.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from verl_isocompute.commands import cli
from verl_isocompute.scaling import load_curve
from verl_isocompute.scaling.synthetic import (
    curves_for,
    synthetic_sweep,
    write_run_logs,
)

EASY = load_curve("paper:qwen2.5-7b-easy")
RUN = "n8_bp32_s0"  # the run whose log a row damages
LINE = 5  # ... at this line (1 = header, 2 = step 0, 5 = a validation step at C > 0)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sweep")
    write_run_logs(synthetic_sweep(curves_for(EASY), points_per_run=30, noise=0.01, seed=11), root)
    return root


def _copy(sweep: Path, dest: Path) -> Path:
    for log in sweep.glob("*/isocompute.jsonl"):
        target = dest / log.parent.name / log.name
        target.parent.mkdir(parents=True)
        target.write_bytes(log.read_bytes())
    return dest


def _set(key: str, value, line: int = LINE) -> Callable[[Path, Path], list[str]]:
    """A row's input: the sweep with ``key`` set to ``value`` (JSON text) on one line of one run's log."""

    def build(sweep: Path, tmp: Path) -> list[str]:
        runs = _copy(sweep, tmp / "runs")
        log = runs / RUN / "isocompute.jsonl"
        lines = log.read_text().splitlines()
        row = json.loads(lines[line - 1])
        row[key] = "__VALUE__"
        lines[line - 1] = json.dumps(row).replace('"__VALUE__"', value)
        log.write_text("\n".join(lines) + "\n")
        return [str(runs)]

    return build


def _csv(text: str, name: str = "sweep.csv", encoding: str = "utf-8") -> Callable[[Path, Path], list[str]]:
    def build(sweep: Path, tmp: Path) -> list[str]:
        path = tmp / name
        path.write_text(text, encoding=encoding)
        return [str(path)]

    return build


def _sweep_as_is(sweep: Path, tmp: Path) -> list[str]:
    return [str(_copy(sweep, tmp / "runs"))]


def _with_bom(sweep: Path, tmp: Path) -> list[str]:
    runs = _copy(sweep, tmp / "runs")
    log = runs / RUN / "isocompute.jsonl"
    log.write_bytes(b"\xef\xbb\xbf" + log.read_bytes())
    return [str(runs)]


# A sweep CSV with 4 values of n, 6 validation points each: enough for a curve.
_CSV_ROWS = [
    f"{run},{n},32,{step},{step * n * 32},{0.4 + 0.05 * step / 6 * (1 + n / 64):.4f}"
    for run, n in (("a", 4), ("b", 8), ("c", 16), ("d", 32)) for step in range(1, 7)
]
CSV_HEADER = "run,n,b_problem,step,rollouts,val/avg@4"
GOOD_CSV = "\n".join([CSV_HEADER, *_CSV_ROWS]) + "\n"


# val/avg@4 holds only text (the scores went to another column): a text column, refused when it is the metric
TEXT_METRIC_CSV = "\n".join(
    [CSV_HEADER + ",score", *(row.rsplit(",", 1)[0] + ",n/a," + row.rsplit(",", 1)[1] for row in _CSV_ROWS)]
) + "\n"


def _csv_with(column: int, value: str) -> str:
    rows = list(_CSV_ROWS)
    cells = rows[1].split(",")
    cells[column] = value
    rows[1] = ",".join(cells)
    return "\n".join([CSV_HEADER, *rows]) + "\n"  # the changed row is line 3 of the file


@dataclass
class Row:
    name: str
    build: Callable[[Path, Path], list[str]]
    args: tuple[str, ...] = ()
    code: int = 2
    message: str = ""
    extra: dict = field(default_factory=dict)


FIT_ROWS = [
    # one non-numeric cell: reported by file, line and key, never a dropped column or run, never C re-derived
    Row("string in rollouts", _set("rollouts", '"x"'), message=f"line {LINE}: rollouts is 'x', not a number"),
    Row("string in the metric", _set("val/avg@4", '"x"'), message=f"line {LINE}: val/avg@4 is 'x', not a number"),
    Row("string in step", _set("step", '"4"'), message=f"line {LINE}: step is '4', not a number"),
    Row("boolean in the metric", _set("val/avg@4", "true"), message=f"line {LINE}: val/avg@4 is True, not a number"),
    Row("list in n", _set("n", "[8]"), message=f"line {LINE}: n is [8], not a number"),
    Row("csv: text in rollouts", _csv(_csv_with(4, "lots")), message="line 3: rollouts is 'lots', not a number"),
    Row("csv: text in the metric", _csv(_csv_with(5, "n/a")), message="line 3: val/avg@4 is 'n/a', not a number"),
    Row("csv: the metric is all text", _csv(TEXT_METRIC_CSV),
        message="val/avg@4 is 'n/a', not a number: val/avg@4 holds no number in that run"),
    # rewards outside the metric's range [0, 1]: refused, naming the file and the step
    Row("reward above 1", _set("val/avg@4", "7.0"), message="step 4: val/avg@4 = 7 is outside [0, 1]"),
    Row("reward below 0", _set("val/avg@4", "-0.25"), message="step 4: val/avg@4 = -0.25 is outside [0, 1]"),
    # compute: finite, > 0 after step 0, below the documented maximum
    Row("compute of 1e300", _set("rollouts", "1e300", line=32), message="rollouts = 1e+300 at step"),
    Row("compute of inf", _set("rollouts", "Infinity"), message=f"line {LINE}: rollouts is inf, not a finite number"),
    Row("negative compute", _set("rollouts", "-5", line=2), message="rollouts is negative"),
    # options: one line each
    Row("--bucket nan", _sweep_as_is, ("--bucket", "nan"), message="--bucket must be a finite number >= 0, got nan"),
    Row("--bucket inf", _sweep_as_is, ("--bucket", "inf"), message="--bucket must be a finite number >= 0, got inf"),
    Row("--bucket negative", _sweep_as_is, ("--bucket=-0.01",), message="--bucket must be a finite number >= 0"),
    Row("--seed -1", _sweep_as_is, ("--bootstrap", "40", "--seed=-1"), message="--seed must be an integer >= 0, got -1"),
    # issue 46: 1 or 2 resamples printed "95 %" intervals (one excluding its own estimate)
    Row("--bootstrap 1", _sweep_as_is, ("--bootstrap", "1"),
        message="--bootstrap must be 0 (no intervals) or at least 40, got 1 (the fewest resamples that give a 95 %"),
    Row("--bootstrap 2", _sweep_as_is, ("--bootstrap", "2"), message="--bootstrap must be 0 (no intervals) or at least 40"),
    Row("--bootstrap 39", _sweep_as_is, ("--bootstrap", "39"), message="--bootstrap must be 0 (no intervals) or at least 40"),
    Row("--ema (removed)", _sweep_as_is, ("--ema", "0.8"), message="--ema (fit: ema) was removed: it smoothed per step, a lag that grows with n; use --half-life C"),
    Row("--half-life negative", _sweep_as_is, ("--half-life=-1",), message="--half-life must be a finite number >= 0"),
    Row("--k-max nan", _sweep_as_is, ("--k-max", "nan"), message="--k-max must be a finite number > 0.001"),
    Row("--window 0", _sweep_as_is, ("--window", "0"), message="--window must be an integer >= 1"),
    Row("--n 0", _csv(GOOD_CSV.replace("run,n,", "run,nn,")), ("--n", "0"), message="--n must be an integer >= 1"),
    # file shapes
    Row("header-only csv", _csv(CSV_HEADER + "\n"), message="has a header line but no rows"),
    Row("csv with a BOM", _csv(GOOD_CSV, encoding="utf-8-sig"), code=0),
    Row("run log with a BOM", _with_bom, code=0),
]


def _fit(capsys, inputs: list[str], out: Path, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["fit", *inputs, "--out", str(out), "--bootstrap", "0", *args])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("row", FIT_ROWS, ids=[r.name for r in FIT_ROWS])
def test_fit_bad_inputs(sweep, tmp_path, capsys, row):
    inputs = row.build(sweep, tmp_path)
    code, out, err = _fit(capsys, inputs, tmp_path / "out", *row.args)
    assert code == row.code, err
    assert out == "" if row.code == 2 else "n*(C): L=" in out
    assert "Traceback" not in err
    if row.code == 2:
        assert err.startswith("isocompute fit: error: ") and err.count("\n") == 1, err
        assert row.message in err, err
        assert not (tmp_path / "out").exists()  # nothing written
    else:
        assert (tmp_path / "out" / "curve.json").is_file()


def test_a_bad_cell_names_its_file(sweep, tmp_path, capsys):
    inputs = _set("rollouts", '"x"')(sweep, tmp_path)
    code, _, err = _fit(capsys, inputs, tmp_path / "out")
    assert code == 2 and f"{Path(inputs[0]) / RUN / 'isocompute.jsonl'}, line {LINE}" in err


# --- things that could hang or kill the process: in a subprocess -----------------------------------------

def _command(*args: str, stdout=subprocess.PIPE, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", *args], stdout=stdout,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("where", ["isocompute.jsonl", "other.jsonl", "given"])
def test_a_fifo_is_refused_never_read(tmp_path, where):
    folder = tmp_path / "run"
    folder.mkdir()
    fifo = folder / ("isocompute.jsonl" if where != "other.jsonl" else "other.jsonl")
    os.mkfifo(fifo)
    target = fifo if where == "given" else folder
    proc = _command("fit", str(target), "--out", str(tmp_path / "out"), timeout=60)  # a read would block forever
    assert proc.returncode == 2, proc.stderr
    assert f"{fifo} is not a regular file" in proc.stderr and "Traceback" not in proc.stderr


def _closed_pipe(*args: str) -> subprocess.CompletedProcess:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written, as with `| true`
    try:
        return _command(*args, stdout=write)
    finally:
        os.close(write)


def test_fit_into_a_closed_pipe(sweep, tmp_path):
    proc = _closed_pipe("fit", str(sweep), "--out", str(tmp_path / "out"), "--bootstrap", "0")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr and "Broken pipe" not in proc.stderr
    assert (tmp_path / "out" / "curve.json").is_file()


def test_allocate_json_into_a_closed_pipe():
    proc = _closed_pipe("allocate", "--curve", "paper:qwen2.5-7b-easy", "--budget", "1e6", "--format", "json")
    assert proc.returncode == 0 and proc.stderr == ""


# --- stale results --------------------------------------------------------------------------------------

def test_a_fit_without_a_curve_sets_the_old_curve_aside(tmp_path, capsys):
    out = tmp_path / "out"
    write_run_logs(synthetic_sweep(curves_for(EASY), points_per_run=30, seed=1), tmp_path / "old")
    assert _fit(capsys, [str(tmp_path / "old")], out)[0] == 0
    old = (out / "curve.json").read_text()
    write_run_logs(synthetic_sweep({64: curves_for(EASY)[64]}, runs_per_n=2, points_per_run=30, seed=1), tmp_path / "new")
    code, _, err = _fit(capsys, [str(tmp_path / "new")], out)
    assert code == 1 and "curve.stale.json" in err
    assert not (out / "curve.json").exists() and (out / "curve.stale.json").read_text() == old
    assert "curve.stale.json" in (out / "report.md").read_text()

    code, printed, err = _allocate(capsys, "--curve", str(out / "curve.json"), "--budget", "1e6")
    assert code == 2 and printed == "" and err.count("\n") == 1
    assert f"{out / 'curve.stale.json'}" in err and "found no n*(C) curve" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_writable_out_under_a_read_only_parent(sweep, tmp_path, capsys):
    out = tmp_path / "parent" / "out"
    out.mkdir(parents=True)
    os.chmod(out.parent, stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert _fit(capsys, [str(sweep)], out)[0] == 0
    finally:
        os.chmod(out.parent, stat.S_IRWXU)
    assert (out / "curve.json").is_file()


# --- allocate and curve files -------------------------------------------------------------------------

def _allocate(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["allocate", *args])
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _curve_file(change: dict) -> Callable[[Path], str]:
    def build(tmp: Path) -> str:
        path = tmp / "curve.json"
        path.write_text(json.dumps({**EASY.to_dict(), **change}))
        return str(path)

    return build


ALLOCATE_ROWS = [
    ("k <= 0", _curve_file({"k": -4.75}), ("--budget", "1e6"), "k must be > 0"),
    ("L < 0", _curve_file({"L": -1}), ("--budget", "1e6"), "L must be >= 0"),
    ("L absurdly large", _curve_file({"L": 2000}), ("--budget", "1e6"), "L + b must be <= 30"),
    ("b = -50", _curve_file({"b": -50}), ("--budget", "1e6"), "b must be >= -3"),
    ("boolean L", _curve_file({"L": True}), ("--budget", "1e6"), "L must be a finite number, got True"),
    ("string in n_grid", _curve_file({"n_grid": [8, "16"]}), ("--budget", "1e6"), "n_grid must be a list of positive integers"),
    ("string in c_range", _curve_file({"c_range": ["1e5", 1e7]}), ("--budget", "1e6"), "c_range must be [C_min, C_max]"),
    ("string provenance", _curve_file({"provenance": "paper"}), ("--budget", "1e6"), "provenance must be a JSON object"),
    ("budget of 1e30", lambda tmp: "paper:qwen2.5-7b-easy", ("--budget", "1e30"), "more than 10,000,000"),
    ("budget of inf", lambda tmp: "paper:qwen2.5-7b-easy", ("--budget", "inf"), "must be a positive finite number"),
]


@pytest.mark.parametrize(("name", "curve", "args", "message"), ALLOCATE_ROWS, ids=[r[0] for r in ALLOCATE_ROWS])
def test_allocate_bad_inputs(tmp_path, capsys, name, curve, args, message):
    code, out, err = _allocate(capsys, "--curve", curve(tmp_path), *args, "--format", "json")
    assert (code, out) == (2, ""), err
    assert err.startswith("isocompute allocate: error: ") and err.count("\n") == 1 and message in err


@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard", "qwen2.5-7b-easy-tokens"])
def test_presets_say_when_a_budget_is_outside_their_fitted_range(capsys, preset):
    extra = ("--mean-response-tokens", "2000") if preset.endswith("tokens") else ()
    code, out, err = _allocate(capsys, "--curve", f"paper:{preset}", "--budget", "1e9", *extra, "--format", "json")
    assert code == 0, err
    reasons = json.loads(out)["reasons"]
    assert any("outside the range the curve was fitted on" in r for r in reasons)


# --- runs with more than one n (issue 21): refused, the previous curve kept ------------------------------

# the e2e schedule's curve (tests/test_adaptive_e2e.py): n 2 -> 4 -> 8 over 16 steps of B_problem 8
SCHEDULE_CURVE = {"L": 2.0, "k": 3.5, "log10_C0": 1.63, "b": 1.0, "compute_unit": "rollouts", "metric": "val/avg@4",
                  "c_range": [10, 1000], "n_grid": [2, 4, 8]}


def _adaptive_run(root: Path, kind: str) -> Path:
    """A run log as our trainer writes one (training/run_log_writer.py, adaptive_trainer.py), with the per-step n of
    the real rules: ``schedule`` (NSchedule: n per row, the schedule in the header), ``per_prompt`` (AdaptiveN's
    split: the n_i metrics per row, the settings in the header), ``schedule_flat`` (a schedule whose n stays 8)."""
    from verl_isocompute.runlog import metric_key, write_run_log
    from verl_isocompute.scaling import Curve
    from verl_isocompute.scaling.schedule import NSchedule
    from verl_isocompute.scaling.adaptive import AdaptiveN
    from verl_isocompute.training.schema import PerPromptSettings
    from verl_isocompute.training.adaptive_config import header as adaptive_header
    from verl_isocompute.scaling.per_prompt_n import AVG_AT_K_KEY, K_KEY

    b_problem = 8
    curve = Curve.from_dict({**SCHEDULE_CURVE, "n_grid": [8]} if kind == "schedule_flat" else SCHEDULE_CURVE)
    schedule = NSchedule(curve, b_problem, 2000) if kind.startswith("schedule") else None
    per_prompt = PerPromptSettings(curation_weight=1000.0) if kind == "per_prompt" else None
    adaptive = AdaptiveN(8, b_problem, schedule, per_prompt)
    plan = adaptive.plan_step(1, 0)  # the trainer plans step 1 before it writes the header and validates
    header = {"recipe": "isocompute_hard", "model": "tiny", "dataset_size": 64, "n": adaptive.n, "b_problem": b_problem,
              **adaptive_header(adaptive)}
    rows, c = [{"step": 0, "n": adaptive.n, "b_problem": b_problem, "rollouts": 0, "tokens": 0, "epoch": 0.0,
                "val/avg@4": 0.3}], 0
    for step in range(1, 13):
        plan = adaptive.plan_step(step, c) if step > 1 else plan
        uids = [f"u{step}_{i}" for i in range(b_problem)]
        infos = [{AVG_AT_K_KEY: 0.5 if i % 2 else 0.05, K_KEY: 16} for i in range(b_problem)]  # curation's avg@16
        ns = adaptive.assign(uids, [f"p{i}" for i in range(b_problem)], infos)
        trained = [u for u, n_i in zip(uids, ns) for _ in range(n_i)]
        metrics = adaptive.observe(trained, [j % 3 == 0 for j in range(len(trained))])
        adaptive.end_step()
        c += sum(ns)
        row = {"step": step, "n": adaptive.n, "b_problem": b_problem, "rollouts": c, "tokens": 30 * c,
               "epoch": step * b_problem / 64, "lr": 1e-6, "train/reward": 0.4, "val/avg@4": 0.3 + 0.01 * step,
               **{metric_key(k): v for k, v in metrics.items()}}
        if per_prompt is not None:
            row["group_n_hist"] = AdaptiveN.histogram(ns)
        if plan is not None:
            row["n_star"], row["peak_lr"] = plan.n_star, plan.peak_lr
        rows.append(row)
    write_run_log(root / kind, header, rows)
    return root / kind


@pytest.mark.parametrize(("kind", "message"), [
    ("schedule", "n changes mid-run (2 at step 0, 4 at step 3): an n-schedule run (isocompute.schedule) has no one n"),
    # the split of 64 rollouts over p = 0.5 and p = 0.05 prompts: 6 each on the easy ones, 10 on the hard ones
    ("per_prompt", "a per-prompt-n run (isocompute.per_prompt_n: n_i from 6 to 10): its groups differ in n"),
])
def test_a_run_with_more_than_one_n_is_refused_and_the_curve_kept(sweep, tmp_path, capsys, kind, message):
    out = tmp_path / "out"  # an earlier fit's outputs
    out.mkdir()
    (out / "curve.json").write_text(json.dumps(EASY.to_dict()))
    (out / "frontier.csv").write_text("C,reward\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    run = _adaptive_run(tmp_path, kind)
    code, printed, err = _fit(capsys, [str(sweep), str(run)], out)
    assert (code, printed) == (2, ""), err
    assert err.startswith(f"isocompute fit: error: {run}: ") and err.count("\n") == 1, err
    assert message in err and "leave it out of RUNS: fit the fixed-n runs" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the previous curve and frontier intact


def test_a_schedule_run_whose_n_never_changed_is_a_fixed_n_run(sweep, tmp_path, capsys):
    run = _adaptive_run(tmp_path, "schedule_flat")
    code, _, err = _fit(capsys, [str(sweep), str(run)], tmp_path / "out")
    assert code == 0, err
    assert f"an n-schedule run whose n stayed 8: fitted as a fixed-n run: {run}" in err
