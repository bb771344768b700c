"""Pilot-sweep plans: which (B_problem, n) cells to run, and how many steps each budget buys.

The IsoCompute playbook (arXiv 2603.12151, section 4) fits n*(C) from a grid of runs: B_problem in
{32, ..., 1024} x n in {8, ..., 2048} (powers of two), keeping only cells whose rollout batch fits the
hardware, B_problem * n <= B_max (65,536 for the Easy sweep, 16,384 for Hard: 39 and 27 cells). Every
cell gets the same sampling budget C (rollouts), so a cell runs M = floor(C / (B_problem * n)) steps and
the budget left over (less than one step) is not spent. A cell whose budget does not pay for one step is
reported and skipped; the others run.

A budget that pays any cell more than :data:`~verl_isocompute.scaling.allocation.MAX_STEPS` steps is refused,
as ``isocompute allocate`` refuses it. This module is pure Python (PyYAML; the fit's options from
:mod:`verl_isocompute.scaling.pipeline`):
``isocompute sweep --dry-run`` and the tests use it without verl or torch. :func:`parse_plan` checks
every field, the ``fit:`` block by building the fit's own :class:`FitOptions`, and the ``ray:`` block;
:func:`check_data_files` that the data files exist. The YAML schema (documented in docs/WORKFLOW.md)::

    name: pilot-easy                  # default: the plan file's name
    recipe: cpu_demo                  # one of our hydra recipes (python -m verl_isocompute.main --config-name)
    overrides: [isocompute.model=tiny]   # verl-style key=value applied to every cell
    data: {train_files: ..., val_files: ...}   # optional; else the recipe's data
    budget_rollouts: 65536            # C per cell, in rollouts
    b_problem: [32, 64, 128]          # default: powers of two 32..1024
    n: [8, 16, 32]                    # default: powers of two 8..2048
    b_max: 65536                      # cap on B_problem * n; null = no cap
    val_points: 8                     # validations per cell (test_freq = ceil(steps / val_points))
    test_freq: null                   # or a fixed trainer.test_freq for every cell
    sweep_dir: runs/pilot-easy        # default runs/<name>
    fit: {metric: val/avg@4, compute: rollouts, group_by: n, bootstrap: 200}
    ray: {address: null, max_concurrent: 2, mode: auto, python: python, env_vars: {}, num_gpus: null, num_cpus: 1}

Relative paths (data files, sweep_dir) are relative to the plan file's directory. The learning rate is
the recipe's: its LR rule (``isocompute.lr``, lr = base_lr * sqrt(B_problem * n / 1024)) gives every cell
the rate for its own rollout batch; change it with overrides such as ``isocompute.lr.base_lr=1e-5``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.numeric import as_count, integral, yaml_number
from verl_isocompute.scaling.allocation import MAX_STEPS
from verl_isocompute.scaling.pipeline import FitOptions

# The paper's grid (arXiv 2603.12151, section 4): powers of two.
PAPER_B_PROBLEM: tuple[int, ...] = tuple(2**i for i in range(5, 11))  # 32 .. 1024
PAPER_N: tuple[int, ...] = tuple(2**i for i in range(3, 12))  # 8 .. 2048
PAPER_B_MAX = {"easy": 65_536, "hard": 16_384}
DEFAULT_VAL_POINTS = 8
DEFAULT_MAX_CONCURRENT = 2

# Keys every cell sets itself: a plan must not override them (the cell's value would silently lose or win).
CELL_KEYS = (
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "trainer.total_training_steps",
    "trainer.total_epochs",
    "trainer.test_freq",
    "isocompute.run_dir",
    "trainer.experiment_name",
)
_TOP_KEYS = {
    "name", "recipe", "overrides", "data", "budget_rollouts", "b_problem", "n", "b_max", "val_points",
    "test_freq", "sweep_dir", "fit", "ray",
}
_FIT_KEYS = {f.name for f in fields(FitOptions)}  # a plan's fit: block is isocompute fit's options
# The ray: block's keys are executors.RayOptions' fields (tests/test_sweep_plan.py checks they agree).
_RAY_KEYS = {"address", "max_concurrent", "python", "env_vars", "mode", "num_gpus", "num_cpus"}
RAY_MODES = ("private", "join")  # how a cell uses the cluster (executors.RayOptions.mode)
RAY_PLAN_MODES = ("auto", *RAY_MODES)  # auto: private on one node, join on several (preflight.ray_options)


class PlanError(IsoComputeError, ValueError):
    """A plan that cannot be run; the message names the field and the fix."""


@dataclass(frozen=True)
class Cell:
    """One run of the sweep: ``steps`` steps of ``b_problem`` problems x ``n`` rollouts each."""

    b_problem: int
    n: int
    budget_rollouts: int

    @property
    def id(self) -> str:
        return f"b{self.b_problem}_n{self.n}"

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
    """A parsed, validated sweep plan (see the module docstring for the YAML schema)."""

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
    source: str | None = None  # the plan file, for messages

    def grid(self) -> list[tuple[int, int]]:
        return grid(self.b_problem, self.n, self.b_max)

    def cells(self) -> list[Cell]:
        """Every cell of the grid under B_max, in run order (small rollout batches first)."""
        return [Cell(b, n, self.budget_rollouts) for b, n in self.grid()]

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
    bs, ns = _values("b_problem", b_problem, minimum=1), _values("n", n, minimum=1)
    pairs = [(b, k) for b in bs for k in ns if b_max is None or b * k <= b_max]
    if not pairs:
        smallest = min(bs) * min(ns)
        raise PlanError(
            f"no cell satisfies b_problem x n <= b_max = {b_max}: the smallest rollout batch is "
            f"{min(bs)} x {min(ns)} = {smallest}; raise b_max to at least {smallest} or add smaller "
            "b_problem / n values"
        )
    return sorted(pairs, key=lambda p: (p[0] * p[1], p[0]))


def _values(name: str, values: Any, minimum: int) -> tuple[int, ...]:
    if isinstance(values, (int, str)) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, (list, tuple)) or not values:
        raise PlanError(f"{name} must be a non-empty list of integers, e.g. {name}: [8, 16, 32]")
    out = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise PlanError(f"{name} holds {value!r}; every value must be an integer >= {minimum}")
        out.append(value)
    if len(set(out)) != len(out):
        raise PlanError(f"{name} lists a value twice: {out}")
    return tuple(sorted(out))


def _positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    value = integral(yaml_number(value))  # YAML reads 1e6 as a string and 6.5e4 as a float
    if as_count(value) is None:
        raise PlanError(f"{name} must be a positive integer{' or null' if allow_none else ''}, got {value!r}")
    return value


def _files(name: str, value: Any, base: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise PlanError(f"data.{name} must be a path or a list of paths, got {value!r}")
    out = []
    for item in items:
        path = Path(os.path.expanduser(item))
        path = path if path.is_absolute() else base / path
        out.append(str(path))
    return tuple(out)


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def parse_plan(raw: Any, base_dir: str | os.PathLike = ".", default_name: str = "sweep", source: str | None = None) -> Plan:
    """Validate a plan given as a mapping (the parsed YAML); relative paths resolve against ``base_dir``."""
    if not isinstance(raw, dict):
        raise PlanError("a plan is a YAML mapping with at least recipe and budget_rollouts")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise PlanError(f"unknown plan key(s) {unknown}; known keys: {sorted(_TOP_KEYS)}")
    base = Path(base_dir).absolute()
    for key in ("recipe", "budget_rollouts"):
        if raw.get(key) is None:
            raise PlanError(f"the plan needs {key!r} (e.g. recipe: cpu_demo, budget_rollouts: 4096)")
    recipe = raw["recipe"]
    if not isinstance(recipe, str) or not recipe:
        raise PlanError(f"recipe must be the name of a recipe such as cpu_demo, got {recipe!r}")
    name = raw.get("name") or default_name
    if not isinstance(name, str) or "/" in name:
        raise PlanError(f"name must be a plain string without '/', got {name!r}")
    budget = _positive_int("budget_rollouts", raw["budget_rollouts"])

    overrides = raw.get("overrides") or []
    if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
        raise PlanError("overrides must be a list of key=value strings, e.g. [isocompute.model=tiny]")
    for o in overrides:
        key = _override_key(o)
        if key in CELL_KEYS:
            raise PlanError(f"overrides sets {key}, which the sweep sets for each cell; remove it from the plan")
        if key in ("data.train_files", "data.val_files"):
            raise PlanError(f"overrides sets {key}; put data files under the plan's data: block instead")

    data = raw.get("data") or {}
    if not isinstance(data, dict) or set(data) - {"train_files", "val_files"}:
        raise PlanError("data must be a mapping with train_files and val_files")
    train_files, val_files = _files("train_files", data.get("train_files"), base), _files("val_files", data.get("val_files"), base)
    if bool(train_files) != bool(val_files):
        raise PlanError("data needs both train_files and val_files (or neither, to use the recipe's data)")

    b_problem = _values("b_problem", raw.get("b_problem", list(PAPER_B_PROBLEM)), minimum=1)
    n = _values("n", raw.get("n", list(PAPER_N)), minimum=1)
    b_max = _positive_int("b_max", raw.get("b_max"), allow_none=True)
    val_points = _positive_int("val_points", raw.get("val_points", DEFAULT_VAL_POINTS))
    test_freq = _positive_int("test_freq", raw.get("test_freq"), allow_none=True)

    fit = raw.get("fit") or {}
    if not isinstance(fit, dict):
        raise PlanError(f"fit must be a mapping of isocompute fit's options, e.g. fit: {{bootstrap: 0}}, got {fit!r}")
    fit = dict(fit)
    fit_options(fit)  # the fit's own checks, now rather than after every cell has trained
    ray_cfg = _ray_block(raw.get("ray"))

    sweep_dir = Path(os.path.expanduser(str(raw.get("sweep_dir") or f"runs/{name}")))
    sweep_dir = sweep_dir if sweep_dir.is_absolute() else base / sweep_dir

    plan = Plan(
        name=name, recipe=recipe, budget_rollouts=budget, b_problem=b_problem, n=n, b_max=b_max,
        overrides=tuple(overrides), train_files=train_files, val_files=val_files, val_points=val_points,
        test_freq=test_freq, sweep_dir=str(sweep_dir), fit=fit, ray=ray_cfg, source=source,
    )
    plan.grid()  # raises when B_max removes every cell
    if not plan.runnable():
        smallest = min(c.batch_rollouts for c in plan.cells())
        raise PlanError(
            f"budget_rollouts = {budget} does not pay for one step of any cell: the smallest step takes "
            f"{smallest} rollouts; raise budget_rollouts to at least {smallest}"
        )
    longest = max(plan.runnable(), key=lambda c: c.steps)
    if longest.steps > MAX_STEPS:  # the allocation's bound: a slip in the budget's exponent, not a plan
        raise PlanError(
            f"budget_rollouts = {budget:.3g} pays cell {longest.id} for {longest.steps:.3g} steps of "
            f"{longest.batch_rollouts} rollouts, more than {MAX_STEPS:,}: check the budget (its exponent; rollouts, "
            "not tokens?)"
        )
    return plan


def fit_options(values: dict[str, Any]) -> FitOptions:
    """A plan's ``fit:`` block as the :class:`FitOptions` ``isocompute fit`` builds from its flags, checked."""
    from verl_isocompute.scaling.errors import ScalingError

    unknown = sorted(set(values) - _FIT_KEYS)
    if unknown:
        raise PlanError(f"unknown fit key(s) {unknown}; known: {sorted(_FIT_KEYS)}")
    options = FitOptions.from_dict(values)
    try:
        options.check()  # the fit's own value checks, the same as `isocompute fit` runs on its flags
    except ScalingError as exc:
        raise PlanError(f"fit: {exc} (plan keys are the flags' names with _, e.g. group_by)") from None
    return options


