"""The ``isocompute:`` config block, typed: every key, its type, its range, and one check before Ray starts.

verl validates its own config through typed dataclasses; this module does the same for ours. The block is a
tree of frozen dataclasses, :class:`IsoComputeSettings` at the root, one class per sub-block (the allocation's
is :class:`~verl_isocompute.scaling.allocation.AllocationConfig`, the guided one extends
:class:`~verl_isocompute.training.guided_mixture.GuideConfig`: each block is declared once, where its rule lives).
Each field is declared with :func:`verl_isocompute.settings.setting`: its default, its help text and its limits
(``minimum`` / ``maximum``, ``above`` / ``below`` exclusive, ``choices``). Adding a key is one such line in its
block (a new block: its class, and one ``_block(...)`` line in :class:`IsoComputeSettings`); the check, the
typed settings and the tests' tables (tests/test_settings_schema.py) follow from it.

:func:`check_settings` resolves the block of a composed config and reads it against the tree:

- a boolean is a bool, or what YAML reads as one (``off``, ``'false'``, ``no``, ``0``: False); never the
  string's Python truth, by which ``enable=off`` would turn a feature on (:func:`verl_isocompute.numeric.yaml_bool`);
- a number is finite and within its limits (``1e6`` written without a dot, a string to YAML 1.1, is read as
  the number); a whole number where a count is expected; a list where a list is expected (``n_grid=8`` is
  refused, not iterated);
- an unknown key is refused naming the nearest known one (difflib), so a typo is not silently ignored;
- a value left ``???`` (a piece's mandatory key) reads as unset, for the check that needs it to name it.

Each failure is one :class:`SettingsError` line naming the key and the fix. Rules that need more than the
block (a budget against B_problem, ``n_train`` against ``rollout.n``, the estimator, the platform against the
rollout) are made by :func:`verl_isocompute.training.config.check_config`, which calls this check first: our
entry point, verl's ``main_ppo`` (the hydra callback of :mod:`verl_isocompute.training.preflight`),
``isocompute sweep`` (every cell, ``--dry-run`` too) and the bench scripts
(:func:`verl_isocompute.workflow.sweep.preflight.check_run`) all pass through it. The code that uses the block
reads it typed from here (the schedule and per-prompt n, the allocation, the generated set); a switch read on
its own (a resolver, a hook) goes through :func:`verl_isocompute.training.conf.flag`, the same YAML reading.
"""

from __future__ import annotations

import dataclasses
from typing import Any, get_type_hints

from omegaconf import DictConfig, OmegaConf

from verl_isocompute.cpu.dtype import DTYPE_CHOICES
from verl_isocompute.cpu.models import MODEL_NAMES
from verl_isocompute.data.arithmetic import PROMPT_STYLES, TASKS
from verl_isocompute.training.guided_mixture import GuideConfig
from verl_isocompute.scaling.allocation import AllocationConfig
from verl_isocompute.settings import SettingsError, check_mapping, setting
from verl_isocompute.rules.answers import ANSWER_SETTINGS, AUTO
from verl_isocompute.rules.lr import B_REF, BASE_LR, RULES, WARMUP_STEPS
from verl_isocompute.rules.names import DATA_SOURCES, OFF, PLATFORM_NAME, ZERO_VARIANCE_MODES

ROOT = "isocompute"
_NEEDS_HELP = "set by the piece to ${isocompute.needs_trainer:...}: an error, not a silent no-op, without our trainer"


def _needs() -> Any:
    return setting(None, _NEEDS_HELP)


@dataclasses.dataclass(frozen=True)
class LrSettings:
    """``isocompute.lr``: the sqrt batch-size LR rule (rules/lr.py), the recipes' and the allocation's."""

    rule: str | None = setting("sqrt", "lr = base_lr * sqrt(B / b_ref) (sqrt), constant or linear in B; null: base_lr "
                                       "at any batch", choices=RULES)
    base_lr: float = setting(BASE_LR, "the learning rate at b_ref rollouts per step (the paper's best at 1024)", above=0)
    b_ref: float = setting(B_REF, "the rollouts per step base_lr was tuned at", above=0)
    warmup_steps: int = setting(WARMUP_STEPS, "W: update k runs at lr * min(1, k / W)", minimum=0)


