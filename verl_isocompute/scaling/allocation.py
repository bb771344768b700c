"""Allocation: a sampling budget C becomes n, B_problem, steps and a learning rate before a run starts.

The IsoCompute playbook (arXiv 2603.12151, sections 1 and 4) answers "given C rollouts, how many
rollouts per problem (n), problems per step (B_problem) and steps (M), with C = B_problem * n * M?"
with one practical rule: scale n with compute according to the fitted sigmoid n*(C), keep B_problem
moderate, spend the rest on steps. Here that rule reads:

1. n = the grid value nearest to n*(C) in log2 (the paper sweeps powers of two; the curve comes from
   :mod:`verl_isocompute.scaling.curve`, a ``curve.json`` or a ``paper:`` preset), never 1: GRPO's advantage
   needs a group, so a grid value of 1 is skipped (with a reason when n*(C) was nearest to it).
2. B = b_problem * n must fit the hardware (``b_max``) and leave ``min_steps`` steps inside the budget.
   When it does not, b_problem is lowered first, down to ``b_problem_floor``, and only then n (the
   paper finds B_problem matters little in 32..1024 while n matters a lot, and that hard sets need
   B_problem >= ~32). After n is lowered b_problem goes back up as far as the cap allows, never above
   the requested value.
3. M = floor(C / (b_problem * n)): the budget is never exceeded; the remainder (< one step) is unspent.
   More than :data:`MAX_STEPS` steps is refused: the paper's runs take hundreds to a few thousand steps,
   so such a budget is a slip in its exponent or unit, not a plan.
4. lr and warm-up come from :func:`verl_isocompute.rules.lr.resolve_lr` (lr = 1e-6 * sqrt(B / 1024),
   10 warm-up steps) and epochs = M * b_problem / D when the dataset size D is known.

Fixed-hardware-batch mode (``batch_rollouts`` = B given): n from the curve, b_problem = B // n, the
paper's "small C -> many problems with small n; large C -> large n". ``b_problem`` is not used there;
a ``b_problem_floor``, if given, still holds (n is lowered when B // n would fall below it).

Token budgets: a curve fitted on generated tokens (``compute_unit: tokens``) is evaluated at
C_tokens, while the step arithmetic always counts rollouts, rollouts = tokens / mean_response_tokens.
Any mix of a token budget or a token curve therefore needs ``mean_response_tokens``. A curve fitted on
``rollouts_with_guidance`` / ``rollouts_with_curation`` is read at C = the budget, which all goes to training
steps; a reason says that a run spending rollouts before training sits further right on that curve.

Decoupled baseline (appendix C, ``n_train``): n = n_est rollouts are sampled per problem and n_train of
them are trained on, so n is never chosen below n_train; the compute C counts all n, the LR rule's B
counts b_problem * n_train (the rollouts whose gradients enter the update, :mod:`verl_isocompute.rules.lr`).

Every adjustment (and every assumption such as a unit conversion or a budget outside the C range the
curve was fitted on) is recorded in :attr:`Allocation.reasons`.

This module is pure (no verl, hydra or torch). :class:`AllocationConfig` is the ``isocompute.allocation``
block of our recipes; :mod:`verl_isocompute.training.allocation_hook` applies it to a verl config.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Iterable

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.numeric import as_count, integral, is_positive
from verl_isocompute.runlog import WITH_CURATION, WITH_GUIDANCE
from verl_isocompute.scaling.curve import Curve, load_curve
from verl_isocompute.settings import help_text, setting
from verl_isocompute.rules.lr import (
    B_REF,
    BASE_LR,
    RULES,
    WARMUP_STEPS,
    LRDecision,
    resolve_lr,
)

# The paper keeps B_problem >= ~32 on hard sets (arXiv 2603.12151, section 1): the default floor.
B_PROBLEM_FLOOR = 32
# Powers of two like the paper's sweep; n = 1 is left out because GRPO has no group to baseline against, from
# this grid and from any other (a curve's n_grid may hold a sweep's n = 1 runs).
MIN_N = 2
WHY_MIN_N = "GRPO's advantage compares the rollouts of one problem, so every recipe refuses rollout.n=1"
DEFAULT_N_GRID: tuple[int, ...] = tuple(2**i for i in range(1, 31))
BUDGET_UNITS = ("rollouts", "tokens")
# Ten million steps is ~4 months at one step a second; the paper's runs take hundreds to thousands.
MAX_STEPS = 10_000_000


class AllocationError(IsoComputeError, ValueError):
    """A budget or constraint that cannot be allocated; the message names the problem and the fix."""


@dataclass(frozen=True)
class AllocationConfig:
    """The ``isocompute.allocation`` block: the one place its keys, defaults and meanings are written.

    :func:`allocate`'s keyword defaults, ``isocompute allocate``'s defaults and help, and the verl hook
    read them from here. The recipes list the same keys and values (recipes/isocompute_base.yaml, so
    that users override them without ``+``); a test checks the two agree.
    """

    enable: bool = setting(False, "let the block set n, B_problem, steps and lr (the hook does nothing unless true)")
    curve: str | None = setting(None, "curve.json from `isocompute fit`, or paper:<preset>")
    budget_rollouts: float | None = setting(None, "sampling budget C in rollouts (exactly one of the two budgets)", above=0)
    budget_tokens: float | None = setting(None, "sampling budget in generated tokens (needs mean_response_tokens)", above=0)
    mean_response_tokens: float | None = setting(
        None, "mean generated tokens per rollout (generated tokens / rollouts of a pilot run); needed whenever tokens are involved",
        above=0,
    )
    b_max: int | None = setting(None, "most rollouts one step may take (hardware limit); unset: no cap", minimum=1)
    b_problem: int = setting(32, "problems per step (the paper's fixed-B_problem setting)", minimum=1)
    b_problem_floor: int | None = setting(
        None, f"lowest b_problem before n is lowered; unset: min(b_problem, {B_PROBLEM_FLOOR}), 1 in fixed-batch mode", minimum=1
    )
    batch_rollouts: int | None = setting(None, "fixed-hardware-batch mode: B rollouts per step, b_problem = B // n", minimum=1)
    dataset_size: int | None = setting(None, "training problems D, for epochs and trainer.total_epochs", minimum=1)
    n_grid: tuple[int, ...] | None = setting(None, "allowed n values; unset: powers of two from 2", minimum=1)
    min_steps: int = setting(1, "the budget must pay for at least this many steps", minimum=1)
    base_lr: float = setting(BASE_LR, "LR rule: the learning rate at b_ref rollouts per step", above=0)
    b_ref: float = setting(B_REF, "LR rule: the batch (rollouts per step) base_lr was tuned at", above=0)
    lr_rule: str = setting("sqrt", "LR rule: sqrt | constant | linear", choices=RULES)
    warmup_steps: int = setting(WARMUP_STEPS, "LR rule: linear warm-up steps", minimum=0)
    override_user: bool = setting(False, "let the allocation replace values given on the command line")

    @classmethod
    def help(cls, name: str) -> str:
        """The help text of one key."""
        return help_text(cls, name)

    def rule_settings(self) -> dict[str, Any]:
        """The keys that are :func:`allocate`'s keyword arguments (the rest say what to allocate and whether)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BLOCK_ONLY}

    def budget(self) -> tuple[str, float]:
        """(unit, value) of the one budget set; AllocationError if none or both are."""
        budgets = {unit: getattr(self, f"budget_{unit}") for unit in BUDGET_UNITS}
        given = {unit: value for unit, value in budgets.items() if value is not None}
        if len(given) != 1:
            raise AllocationError("set exactly one of budget_rollouts and budget_tokens")
        return next(iter(given.items()))


