"""The run log: the one interface between training (which writes it) and fitting (which reads it).

Every run of our recipes writes ``<run dir>/isocompute.jsonl``: JSON lines, one object per line.

- The first line is ``{"header": {...}}``: what the run is (recipe, model, dataset size D, n,
  b_problem, n_train, B_max, estimator, zero-variance mode, lr, warm-up, validation k, planned steps,
  verl and package versions) and when: ``started_at`` (the trainer's start; a run resumed from a checkpoint
  keeps its first) and ``ended_at`` (written when training ends; absent while a run trains or after a crash),
  both ISO 8601 in UTC (:func:`utc_now`). Readers treat every header key as optional.
- Then one row per training step, in order. Every row carries :data:`ROW_KEYS`: ``step``, ``n``,
  ``b_problem``, ``rollouts`` (cumulative sampling compute C in rollouts), ``tokens`` (cumulative
  generated tokens) and ``epoch`` (steps * b_problem / D). Training rows add ``lr`` (the rate that
  step's update used) and ``train/reward``; validation steps add ``val/avg@k``, ``val/best@k``,
  ``val/worst@k`` (unbiased estimators, overall and per data source). A step-0 row carries the
  validation before training.
- Guided runs (docs/GUIDED.md) add the header key ``guided_mixture`` = ``{"guided": G, "unguided": U,
  "ratio": G / U, "problems": P, ...}``: the rows of the training set verl built (after its prompt filter), so
  the real mixture is on record (1:1 only when every problem got a prefix).
- Runs that name spend files (``isocompute.guided.spend``, :mod:`verl_isocompute.guided.spend`; an unguided
  baseline may list its curation's) add the header key ``guidance_spend`` = ``{stage: {"rollouts": R,
  "tokens": T}}``, sampling done *before* training, counted only on the problems of the training set
  (``spend_problems`` of them), and on every row:
  ``rollouts_with_guidance`` / ``tokens_with_guidance`` = the row's ``rollouts`` / ``tokens`` + the guidance
  stages (rejection sampling, prefix search): C including the compute that found the prefixes, as PrefixRL
  (arXiv 2601.18795) counts it; ``rollouts_with_curation`` / ``tokens_with_curation`` = those + curation
  (the difficulty measurement, which an unguided baseline on the same set spends too: the column both arms
  of a comparison can log). ``rollouts`` and ``tokens`` stay training-only, so fits of C are unchanged;
  ``isocompute fit --compute rollouts_with_guidance`` (or ``rollouts_with_curation``) uses another column (a
  run without it counts its ``rollouts``).

Next to it, ``<run dir>/validation_problems.jsonl`` (:data:`VAL_PROBLEMS`) holds one line per problem and
validation: ``step``, ``data_source``, ``problem`` (``extra_info.problem_id`` or ``index``), ``k`` and how many of
the k samples were correct, answered, echoes of the question and leniently correct
(:mod:`verl_isocompute.rules.format_metrics`), so a before/after comparison can be paired and re-computed.
``<run dir>/train_problems.jsonl`` (:data:`TRAIN_PROBLEMS`) does the same for training: one line per problem
and step, ``step``, ``problem`` (the same label; null when the rows carry neither) and the step's ``k``
rollouts of it and how many were ``correct``, so which problems a run trained on, and how often each, can be
checked from files (e.g. that a one-epoch run saw every problem once).

The writer (:class:`RunLogWriter`) appends a line per step and, when a run resumes from a checkpoint,
atomically rewrites the file without the rows past the resumed step. Reading and appending follow the
package's one JSON-lines policy (:mod:`verl_isocompute.jsonl`): a last line cut short by a kill is skipped
and reported, any other bad line is an error naming file and line. Pure standard library: nothing here
imports verl, torch, numpy or pandas (values with ``.tolist()``, e.g. numpy or torch scalars, are written
as plain numbers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from verl_isocompute.jsonl import JsonlAppender, JsonlError, read_jsonl, write_jsonl

RUN_LOG = "isocompute.jsonl"
# What else a run directory of ours holds (written by verl, named by us).
VERL_METRICS = "verl_metrics.jsonl"  # verl's file logger (VERL_FILE_LOGGER_PATH)
VAL_PROBLEMS = "validation_problems.jsonl"  # per-problem validation counts (module docstring)
TRAIN_PROBLEMS = "train_problems.jsonl"  # per-problem counts of each training step (module docstring)
CONSOLE_LOG = "verl.log"  # the run's console output, where a wrapper (demo, sweep) captures it

ROW_KEYS = ("step", "n", "b_problem", "rollouts", "tokens", "epoch")
HEADER = "header"
# Guided runs with spend files (module docstring): the header key, and each row's C / tokens including them.
GUIDANCE_SPEND = "guidance_spend"
WITH_GUIDANCE = {"rollouts": "rollouts_with_guidance", "tokens": "tokens_with_guidance"}
WITH_CURATION = {"rollouts": "rollouts_with_curation", "tokens": "tokens_with_curation"}
# Guided runs: the mixture the run trains on, as verl's dataset holds it (guided rows, unguided rows, ...).
GUIDED_MIXTURE = "guided_mixture"

# Metric keys, spelled here only. Ours, added to verl's per-step metrics by the trainer, all start with
# METRIC_PREFIX (``isocompute/train_acc``, ``isocompute/rollouts``); validation is logged under VAL_PREFIX
# (``val/avg@k``, rules.metrics.validation_metrics); DEFAULT_METRIC is what a fit reads by default.
METRIC_PREFIX = "isocompute/"
VAL_PREFIX = "val"
DEFAULT_METRIC = f"{VAL_PREFIX}/avg@4"
# verl times every training step under this key and never a validation (the one before training is step 0).
STEP_TIMING = "timing_s/step"
# The trainer times its run-time prefix check (guided runs) beside verl's phases.
PREFIX_CHECK_TIMING = "timing_s/isocompute_prefix_check"


def utc_now() -> str:
    """Now, as the run log's header records times: ISO 8601 in UTC to the second (``2026-12-02T01:30:00Z``)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def metric_key(name: str) -> str:
    """Our metric ``name`` as verl logs it: ``isocompute/<name>``."""
    return METRIC_PREFIX + name