@dataclasses.dataclass(frozen=True)
class DataSettings:
    """``isocompute.data``: where the problems come from; the sizes of a generated set (null: its generator's)."""

    source: str | None = setting("files", "files: data.train_files / data.val_files; arithmetic: a generated "
                                          "reasoning-gym set; worked: arithmetic chains with worked solutions (guided)",
                                 choices=("files", *DATA_SOURCES))
    train_size: int | None = setting(None, "training problems of a generated set", minimum=1)
    val_size: int | None = setting(None, "validation problems of a generated set", minimum=1)
    seed: int | None = setting(None, "seed of a generated set", minimum=0)
    min_terms: int | None = setting(None, "arithmetic: fewest numbers per problem", minimum=2)
    max_terms: int | None = setting(None, "arithmetic: most numbers per problem", minimum=2)
    min_digits: int | None = setting(None, "arithmetic: fewest digits per number", minimum=1)
    max_digits: int | None = setting(None, "arithmetic: most digits per number", minimum=1)
    operators: str | None = setting(None, "arithmetic: the operators drawn, some of + - * /")
    allow_parentheses: bool | None = setting(None, "arithmetic: signed, bracketed operands (reasoning-gym's switch)")
    prompt: str | None = setting(None, "arithmetic: the prompt style", choices=PROMPT_STYLES)
    task: str | None = setting(None, "arithmetic: sums and differences or products (reasoning-gym's), or "
                                        "our two_digit_sums / two_digit_products, no two problems sharing a fact",
                               choices=TASKS)
    distinct_facts: bool | None = setting(None, "arithmetic: at most one problem per answer-determining fact "
                                                "(reorderings, x1 / +0 variants and the same multiset share one; "
                                                "data/facts.py)")
    terms: int | None = setting(None, "worked: numbers per chain", minimum=2)
    digits: int | None = setting(None, "worked: digits per number", minimum=1)


@dataclasses.dataclass(frozen=True)
class GuidedSettings(GuideConfig):
    """``isocompute.guided``: oracle-prefix guidance (docs/GUIDED.md); how rows are made is :class:`GuideConfig`."""

    enable: bool = setting(False, "true: data.train_files become the originals plus guided copies")
    spend: str | tuple[str, ...] | None = setting((), "spend.json files (or their dirs): C with guidance / curation "
                                                      "in the run log (training problems only)")


@dataclasses.dataclass(frozen=True)
class ZeroVarianceSettings:
    """``isocompute.zero_variance``: what happens to groups whose rewards do not vary (training/regularizers.py)."""

    mode: str = setting(OFF, "off: verl's loss; groups: such groups leave every loss term; regularizers: only "
                             "KL and entropy leave them", choices=ZERO_VARIANCE_MODES)
    needs: str | None = _needs()


@dataclasses.dataclass(frozen=True)
class DecoupledSettings:
    """``isocompute.decoupled``: the decoupled baseline (arXiv 2603.12151 appendix C)."""

    n_train: int | None = setting(None, "rollouts trained on per problem, 1 <= n_train <= rollout.n (the baseline "
                                        "uses all n)", minimum=1)
    needs: str | None = _needs()


@dataclasses.dataclass(frozen=True)
class ScheduleSettings:
    """``isocompute.schedule``: the anytime n schedule (docs/SCALING.md#beyond-one-n, scaling/schedule.py)."""

    enable: bool = setting(False, "true: before each step n = n*(c) on the grid for the c rollouts spent, lr by "
                                  "the LR rule")
    curve: str | None = setting(None, "curve.json or paper:<preset>; null: isocompute.allocation.curve")
    budget_rollouts: float | None = setting(None, "the run ends when this pays for no further step; null: the "
                                                  "allocation's", above=0)
    n_grid: tuple[int, ...] | None = setting(None, "the n allowed, powers of two; null: the n the curve was fitted on",
                                             minimum=2)
    margin: float = setting(0.1, "hysteresis: n moves once log2 n*(c) is this far past a midpoint", minimum=0,
                            below=0.5)
    mean_response_tokens: float | None = setting(None, "tokens per rollout, for a curve fitted on tokens; null: "
                                                       "the allocation's", above=0)
    needs: str | None = _needs()


@dataclasses.dataclass(frozen=True)
class PerPromptSettings:
    """``isocompute.per_prompt_n``: per-prompt n under the step's budget (Knapsack RL, arXiv 2509.25849).

    The block's one type: the trainer's run-time split (:class:`verl_isocompute.scaling.adaptive.AdaptiveN`) reads
    these settings as they are, and bounds each step's n_i by them
    (:meth:`~verl_isocompute.scaling.adaptive.AdaptiveN.bounds`).
    """

    enable: bool = setting(False, "true: B_problem x n rollouts split across the step's prompts by pass rate")
    n_min: int = setting(2, "fewest rollouts of a prompt (a group of 1 has no baseline)", minimum=2)
    n_max: int | None = setting(None, "most rollouts of a prompt; null: 4 x the step's n", minimum=2)
    curation_weight: float = setting(1.0, "curation's avg@k counts as weight x k samples of a prompt's prior",
                                     minimum=0)
    needs: str | None = _needs()


