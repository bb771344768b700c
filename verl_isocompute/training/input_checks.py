"""Checks of a run's input that verl would fail on only after Ray has started, or would ignore without a word.

Each takes the composed config (or our typed block) and raises ValueError with one line naming the key, or the
file and row, and the fix; :func:`~verl_isocompute.training.config.check_config` and
:func:`~verl_isocompute.training.prepare.prepare_data` turn it into their RecipeError. They run before Ray in
every entry: our entry point, verl's ``main_ppo`` (the hydra callback), and the sweep's dry run.

- :func:`check_data_settings`: a key of ``isocompute.data`` the chosen source does not read (``task`` with the
  worked chains or the user's files, ``operators`` with reasoning-gym's products);
- :func:`check_seeds`: ``data.seed`` and the rollout's seed within what the samplers take;
- :func:`check_reference_answers`: with our reward, every reference answer of the data files is one it can grade
  (``isocompute.reward.answer=literal`` grades numbers written out, nothing else).
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from verl_isocompute import _compat, verl_keys
from verl_isocompute.training.conf import files, select
from verl_isocompute.training.schema import IsoComputeSettings


def show(value) -> str:
    """A config value as it is written on the command line."""
    if value is None or isinstance(value, bool):
        return str(value).lower().replace("none", "null")
    return f"{value:g}" if isinstance(value, float) else str(value)


# Keys of isocompute.data our recipes write whatever the source (recipes/isocompute_cpu_sizes.yaml, cpu_demo.yaml;
# tests/test_bad_inputs_schema.py keeps this in step): their value says nothing of what the command line meant.
RECIPE_DATA_KEYS = ("source", "train_size", "val_size", "seed", "min_terms", "max_terms", "min_digits", "max_digits")


def check_data_settings(settings: IsoComputeSettings) -> None:
    """A generator setting of ``isocompute.data`` must have an effect in the chosen source: the generated set reads
    the keys of its spec (:class:`~verl_isocompute.data.arithmetic.ArithmeticConfig` for ``arithmetic``,
    :class:`~verl_isocompute.data.worked.WorkedConfig` for ``worked``), ``files`` reads none. Any other key set on
    the command line (``task`` with ``source=worked``, ``terms`` with ``arithmetic``) would be ignored without a
    word: refused, naming the key and the source (keys the recipes write for every source are left alone). The
    arithmetic spec is built too, so that its own rules (``task=products`` takes no ``operators``) refuse here,
    in a dry run as in a run, not when the set is generated."""
    from dataclasses import fields

    from verl_isocompute.data.arithmetic import ArithmeticConfig
    from verl_isocompute.data.worked import WorkedConfig

    data = settings.data
    spec = {"arithmetic": ArithmeticConfig, "worked": WorkedConfig}.get(data.source)
    reads = {f.name for f in fields(spec)} if spec else set()
    unused = [f.name for f in fields(data) if f.name not in RECIPE_DATA_KEYS and f.name not in reads
              and getattr(data, f.name) is not None]
    if unused:
        what = {"arithmetic": "the generated arithmetic set (worked chains take terms and digits)",
                "worked": "the worked chains (terms, digits, sizes and seed)"}.get(
                    data.source, "data.train_files, read as they are (no set is generated)")
        raise ValueError(f"isocompute.data.{unused[0]}={show(getattr(data, unused[0]))} has no effect with "
                         f"isocompute.data.source={data.source}: the problems are {what}; drop it, or choose the source "
                         "that reads it")
    if spec is ArithmeticConfig:
        ArithmeticConfig(**{name: getattr(data, name) for name in reads if getattr(data, name) is not None})


def check_seeds(cfg: DictConfig) -> None:
    """``data.seed`` and ``actor_rollout_ref.rollout.seed`` must be seeds every sampler takes (0 to
    :data:`~verl_isocompute.verl_keys.MAX_SEED`): verl hands them to torch, numpy and vLLM after Ray has started."""
    for key in (verl_keys.DATA_SEED, verl_keys.ROLLOUT_SEED):
        seed = select(cfg, key)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= verl_keys.MAX_SEED):
            raise ValueError(f"{key}={show(seed)}: use a whole number from 0 to {verl_keys.MAX_SEED}, the seeds every "
                             "sampler of the run takes (numpy's range; vLLM seeds numpy with the rollout's seed)")


def check_reference_answers(cfg: DictConfig) -> None:
    """With our reward, every reference answer of the local data files must be one it can grade under
    ``isocompute.reward.answer``, read per row as :func:`verl_isocompute.rules.reward.compute_score` reads it
    (``literal``: a number written out); otherwise the first graded sample would raise in verl's reward worker,
    after the model has loaded."""
    import pyarrow.parquet as pq

    from verl_isocompute.rules import answers, reward

    path = str(select(cfg, "reward.custom_reward_function.path") or "").removeprefix("pkg://")
    if _compat.MOVED.get(path, path) != reward.__name__:  # another reward function grades its own way
        return
    setting = select(cfg, answers.REWARD_KWARG)
    if setting == answers.EQUIVALENT:  # math-verify grades any reference
        return
    for key in ("data.train_files", "data.val_files"):
        for f in files(cfg, key):
            if "://" in f:
                continue
            try:
                table = pq.read_table(os.path.expanduser(f), columns=["data_source", "reward_model"])
                truths = table.column("reward_model").combine_chunks().field("ground_truth").to_pylist()
            except Exception:  # noqa: BLE001 - not verl's format: verl's dataset names the problem when it loads it
                continue
            for i, (source, truth) in enumerate(zip(table.column("data_source").to_pylist(), truths)):
                if answers.answer_mode(setting, source) == answers.LITERAL:  # what compute_score would raise on
                    answers.literal_reference(reward.reference_answer(truth), f"{key} {f}, row {i}: the reference answer")