# Block keys that are not allocate()'s keyword arguments.
_BLOCK_ONLY = frozenset({"enable", "curve", "budget_rollouts", "budget_tokens", "override_user"})
_DEFAULTS = AllocationConfig()


@dataclass(frozen=True)
class Allocation:
    """The decision: what a run of ``steps`` steps with ``b_problem`` x ``n`` rollouts per step costs."""

    n: int
    b_problem: int
    steps: int
    lr: float
    warmup_steps: int
    budget_rollouts: int
    rollouts_used: int
    epochs: float | None
    n_star: float
    reasons: tuple[str, ...]
    budget_tokens: float | None = None
    mean_response_tokens: float | None = None
    dataset_size: int | None = None
    lr_rule: str = "sqrt"
    curve: str | None = None
    n_train: int | None = None

    @property
    def batch_rollouts(self) -> int:
        """B = b_problem * n, the rollouts of one step."""
        return self.b_problem * self.n

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        d["batch_rollouts"] = self.batch_rollouts
        return d


def _number(name: str, value: Any) -> float:
    """A positive finite number, or an AllocationError naming ``name``."""
    if not is_positive(value):
        raise AllocationError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _count(name: str, value: Any) -> int:
    """A positive integer (an integral float such as 6.5e4 from YAML counts), or an AllocationError."""
    value = integral(value)
    if as_count(value) is None:
        raise AllocationError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class _Limits:
    """The checked constraints of one request (step 2 of the rule)."""

    b_problem: int
    floor: int
    b_max: int | None
    batch_rollouts: int | None
    min_steps: int
    dataset_size: int | None
    grid: tuple[int, ...]  # the allowed n: n_grid, without values below n_train
    requested_grid: tuple[int, ...]
    n_train: int | None

    @classmethod
    def check(cls, *, b_problem, b_problem_floor, b_max, batch_rollouts, min_steps, dataset_size, n_grid, n_train) -> "_Limits":
        b_problem = _count("b_problem", b_problem)
        batch_rollouts = None if batch_rollouts is None else _count("batch_rollouts", batch_rollouts)
        if b_problem_floor is not None:
            floor = _count("b_problem_floor", b_problem_floor)
        elif batch_rollouts is not None:
            floor = 1  # fixed-batch mode lets the curve trade problems for rollouts unless a floor is asked for
        else:
            floor = min(b_problem, B_PROBLEM_FLOOR)
        if batch_rollouts is None and floor > b_problem:
            raise AllocationError(f"b_problem_floor {floor} is above b_problem {b_problem}; lower the floor or raise b_problem")
        b_max = None if b_max is None else _count("b_max", b_max)
        if batch_rollouts is not None and b_max is not None and batch_rollouts > b_max:
            raise AllocationError(
                f"batch_rollouts {batch_rollouts} exceeds b_max {b_max}; give one of them, or a smaller batch_rollouts"
            )
        if n_grid is not None and (isinstance(n_grid, (str, bytes, dict)) or not hasattr(n_grid, "__iter__")):
            raise AllocationError(f"n_grid must be a list of positive integers such as [8, 16, 32], got {n_grid!r}")
        requested = DEFAULT_N_GRID if n_grid is None else tuple(sorted({_count("n_grid value", g) for g in n_grid}))
        if not requested:
            raise AllocationError("n_grid is empty; give at least one n (e.g. 8,16,32) or leave it unset for powers of two")
        grid = tuple(g for g in requested if g >= MIN_N)  # a curve's grid may hold 1 (a sweep's n = 1 runs)
        if not grid:
            raise AllocationError(f"n_grid {list(requested)} has no n >= {MIN_N}: {WHY_MIN_N}; raise the n_grid values "
                                  f"to {MIN_N} or more (e.g. 8,16,32)")
        if n_train is not None:
            n_train = _count("n_train", n_train)
            grid = tuple(g for g in grid if g >= n_train)
            if not grid:
                raise AllocationError(
                    f"n_grid has no n >= n_train {n_train}: the decoupled baseline samples n >= n_train rollouts per "
                    "problem; raise the n_grid values or lower n_train"
                )
        return cls(
            b_problem=b_problem, floor=floor, b_max=b_max, batch_rollouts=batch_rollouts,
            min_steps=_count("min_steps", min_steps),
            dataset_size=None if dataset_size is None else _count("dataset_size", dataset_size),
            grid=grid, requested_grid=requested, n_train=n_train,
        )


