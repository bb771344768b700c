"""The ``isocompute.schedule`` and ``isocompute.per_prompt_n`` blocks: checked against the rest of the config, and
built into :class:`AdaptiveN` (which reads the per-prompt block as the schema types it: one type per block).

Both are off by default (the recipes' ``isocompute`` block; the pieces ``+isocompute=[schedule]`` and
``+isocompute=[per_prompt_n]`` turn them on in any verl config). Their keys, types, ranges and help
(docs/SCALING.md, "Beyond one n") are the schema's (:class:`~verl_isocompute.training.schema.ScheduleSettings`,
:class:`~verl_isocompute.training.schema.PerPromptSettings`), read through it here, so ``enable=off`` is off.
B_problem is ``data.train_batch_size``; the LR rule is the recipe's (``isocompute.lr``, or the allocation's
settings when it is enabled); a null curve, budget or token length is the allocation block's.

What the trainer cannot honour is refused here with one line (:func:`check_adaptive`): another trainer
(these blocks would be ignored), several mini-batches or epochs per step (verl sizes a mini-batch as
``ppo_mini_batch_size * rollout.n`` rows and would split a step whose groups differ in size), an lr set by
hand under the schedule (it sets the lr each step), bounds that no step budget can meet, a budget that pays
for more than :data:`~verl_isocompute.scaling.allocation.MAX_STEPS` steps even at the grid's largest n (the
allocation's and the sweep's bound: a slip in the budget's exponent, not a plan).
"""

from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig

from verl_isocompute import verl_keys
from verl_isocompute.errors import IsoComputeError
from verl_isocompute.training import schema
from verl_isocompute.scaling.adaptive import AdaptiveN
from verl_isocompute.training.conf import select
from verl_isocompute.rules.names import DECOUPLED_ESTIMATOR, TRAINER

SCHEDULE, PER_PROMPT = "isocompute.schedule", "isocompute.per_prompt_n"


class AdaptiveError(IsoComputeError, ValueError):
    """A schedule or per-prompt-n setting the run cannot honour; the message names the key and the fix."""


def _blocks(cfg: DictConfig) -> tuple[schema.ScheduleSettings | None, schema.PerPromptSettings | None]:
    """The schedule and per-prompt n blocks, typed and checked by the schema; None for one that is off."""
    settings = schema.check_settings(cfg)
    return (settings.schedule if settings.schedule.enable else None,
            settings.per_prompt_n if settings.per_prompt_n.enable else None)


def schedule_on(cfg: DictConfig) -> bool:
    return _blocks(cfg)[0] is not None


def per_prompt_on(cfg: DictConfig) -> bool:
    return _blocks(cfg)[1] is not None


def check_adaptive(cfg: DictConfig, lr_from_rule: Callable[[DictConfig], bool]) -> None:
    """Refuse, with one line, a schedule / per-prompt n setting the isocompute trainer cannot honour.

    ``lr_from_rule``: :func:`verl_isocompute.training.config.lr_from_rule` (whether ``optim.lr`` is the rule's),
    passed in because that module calls this one.
    """
    schedule, per_prompt = _blocks(cfg)
    on = [path for path, block in ((SCHEDULE, schedule), (PER_PROMPT, per_prompt)) if block is not None]
    if not on:
        return
    named = " and ".join(f"{p}.enable=true" for p in on)
    if select(cfg, "trainer.v1.trainer_mode") != TRAINER:
        pieces = ",".join(["lr_rule", "run_log", *(p.rsplit(".", 1)[1] for p in on)])
        raise AdaptiveError(f"{named} is applied by the isocompute trainer only: select it with the run_log piece, "
                            f"`+isocompute=[{pieces}]` (trainer.v1.trainer_mode={TRAINER}), or drop it")
    actor, b_problem = cfg.actor_rollout_ref.actor, int(select(cfg, verl_keys.B_PROBLEM))
    if int(actor.ppo_mini_batch_size) != b_problem or int(actor.ppo_epochs) != 1:
        raise AdaptiveError(
            f"{named} needs one mini-batch and one epoch per step (verl sizes a mini-batch as ppo_mini_batch_size x "
            f"rollout.n rows): set actor_rollout_ref.actor.ppo_mini_batch_size={b_problem} (= data.train_batch_size) "
            f"and ppo_epochs=1 (got {actor.ppo_mini_batch_size} and {actor.ppo_epochs})")
    adaptive = build_adaptive(cfg)  # the rules' own checks (curve, grid, budget, bounds), as one line each
    if schedule is not None and not lr_from_rule(cfg):
        raise AdaptiveError(f"{SCHEDULE}.enable=true sets the lr of each step from isocompute.lr, but "
                            "actor_rollout_ref.actor.optim.lr (or lr_warmup_steps) was set by hand: drop it, or "
                            "set isocompute.lr.base_lr / warmup_steps instead")
    if per_prompt is not None:
        grid = adaptive.schedule.grid if adaptive.schedule is not None else (adaptive.n,)
        lo, _ = adaptive.bounds(min(grid))
        hi = adaptive.per_prompt.n_max
        if lo > min(grid) or (hi is not None and hi < max(grid)):
            raise AdaptiveError(f"{PER_PROMPT}: n_min {lo} and n_max {'null' if hi is None else hi} must bracket every step's n {sorted(set(grid))} "
                                "(a step's budget is b_problem x n): lower n_min or raise n_max")


