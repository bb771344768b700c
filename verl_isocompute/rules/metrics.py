"""Validation and training diagnostics of the IsoCompute playbook, as pure functions (numpy/pandas only).

Validation (arXiv 2603.12151, section 2): each validation problem is sampled n times (the paper: 4, at
temperature 0.6) and three numbers are reported, each a mean over problems:

* ``avg@k``   mean correctness, c / n for a problem with c of n samples correct;
* ``best@k``  probability that at least one of k samples is correct (pass@k);
* ``worst@k`` probability that all k samples are correct.

With n >= k samples, the unbiased estimators are the combinatorial ones, averaging over all k-subsets of
the n samples without replacement::

    best@k  = 1 - C(n - c, k) / C(n, k)        worst@k = C(c, k) / C(n, k)

computed as products of k ratios, which stay in [0, 1] for any n (C(2048, 1024) would overflow a float).
For k = n they are the share of problems with at least one / with all samples correct, as in the paper.
verl's own ``best@k``/``worst@k`` validation metrics bootstrap k samples *with* replacement, so a draw
can repeat a sample and see fewer distinct ones: their best@k is biased low and worst@k biased high (and
they are noisy); these estimators have neither problem.

A validation sample that failed (its agent loop raised) leaves no sample behind. It still counts, as a
wrong answer, exactly as verl counts it (``expected_acc_counts``): :func:`validation_samples` pads each
problem up to the number of samples that were requested for it, so n is the requested count, never the
number that happened to come back, and a failure can neither raise nor flatter best@k.

Which sample is correct is decided in one place, :func:`is_correct`, for training (the zero-variance masks,
the training accuracy), validation and curation alike.

Training diagnostics (section 6): the distribution of per-problem pass rates within an epoch shows
whether progress is uniform or rich-get-richer (interference between problems), and epochs are
steps * b_problem / D. Compute that verl sampled and then discarded (a group with a failed rollout is
evicted and replaced by a new prompt) is counted by :func:`evicted_groups`.

Noise. A validation mean over P problems is itself an estimate: its standard error over problems,
``std(per-problem avg@k) / sqrt(P)`` (:func:`stderr_over_problems`), counts both the spread of difficulty
and the k-sample binomial noise of each problem. Two validations of the *same* problems (before and after
training) are compared by the mean of the per-problem differences and *its* standard error, the paired
one (:func:`paired_change`): problem difficulty cancels, so it is smaller than the two SEs combined. A
change within two standard errors is not evidence of anything (:func:`describe_change`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from verl_isocompute import _compat

Samples = pd.DataFrame | Mapping[str, Any] | Iterable[Mapping[str, Any]]

# A score above this is a correct answer when the reward does not say (its ``acc``); see is_correct.
CORRECT_ABOVE = 0.5

# validation_records until 0.2 ("records" are the fit's record-breaking points); the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"validation_records": "validation_samples"})


def is_correct(score: Any, acc: Any = None) -> bool:
    """Whether a sample is correct: the reward's binary ``acc`` when it reports one (verl passes the keys of
    a reward's dict on as ``reward_extra_info``; ours and verl's DAPO reward give ``acc``), else
    ``score > 0.5``.

    The playbook's rewards are binary (arXiv 2603.12151: 1 for a verified answer, else 0), and verl's
    default scorers give 0/1 or +1/-1. A reward with a format bonus gives a wrong but well-formed answer a
    little (e.g. 0.1): ``score > 0`` would call that answer correct, and the zero-variance filter would see
    an all-correct group where curation (which used 0.5) saw a Hard problem. The midpoint 0.5 separates
    right from wrong for 0/1, +1/-1 and such bonuses alike; one rule for training, validation and curation
    means a difficulty set and the training accuracy never disagree about a sample.
    """
    if acc is not None:
        return bool(acc)
    return float(score) > CORRECT_ABOVE


def _k_subset_ratio(top: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
    """C(top, k) / C(n, k) per entry, as prod_{i<k} (top - i) / (n - i); 0 when top < k."""
    i = np.arange(k)
    ratios = (top[:, None] - i) / (n[:, None] - i)
    return np.prod(np.clip(ratios, 0.0, None), axis=1)


def _check_counts(n: Any, c: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    n = np.asarray(n, dtype=float).reshape(-1)
    c = np.asarray(c, dtype=float).reshape(-1)
    if n.shape != c.shape:
        raise ValueError(f"n and c must have the same length, got {n.size} and {c.size}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if np.any((c < 0) | (c > n)):
        raise ValueError("each problem needs 0 <= c <= n correct samples")
    if np.any(n < k):
        raise ValueError(f"every problem needs n >= k = {k} samples, but the fewest is {int(n.min())}")
    return n, c


def best_at_k(n: Any, c: Any, k: int) -> np.ndarray:
    """Unbiased pass@k per problem: chance that k of its n samples (drawn without replacement) hold a correct one."""
    n, c = _check_counts(n, c, k)
    return 1.0 - _k_subset_ratio(n - c, n, k)


def worst_at_k(n: Any, c: Any, k: int) -> np.ndarray:
    """Unbiased all-correct@k per problem: chance that k of its n samples are all correct."""
    n, c = _check_counts(n, c, k)
    return _k_subset_ratio(c, n, k)


def _per_problem(samples: Samples, columns: list[str]) -> pd.DataFrame:
    """One row per problem: its data_source, uid, number of samples n and number correct c."""
    frame = samples if isinstance(samples, pd.DataFrame) else pd.DataFrame(samples)
    missing = [col for col in columns if col not in frame.columns]
    if missing:
        raise ValueError(f"samples need columns {columns}, missing {missing}")
    acc = pd.to_numeric(frame["acc"]).astype(float)
    if not acc.isin([0.0, 1.0]).all():
        raise ValueError("acc must be binary correctness (0/1 or bool), e.g. the reward's 'acc', not a shaped score")
    keys = [col for col in columns if col != "acc"]
    # dropna=False: a problem with a missing data_source still counts in the overall metrics.
    grouped = frame.assign(acc=acc).groupby(keys, sort=True, dropna=False)["acc"]
    return grouped.agg(n="size", c="sum").reset_index()


def validation_samples(
    sample_uids: Iterable[Any],
    data_sources: Iterable[Any],
    acc: Iterable[float],
    expected_counts: Mapping[tuple[str, str], int] | None = None,
    default_n: int | None = None,
    extra: Mapping[str, Iterable[Any]] | None = None,
) -> tuple[pd.DataFrame, int]:
    """One row per validation sample, with every failed sample present as a wrong one.

    Args:
        sample_uids, data_sources, acc: one entry per validation sample that came back (acc is 0/1).
        expected_counts: verl's ``expected_acc_counts``: (str(data_source), str(uid)) -> samples requested
            for that problem, for every problem submitted (also those whose samples all failed).
        default_n: without ``expected_counts``, the samples requested per problem that came back
            (``rollout.val_kwargs.n``).
        extra: more columns, one entry per sample that came back (e.g. the reward's format diagnostics); a
            failed sample's are missing (NaN).

    Returns:
        (the samples, columns ``uid``, ``data_source``, ``acc``; the number of failed samples added as acc 0).
    """
    frame = pd.DataFrame({
        "uid": [str(u) for u in sample_uids],
        "data_source": [str(d) for d in data_sources],
        "acc": [float(a) for a in acc],
        **{name: list(values) for name, values in (extra or {}).items()},
    })
    seen = frame.groupby(["data_source", "uid"], sort=False).size()
    if expected_counts is None:
        if default_n is None:
            raise ValueError("pass expected_counts (verl's expected_acc_counts) or default_n")
        expected = pd.Series(int(default_n), index=seen.index)
    else:
        expected = pd.Series(
            [int(c) for c in expected_counts.values()],
            index=pd.MultiIndex.from_tuples([(str(d), str(u)) for d, u in expected_counts], names=["data_source", "uid"]),
            dtype=np.int64,
        )
        unknown = seen.index.difference(expected.index)
        if len(unknown):
            raise ValueError(f"validation samples of {len(unknown)} problem(s) that were never submitted, e.g. {unknown[0]}")
    missing = expected.sub(seen.reindex(expected.index, fill_value=0))
    if (missing < 0).any():
        (source, uid), extra = missing.idxmin(), int(-missing.min())
        raise ValueError(f"problem {uid!r} ({source}) has {extra} more validation samples than were requested")
    failed = missing[missing > 0]
    padding = pd.DataFrame({
        "uid": failed.index.get_level_values("uid").repeat(failed.to_numpy()),
        "data_source": failed.index.get_level_values("data_source").repeat(failed.to_numpy()),
        "acc": 0.0,
    })
    return pd.concat([frame, padding], ignore_index=True), int(failed.sum())


def validation_metrics(samples: Samples, k: int | None = None, prefix: str = "val") -> dict[str, float]:
    """avg@k, best@k and worst@k overall and per data source, from one row per validation sample.

    Args:
        samples: one row per validation sample with columns ``uid`` (the problem), ``data_source`` and
            ``acc`` (0/1); a DataFrame, a dict of columns or a list of dicts.
        k: samples per problem in best@k / worst@k; default: the number of samples per problem
            (which must then be the same for every problem). Every problem needs >= k samples.
        prefix: key prefix.

    Returns:
        ``{f"{prefix}/avg@{k}": .., f"{prefix}/best@{k}": .., f"{prefix}/worst@{k}": ..}`` (means over all
        problems) plus the same three per data source under ``.../<data_source>``, and the standard error
        of the overall avg@k over problems, ``f"{prefix}/avg@{k}_se"`` (NaN with one problem).
    """
    problems = _per_problem(samples, ["data_source", "uid", "acc"])
    if problems.empty:
        raise ValueError("no validation samples")
    if k is None:
        sizes = problems["n"].unique()
        if sizes.size != 1:
            raise ValueError(
                f"problems have between {sizes.min()} and {sizes.max()} samples: pass k explicitly "
                "(every problem needs at least k)"
            )
        k = int(sizes[0])
    short = problems[problems["n"] < k]
    if not short.empty:
        raise ValueError(
            f"{len(short)} problem(s) have fewer than k={k} samples (e.g. uid {short['uid'].iloc[0]!r} has "
            f"{int(short['n'].iloc[0])}): set actor_rollout_ref.rollout.val_kwargs.n >= {k} or pass a smaller k"
        )
    problems["avg"] = problems["c"] / problems["n"]
    problems["best"] = best_at_k(problems["n"], problems["c"], k)
    problems["worst"] = worst_at_k(problems["n"], problems["c"], k)

    def means(frame: pd.DataFrame, suffix: str) -> dict[str, float]:
        return {f"{prefix}/{name}@{k}{suffix}": float(frame[name].mean()) for name in ("avg", "best", "worst")}

    metrics = means(problems, "")
    metrics[f"{prefix}/avg@{k}_se"] = stderr_over_problems(problems["avg"])
    for source, frame in problems.groupby("data_source", sort=True, dropna=False):
        metrics.update(means(frame, f"/{source}"))
    return metrics


def stderr_over_problems(per_problem: Iterable[float]) -> float:
    """Standard error of a mean over problems: sample std (ddof 1) / sqrt(P); NaN for fewer than 2 problems."""
    values = np.asarray(list(per_problem), dtype=float)
    if values.size < 2:
        return float("nan")
    return float(values.std(ddof=1) / np.sqrt(values.size))


@dataclass(frozen=True)
class ValidationChange:
    """Two validations of the same problems: their means, SEs, and the paired difference with its SE."""

    problems: int
    before: float
    before_se: float
    after: float
    after_se: float
    change: float
    change_se: float

    @property
    def z(self) -> float:
        """The change in standard errors (inf when the SE is 0 and the change is not)."""
        if self.change_se > 0:
            return self.change / self.change_se
        return 0.0 if self.change == 0 else math.copysign(math.inf, self.change)


def paired_change(before: Mapping[Any, float], after: Mapping[Any, float]) -> ValidationChange:
    """Per-problem avg@k before and after (keyed by problem): means, SEs and the paired change.

    Only problems in both are compared (the same held-out set validated twice); the change's SE is the
    SE of the per-problem differences, which cancels the spread of difficulty between problems.
    """
    common = [key for key in before if key in after]
    if not common:
        raise ValueError("the two validations share no problem: compare validations of the same problem set")
    b = np.array([float(before[key]) for key in common])
    a = np.array([float(after[key]) for key in common])
    return ValidationChange(
        problems=len(common), before=float(b.mean()), before_se=stderr_over_problems(b),
        after=float(a.mean()), after_se=stderr_over_problems(a),
        change=float((a - b).mean()), change_se=stderr_over_problems(a - b),
    )


NOISE_Z = 2.0  # |change| below two standard errors: what sampling alone often gives (about 1 in 20 at 2 SE)


def describe_change(change: ValidationChange, noise_z: float = NOISE_Z) -> str:
    """The change in words: within noise below ``noise_z`` standard errors, else up / down by z SE."""
    z = change.z
    size = f"{change.change:+.3f} ± {change.change_se:.3f} (paired SE over {change.problems} problems)"
    if math.isnan(z):
        return f"{size}: too few problems to tell noise from change"
    if abs(z) < noise_z:
        return f"{size}: within noise (|change| < {noise_z:g} SE); this run shows no measurable change"
    direction = "up" if z > 0 else "down"
    return f"{size}: {direction} by {abs(z):.1f} SE, more than noise"


def pass_rate_histogram(samples: Samples, bins: int = 10) -> dict[str, Any]:
    """Distribution of per-problem training pass rates (mean acc of each problem's rollouts) within an epoch.

    The paper's interference diagnostic (section 6): under uniform progress the mass moves right together;
    under rich-get-richer, problems pile up at 0 and 1. Pass the samples of one epoch, one row per rollout
    with columns ``uid`` and ``acc`` (0/1). The trainer passes verl's ``uid``, a random id verl draws for each
    prompt group of a step: it names a group, not a problem, so a problem sampled twice counts twice. Within one
    epoch verl's loader draws each problem once, which makes groups and problems the same; which problem each
    group was, step by step, is ``train_problems.jsonl`` (:func:`step_problem_counts`).

    Returns plain data: ``edges`` (bins + 1 fixed edges over [0, 1]; the last bin includes 1), ``counts``
    per bin, ``n_problems``, and the shares of problems never solved (``frac_zero``) and always solved
    (``frac_one``), which the bins alone blur.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    problems = _per_problem(samples, ["uid", "acc"])
    rates = (problems["c"] / problems["n"]).to_numpy()
    counts, edges = np.histogram(rates, bins=bins, range=(0.0, 1.0))
    n_problems = int(rates.size)
    return {
        "edges": edges.tolist(),
        "counts": counts.tolist(),
        "n_problems": n_problems,
        "frac_zero": float(np.mean(rates == 0.0)) if n_problems else 0.0,
        "frac_one": float(np.mean(rates == 1.0)) if n_problems else 0.0,
    }


def step_problem_counts(uids: Any, acc: Any, real: Any, labels: Sequence[str | None] | None) -> list[dict[str, Any]]:
    """One training step's rollouts per problem, for ``train_problems.jsonl`` (:mod:`verl_isocompute.runlog`):
    per prompt group (verl's ``uid``), in first-seen order, ``problem`` (the group's stable label,
    :func:`verl_isocompute.rules.answers.problem_label` of its rows' ``extra_info``; None without one), ``k`` (its
    real rollouts) and ``correct`` (how many of them were right). Padding rows are not rollouts and are left out."""
    uids = np.asarray(uids, dtype=object).reshape(-1)
    acc = np.asarray(acc, dtype=np.float64).reshape(-1)
    real = np.asarray(real, dtype=bool).reshape(-1)
    if labels is not None and len(labels) != uids.size:
        raise ValueError(f"{len(labels)} labels for {uids.size} rows")
    groups: dict[Any, dict[str, Any]] = {}
    for i in np.flatnonzero(real):
        label = labels[i] if labels is not None else None
        group = groups.setdefault(uids[i], {"problem": label or None, "k": 0, "correct": 0})
        group["k"] += 1
        group["correct"] += int(acc[i] > 0.5)
    return list(groups.values())


# verl's per-step counts of prompt groups it sampled and then evicted from its replay buffer (summed over
# the step): groups with a failed rollout, stale groups (async off-policy limit), DAPO-filtered groups.
EVICTION_METRICS = (
    "training/rollout_failure/evicted_samples",
    "training/off_policy/evicted_samples",
    "training/filter_groups/evicted_samples",
)


def evicted_groups(step_metrics: Mapping[str, Any]) -> int:
    """Prompt groups verl sampled in this step and then threw away (:data:`EVICTION_METRICS`).

    Their rollouts were generated, so they are sampling compute (n rollouts each) even though no row of
    theirs reaches the update.
    """
    return int(sum(float(step_metrics.get(key, 0) or 0) for key in EVICTION_METRICS))


def epochs(steps: float, b_problem: int, dataset_size: int) -> float:
    """Passes over the training set after ``steps`` steps of ``b_problem`` problems: steps * b_problem / D."""
    if dataset_size <= 0:
        raise ValueError(f"dataset_size must be positive, got {dataset_size}")
    if steps < 0 or b_problem <= 0:
        raise ValueError(f"need steps >= 0 and b_problem > 0, got steps={steps}, b_problem={b_problem}")
    return steps * b_problem / dataset_size
