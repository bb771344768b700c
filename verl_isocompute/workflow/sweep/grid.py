"""The grid of a pilot sweep and each cell's run: which (B_problem, n) cells, how many steps each budget buys.

The IsoCompute playbook (arXiv 2603.12151, section 4) fits n*(C) from a grid of runs: B_problem in
{32, ..., 1024} x n in {8, ..., 2048} (powers of two), keeping only cells whose rollout batch fits the
hardware, B_problem * n <= B_max (65,536 for the Easy sweep, 16,384 for Hard: 39 and 27 cells). Every
cell gets the same sampling budget C (rollouts), so a cell runs M = floor(C / (B_problem * n)) steps and
the budget left over (less than one step) is not spent. A cell whose budget does not pay for one step is
reported and skipped; the others run.

A plan with ``seeds`` runs every cell once per seed, so that the fit can measure the run-to-run variation at
fixed n (its bootstrap over seeds resamples the runs of each n among themselves). The seed sets the order in
which the training set is visited and the rollout's sampling, and nothing else; the run is cell ``-s<seed>``.
Runs are ordered seed-major, all cells of seed 0 before any of seed 1, so a sweep stopped early leaves whole
seeds, each a complete grid.

:class:`Plan` is a checked plan (read from its YAML file by :mod:`verl_isocompute.workflow.sweep.plan`),
:class:`Cell` one run of it; :func:`cell_overrides` is the verl command line of a cell, :func:`describe`
the table ``isocompute sweep --dry-run`` prints. Pure Python: the dry run and the tests use it without verl.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from verl_isocompute import verl_keys
from verl_isocompute.errors import IsoComputeError

# The paper's grid (arXiv 2603.12151, section 4): powers of two.
PAPER_B_PROBLEM: tuple[int, ...] = tuple(2**i for i in range(5, 11))  # 32 .. 1024
PAPER_N: tuple[int, ...] = tuple(2**i for i in range(3, 12))  # 8 .. 2048
PAPER_B_MAX = {"easy": 65_536, "hard": 16_384}
DEFAULT_VAL_POINTS = 8

# Keys every cell sets itself, in the order of its overrides: a plan must not override them (the cell's value
# would silently lose or win).
CELL_KEYS = (
    verl_keys.N,
    verl_keys.B_PROBLEM,
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    verl_keys.STEPS,
    verl_keys.EPOCHS,
    "trainer.test_freq",
    "trainer.experiment_name",
    "isocompute.run_dir",
)
# Keys a run of a plan with seeds sets to its seed: a plan with seeds must not override them either.
SEED_KEYS = (verl_keys.DATA_SEED, verl_keys.ROLLOUT_SEED)


class PlanError(IsoComputeError, ValueError):
    """A plan that cannot be run; the message names the field and the fix."""


@dataclass(frozen=True)
class Cell:
    """One run of the sweep: ``steps`` steps of ``b_problem`` problems x ``n`` rollouts each, with ``seed``
    when the plan lists seeds (None: the recipe's seeds)."""

    b_problem: int
    n: int
    budget_rollouts: int
    seed: int | None = None

    @property
    def id(self) -> str:
        """``b<B_problem>_n<n>``, with ``-s<seed>`` when the run has a seed of its own."""
        shape = f"b{self.b_problem}_n{self.n}"
        return shape if self.seed is None else f"{shape}-s{self.seed}"

    @property
    def batch_rollouts(self) -> int:
        """B = B_problem * n, the rollouts of one step."""
        return self.b_problem * self.n

    @property
    def steps(self) -> int:
        """M = floor(C / B): the budget is never exceeded."""
        return self.budget_rollouts // self.batch_rollouts

    @property
    def rollouts_used(self) -> int:
        return self.steps * self.batch_rollouts


@dataclass(frozen=True)
class Plan:
    """A parsed, validated sweep plan (its YAML schema: :mod:`verl_isocompute.workflow.sweep.plan`)."""

    name: str
    recipe: str
    budget_rollouts: int
    b_problem: tuple[int, ...] = PAPER_B_PROBLEM
    n: tuple[int, ...] = PAPER_N
    b_max: int | None = None
    overrides: tuple[str, ...] = ()
    train_files: tuple[str, ...] = ()
    val_files: tuple[str, ...] = ()
    val_points: int = DEFAULT_VAL_POINTS
    test_freq: int | None = None
    sweep_dir: str = ""
    fit: dict[str, Any] = field(default_factory=dict)
    ray: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()  # empty: one run per cell with the recipe's seeds
    source: str | None = None  # the plan file, for messages
    early_stop: dict[str, Any] | None = None  # checks, level, metric: the sequential pilot (None: off)

    def grid(self) -> list[tuple[int, int]]:
        return grid(self.b_problem, self.n, self.b_max)

    def cells(self) -> list[Cell]:
        """Every run of the grid under B_max, in run order: seed-major, then small rollout batches first."""
        seeds = self.seeds or (None,)
        return [Cell(b, n, self.budget_rollouts, seed) for seed in seeds for b, n in self.grid()]

    def runnable(self) -> list[Cell]:
        return [c for c in self.cells() if c.steps >= 1]

    def too_small(self) -> list[Cell]:
        """Cells whose budget does not pay for one step."""
        return [c for c in self.cells() if c.steps < 1]

    def test_freq_for(self, cell: Cell) -> int:
        """Validation every this many steps (verl also validates after the last step)."""
        if self.test_freq is not None:
            return self.test_freq
        return max(1, math.ceil(cell.steps / self.val_points))


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    """lo, 2 lo, 4 lo, ... up to hi (lo a power of two)."""
    out, value = [], lo
    while value <= hi:
        out.append(value)
        value *= 2
    return tuple(out)


def grid(b_problem: Any, n: Any, b_max: int | None = None) -> list[tuple[int, int]]:
    """The (B_problem, n) pairs with B_problem * n <= b_max, ordered by rollout batch, then B_problem.

    Raises :class:`PlanError` naming the constraint when nothing is left.
    """
    bs, ns = axis_values("b_problem", b_problem, minimum=1), axis_values("n", n, minimum=1)
    pairs = [(b, k) for b in bs for k in ns if b_max is None or b * k <= b_max]
    if not pairs:
        smallest = min(bs) * min(ns)
        raise PlanError(
            f"no cell satisfies b_problem x n <= b_max = {b_max}: the smallest rollout batch is "
            f"{min(bs)} x {min(ns)} = {smallest}; raise b_max to at least {smallest} or add smaller "
            "b_problem / n values"
        )
    return sorted(pairs, key=lambda p: (p[0] * p[1], p[0]))


def axis_values(name: str, values: Any, minimum: int, example: str = "[8, 16, 32]", maximum: int | None = None,
                why_maximum: str = "") -> tuple[int, ...]:
    """One axis of the runs (``b_problem``, ``n`` or ``seeds``): distinct integers in [``minimum``, ``maximum``],
    sorted (``why_maximum``: the reason for the bound, said when a value passes it)."""
    if isinstance(values, (int, str)) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, (list, tuple)) or not values:
        raise PlanError(f"{name} must be a non-empty list of integers, e.g. {name}: {example}")
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PlanError(f"{name} holds {value!r}; every value must be an integer >= {minimum}")
        if maximum is not None and value > maximum:
            raise PlanError(f"{name} holds {value}; every value must be at most {maximum:,}{why_maximum}")
        out.append(value)
    if len(set(out)) != len(out):
        raise PlanError(f"{name} lists a value twice: {out}")
    return tuple(sorted(out))


