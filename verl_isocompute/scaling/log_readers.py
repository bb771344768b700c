"""One reader per log format we parse ourselves, each giving a :class:`RawRun` (float columns per key, in
file order): ``isocompute.jsonl`` and verl's file logger (:func:`read_jsonl_log`), CSV exports
(:func:`read_csv_log`). wandb and tensorboard: :mod:`verl_isocompute.scaling.sources`. What a reader
does with NaN, text and bad lines: :mod:`verl_isocompute.scaling.run_logs`.
"""

from __future__ import annotations

import itertools
import operator
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from verl_isocompute.jsonl import JsonlError, read_jsonl
from verl_isocompute.runlog import WITH_CURATION, WITH_GUIDANCE, verl_line
from verl_isocompute.scaling import sources
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.log_files import real_dir, real_path
from verl_isocompute.scaling.run_table import B_ALIASES, N_ALIASES, RUN_ALIASES, find_column

KEY_COLUMNS = ("run", "step", "n", "b_problem", "rollouts", "tokens", WITH_GUIDANCE["rollouts"], WITH_CURATION["rollouts"])

# Step columns other tools write (wandb history: _step; verl: training/global_step); see run_settings for
# the run, n and b_problem columns.
_STEP_ALIASES = ("step", "_step", "global_step", "training/global_step", "trainer/global_step")
_NONFINITE_JSON = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*(?:null|NaN|-?Infinity)')
_NONFINITE_TEXT = {"nan", "-nan", "+nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity", "null", "none"}


@dataclass
class RawRun:
    name: str
    path: Path
    fmt: str
    columns: dict[str, np.ndarray]  # key -> float values, one per logged line, in file order
    header: dict[str, Any] = field(default_factory=dict)
    nonfinite: Counter = field(default_factory=Counter)
    root: Path | None = None
    truncated_line: bool = False
    text_cells: dict[str, str] = field(default_factory=dict)


def _run_name(path: Path, fmt: str) -> str:
    shown = path
    real, cwd = real_path(path), real_dir(os.getcwd())
    if real.startswith(cwd.rstrip(os.sep) + os.sep):
        shown = Path(real[len(cwd.rstrip(os.sep)) + 1 :])
    if fmt == "isocompute":
        shown = shown.parent
    else:
        shown = shown.with_suffix("")
    return str(shown)


def read_jsonl_log(path: Path, fmt: str) -> RawRun:
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
            line = verl_line(obj)
            if line is None:
                raise ScalingError(
                    f"{path}, line {line_no}: not in verl's file-logger format {{\"step\": N, \"data\": {{...}}}}"
                )
            row = {**line[1], "step": line[0]}
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
    return RawRun(_run_name(path, fmt), path, fmt, columns, header, nonfinite, truncated_line=truncated,
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


def read_csv_log(path: Path) -> list[RawRun]:
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
        out.append(RawRun(name, path, "csv", columns, {}, counts, text_cells=text_cells))
    return out
