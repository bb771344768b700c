"""Learning-rate rule of the healthy recipe: scale the learning rate with the square root of the batch.

The IsoCompute playbook (arXiv 2603.12151, section on the healthy recipe) tunes the learning rate at a
rollout batch of B_ref = 1024 rollouts (best: 1e-6) and transfers it to other batch sizes with

    lr(B) = base_lr * sqrt(B / B_ref),        B = b_problem * n   (rollouts per optimizer step)

followed by a linear warm-up over the first 10 steps and a constant rate afterwards. The square-root
rule is the one that keeps the variance of an Adam update roughly constant as the batch grows; the paper
checked it at B = 8192, where sqrt (2.83e-6) beat both keeping 1e-6 (`constant`) and scaling linearly
(8e-6, unstable). The `constant` and `linear` rules are kept for exactly that ablation.

This module is pure Python (no verl, no torch): the recipe, the allocation hook and the CLI all call
:func:`scaled_lr`, the one place the rule lives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    ratio = batch_rollouts / b_ref
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "linear":
        return base_lr * ratio
    return base_lr


def lr_at_step(scheduler_step: int, peak_lr: float, warmup_steps: int = WARMUP_STEPS) -> float:
    """The scheduled rate after ``scheduler_step`` scheduler steps (0-based): linear warm-up, then constant.

    Mirrors verl's ``get_constant_schedule_with_warmup`` (``optim.lr_scheduler_type=constant``), whose
    multiplier is s / warmup_steps for s < warmup_steps and 1 afterwards.
    """
    if warmup_steps <= 0 or scheduler_step >= warmup_steps:
        return peak_lr
    return peak_lr * scheduler_step / warmup_steps


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
    """Resolve the recipe's lr for B = b_problem * n rollouts per step.

    ``n_train``: under the decoupled baseline (appendix C) only n_train of the n = n_est rollouts of a
    problem enter the gradient, so B counts b_problem * n_train (the compute C still counts all n).
    """
    if n_train is not None and not (1 <= int(n_train) <= int(n)):
        raise ValueError(f"n_train must be in [1, n={n}], got {n_train}")
    batch = int(b_problem) * int(n if n_train is None else n_train)
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
