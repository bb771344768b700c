"""Run logs -> one table of training steps, whichever tool wrote them.

Three formats are read:

* ``isocompute.jsonl``, ours (the run-log contract, :mod:`verl_isocompute.runlog`): a ``{"header": {...}}`` line with
  the resolved recipe, then one JSON object per training step with ``step``, ``n``, ``b_problem``,
  ``rollouts`` (cumulative compute C), ``tokens`` (cumulative generated tokens), ``epoch``, ``lr``,
  ``train/reward`` and, on validation steps, ``val/avg@k``, ``val/best@k``, ``val/worst@k`` (and the same
  per data source, ``val/avg@4/<data_source>``).
* verl's file logger (``trainer.logger=['file']``, ``verl/utils/tracking.py::FileLogger``): one line
  ``{"step": N, "data": {metric: value, ...}}`` per ``logger.log`` call, written to
  ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`` (or ``$VERL_FILE_LOGGER_PATH``). Step 0 is the
  validation before training. verl logs neither n nor B_problem (our trainer adds ``isocompute/n`` and
  ``isocompute/b_problem``); where else they come from: :mod:`verl_isocompute.scaling.run_settings`.
* a CSV exported from a wandb or tensorboard project: one row per logged step, a step column (``step``,
  ``_step``, ``global_step``, ...), metric columns, config columns for n and B_problem and, for a project
  export, a run column (``run``, ``name``, ...). Empty cells mean "not logged at this step".
* a wandb run directory or tensorboard event files, read offline by
  :mod:`verl_isocompute.scaling.sources` (this module only dispatches to it).

Compute C is cumulative rollouts: C after step m is the sum over steps of b_problem * n (the playbook's
definition, arXiv 2603.12151 section 4). A log without it gets C = step * n * b_problem, which holds when
n and b_problem are constant and step counts updates from 0 = before training (verl's ``global_steps``).
Generated tokens, when not logged, are the running sum of ``response_length/mean * n * b_problem`` over
steps (verl logs the mean response length of every training batch), possible only if no step is missing.
Our trainer's counters in verl's loggers (``isocompute/rollouts``, ``isocompute/tokens``) are used as C
when present (:func:`verl_isocompute.scaling.sources.compute_names`). Every derivation is reported in
:attr:`RunLogs.notes`. ``rollouts_with_guidance`` (guided runs: C plus the rollouts spent before training to
make the guided data, :mod:`verl_isocompute.runlog`) is every run's C plus its logged spend, 0 for a run that
logs none, so ``--compute rollouts_with_guidance`` compares guided runs with unguided baselines;
``rollouts_with_curation`` (that plus the curation of the training problems, which both arms spend) likewise.

Duplicate steps (a resumed run re-logs the steps it re-ran) keep the last value logged for each metric.
Values logged as NaN, inf or null (verl's orjson writes NaN as null) are counted per metric and dropped;
in the columns that say where a point is (``step``, ``n``, ``b_problem``, ``rollouts``, ``tokens``) an
infinite value is an error instead. A value that is not a number (a string, ``true``, a list) is never
dropped silently, since dropping it would drop its column (and C would be re-derived) or its run: it is
an error naming the file, the line and the key. The exception is a key that holds no number at all in a
file (a tag, a note): it is not a metric and is left out, unless it is the metric being fitted
(:attr:`RunLogs.text_cells`, checked by :func:`~verl_isocompute.scaling.frontier.validation_points`).
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from verl_isocompute.runlog import RUN_LOG, WITH_CURATION, WITH_GUIDANCE, JsonlError, read_jsonl
from verl_isocompute.scaling import sources
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.run_settings import RunSettings
from verl_isocompute.scaling.run_table import B_ALIASES, N_ALIASES, RUN_ALIASES, find_column, load_run_table

KEY_COLUMNS = ("run", "step", "n", "b_problem", "rollouts", "tokens", WITH_GUIDANCE["rollouts"], WITH_CURATION["rollouts"])
RESPONSE_LENGTH = "response_length/mean"

# Step columns other tools write (wandb history: _step; verl: training/global_step); see run_settings for
# the run, n and b_problem columns.
_STEP_ALIASES = ("step", "_step", "global_step", "training/global_step", "trainer/global_step")
_NONFINITE_JSON = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*(?:null|NaN|-?Infinity)')
_NONFINITE_TEXT = {"nan", "-nan", "+nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity", "null", "none"}


@dataclass
class RunLogs:
    """Every training step of every run, in one table.

    ``steps``: one row per (run, step) with ``run``, ``step``, ``n``, ``b_problem``, ``rollouts``,
    ``tokens`` (NaN where unknown) and one column per logged metric (NaN where not logged).
    ``runs``: one row per run: ``run``, ``path``, ``format``, ``n``, ``b_problem``, where each came from
    (``n_source``, ``b_problem_source``: log | header | --n/--b-problem | .hydra/config.yaml | run name;
    ``rollouts_source``: log | derived | --derive-compute; ``tokens_source``: log | derived | None),
    ``steps``, ``duplicate_steps``, and the header's ``model``, ``recipe``, ``dataset_size``. ``nonfinite``: metric -> number of NaN/inf/null values logged (dropped).
    ``notes``: what was derived or dropped, for the report. ``text_cells``: keys that held no number in
    some file (left out as text), each with where its first value was.
    """

    steps: pd.DataFrame
    runs: pd.DataFrame
    nonfinite: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    text_cells: dict[str, str] = field(default_factory=dict)  # key -> "file, line N: key is 'x'" (first seen)

    @property
    def metrics(self) -> list[str]:
        """Metrics logged with at least one value, sorted."""
        cols = [c for c in self.steps.columns if c not in KEY_COLUMNS]
        return sorted(c for c in cols if self.steps[c].notna().any())


def load_runs(
    paths: Iterable[str | os.PathLike],
    n: int | None = None,
    b_problem: int | None = None,
    derive_compute: bool = False,
    run_table: str | os.PathLike | None = None,
) -> RunLogs:
    """Load run logs from run directories, log files, or directories searched recursively.

    ``n`` / ``b_problem`` fill in for logs that do not carry them (verl's file logger, a CSV without
    config columns); ``run_table`` names a CSV/YAML of run -> n, b_problem for such logs, per run (where each
    comes from: :mod:`verl_isocompute.scaling.run_settings`). ``derive_compute`` ignores the logged compute
    counters and uses C = step * n * b_problem (for a run whose counter restarted on resume).
    """
    table = load_run_table(run_table) if run_table is not None else None
    files = find_logs(paths)
    raws: list[_RawRun] = []
    for path, fmt, root in files:
        try:
            if fmt in sources.FORMATS:
                run = sources.read(path, fmt)
                columns = {key: run.frame[key].to_numpy(dtype=float) for key in run.frame.columns}
                batch = [_RawRun(run.name, run.path, fmt, columns, run.header, run.nonfinite, truncated_line=run.truncated,
                                 text_cells=run.text_cells)]
            else:
                batch = _read_csv(path) if fmt == "csv" else [_read_jsonl(path, fmt)]
        except OSError as exc:  # an input that cannot be read is named as such, not taken for the output
            raise ScalingError(_unreadable(Path(exc.filename or path), exc)) from None
        for raw in batch:
            raw.root = root
        raws.extend(batch)
    if not raws:
        raise ScalingError("no runs found in the log files given")

    notes = _Notes()
    columns, metas = [], []
    nonfinite: Counter = Counter()
    text_cells: dict[str, str] = {}
    settings = RunSettings(n, b_problem, table)
    for raw in raws:
        cols, meta = _finalize(raw, settings, derive_compute, notes)
        columns.append(cols)
        metas.append(meta)
        nonfinite.update(raw.nonfinite)
        for key, where in raw.text_cells.items():
            text_cells.setdefault(key, where)
    runs = pd.DataFrame(metas)
    if table is not None:
        table.check_all_used(runs["run"].tolist())
    dupes = runs["run"][runs["run"].duplicated()].tolist()
    if dupes:
        raise ScalingError(f"run name {dupes[0]!r} appears twice; pass each run once")
    return RunLogs(steps=_stack(columns, runs), runs=runs, nonfinite=dict(nonfinite), notes=notes.render(),
                   text_cells=text_cells)


def _stack(columns: list[dict[str, np.ndarray]], runs: pd.DataFrame) -> pd.DataFrame:
    """One table from every run's columns (NaN where a run did not log a metric), built column by column."""
    lengths = np.array([len(cols["step"]) for cols in columns])
    ends = np.cumsum(lengths)
    metric_cols = sorted({key for cols in columns for key in cols} - set(KEY_COLUMNS))
    table: dict[str, Any] = {"run": np.repeat(runs["run"].to_numpy(dtype=object), lengths)}
    for key in KEY_COLUMNS[1:] + tuple(metric_cols):
        if key in ("n", "b_problem"):
            table[key] = np.repeat(runs[key].to_numpy(dtype=np.int64), lengths)
            continue
        out = np.full(int(ends[-1]) if len(ends) else 0, np.nan)
        for cols, end, length in zip(columns, ends, lengths):
            if key in cols:
                out[end - length : end] = cols[key]
        table[key] = out
    return pd.DataFrame(table)


