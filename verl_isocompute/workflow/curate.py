"""Difficulty curation: per-problem avg@k of the base model, then the playbook's Easy / Hard / mixed sets.

The IsoCompute playbook (arXiv 2603.12151, section 3) measures the difficulty of a problem as the base
model's avg@16: the share of 16 samples at temperature 0.6 that the answer verifier accepts. Sets are
cut from that number (closed intervals, all configurable here):

- Easy: avg@k in [0.3, 0.6] (with k = 16: 5..9 correct);
- Hard: avg@k in [0, 1/16] (0 or 1 correct of 16);
- Extremely hard: pass@k = 0, no sample correct (the paper uses pass@128; pass ``--k 128`` for that;
  with the same k as Hard, it is the part of Hard with 0 correct);
- Very easy: avg@k in [0.6, 0.9].

and three training mixtures of a target size (the paper: 5,000), which use the Hard recipe:
Hard-only (100% hard), Dual (50% hard + 50% easy) and Tri (50% hard + 25% easy + 25% very easy).
A mixture draws without replacement and never takes a problem twice (pools that overlap at a
boundary give it to the first component); if a pool is too small for the target, the whole mixture
shrinks so the proportions still hold, and the report names the limiting pool. Each set is then split
into train and validation problems (disjoint; the paper holds out 300, fewer for small sets: at most
``max_val_fraction`` of the set), and optionally a tuning split taken from the training problems
(``tune_size``): settings are chosen on it and on training reward, never on the validation problems.

This module holds the curation as a library: :class:`CurateSettings` (every choice, checked by
:meth:`CurateSettings.check` before anything starts) and :func:`curate` (the whole pipeline, callable from
a notebook), plus its parts that need no verl: loading problems, screening them, the per-problem sample
cache, the difficulty table, splits, mixtures, the histogram (the paper's Figure 2) and the report.
Sampling with verl's rollout servers is :mod:`verl_isocompute.workflow.rollouts` (imported only when
there is something to sample); the command ``isocompute curate`` only parses its arguments into a
:class:`CurateSettings`.

A problem's id is a hash of its prompt and ground truth, so the cache (``samples.jsonl``, one line per
sampled problem, appended as problems finish) survives reordering and lets an interrupted curation
resume where it stopped. Problems without a ground truth, with a reference answer the math verifier
cannot parse, with a prompt that is not chat messages, or duplicated are counted, skipped and reported.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from verl_isocompute import atomic
from verl_isocompute.data.problems import ground_truth_of, messages_of, problem_id
from verl_isocompute.data.problems import plain as _plain
from verl_isocompute.jsonl import JsonlAppender, JsonlError, read_jsonl

DEFAULT_K = 16
DEFAULT_TEMPERATURE = 0.6
DEFAULT_VAL_SIZE = 300
DEFAULT_MAX_VAL_FRACTION = 0.2
DEFAULT_MIXTURE_SIZE = 5000
SPLITS = ("easy", "hard", "extremely_hard", "very_easy")
# component, share; the order is the priority when pools overlap
MIXTURES: dict[str, tuple[tuple[str, float], ...]] = {
    "hard_only": (("hard", 1.0),),
    "dual": (("hard", 0.5), ("easy", 0.5)),
    "tri": (("hard", 0.5), ("easy", 0.25), ("very_easy", 0.25)),
}
SETS = SPLITS + tuple(MIXTURES)
SAMPLES_FILE = "samples.jsonl"
SETTINGS_FILE = "curation.json"
_EPS = 1e-9  # c / k is compared with closed interval ends written as decimals (0.3 = 3/10)


class CurateError(ValueError):
    """Input or settings a curation cannot use; the message names the fix."""


@dataclass(frozen=True)
class Thresholds:
    """Difficulty bands on avg@k (closed intervals) and the pass@k bound of the extremely hard split."""

    easy: tuple[float, float] = (0.3, 0.6)
    hard: tuple[float, float] = (0.0, 1.0 / 16)
    very_easy: tuple[float, float] = (0.6, 0.9)
    extremely_hard_max_pass: float = 0.0

    def __post_init__(self) -> None:
        for name in ("easy", "hard", "very_easy"):
            lo, hi = getattr(self, name)
            if not 0.0 <= lo <= hi <= 1.0:
                raise CurateError(f"--{name.replace('_', '-')} {lo},{hi}: need 0 <= low <= high <= 1")
        if not 0.0 <= self.extremely_hard_max_pass < 1.0:
            raise CurateError("the extremely hard pass@k bound must be in [0, 1)")


# --- problems ---------------------------------------------------------------------------------------


def load_parquet(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Rows of verl RL-dataset parquet files (prompt, reward_model, data_source, ...), concatenated."""
    frames = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise CurateError(f"{path} does not exist; pass parquet files in verl's format (--data FILE ...)")
        try:
            frames.append(pd.read_parquet(path))
        except Exception as exc:  # pyarrow raises several types for a file that is not parquet
            raise CurateError(f"{path} is not a readable parquet file: {exc}") from None
    if not frames:
        raise CurateError("no data: pass --data FILE.parquet ... or --generate TASK")
    df = pd.concat(frames, ignore_index=True)
    for column in ("prompt", "reward_model"):
        if column not in df.columns:
            raise CurateError(
                f"the data has no {column!r} column (columns: {list(df.columns)}); verl's format needs prompt "
                "(chat messages) and reward_model.ground_truth"
            )
    return df


WORKED = "worked"  # our generator with a worked solution per problem (verl_isocompute.data.worked), not reasoning-gym's