@dataclass(frozen=True)
class _Budget:
    """The budget in rollouts (what steps count) and in the curve's unit (where n*(C) is read)."""

    rollouts: int
    tokens: float | None
    mean_response_tokens: float | None
    curve_c: float

    @classmethod
    def convert(cls, curve: Curve, budget: Any, unit: str, mean_response_tokens: Any, reasons: list[str]) -> "_Budget":
        if unit not in BUDGET_UNITS:
            raise AllocationError(f"budget unit must be one of {', '.join(BUDGET_UNITS)}, got {unit!r}")
        budget = _number(f"budget ({unit})", budget)
        if "tokens" in (unit, curve.compute_unit) and mean_response_tokens is None:
            why = "steps count rollouts, so a budget in tokens" if unit == "tokens" else "the curve counts tokens, so a budget in rollouts"
            raise AllocationError(
                f"{why} needs the mean response length: pass mean_response_tokens (--mean-response-tokens), "
                "e.g. generated tokens / rollouts from a pilot run's log"
            )
        r = None if mean_response_tokens is None else _number("mean_response_tokens", mean_response_tokens)
        if unit == "rollouts":
            rollouts, tokens = budget, (budget * r if r is not None else None)
        else:
            rollouts, tokens = budget / r, budget
            reasons.append(f"budget of {tokens:,.0f} tokens = {rollouts:,.0f} rollouts at {r:g} tokens per response")
        if curve.compute_unit == "tokens" and unit == "rollouts":
            reasons.append(f"the curve counts tokens: C = {rollouts:,.0f} rollouts x {r:g} tokens = {tokens:,.0f} tokens")
        if curve.compute_unit in (WITH_GUIDANCE["rollouts"], WITH_CURATION["rollouts"]):
            reasons.append(
                f"the curve counts {curve.compute_unit}, C with the rollouts spent before training (on the guidance"
                f"{', and curation' if curve.compute_unit == WITH_CURATION['rollouts'] else ''}): n*(C) is read at C = "
                "the budget, and every rollout of the budget goes to training steps; a run that spends S rollouts "
                "before training sits at budget + S on this curve"
            )
        curve_c = tokens if curve.compute_unit == "tokens" else rollouts
        if curve.c_range is not None and not curve.c_range[0] <= curve_c <= curve.c_range[1]:
            reasons.append(
                f"C = {curve_c:.3g} {curve.compute_unit} is outside the range the curve was fitted on "
                f"[{curve.c_range[0]:.3g}, {curve.c_range[1]:.3g}]: n*(C) is extrapolated"
            )
        return cls(rollouts=math.floor(rollouts), tokens=tokens, mean_response_tokens=r, curve_c=curve_c)