def _ray_block(raw: Any) -> dict[str, Any]:
    """The ``ray:`` block, checked (how each key is used: :class:`~.executors.RayOptions`)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PlanError(f"ray must be a mapping such as ray: {{address: http://head:8265, max_concurrent: 2}}, got {raw!r}")
    ray_cfg = dict(raw)
    unknown = sorted(set(ray_cfg) - _RAY_KEYS)
    if unknown:
        raise PlanError(f"unknown ray key(s) {unknown}; known: {sorted(_RAY_KEYS)}")
    ray_cfg["max_concurrent"] = _positive_int("ray.max_concurrent", ray_cfg.get("max_concurrent", DEFAULT_MAX_CONCURRENT))
    if ray_cfg.get("mode", "auto") not in RAY_PLAN_MODES:
        raise PlanError(f"ray.mode={ray_cfg['mode']!r}: use auto, private (each cell its own Ray instance) or join")
    for key in ("address", "python"):
        value = ray_cfg.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise PlanError(f"ray.{key} must be a string, got {value!r}")
    env_vars = ray_cfg.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float, bool))
                                                     and not isinstance(v, dict) for k, v in env_vars.items()):
            raise PlanError(f"ray.env_vars must map names to values, e.g. env_vars: {{HF_HOME: /data/hf}}, got {env_vars!r}")
        ray_cfg["env_vars"] = {k: str(v) for k, v in env_vars.items()}
    for key in ("num_gpus", "num_cpus"):
        value = yaml_number(ray_cfg.get(key))
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
            raise PlanError(f"ray.{key} must be a number >= 0 or null, got {ray_cfg.get(key)!r}")
        if key in ray_cfg:
            ray_cfg[key] = value
    return ray_cfg


def check_data_files(plan: Plan) -> None:
    """Every data file of the plan is a file (before the first cell, and in a dry run)."""
    for name, files in (("train_files", plan.train_files), ("val_files", plan.val_files)):
        for f in files:
            if not Path(f).is_file():
                what = "is a directory" if Path(f).is_dir() else "does not exist"
                raise PlanError(f"data file {f} {what}; fix data.{name} in {plan.source or 'the plan'} "
                                "(relative paths are relative to the plan file)")


def load_plan(path: str | os.PathLike) -> Plan:
    """Read and validate a plan file."""
    path = Path(path)
    if path.is_dir():
        raise PlanError(f"plan {path} is a directory; pass the plan's YAML file (--plan DIR/plan.yaml)")
    if not path.is_file():
        raise PlanError(f"plan file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise PlanError(f"{path} is not valid YAML: {exc}") from None
    return parse_plan(raw, base_dir=path.parent, default_name=path.stem, source=str(path))


def cell_overrides(plan: Plan, cell: Cell, run_dir: str | os.PathLike, dataset_size: int | None = None) -> list[str]:
    """The verl command-line overrides of one cell: the plan's, then the cell's run shape.

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
        out += [f"data.train_files={_hydra_list(plan.train_files)}", f"data.val_files={_hydra_list(plan.val_files)}"]
        # our recipes may generate their data; files given in the plan win (++: add or override)
        if not any(_override_key(o) == "isocompute.data.source" for o in plan.overrides):
            out.append("++isocompute.data.source=files")
    out += [
        f"actor_rollout_ref.rollout.n={cell.n}",
        f"data.train_batch_size={cell.b_problem}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={cell.b_problem}",
        f"trainer.total_training_steps={cell.steps}",
        f"trainer.total_epochs={epochs}",
        f"trainer.test_freq={plan.test_freq_for(cell)}",
        f"trainer.experiment_name={plan.name}-{cell.id}",
        f"isocompute.run_dir={run_dir}",
    ]
    return out


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
    """The table ``isocompute sweep --dry-run`` prints: every cell, its steps and rollouts, and totals."""
    lines = [
        f"plan {plan.name}: recipe {plan.recipe}, budget {plan.budget_rollouts} rollouts per cell, "
        f"b_max {plan.b_max if plan.b_max is not None else 'none'}, sweep dir {plan.sweep_dir}",
        f"{'cell':<14}{'b_problem':>10}{'n':>7}{'B':>9}{'steps':>7}{'test_freq':>10}{'rollouts':>11}",
    ]
    total = 0
    for cell in plan.cells():
        if cell.steps < 1:
            lines.append(
                f"{cell.id:<14}{cell.b_problem:>10}{cell.n:>7}{cell.batch_rollouts:>9}{'-':>7}{'-':>10}{'-':>11}"
                f"  skipped: one step takes {cell.batch_rollouts} rollouts > budget {plan.budget_rollouts}"
            )
            continue
        total += cell.rollouts_used
        lines.append(
            f"{cell.id:<14}{cell.b_problem:>10}{cell.n:>7}{cell.batch_rollouts:>9}{cell.steps:>7}"
            f"{plan.test_freq_for(cell):>10}{cell.rollouts_used:>11}"
        )
    runnable, small = plan.runnable(), plan.too_small()
    lines.append(
        f"{len(runnable)} cells to run ({len(small)} skipped: budget below one step), "
        f"{sum(c.steps for c in runnable)} steps, {total} rollouts in total"
    )
    return "\n".join(lines)