def generate(task: str, size: int, seed: int = 0, **kwargs: Any) -> pd.DataFrame:
    """A seeded, offline problem set from a reasoning-gym generator, as verl rows; ``worked``: arithmetic chains
    with a worked solution in ``extra_info.solution`` (options ``terms``, ``digits``), for guided training."""
    from verl_isocompute.data.arithmetic import to_verl_row

    if task == WORKED:
        from verl_isocompute.data.worked import worked_arithmetic

        unknown = sorted(set(kwargs) - {"terms", "digits"})
        if unknown:
            raise CurateError(f"--generate worked: unknown --gen-arg {', '.join(unknown)}; it takes terms and digits")
        try:
            return worked_arithmetic(size, seed=seed, **{k: int(v) for k, v in kwargs.items()})
        except (TypeError, ValueError) as exc:
            raise CurateError(f"--generate worked: {exc}") from None

    try:
        import reasoning_gym
    except ImportError:
        raise CurateError("--generate needs reasoning-gym: pip install reasoning-gym==0.1.25") from None
    if size < 1:
        raise CurateError(f"--size must be at least 1, got {size}")
    try:
        dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **kwargs)
    except Exception as exc:  # unknown task names and bad generator options
        raise CurateError(f"reasoning-gym task {task!r} with {kwargs}: {exc}") from None
    rows = [
        to_verl_row(item["question"], str(item["answer"]), "curate", i, data_source=f"reasoning_gym/{task}")
        for i, item in enumerate(dataset)
    ]
    return pd.DataFrame(rows)


def answer_checks_out(ground_truth: str) -> bool:
    """Does the reference answer, written as a final ``\\boxed{}`` answer, score 1 with our math reward?

    If it does not, math-verify cannot parse it, and no response could ever be scored correct.
    """
    from verl_isocompute.training.reward import compute_score

    return bool(compute_score("curate", f"\\boxed{{{ground_truth}}}", ground_truth)["acc"])


