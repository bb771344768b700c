"""Learning-rate rule of the healthy recipe: scale the learning rate with the square root of the batch.

The IsoCompute playbook (arXiv 2603.12151, section on the healthy recipe) tunes the learning rate at a
rollout batch of B_ref = 1024 rollouts (best: 1e-6) and transfers it to other batch sizes with

    lr(B) = base_lr * sqrt(B / B_ref),        B = b_problem * n   (rollouts per optimizer step)

followed by a linear warm-up over the first 10 steps and a constant rate afterwards. The square-root
rule is the one that keeps the variance of an Adam update roughly constant as the batch grows; the paper
checked it at B = 8192, where sqrt (2.83e-6) beat both keeping 1e-6 (`constant`) and scaling linearly
(8e-6, unstable). The `constant` and `linear` rules are kept for exactly that ablation.

B counts the rollouts whose gradients enter the update. Under the decoupled baseline (appendix C) that
is b_problem * n_train, not b_problem * n_est: the other n_est - n_train rollouts only sharpen the
baseline, they add no gradient term, so they do not lower the update's noise the way a larger batch does
(:func:`rule_batch_rollouts`; the paper does not say, this is our choice, see docs/PAPERS.md). Compute C
still counts all n_est rollouts.

Warm-up: update k (1-based) runs at peak * min(1, k / W), so update 1 already moves the weights and update W
is the first at the peak (:func:`lr_for_update`). verl's ``constant`` schedule would give update k the rate
peak * (k - 1) / W (update 1 at rate 0, the peak only from update W + 1); its ``cosine`` schedule with a
floor of 1 and 1-based steps gives exactly our rule, so that is what the recipe sets
(:data:`VERL_WARMUP_SCHEDULE`).

This module is pure Python (no verl, no torch): the recipe, the allocation hook, the trainer and the CLI
all call :func:`resolve_lr` / :func:`lr_for_update`, the one place the rule lives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from verl_isocompute.numeric import is_positive

# Recipe defaults, from the paper's LR sweep (stated values).
BASE_LR = 1e-6
B_REF = 1024
WARMUP_STEPS = 10
RULES = ("sqrt", "constant", "linear")


def scaled_lr(batch_rollouts: float, base_lr: float = BASE_LR, b_ref: float = B_REF, rule: str = "sqrt") -> float:
    """Learning rate for a step that trains on ``batch_rollouts`` = b_problem * n rollouts.

    ``rule`` is ``sqrt`` (the recipe), ``constant`` (lr = base_lr at any batch) or ``linear``
    (lr = base_lr * B / B_ref), the latter two for ablations.
    """
    if rule not in RULES:
        raise ValueError(f"unknown lr rule {rule!r}: use one of {', '.join(RULES)}")
    for name, value in (("batch_rollouts", batch_rollouts), ("base_lr", base_lr), ("b_ref", b_ref)):
        if not is_positive(value):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    ratio = batch_rollouts / b_ref
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "linear":
        return base_lr * ratio
    return base_lr


def lr_for_update(k: int, peak_lr: float, warmup_steps: int = WARMUP_STEPS) -> float:
    """The rate update ``k`` (1-based, = verl's global step) runs at: peak_lr * min(1, k / warmup_steps).

    ``warmup_steps <= 0`` means no warm-up. This is the ``lr`` of the run log's row for step k.
    """
    if int(k) < 1:
        raise ValueError(f"updates are counted from 1, got {k}")
    if warmup_steps <= 0:
        return peak_lr
    return peak_lr * min(1.0, int(k) / warmup_steps)


# verl's optimizer settings (``actor_rollout_ref.actor.optim.*``) under which update k runs at
# lr_for_update(k): verl's cosine schedule computes, before update k, 1 + (k - 1) = k with
# zero_indexed_step=false, the ratio k / W during warm-up, then max(min_lr_ratio, cosine) = 1 with
# min_lr_ratio=1 whatever the horizon. lr_warmup_steps_ratio=0 so that lr_warmup_steps alone sets W
# (verl falls back to the ratio when lr_warmup_steps <= 0); warmup_style is verl's deprecated alias of
# lr_scheduler_type and must stay unset.
VERL_WARMUP_SCHEDULE = {
    "lr_scheduler_type": "cosine",
    "min_lr_ratio": 1.0,
    "zero_indexed_step": False,
    "lr_warmup_steps_ratio": 0.0,
    "warmup_style": None,
}


def rule_batch_rollouts(b_problem: int, n: int, n_train: int | None = None) -> int:
    """B of the LR rule: rollouts per step whose gradients enter the update, b_problem * (n_train or n).

    ``n_train``: under the decoupled baseline (appendix C) only n_train of the n = n_est rollouts of a
    problem are trained on; the compute C still counts all n.
    """
    if n_train is not None and not (1 <= int(n_train) <= int(n)):
        raise ValueError(f"n_train must be in [1, n={n}], got {n_train}")
    return int(b_problem) * int(n if n_train is None else n_train)


@dataclass(frozen=True)
class LRDecision:
    """A resolved learning rate for a run: what goes into verl's optimizer config."""

    lr: float
    warmup_steps: int
    rule: str
    batch_rollouts: int
    base_lr: float
    b_ref: float


def resolve_lr(
    b_problem: int,
    n: int,
    base_lr: float = BASE_LR,
    b_ref: float = B_REF,
    rule: str = "sqrt",
    warmup_steps: int = WARMUP_STEPS,
    n_train: int | None = None,
) -> LRDecision:
    """Resolve the recipe's lr for B = :func:`rule_batch_rollouts` (b_problem * n, or b_problem * n_train
    under the decoupled baseline)."""
    batch = rule_batch_rollouts(b_problem, n, n_train)
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    return LRDecision(
        lr=scaled_lr(batch, base_lr, b_ref, rule),
        warmup_steps=int(warmup_steps),
        rule=rule,
        batch_rollouts=batch,
        base_lr=base_lr,
        b_ref=b_ref,
    )