def find_logs(paths: Iterable[str | os.PathLike]) -> list[tuple[Path, str, Path]]:
    """(file, format, root) for every run log under ``paths``; format is isocompute | verl | csv.

    A directory holding ``isocompute.jsonl`` is one run (its other files are not read: our trainer may
    also run verl's file logger there). Other directories are searched recursively for
    ``isocompute.jsonl`` and verl file-logger ``.jsonl`` files; CSVs are read only when named.
    """
    found: dict[str, tuple[Path, str, Path]] = {}
    _real_dir.cache_clear()  # links may have changed since the last load
    paths = list(paths)
    if not paths:
        raise ScalingError("no runs given: pass run directories, isocompute.jsonl / verl .jsonl / .csv files")
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise ScalingError(f"{path} does not exist; pass run directories or log files")
        if not path.is_dir() and not path.is_file():
            raise ScalingError(_not_regular(path))
        if path.is_file():
            fmt = _sniff(path) or sources.sniff(path)
            if fmt is None:
                raise ScalingError(
                    f"{path} is not a run log: expected isocompute.jsonl, a verl file-logger .jsonl "
                    "(lines {\"step\": N, \"data\": {...}}), a .csv with one row per step, a wandb run "
                    "directory or tensorboard event files"
                )
            found.setdefault(_real(path), (path, fmt, path.parent))
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            here = Path(dirpath)
            logs = [name for name in sorted(filenames) if name.endswith(".jsonl")]
            for name in logs:  # a FIFO or a device would block the read that sniffs it: refuse it first
                if not (here / name).is_file():
                    raise ScalingError(_not_regular(here / name))
            if RUN_LOG in filenames:
                dirnames[:] = []
                found.setdefault(_real(here / RUN_LOG), (here / RUN_LOG, "isocompute", path))
                continue
            fmt = sources.run_in_dir(here, filenames)
            if fmt is not None:  # one run per directory, like isocompute.jsonl; wandb's subfolders are its own
                found.setdefault(_real(here), (here, fmt, path))
                if fmt == sources.WANDB:
                    dirnames[:] = []
                continue
            for name in logs:
                if _sniff(here / name) == "verl":
                    found.setdefault(_real(here / name), (here / name, "verl", path))
    if not found:
        raise ScalingError(
            f"no runs found in {', '.join(str(p) for p in paths)}: looked for {RUN_LOG}, verl "
            "file-logger .jsonl files (trainer.logger=['file']), wandb run directories and tensorboard event "
            "files; pass a .csv export by name"
        )
    return sorted(found.values(), key=lambda item: str(item[0]))


