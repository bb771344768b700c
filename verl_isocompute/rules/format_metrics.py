"""Format or skill? Validation rates that separate writing the answer form from computing the answer. Pure.

A rise in the reward can be the model learning the answer format (a box, "The answer is ...") or learning
the task. Four rates over all validation samples tell them apart (each sample's flags come from the reward,
:func:`verl_isocompute.rules.answers.diagnostics`):

* ``strict_acc``   the reward's accuracy: the right answer in the answer form;
* ``answer_rate``  a final answer was found at all (box, answer marker, or the response is one number);
* ``echo_rate``    the final answer repeats the question's expression instead of its value;
* ``lenient_acc``  the last number of the response is the right value, the answer form ignored.

Learning the format alone moves ``answer_rate`` and ``strict_acc`` towards ``lenient_acc`` without moving
``lenient_acc``; learning the arithmetic moves ``lenient_acc``. A failed sample (no response came back)
counts as unanswered, wrong and no echo, as it counts as wrong in avg@k.

:func:`problem_counts` gives the same per problem (k samples, how many correct / answered / echo /
lenient), one record per problem and validation, so that before/after comparisons can be paired and
re-computed from a committed file.
"""

from __future__ import annotations

import pandas as pd

# The reward's per-sample flags and the rate each becomes.
FLAGS = {"acc": "strict_acc", "answered": "answer_rate", "echo": "echo_rate", "lenient": "lenient_acc"}
COUNTS = {"acc": "correct", "answered": "answered", "echo": "echo", "lenient": "lenient"}
LABEL = "problem"  # the reward's stable problem name (answers.problem_label)
REWARD_KEYS = frozenset({*FLAGS, LABEL} - {"acc"})  # what the trainer takes from the reward's extra info


def has_flags(samples: pd.DataFrame) -> bool:
    """Whether the samples carry the reward's format flags (a reward of our own; another reward has none)."""
    return all(flag in samples.columns and samples[flag].notna().any() for flag in FLAGS if flag != "acc")


def _flags(samples: pd.DataFrame) -> pd.DataFrame:
    return samples[list(FLAGS)].apply(pd.to_numeric, errors="coerce").fillna(0.0).astype(float)


def format_metrics(samples: pd.DataFrame, prefix: str = "val") -> dict[str, float]:
    """The four rates over all samples and per data source (``f"{prefix}/{rate}"``, ``.../<data_source>``).

    ``samples``: one row per validation sample (failed ones included) with ``data_source`` and the flag
    columns of :data:`FLAGS` (:func:`verl_isocompute.rules.metrics.validation_samples`)."""
    flags = _flags(samples)
    metrics = {f"{prefix}/{FLAGS[flag]}": float(flags[flag].mean()) for flag in FLAGS}
    for source, frame in flags.groupby(samples["data_source"], sort=True):
        metrics.update({f"{prefix}/{FLAGS[flag]}/{source}": float(frame[flag].mean()) for flag in FLAGS})
    return metrics


def problem_counts(samples: pd.DataFrame, step: int) -> list[dict]:
    """One record per problem: ``step``, ``data_source``, ``problem`` (the stable label, "" if the rows
    carry none), ``k`` (samples requested) and the counts correct / answered / echo / lenient."""
    frame = _flags(samples).assign(
        data_source=samples["data_source"], uid=samples["uid"],
        label=samples[LABEL] if LABEL in samples.columns else None,
    )
    records = []
    for (source, _), group in frame.groupby(["data_source", "uid"], sort=False):
        labels = group["label"].dropna()
        records.append({
            "step": int(step), "data_source": str(source), LABEL: str(labels.iloc[0]) if len(labels) else "",
            "k": len(group), **{COUNTS[flag]: int(group[flag].sum()) for flag in FLAGS},
        })
    return sorted(records, key=lambda r: (r["data_source"], r[LABEL]))