class RunLogError(JsonlError):
    """A run log that cannot be read as one; the message names the file and line."""


@dataclass
class RunLog:
    """A parsed run log: its header and its step rows (each with its line number)."""

    path: Path
    header: dict[str, Any]
    rows: list[tuple[int, dict[str, Any]]]
    cut_last_line: bool = False

    def steps(self) -> list[int]:
        """Training steps logged (step 0, the validation before training, is not a training step)."""
        return [int(r["step"]) for _, r in self.rows if isinstance(r.get("step"), (int, float)) and r["step"] > 0]


def is_training_step(data: dict[str, Any]) -> bool:
    """Whether a row of verl's metrics (the ``data`` of a file-logger line) is a training step, not a validation."""
    return STEP_TIMING in data


def verl_line(obj: Any) -> tuple[Any, dict[str, Any]] | None:
    """(step, data) of one line of verl's file logger, ``{"step": N, "data": {...}}``, or None if it is not one."""
    if isinstance(obj, dict) and "step" in obj and isinstance(obj.get("data"), dict):
        return obj["step"], obj["data"]
    return None


def read_run_log(path: str | os.PathLike, report: bool = True) -> RunLog:
    """Read ``isocompute.jsonl`` (a cut last line is skipped, and reported unless ``report`` is False);
    :class:`RunLogError` names a bad line."""
    try:
        jsonl = read_jsonl(path, report=report)
        jsonl.dicts()
    except JsonlError as exc:
        raise RunLogError(str(exc)) from None
    header: dict[str, Any] = {}
    rows: list[tuple[int, dict[str, Any]]] = []
    for no, obj in jsonl.objects:
        if HEADER in obj:
            header = obj[HEADER] if isinstance(obj[HEADER], dict) else {}
        else:
            rows.append((no, obj))
    return RunLog(jsonl.path, header, rows, jsonl.cut_last_line)