def _real(path: str | os.PathLike) -> str:
    """``str(path.resolve())`` for an existing path, each directory resolved once per load (the runs of
    a sweep share their parents; strings, as pathlib objects cost more than the lookups here)."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if not name or os.path.islink(path):
        return os.path.realpath(path)
    return os.path.join(_real_dir(parent), name)


@functools.lru_cache(maxsize=4096)
def _real_dir(folder: str) -> str:
    return _real(folder)


def _unreadable(path: Path, exc: OSError) -> str:
    return f"{path}: cannot read it ({exc.strerror or exc}); fix its permissions or leave it out of RUNS"


def _not_regular(path: Path) -> str:
    return f"{path} is not a regular file (a FIFO, socket or device?): pass run directories or log files written to disk"


# --- reading ---------------------------------------------------------------------------------------


@dataclass
class _RawRun:
    name: str
    path: Path
    fmt: str
    columns: dict[str, np.ndarray]  # key -> float values, one per logged line, in file order
    header: dict[str, Any] = field(default_factory=dict)
    nonfinite: Counter = field(default_factory=Counter)
    root: Path | None = None
    truncated_line: bool = False
    text_cells: dict[str, str] = field(default_factory=dict)


def _sniff(path: Path) -> str | None:
    if path.suffix.lower() == ".csv":
        return "csv"
    if path.name == RUN_LOG:
        return "isocompute"
    if path.suffix.lower() not in (".jsonl", ".json"):
        return None
    try:
        with open(path, "rb") as fh:
            first = next((line for line in fh if line.strip()), b"")
    except OSError as exc:
        raise ScalingError(_unreadable(path, exc)) from None
    try:
        obj = json.loads(first)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "header" in obj:
        return "isocompute"
    if "step" in obj and isinstance(obj.get("data"), dict):
        return "verl"
    if "step" in obj and ("rollouts" in obj or "n" in obj):
        return "isocompute"
    return None


def _run_name(path: Path, fmt: str) -> str:
    shown = path
    real, cwd = _real(path), _real_dir(os.getcwd())
    if real.startswith(cwd.rstrip(os.sep) + os.sep):
        shown = Path(real[len(cwd.rstrip(os.sep)) + 1 :])
    if fmt == "isocompute":
        shown = shown.parent
    else:
        shown = shown.with_suffix("")
    return str(shown)


def _read_jsonl(path: Path, fmt: str) -> _RawRun:
    try:
        jsonl = read_jsonl(path, report=False)  # a last line cut by a kill is skipped (reported with the notes)
    except JsonlError as exc:
        raise ScalingError(str(exc)) from None
    lines, truncated = jsonl.lines, jsonl.cut_last_line
    header: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    line_nos: list[int] = []
    columns_text = None
    objects = jsonl.objects
    if fmt == "isocompute" and objects and isinstance(objects[0][1], dict) and "header" in objects[0][1]:
        # Our own log, the common case for a big sweep: the header on line 1, then step rows. Taken
        # whole here; _columns checks every row (a stray header or a non-object line sends it back here).
        line_nos, rows = (list(part) for part in zip(*objects[1:])) if len(objects) > 1 else ([], [])
        columns_text = _columns_if_plain(rows, line_nos, path)
        if columns_text is not None:
            value = objects[0][1]["header"]
            header, objects = (value if isinstance(value, dict) else {}), []
        else:
            rows, line_nos = [], []
    for line_no, obj in objects:
        if not isinstance(obj, dict):
            raise ScalingError(f"{path}, line {line_no}: expected a JSON object, got {type(obj).__name__}")
        if "header" in obj:
            header = obj["header"] if isinstance(obj["header"], dict) else {}
            continue
        if fmt == "verl":
            data = obj.get("data")
            if not isinstance(data, dict) or "step" not in obj:
                raise ScalingError(
                    f"{path}, line {line_no}: not in verl's file-logger format {{\"step\": N, \"data\": {{...}}}}"
                )
            row = dict(data)
            row["step"] = obj["step"]
        else:
            row = obj
        rows.append(row)
        line_nos.append(line_no)
    columns, text_cells, nonfinite = columns_text if not objects and rows else _columns(rows, line_nos, path)
    if nonfinite is None:
        # Some line lacks some key, so a NaN may be "not logged at this step": count the logged
        # null/NaN/inf per key on the text of the few lines that have one.
        flagged = [line for line in lines if "null" in line or "NaN" in line or "Infinity" in line]
        found = (m.group(1) for line in flagged for m in _NONFINITE_JSON.finditer(line))
        nonfinite = Counter(key for key in found if key in columns)
    for values in columns.values():
        values[np.isinf(values)] = np.nan
    if fmt == "verl":  # our trainer's compute counters, as verl's file logger names them
        for alias, name in sources.compute_names(columns).items():
            columns[name] = columns.pop(alias)
    return _RawRun(_run_name(path, fmt), path, fmt, columns, header, nonfinite, truncated_line=truncated,
                   text_cells=text_cells)


_NUMBER_TYPES = (int, float, type(None))


def _numeric_table(rows: list[dict[str, Any]], keys: list[str]) -> np.ndarray | None:
    """The usual run log in one go: every line has every key and every value is a number or null.
    (rows, keys) floats, or None when that is not so and keys must be read one by one."""
    if not rows or not keys:
        return None
    try:
        values = list(map(operator.itemgetter(*keys), rows))
    except KeyError:  # some line lacks a key: not logged at that step
        return None
    if len(keys) == 1:
        values = [(v,) for v in values]
    if not set(map(type, itertools.chain.from_iterable(values))) <= set(_NUMBER_TYPES):
        return None
    return np.array(values, dtype=float)  # None -> NaN


def _columns_if_plain(rows: list[Any], line_nos: list[int], path: Path):
    """:func:`_columns` of rows that are all JSON objects without a ``header`` key, else None."""
    try:
        keys = set().union(*rows)
    except TypeError:  # a line that is not a JSON object
        return None
    if "header" in keys or not all(map(dict.__instancecheck__, rows)):
        return None
    return _columns(rows, line_nos, path, sorted(keys))


def _columns(
    rows: list[dict[str, Any]], line_nos: list[int], path: Path, keys: list[str] | None = None
) -> tuple[dict[str, np.ndarray], dict[str, str], Counter | None]:
    """The logged lines as one float array per key (NaN: not logged or null), the text keys, and the
    null/NaN/inf values logged per key when every line has every key (else None: count them on the text).

    A value that is not a number (a string, ``true``, a list) stops the load with its file, line and key,
    unless its key holds no number at all in this file (a tag or a note: left out, remembered in
    ``text_cells``). An infinite step, n, b_problem or compute is an error too (see the module docstring).
    """
    if keys is None:
        keys = sorted(set().union(*rows)) if rows else []
    columns: dict[str, np.ndarray] = {}
    text_cells: dict[str, str] = {}
    table = _numeric_table(rows, keys)
    for i, key in enumerate(keys):
        if table is not None:
            column = table[:, i]
        else:
            values = [row.get(key) for row in rows]
            if set(map(type, values)) <= set(_NUMBER_TYPES):  # numbers and nulls only
                column = np.array(values, dtype=float)  # None -> NaN
            else:
                column = None
        if column is None:
            is_number = [isinstance(v, _NUMBER_TYPES) and not isinstance(v, bool) for v in values]
            at = is_number.index(False)
            where = f"{path}, line {line_nos[at]}: {key} is {values[at]!r}"
            if key in KEY_COLUMNS or any(ok and v is not None for ok, v in zip(is_number, values)):
                raise ScalingError(f"{where}, not a number; {_CELL_FIX}")
            text_cells[key] = where  # a text key (a tag, a note): not a metric
            continue
        if key in KEY_COLUMNS and np.isinf(column).any():
            at = int(np.flatnonzero(np.isinf(column))[0])
            raise ScalingError(f"{path}, line {line_nos[at]}: {key} is {column[at]}, not a finite number; {_CELL_FIX}")
        columns[key] = column
    if table is None:
        return columns, text_cells, None
    counts = np.count_nonzero(~np.isfinite(table), axis=0)  # every line has every key: each NaN was logged
    return columns, text_cells, Counter({key: int(c) for key, c in zip(keys, counts) if c})


_CELL_FIX = "fix that value in the log (a value not logged at a step is left out or written as null)"


def _is_numeric(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def _read_csv(path: Path) -> list[_RawRun]:
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""], low_memory=False, encoding="utf-8-sig")
    except (OSError, ValueError) as exc:
        raise ScalingError(f"{path}: cannot read as CSV ({exc})") from None
    if df.empty:
        raise ScalingError(
            f"{path} has a header line but no rows: export one row per logged step of each run (see docs/SCALING.md)"
        )
    if [c.strip().lower() for c in df.columns] == ["wall time", "step", "value"]:
        raise ScalingError(
            f"{path} is a TensorBoard single-scalar export (Wall time, Step, Value); export one row per step "
            "with a column per metric and config columns n and b_problem (see docs/SCALING.md)"
        )
    step_col = find_column(df.columns, _STEP_ALIASES)
    if step_col is None:
        raise ScalingError(f"{path}: no step column; name one of {', '.join(_STEP_ALIASES)}")
    run_col = find_column(df.columns, RUN_ALIASES)
    renames = {step_col: "step"}
    for key, aliases in (("n", N_ALIASES), ("b_problem", B_ALIASES)):
        col = find_column(df.columns, aliases)
        if col is not None:
            renames[col] = key
    runs = df[run_col].astype(str) if run_col is not None else pd.Series(path.stem, index=df.index)
    df = df.drop(columns=[run_col] if run_col is not None else []).rename(columns=renames)

    numeric: dict[str, pd.Series] = {}
    nonfinite_mask: dict[str, pd.Series] = {}
    text_cells: dict[str, str] = {}
    for col in df.columns:
        values = df[col]
        if _is_numeric(values):
            values = values.astype(float)
            bad = np.isinf(values)  # pandas reads "inf" as a number; empty cells are NaN (not logged)
            if bad.any():
                nonfinite_mask[col] = bad
            numeric[col] = values.where(~bad, np.nan)
            continue
        text = values.astype("string").str.strip()
        parsed = pd.to_numeric(text, errors="coerce")
        present = text.notna() & (text != "")
        unparsed = present & parsed.isna() & ~text.str.lower().isin(_NONFINITE_TEXT)
        if unparsed.any():
            at = int(np.flatnonzero(unparsed.to_numpy())[0])
            where = f"{path}, line {at + 2}: {col} is {text.iloc[at]!r}"  # line 1 is the header
            if col in KEY_COLUMNS or parsed.notna().any():
                raise ScalingError(f"{where}, not a number; {_CELL_FIX}")
            text_cells[col] = where
            continue  # a text column (tags, notes): not a metric
        parsed = parsed.astype(float)
        bad = present & ~np.isfinite(parsed.to_numpy(dtype=float, na_value=np.nan))
        nonfinite_mask[col] = bad
        numeric[col] = parsed.where(~bad, np.nan)
    table = pd.DataFrame(numeric)
    for col in set(KEY_COLUMNS) & set(df.columns):
        infinite = np.isinf(pd.to_numeric(df[col].astype("string").str.strip(), errors="coerce").to_numpy(dtype=float, na_value=np.nan))
        if infinite.any():
            at = int(np.flatnonzero(infinite)[0])
            raise ScalingError(f"{path}, line {at + 2}: {col} is {df[col].iloc[at]}, not a finite number; {_CELL_FIX}")
    out = []
    for run, idx in runs.groupby(runs, sort=True).groups.items():
        frame = table.loc[idx]
        columns = {col: frame[col].to_numpy(dtype=float) for col in frame.columns}
        counts = Counter({col: int(mask.loc[idx].sum()) for col, mask in nonfinite_mask.items() if mask.loc[idx].any()})
        name = _run_name(path, "csv") + (f":{run}" if run_col is not None else "")
        out.append(_RawRun(name, path, "csv", columns, {}, counts, text_cells=text_cells))
    return out


# --- one run: steps, n, b_problem, compute ---------------------------------------------------------


class _Notes:
    """Notes grouped by kind, so 500 runs that all lack ``rollouts`` make one line, not 500."""

    def __init__(self) -> None:
        self._runs: dict[str, list[str]] = defaultdict(list)

    def add(self, text: str, run: str) -> None:
        self._runs[text].append(run)

    def render(self) -> list[str]:
        return [f"{text}: {name_runs(runs)}" for text, runs in self._runs.items()]


def name_runs(runs: list[str]) -> str:
    """The first few run names and how many there are."""
    return ", ".join(runs[:3]) + (f", ... ({len(runs)} runs)" if len(runs) > 3 else "")


def _finalize(raw: _RawRun, settings: RunSettings, derive_compute: bool, notes: _Notes):
    """One run's columns in step order with n, b_problem, rollouts and tokens settled, and its row of ``runs``."""
    cols = raw.columns
    if raw.truncated_line:
        notes.add("last line (record) was cut off mid-write and skipped", raw.name)
    if "step" not in cols or len(cols["step"]) == 0:
        raise ScalingError(f"{raw.path}: no training steps logged (every line needs a 'step')")
    step = cols["step"]
    if np.isnan(step).any():
        raise ScalingError(f"{raw.name}: a line has no step number; every logged line needs 'step'")
    duplicates = int(len(step) - len(np.unique(step)))
    if duplicates:
        # A resumed run re-logs the steps it re-ran: the last value of each metric wins.
        frame = pd.DataFrame(cols).groupby("step", sort=True).last().reset_index()
        cols = {col: frame[col].to_numpy(dtype=float) for col in frame.columns}
        notes.add("duplicate steps (a resumed run?): kept the last value logged for each step", raw.name)
    elif np.any(np.diff(step) < 0):
        order = np.argsort(step, kind="stable")
        cols = {col: values[order] for col, values in cols.items()}
    else:
        cols = dict(cols)
    step = cols["step"]

    meta: dict[str, Any] = {"run": raw.name, "path": str(raw.path), "format": raw.fmt}
    for key in ("n", "b_problem"):
        value, source = settings.resolve(raw.name, raw.path, raw.root, raw.fmt, cols.get(key), cols["step"], raw.header,
                                         key, notes)
        cols.pop(key, None)  # one value per run: a column of runs (see _stack)
        meta[key] = value
        meta[f"{key}_source"] = source

    per_step = float(meta["n"] * meta["b_problem"])
    spent = {column: _guidance_spend(cols, column) for column in (WITH_GUIDANCE["rollouts"], WITH_CURATION["rollouts"])}
    if "rollouts" in cols and not np.isnan(cols["rollouts"]).all() and not derive_compute:
        meta["rollouts_source"] = "log"
    else:
        cols["rollouts"] = step * per_step
        meta["rollouts_source"] = "--derive-compute" if derive_compute else "derived"
    # C with the rollouts spent before training (runlog.WITH_GUIDANCE, WITH_CURATION): training C plus that spend
    for column, guidance in spent.items():
        cols[column] = cols["rollouts"] + (guidance or 0.0)
        meta[f"{column}_source"] = (
            meta["rollouts_source"] if meta["rollouts_source"] != "log" else "log" if guidance is not None else "rollouts"
        )
    if "tokens" in cols and not np.isnan(cols["tokens"]).all() and not derive_compute:
        meta["tokens_source"] = "log"
    else:
        meta["tokens_source"] = None
        cols["tokens"] = _derived_tokens(step, cols.get(RESPONSE_LENGTH), per_step)
        if not np.isnan(cols["tokens"]).all():
            meta["tokens_source"] = "derived"
    meta["steps"] = len(step)
    meta["duplicate_steps"] = duplicates
    for key in ("model", "recipe", "dataset_size"):
        meta[key] = raw.header.get(key)
    return cols, meta


