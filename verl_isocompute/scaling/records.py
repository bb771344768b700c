"""Run logs -> one table of training steps, whichever tool wrote them.

Three formats are read:

* ``isocompute.jsonl``, ours (the run-log contract of ARCHITECTURE.md): a ``{"header": {...}}`` line with
  the resolved recipe, then one JSON object per training step with ``step``, ``n``, ``b_problem``,
  ``rollouts`` (cumulative compute C), ``tokens`` (cumulative generated tokens), ``epoch``, ``lr``,
  ``train/reward`` and, on validation steps, ``val/avg@k``, ``val/best@k``, ``val/worst@k`` (and the same
  per data source, ``val/avg@4/<data_source>``).
* verl's file logger (``trainer.logger=['file']``, ``verl/utils/tracking.py::FileLogger``): one line
  ``{"step": N, "data": {metric: value, ...}}`` per ``logger.log`` call, written to
  ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`` (or ``$VERL_FILE_LOGGER_PATH``). Step 0 is the
  validation before training. It logs neither n nor B_problem: they come from ``--n/--b-problem``, from a
  hydra ``.hydra/config.yaml`` next to the log (``actor_rollout_ref.rollout.n``, ``data.train_batch_size``)
  or from the run's name (``..._n16_bp32``), in that order.
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
when present (:func:`verl_isocompute.scaling.sources.compute_columns`). Every derivation is reported in
:attr:`RunLogs.notes`.

Duplicate steps (a resumed run re-logs the steps it re-ran) keep the last value logged for each metric.
Values logged as NaN, inf or null (verl's orjson writes NaN as null) are counted per metric and dropped.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from verl_isocompute.runlog import RUN_LOG, RunLogError, read_jsonl
from verl_isocompute.scaling import sources
from verl_isocompute.scaling.errors import ScalingError

KEY_COLUMNS = ("run", "step", "n", "b_problem", "rollouts", "tokens")
RESPONSE_LENGTH = "response_length/mean"

# Column names other tools use for the same things (wandb history: _step; verl: training/global_step,
# rollout.n, data.train_batch_size). A "config." / "config/" prefix is ignored when matching.
_STEP_ALIASES = ("step", "_step", "global_step", "training/global_step", "trainer/global_step")
_RUN_ALIASES = ("run", "run_id", "run_name", "name", "experiment_name", "trainer.experiment_name")
_N_ALIASES = ("n", "rollout.n", "actor_rollout_ref.rollout.n")
_B_ALIASES = ("b_problem", "train_batch_size", "data.train_batch_size")
_NONFINITE_JSON = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*(?:null|NaN|-?Infinity)')
_NONFINITE_TEXT = {"nan", "-nan", "+nan", "inf", "-inf", "+inf", "infinity", "-infinity", "+infinity", "null", "none"}
# Run names such as "easy_n16_bp32" or "n=16-b_problem=32" carry the sweep cell.
_NAME_PATTERNS = {
    "n": re.compile(r"(?:^|[^a-z0-9])n[_=-]?(\d+)(?![0-9])", re.IGNORECASE),
    "b_problem": re.compile(r"(?:^|[^a-z0-9])(?:bp|b_problem|bproblem|b)[_=-]?(\d+)(?![0-9])", re.IGNORECASE),
}


@dataclass
class RunLogs:
    """Every training step of every run, in one table.

    ``steps``: one row per (run, step) with ``run``, ``step``, ``n``, ``b_problem``, ``rollouts``,
    ``tokens`` (NaN where unknown) and one column per logged metric (NaN where not logged).
    ``runs``: one row per run: ``run``, ``path``, ``format``, ``n``, ``b_problem``, where each came from
    (``n_source``, ``b_problem_source``: log | header | --n/--b-problem | .hydra/config.yaml | run name;
    ``rollouts_source``: log | derived | --derive-compute; ``tokens_source``: log | derived | None),
    ``steps``, ``duplicate_steps``, and the header's ``model``, ``recipe``, ``dataset_size``. ``nonfinite``: metric -> number of NaN/inf/null values logged (dropped).
    ``notes``: what was derived or dropped, for the report.
    """

    steps: pd.DataFrame
    runs: pd.DataFrame
    nonfinite: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

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
) -> RunLogs:
    """Load run logs from run directories, log files, or directories searched recursively.

    ``n`` / ``b_problem`` fill in for logs that do not carry them (verl's file logger, a CSV without
    config columns). ``derive_compute`` ignores the logged compute counters and uses
    C = step * n * b_problem (for a run whose counter restarted on resume).
    """
    files = find_logs(paths)
    raws: list[_RawRun] = []
    for path, fmt, root in files:
        if fmt in sources.FORMATS:
            run = sources.read(path, fmt)
            batch = [_RawRun(run.name, run.path, fmt, run.frame, run.header, run.nonfinite, truncated_line=run.truncated)]
        else:
            batch = _read_csv(path) if fmt == "csv" else [_read_jsonl(path, fmt)]
        for raw in batch:
            raw.root = root
        raws.extend(batch)
    if not raws:
        raise ScalingError("no runs found in the log files given")

    notes = _Notes()
    frames, metas = [], []
    nonfinite: Counter = Counter()
    for raw in raws:
        frame, meta = _finalize(raw, {"n": n, "b_problem": b_problem}, derive_compute, notes)
        frames.append(frame)
        metas.append(meta)
        nonfinite.update(raw.nonfinite)
    runs = pd.DataFrame(metas)
    dupes = runs["run"][runs["run"].duplicated()].tolist()
    if dupes:
        raise ScalingError(f"run name {dupes[0]!r} appears twice; pass each run once")
    steps = pd.concat(frames, ignore_index=True, sort=False)
    metric_cols = sorted(c for c in steps.columns if c not in KEY_COLUMNS)
    for col in KEY_COLUMNS:
        if col not in steps:
            steps[col] = np.nan
    steps = steps[list(KEY_COLUMNS) + metric_cols]
    return RunLogs(steps=steps, runs=runs, nonfinite=dict(nonfinite), notes=notes.render())


def find_logs(paths: Iterable[str | os.PathLike]) -> list[tuple[Path, str, Path]]:
    """(file, format, root) for every run log under ``paths``; format is isocompute | verl | csv.

    A directory holding ``isocompute.jsonl`` is one run (its other files are not read: our trainer may
    also run verl's file logger there). Other directories are searched recursively for
    ``isocompute.jsonl`` and verl file-logger ``.jsonl`` files; CSVs are read only when named.
    """
    found: dict[Path, tuple[Path, str, Path]] = {}
    paths = list(paths)
    if not paths:
        raise ScalingError("no runs given: pass run directories, isocompute.jsonl / verl .jsonl / .csv files")
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise ScalingError(f"{path} does not exist; pass run directories or log files")
        if path.is_file():
            fmt = _sniff(path) or sources.sniff(path)
            if fmt is None:
                raise ScalingError(
                    f"{path} is not a run log: expected isocompute.jsonl, a verl file-logger .jsonl "
                    "(lines {\"step\": N, \"data\": {...}}), a .csv with one row per step, a wandb run "
                    "directory or tensorboard event files"
                )
            found.setdefault(path.resolve(), (path, fmt, path.parent))
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            here = Path(dirpath)
            if RUN_LOG in filenames:
                dirnames[:] = []
                found.setdefault((here / RUN_LOG).resolve(), (here / RUN_LOG, "isocompute", path))
                continue
            fmt = sources.run_in_dir(here, filenames)
            if fmt is not None:  # one run per directory, like isocompute.jsonl; wandb's subfolders are its own
                found.setdefault(here.resolve(), (here, fmt, path))
                if fmt == sources.WANDB:
                    dirnames[:] = []
                continue
            for name in sorted(filenames):
                if name.endswith(".jsonl") and _sniff(here / name) == "verl":
                    found.setdefault((here / name).resolve(), (here / name, "verl", path))
    if not found:
        raise ScalingError(
            f"no runs found in {', '.join(str(p) for p in paths)}: looked for {RUN_LOG}, verl "
            "file-logger .jsonl files (trainer.logger=['file']), wandb run directories and tensorboard event "
            "files; pass a .csv export by name"
        )
    return sorted(found.values(), key=lambda item: str(item[0]))


# --- reading ---------------------------------------------------------------------------------------


@dataclass
class _RawRun:
    name: str
    path: Path
    fmt: str
    frame: pd.DataFrame
    header: dict[str, Any] = field(default_factory=dict)
    nonfinite: Counter = field(default_factory=Counter)
    root: Path | None = None
    truncated_line: bool = False


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
        obj = json.loads(first)
    except (OSError, ValueError):
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
    try:
        shown = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    if fmt == "isocompute":
        shown = shown.parent
    else:
        shown = shown.with_suffix("")
    return str(shown)


def _read_jsonl(path: Path, fmt: str) -> _RawRun:
    try:
        jsonl = read_jsonl(path)  # a last line cut by a kill is skipped; the rest is good
    except RunLogError as exc:
        raise ScalingError(str(exc)) from None
    lines, truncated = jsonl.lines, jsonl.cut_last_line
    header: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for line_no, obj in jsonl.objects:
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
    frame = pd.DataFrame.from_records(rows) if rows else pd.DataFrame({"step": []})
    frame = frame[[c for c in frame.columns if _is_numeric(frame[c]) or frame[c].isna().all()]].astype(float)
    # Count logged null/NaN/inf per key on the text of the few lines that have one (not a loop over
    # every value), then make them NaN; a key absent from a line is simply "not logged at this step".
    flagged = [line for line in lines if "null" in line or "NaN" in line or "Infinity" in line]
    found = (m.group(1) for line in flagged for m in _NONFINITE_JSON.finditer(line))
    nonfinite = Counter(key for key in found if key in frame.columns)
    frame = frame.replace([np.inf, -np.inf], np.nan)
    if fmt == "verl":  # our trainer's compute counters, as verl's file logger names them
        frame = sources.compute_columns(frame)
    return _RawRun(_run_name(path, fmt), path, fmt, frame, header, nonfinite, truncated_line=truncated)


def _is_numeric(col: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


def _read_csv(path: Path) -> list[_RawRun]:
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""], low_memory=False)
    except (OSError, ValueError) as exc:
        raise ScalingError(f"{path}: cannot read as CSV ({exc})") from None
    if [c.strip().lower() for c in df.columns] == ["wall time", "step", "value"]:
        raise ScalingError(
            f"{path} is a TensorBoard single-scalar export (Wall time, Step, Value); export one row per step "
            "with a column per metric and config columns n and b_problem (see docs/SCALING.md)"
        )
    step_col = _find_column(df.columns, _STEP_ALIASES)
    if step_col is None:
        raise ScalingError(f"{path}: no step column; name one of {', '.join(_STEP_ALIASES)}")
    run_col = _find_column(df.columns, _RUN_ALIASES)
    renames = {step_col: "step"}
    for key, aliases in (("n", _N_ALIASES), ("b_problem", _B_ALIASES)):
        col = _find_column(df.columns, aliases)
        if col is not None:
            renames[col] = key
    runs = df[run_col].astype(str) if run_col is not None else pd.Series(path.stem, index=df.index)
    df = df.drop(columns=[run_col] if run_col is not None else []).rename(columns=renames)

    numeric: dict[str, pd.Series] = {}
    nonfinite_mask: dict[str, pd.Series] = {}
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
            if col in ("step", "n", "b_problem"):
                bad = text[unparsed].iloc[0]
                raise ScalingError(f"{path}: column {col!r} holds {bad!r}, not a number")
            continue  # a text column (tags, notes): not a metric
        parsed = parsed.astype(float)
        bad = present & ~np.isfinite(parsed.to_numpy(dtype=float, na_value=np.nan))
        nonfinite_mask[col] = bad
        numeric[col] = parsed.where(~bad, np.nan)
    table = pd.DataFrame(numeric)
    out = []
    for run, idx in runs.groupby(runs, sort=True).groups.items():
        frame = table.loc[idx].reset_index(drop=True)
        counts = Counter({col: int(mask.loc[idx].sum()) for col, mask in nonfinite_mask.items() if mask.loc[idx].any()})
        name = _run_name(path, "csv") + (f":{run}" if run_col is not None else "")
        out.append(_RawRun(name, path, "csv", frame, {}, counts))
    return out


def _find_column(columns: Iterable[str], aliases: tuple[str, ...]) -> str | None:
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


def _finalize(raw: _RawRun, overrides: dict[str, int | None], derive_compute: bool, notes: _Notes):
    frame = raw.frame
    if raw.truncated_line:
        notes.add("last line was cut off mid-write and skipped", raw.name)
    if "step" not in frame or len(frame) == 0:
        raise ScalingError(f"{raw.path}: no training steps logged (every line needs a 'step')")
    if frame["step"].isna().any():
        raise ScalingError(f"{raw.name}: a line has no step number; every logged line needs 'step'")
    duplicates = int(frame["step"].duplicated().sum())
    if duplicates:
        # A resumed run re-logs the steps it re-ran: the last value of each metric wins.
        frame = frame.groupby("step", sort=True).last().reset_index()
        notes.add("duplicate steps (a resumed run?): kept the last value logged for each step", raw.name)
    elif not frame["step"].is_monotonic_increasing:
        frame = frame.sort_values("step", kind="stable").reset_index(drop=True)

    meta: dict[str, Any] = {"run": raw.name, "path": str(raw.path), "format": raw.fmt}
    for key in ("n", "b_problem"):
        value, source = _resolve_setting(raw, frame, key, overrides[key], notes)
        frame[key] = value
        meta[key] = value
        meta[f"{key}_source"] = source

    n, b_problem = meta["n"], meta["b_problem"]
    if "rollouts" in frame and frame["rollouts"].notna().any() and not derive_compute:
        meta["rollouts_source"] = "log"
    else:
        frame["rollouts"] = frame["step"] * (n * b_problem)
        meta["rollouts_source"] = "--derive-compute" if derive_compute else "derived"
    if "tokens" in frame and frame["tokens"].notna().any() and not derive_compute:
        meta["tokens_source"] = "log"
    else:
        meta["tokens_source"] = None
        frame["tokens"] = np.nan
        if RESPONSE_LENGTH in frame:
            lengths = frame.loc[frame["step"] >= 1, ["step", RESPONSE_LENGTH]]
            steps_seen = lengths["step"].to_numpy()
            complete = (
                len(lengths) > 0
                and lengths[RESPONSE_LENGTH].notna().all()
                and np.array_equal(steps_seen, np.arange(1, len(steps_seen) + 1))
            )
            if complete:
                cumulative = (lengths[RESPONSE_LENGTH] * (n * b_problem)).cumsum()
                frame.loc[lengths.index, "tokens"] = cumulative.to_numpy()
                frame.loc[frame["step"] == 0, "tokens"] = 0.0
                meta["tokens_source"] = "derived"
    meta["steps"] = int(len(frame))
    meta["duplicate_steps"] = duplicates
    for key in ("model", "recipe", "dataset_size"):
        meta[key] = raw.header.get(key)
    frame["run"] = raw.name
    return frame, meta


def _resolve_setting(raw: _RawRun, frame: pd.DataFrame, key: str, override: int | None, notes: _Notes):
    """n or b_problem for one run, and where it came from: the log, --n/--b-problem, hydra, the name."""
    flag = "--n" if key == "n" else "--b-problem"
    if key in frame and frame[key].notna().any():
        values = frame[key].dropna().unique()
        if len(values) > 1:
            first = frame.loc[frame[key].notna(), ["step", key]]
            changed = first[first[key] != first[key].iloc[0]].iloc[0]
            raise ScalingError(
                f"{raw.name}: {key} changes mid-run ({first[key].iloc[0]:g} at step {first['step'].iloc[0]:g}, "
                f"{changed[key]:g} at step {changed['step']:g}); the fit needs one {key} per run: split the log"
            )
        value, source = values[0], "log"
    elif raw.header.get(key) is not None:
        value, source = raw.header[key], "header"
    elif override is not None:
        value, source = override, flag
    else:
        value, source = _from_hydra(raw, key), ".hydra/config.yaml"
        if value is None:
            value, source = _from_name(raw.name, key), "run name"
        if value is None:
            raise ScalingError(
                f"{raw.name}: the log does not say {key}; pass {flag}, put the run's .hydra/config.yaml next to "
                "the log, or name the run like '..._n16_bp32'"
            )
        notes.add(f"{key} not in the log, taken from the {source}", raw.name)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ScalingError(f"{raw.name}: {key} must be a positive integer, got {value!r}") from None
    if not (math.isfinite(number) and number >= 1 and number == int(number)):
        raise ScalingError(f"{raw.name}: {key} must be a positive integer, got {value!r}")
    if override is not None and source != flag and float(override) != number:
        notes.add(f"{flag} {override} ignored: the log says {key}={int(number)}", raw.name)
    return int(number), source


def _from_hydra(raw: _RawRun, key: str) -> int | None:
    import yaml

    keys = ("actor_rollout_ref", "rollout", "n") if key == "n" else ("data", "train_batch_size")
    folder = raw.path.parent
    stop = (raw.root or folder).resolve()
    for _ in range(4):
        config = folder / ".hydra" / "config.yaml"
        if config.is_file():
            try:
                node = yaml.safe_load(config.read_text())
            except (OSError, yaml.YAMLError):
                return None
            for part in keys:
                node = node.get(part) if isinstance(node, dict) else None
            return node if isinstance(node, int) and not isinstance(node, bool) else None
        if folder.resolve() == stop or folder.parent == folder:
            break
        folder = folder.parent
    return None


def _from_name(name: str, key: str) -> int | None:
    parts = re.split(r"[/\\:]", name)
    for part in reversed(parts):
        match = _NAME_PATTERNS[key].search(part)
        if match:
            return int(match.group(1))
    return None