def logged_steps(run_dir: str | os.PathLike) -> list[int]:
    """Training steps a run directory has logged: from our run log, else from verl's file logger."""
    run_dir = Path(run_dir)
    try:
        if (run_dir / RUN_LOG).is_file():
            return read_run_log(run_dir / RUN_LOG, report=False).steps()  # a running job's log: its last line may be in flight
        if (run_dir / VERL_METRICS).is_file():
            lines = [verl_line(obj) for _, obj in read_jsonl(run_dir / VERL_METRICS, report=False).objects]
            return [int(line[0]) for line in lines if line is not None and is_training_step(line[1])]
    except JsonlError:
        return []
    return []


def last_logged_step(run_dir: str | os.PathLike) -> int:
    """The last training step a run directory has logged (:func:`logged_steps`), 0 before its first."""
    return max(logged_steps(run_dir), default=0)


def check_row(row: dict[str, Any]) -> None:
    """A step row must carry every key of :data:`ROW_KEYS`."""
    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
        raise RunLogError(f"run-log row for step {row.get('step')} lacks {', '.join(missing)}")


class RunLogWriter:
    """Appends to ``<run dir>/isocompute.jsonl``: the header once, then one row per step."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / RUN_LOG

    def read(self) -> RunLog:
        if not self.path.is_file():
            return RunLog(self.path, {}, [])
        return read_run_log(self.path)

    def write_header(self, header: dict[str, Any]) -> None:
        """Start the log with ``header`` unless it already has one (a resumed run keeps its own)."""
        if self.path.is_file() and self.read().header:
            return
        self._append({HEADER: header})

    def update_header(self, **fields: Any) -> None:
        """Add ``fields`` to the header of a log that has one (an atomic rewrite: a run log is small)."""
        log = self.read()
        if log.header:
            write_jsonl(self.path, [{HEADER: {**log.header, **fields}}] + [r for _, r in log.rows])

    def append(self, row: dict[str, Any]) -> None:
        check_row(row)
        self._append(row)

    def _append(self, obj: dict[str, Any]) -> None:
        with JsonlAppender(self.path) as out:
            out.append(obj)

    def resume(self, step: int) -> dict[str, Any] | None:
        """Keep the header and the rows up to ``step`` (later ones will be produced again); return the
        last kept row that carries the compute counters, or ``None`` for a fresh start (``step`` 0)."""
        if not self.path.is_file():
            return None
        log = self.read()
        kept = [r for _, r in log.rows if r.get("step", 0) <= step]
        if len(kept) != len(log.rows) or log.cut_last_line:
            write_jsonl(self.path, ([{HEADER: log.header}] if log.header else []) + kept)
        last = next((r for r in reversed(kept) if "rollouts" in r), None)
        return last if step > 0 else None


def write_run_log(run_dir: str | os.PathLike, header: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    """Write a whole run log at once, atomically (synthetic sweeps, tests, converters)."""
    for row in rows:
        check_row(row)
    return write_jsonl(Path(run_dir) / RUN_LOG, [{HEADER: header}, *rows])


class ProblemRecordsWriter:
    """Appends per-problem records of a step to ``<run dir>/<name>`` (:data:`VAL_PROBLEMS` by default, or
    :data:`TRAIN_PROBLEMS`): each record carries its ``step``."""

    def __init__(self, run_dir: str | os.PathLike, name: str = VAL_PROBLEMS) -> None:
        self.path = Path(run_dir) / name

    def append(self, records: list[dict[str, Any]]) -> None:
        """Add one step's records; earlier records of the same step are replaced (a run resumed from step N
        validates step N again before training)."""
        steps = {r.get("step") for r in records}
        if self.path.is_file():
            old = read_jsonl(self.path).dicts()
            if any(r.get("step") in steps for r in old):
                write_jsonl(self.path, [r for r in old if r.get("step") not in steps])
        with JsonlAppender(self.path) as out:
            out.append(*records)

    def resume(self, step: int) -> None:
        """Keep the records of steps up to ``step`` (a resumed run produces the later steps again)."""
        if self.path.is_file():
            read = read_jsonl(self.path)
            kept = [r for r in read.dicts() if r.get("step", 0) <= step]
            if len(kept) != len(read.values) or read.cut_last_line:
                write_jsonl(self.path, kept)

