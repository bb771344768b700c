"""Pilot-sweep plans: reading a plan file and checking every field before any cell runs.

What a plan means (the (B_problem, n) grid of arXiv 2603.12151, section 4, each cell's steps and verl
command line) is :mod:`verl_isocompute.workflow.sweep.grid`'s; this module turns the YAML into a checked
:class:`~verl_isocompute.workflow.sweep.grid.Plan`.

A budget that pays any cell more than :data:`~verl_isocompute.scaling.allocation.MAX_STEPS` steps is refused,
as ``isocompute allocate`` refuses it. This module is pure Python (PyYAML; the fit's options from
:mod:`verl_isocompute.scaling.pipeline`):
``isocompute sweep --dry-run`` and the tests use it without verl or torch. :func:`parse_plan` checks
every field, the ``fit:`` block by building the fit's own :class:`FitConfig`, and the ``ray:`` block;
:func:`check_data_files` that the data files exist. The YAML schema (documented in docs/WORKFLOW.md)::

    name: pilot-easy                  # default: the plan file's name
    recipe: cpu_demo                  # one of our hydra recipes (python -m verl_isocompute.main --config-name)
    overrides: [isocompute.model=tiny]   # verl-style key=value applied to every cell
    data: {train_files: ..., val_files: ...}   # optional; else the recipe's data
    budget_rollouts: 65536            # C per cell, in rollouts
    b_problem: [32, 64, 128]          # default: powers of two 32..1024
    n: [8, 16, 32]                    # default: powers of two 8..2048
    b_max: 65536                      # cap on B_problem * n; null = no cap
    seeds: [0, 1, 2]                  # optional: every cell once per seed (run b32_n8-s0, ...); default: once
    val_points: 8                     # validations per cell (test_freq = ceil(steps / val_points))
    test_freq: null                   # or a fixed trainer.test_freq for every cell
    sweep_dir: runs/pilot-easy        # default runs/<name>
    fit: {metric: val/avg@4, compute: rollouts, group_by: n, bootstrap: 200}
    early_stop: {level: 0.9}          # optional: the sequential pilot (scaling.pilot); checks: default every 5 % from 20 % to 60 %
    ray: {address: null, max_concurrent: 2, mode: auto, python: python, env_vars: {}, num_gpus: null, num_cpus: 1}

Relative paths (data files, sweep_dir) are relative to the plan file's directory. The learning rate is
the recipe's: its LR rule (``isocompute.lr``, lr = base_lr * sqrt(B_problem * n / 1024)) gives every cell
the rate for its own rollout batch; change it with overrides such as ``isocompute.lr.base_lr=1e-5``.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from verl_isocompute import _compat, verl_keys
from verl_isocompute.numeric import as_count, integral, yaml_number
from verl_isocompute.scaling.allocation import MAX_STEPS
from verl_isocompute.scaling.pipeline import FitConfig
from verl_isocompute.workflow.sweep.grid import (
    CELL_KEYS,
    DEFAULT_VAL_POINTS,
    PAPER_B_PROBLEM,
    PAPER_N,
    Plan,
    SEED_KEYS,
    PlanError,
    axis_values,
    override_key,
)

DEFAULT_MAX_CONCURRENT = 2
_TOP_KEYS = {
    "name", "recipe", "overrides", "data", "budget_rollouts", "b_problem", "n", "b_max", "val_points",
    "test_freq", "sweep_dir", "fit", "ray", "seeds", "early_stop",
}
_FIT_KEYS = {f.name for f in fields(FitConfig)}  # a plan's fit: block is isocompute fit's options
# The ray: block's keys are executors.RayConfig's fields (tests/test_sweep_plan.py checks they agree).
_RAY_KEYS = {"address", "max_concurrent", "python", "env_vars", "mode", "num_gpus", "num_cpus"}
RAY_MODES = ("private", "join")  # how a cell uses the cluster (executors.RayConfig.mode)
RAY_PLAN_MODES = ("auto", *RAY_MODES)  # auto: private on one node, join on several (preflight.ray_options)

# Names that lived here until 0.2 and moved with the grid; the old path works for one release.
_MOVED = dict.fromkeys(
    ("PAPER_B_MAX", "Cell", "powers_of_two", "grid", "cell_overrides", "micro_batch_issue", "describe"),
    "verl_isocompute.workflow.sweep.grid",
)

__getattr__ = _compat.moved_names(__name__, _MOVED)


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
        key = override_key(o)
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

    b_problem = axis_values("b_problem", raw.get("b_problem", list(PAPER_B_PROBLEM)), minimum=1)
    n = axis_values("n", raw.get("n", list(PAPER_N)), minimum=1)
    b_max = _positive_int("b_max", raw.get("b_max"), allow_none=True)
    seeds = _seeds(raw.get("seeds"), overrides)
    val_points = _positive_int("val_points", raw.get("val_points", DEFAULT_VAL_POINTS))
    test_freq = _positive_int("test_freq", raw.get("test_freq"), allow_none=True)

    fit = raw.get("fit") or {}
    if not isinstance(fit, dict):
        raise PlanError(f"fit must be a mapping of isocompute fit's options, e.g. fit: {{bootstrap: 0}}, got {fit!r}")
    fit = dict(fit)
    fit_options(fit)  # the fit's own checks, now rather than after every cell has trained
    ray_cfg = _ray_block(raw.get("ray"))
    early_stop = _early_stop(raw.get("early_stop"))

    sweep_dir = Path(os.path.expanduser(str(raw.get("sweep_dir") or f"runs/{name}")))
    sweep_dir = sweep_dir if sweep_dir.is_absolute() else base / sweep_dir

    plan = Plan(
        name=name, recipe=recipe, budget_rollouts=budget, b_problem=b_problem, n=n, b_max=b_max,
        overrides=tuple(overrides), train_files=train_files, val_files=val_files, val_points=val_points,
        test_freq=test_freq, sweep_dir=str(sweep_dir), fit=fit, ray=ray_cfg, seeds=seeds, source=source,
        early_stop=early_stop,
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


def _early_stop(value: Any) -> dict[str, Any] | None:
    """The plan's ``early_stop`` block (docs/WORKFLOW.md, "Stopping a pilot early"), checked; None without it."""
    from verl_isocompute.scaling.errors import ScalingError
    from verl_isocompute.scaling.pilot import DEFAULT_METRIC, SCHEDULE, check_fractions, check_level

    if value is None:
        return None
    example = "early_stop: {checks: [0.2, 0.4, 0.6], level: 0.9}"
    if not isinstance(value, dict) or set(value) - {"checks", "level", "metric"}:
        raise PlanError(f"early_stop must be a mapping with checks, level and optionally metric, e.g. {example}; got {value!r}")
    checks = value.get("checks", list(SCHEDULE))
    try:
        checks = check_fractions([float(yaml_number(c)) for c in checks] if isinstance(checks, list) else checks)
    except (ScalingError, TypeError, ValueError) as exc:
        raise PlanError(str(exc) if isinstance(exc, ScalingError) else f"early_stop.checks must be a list of fractions, e.g. {example}") from None
    level = yaml_number(value.get("level", 0.9))
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0.5 <= level <= 0.98:
        raise PlanError(f"early_stop.level must be a number in [0.5, 0.98] (the forecast's calibrated range), got {level!r}")
    try:
        check_level(float(level), checks)
    except ScalingError as exc:
        raise PlanError(str(exc)) from None
    metric = value.get("metric", DEFAULT_METRIC)
    if not isinstance(metric, str) or not metric:
        raise PlanError(f"early_stop.metric must be a logged metric name such as {DEFAULT_METRIC}, got {metric!r}")
    return {"checks": checks, "level": float(level), "metric": metric}


