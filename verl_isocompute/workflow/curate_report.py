"""What a curation writes: difficulty.parquet, the splits, mixtures and train / validation sets as verl rows
annotated with their difficulty, the histogram (the paper's Figure 2), report.md and summary.json.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from verl_isocompute import atomic
from verl_isocompute.data.difficulty import (
    DEFAULT_MAX_VAL_FRACTION,
    DEFAULT_MIXTURE_SIZE,
    DEFAULT_VAL_SIZE,
    SETS,
    Thresholds,
    assign_splits,
    build_mixtures,
    train_val_split,
)
from verl_isocompute.figures import agg_figure
from verl_isocompute.jsonl import plain


def annotated_rows(problems: pd.DataFrame, difficulty: pd.DataFrame) -> pd.DataFrame:
    """The original verl rows of the sampled problems, their difficulty added to ``extra_info``."""
    table = difficulty.set_index("problem_id")
    rows = problems[problems["problem_id"].isin(table.index)].copy()
    extras = []
    for pid, extra in zip(rows["problem_id"], rows["extra_info"] if "extra_info" in rows else [None] * len(rows)):
        extra = dict(plain(extra)) if isinstance(plain(extra), dict) else {}
        extra.update({
            "difficulty_id": pid, "difficulty_k": int(table.at[pid, "k"]),
            "difficulty_avg_at_k": float(table.at[pid, "avg@k"]), "difficulty_pass_at_k": float(table.at[pid, "pass@k"]),
        })
        extras.append(extra)
    rows["extra_info"] = extras
    return rows.set_index("problem_id", drop=True)


def plot_difficulty(difficulty: pd.DataFrame, thresholds: Thresholds, k: int, path: Path, title: str = "") -> Path:
    """Histogram of the base model's avg@k over problems, with the difficulty bands shaded (Figure 2)."""
    fig = agg_figure(figsize=(7, 4))
    ax = fig.subplots()
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
    return atomic.save_figure(path, fig, dpi=120)


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
    atomic.write_parquet(out_dir / "difficulty.parquet", difficulty)
    splits = assign_splits(difficulty, thresholds)
    mixtures = build_mixtures(splits, mixture_size, seed)
    members = {**splits, **{name: m.ids for name, m in mixtures.items()}}
    for name, ids in splits.items():
        atomic.write_parquet(out_dir / "splits" / f"{name}.parquet", rows.loc[ids].reset_index(drop=True))
    for name, mixture in mixtures.items():
        atomic.write_parquet(out_dir / "mixtures" / f"{name}.parquet", rows.loc[mixture.ids].reset_index(drop=True))
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
        atomic.write_parquet(out_dir / "sets" / name / "train.parquet", rows.loc[train].reset_index(drop=True))
        atomic.write_parquet(out_dir / "sets" / name / "val.parquet", rows.loc[val].reset_index(drop=True))
        if tune:
            atomic.write_parquet(out_dir / "sets" / name / "tune.parquet", rows.loc[tune].reset_index(drop=True))
        train_val[name] = (len(train), len(val), len(tune))
    plot_difficulty(difficulty, thresholds, k, out_dir / "difficulty.png")
    atomic.write_parquet(out_dir / "skipped.parquet", skipped)
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
    from verl_isocompute.guided.search_tables import sampled_in

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
                         "(an interruption between an outcome and its traces).")
        if traces["pass_k"]:
            lines += ["", f"Rejection sampling (pass@{traces['pass_k']}): {rej['problems']} problems without a correct "
                      f"sample in the first {k} got {rej['samples']} more samples in {rej['rounds']} rounds of up to {k}; "
                      f"{rej['problems_solved']} found a correct one. avg@{k}, pass@{k}, the splits and the mixtures use "
                      f"the first {k} samples only: rejection samples (rejection.jsonl) never change them."]
        lines += ["", "Rollouts spent, recomputed from the cache on every run: spend.json (stages curation, rejection_sampling)."]
    lines += ["", "Files: difficulty.parquet, splits/*.parquet, mixtures/*.parquet, sets/<set>/{train,val}.parquet, "
              "difficulty.png, skipped.parquet, samples.jsonl (the per-problem cache), curation.json (its settings).", ""]
    return "\n".join(lines)
