"""GRPO advantage estimators of the IsoCompute recipe, registered with verl.

The healthy recipe of the IsoCompute playbook (arXiv 2603.12151, section 2) trains with GRPO outcome
advantages: each problem is sampled ``n`` times, every rollout's binary reward r_i is compared with the
mean of its group, and the difference is divided by the group's standard deviation,

    A_i = (r_i - mean_g) / (std_g + epsilon)        (std with Bessel's correction, as ``torch.std``)

and broadcast over the rollout's response tokens. On complete groups ``isocompute_grpo`` is exactly
verl's ``grpo`` estimator (``norm_adv_by_std_in_grpo=False`` drops the division, as in Dr. GRPO), with
differences that are about robustness, not the method:

* it is vectorised (group ids by hashing, statistics by ``index_add_``): on 65,536 rollouts x 1,024 tokens
  it beats both verl's ``grpo`` (a Python loop over rollouts; ~3x slower) and ``grpo_vectorized`` (which
  sorts the uid strings and casts the mask element by element), see ``benchmarks/bench_advantage.py``;
* a group with zero reward variance gets advantage exactly 0 even when rounding leaves
  ``r_i - mean_g`` a few ulps away from 0 (verl divides that residue by ``epsilon``);
* it is total: a group with fewer than 2 rollouts has no baseline and gets advantage 0 (verl gives it
  mean 0 / std 1, i.e. its raw score), and verl's padding rows (when the trainer says which rows they are,
  :func:`estimator_context`) are left out of every group statistic and get 0. ``rollout.n >= 2`` is checked
  on the config (:func:`verl_isocompute.training.config.check_group_size`), not here, so a failed sample can
  never end a run.
* one row is one rollout: verl's ``grpo`` alone, when an agent loop returns several outputs per session
  (rows keyed ``{uid}_{session}_{output}``), takes each session's final output into the group and gives its
  advantage to the session's other outputs. Our estimators see only the group ids, not the sessions, so
  the isocompute trainer refuses such a step with one error
  (:func:`verl_isocompute.rules.masks.check_one_output_per_session`); under verl's own trainer a
  multi-output agent loop needs verl's ``grpo``.

``isocompute_grpo_decoupled`` is the decoupled baseline of the paper's appendix C: sample
n_est = ``rollout.n`` rollouts per problem, take the baseline (mean, std) from all n_est, and train on a
uniform subsample of n_train of them, drawn without replacement
(:func:`verl_isocompute.rules.masks.decoupled_train_mask`; a group left with fewer than n_train real
rollouts trains on all of them). The paper found, at B_problem = 128, n_est/n_train = 256/256 > 64/256 >
64/64: a baseline from more rollouts helps even when the gradient uses few. Compute is charged for all n_est
rollouts. Excluded rollouts get advantage 0; the trainer also zeroes their ``response_mask`` and
``loss_mask`` (with the same subset) so they enter no loss term and no normaliser.

verl calls a registered estimator with ``token_level_rewards, response_mask, index, config`` only. What
else the estimators need per step (which rows are padding; n_train and the per-step seed of the decoupled
subset) the isocompute trainer sets in :func:`estimator_context` around verl's advantage step; explicit
keyword arguments win over it. ``norm_adv_by_std_in_grpo`` is read from ``config`` unless given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from verl_isocompute.rules.masks import decoupled_train_mask, group_codes, real_rows
from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR, GRPO_ESTIMATOR


@dataclass(frozen=True)
class EstimatorContext:
    """Per-step inputs of our estimators that verl's estimator call does not carry."""

    real: np.ndarray | None = None  # (N,) bool, False for verl's padding rows; None: all real
    n_train: int | None = None  # decoupled baseline: rollouts trained on per group
    seed: int | tuple[int, ...] | None = None  # decoupled baseline: seed of this step's subset


_CONTEXT: ContextVar[EstimatorContext] = ContextVar("isocompute_estimator_context", default=EstimatorContext())


@contextlib.contextmanager
def estimator_context(
    real: Any = None, n_train: int | None = None, seed: int | Sequence[int] | None = None
) -> Iterator[EstimatorContext]:
    """Make ``real`` / ``n_train`` / ``seed`` visible to our estimators while verl computes advantages
    (verl runs the estimator synchronously in the caller's thread)."""
    context = EstimatorContext(
        real=None if real is None else np.asarray(real, dtype=bool).reshape(-1),
        n_train=None if n_train is None else int(n_train),
        seed=None if seed is None else (seed if isinstance(seed, int) else tuple(int(s) for s in seed)),
    )
    token = _CONTEXT.set(context)
    try:
        yield context
    finally:
        _CONTEXT.reset(token)