def _seeds(value: Any, overrides: list[str]) -> tuple[int, ...]:
    """The plan's ``seeds`` (distinct integers >= 0, run in increasing order), or () without the key."""
    if value is None:
        return ()
    if not isinstance(value, list):  # `seeds: 3` could mean seed 3 or three seeds: ask for the list
        raise PlanError(f"seeds must be a list of seeds such as seeds: [0, 1, 2], got {value!r}")
    seeds = axis_values("seeds", value, minimum=0, example="[0, 1, 2]", maximum=verl_keys.MAX_SEED,
                        why_maximum=f" (each run's {', '.join(SEED_KEYS)}: the largest seed numpy takes, which vLLM seeds "
                                    "with the rollout's)")
    for o in overrides:
        if override_key(o) in SEED_KEYS:
            raise PlanError(f"overrides sets {override_key(o)}, which seeds: {list(seeds)} sets for each run: the plan "
                            "contradicts itself; remove it from overrides or remove seeds")
    return seeds


def fit_options(values: dict[str, Any]) -> FitConfig:
    """A plan's ``fit:`` block as the :class:`FitConfig` ``isocompute fit`` builds from its flags, checked."""
    from verl_isocompute.scaling.errors import ScalingError

    from verl_isocompute.scaling.pipeline import REPLACED_EMA

    if "ema" in values:
        raise PlanError(f"fit: {REPLACED_EMA}")
    unknown = sorted(set(values) - _FIT_KEYS)
    if unknown:
        raise PlanError(f"unknown fit key(s) {unknown}; known: {sorted(_FIT_KEYS)}")
    options = FitConfig.from_dict(values)
    try:
        options.check()  # the fit's own value checks, the same as `isocompute fit` runs on its flags
    except ScalingError as exc:
        raise PlanError(f"fit: {exc} (plan keys are the flags' names with _, e.g. group_by)") from None
    return options


def _ray_block(raw: Any) -> dict[str, Any]:
    """The ``ray:`` block, checked (how each key is used: :class:`~.executors.RayConfig`)."""
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