def screen(df: pd.DataFrame, check_answers: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split rows into usable problems (with a ``problem_id`` column) and skipped ones (with a reason)."""
    ids, keep, skipped = [], [], []
    seen: dict[str, int] = {}
    for i, row in enumerate(df.itertuples(index=False)):
        row = row._asdict()
        messages = messages_of(row.get("prompt"))
        truth = ground_truth_of(row.get("reward_model"))
        reason, detail = None, ""
        if messages is None:
            reason = "prompt is not a list of chat messages"
        elif truth is None:
            reason = "no ground truth"
        elif check_answers and not answer_checks_out(truth):
            reason, detail = "unparsable ground truth", truth[:80]
        else:
            pid = problem_id(messages, truth)
            if pid in seen:
                reason, detail = "duplicate", f"same prompt and answer as row {seen[pid]}"
            else:
                seen[pid] = i
                ids.append(pid)
                keep.append(i)
        if reason is not None:
            skipped.append({"row": i, "reason": reason, "detail": detail})
    problems = df.iloc[keep].reset_index(drop=True)
    problems.insert(0, "problem_id", ids)
    return problems, pd.DataFrame(skipped, columns=["row", "reason", "detail"])


# --- the per-problem cache --------------------------------------------------------------------------


class _Appended(JsonlAppender):
    """A cache file of JSON lines appended one record at a time (:mod:`verl_isocompute.jsonl`: a last line
    cut by an interruption is skipped and reported, any other bad line is an error naming it)."""

    def lines(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        try:
            return read_jsonl(self.path).dicts()
        except JsonlError as exc:
            raise CurateError(f"{exc}; or rerun with --restart to discard the cache in {self.path.parent}") from None


class SampleCache:
    """``samples.jsonl`` (one record per sampled problem: its first k samples) and ``curation.json`` (the
    settings it holds); with ``--pass-k``, ``rejection.jsonl`` (one record per rejection round of a problem);
    with ``--keep-correct``, ``traces.jsonl.gz`` (the correct responses, :mod:`verl_isocompute.guided.traces`).

    Records are appended as problems (rounds) finish; a line cut by an interruption is skipped (and reported)
    on reading, any other bad line is an error naming it.
    The prefix search keeps its per-rung records the same way under its own file names.
    """

    def __init__(self, out_dir: Path, settings: dict[str, Any], restart: bool = False,
                 samples_file: str = SAMPLES_FILE, settings_file: str = SETTINGS_FILE) -> None:
        from verl_isocompute.guided.traces import REJECTION_FILE, TRACES_FILE

        self.path = out_dir / samples_file
        self.settings_path = out_dir / settings_file
        out_dir.mkdir(parents=True, exist_ok=True)
        if restart:
            # curation's rejection rounds and traces go with its samples (not with another tool's cache)
            for name in (samples_file, *((REJECTION_FILE, TRACES_FILE) if samples_file == SAMPLES_FILE else ())):
                (out_dir / name).unlink(missing_ok=True)
        if self.settings_path.is_file() and self.path.is_file():
            old = json.loads(self.settings_path.read_text())
            changed = {k: (old.get(k), v) for k, v in settings.items() if old.get(k) != v}
            if changed:
                what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                raise CurateError(
                    f"{out_dir} holds samples taken with other settings ({what}); use another --out, "
                    "or --restart to discard them"
                )
        atomic.write_text(self.settings_path, json.dumps(settings, indent=2) + "\n")
        self.samples = _Appended(self.path)
        self.rounds = _Appended(out_dir / REJECTION_FILE)
        self.traces_path = out_dir / TRACES_FILE
        self._traces = None

    def records(self) -> list[dict[str, Any]]:
        """Every complete record, in the order written."""
        return self.samples.lines()

    def load(self) -> dict[str, dict[str, Any]]:
        """The newest record of each problem (a problem re-sampled with --resample-untraced has two lines)."""
        return {record["id"]: record for record in self.samples.lines()}

    def load_rounds(self) -> dict[str, list[dict[str, Any]]]:
        """Each problem's rejection rounds, in order."""
        out: dict[str, list[dict[str, Any]]] = {}
        for record in self.rounds.lines():
            out.setdefault(record["id"], []).append(record)
        return out

    def append(self, record: dict[str, Any]) -> None:
        self.samples.append(record)

    def append_round(self, record: dict[str, Any]) -> None:
        self.rounds.append(record)

    def keep_traces(self) -> None:
        """Open ``traces.jsonl.gz`` for appending (created now, so an empty one says: kept, none correct yet)."""
        from verl_isocompute.guided.traces import TraceWriter

        if self._traces is None:
            self._traces = TraceWriter(self.traces_path)

    def append_traces(self, lines: list[dict[str, Any]]) -> None:
        self.keep_traces()
        self._traces.write(lines)

    def spend(self) -> dict[str, Any]:
        """Rollouts and tokens of every sampling in the cache per problem, recomputed from its lines (a rerun never
        adds twice): curation = the first k of each problem (also the k of a record later replaced), rejection =
        its rounds."""
        from verl_isocompute.guided.spend import CURATION, REJECTION_SAMPLING, per_problem

        return {CURATION: per_problem(self.samples.lines()), REJECTION_SAMPLING: per_problem(self.rounds.lines())}

    def close(self) -> None:
        self.samples.close()
        self.rounds.close()
        if self._traces is not None:
            self._traces.close()
            self._traces = None


# --- what to sample: curation's k, then rejection rounds (pass@K) ----------------------------------


def to_resample(records: dict[str, dict[str, Any]], problem_ids: Iterable[str], out: Path, keep_correct: bool,
                resample_untraced: bool) -> set[str]:
    """Cached problems to sample again: with --keep-correct, those with a correct sample whose responses were
    not kept (sampled without the flag). Never mixed silently: without --resample-untraced they are an error
    naming the fix. (A cached problem with no correct sample has nothing to keep and stays as it is.)"""
    if not keep_correct:
        return set()
    stale = {pid for pid in problem_ids if pid in records and records[pid]["correct"] > 0
             and not records[pid].get("traces_kept")}
    if stale and not resample_untraced:
        raise CurateError(
            f"{out} holds {len(stale)} problems with correct samples taken without --keep-correct (their responses "
            "are gone): add --resample-untraced to sample them again (their avg@k is measured anew), or use "
            "another --out, or --restart"
        )
    return stale


def progress_of(record: dict[str, Any] | None, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A problem's sampling so far: curated (has its first k), samples taken, correct found, rejection rounds done."""
    if record is None:
        return {"curated": False, "taken": 0, "found": 0, "rounds": 0}
    return {"curated": True, "taken": int(record["k"]) + sum(int(r["k"]) for r in rounds),
            "found": int(record["correct"]) + sum(int(r["correct"]) for r in rounds), "rounds": len(rounds)}


def next_round(state: dict[str, Any], k: int, pass_k: int | None) -> tuple[int, int]:
    """(round, samples) a problem needs next: round 0 = curation's k; then the rejection rounds of
    :func:`verl_isocompute.guided.traces.rejection_round`; samples 0 when it needs nothing."""
    from verl_isocompute.guided.traces import rejection_round

    if not state["curated"]:
        return 0, k
    return state["rounds"] + 1, rejection_round(k, pass_k, state["taken"], state["found"])


def trace_counts(records: dict[str, dict[str, Any]], rounds: dict[str, list[dict[str, Any]]],
                 traces: list[dict[str, Any]], pass_k: int | None) -> dict[str, Any]:
    """What the report says about traces and rejection sampling (all recomputed from the cache files)."""
    have = {t["id"] for t in traces}
    found = {pid for pid, r in records.items() if r["correct"] > 0} | {pid for pid, rs in rounds.items() if any(r["correct"] for r in rs)}
    rejected = [r for rs in rounds.values() for r in rs]
    return {
        "pass_k": pass_k, "traces": len(traces), "problems_with_trace": len(have),
        "problems_correct_without_trace": len(found - have),
        "rejection": {"problems": len(rounds), "rounds": len(rejected), "samples": sum(int(r["k"]) for r in rejected),
                      "problems_solved": sum(1 for rs in rounds.values() if any(r["correct"] for r in rs))},
    }


# --- difficulty, splits, mixtures -------------------------------------------------------------------


def difficulty_table(problems: pd.DataFrame, records: dict[str, dict[str, Any]], k: int) -> pd.DataFrame:
    """One row per sampled problem: k, correct, avg@k, pass@k, mean response tokens, truncated share."""
    from verl_isocompute.training.metrics import best_at_k

    rows = []
    for pid, source in zip(problems["problem_id"], problems.get("data_source", pd.Series([None] * len(problems)))):
        record = records.get(pid)
        if record is None:
            continue
        tokens = record.get("response_tokens") or [0]
        rows.append({
            "problem_id": pid, "data_source": source, "k": record["k"], "correct": record["correct"],
            "mean_response_tokens": float(np.mean(tokens)), "truncated": record.get("truncated", 0) / record["k"],
        })
    table = pd.DataFrame(rows, columns=["problem_id", "data_source", "k", "correct", "mean_response_tokens", "truncated"])
    table.insert(4, "avg@k", table["correct"] / table["k"])
    table.insert(5, "pass@k", best_at_k(table["k"], table["correct"], k) if len(table) else [])
    return table


def _in(values: pd.Series, band: tuple[float, float]) -> pd.Series:
    return (values >= band[0] - _EPS) & (values <= band[1] + _EPS)


def assign_splits(difficulty: pd.DataFrame, thresholds: Thresholds = Thresholds()) -> dict[str, list[str]]:
    """Problem ids of each split (they may overlap: extremely hard lies inside hard, see the module doc)."""
    avg, passed = difficulty["avg@k"], difficulty["pass@k"]
    masks = {
        "easy": _in(avg, thresholds.easy),
        "hard": _in(avg, thresholds.hard),
        "extremely_hard": passed <= thresholds.extremely_hard_max_pass + _EPS,
        "very_easy": _in(avg, thresholds.very_easy),
    }
    return {name: difficulty.loc[mask, "problem_id"].tolist() for name, mask in masks.items()}


@dataclass
class Mixture:
    ids: list[str]
    counts: dict[str, int]
    note: str


def build_mixtures(splits: dict[str, list[str]], size: int = DEFAULT_MIXTURE_SIZE, seed: int = 0) -> dict[str, Mixture]:
    """The paper's mixtures, each of ``size`` problems or the largest size the pools allow."""
    if size < 1:
        raise CurateError(f"--mixture-size must be at least 1, got {size}")
    out = {}
    for name, parts in MIXTURES.items():
        # make the pools disjoint in priority order, so no problem is drawn twice
        taken: set[str] = set()
        pools = {}
        for component, _ in parts:
            pools[component] = [p for p in splits[component] if p not in taken]
            taken.update(pools[component])
        limits = {c: math.floor(len(pools[c]) / share + _EPS) for c, share in parts}
        actual = min([size, *limits.values()])
        counts = {c: int(round(actual * share)) for c, share in parts}
        counts[parts[0][0]] = actual - sum(v for c, v in counts.items() if c != parts[0][0])
        rng = np.random.default_rng(seed)
        ids: list[str] = []
        for component, _ in parts:
            ids += rng.permutation(pools[component])[: counts[component]].tolist()
        ids = rng.permutation(ids).tolist() if ids else []
        if actual < size:
            limiting = min(limits, key=limits.get)
            note = (f"{actual} of the {size} asked: only {len(pools[limiting])} {limiting} problems "
                    f"for a {dict(parts)[limiting]:.0%} share")
        else:
            note = f"{actual} problems"
        out[name] = Mixture(ids, counts, note)
    return out


def train_val_split(ids: list[str], val_size: int = DEFAULT_VAL_SIZE, max_val_fraction: float = DEFAULT_MAX_VAL_FRACTION,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """Disjoint (train, val) ids: ``val_size`` held out, at most ``max_val_fraction`` of the set, at least one.

    A set of fewer than two problems cannot be split: both lists come back empty.
    """
    if len(ids) < 2:
        return [], []
    n_val = max(1, min(val_size, int(math.floor(len(ids) * max_val_fraction))))
    order = np.random.default_rng(seed).permutation(len(ids))
    shuffled = [ids[i] for i in order]
    return shuffled[n_val:], shuffled[:n_val]


# --- outputs ----------------------------------------------------------------------------------------


def _write_parquet_atomic(frame: pd.DataFrame, path: Path) -> Path:
    with atomic.replacing(path) as tmp:
        frame.to_parquet(tmp, index=False)
    return path


def annotated_rows(problems: pd.DataFrame, difficulty: pd.DataFrame) -> pd.DataFrame:
    """The original verl rows of the sampled problems, their difficulty added to ``extra_info``."""
    table = difficulty.set_index("problem_id")
    rows = problems[problems["problem_id"].isin(table.index)].copy()
    extras = []
    for pid, extra in zip(rows["problem_id"], rows["extra_info"] if "extra_info" in rows else [None] * len(rows)):
        extra = dict(_plain(extra)) if isinstance(_plain(extra), dict) else {}
        extra.update({
            "difficulty_id": pid, "difficulty_k": int(table.at[pid, "k"]),
            "difficulty_avg_at_k": float(table.at[pid, "avg@k"]), "difficulty_pass_at_k": float(table.at[pid, "pass@k"]),
        })
        extras.append(extra)
    rows["extra_info"] = extras
    return rows.set_index("problem_id", drop=True)


def plot_difficulty(difficulty: pd.DataFrame, thresholds: Thresholds, k: int, path: Path, title: str = "") -> Path:
    """Histogram of the base model's avg@k over problems, with the difficulty bands shaded (Figure 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    # one bar per possible value c/k; the bands are shaded exactly (closed intervals)
    counts = difficulty["avg@k"].round(9).value_counts().sort_index()
    ax.bar(counts.index, counts.values, width=0.7 / k, color="#4c72b0", zorder=2)
    for name, band, color in (("hard", thresholds.hard, "#c44e52"), ("easy", thresholds.easy, "#55a868"),
                              ("very easy", thresholds.very_easy, "#8172b2")):
        ax.axvspan(band[0], band[1], color=color, alpha=0.15, label=f"{name} [{band[0]:g}, {band[1]:g}]", zorder=1)
    ax.set_xlabel(f"avg@{k} of the base model (share of {k} samples correct)")
    ax.set_ylabel("problems")
    ax.set_xlim(-0.5 / k, 1 + 0.5 / k)
    ax.set_title(title or f"Difficulty of {len(difficulty)} problems")
    ax.legend(loc="upper center", fontsize=8)
    fig.tight_layout()
    with atomic.replacing(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path


def write_outputs(
    out_dir: Path,
    problems: pd.DataFrame,
    difficulty: pd.DataFrame,
    skipped: pd.DataFrame,
    settings: dict[str, Any],
    thresholds: Thresholds = Thresholds(),
    mixture_size: int = DEFAULT_MIXTURE_SIZE,
    sets: Iterable[str] = SETS,
    val_size: int = DEFAULT_VAL_SIZE,
    max_val_fraction: float = DEFAULT_MAX_VAL_FRACTION,
    seed: int = 0,
    tune_size: int = 0,
    traces: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write difficulty.parquet, splits/, mixtures/, sets/<set>/{train,val[,tune]}.parquet, difficulty.png, report.md.

    Returns a summary (sizes per split, mixture and train/val set; ``traces``: what :func:`trace_counts`
    says, with --keep-correct) that the report also shows.
    """
    out_dir = Path(out_dir)
    k = int(settings["k"])
    rows = annotated_rows(problems, difficulty)
    _write_parquet_atomic(difficulty, out_dir / "difficulty.parquet")
    splits = assign_splits(difficulty, thresholds)
    mixtures = build_mixtures(splits, mixture_size, seed)
    members = {**splits, **{name: m.ids for name, m in mixtures.items()}}
    for name, ids in splits.items():
        _write_parquet_atomic(rows.loc[ids].reset_index(drop=True), out_dir / "splits" / f"{name}.parquet")
    for name, mixture in mixtures.items():
        _write_parquet_atomic(rows.loc[mixture.ids].reset_index(drop=True), out_dir / "mixtures" / f"{name}.parquet")
    train_val: dict[str, tuple[int, int, int] | None] = {}
    for name in sets:
        train, val = train_val_split(members[name], val_size, max_val_fraction, seed)
        # the tuning split comes out of the (already shuffled) training problems, so the validation
        # problems are the same with or without one
        n_tune = min(tune_size, len(train) - 1) if train else 0
        tune, train = train[:n_tune], train[n_tune:]
        if not train:
            train_val[name] = None
            continue
        _write_parquet_atomic(rows.loc[train].reset_index(drop=True), out_dir / "sets" / name / "train.parquet")
        _write_parquet_atomic(rows.loc[val].reset_index(drop=True), out_dir / "sets" / name / "val.parquet")
        if tune:
            _write_parquet_atomic(rows.loc[tune].reset_index(drop=True), out_dir / "sets" / name / "tune.parquet")
        train_val[name] = (len(train), len(val), len(tune))
    plot_difficulty(difficulty, thresholds, k, out_dir / "difficulty.png")
    _write_parquet_atomic(skipped, out_dir / "skipped.parquet")
    summary = {
        "problems": int(len(problems) + len(skipped)), "sampled": int(len(difficulty)), "skipped": int(len(skipped)),
        "skipped_by_reason": skipped["reason"].value_counts().to_dict() if len(skipped) else {},
        "splits": {name: len(ids) for name, ids in splits.items()},
        "mixtures": {name: {"size": len(m.ids), "counts": m.counts, "note": m.note} for name, m in mixtures.items()},
        "train_val": {name: (None if tv is None else {"train": tv[0], "val": tv[1], **({"tune": tv[2]} if tv[2] else {})})
                      for name, tv in train_val.items()},
        "mean_avg_at_k": float(difficulty["avg@k"].mean()) if len(difficulty) else None,
        "thresholds": asdict(thresholds),
        "traces": traces,
    }
    atomic.write_text(out_dir / "report.md", render_report(summary, settings, skipped))
    atomic.write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def render_report(summary: dict[str, Any], settings: dict[str, Any], skipped: pd.DataFrame) -> str:
    from verl_isocompute.guided.prefix_search import sampled_in

    k = settings["k"]
    t = summary["thresholds"]
    lines = [
        "# Difficulty curation",
        "",
        f"Base model `{settings.get('model')}`, {k} samples per problem at temperature {settings.get('temperature')} "
        f"(top_p {settings.get('top_p')}, at most {settings.get('max_response_length')} response tokens), "
        f"rollout `{settings.get('rollout')}`{sampled_in(settings.get('dtype'))}, reward `{settings.get('reward')}`. "
        "Thresholds of the IsoCompute playbook (arXiv 2603.12151, section 3) unless changed.",
        "",
        f"Problems: {summary['problems']}; sampled: {summary['sampled']}; skipped: {summary['skipped']}. "
        f"Mean avg@{k}: {summary['mean_avg_at_k'] if summary['mean_avg_at_k'] is None else round(summary['mean_avg_at_k'], 4)}.",
        "",
        "## Splits",
        "",
        "| split | rule | problems |",
        "|---|---|---|",
        f"| easy | avg@{k} in [{t['easy'][0]:g}, {t['easy'][1]:g}] | {summary['splits']['easy']} |",
        f"| hard | avg@{k} in [{t['hard'][0]:g}, {t['hard'][1]:g}] | {summary['splits']['hard']} |",
        f"| extremely_hard | pass@{k} <= {t['extremely_hard_max_pass']:g} | {summary['splits']['extremely_hard']} |",
        f"| very_easy | avg@{k} in [{t['very_easy'][0]:g}, {t['very_easy'][1]:g}] | {summary['splits']['very_easy']} |",
        "",
        "## Mixtures (train with the Hard recipe)",
        "",
        "| mixture | composition | problems | note |",
        "|---|---|---|---|",
    ]
    for name, m in summary["mixtures"].items():
        comp = " + ".join(f"{v} {c}" for c, v in m["counts"].items())
        lines.append(f"| {name} | {comp} | {m['size']} | {m['note']} |")
    tuned = any(tv and "tune" in tv for tv in summary["train_val"].values())
    lines += ["", "## Train / validation", "", "| set | train | val |" + (" tune |" if tuned else ""),
              "|---|---|---|" + ("---|" if tuned else "")]
    for name, tv in summary["train_val"].items():
        if tv is None:
            lines.append(f"| {name} | not written: fewer than 2 problems | - |" + (" - |" if tuned else ""))
        else:
            lines.append(f"| {name} | {tv['train']} | {tv['val']} |" + (f" {tv.get('tune', 0)} |" if tuned else ""))
    lines += ["", "## Skipped problems", ""]
    if not len(skipped):
        lines.append("None.")
    else:
        lines += ["| reason | count | example rows |", "|---|---|---|"]
        for reason, group in skipped.groupby("reason"):
            examples = ", ".join(f"{r}" + (f" ({d})" if d else "") for r, d in zip(group["row"][:3], group["detail"][:3]))
            lines.append(f"| {reason} | {len(group)} | {examples} |")
    traces = summary.get("traces")
    if traces is not None:
        rej = traces["rejection"]
        lines += ["", "## Traces (PrefixRL, `--keep-correct`)", "",
                  f"{traces['traces']} correct responses kept for {traces['problems_with_trace']} problems in "
                  "traces.jsonl.gz (text and token ids; `isocompute guide --traces DIR` cuts prefixes from them)."]
        if traces["problems_correct_without_trace"]:
            lines.append(f"{traces['problems_correct_without_trace']} problems with a correct sample have no kept trace "
                         "(an interruption between a record and its traces).")
        if traces["pass_k"]:
            lines += ["", f"Rejection sampling (pass@{traces['pass_k']}): {rej['problems']} problems without a correct "
                      f"sample in the first {k} got {rej['samples']} more samples in {rej['rounds']} rounds of up to {k}; "
                      f"{rej['problems_solved']} found a correct one. avg@{k}, pass@{k}, the splits and the mixtures use "
                      f"the first {k} samples only: rejection samples (rejection.jsonl) never change them."]
        lines += ["", "Rollouts spent, recomputed from the cache on every run: spend.json (stages curation, rejection_sampling)."]
    lines += ["", "Files: difficulty.parquet, splits/*.parquet, mixtures/*.parquet, sets/<set>/{train,val}.parquet, "
              "difficulty.png, skipped.parquet, samples.jsonl (the per-problem cache), curation.json (its settings).", ""]
    return "\n".join(lines)


# --- the whole curation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CurateSettings:
    """Every choice of a curation; ``isocompute curate --help`` describes each (same names, ``-`` for ``_``).

    Exactly one source: ``data`` (verl parquet files) or ``generate`` (a reasoning-gym task, ``size``
    problems, ``gen_args``). ``model`` / ``rollout`` / ``max_response_length`` of None keep the recipe's.
    """

    out: Path
    data: tuple[str, ...] = ()
    generate: str | None = None
    size: int = 200
    gen_args: dict[str, Any] = field(default_factory=dict)
    recipe: str = "cpu_demo"
    model: str | None = None
    rollout: str | None = None
    k: int = DEFAULT_K
    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = 1.0
    top_k: int = -1
    max_response_length: int | None = None
    thresholds: Thresholds = Thresholds()
    mixture_size: int = DEFAULT_MIXTURE_SIZE
    sets: tuple[str, ...] = SETS
    val_size: int = DEFAULT_VAL_SIZE
    max_val_fraction: float = DEFAULT_MAX_VAL_FRACTION
    tune_size: int = 0  # tuning problems per set, taken from its training problems (sets/<set>/tune.parquet)
    seed: int = 0
    concurrency: int = 64
    ray_address: str | None = None
    check_answers: bool = True
    restart: bool = False
    keep_correct: bool = False  # keep the correct responses as PrefixRL traces (guided/traces.py)
    pass_k: int | None = None  # rejection sampling: problems with no success get more rounds of k, up to pass_k in all
    resample_untraced: bool = False  # with keep_correct: sample again cached problems whose responses were not kept
    overrides: tuple[str, ...] = ()

    def check(self) -> None:
        """Raise :class:`CurateError` naming the flag and the fix; cheap, before any model or Ray start-up."""
        if bool(self.data) == bool(self.generate):
            raise CurateError("give exactly one source: --data FILE.parquet ... or --generate TASK")
        out = Path(self.out)
        if out.exists() and not out.is_dir():
            raise CurateError(f"--out {out} is a file; give a directory (it is created if needed)")
        unknown = sorted(set(self.sets) - set(SETS))
        if unknown or not self.sets:
            raise CurateError(f"--sets {','.join(unknown) or '(empty)'}: choose from {','.join(SETS)}")
        for flag, value in (("--k", self.k), ("--mixture-size", self.mixture_size), ("--val-size", self.val_size),
                            ("--concurrency", self.concurrency), ("--size", self.size)):
            if value < 1:
                raise CurateError(f"{flag} must be at least 1, got {value}")
        if self.tune_size < 0:
            raise CurateError(f"--tune-size must be at least 0 (0 = no tuning split), got {self.tune_size}")
        if not 0 < self.max_val_fraction < 1:
            raise CurateError(f"--max-val-fraction must be in (0, 1), got {self.max_val_fraction}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise CurateError(f"--temperature must be > 0 (avg@k needs k different samples; the paper: 0.6), "
                              f"got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0 < self.top_p <= 1):
            raise CurateError(f"--top-p must be in (0, 1] (1 = off), got {self.top_p}")
        if self.top_k != -1 and self.top_k < 1:
            raise CurateError(f"--top-k must be -1 (off) or at least 1, got {self.top_k}")
        if self.pass_k is not None and not self.keep_correct:
            raise CurateError("--pass-k samples more only to find correct responses to keep: add --keep-correct")
        if self.pass_k is not None and self.pass_k <= self.k:
            raise CurateError(f"--pass-k {self.pass_k} counts every sample of a problem, curation's --k {self.k} "
                              "included: give more than --k")
        if self.resample_untraced and not self.keep_correct:
            raise CurateError("--resample-untraced re-samples problems to keep their correct responses: add --keep-correct")
        if self.max_response_length is not None and self.max_response_length < 1:
            raise CurateError(f"--max-response-length must be at least 1 token, got {self.max_response_length}")

    def recipe_overrides(self) -> list[str]:
        """The verl overrides these settings put on the recipe (model, rollout backend, sampling)."""
        out = list(self.overrides) + model_overrides(self.model)
        if self.rollout:
            out.append(f"actor_rollout_ref.rollout.name={self.rollout}")
        out += [
            f"actor_rollout_ref.rollout.temperature={self.temperature}",
            f"actor_rollout_ref.rollout.top_p={self.top_p}",
            f"actor_rollout_ref.rollout.top_k={self.top_k}",
        ]
        if self.max_response_length is not None:
            out.append(f"data.max_response_length={self.max_response_length}")
        return out


def model_overrides(model: str | None) -> list[str]:
    """The recipe overrides of ``--model`` (curation, the prefix search): a built-in name (tiny, smollm2) or a
    local checkpoint path; None keeps the recipe's model."""
    from verl_isocompute.cpu.models import MODEL_NAMES

    if model in MODEL_NAMES:
        return [f"isocompute.model={model}"]
    if model:
        return ["isocompute.model=null", f"actor_rollout_ref.model.path={Path(model).expanduser().absolute()}"]
    return []


def _stderr(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def sampling_config(recipe: str, overrides: list[str]):
    """The recipe composed and prepared for sampling with the base model outside training (curation, the
    prefix search): platform, model, the rollout and reward parts resolved, our plugin registered."""
    from omegaconf import OmegaConf

    from verl_isocompute.training.config import (
        compose_recipe,
        prepare_model,
        prepare_platform,
        resolve,
    )

    cfg = compose_recipe(recipe, overrides)
    prepare_platform(cfg)
    # The recipes write the model path, n and dtypes as our resolvers' interpolations, which read the
    # whole config (``_root_``); verl turns ``actor_rollout_ref.model`` into a dataclass on its own, so
    # resolve the parts curation hands to verl now (not the recipe's training data: curation brings its own).
    for key in ("actor_rollout_ref", "reward"):
        if OmegaConf.select(cfg, key) is not None:
            resolve(cfg[key])
    prepare_model(cfg)
    # As in main.run: register our plugin now that VERL_PLATFORM is final (verl swallows a plugin
    # that failed while verl was being imported, e.g. through verl_isocompute.cpu.models).
    from verl_isocompute.plugin import register_all

    register_all()
    return cfg


def sampling_identity(cfg, k: int) -> dict[str, Any]:
    """What makes cached samples comparable: model, rollout backend, k, sampling parameters, reward."""
    rollout = cfg.actor_rollout_ref.rollout
    reward = cfg.reward.get("custom_reward_function") or {}
    return {
        "model": str(cfg.actor_rollout_ref.model.path), "rollout": str(rollout.name), "k": k,
        "temperature": float(rollout.temperature), "top_p": float(rollout.top_p), "top_k": int(rollout.top_k),
        "max_response_length": int(rollout.response_length),
        "reward": f"{reward.get('path')}:{reward.get('name')}" if reward.get("path") else "verl_isocompute.training.reward:compute_score",
    }


def sampling_dtype(cfg) -> str | None:
    """The dtype the rollout samples in (``actor_rollout_ref.rollout.dtype``): curation and the prefix search
    sample in it, which need not be the dtype a training run computes in (its own recipe's)."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, "actor_rollout_ref.rollout.dtype", default=None)
    return None if value is None else str(value)


def curate(settings: CurateSettings, log: Callable[[str], None] = _stderr, progress: bool = True) -> dict[str, Any]:
    """Measure avg@k per problem and write the sets into ``settings.out``; returns the summary.

    Steps: check the settings; load or generate the problems and screen them (nothing usable fails
    before any model is touched); compose the recipe; open the sample cache (settings that differ from
    the cached samples' are an error); sample what is not cached with verl's rollout servers; write the
    outputs. Raises :class:`CurateError` (or the recipe's / model's own error) on bad input, and
    :class:`~verl_isocompute.workflow.launch.Interrupted` after a SIGTERM / SIGINT once Ray is shut down
    and the cache is closed (what was sampled stays cached: run again to resume).
    """
    settings.check()
    out = Path(settings.out)
    if settings.data:
        df = load_parquet(settings.data)
        source: dict[str, Any] = {"data": [str(Path(p).absolute()) for p in settings.data]}
    else:
        df = generate(settings.generate, settings.size, settings.seed, **settings.gen_args)
        source = {"generate": settings.generate, "size": settings.size, "seed": settings.seed, **settings.gen_args}
    problems, skipped = screen(df, check_answers=settings.check_answers)
    if problems.empty:
        raise CurateError(f"no usable problem among {len(df)}: {skipped['reason'].value_counts().to_dict()}")

    cfg = sampling_config(settings.recipe, settings.recipe_overrides())
    cached_with = sampling_identity(cfg, settings.k)
    cache = SampleCache(out, cached_with, restart=settings.restart)
    log(f"[curate] {len(df)} problems: {len(problems)} usable, {len(skipped)} skipped"
        + (f" ({skipped['reason'].value_counts().to_dict()})" if len(skipped) else ""))
    from verl_isocompute.guided import spend
    from verl_isocompute.guided.traces import read_traces

    try:
        records, rounds = cache.load(), cache.load_rounds()
        stale = to_resample(records, problems["problem_id"], out, settings.keep_correct, settings.resample_untraced)
        if settings.keep_correct:
            cache.keep_traces()
        states = {pid: progress_of(None if pid in stale else records.get(pid), rounds.get(pid, []))
                  for pid in problems["problem_id"]}
        pending = problems[[next_round(states[pid], settings.k, settings.pass_k)[1] > 0 for pid in problems["problem_id"]]]
        n_new = sum(not states[pid]["curated"] for pid in pending["problem_id"])
        log(f"[curate] {len(problems) - n_new} cached, {n_new} to sample "
            f"(k = {settings.k}, {cached_with['rollout']} rollout in {sampling_dtype(cfg)}, model {cached_with['model']})"
            + (f"; {len(pending) - n_new} cached problems without a correct sample continue pass@{settings.pass_k}"
               if settings.pass_k else ""))
        too_long = _sample(cfg, settings, pending, states, cache, records, rounds, log, progress) if len(pending) else []
    finally:
        cache.close()
        for stage, spent in cache.spend().items():  # recomputed from the cache: a rerun never counts twice
            spend.write(out, stage, spent)
    if too_long:
        skipped = pd.concat([skipped, pd.DataFrame(too_long)], ignore_index=True)
    problems = problems[problems["problem_id"].isin(records)].reset_index(drop=True)
    difficulty = difficulty_table(problems, records, settings.k)
    traces = None
    if settings.keep_correct:
        traces = trace_counts(records, rounds, read_traces(out), settings.pass_k)
    return write_outputs(
        out, problems, difficulty, skipped, {**cached_with, "source": source, "dtype": sampling_dtype(cfg)}, settings.thresholds,
        mixture_size=settings.mixture_size, sets=settings.sets, val_size=settings.val_size,
        max_val_fraction=settings.max_val_fraction, seed=settings.seed, tune_size=settings.tune_size, traces=traces,
    )


def _sample(cfg, settings: CurateSettings, pending: pd.DataFrame, states: dict[str, dict], cache: SampleCache,
            records: dict, rounds: dict, log: Callable[[str], None], progress: bool) -> list[dict]:
    """Sample the pending problems into the cache (their first k, then pass@K rounds while none is correct);
    returns the problems skipped as too long."""
    import sys
    import time

    from tqdm import tqdm

    from verl_isocompute.guided.traces import trace_lines
    from verl_isocompute.workflow import launch
    from verl_isocompute.workflow.rollouts import KSampler, ProblemTooLong, sample

    sampler = KSampler(cfg, settings.k, settings.concurrency, keep_correct=settings.keep_correct)
    ready, too_long = [], []
    for row in pending.to_dict("records"):
        messages = messages_of(row["prompt"])
        try:
            prompt_ids = sampler.prompt_ids(messages)
        except ProblemTooLong as exc:
            too_long.append({"row": -1, "reason": "prompt longer than data.max_prompt_length",
                             "detail": f"{row['problem_id']}: {exc}"})
            continue
        ready.append({
            "problem_id": row["problem_id"], "messages": messages, "prompt_ids": prompt_ids,
            "ground_truth": ground_truth_of(row["reward_model"]), "data_source": row.get("data_source"),
            "extra_info": _plain(row.get("extra_info")),
        })
    if not ready:
        return too_long
    desc = f"sampling k={settings.k}" + (f", pass@{settings.pass_k}" if settings.pass_k else "")
    bar = tqdm(total=len(ready), unit="problem", desc=desc, file=sys.stderr, dynamic_ncols=True, disable=not progress)

    def plan(problem: dict) -> tuple[int, int]:
        return next_round(states[problem["problem_id"]], settings.k, settings.pass_k)

    def done(problem: dict, record: dict) -> None:
        pid, state = record["id"], states[problem["problem_id"]]
        kept = record.pop("kept", [])
        round_ = plan(problem)[0]
        if round_ == 0:  # curation's first k: the difficulty
            if settings.keep_correct:
                record["traces_kept"] = True
            cache.append(record)
            records[pid] = record
            state.update(progress_of(record, []))
        else:  # a rejection round: kept apart, so avg@k and the splits never see it
            record["round"] = round_
            cache.append_round(record)
            rounds.setdefault(pid, []).append(record)
            state.update(taken=state["taken"] + record["k"], found=state["found"] + record["correct"], rounds=round_)
        # after the record: an interruption between the two loses this round's traces, never duplicates them
        if settings.keep_correct:
            cache.append_traces(trace_lines(pid, round_, kept))
        if plan(problem)[1] == 0:
            bar.update(1)

    started = time.perf_counter()
    # SIGTERM / Ctrl-C raise at once (also inside ray.get); Ray and its rollout servers are shut down
    # before the exception leaves, and what was sampled stays cached.
    try:
        with launch.stopping_ray():
            sample(sampler, ready, done, ray_address=settings.ray_address, next_round=plan)
    except launch.Interrupted:
        launch.shutdown_ray()
        raise
    finally:
        bar.close()
    log(f"[curate] sampled {len(ready)} problems in {time.perf_counter() - started:.0f} s")
    return too_long
