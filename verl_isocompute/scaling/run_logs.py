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
(:attr:`RunLogs.text_cells`, checked by :func:`~verl_isocompute.scaling.points.validation_points`).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from verl_isocompute.runlog import WITH_CURATION, WITH_GUIDANCE
from verl_isocompute.scaling import sources
from verl_isocompute.scaling.errors import ScalingError
from verl_isocompute.scaling.log_files import find_logs, unreadable
from verl_isocompute.scaling.log_readers import KEY_COLUMNS, RawRun, read_csv_log, read_jsonl_log
from verl_isocompute.scaling.run_settings import RunSettings, check_one_n
from verl_isocompute.scaling.run_table import load_run_table

RESPONSE_LENGTH = "response_length/mean"
# The source of a spend column a run does not log while it logs the other one (only rollouts_with_guidance, say).
PARTIAL_SPEND = "the other spend column"


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
    raws: list[RawRun] = []
    for path, fmt, root in files:
        try:
            if fmt in sources.FORMATS:
                run = sources.read(path, fmt)
                columns = {key: run.frame[key].to_numpy(dtype=float) for key in run.frame.columns}
                batch = [RawRun(run.name, run.path, fmt, columns, run.header, run.nonfinite, truncated_line=run.truncated,
                                 text_cells=run.text_cells)]
            else:
                batch = read_csv_log(path) if fmt == "csv" else [read_jsonl_log(path, fmt)]
        except OSError as exc:  # an input that cannot be read is named as such, not taken for the output
            raise ScalingError(unreadable(Path(exc.filename or path), exc)) from None
        for raw in batch:
            raw.root = root
        raws.extend(batch)
    if not raws:
        raise ScalingError("no runs found in the log files given")

    notes = _Notes()
    columns, metas = [], []
    nonfinite: Counter = Counter()
    text_cells: dict[str, str] = {}
    if table is not None:
        table.match([raw.name for raw in raws])
    settings = RunSettings(n, b_problem, table)
    for raw in raws:
        cols, meta = _finalize(raw, settings, derive_compute, notes)
        columns.append(cols)
        metas.append(meta)
        nonfinite.update(raw.nonfinite)
        for key, where in raw.text_cells.items():
            text_cells.setdefault(key, where)
    runs = pd.DataFrame(metas)
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


def _finalize(raw: RawRun, settings: RunSettings, derive_compute: bool, notes: _Notes):
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
    check_one_n(raw.name, raw.header, cols)  # a per-prompt-n run has no one n (a schedule run: resolve)
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
    # C with the rollouts spent before training (runlog.WITH_GUIDANCE, WITH_CURATION): training C plus that spend.
    # A run that logs only one of the two columns has an unknown spend in the other (PARTIAL_SPEND).
    for column, guidance in spent.items():
        cols[column] = cols["rollouts"] + (guidance or 0.0)
        if guidance is None and any(other is not None for other in spent.values()):
            meta[f"{column}_source"] = PARTIAL_SPEND
        elif meta["rollouts_source"] != "log":
            meta[f"{column}_source"] = meta["rollouts_source"]
        else:
            meta[f"{column}_source"] = "log" if guidance is not None else "rollouts"
    if "tokens" in cols and not np.isnan(cols["tokens"]).all() and not derive_compute:
        meta["tokens_source"] = "log"
    else:
        meta["tokens_source"] = None
        cols["tokens"] = _derived_tokens(step, cols.get(RESPONSE_LENGTH), per_step)
        if not np.isnan(cols["tokens"]).all():
            meta["tokens_source"] = "derived"
    meta["steps"] = len(step)
    meta["duplicate_steps"] = duplicates
    for key in ("model", "recipe", "dataset_size", "lr", "lr_warmup_steps", "lr_rule", "lr_batch_rollouts"):
        meta[key] = raw.header.get(key)  # the lr settings: what curve.json records of the runs (provenance.py)
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
