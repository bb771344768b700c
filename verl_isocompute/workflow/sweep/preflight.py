"""Everything a sweep checks before its first cell trains, also in ``--dry-run``, without starting anything.

:func:`preflight` turns a parsed plan (:func:`.plan.load_plan` already checked its fields, its ``fit:``
and ``ray:`` blocks) into a :class:`Preflight`: the sweep directory can be one, the data files exist and
are counted (and our reward can grade their reference answers), the recipe composes with the plan's overrides
and the first cell's shape (a typo in an override fails here, not in every cell), every cell's config passes the checks the run itself makes before
Ray starts (:func:`verl_isocompute.training.config.check_config`: one function for both, so a dry run
accepts exactly what the cells would), no cell runs the n schedule or per-prompt n (``isocompute fit``
leaves such runs out of a per-n curve, so the sweep would spend its budget on cells it cannot fit), and the
recipe's micro-batch sizes give a per-cell check. The
recipe is composed with verl's config directory found on disk (``importlib.util.find_spec`` does not import
verl): hydra's ``pkg://verl.trainer.config`` would import verl, and with it torch, for a YAML file (verl is
imported only to look up an estimator name that is neither verl's nor ours).
:func:`ray_options` resolves the plan's ``ray:`` block against the recipe for :class:`~.executors.RayJobExecutor`.
:func:`check_run` is the same pre-Ray check for one run of a recipe and overrides outside a sweep (the bench
scripts).
"""

from __future__ import annotations

import copy
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from verl_isocompute.training.adaptive_config import PER_PROMPT, SCHEDULE, per_prompt_on, schedule_on
from verl_isocompute.training.conf import select
from verl_isocompute.workflow.sweep.executors import RayConfig
from verl_isocompute.workflow.sweep.grid import CELL_KEYS, SEED_KEYS, Cell, Plan, PlanError, cell_overrides, micro_batch_issue
from verl_isocompute.workflow.sweep.plan import check_data_files
from verl_isocompute.workflow.sweep.state import CELLS_DIR, SweepError


@dataclass(frozen=True)
class Preflight:
    """A plan that passed every check: the first cell's composed config and a per-cell batch check."""

    cfg: Any  # omegaconf.DictConfig
    dataset_size: int | None
    cell_check: Callable[[Cell], str | None]


def compose(recipe: str, overrides: list[str]):
    """:func:`verl_isocompute.training.config.compose_recipe` with verl's configs read from disk (no import)."""
    from verl_isocompute.training.config import RecipeError, compose_recipe

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return compose_recipe(recipe, overrides)
    searchpath = f"hydra.searchpath=[file://{Path(spec.submodule_search_locations[0]) / 'trainer' / 'config'}]"
    try:
        return compose_recipe(recipe, [*overrides, searchpath])
    except RecipeError as exc:
        raise RecipeError(str(exc).replace(f", {searchpath!r}", "")) from None


def dataset_size(plan: Plan) -> int | None:
    """Training problems in the plan's data files (parquet metadata only), or None for the recipe's data."""
    if not plan.train_files:
        return None
    import pyarrow.parquet as pq

    check_data_files(plan)
    total = 0
    for f in plan.train_files:
        try:
            total += pq.ParquetFile(f).metadata.num_rows
        except Exception as exc:  # pyarrow raises several types for a file that is not parquet
            raise SweepError(f"data file {f} is not a readable parquet file ({exc}); fix data.train_files") from None
    return total