def override_key(override: str) -> str:
    """The key a verl-style override sets (``+key=value``, ``~key``, ``key=value`` -> ``key``)."""
    return override.split("=", 1)[0].lstrip("+~")


def cell_overrides(plan: Plan, cell: Cell, run_dir: str | os.PathLike, dataset_size: int | None = None) -> list[str]:
    """The verl command-line overrides of one cell: the plan's, then the cell's run shape, then its seed.

    B_problem is both the train batch and the mini-batch (one optimizer step per rollout batch: fully
    on-policy, as the recipe requires). ``trainer.total_epochs`` only bounds verl's epoch loop so that it
    cannot end the run before M steps: with the dataset size D known it is ceil(M / floor(D / B_problem))
    (verl drops the last partial batch), otherwise M (at least one step per epoch).
    """
    if dataset_size is not None and dataset_size < cell.b_problem:
        raise PlanError(f"cell {cell.id}: b_problem = {cell.b_problem} exceeds the {dataset_size} training problems")
    epochs = cell.steps if dataset_size is None else math.ceil(cell.steps / (dataset_size // cell.b_problem))
    out = list(plan.overrides)
    if plan.train_files:
        out += [f"{verl_keys.TRAIN_FILES}={_hydra_list(plan.train_files)}", f"{verl_keys.VAL_FILES}={_hydra_list(plan.val_files)}"]
        # our recipes may generate their data; files given in the plan win (++: add or override)
        if not any(override_key(o) == "isocompute.data.source" for o in plan.overrides):
            out.append("++isocompute.data.source=files")
    # B_problem is also the mini-batch: one optimizer step per rollout batch
    values = (cell.n, cell.b_problem, cell.b_problem, cell.steps, epochs, plan.test_freq_for(cell),
              f"{plan.name}-{cell.id}", run_dir)
    out += [f"{key}={value}" for key, value in zip(CELL_KEYS, values, strict=True)]
    return out if cell.seed is None else out + [f"{key}={cell.seed}" for key in SEED_KEYS]


def micro_batch_issue(cell: Cell, world_size: int, micro_batches: dict[str, int | None]) -> str | None:
    """Why verl would reject this cell's batch, or None.

    Without dynamic batch sizes verl cuts each rank's share of a step, B / world_size sequences, into
    micro-batches of a fixed size, and asserts that they divide it. Paper-sized cells (B >= 256) always
    pass with the usual sizes; small CPU cells (B = 4 with micro-batches of 8) do not.
    """
    if cell.batch_rollouts % world_size:
        return f"{cell.batch_rollouts} rollouts per step do not split over {world_size} training ranks"
    per_rank = cell.batch_rollouts // world_size
    for key, size in micro_batches.items():
        if size and per_rank % int(size):
            return (f"{cell.batch_rollouts} rollouts per step ({per_rank} per rank) is not a multiple of {key}={size}, "
                    "which verl requires; choose b_problem x n accordingly or lower it in the plan's overrides")
    return None


def _hydra_list(paths: tuple[str, ...]) -> str:
    return "[" + ",".join(f"'{p}'" for p in paths) + "]"


def describe(plan: Plan) -> str:
    """The table ``isocompute sweep --dry-run`` prints: every run (cell x seed), its steps and rollouts, and totals."""
    seeds = f", seeds {list(plan.seeds)}" if plan.seeds else ""
    width = max(14, *(len(c.id) + 2 for c in plan.cells()))
    lines = [
        f"plan {plan.name}: recipe {plan.recipe}, budget {plan.budget_rollouts} rollouts per cell, "
        f"b_max {plan.b_max if plan.b_max is not None else 'none'}{seeds}, sweep dir {plan.sweep_dir}",
        f"{'cell':<{width}}{'b_problem':>10}{'n':>7}{'B':>9}{'steps':>7}{'test_freq':>10}{'rollouts':>11}",
    ]
    total = 0
    for cell in plan.cells():
        if cell.steps < 1:
            lines.append(
                f"{cell.id:<{width}}{cell.b_problem:>10}{cell.n:>7}{cell.batch_rollouts:>9}{'-':>7}{'-':>10}{'-':>11}"
                f"  skipped: one step takes {cell.batch_rollouts} rollouts > budget {plan.budget_rollouts}"
            )
            continue
        total += cell.rollouts_used
        lines.append(
            f"{cell.id:<{width}}{cell.b_problem:>10}{cell.n:>7}{cell.batch_rollouts:>9}{cell.steps:>7}"
            f"{plan.test_freq_for(cell):>10}{cell.rollouts_used:>11}"
        )
    runnable, small = plan.runnable(), plan.too_small()
    if plan.seeds:
        count = (f"{counted(len(runnable), 'run')} to run ({counted(len(runnable) // len(plan.seeds), 'cell')} x "
                 f"{counted(len(plan.seeds), 'seed')}; {counted(len(small), 'run')} skipped: budget below one step)")
    else:
        count = f"{counted(len(runnable), 'cell')} to run ({len(small)} skipped: budget below one step)"
    lines.append(f"{count}, {sum(c.steps for c in runnable)} steps, {total} rollouts in total")
    if plan.early_stop:
        stop = plan.early_stop
        at = ", ".join(f"{f:.0%} ({f * total:.0f} rollouts)" for f in stop["checks"])
        from verl_isocompute.scaling.pilot import check_rule

        each, how = check_rule(stop["level"], stop["checks"])
        lines.append(f"early stop: checks at {at} of the total; stops an n whose forecast of {stop['metric']} at "
                     f"C = {plan.budget_rollouts} lies wholly below the best n's ({each:.1%} intervals at each check: "
                     f"{how})")
    return "\n".join(lines)


def counted(k: int, noun: str) -> str:
    """A count and its noun, singular for one: ``1 cell``, ``2 cells`` (the sweep's dry run and progress lines)."""
    return f"{k} {noun}{'' if k == 1 else 's'}"
