"""Allocation: a sampling budget C becomes n, B_problem, steps and a learning rate before a run starts.

The IsoCompute playbook (arXiv 2603.12151, sections 1 and 4) answers "given C rollouts, how many
rollouts per problem (n), problems per step (B_problem) and steps (M), with C = B_problem * n * M?"
with one practical rule: scale n with compute according to the fitted sigmoid n*(C), keep B_problem
moderate, spend the rest on steps. Here that rule reads:

1. n = the grid value nearest to n*(C) in log2 (the paper sweeps powers of two; the curve comes from
   :mod:`verl_isocompute.scaling.curve`, a ``curve.json`` or a ``paper:`` preset).
2. B = b_problem * n must fit the hardware (``b_max``) and leave ``min_steps`` steps inside the budget.
   When it does not, b_problem is lowered first, down to ``b_problem_floor``, and only then n (the
   paper finds B_problem matters little in 32..1024 while n matters a lot, and that hard sets need
   B_problem >= ~32). After n is lowered b_problem goes back up as far as the cap allows, never above
   the requested value.
3. M = floor(C / (b_problem * n)): the budget is never exceeded; the remainder (< one step) is unspent.
4. lr and warm-up come from :func:`verl_isocompute.training.lr.resolve_lr` (lr = 1e-6 * sqrt(B / 1024),
   10 warm-up steps) and epochs = M * b_problem / D when the dataset size D is known.

Fixed-hardware-batch mode (``batch_rollouts`` = B given): n from the curve, b_problem = B // n, the
paper's "small C -> many problems with small n; large C -> large n". ``b_problem`` is not used there;
a ``b_problem_floor``, if given, still holds (n is lowered when B // n would fall below it).

Token budgets: a curve fitted on generated tokens (``compute_unit: tokens``) is evaluated at
C_tokens, while the step arithmetic always counts rollouts, rollouts = tokens / mean_response_tokens.
Any mix of a token budget or a token curve therefore needs ``mean_response_tokens``.

Every adjustment (and every assumption such as a unit conversion or an extrapolated curve) is recorded
in :attr:`Allocation.reasons`.

The verl hook
-------------
Our recipes carry an ``isocompute.allocation`` block; :func:`apply_allocation` reads it and writes the
decision into verl's config before verl builds anything. Schema (defaults in
:data:`DEFAULT_ALLOCATION_CONFIG`)::

    isocompute:
      allocation:
        enable: false              # the hook does nothing unless true
        curve: null                # curve.json path or paper:<preset>, e.g. paper:qwen2.5-7b-easy
        budget_rollouts: null      # C in rollouts ...
        budget_tokens: null        # ... or in generated tokens (exactly one of the two)
        mean_response_tokens: null # needed whenever tokens are involved
        b_max: null                # max rollouts per step (hardware); null = no cap
        b_problem: 32              # problems per step (the paper's fixed-B_problem setting)
        b_problem_floor: null      # lowest b_problem before n is lowered; null = min(b_problem, 32)
                                   #   (1 in fixed-batch mode)
        batch_rollouts: null       # fixed-hardware-batch mode: B rollouts per step, b_problem = B // n
        dataset_size: null         # D, for epochs and trainer.total_epochs
        n_grid: null               # allowed n values; null = powers of two from 2
        min_steps: 1               # the budget must pay for at least this many steps
        base_lr: 1.0e-06           # lr rule (verl_isocompute.training.lr)
        b_ref: 1024
        lr_rule: sqrt              # sqrt | constant | linear
        warmup_steps: 10
        override_user: false       # true: the allocation may replace values given on the command line

It writes ``actor_rollout_ref.rollout.n``, ``data.train_batch_size`` and
``actor_rollout_ref.actor.ppo_mini_batch_size`` (both b_problem: one optimizer step per rollout
batch, fully on-policy), ``trainer.total_training_steps``, ``trainer.total_epochs`` (raised so the epoch
loop cannot end the run before M steps), ``actor_rollout_ref.actor.optim.lr``, ``.lr_warmup_steps``
and ``.lr_warmup_steps_ratio`` (0.0, so that 0 warm-up steps means none: verl falls back to the ratio
for non-positive step counts).

Using it from another verl project's entry point::

    import hydra
    from verl.trainer.main_ppo import run_ppo
    from verl_isocompute.scaling.allocation import apply_allocation, explicit_keys_from_overrides, format_decision

    @hydra.main(config_path="config", config_name="my_trainer", version_base=None)
    def main(cfg):
        from hydra.core.hydra_config import HydraConfig
        explicit = explicit_keys_from_overrides(HydraConfig.get().overrides.task)
        allocation = apply_allocation(cfg, explicit)
        if allocation is not None:
            print(format_decision(allocation))
        run_ppo(cfg)

(``my_trainer.yaml`` inherits ``ppo_trainer`` and adds the ``isocompute.allocation`` block.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf

from verl_isocompute.scaling.curve import Curve, CurveError, load_curve
from verl_isocompute.training.lr import B_REF, BASE_LR, WARMUP_STEPS, resolve_lr

# The paper keeps B_problem >= ~32 on hard sets (arXiv 2603.12151, section 1): the default floor.
B_PROBLEM_FLOOR = 32
# Powers of two like the paper's sweep; n = 1 is left out because GRPO has no group to baseline against.
DEFAULT_N_GRID: tuple[int, ...] = tuple(2**i for i in range(1, 31))
BUDGET_UNITS = ("rollouts", "tokens")
CONFIG_PATH = "isocompute.allocation"

DEFAULT_ALLOCATION_CONFIG: dict[str, Any] = {
    "enable": False,
    "curve": None,
    "budget_rollouts": None,
    "budget_tokens": None,
    "mean_response_tokens": None,
    "b_max": None,
    "b_problem": 32,
    "b_problem_floor": None,
    "batch_rollouts": None,
    "dataset_size": None,
    "n_grid": None,
    "min_steps": 1,
    "base_lr": BASE_LR,
    "b_ref": B_REF,
    "lr_rule": "sqrt",
    "warmup_steps": WARMUP_STEPS,
    "override_user": False,
}


class AllocationError(ValueError):
    """A budget or constraint that cannot be allocated; the message names the problem and the fix."""


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
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise AllocationError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _count(name: str, value: Any) -> int:
    """A positive integer (an integral float such as 6.5e4 from YAML counts), or an AllocationError."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise AllocationError(f"{name} must be a positive integer, got {value!r}")
    return value