def _has_spread(values: torch.Tensor, gid: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Per rollout: do the values in its group differ (max != min)?"""
    bounds = torch.full((2, num_groups), torch.inf, dtype=values.dtype, device=values.device)
    lo = bounds[0].scatter_reduce_(0, gid, values, "amin")
    hi = bounds[1].neg_().scatter_reduce_(0, gid, values, "amax")
    return (hi != lo)[gid]


def _norm_flag(norm_adv_by_std_in_grpo: bool | None, config: Any) -> bool:
    if norm_adv_by_std_in_grpo is not None:
        return bool(norm_adv_by_std_in_grpo)
    if config is not None:
        return bool(config.get("norm_adv_by_std_in_grpo", True))
    return True


def _outcome_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float,
    norm_by_std: bool,
    real: np.ndarray,
    train_mask: np.ndarray | None = None,
) -> torch.Tensor:
    """GRPO advantages with the baseline from every real rollout of a group, optionally zeroed outside
    train_mask; padding rows and groups of fewer than 2 real rollouts get 0."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        codes = group_codes(index)
        if codes.size != scores.numel():
            raise ValueError(f"index has {codes.size} entries but the batch has {scores.numel()} rollouts")
        # Padding rows go to an extra group of their own, so they touch no real group's statistics.
        num_groups = int(codes.max()) + 2 if codes.size else 1
        gid_np = np.where(real, codes, num_groups - 1)
        count_np = np.bincount(gid_np, minlength=num_groups)
        gid = torch.from_numpy(gid_np).to(scores.device)
        count = torch.from_numpy(count_np).to(device=scores.device, dtype=scores.dtype)
        mean = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, gid, scores)
        mean /= count.clamp(min=1)
        centered = scores - mean[gid]
        if norm_by_std:
            sq = torch.zeros_like(mean).index_add_(0, gid, centered * centered)
            std = torch.sqrt(sq / (count - 1).clamp(min=1))
            scalars = centered / (std[gid] + epsilon)
        else:
            scalars = centered
        keep = torch.from_numpy(real & (count_np[gid_np] >= 2)).to(scores.device)
        keep &= _has_spread(scores, gid, num_groups)
        if train_mask is not None:
            keep &= torch.from_numpy(train_mask).to(keep.device)
        scalars = torch.where(keep, scalars, torch.zeros_like(scalars))
        # Same values as scalars[:, None] * response_mask, ~1.6x faster for verl's int64/bool masks: the
        # mixed-dtype product takes a slow casting path. copy=True: never scale the caller's mask in place.
        return response_mask.to(dtype=scalars.dtype, copy=True).mul_(scalars.unsqueeze(-1))


def compute_isocompute_grpo(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    real: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantages (group-mean baseline, std-normalised by default); equals verl's ``grpo``
    on groups of 2 or more rollouts.

    Args:
        token_level_rewards: (N, T) rewards; a rollout's score is their sum.
        response_mask: (N, T) mask of response tokens.
        index: (N,) group label per rollout (verl's ``uid``). A group of one gets advantage 0.
        epsilon: added to the std before dividing.
        norm_adv_by_std_in_grpo: divide by the group std; ``None`` reads ``config`` (default True).
        config: verl's ``algorithm`` config.
        real: (N,) bool, False for verl's padding rows; None: from :func:`estimator_context`, else all real.

    Returns:
        (advantages, returns), both the same (N, T) tensor.
    """
    norm = _norm_flag(norm_adv_by_std_in_grpo, config)
    real = real_rows(_CONTEXT.get().real if real is None else real, int(token_level_rewards.shape[0]))
    advantages = _outcome_advantages(token_level_rewards, response_mask, index, epsilon, norm, real)
    return advantages, advantages


def compute_isocompute_grpo_decoupled(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    n_train: int | None = None,
    seed: int | Sequence[int] | None = None,
    real: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoupled-baseline GRPO (appendix C): baseline from all n_est rollouts, advantages on n_train of them.

    Same arguments as :func:`compute_isocompute_grpo`, plus ``n_train`` and ``seed`` as in
    :func:`verl_isocompute.rules.masks.decoupled_train_mask` (the isocompute trainer sets both in
    :func:`estimator_context`). Rollouts outside the subsample get advantage 0.
    """
    context = _CONTEXT.get()
    n_train = context.n_train if n_train is None else n_train
    seed = context.seed if seed is None else seed
    if n_train is None or seed is None:
        raise ValueError(
            f"{DECOUPLED_ESTIMATOR} needs n_train and a seed (set isocompute.decoupled.n_train and use "
            f"trainer.v1.trainer_mode=isocompute, which passes them)"
        )
    norm = _norm_flag(norm_adv_by_std_in_grpo, config)
    real = real_rows(_CONTEXT.get().real if real is None else real, int(token_level_rewards.shape[0]))
    train_mask = decoupled_train_mask(index, n_train, seed, real)
    advantages = _outcome_advantages(token_level_rewards, response_mask, index, epsilon, norm, real, train_mask)
    return advantages, advantages


def register() -> None:
    """Register both estimators with verl; safe to call any number of times (verl raises on a re-register
    of a different function, so this checks first)."""
    for name, fn in ((GRPO_ESTIMATOR, compute_isocompute_grpo), (DECOUPLED_ESTIMATOR, compute_isocompute_grpo_decoupled)):
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            core_algos.register_adv_est(name)(fn)


register()  # on import, as verl's own estimators are (our plugin imports this module when verl imports core_algos)