def _guidance_spend(cols: dict[str, np.ndarray], column: str = WITH_GUIDANCE["rollouts"]) -> float | None:
    """The rollouts a run spent before training on its guided data: ``column - rollouts`` (``rollouts_with_guidance``
    or ``rollouts_with_curation``), constant over the run by the run-log contract (None when the run does not log it)."""
    with_guidance = cols.get(column)
    if with_guidance is None or "rollouts" not in cols:
        return None
    spent = with_guidance - cols["rollouts"]
    spent = spent[~np.isnan(spent)]
    if not len(spent):
        return None
    if np.ptp(spent) > 0:
        raise ScalingError(
            f"{column} - rollouts is not constant over the run ({spent.min():g} to {spent.max():g}): "
            "the guidance spend is fixed before training; fix the log"
        )
    return float(spent[0])


def _derived_tokens(step: np.ndarray, lengths: np.ndarray | None, per_step: float) -> np.ndarray:
    """Cumulative generated tokens from the mean response length of every training step, when no step
    from 1 on is missing (else unknown, NaN); 0 at step 0."""
    tokens = np.full(len(step), np.nan)
    if lengths is None:
        return tokens
    train = step >= 1
    seen = step[train]
    if len(seen) and not np.isnan(lengths[train]).any() and np.array_equal(seen, np.arange(1, len(seen) + 1)):
        tokens[train] = np.cumsum(lengths[train] * per_step)
        tokens[step == 0] = 0.0
    return tokens