@dataclasses.dataclass(frozen=True)
class RewardSettings:
    """``isocompute.reward``: how the reward grades a final answer (rules/answers.py, README "The reward")."""

    answer: str = setting(AUTO, "literal: only the value written as a number pays (an echoed expression scores 0); "
                                "equivalent: math-verify's symbolic check; auto: literal on our generated sources, "
                                "equivalent elsewhere", choices=ANSWER_SETTINGS)


@dataclasses.dataclass(frozen=True)
class CpuSettings:
    """``isocompute.cpu``: the CPU platform's settings (recipes/platform/cpu.yaml)."""

    dtype: str = setting("auto", "the three models' dtype; auto: bf16 only where the CPU has native bf16",
                         choices=DTYPE_CHOICES)


def _block(cls: type) -> Any:
    """A sub-block field: its defaults are the class's, its help the first line of the class's docstring."""
    return setting(default_factory=cls, help=(cls.__doc__ or "").split("\n", 1)[0])


@dataclasses.dataclass(frozen=True)
class IsoComputeSettings:
    """The whole ``isocompute:`` block (recipes/isocompute_base.yaml, recipes/isocompute/*.yaml)."""

    recipe: str | None = setting(None, "the recipe's name, recorded in the run log header")
    platform: str | None = setting("auto", "auto: verl detects the accelerator; cpu: our CPU backend",
                                   choices=("auto", PLATFORM_NAME))
    model: str | None = setting(None, "a built-in model (smollm2 | tiny); null: actor_rollout_ref.model.path",
                                choices=MODEL_NAMES)
    run_dir: str | None = setting(None, "the run log, verl's metrics and checkpoints go here")
    pass_rate_bins: int = setting(10, "bins of the per-epoch training pass-rate histogram", minimum=1)
    reuse_rollout_log_probs: bool = setting(False, "skip verl's old-log-prob pass (fully on-policy recipes only; "
                                                   "training/on_policy.py)")
    data: DataSettings = _block(DataSettings)
    guided: GuidedSettings = _block(GuidedSettings)
    zero_variance: ZeroVarianceSettings = _block(ZeroVarianceSettings)
    decoupled: DecoupledSettings = _block(DecoupledSettings)
    lr: LrSettings = _block(LrSettings)
    allocation: AllocationConfig = _block(AllocationConfig)
    schedule: ScheduleSettings = _block(ScheduleSettings)
    per_prompt_n: PerPromptSettings = _block(PerPromptSettings)
    cpu: CpuSettings = _block(CpuSettings)
    reward: RewardSettings = _block(RewardSettings)


def leaves(cls: type = IsoComputeSettings, path: str = ROOT) -> list[tuple[str, dataclasses.Field, Any]]:
    """Every key of the tree below ``cls``: (dotted key, its field, its type), blocks recursed into."""
    hints = get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        key, tp = f"{path}.{f.name}", hints[f.name]
        out.extend(leaves(tp, key) if dataclasses.is_dataclass(tp) else [(key, f, tp)])
    return out


def check_settings(cfg: DictConfig) -> IsoComputeSettings:
    """The ``isocompute`` block of ``cfg`` (composed or resolved), resolved and checked against the schema.

    Raises :class:`SettingsError` (one line, naming the key and the fix); a resolver's error in the block
    (a piece that needs our trainer) propagates as OmegaConf's InterpolationResolutionError.
    """
    node = OmegaConf.select(cfg, ROOT)
    if node is None:
        return IsoComputeSettings()
    if not OmegaConf.is_dict(node):
        raise SettingsError(f"{ROOT} must be a mapping of our settings (recipes/isocompute_base.yaml), got {node!r}")
    return check_block(OmegaConf.to_container(node, resolve=True))


def check_block(block: dict[str, Any], cls: type = IsoComputeSettings, path: str = ROOT) -> Any:
    """A plain (resolved) mapping as the settings class ``cls`` (default: the whole block), as
    :func:`verl_isocompute.settings.check_mapping` reads it: the check of :func:`check_settings`."""
    return check_mapping(block, cls, path)