def _n_train(cfg: DictConfig) -> int | None:
    if select(cfg, "algorithm.adv_estimator") != DECOUPLED_ESTIMATOR:
        return None
    n_train = select(cfg, "isocompute.decoupled.n_train")
    return None if n_train is None else int(n_train)


def build_adaptive(cfg: DictConfig) -> AdaptiveN | None:
    """The run's :class:`AdaptiveN`, or None when both blocks are off. Raises :class:`AdaptiveError`."""
    from verl_isocompute.scaling.allocation import MAX_STEPS
    from verl_isocompute.scaling.curve import CurveError, load_curve
    from verl_isocompute.scaling.schedule import NSchedule, ScheduleError
    from verl_isocompute.training.allocation_hook import decide

    schedule_block, per_prompt_block = _blocks(cfg)
    if schedule_block is None and per_prompt_block is None:
        return None
    b_problem, n, n_train = int(select(cfg, verl_keys.B_PROBLEM)), int(select(cfg, verl_keys.N)), _n_train(cfg)
    schedule = None
    if schedule_block is not None:
        allocation = schema.check_settings(cfg).allocation  # null in the schedule block: the allocation's
        curve = allocation.curve if schedule_block.curve is None else schedule_block.curve
        budget = allocation.budget_rollouts if schedule_block.budget_rollouts is None else schedule_block.budget_rollouts
        tokens = (allocation.mean_response_tokens if schedule_block.mean_response_tokens is None
                  else schedule_block.mean_response_tokens)
        if curve is None or budget is None:
            raise AdaptiveError(f"{SCHEDULE}.enable=true needs a curve and a budget: set {SCHEDULE}.curve (a curve.json or "
                                f"paper:<preset>) and {SCHEDULE}.budget_rollouts, or enable isocompute.allocation with them")
        decision = decide(cfg).lr
        try:
            schedule = NSchedule(
                load_curve(curve), b_problem, budget, n_grid=schedule_block.n_grid,
                margin=schedule_block.margin, mean_response_tokens=tokens, base_lr=decision.base_lr,
                b_ref=decision.b_ref, lr_rule="constant" if decision.rule == "null" else decision.rule,
                warmup_steps=decision.warmup_steps, n_train=n_train)
        except (CurveError, ScheduleError) as exc:
            raise AdaptiveError(f"{SCHEDULE}: {exc}") from None
        largest = b_problem * schedule.grid[-1]
        if schedule.budget_rollouts // largest > MAX_STEPS:
            raise AdaptiveError(
                f"{SCHEDULE}: a budget of {schedule.budget_rollouts:.3g} rollouts pays for at least "
                f"{schedule.budget_rollouts // largest:.3g} steps of {largest:,} rollouts (b_problem {b_problem} x the "
                f"grid's largest n {schedule.grid[-1]}), more than {MAX_STEPS:,}: check the budget (its exponent; "
                "rollouts, not tokens?)")
    if per_prompt_block is not None:  # the block itself is the per-prompt settings AdaptiveN reads
        n_min, n_max = per_prompt_block.n_min, per_prompt_block.n_max
        if n_max is not None and n_max < n_min:
            raise AdaptiveError(f"{PER_PROMPT}: need integers 2 <= n_min <= n_max (a group of 1 has no baseline; n_max "
                                f"null: 4 x the step's n), got n_min={n_min!r}, n_max={n_max!r}")
        if n_train is not None and n_min < n_train:
            raise AdaptiveError(f"{PER_PROMPT}.n_min={n_min} is below isocompute.decoupled.n_train={n_train}: the decoupled "
                                f"baseline trains on n_train rollouts of every group; set n_min >= {n_train}")
    return AdaptiveN(n, b_problem, schedule, per_prompt_block)


def header(adaptive: AdaptiveN | None) -> dict[str, Any]:
    """What the run log's header records of the two features (nothing when both are off)."""
    if adaptive is None:
        return {}
    out: dict[str, Any] = {}
    if adaptive.schedule is not None:
        out["schedule"] = adaptive.schedule.header()
    if adaptive.per_prompt is not None:
        settings = adaptive.per_prompt
        out["per_prompt_n"] = {"n_min": settings.n_min, "n_max": settings.n_max,
                               "curation_weight": float(settings.curation_weight)}
    return out