def batch_check(cfg) -> Callable[[Cell], str | None]:
    """The recipe's fixed micro-batch sizes, as a per-cell check (see :func:`.plan.micro_batch_issue`)."""
    get = partial(select, cfg)  # the one dotted-key reader, bound to the recipe
    sizes = {}
    if not get("actor_rollout_ref.actor.use_dynamic_bsz", False):
        sizes["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] = get("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    if not get("actor_rollout_ref.rollout.log_prob_use_dynamic_bsz", False):
        sizes["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] = get("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")
    uses_ref = get("actor_rollout_ref.actor.use_kl_loss", False) or get("algorithm.use_kl_in_reward", False)
    if uses_ref and not get("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", False):
        sizes["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = get("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu")
    world = int(get("trainer.n_gpus_per_node", 1)) * int(get("trainer.nnodes", 1))
    return lambda cell: micro_batch_issue(cell, world, sizes)


def check_sweep_dir(sweep_dir: str | Path) -> None:
    """The sweep directory is a directory, or can be made one (no file in its place or on its path)."""
    path = Path(sweep_dir)
    for where in (path, *path.parents):
        if where.exists():
            if not where.is_dir():
                what = "is a file" if where == path else f"cannot be made: {where} is a file"
                raise SweepError(f"sweep_dir {path} {what}; set sweep_dir in the plan (or --sweep-dir) to a directory")
            return


def preflight(plan: Plan) -> Preflight:
    """Check data, recipe and overrides of ``plan``, and every cell's config with the checks the run makes before
    Ray starts (:func:`verl_isocompute.training.config.check_config`, the same function); raises PlanError /
    SweepError / RecipeError naming the fix."""
    import yaml
    from omegaconf import OmegaConf

    from verl_isocompute.training.config import RecipeError, check_config
    from verl_isocompute.training.prepare import check_reference_answers

    check_sweep_dir(plan.sweep_dir)
    size = dataset_size(plan)
    cells = plan.runnable()
    overrides = {cell: cell_overrides(plan, cell, Path(plan.sweep_dir) / CELLS_DIR / cell.id) for cell in cells}
    cfg = compose(plan.recipe, overrides[cells[0]])
    cell_cfg = copy.deepcopy(cfg)  # one copy, its cell keys set per cell (a merge per cell would copy it each time)
    for cell in cells:
        # the first cell's composed config with this cell's own keys (the plan's overrides never set them)
        for override in overrides[cell]:
            key, value = override.split("=", 1)
            if key in CELL_KEYS or key in SEED_KEYS:
                OmegaConf.update(cell_cfg, key, yaml.safe_load(value), merge=False)
        where = f"cell {cell.id}: " if len(cells) > 1 else ""
        try:
            check_config(cell_cfg)
        except RecipeError as exc:
            raise RecipeError(f"{where}{exc}") from None
        unfittable = [key for key, on in ((SCHEDULE, schedule_on(cell_cfg)), (PER_PROMPT, per_prompt_on(cell_cfg))) if on]
        if unfittable:
            raise PlanError(
                f"{where}{' and '.join(f'{key}.enable=true' for key in unfittable)}: a pilot sweep's cells are fitted "
                "one curve per n, and `isocompute fit` refuses runs whose n varies; drop it from the plan's "
                "overrides (compare such a run with the fitted curve at equal C: benchmarks/bench_adaptive.py)")
    if plan.train_files:  # the plan's own files: our reward must grade their answers (a generated set is checked by the run)
        check_reference_answers(cfg)
    return Preflight(cfg, size, batch_check(cfg))


def check_run(recipe: str, overrides: list[str] | tuple[str, ...]) -> list[str]:
    """Compose ``recipe`` with ``overrides`` (verl's configs read from disk, nothing imported) and make every
    check the run makes before Ray starts (:func:`verl_isocompute.training.config.check_config`, the
    ``isocompute`` block's schema first). Returns the notices to print; raises RecipeError, one line naming
    the key and the fix."""
    from verl_isocompute.training.config import check_config

    return check_config(compose(recipe, list(overrides)))


def ray_options(plan: Plan, cfg, address: str, max_concurrent: int | None = None,
                echo: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr)) -> RayConfig:
    """The plan's ``ray:`` block resolved against the recipe: mode, GPUs per cell, cells at once.

    ``mode: auto`` is ``private`` for single-node recipes and ``join`` for multi-node ones;
    ``num_gpus: null`` reserves the recipe's ``trainer.n_gpus_per_node x trainer.nnodes``.
    """
    nnodes = int(cfg.trainer.get("nnodes", 1) or 1)
    mode = plan.ray.get("mode") or "auto"
    if mode == "auto":
        mode = "private" if nnodes == 1 else "join"
    if mode == "private" and nnodes > 1:
        raise SweepError(f"ray.mode=private runs a cell on one node, but the recipe has trainer.nnodes={nnodes}; use ray.mode: join")
    num_gpus = plan.ray.get("num_gpus")
    if num_gpus is None:
        num_gpus = int(cfg.trainer.n_gpus_per_node) * nnodes
    num_cpus = plan.ray.get("num_cpus")
    env_vars = dict(plan.ray.get("env_vars") or {})
    if mode == "join" and cfg.get("isocompute", {}).get("platform") == "cpu":
        # main sets this in the job's driver; the cluster's workers only see the job's runtime_env
        env_vars.setdefault("VERL_PLATFORM", "cpu")
    options = RayConfig(
        address=address, max_concurrent=max_concurrent or plan.ray["max_concurrent"],
        python=plan.ray.get("python") or RayConfig.python, env_vars=env_vars, mode=mode, num_gpus=num_gpus,
        num_cpus=1 if num_cpus is None else num_cpus,
    )
    if mode == "join" and options.max_concurrent > 1:
        echo("[sweep] ray.mode=join: cells run one at a time (verl's TransferQueue controller is global to a "
             "Ray cluster, so two verl runs cannot share one)")
    return options
