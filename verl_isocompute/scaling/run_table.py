"""A run table: n and B_problem per run for logs that do not record them (``isocompute fit --run-table FILE``).

A CSV with columns ``run``, ``n``, ``b_problem`` (verl's key names work too: ``actor_rollout_ref.rollout.n``,
``data.train_batch_size``) or a YAML mapping ``run: {n: 16, b_problem: 32}`` (or a list of such rows). Where it
stands among the other sources of n and B_problem, and which names a row may use for its run:
:mod:`verl_isocompute.scaling.run_settings`. Also the column matching the CSV reader shares. Pure.
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

def find_column(columns: Iterable[str], aliases: tuple[str, ...]) -> str | None:
    """The first of ``columns`` named like one of ``aliases`` (case and a ``config.`` prefix aside)."""

    def bare(name: str) -> str:
        name = str(name).strip()
        for prefix in ("config.", "config/"):
            if name.lower().startswith(prefix):
                name = name[len(prefix):]
        return name

    by_bare = {}
    for col in columns:
        by_bare.setdefault(bare(col), col)
        by_bare.setdefault(bare(col).lower(), col)
    for alias in aliases:
        for key in (alias, alias.lower()):
            if key in by_bare:
                return by_bare[key]
    return None


# --- the run table -------------------------------------------------------------------------------------


@dataclass
class RunTable:
    """``--run-table FILE``: run -> {"n": ..., "b_problem": ...}, with the line each row came from."""

    path: Path
    rows: dict[str, dict[str, Any]]
    where: dict[str, str]
    used: set[str] = field(default_factory=set)

    def lookup(self, name: str) -> tuple[str, dict[str, Any]] | None:
        """The row for the run named ``name`` (see the module docstring for the names a row may use)."""
        for key in _names_of(name):
            if key in self.rows:
                self.used.add(key)
                return key, self.rows[key]
        return None

    def check_all_used(self, runs: list[str]) -> None:
        unused = [key for key in self.rows if key not in self.used]
        if unused:
            shown = ", ".join(runs[:5]) + (f", ... ({len(runs)} runs)" if len(runs) > 5 else "")
            raise ScalingError(
                f"{self.where[unused[0]]}: run {unused[0]!r} matches no run given; the runs are named {shown} "
                "(the full name, its last path component, or the name after ':')"
            )


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
            if value is None or (isinstance(value, float) and math.isnan(value)):
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
    return RunTable(path, table, where)


def _csv_rows(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    import pandas as pd

    try:
        df = pd.read_csv(path, dtype=object, keep_default_na=False, na_values=[""], encoding="utf-8-sig")
    except (OSError, ValueError) as exc:
        raise ScalingError(f"--run-table {path}: cannot read as CSV ({exc})") from None
    run_col = find_column(df.columns, RUN_ALIASES)
    cols = {key: find_column(df.columns, aliases) for key, aliases in (("n", N_ALIASES), ("b_problem", B_ALIASES))}
    if run_col is None or all(col is None for col in cols.values()):
        raise ScalingError(f"--run-table {path}: needs a run column and an n and/or b_problem column (header: run,n,b_problem)")
    return [
        (f"line {i + 2}", str(row[run_col]).strip(), {key: row[col] for key, col in cols.items() if col is not None})
        for i, row in df.iterrows()
    ]


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
