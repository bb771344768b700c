"""A run table: n and B_problem per run for logs that do not record them (``isocompute fit --run-table FILE``).

A CSV with columns ``run``, ``n``, ``b_problem`` (verl's key names work too: ``actor_rollout_ref.rollout.n``,
``data.train_batch_size``) or a YAML mapping ``run: {n: 16, b_problem: 32}`` (or a list of such rows). Where it
stands among the other sources of n and B_problem, and which names a row may use for its run:
:mod:`verl_isocompute.scaling.run_settings`. A CSV may name one setting twice (``n`` and
``actor_rollout_ref.rollout.n``): the two cells of a row must agree where both are filled in. Also the column
matching the CSV reader shares. Pure.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_isocompute.scaling.errors import ScalingError

# Column names other tools use for the same things (verl: rollout.n, data.train_batch_size). A "config." /
# "config/" prefix is ignored when matching.
RUN_ALIASES = ("run", "run_id", "run_name", "name", "experiment_name", "trainer.experiment_name")
N_ALIASES = ("n", "rollout.n", "actor_rollout_ref.rollout.n")
B_ALIASES = ("b_problem", "train_batch_size", "data.train_batch_size")

def find_columns(columns: Iterable[str], aliases: tuple[str, ...]) -> list[str]:
    """Every one of ``columns`` named like one of ``aliases`` (case and a ``config.`` prefix aside), in the order of
    ``aliases``."""

    def bare(name: str) -> str:
        name = str(name).strip()
        for prefix in ("config.", "config/"):
            if name.lower().startswith(prefix):
                name = name[len(prefix):]
        return name

    wanted = [alias.lower() for alias in aliases]
    named = [(wanted.index(bare(col).lower()), col) for col in columns if bare(col).lower() in wanted]
    return [col for _, col in sorted(named, key=lambda pair: pair[0])]


def find_column(columns: Iterable[str], aliases: tuple[str, ...]) -> str | None:
    """The first of ``columns`` named like one of ``aliases`` (see :func:`find_columns`)."""
    return next(iter(find_columns(columns, aliases)), None)


# --- the run table -------------------------------------------------------------------------------------


@dataclass
class RunTable:
    """``--run-table FILE``: run -> {"n": ..., "b_problem": ...}, with the line each row came from, the keys the
    file has a column (CSV) or an entry (YAML) for, and, once :meth:`match` saw the runs, the row of each run."""

    path: Path
    rows: dict[str, dict[str, Any]]
    where: dict[str, str]
    columns: frozenset[str] = frozenset(("n", "b_problem"))
    row_of: dict[str, str] = field(default_factory=dict)

    def match(self, runs: list[str]) -> None:
        """Give each run its row, by the first of its names (see the module docstring) that keys one. A row that
        matches no run (a typo would fall through to another source) and a row that matches several (one
        setting applied to runs that may differ) are errors naming the fix."""
        self.row_of = {}
        for run in runs:
            key = next((name for name in _names_of(run) if name in self.rows), None)
            if key is not None:
                self.row_of[run] = key
        matched: dict[str, list[str]] = {}
        for run, key in self.row_of.items():
            matched.setdefault(key, []).append(run)
        for key, named in matched.items():
            if len(named) > 1:
                raise ScalingError(
                    f"{self.where[key]}: run {key!r} matches {len(named)} runs ({_shown(named)}); key each row by "
                    f"the run's full name as the fit shows it (e.g. {next((r for r in named if r != key), named[0])!r}), one row per run"
                )
        unused = [key for key in self.rows if key not in matched]
        if unused:
            raise ScalingError(
                f"{self.where[unused[0]]}: run {unused[0]!r} matches no run given; the runs are named {_shown(runs)} "
                "(the full name, its last path component, or the name after ':')"
            )

    def lookup(self, name: str) -> tuple[str, dict[str, Any]] | None:
        """The row :meth:`match` gave the run named ``name``, with its key."""
        key = self.row_of.get(name)
        return None if key is None else (key, self.rows[key])

    def lacks(self, name: str, key: str) -> str:
        """What this table lacks for ``key`` of the run ``name``, and where to add it."""
        found = self.lookup(name)
        if found is None:
            return (f"--run-table {self.path} has no row for it (a row's run is the full name, its last path "
                    f"component or the name after ':'); add one with its {key}")
        if key not in self.columns:
            return f"--run-table {self.path} has no {key} column; add one"
        return f"{self.where[found[0]]} gives no {key} for it (an empty cell, null or .nan); fill it in"


def _shown(runs: list[str]) -> str:
    return ", ".join(runs[:5]) + (f", ... ({len(runs)} runs)" if len(runs) > 5 else "")


def _names_of(name: str) -> list[str]:
    names = [name]
    if ":" in name:
        names.append(name.rsplit(":", 1)[1])
    last = re.split(r"[/\\]", name.split(":", 1)[0].rstrip("/\\"))[-1]
    return [*names, last]


def load_run_table(path: str | os.PathLike) -> RunTable:
    """Read a run table: CSV (``run,n,b_problem`` columns; verl's key names work too) or YAML."""
    path = Path(path)
    if not path.is_file():
        raise ScalingError(f"--run-table {path}: no such file; give a CSV (run,n,b_problem) or a YAML run: {{n, b_problem}}")
    if path.suffix.lower() == ".csv":
        rows = _csv_rows(path)
    else:
        rows = _yaml_rows(path)
    table: dict[str, dict[str, Any]] = {}
    where: dict[str, str] = {}
    for line, run, values in rows:
        at = f"--run-table {path}, {line}"
        if run in table:
            raise ScalingError(f"{at}: run {run!r} is listed twice ({where[run]}); list each run once")
        checked = {}
        for key, value in values.items():
            if _blank(value):
                continue
            number = positive_int(value)
            if number is None:
                raise ScalingError(f"{at}: {key} of {run!r} must be a positive integer, got {value!r}")
            checked[key] = number
        if not checked:
            raise ScalingError(f"{at}: run {run!r} has neither n nor b_problem")
        table[run], where[run] = checked, at
    if not table:
        raise ScalingError(f"--run-table {path} lists no runs")
    return RunTable(path, table, where, frozenset(key for _, _, values in rows for key in values))


def _csv_rows(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=object, keep_default_na=False, na_values=[""], encoding="utf-8-sig")
    except (OSError, ValueError) as exc:
        raise ScalingError(f"--run-table {path}: cannot read as CSV ({exc})") from None
    run_col = find_column(df.columns, RUN_ALIASES)
    cols = {key: find_columns(df.columns, aliases) for key, aliases in (("n", N_ALIASES), ("b_problem", B_ALIASES))}
    if run_col is None or not any(cols.values()):
        raise ScalingError(f"--run-table {path}: needs a run column and an n and/or b_problem column (header: run,n,b_problem)")
    rows = []
    for i, row in df.iterrows():
        run = str(row[run_col]).strip()
        values = {key: _one_value(row, named, f"--run-table {path}, line {i + 2}", run) for key, named in cols.items() if named}
        rows.append((f"line {i + 2}", run, values))
    return rows


def _one_value(row, columns: list[str], at: str, run: str) -> Any:
    """The row's value of one key, which several columns may hold (``n`` and ``actor_rollout_ref.rollout.n``): they
    must agree where both are filled in, since keeping either one would silently drop the other."""
    filled = [(col, row[col]) for col in columns if not _blank(row[col])]
    for col, value in filled[1:]:
        first_col, first = filled[0]
        if _compared(value) != _compared(first):
            raise ScalingError(f"{at}: run {run!r} has {first_col}={first} and {col}={value}; the two columns name one "
                               "setting: keep one of them, or make them agree")
    return filled[0][1] if filled else None


def _compared(value: Any) -> Any:
    number = positive_int(value)
    return str(value).strip() if number is None else number


def _blank(value: Any) -> bool:
    """An empty cell, YAML's null or .nan: the row gives no value for that key."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value.strip())


def _yaml_rows(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ScalingError(f"--run-table {path}: cannot read as YAML ({str(exc).splitlines()[0]})") from None
    if isinstance(loaded, dict):
        items = [(str(run), values) for run, values in loaded.items()]
    elif isinstance(loaded, list) and all(isinstance(row, dict) and "run" in row for row in loaded):
        items = [(str(row["run"]), {k: v for k, v in row.items() if k != "run"}) for row in loaded]
    else:
        raise ScalingError(f"--run-table {path}: expected a mapping run: {{n: N, b_problem: B}} or a list of {{run, n, b_problem}}")
    rows = []
    for run, values in items:
        if not isinstance(values, dict):
            raise ScalingError(f"--run-table {path}: the entry of {run!r} must be a mapping {{n: N, b_problem: B}}")
        unknown = sorted(set(values) - {"n", "b_problem"})
        if unknown:
            raise ScalingError(f"--run-table {path}: run {run!r} has unknown key(s) {', '.join(unknown)}; use n and b_problem")
        rows.append((f"run {run!r}", run, values))
    return rows


def positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number >= 1 and number == int(number) else None
