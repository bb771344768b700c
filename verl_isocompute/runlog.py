"""The run log: the one interface between training (which writes it) and fitting (which reads it).

Every run of our recipes writes ``<run dir>/isocompute.jsonl``: JSON lines, one object per line.

- The first line is ``{"header": {...}}``: what the run is (recipe, model, dataset size D, n,
  b_problem, n_train, B_max, estimator, zero-variance mode, lr, warm-up, validation k, planned steps,
  verl and package versions). Readers treat every header key as optional.
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

The writer (:class:`RunLogWriter`) appends a line per step and, when a run resumes from a checkpoint,
atomically rewrites the file without the rows past the resumed step. The reader (:func:`read_jsonl`,
:func:`read_run_log`) is tolerant of exactly one kind of damage, a last line cut short by a kill, and
reports any other bad line by file and line number. Pure standard library (and orjson, verl's JSON
library, to parse faster when it is there): nothing here imports verl, torch, numpy or pandas (values with ``.tolist()``, e.g. numpy or torch scalars, are written as plain
numbers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_isocompute import atomic

try:  # verl's file logger writes with orjson, so it comes with verl; plain json does the same, slower
    import orjson

    _LOADS = (orjson.loads, json.loads)
except ImportError:  # pragma: no cover
    _LOADS = (json.loads,)

RUN_LOG = "isocompute.jsonl"
# What else a run directory of ours holds (written by verl, named by us).
VERL_METRICS = "verl_metrics.jsonl"  # verl's file logger (VERL_FILE_LOGGER_PATH)
CONSOLE_LOG = "verl.log"  # the run's console output, where a wrapper (demo, sweep) captures it

ROW_KEYS = ("step", "n", "b_problem", "rollouts", "tokens", "epoch")
HEADER = "header"
# Guided runs with spend files (module docstring): the header key, and each row's C / tokens including them.
GUIDANCE_SPEND = "guidance_spend"
WITH_GUIDANCE = {"rollouts": "rollouts_with_guidance", "tokens": "tokens_with_guidance"}
WITH_CURATION = {"rollouts": "rollouts_with_curation", "tokens": "tokens_with_curation"}
# Guided runs: the mixture the run trains on, as verl's dataset holds it (guided rows, unguided rows, ...).
GUIDED_MIXTURE = "guided_mixture"


class RunLogError(ValueError):
    """A run log that cannot be read as one; the message names the file and line."""


@dataclass
class JsonlFile:
    """The objects of a JSON-lines file with their 1-based line numbers."""

    path: Path
    objects: list[tuple[int, Any]] = field(default_factory=list)
    cut_last_line: bool = False  # the last line was not valid JSON (a write cut short by a kill)
    lines: list[str] = field(default_factory=list)  # the non-blank raw lines, for readers that scan text


def read_jsonl(path: str | os.PathLike) -> JsonlFile:
    """Read a JSON-lines file; a cut last line is skipped (and noted), any other bad line is an error.

    Blank lines are ignored; a UTF-8 byte-order mark is accepted.
    """
    path = Path(path)
    if not path.is_file():
        raise RunLogError(f"{path}: not a regular file")
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    lines = text.splitlines()
    numbers: Sequence[int] = range(1, len(lines) + 1)
    if not all(map(str.strip, lines)):  # drop blank lines (the usual file has none: no per-line work then)
        numbers = [no for no, line in zip(numbers, lines) if line.strip()]
        lines = [line for line in lines if line.strip()]
    result = JsonlFile(path, lines=lines)
    whole = "[" + ",".join(lines) + "]"
    # One parse for the whole file, by orjson when it can (4x faster than json on a big sweep's logs);
    # json's own parse for what orjson refuses but json reads (NaN and Infinity literals, which json.dumps
    # writes; lone surrogates); line by line only to find what is wrong. (orjson reads an integer past
    # 64 bits as a float, json as an int: no run log has one.)
    for loads in _LOADS:
        try:
            values = loads(whole)
        except ValueError:  # orjson.JSONDecodeError is a ValueError too
            continue
        result.objects = list(zip(numbers, values))
        return result
    for i, (no, line) in enumerate(zip(numbers, lines)):
        try:
            result.objects.append((no, json.loads(line)))
        except ValueError:
            if i == len(lines) - 1:
                result.cut_last_line = True
                continue
            raise RunLogError(f"{path}, line {no}: not valid JSON; fix or remove that line") from None
    return result


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


def read_run_log(path: str | os.PathLike) -> RunLog:
    """Read ``isocompute.jsonl`` (tolerant of a cut last line); :class:`RunLogError` names a bad line."""
    jsonl = read_jsonl(path)
    header: dict[str, Any] = {}
    rows: list[tuple[int, dict[str, Any]]] = []
    for no, obj in jsonl.objects:
        if not isinstance(obj, dict):
            raise RunLogError(f"{jsonl.path}, line {no}: expected a JSON object, got {type(obj).__name__}")
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
            return read_run_log(run_dir / RUN_LOG).steps()
        if (run_dir / VERL_METRICS).is_file():
            # verl logs validation before training as step 0; training steps carry timing_s/step
            return [
                int(obj["step"]) for _, obj in read_jsonl(run_dir / VERL_METRICS).objects
                if isinstance(obj, dict) and "timing_s/step" in (obj.get("data") or {})
            ]
    except RunLogError:
        return []
    return []


def _plain(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: dict[str, Any]) -> str:
    """One run-log line (no newline)."""
    return json.dumps(obj, default=_plain)


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

    def append(self, row: dict[str, Any]) -> None:
        check_row(row)
        self._append(row)

    def _append(self, obj: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(dumps(obj) + "\n")

    def resume(self, step: int) -> dict[str, Any] | None:
        """Keep the header and the rows up to ``step`` (later ones will be produced again); return the
        last kept row that carries the compute counters, or ``None`` for a fresh start (``step`` 0)."""
        if not self.path.is_file():
            return None
        log = self.read()
        kept = [r for _, r in log.rows if r.get("step", 0) <= step]
        if len(kept) != len(log.rows) or log.cut_last_line:
            lines = ([dumps({HEADER: log.header})] if log.header else []) + [dumps(r) for r in kept]
            atomic.write_text(self.path, "".join(line + "\n" for line in lines))
        last = next((r for r in reversed(kept) if "rollouts" in r), None)
        return last if step > 0 else None


def write_run_log(run_dir: str | os.PathLike, header: dict[str, Any], rows: list[dict[str, Any]]) -> Path:
    """Write a whole run log at once, atomically (synthetic sweeps, tests, converters)."""
    for row in rows:
        check_row(row)
    path = Path(run_dir) / RUN_LOG
    atomic.write_text(path, "".join(dumps(obj) + "\n" for obj in [{HEADER: header}, *rows]))
    return path