def _nearest_in_log2(grid: tuple[int, ...], n_star: float) -> int:
    # Ties go to the smaller n: the cheaper step leaves more of the budget for steps.
    return min(grid, key=lambda g: (abs(math.log2(g) - math.log2(n_star)), g))


def _fit_batch(
    n: int, b_problem: int, floor: int, grid: tuple[int, ...], cap: int, why: str
) -> tuple[int, int, list[str]]:
    """Make b_problem * n <= cap: lower b_problem down to ``floor``, then n. Returns (n, b_problem, reasons).

    Raises AllocationError if even ``floor`` x the smallest grid value exceeds ``cap``; callers give the
    message its context.
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
        raise AllocationError(f"b_problem_floor {floor} x smallest n {grid[0]} = {floor * grid[0]} rollouts > {why}")
    new_n = max(fitting)
    new_b = min(b_problem, cap // new_n)
    return new_n, new_b, [
        f"n lowered from {n} to {new_n} (b_problem at its floor {floor} still needed {floor * n} rollouts per step, "
        f"above {why}); b_problem = {new_b}"
    ]


def allocate(
    curve: Curve | str | Path,
    budget: float,
    *,
    budget_unit: str = "rollouts",
    b_max: int | None = None,
    b_problem: int = 32,
    b_problem_floor: int | None = None,
    dataset_size: int | None = None,
    n_grid: Iterable[int] | None = None,
    min_steps: int = 1,
    batch_rollouts: int | None = None,
    mean_response_tokens: float | None = None,
    base_lr: float = BASE_LR,
    b_ref: float = B_REF,
    lr_rule: str = "sqrt",
    warmup_steps: int = WARMUP_STEPS,
) -> Allocation:
    """Turn a budget into n, b_problem, steps and lr by the playbook's rule (see the module docstring).

    Args:
        curve: a :class:`Curve`, a ``curve.json`` path or a ``paper:<preset>`` name.
        budget: the sampling budget C, in ``budget_unit`` (``rollouts`` or ``tokens``).
        b_max: most rollouts one step may take (hardware); None = no cap.
        b_problem: problems per step wanted (the paper's fixed-B_problem curves use 32).
        b_problem_floor: lowest b_problem before n is lowered; default min(b_problem, 32), or 1 with
            ``batch_rollouts``.
        dataset_size: D, for epochs = steps * b_problem / D; b_problem may not exceed it.
        n_grid: the allowed n values; default powers of two from 2.
        min_steps: the budget must pay for at least this many steps (b_problem, then n, shrink for it).
        batch_rollouts: fixed-hardware-batch mode: B rollouts per step, b_problem = B // n.
        mean_response_tokens: mean generated tokens per rollout; needed when tokens are involved.
        base_lr, b_ref, lr_rule, warmup_steps: the LR rule's settings (:func:`verl_isocompute.training.lr.resolve_lr`).
    """
    curve_name = None
    if not isinstance(curve, Curve):
        curve_name = str(curve)
        curve = load_curve(curve)
    if budget_unit not in BUDGET_UNITS:
        raise AllocationError(f"budget unit must be one of {', '.join(BUDGET_UNITS)}, got {budget_unit!r}")
    budget = _number(f"budget ({budget_unit})", budget)
    b_problem = _count("b_problem", b_problem)
    if b_problem_floor is not None:
        floor = _count("b_problem_floor", b_problem_floor)
    elif batch_rollouts is not None:
        floor = 1  # fixed-batch mode lets the curve trade problems for rollouts unless a floor is asked for
    else:
        floor = min(b_problem, B_PROBLEM_FLOOR)
    if batch_rollouts is None and floor > b_problem:
        raise AllocationError(
            f"b_problem_floor {floor} is above b_problem {b_problem}; lower the floor or raise b_problem"
        )
    min_steps = _count("min_steps", min_steps)
    b_max = None if b_max is None else _count("b_max", b_max)
    dataset_size = None if dataset_size is None else _count("dataset_size", dataset_size)
    grid = DEFAULT_N_GRID if n_grid is None else tuple(sorted({_count("n_grid value", g) for g in n_grid}))
    if not grid:
        raise AllocationError("n_grid is empty; give at least one n (e.g. 8,16,32) or leave it unset for powers of two")

    reasons: list[str] = []
    tokens_needed = "tokens" in (budget_unit, curve.compute_unit)
    if tokens_needed and mean_response_tokens is None:
        why = (
            "steps count rollouts, so a budget in tokens"
            if budget_unit == "tokens"
            else "the curve counts tokens, so a budget in rollouts"
        )
        raise AllocationError(
            f"{why} needs the mean response length: pass mean_response_tokens (--mean-response-tokens), "
            "e.g. generated tokens / rollouts from a pilot run's log"
        )
    r = None if mean_response_tokens is None else _number("mean_response_tokens", mean_response_tokens)
    if budget_unit == "rollouts":
        rollouts, tokens = budget, (budget * r if r is not None else None)
    else:
        rollouts, tokens = budget / r, budget
        reasons.append(f"budget of {tokens:,.0f} tokens = {rollouts:,.0f} rollouts at {r:g} tokens per response")
    if curve.compute_unit == "tokens" and budget_unit == "rollouts":
        reasons.append(f"the curve counts tokens: C = {rollouts:,.0f} rollouts x {r:g} tokens = {tokens:,.0f} tokens")
    curve_c = tokens if curve.compute_unit == "tokens" else rollouts
    budget_rollouts = math.floor(rollouts)

    if curve.c_range is not None and not curve.c_range[0] <= curve_c <= curve.c_range[1]:
        reasons.append(
            f"C = {curve_c:.3g} {curve.compute_unit} is outside the range the curve was fitted on "
            f"[{curve.c_range[0]:.3g}, {curve.c_range[1]:.3g}]: n*(C) is extrapolated"
        )
    n_star = float(curve.n_star(curve_c))
    n = _nearest_in_log2(grid, n_star)

    if batch_rollouts is not None:
        batch_rollouts = _count("batch_rollouts", batch_rollouts)
        if b_max is not None and batch_rollouts > b_max:
            raise AllocationError(
                f"batch_rollouts {batch_rollouts} exceeds b_max {b_max}; give one of them, or a smaller batch_rollouts"
            )
        if floor * n > batch_rollouts:
            fitting = [g for g in grid if floor * g <= batch_rollouts]
            if not fitting:
                raise AllocationError(
                    f"batch_rollouts {batch_rollouts} is below b_problem_floor {floor} x smallest n {grid[0]}; "
                    "raise batch_rollouts or lower b_problem_floor / n_grid"
                )
            reasons.append(
                f"n lowered from {n} to {max(fitting)} so that b_problem = batch_rollouts // n stays >= "
                f"b_problem_floor {floor}"
            )
            n = max(fitting)
        b_problem = batch_rollouts // n
        if b_problem * n != batch_rollouts:
            reasons.append(
                f"batch_rollouts {batch_rollouts} is not a multiple of n = {n}: each step uses {b_problem * n} rollouts"
            )
        if budget_rollouts // (b_problem * n) < min_steps:
            raise AllocationError(
                f"budget of {budget_rollouts:,} rollouts pays for {budget_rollouts // (b_problem * n)} steps of "
                f"{b_problem * n} rollouts but min_steps is {min_steps}: the minimum budget is "
                f"{min_steps * b_problem * n:,} rollouts; raise the budget or lower batch_rollouts"
            )
    else:
        if b_max is not None:
            try:
                n, b_problem, fit_reasons = _fit_batch(n, b_problem, floor, grid, b_max, f"b_max {b_max}")
            except AllocationError as exc:
                raise AllocationError(f"{exc}; raise b_max or lower b_problem_floor / n_grid") from None
            reasons += fit_reasons
        step_cap = budget_rollouts // min_steps
        why = f"{step_cap:,} rollouts (budget {budget_rollouts:,} / min_steps {min_steps})"
        try:
            n, b_problem, fit_reasons = _fit_batch(n, b_problem, floor, grid, step_cap, why)
        except AllocationError:
            smallest = floor * grid[0]
            raise AllocationError(
                f"budget of {budget_rollouts:,} rollouts is below {min_steps} step(s) of the smallest batch "
                f"(b_problem_floor {floor} x n {grid[0]} = {smallest} rollouts): the minimum budget is "
                f"{min_steps * smallest:,} rollouts; raise the budget or lower b_problem_floor / min_steps"
            ) from None
        reasons += fit_reasons

    if dataset_size is not None and b_problem > dataset_size:
        raise AllocationError(
            f"b_problem {b_problem} is larger than the dataset ({dataset_size} problems): verl drops the incomplete "
            "batch, so no step would run; lower b_problem (and b_problem_floor) or use a larger dataset"
        )
    steps = budget_rollouts // (b_problem * n)
    try:
        lr = resolve_lr(b_problem, n, base_lr=base_lr, b_ref=b_ref, rule=lr_rule, warmup_steps=warmup_steps)
    except ValueError as exc:
        raise AllocationError(str(exc)) from None
    if lr.warmup_steps > 0 and lr.warmup_steps >= steps:
        reasons.append(
            f"warm-up ({lr.warmup_steps} steps) is not shorter than the run ({steps} steps): lr never reaches {lr.lr:.3g}"
        )
    return Allocation(
        n=n,
        b_problem=b_problem,
        steps=steps,
        lr=lr.lr,
        warmup_steps=lr.warmup_steps,
        budget_rollouts=budget_rollouts,
        rollouts_used=steps * b_problem * n,
        epochs=None if dataset_size is None else steps * b_problem / dataset_size,
        n_star=n_star,
        reasons=tuple(reasons),
        budget_tokens=tokens,
        mean_response_tokens=r,
        dataset_size=dataset_size,
        lr_rule=lr.rule,
        curve=curve_name,
    )


def verl_values(allocation: Allocation) -> dict[str, Any]:
    """The verl config keys an allocation sets, dotted key -> value (one source for the hook and the CLI)."""
    if allocation.dataset_size is not None:
        steps_per_epoch = allocation.dataset_size // allocation.b_problem  # verl's loader drops the last partial batch
        total_epochs = math.ceil(allocation.steps / steps_per_epoch)
    else:
        # Without D, one step per epoch is the safe bound: total_training_steps is what ends the run.
        total_epochs = allocation.steps
    return {
        "actor_rollout_ref.rollout.n": allocation.n,
        "data.train_batch_size": allocation.b_problem,
        "actor_rollout_ref.actor.ppo_mini_batch_size": allocation.b_problem,
        "trainer.total_training_steps": allocation.steps,
        "trainer.total_epochs": total_epochs,
        "actor_rollout_ref.actor.optim.lr": allocation.lr,
        "actor_rollout_ref.actor.optim.lr_warmup_steps": allocation.warmup_steps,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.0,
    }


# trainer.total_epochs only bounds the epoch loop: a larger value the user set already lets M steps run.
_AT_LEAST_KEYS = frozenset({"trainer.total_epochs"})


def overrides(allocation: Allocation) -> list[str]:
    """verl command-line overrides (``key=value``) for ``python -m verl.trainer.main_ppo``."""
    return [f"{key}={value!r}" for key, value in verl_values(allocation).items()]


def explicit_keys_from_overrides(override_strings: Iterable[str]) -> set[str]:
    """Dotted keys named by hydra command-line overrides: ``key=v``, ``+key=v``, ``++key=v`` and ``~key``.

    Pass ``HydraConfig.get().overrides.task`` (or ``sys.argv[1:]``'s overrides) to :func:`apply_allocation`.
    """
    try:
        parsed = OverridesParser.create().parse_overrides(list(override_strings))
    except OverrideParseException as exc:
        raise AllocationError(f"cannot read the command-line overrides: {exc}") from None
    return {override.key_or_group for override in parsed}


def _allocation_settings(cfg: DictConfig) -> dict[str, Any]:
    node = OmegaConf.select(cfg, CONFIG_PATH)
    if not OmegaConf.is_dict(node):
        raise AllocationError(f"{CONFIG_PATH} must be a mapping with the keys {', '.join(DEFAULT_ALLOCATION_CONFIG)}")
    block = OmegaConf.to_container(node, resolve=True)
    unknown = sorted(set(block) - set(DEFAULT_ALLOCATION_CONFIG))
    if unknown:
        raise AllocationError(
            f"unknown key(s) {', '.join(f'{CONFIG_PATH}.{k}' for k in unknown)}; "
            f"valid keys: {', '.join(DEFAULT_ALLOCATION_CONFIG)}"
        )
    return {**DEFAULT_ALLOCATION_CONFIG, **block}


def apply_allocation(cfg: DictConfig, explicit_keys: set[str] | None = None) -> Allocation | None:
    """Apply ``cfg.isocompute.allocation`` to a verl config in place; returns the Allocation, or None if disabled.

    ``explicit_keys`` are the dotted keys the user gave on the command line
    (:func:`explicit_keys_from_overrides`). The allocation refuses to change one of them (AllocationError
    naming both values) unless ``isocompute.allocation.override_user`` is true. Values that came from a
    recipe are overwritten: that is the point of the hook. Prints nothing; see :func:`format_decision`.
    """
    if OmegaConf.select(cfg, CONFIG_PATH) is None:
        return None
    settings = _allocation_settings(cfg)
    if not settings["enable"]:
        return None
    if settings["curve"] is None:
        raise AllocationError(
            f"{CONFIG_PATH}.curve is not set; give a curve.json path or a paper: preset (e.g. paper:qwen2.5-7b-easy)"
        )
    budgets = {unit: settings[f"budget_{unit}"] for unit in BUDGET_UNITS if settings[f"budget_{unit}"] is not None}
    if len(budgets) != 1:
        raise AllocationError(f"set exactly one of {CONFIG_PATH}.budget_rollouts and {CONFIG_PATH}.budget_tokens")
    (budget_unit, budget), = budgets.items()
    try:
        allocation = allocate(
            settings["curve"],
            budget,
            budget_unit=budget_unit,
            b_max=settings["b_max"],
            b_problem=settings["b_problem"],
            b_problem_floor=settings["b_problem_floor"],
            dataset_size=settings["dataset_size"],
            n_grid=settings["n_grid"],
            min_steps=settings["min_steps"],
            batch_rollouts=settings["batch_rollouts"],
            mean_response_tokens=settings["mean_response_tokens"],
            base_lr=settings["base_lr"],
            b_ref=settings["b_ref"],
            lr_rule=settings["lr_rule"],
            warmup_steps=settings["warmup_steps"],
        )
    except (AllocationError, CurveError) as exc:
        raise AllocationError(f"{CONFIG_PATH}: {exc}") from None

    values = verl_values(allocation)
    for key in _AT_LEAST_KEYS:
        current = OmegaConf.select(cfg, key)
        if isinstance(current, int) and current >= values[key]:
            del values[key]
    if not settings["override_user"]:
        conflicts = [
            f"{key}={OmegaConf.select(cfg, key)!r} (command line) vs {value!r} (allocation)"
            for key, value in values.items()
            if key in (explicit_keys or set()) and OmegaConf.select(cfg, key) != value
        ]
        if conflicts:
            raise AllocationError(
                f"the allocation would overwrite values set on the command line: {'; '.join(conflicts)}. "
                f"Drop those overrides, or set {CONFIG_PATH}.override_user=true to let the allocation win"
            )
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, force_add=True)
    return allocation


def format_decision(allocation: Allocation) -> str:
    """A short human-readable account of the decision, reasons included (for logs and the console)."""
    a = allocation
    source = f" from {a.curve}" if a.curve else ""
    epochs = "" if a.epochs is None else f", {a.epochs:.2f} epochs of {a.dataset_size} problems"
    lines = [
        f"isocompute allocation: n = {a.n}, b_problem = {a.b_problem} ({a.batch_rollouts} rollouts/step), "
        f"steps = {a.steps}, lr = {a.lr:.3g} ({a.lr_rule}, {a.warmup_steps} warm-up steps)",
        f"  n*(C) = {a.n_star:.1f}{source}; budget {a.budget_rollouts:,} rollouts, "
        f"uses {a.rollouts_used:,}{epochs}",
    ]
    lines += [f"  - {reason}" for reason in a.reasons]
    return "\n".join(lines)
