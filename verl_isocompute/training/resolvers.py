"""OmegaConf resolvers: the recipe's derived settings, computed where verl's config system reads them.

The recipes write verl's keys as interpolations, e.g. ``actor_rollout_ref.actor.optim.lr:
${isocompute.lr:lr}`` and ``actor_rollout_ref.rollout.n: ${isocompute.allocation:n,16}``. Each resolver
reads our ``isocompute:`` block (and verl's batch keys) through ``_root_`` and returns a plain value, so
that

- ``python -m verl.trainer.main_ppo`` and ``python -m verl_isocompute.main`` resolve a recipe to the same
  config (both load this module: verl through our ``verl.plugins`` entry point, :mod:`verl_isocompute.plugin`,
  before hydra composes anything; ours through :mod:`verl_isocompute.training.config`);
- a value given on the command line simply replaces the interpolation, as any verl setting;
- verl's own config validation sees plain numbers.

What they compute (each rule lives in one place; these functions only read the config and call it):

- ``isocompute.lr:lr|warmup_steps`` and ``isocompute.allocation:KEY,DEFAULT[,OUTSIDE]`` read the config's one
  decision, :func:`verl_isocompute.training.allocation_hook.decide` (made once per launch): the sqrt batch-size
  LR rule of the IsoCompute playbook (arXiv 2603.12151), lr = base_lr * sqrt(B / b_ref) with B =
  data.train_batch_size * rollout.n (n_train under the decoupled baseline), or under an enabled allocation its
  lr; and the allocation's n, B_problem, steps or epochs, or DEFAULT when it is off (OUTSIDE instead in a config
  that is not one of our recipes: :func:`~verl_isocompute.training.allocation_hook.allocated_value`). A key the
  allocation decides but the config sets to another plain value (e.g. ``rollout.n=8`` on the command line with
  the allocation on) is an error naming both values, also when the lr is the only key that reads the decision.
- ``isocompute.abspath:PATH``: PATH made absolute against the directory the run was started from (the
  driver's, recorded at plugin import in ``ISOCOMPUTE_LAUNCH_DIR``: verl resolves the config again in its
  TaskRunner, a Ray process whose working directory may differ).
- ``isocompute.model_path:``, ``isocompute.data_file:train|val``: the built-in model
  (``isocompute.model``) and the generated problem set (``isocompute.data.source=arithmetic``, or ``worked``:
  arithmetic chains with a worked solution per problem, for guided recipes).
- ``isocompute.when_guided:A,B``: A, or B when ``isocompute.guided.enable`` is true (the CPU overlay's prompt
  length and generated set: a guided recipe's prompts are longer and need solutions).
- ``isocompute.device:``: ``cpu`` when the CPU platform is requested; stops the run with one line if
  ``VERL_PLATFORM=cpu`` is missing (verl picks its platform when it is imported, before any config exists).
  Under our entry point, which sets it before a run (:data:`ENTRY_SETS_PLATFORM`), it sets it here too, so
  that ``--cfg job --resolve`` prints the config.
- ``isocompute.on_cpu:DEFAULT,CPU_VALUE``: CPU_VALUE on the CPU platform (``isocompute.platform=cpu``), else
  DEFAULT: the recipes' sizes for each platform (``recipes/isocompute_cpu_sizes.yaml``, the allocated ones in
  ``recipes/isocompute/allocation.yaml``), so that
  ``+platform=cpu`` itself changes only what the CPU needs and keeps a user's own sizes.
- ``isocompute.needs_trainer:VALUE``: VALUE, if our trainer is selected; for the settings only our trainer
  reads (the zero-variance filter, the decoupled baseline, the n schedule, per-prompt n), which would otherwise
  be silently ignored.

Only omegaconf at import: this module is loaded in every verl process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl_isocompute import _compat
from verl_isocompute.rules.names import DATA_SOURCES, PLATFORM_NAME
from verl_isocompute.training.conf import flag, select

LAUNCH_DIR_ENV = "ISOCOMPUTE_LAUNCH_DIR"
# True in ``python -m verl_isocompute.main``, which sets VERL_PLATFORM itself for the CPU platform (verl's main_ppo
# cannot: it has imported verl before it reads the config).
ENTRY_SETS_PLATFORM = False
# The allocation's reading of a config moved to the one decision (issue 42); the old names work until 0.3.
__getattr__ = _compat.moved_names(
    __name__, dict.fromkeys(("dataset_size", "check_allocation_keys", "ALLOCATION_KEYS", "OPTIM"),
                            "verl_isocompute.training.allocation_hook"),
    replaced={"allocation": ("verl_isocompute.training.allocation_hook.decide(cfg).allocation",
                             lambda cfg: _decide(cfg).allocation),
              "lr_decision": ("verl_isocompute.training.allocation_hook.decide(cfg).lr", lambda cfg: _decide(cfg).lr),
              "allocation_enabled": ("verl_isocompute.training.conf.flag(cfg, 'isocompute.allocation.enable')",
                                     lambda cfg: flag(cfg, "isocompute.allocation.enable"))},
)


def _decide(cfg: DictConfig):
    from verl_isocompute.training.allocation_hook import decide

    return decide(cfg)


def _lr(key: str, _root_: DictConfig) -> Any:
    if key not in ("lr", "warmup_steps"):
        raise ValueError(f"${{isocompute.lr:{key}}}: use lr or warmup_steps")
    decided = _decide(_root_)
    if decided.allocation is not None:
        # The allocation's lr belongs with its n and B: with every sized key set to a plain value on the command line
        # no other resolver runs, and the allocation's lr would silently join the user's sizes.
        from verl_isocompute.training.allocation_hook import check_allocation_keys

        check_allocation_keys(_root_, decided.allocation)
    return decided.lr.lr if key == "lr" else decided.lr.warmup_steps


_NOT_GIVEN = object()


def _allocation(key: str, default: Any = _NOT_GIVEN, outside: Any = _NOT_GIVEN, *, _root_: DictConfig) -> Any:
    from verl_isocompute.training.allocation_hook import allocated_value

    given = {name: value for name, value in (("default", default), ("outside", outside)) if value is not _NOT_GIVEN}
    return allocated_value(key, _root_, **given)


def launch_dir() -> Path:
    return Path(os.environ.get(LAUNCH_DIR_ENV) or os.getcwd())


def _abspath(path: str) -> str:
    return str(launch_dir() / os.path.expanduser(str(path)))


def _model_path(_root_: DictConfig) -> str:
    name = select(_root_, "isocompute.model")
    if not name:
        raise ValueError(
            "actor_rollout_ref.model.path is not set: pass actor_rollout_ref.model.path=PATH (a local transformers "
            "checkpoint) or isocompute.model=smollm2|tiny (a built-in model)"
        )
    from verl_isocompute.cpu.models import ensure_model

    return str(ensure_model(str(name)))


def _data_file(split: str, _root_: DictConfig) -> str:
    source = select(_root_, "isocompute.data.source")
    if source not in DATA_SOURCES:
        raise ValueError(
            f"data.{split}_files is not set: pass data.{split}_files=PATH (parquet in verl's format), "
            "or isocompute.data.source=arithmetic (the generated demo set) or worked (arithmetic with worked solutions, "
            "for guided recipes)"
        )
    from dataclasses import fields

    from verl_isocompute.cpu.models import cache_dir
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset
    from verl_isocompute.data.worked import WorkedConfig, write_worked_dataset

    spec_cls, write = (ArithmeticConfig, write_arithmetic_dataset) if source == "arithmetic" else (WorkedConfig, write_worked_dataset)
    from verl_isocompute.training.schema import DataSettings, check_block

    # typed by the schema (allow_parentheses=off is False); unset keys: the generator's, the other source's: ignored
    block = check_block(OmegaConf.to_container(_root_.isocompute.data, resolve=True), DataSettings, "isocompute.data")
    spec = spec_cls(**{f.name: getattr(block, f.name) for f in fields(spec_cls) if getattr(block, f.name) is not None})
    train, val = write(cache_dir() / "data" / spec.name, spec)
    return str(train if split == "train" else val)


def _when_guided(unguided: Any, guided: Any, *, _root_: DictConfig) -> Any:
    """``unguided`` or, when ``isocompute.guided.enable`` is true, ``guided``: for an overlay whose sizes suit its
    own data (the CPU overlay's prompt length and generated set) but not a guided recipe's longer prompts."""
    return guided if flag(_root_, "isocompute.guided.enable") else unguided


def _device(_root_: DictConfig) -> str:
    if ENTRY_SETS_PLATFORM and not os.environ.get("VERL_PLATFORM", "").strip():
        os.environ["VERL_PLATFORM"] = PLATFORM_NAME  # as prepare_platform does before a run
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != PLATFORM_NAME:
        print(
            "isocompute: error: isocompute.platform=cpu needs VERL_PLATFORM=cpu in the environment before verl is "
            "imported (verl picks its platform at import, before any config is read): run "
            "`VERL_PLATFORM=cpu python -m verl.trainer.main_ppo ...`, or `python -m verl_isocompute.main ...`, which sets it",
            file=sys.stderr, flush=True,
        )
        sys.exit(1)
    return PLATFORM_NAME


def _on_cpu(default: Any, cpu_value: Any, *, _root_: DictConfig) -> Any:
    value = cpu_value if select(_root_, "isocompute.platform") == PLATFORM_NAME else default
    return OmegaConf.create(value) if isinstance(value, (list, dict)) else value  # a node, as a list in YAML is


def _cpu_dtype(_root_: DictConfig) -> str:
    """``isocompute.cpu.dtype`` (auto | float32 | bfloat16) as the dtype of the CPU run's three models:
    auto is bf16 only where the CPU has native bf16 (:mod:`verl_isocompute.cpu.dtype`)."""
    from verl_isocompute.cpu.dtype import DTYPE_KEY, choose_dtype, cpu_flags

    # the capability only words the reason; the flags decide (and reading them needs no torch)
    return choose_dtype(select(_root_, DTYPE_KEY) or "auto", "", cpu_flags()).dtype


# Why each setting that names ``isocompute.needs_trainer`` (its block's ``needs`` key) is our trainer's alone.
NEEDS_TRAINER_WHY = {
    "isocompute.zero_variance": "it masks groups in the trainer's update",
    "isocompute.decoupled": "it masks the rollouts not trained on in the trainer's update",
    "isocompute.schedule": "the trainer sets each step's n and lr",
    "isocompute.per_prompt_n": "the trainer gives each prompt its own n",
}


def _needs_trainer(value: Any, _root_: DictConfig) -> Any:
    from verl_isocompute.rules.names import TRAINER

    if select(_root_, "trainer.v1.trainer_mode") != TRAINER:
        why = NEEDS_TRAINER_WHY.get(str(value), "verl's own trainer would ignore it")
        piece = str(value).rsplit(".", 1)[-1]
        raise ValueError(
            f"{value} is applied by the isocompute trainer only ({why}): select it with the run_log piece, "
            f"`+isocompute=[lr_rule,run_log,{piece}]` (trainer.v1.trainer_mode={TRAINER}), or drop the setting"
        )
    return value


RESOLVERS = {
    "isocompute.lr": _lr,
    "isocompute.allocation": _allocation,
    "isocompute.abspath": _abspath,
    "isocompute.model_path": _model_path,
    "isocompute.data_file": _data_file,
    "isocompute.when_guided": _when_guided,
    "isocompute.device": _device,
    "isocompute.cpu_dtype": _cpu_dtype,
    "isocompute.on_cpu": _on_cpu,
    "isocompute.needs_trainer": _needs_trainer,
}


def register() -> None:
    """Register our resolvers with OmegaConf (idempotent), and record the launch directory for
    ``isocompute.abspath`` (kept from the first process, the driver: verl's Ray processes inherit it)."""
    os.environ.setdefault(LAUNCH_DIR_ENV, os.getcwd())
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            # not cached: a command-line value or a changed block must be read afresh on every resolution
            OmegaConf.register_new_resolver(name, function)