def _nearest_in_log2(grid: tuple[int, ...], n_star: float) -> int:
    # Ties go to the smaller n: the cheaper step leaves more of the budget for steps.
    return min(grid, key=lambda g: (abs(math.log2(g) - math.log2(n_star)), g))


def _n_from_curve(n_star: float, limits: _Limits, reasons: list[str]) -> int:
    """Step 1: the grid value nearest to n*(C); under the decoupled baseline, only values >= n_train."""
    n = _nearest_in_log2(limits.grid, n_star)
    unrestricted = _nearest_in_log2(limits.requested_grid, n_star)
    if n != unrestricted:
        why = (WHY_MIN_N if unrestricted < MIN_N else
               f"the decoupled baseline samples at least n_train = {limits.n_train} rollouts per problem")
        reasons.append(f"n = {n} rather than {unrestricted}: {why}")
    return n


def _fit_batch(
    n: int, b_problem: int, floor: int, grid: tuple[int, ...], cap: int, why: str
) -> tuple[int, int, list[str]] | None:
    """Make b_problem * n <= cap: lower b_problem down to ``floor``, then n. Returns (n, b_problem, reasons),
    or None if even ``floor`` x the smallest grid value exceeds ``cap`` (the caller says why that is).
    """
    if b_problem * n <= cap:
        return n, b_problem, []
    if floor * n <= cap:
        lowered = cap // n
        return n, lowered, [
            f"b_problem lowered from {b_problem} to {lowered} so that b_problem * n = {lowered * n} <= {why}"
        ]
    fitting = [g for g in grid if floor * g <= cap]
    if not fitting:
        return None
    new_n = max(fitting)
    new_b = min(b_problem, cap // new_n)
    return new_n, new_b, [
        f"n lowered from {n} to {new_n} (b_problem at its floor {floor} still needed {floor * n} rollouts per step, "
        f"above {why}); b_problem = {new_b}"
    ]


def _smallest_batch(limits: _Limits) -> str:
    """Words for the smallest batch the constraints allow, for refusals."""
    n_train = f" (n_train {limits.n_train})" if limits.n_train is not None else ""
    return f"b_problem_floor {limits.floor} x smallest n {limits.grid[0]}{n_train} = {limits.floor * limits.grid[0]} rollouts"


def _fixed_batch(n: int, budget_rollouts: int, limits: _Limits, reasons: list[str]) -> tuple[int, int]:
    """Step 2, fixed-hardware-batch mode: b_problem = batch_rollouts // n, n lowered to keep the floor."""
    batch, floor = limits.batch_rollouts, limits.floor
    if floor * n > batch:
        fitting = [g for g in limits.grid if floor * g <= batch]
        if not fitting:
            raise AllocationError(
                f"batch_rollouts {batch} is below {_smallest_batch(limits)}; "
                "raise batch_rollouts or lower b_problem_floor / n_grid"
            )
        reasons.append(f"n lowered from {n} to {max(fitting)} so that b_problem = batch_rollouts // n stays >= b_problem_floor {floor}")
        n = max(fitting)
    b_problem = batch // n
    if b_problem * n != batch:
        reasons.append(f"batch_rollouts {batch} is not a multiple of n = {n}: each step uses {b_problem * n} rollouts")
    if budget_rollouts // (b_problem * n) < limits.min_steps:
        raise AllocationError(
            f"budget of {budget_rollouts:,} rollouts pays for {budget_rollouts // (b_problem * n)} steps of "
            f"{b_problem * n} rollouts but min_steps is {limits.min_steps}: the minimum budget is "
            f"{limits.min_steps * b_problem * n:,} rollouts; raise the budget or lower batch_rollouts"
        )
    return n, b_problem


def _capped_batch(n: int, budget_rollouts: int, limits: _Limits, reasons: list[str]) -> tuple[int, int]:
    """Step 2: b_problem * n within b_max and within budget / min_steps (b_problem lowered first, then n)."""
    b_problem = limits.b_problem
    if limits.b_max is not None:
        fitted = _fit_batch(n, b_problem, limits.floor, limits.grid, limits.b_max, f"b_max {limits.b_max}")
        if fitted is None:
            raise AllocationError(
                f"{_smallest_batch(limits)} > b_max {limits.b_max}; raise b_max or lower b_problem_floor / n_grid"
            )
        n, b_problem, why = fitted
        reasons += why
    step_cap = budget_rollouts // limits.min_steps
    fitted = _fit_batch(
        n, b_problem, limits.floor, limits.grid, step_cap,
        f"{step_cap:,} rollouts (budget {budget_rollouts:,} / min_steps {limits.min_steps})",
    )
    if fitted is None:
        smallest = limits.floor * limits.grid[0]
        raise AllocationError(
            f"budget of {budget_rollouts:,} rollouts is below {limits.min_steps} step(s) of the smallest batch "
            f"({_smallest_batch(limits)}): the minimum budget is {limits.min_steps * smallest:,} rollouts; "
            "raise the budget or lower b_problem_floor / min_steps"
        )
    n, b_problem, why = fitted
    reasons += why
    return n, b_problem


def _steps(budget_rollouts: int, n: int, b_problem: int, limits: _Limits) -> int:
    """Step 3: M = floor(C / B), checked against the dataset and against :data:`MAX_STEPS`."""
    if limits.dataset_size is not None and b_problem > limits.dataset_size:
        raise AllocationError(
            f"b_problem {b_problem} is larger than the dataset ({limits.dataset_size} problems): verl drops the incomplete "
            "batch, so no step would run; lower b_problem (and b_problem_floor) or use a larger dataset"
        )
    steps = budget_rollouts // (b_problem * n)
    if steps > MAX_STEPS:
        raise AllocationError(
            f"a budget of {budget_rollouts:.3g} rollouts pays for {steps:.3g} steps of {b_problem * n:,} rollouts, more "
            f"than {MAX_STEPS:,}: check the budget (its exponent; rollouts or tokens?), or raise b_problem / batch_rollouts"
        )
    return steps


def _learning_rate(
    b_problem: int, n: int, steps: int, base_lr: Any, b_ref: Any, rule: Any, warmup_steps: Any, n_train: int | None,
    reasons: list[str],
) -> LRDecision:
    """Step 4: the recipe's LR rule at B = b_problem * n (b_problem * n_train under the decoupled baseline)."""
    if isinstance(warmup_steps, float) and warmup_steps.is_integer():
        warmup_steps = int(warmup_steps)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise AllocationError(f"warmup_steps must be a non-negative integer, got {warmup_steps!r}")
    try:
        lr = resolve_lr(
            b_problem, n, base_lr=_number("base_lr", base_lr), b_ref=_number("b_ref", b_ref), rule=rule,
            warmup_steps=warmup_steps, n_train=n_train,
        )
    except ValueError as exc:
        raise AllocationError(str(exc)) from None
    if lr.warmup_steps > 0 and lr.warmup_steps > steps:
        reasons.append(
            f"warm-up ({lr.warmup_steps} steps) is longer than the run ({steps} steps): lr never reaches {lr.lr:.3g}"
        )
    return lr


def allocate(
    curve: Curve | str | Path,
    budget: float,
    *,
    budget_unit: str = "rollouts",
    b_max: int | None = _DEFAULTS.b_max,
    b_problem: int = _DEFAULTS.b_problem,
    b_problem_floor: int | None = _DEFAULTS.b_problem_floor,
    dataset_size: int | None = _DEFAULTS.dataset_size,
    n_grid: Iterable[int] | None = _DEFAULTS.n_grid,
    min_steps: int = _DEFAULTS.min_steps,
    batch_rollouts: int | None = _DEFAULTS.batch_rollouts,
    mean_response_tokens: float | None = _DEFAULTS.mean_response_tokens,
    base_lr: float = _DEFAULTS.base_lr,
    b_ref: float = _DEFAULTS.b_ref,
    lr_rule: str = _DEFAULTS.lr_rule,
    warmup_steps: int = _DEFAULTS.warmup_steps,
    n_train: int | None = None,
) -> Allocation:
    """Turn a budget into n, b_problem, steps and lr by the playbook's rule (see the module docstring).

    Args:
        curve: a :class:`Curve`, a ``curve.json`` path or a ``paper:<preset>`` name.
        budget: the sampling budget C, in ``budget_unit`` (``rollouts`` or ``tokens``).
        n_train: under the decoupled baseline, the rollouts trained on per problem: n >= n_train, and the
            LR rule counts b_problem * n_train.
        The other keywords are the :class:`AllocationConfig` keys of the same name (their help says what each does).
    """
    curve_name = None if isinstance(curve, Curve) else str(curve)
    curve = curve if isinstance(curve, Curve) else load_curve(curve)
    limits = _Limits.check(
        b_problem=b_problem, b_problem_floor=b_problem_floor, b_max=b_max, batch_rollouts=batch_rollouts,
        min_steps=min_steps, dataset_size=dataset_size, n_grid=n_grid, n_train=n_train,
    )
    reasons: list[str] = []
    spend = _Budget.convert(curve, budget, budget_unit, mean_response_tokens, reasons)
    n_star = float(curve.n_star(spend.curve_c))
    n = _n_from_curve(n_star, limits, reasons)
    if limits.batch_rollouts is not None:
        n, b_problem = _fixed_batch(n, spend.rollouts, limits, reasons)
    else:
        n, b_problem = _capped_batch(n, spend.rollouts, limits, reasons)
    steps = _steps(spend.rollouts, n, b_problem, limits)
    lr = _learning_rate(b_problem, n, steps, base_lr, b_ref, lr_rule, warmup_steps, limits.n_train, reasons)
    return Allocation(
        n=n,
        b_problem=b_problem,
        steps=steps,
        lr=lr.lr,
        warmup_steps=lr.warmup_steps,
        budget_rollouts=spend.rollouts,
        rollouts_used=steps * b_problem * n,
        epochs=None if limits.dataset_size is None else steps * b_problem / limits.dataset_size,
        n_star=n_star,
        reasons=tuple(reasons),
        budget_tokens=spend.tokens,
        mean_response_tokens=spend.mean_response_tokens,
        dataset_size=limits.dataset_size,
        lr_rule=lr.rule,
        curve=curve_name,
        n_train=limits.n_train,
    )


def allocate_config(config: AllocationConfig, n_train: int | None = None) -> Allocation:
    """:func:`allocate` with the settings of an ``isocompute.allocation`` block (the hook, ``allocate --recipe``)."""
    if config.curve is None:
        raise AllocationError("curve is not set; give a curve.json path or a paper: preset (e.g. paper:qwen2.5-7b-easy)")
    unit, budget = config.budget()
    return allocate(config.curve, budget, budget_unit=unit, n_train=n_train, **config.rule_settings())


def format_decision(allocation: Allocation) -> str:
    """A short human-readable account of the decision, reasons included (for logs and the console)."""
    a = allocation
    source = f" from {a.curve}" if a.curve else ""
    epochs = "" if a.epochs is None else f", {a.epochs:.2f} epochs of {a.dataset_size} problems"
    trained = "" if a.n_train is None else f"; trains on n_train = {a.n_train} per problem"
    lines = [
        f"isocompute allocation: n = {a.n}, b_problem = {a.b_problem} ({a.batch_rollouts} rollouts/step), "
        f"steps = {a.steps}, lr = {a.lr:.3g} ({a.lr_rule}, {a.warmup_steps} warm-up steps){trained}",
        f"  n*(C) = {a.n_star:.1f}{source}; budget {a.budget_rollouts:,} rollouts, "
        f"uses {a.rollouts_used:,}{epochs}",
    ]
    lines += [f"  - {reason}" for reason in a.reasons]
    return "\n".join(lines)
