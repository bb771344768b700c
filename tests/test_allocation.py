"""The allocation rule (budget -> n, b_problem, steps, lr), its verl hook and `isocompute allocate`."""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import re
import subprocess
import sys
from dataclasses import asdict, fields
from importlib import resources
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from verl_isocompute.scaling.allocation import (
    DEFAULT_N_GRID,
    MAX_STEPS,
    AllocationConfig,
    AllocationError,
    allocate,
)
from verl_isocompute.scaling.curve import CurveError, load_curve
from verl_isocompute.training.allocation_hook import (
    apply_allocation,
    explicit_keys_from_overrides,
    format_decision,
    overrides,
    verl_values,
)

EASY = load_curve("paper:qwen2.5-7b-easy")
HARD = load_curve("paper:qwen2.5-7b-hard")
EASY_TOKENS = load_curve("paper:qwen2.5-7b-easy-tokens")
# verl's own config folder, found without importing verl (which pulls in torch).
VERL_CONFIG_DIR = str(Path(importlib.util.find_spec("verl").submodule_search_locations[0]) / "trainer" / "config")


# --- the paper's numbers (fixed B_problem = 32 presets, PLAYBOOK section 4) ---------------------------

def test_easy_preset_at_one_million_rollouts():
    a = allocate("paper:qwen2.5-7b-easy", 1e6)
    assert (a.n, a.b_problem, a.steps) == (128, 32, 244)
    assert a.lr == pytest.approx(2e-6)
    assert a.warmup_steps == 10
    assert a.n_star == pytest.approx(118, abs=1)
    assert a.rollouts_used == 244 * 32 * 128 <= a.budget_rollouts == 1_000_000
    assert a.epochs is None and a.reasons == () and a.curve == "paper:qwen2.5-7b-easy"


def test_easy_preset_at_two_million_and_hard_preset_at_one_million():
    assert allocate(EASY, 2e6).n == 256
    assert allocate(HARD, 1e6).n == 64


def test_epochs_follow_the_dataset_size():
    a = allocate(EASY, 1e6, dataset_size=6000)
    assert a.epochs == pytest.approx(244 * 32 / 6000)


# --- constraints ------------------------------------------------------------------------------------

def test_b_max_below_b_problem_times_n_lowers_n_when_b_problem_is_at_its_floor():
    a = allocate(EASY, 2e6, b_max=4096)
    assert (a.n, a.b_problem) == (128, 32)
    assert a.steps == 2_000_000 // 4096
    assert len(a.reasons) == 1 and "n lowered from 256 to 128" in a.reasons[0] and "b_max 4096" in a.reasons[0]


def test_b_max_lowers_b_problem_to_its_floor_before_touching_n():
    a = allocate(EASY, 2e6, b_problem=128, b_max=8192)
    assert (a.n, a.b_problem) == (256, 32)
    assert a.reasons == ("b_problem lowered from 128 to 32 so that b_problem * n = 8192 <= b_max 8192",)


def test_b_max_lowers_b_problem_only_as_far_as_needed():
    a = allocate(EASY, 2e6, b_problem=128, b_max=16384)
    assert (a.n, a.b_problem) == (256, 64)


def test_b_max_then_n_with_an_explicit_floor():
    a = allocate(EASY, 2e6, b_problem=128, b_problem_floor=64, b_max=8192)
    assert (a.n, a.b_problem) == (128, 64)
    assert "n lowered from 256 to 128" in a.reasons[0] and "floor 64" in a.reasons[0]


def test_after_lowering_n_b_problem_goes_back_up_but_never_above_the_request():
    # A coarse grid: n drops from 256 to 8, and 64 problems per step then fit under b_max again.
    a = allocate(EASY, 2e6, b_problem=64, n_grid=[8, 256], b_max=4096)
    assert (a.n, a.b_problem) == (8, 64)


def test_min_steps_shrinks_the_batch_like_b_max():
    a = allocate(EASY, 1e6, min_steps=1000)
    assert a.steps >= 1000 and a.n == 16 and a.b_problem == 32
    assert "min_steps 1000" in a.reasons[0]


def test_n_snaps_to_a_custom_grid_in_log2():
    assert allocate(EASY, 1e6, n_grid=[16, 100, 1000]).n == 100
    assert DEFAULT_N_GRID[0] == 2 and all(b == 2 * a for a, b in zip(DEFAULT_N_GRID, DEFAULT_N_GRID[1:]))


def test_a_fitted_range_flags_extrapolation():
    curve = EASY.__class__(**{**EASY.__dict__, "c_range": (1e5, 5e5)})
    assert "extrapolated" in allocate(curve, 1e6).reasons[0]


def test_a_warmup_longer_than_the_run_is_reported():
    a = allocate(EASY, 2000)
    assert a.steps == 7
    assert a.reasons[-1] == "warm-up (10 steps) is longer than the run (7 steps): lr never reaches 5e-07"
    # update k runs at lr * k / W, so a warm-up as long as the run still reaches the peak at its last step
    assert not any("warm-up" in r for r in allocate(EASY, 2000, warmup_steps=7).reasons)


def test_an_absurd_budget_is_refused_not_allocated():
    with pytest.raises(AllocationError, match=r"pays for 6.1e\+25 steps of 16,384 rollouts, more than 10,000,000"):
        allocate(EASY, 1e30)
    assert allocate(EASY, 1e10).steps == 10**10 // (32 * 512) <= MAX_STEPS  # large but plausible: allocated


# --- the decoupled baseline (appendix C): n_est = n sampled, n_train trained on -----------------------

def test_decoupled_lr_counts_the_rollouts_trained_on_and_compute_counts_all():
    a = allocate(EASY, 2e6, n_train=64)
    assert (a.n, a.n_train, a.b_problem) == (256, 64, 32)
    assert a.lr == pytest.approx(1e-6 * math.sqrt(32 * 64 / 1024))  # not sqrt(32 * 256 / 1024)
    assert a.rollouts_used == a.steps * 32 * 256 and a.steps == 2_000_000 // (32 * 256)
    assert "trains on n_train = 64 per problem" in format_decision(a)


def test_decoupled_n_is_never_below_n_train():
    a = allocate(EASY, 1e5, n_train=64)  # n*(1e5) ~ 7
    assert a.n == 64 and a.n_star < 8
    assert a.reasons[-1] == "n = 64 rather than 8: the decoupled baseline samples at least n_train = 64 rollouts per problem"
    # caps that would need n < n_train lower b_problem to its floor, then refuse, naming n_train
    assert allocate(EASY, 2e6, n_train=128, b_max=2048, b_problem_floor=16).n == 128
    with pytest.raises(AllocationError, match=r"smallest n 256 \(n_train 256\).*raise b_max"):
        allocate(EASY, 2e6, n_train=256, b_max=4096)


@settings(max_examples=300, deadline=None)
@given(
    curve=st.sampled_from([EASY, HARD, load_curve("paper:qwen2.5-7b-easy-joint")]),
    budget=st.floats(min_value=1.0, max_value=1e10),
    b_max=st.none() | st.integers(min_value=1, max_value=200_000),
    b_problem=st.integers(min_value=1, max_value=1024),
    floor=st.none() | st.integers(min_value=1, max_value=1024),
    min_steps=st.integers(min_value=1, max_value=500),
    n_grid=st.none() | st.lists(st.integers(min_value=1, max_value=4096), min_size=1, max_size=6),
    n_train=st.none() | st.integers(min_value=1, max_value=256),
)
def test_never_exceeds_the_budget_or_the_constraints(curve, budget, b_max, b_problem, floor, min_steps, n_grid, n_train):
    try:
        a = allocate(
            curve, budget, b_max=b_max, b_problem=b_problem, b_problem_floor=floor, min_steps=min_steps, n_grid=n_grid,
            n_train=n_train,
        )
    except AllocationError as exc:
        assert "raise" in str(exc) or "lower" in str(exc) or "check the budget" in str(exc)  # every refusal names a fix
        return
    assert a.rollouts_used <= budget
    assert a.steps * a.b_problem * a.n == a.rollouts_used
    assert min_steps <= a.steps <= MAX_STEPS
    assert b_max is None or a.b_problem * a.n <= b_max
    assert (min(b_problem, 32) if floor is None else floor) <= a.b_problem <= b_problem
    assert a.n in (DEFAULT_N_GRID if n_grid is None else n_grid)
    assert n_train is None or a.n >= n_train  # the decoupled baseline never samples fewer than it trains on


# --- fixed hardware batch ---------------------------------------------------------------------------

def test_fixed_batch_trades_problems_for_rollouts_as_compute_grows():
    small, large = allocate(EASY, 1e5, batch_rollouts=1024), allocate(EASY, 1e7, batch_rollouts=1024)
    assert (small.n, small.b_problem) == (8, 128)
    assert (large.n, large.b_problem) == (512, 2)
    assert large.steps == 10_000_000 // 1024


def test_fixed_batch_respects_an_explicit_floor():
    a = allocate(EASY, 1e7, batch_rollouts=1024, b_problem_floor=32)
    assert (a.n, a.b_problem) == (32, 32)
    assert "n lowered from 512 to 32" in a.reasons[0]


def test_fixed_batch_not_a_multiple_of_n_is_reported():
    a = allocate(EASY, 1e6, batch_rollouts=1000)
    assert a.b_problem * a.n < 1000 and "not a multiple" in a.reasons[0]


def test_fixed_batch_above_b_max_is_refused():
    with pytest.raises(AllocationError, match="exceeds b_max"):
        allocate(EASY, 1e6, batch_rollouts=8192, b_max=4096)


def test_fixed_batch_budget_below_min_steps_names_the_minimum():
    with pytest.raises(AllocationError, match="minimum budget is 10,240 rollouts"):
        allocate(EASY, 5000, batch_rollouts=1024, min_steps=10)


# --- tokens -----------------------------------------------------------------------------------------

def test_token_curve_with_a_token_budget():
    a = allocate(EASY_TOKENS, 1e10, budget_unit="tokens", mean_response_tokens=2000)
    assert a.n_star == pytest.approx(EASY_TOKENS.n_star(1e10))
    assert a.n == 512 and a.budget_rollouts == 5_000_000 and a.budget_tokens == 1e10
    assert a.steps == 5_000_000 // (32 * 512)
    assert "5,000,000 rollouts at 2000 tokens per response" in a.reasons[0]


def test_token_curve_with_a_rollout_budget():
    a = allocate(EASY_TOKENS, 1e6, mean_response_tokens=1000)
    assert a.n_star == pytest.approx(EASY_TOKENS.n_star(1e9))
    assert a.budget_rollouts == 1_000_000 and "the curve counts tokens" in a.reasons[0]


def test_rollout_curve_with_a_token_budget():
    a = allocate(EASY, 2e9, budget_unit="tokens", mean_response_tokens=2000)
    assert a.n_star == pytest.approx(EASY.n_star(1e6)) and a.n == 128 and a.steps == 244


@pytest.mark.parametrize(("curve", "unit"), [(EASY_TOKENS, "rollouts"), (EASY, "tokens"), (EASY_TOKENS, "tokens")])
def test_tokens_without_a_mean_response_length_are_refused(curve, unit):
    with pytest.raises(AllocationError, match="pass mean_response_tokens"):
        allocate(curve, 1e9, budget_unit=unit)


# --- bad input --------------------------------------------------------------------------------------

def test_budget_below_one_step_names_the_minimum():
    with pytest.raises(AllocationError, match=r"minimum budget is 64 rollouts; raise the budget"):
        allocate(EASY, 50)
    with pytest.raises(AllocationError, match=r"minimum budget is 1,600 rollouts"):
        allocate(EASY, 1000, n_grid=[8, 16], b_problem=64, b_problem_floor=50, min_steps=4)


@pytest.mark.parametrize("budget", [0, -1e6, math.nan, math.inf, True, "1e6"])
def test_non_positive_or_non_numeric_budget(budget):
    with pytest.raises(AllocationError, match="budget .* must be a positive finite number"):
        allocate(EASY, budget)


def test_unknown_preset_lists_the_presets():
    with pytest.raises(CurveError, match="presets: .*paper:qwen2.5-7b-easy"):
        allocate("paper:qwen2.5-7b-medium", 1e6)


def test_malformed_curve_files(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CurveError, match="not valid JSON.*isocompute fit"):
        allocate(broken, 1e6)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"L": 6.0, "k": 4.0}))
    with pytest.raises(CurveError, match="missing log10_C0, b"):
        allocate(str(partial), 1e6)


def test_b_problem_larger_than_the_dataset():
    message = r"b_problem 32 is larger than the dataset \(20 problems\).*lower b_problem"
    with pytest.raises(AllocationError, match=message):
        allocate(EASY, 1e6, dataset_size=20)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"b_max": 10}, "raise b_max"),
        ({"b_max": 0}, "b_max must be a positive integer"),
        ({"b_problem_floor": 64}, "b_problem_floor 64 is above b_problem 32"),
        ({"n_grid": []}, "n_grid is empty"),
        ({"min_steps": 0}, "min_steps must be a positive integer"),
        ({"lr_rule": "cubic"}, "unknown lr rule 'cubic'"),
        ({"budget_unit": "flops"}, "budget unit must be one of rollouts, tokens"),
        ({"mean_response_tokens": -3, "budget_unit": "tokens"}, "mean_response_tokens must be a positive"),
    ],
)
def test_bad_constraints(kwargs, message):
    with pytest.raises(AllocationError, match=message):
        allocate(EASY, 1e6, **kwargs)


# --- verl overrides and the hook --------------------------------------------------------------------

def _compose(extra: list[str]):
    with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
        return compose(config_name="ppo_trainer", overrides=extra)


def _block(**settings) -> list[str]:
    return [f"+isocompute.allocation.{key}={value}" for key, value in {"enable": "true", **settings}.items()]


# ppo_trainer's data.train_files do not exist here: the hook, like the recipes, would count them (see
# test_apply_allocation_counts_the_training_files_as_the_recipes_do)
EASY_1E6 = {"curve": "paper:qwen2.5-7b-easy", "budget_rollouts": "1e6", "dataset_size": 6000}


def test_overrides_are_valid_verl_overrides():
    a = allocate(EASY, 1e6)
    assert overrides(a) == [
        "actor_rollout_ref.rollout.n=128",
        "data.train_batch_size=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "trainer.total_training_steps=244",
        "trainer.total_epochs=244",
        "actor_rollout_ref.actor.optim.lr=2e-06",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=10",
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.0",
    ]
    cfg = _compose(overrides(a))  # every key exists in verl's config: no `+` needed
    for key, value in verl_values(a).items():
        assert OmegaConf.select(cfg, key) == value
    assert cfg.actor_rollout_ref.actor.rollout_n == 128


def test_total_epochs_covers_the_steps_when_the_dataset_is_known():
    assert verl_values(allocate(EASY, 1e7, dataset_size=500))["trainer.total_epochs"] == math.ceil(610 / (500 // 32))


def test_apply_allocation_disabled_changes_nothing():
    cfg = _compose(["+isocompute.allocation.enable=false"])
    before = OmegaConf.to_container(cfg)
    assert apply_allocation(cfg) is None
    assert OmegaConf.to_container(cfg) == before
    assert apply_allocation(_compose([])) is None


def test_apply_allocation_writes_verl_keys():
    cfg = _compose(_block(curve="paper:qwen2.5-7b-easy", budget_rollouts="1e7", dataset_size=500))
    a = apply_allocation(cfg, set())
    assert (a.n, a.b_problem, a.steps) == (512, 32, 610)
    assert cfg.actor_rollout_ref.rollout.n == 512
    assert cfg.actor_rollout_ref.actor.rollout_n == 512  # verl's interpolation follows
    assert cfg.data.train_batch_size == cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 32
    assert cfg.trainer.total_training_steps == 610
    assert cfg.trainer.total_epochs == 41  # 15 steps per epoch; verl's default 30 would stop the run early
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(4e-6)
    assert cfg.actor_rollout_ref.actor.optim.lr_warmup_steps == 10
    assert cfg.actor_rollout_ref.actor.optim.lr_warmup_steps_ratio == 0.0


def test_apply_allocation_keeps_a_larger_total_epochs():
    cfg = _compose(_block(**EASY_1E6))
    apply_allocation(cfg)
    assert cfg.trainer.total_epochs == 30


def test_apply_allocation_refuses_to_overwrite_the_command_line():
    """The recipes' conflict rule (one function, check_allocation_keys), applied to the keys on the command line."""
    user = ["actor_rollout_ref.rollout.n=16", "data.train_batch_size=32", "trainer.total_epochs=1"]
    cfg = _compose(user + _block(**EASY_1E6))
    with pytest.raises(AllocationError) as info:
        apply_allocation(cfg, explicit_keys_from_overrides(user))
    message = str(info.value)
    assert "actor_rollout_ref.rollout.n=16 (allocation: 128)" in message
    assert "trainer.total_epochs=1 (allocation needs at least 2)" in message  # 244 steps of 187 per epoch
    assert "data.train_batch_size" not in message  # the user's value equals the allocation's
    assert "isocompute.allocation.override_user=true" in message
    assert cfg.actor_rollout_ref.rollout.n == 16  # nothing was written
    # a larger total_epochs on the command line is kept: it only bounds the epoch loop
    user = ["trainer.total_epochs=100"]
    cfg = _compose(user + _block(**EASY_1E6))
    assert apply_allocation(cfg, explicit_keys_from_overrides(user)).n == cfg.actor_rollout_ref.rollout.n == 128
    assert cfg.trainer.total_epochs == 100


def test_apply_allocation_counts_the_training_files_as_the_recipes_do(tmp_path):
    """One path: with dataset_size unset the hook counts data.train_files (the epochs bound follows D), and a file
    it cannot read is the recipes' one line naming dataset_size."""
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    train, _ = write_arithmetic_dataset(tmp_path, ArithmeticConfig(train_size=64, val_size=8))  # D = 64 rows
    block = {"curve": "paper:qwen2.5-7b-easy", "budget_rollouts": "1e6"}
    cfg = _compose([f"data.train_files={train}"] + _block(**block))
    a = apply_allocation(cfg)
    assert (a.dataset_size, a.steps, cfg.trainer.total_epochs) == (64, 244, 122)  # 2 steps per epoch of 64 problems
    with pytest.raises(AllocationError, match=r"could not count the training problems in data.train_files .*"
                                              r"set isocompute.allocation.dataset_size=D"):
        apply_allocation(_compose([f"data.train_files={tmp_path}/missing.parquet"] + _block(**block)))


def test_override_user_lets_the_allocation_win():
    user = ["actor_rollout_ref.rollout.n=16"]
    cfg = _compose(user + _block(**EASY_1E6, override_user="true"))
    assert apply_allocation(cfg, explicit_keys_from_overrides(user)).n == 128
    assert cfg.actor_rollout_ref.rollout.n == 128


def test_recipe_values_are_not_protected():
    cfg = _compose(["actor_rollout_ref.rollout.n=16"] + _block(**EASY_1E6))
    apply_allocation(cfg, explicit_keys=None)
    assert cfg.actor_rollout_ref.rollout.n == 128


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"budget_rollouts": "1e6", "dataset_size": 6000},
         "isocompute.allocation: curve is not set; give a curve.json path or a paper: preset"),
        ({"curve": "paper:qwen2.5-7b-easy", "dataset_size": 6000},
         "isocompute.allocation: set exactly one of budget_rollouts and budget_tokens"),
        ({**EASY_1E6, "budget_tokens": "1e9"}, "exactly one of"),
        ({**EASY_1E6, "bmax": 4096}, r"unknown key isocompute.allocation.bmax: did you mean isocompute.allocation.b_max\?"),
        ({**EASY_1E6, "curve": "paper:nope"}, "isocompute.allocation: unknown preset 'paper:nope'; presets:"),
        ({**EASY_1E6, "budget_rollouts": -5}, "isocompute.allocation.budget_rollouts=-5 is out of range: use a finite number > 0"),
    ],
)
def test_apply_allocation_bad_blocks(settings, message):
    with pytest.raises(AllocationError, match=message):
        apply_allocation(_compose(_block(**settings)))


def test_apply_allocation_under_the_decoupled_baseline():
    cfg = _compose(_block(**EASY_1E6) + ["algorithm.adv_estimator=isocompute_grpo_decoupled", "+isocompute.decoupled.n_train=256"])
    a = apply_allocation(cfg)
    assert cfg.actor_rollout_ref.rollout.n == a.n == 256  # n*(1e6) ~ 118 -> 128 without the baseline
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6 * math.sqrt(32 * 256 / 1024))
    cfg = _compose(_block(**EASY_1E6) + ["algorithm.adv_estimator=isocompute_grpo_decoupled", "+isocompute.decoupled.n_train=64"])
    assert apply_allocation(cfg).n == 128 and cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6 * math.sqrt(2))
    with pytest.raises(AllocationError, match="needs isocompute.decoupled.n_train"):
        apply_allocation(_compose(_block(**EASY_1E6) + ["algorithm.adv_estimator=isocompute_grpo_decoupled"]))


def test_apply_allocation_in_tokens():
    cfg = _compose(_block(curve="paper:qwen2.5-7b-easy-tokens", budget_tokens="1e10", mean_response_tokens=2000,
                          dataset_size=6000))
    assert apply_allocation(cfg).n == cfg.actor_rollout_ref.rollout.n == 512


def test_allocate_defaults_are_the_config_defaults():
    knobs = set(inspect.signature(allocate).parameters) - {"curve", "budget", "budget_unit", "n_train"}
    assert set(AllocationConfig().rule_settings()) == knobs
    defaults = {k: p.default for k, p in inspect.signature(allocate).parameters.items() if k in knobs}
    assert AllocationConfig().rule_settings() == defaults


def test_the_recipe_block_lists_the_config_defaults():
    """AllocationConfig is the source; the allocation piece (recipes/isocompute/allocation.yaml, in every recipe)
    lists the same keys (overridable without `+`); adding the piece enables it, the recipes switch it off."""
    recipes = resources.files("verl_isocompute.recipes")
    yaml = OmegaConf.merge(*(OmegaConf.load(recipes / "isocompute" / f"{piece}.yaml") for piece in ("lr_rule", "allocation")))
    block = OmegaConf.to_container(yaml.isocompute.allocation, resolve=True)
    assert list(block) == [f.name for f in fields(AllocationConfig)]
    assert block == {**asdict(AllocationConfig()), "enable": True}
    assert OmegaConf.load(recipes / "isocompute_base.yaml").isocompute.allocation == {"enable": False}
    # the LR keys follow the recipe's LR rule (one rule for the hook and the recipe), whose values are the paper's
    assert OmegaConf.to_container(yaml.isocompute.allocation)["base_lr"] == "${isocompute.lr.base_lr}"


def test_explicit_keys_normalise_hydra_forms():
    assert explicit_keys_from_overrides(["a.b=1", "+c.d=2e-06", "++e.f=[1,2]", "~g.h", "model_engine=dp"]) == {
        "a.b", "c.d", "e.f", "g.h", "model_engine",
    }
    with pytest.raises(AllocationError, match="cannot read the command-line overrides"):
        explicit_keys_from_overrides(["no_equals_sign"])


def test_format_decision_reports_the_numbers_and_reasons():
    text = format_decision(allocate("paper:qwen2.5-7b-easy", 2e6, b_max=4096, dataset_size=6000))
    assert "n = 128, b_problem = 32 (4096 rollouts/step), steps = 488, lr = 2e-06" in text
    assert "from paper:qwen2.5-7b-easy" in text and "2.60 epochs of 6000 problems" in text
    assert "- n lowered from 256 to 128" in text


# --- the CLI ----------------------------------------------------------------------------------------

# The real `isocompute` dispatch, restricted to `allocate` so that other subcommands' imports (torch, verl)
# neither slow these tests down nor break them.
_CLI = (
    "import sys; from verl_isocompute.commands import cli; "
    "cli.SUBCOMMANDS = {'allocate': cli.SUBCOMMANDS['allocate']}; sys.exit(cli.main(sys.argv[1:]))"
)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CLI, "allocate", *args], capture_output=True, text=True, timeout=60)


def test_cli_json():
    out = _cli("--curve", "paper:qwen2.5-7b-easy", "--budget", "1e6", "--format", "json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    keys = ("n", "b_problem", "steps", "warmup_steps", "budget_rollouts", "rollouts_used", "epochs", "reasons")
    assert {k: d[k] for k in keys} == {
        "n": 128, "b_problem": 32, "steps": 244, "warmup_steps": 10, "budget_rollouts": 1_000_000,
        "rollouts_used": 999_424, "epochs": None, "reasons": [],
    }
    assert d["lr"] == pytest.approx(2e-6)


def test_cli_overrides_and_table():
    out = _cli("--curve", "paper:qwen2.5-7b-hard", "--budget", "1e6", "--dataset-size", "5000", "--format", "overrides")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == overrides(allocate(HARD, 1e6, dataset_size=5000))
    table = _cli("--curve", "paper:qwen2.5-7b-easy", "--budget", "2e6", "--b-max", "4096", "--n-grid", "64,128,256")
    assert table.returncode == 0, table.stderr
    assert "n                     128" in table.stdout and "reason: n lowered from 256 to 128" in table.stdout


def test_cli_tokens_and_fixed_batch():
    out = _cli(
        "--curve", "paper:qwen2.5-7b-easy-tokens", "--budget-tokens", "1e10", "--mean-response-tokens", "2000", "--format", "json"
    )
    assert json.loads(out.stdout)["n"] == 512
    out = _cli("--curve", "paper:qwen2.5-7b-easy", "--budget", "1e7", "--batch-rollouts", "1024", "--format", "json")
    assert (json.loads(out.stdout)["n"], json.loads(out.stdout)["b_problem"]) == (512, 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--curve", "paper:nope", "--budget", "1e6"], "presets: paper:qwen2.5-7b-easy"),
        (["--curve", "paper:qwen2.5-7b-easy", "--budget", "50"], "minimum budget is 64 rollouts"),
        (["--curve", "paper:qwen2.5-7b-easy", "--budget", "nan"], "positive finite number"),
        (["--curve", "paper:qwen2.5-7b-easy", "--budget", "1e6", "--dataset-size", "10"], "larger than the dataset"),
        (["--curve", "paper:qwen2.5-7b-easy", "--budget-tokens", "1e9"], "--mean-response-tokens"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(args, message):
    out = _cli(*args)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("isocompute allocate: error: ") and message in out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_cli_missing_budget_is_a_usage_error():
    out = _cli("--curve", "paper:qwen2.5-7b-easy")
    assert out.returncode == 2 and "one of the arguments --budget --budget-tokens is required" in out.stderr


# --- one home each: the pure rule, the verl hook, the 0.1 import path, the documented example --------


def test_the_01_import_path_still_has_the_hook_and_the_rule():
    import verl_isocompute.training.allocation_hook as hook
    from verl_isocompute.scaling import allocation as rule

    sys.modules.pop("verl_isocompute.allocation", None)
    with pytest.warns(DeprecationWarning, match="moved to verl_isocompute.training.allocation_hook"):
        import verl_isocompute.allocation as old
    # the names 0.1's documentation imported, and the rule's
    assert (old.apply_allocation, old.explicit_keys_from_overrides) == (hook.apply_allocation, hook.explicit_keys_from_overrides)
    assert (old.format_decision, old.allocate, old.Allocation) == (rule.format_decision, rule.allocate, rule.Allocation)


@pytest.mark.e2e  # the example in a fresh process (imports verl's main_ppo)
def test_the_documented_entry_point_runs(tmp_path):
    """docs/ALLOCATION.md's example, run with hydra as written; verl's run_ppo is the one name replaced, by a
    function that takes exactly verl's arguments (the example once called it without task_runner_class). The
    example itself trains for real in tests/test_user_config_e2e.py."""
    docs = (Path(__file__).parent.parent / "docs" / "ALLOCATION.md").read_text()
    example = re.search(r"## From another verl project.*?```python\n(.*?)```", docs, re.S).group(1)
    imported = "from verl.trainer.main_ppo import TaskRunnerV1, run_ppo\n"
    assert imported in example
    script = example.replace(
        imported,
        "import inspect\nfrom verl.trainer import main_ppo\nTaskRunnerV1 = main_ppo.TaskRunnerV1\n"
        "def run_ppo(*args, **kwargs):\n    inspect.signature(main_ppo.run_ppo).bind(*args, **kwargs)\n"
        "    cfg = args[0]\n    print('run_ppo n =', cfg.actor_rollout_ref.rollout.n, 'lr =', cfg.actor_rollout_ref.actor.optim.lr)\n",
    )
    (tmp_path / "train.py").write_text(script)
    (tmp_path / "config").mkdir()
    block = OmegaConf.create({"isocompute": {"allocation": asdict(AllocationConfig())}})
    (tmp_path / "config" / "my_trainer.yaml").write_text(
        f"hydra:\n  searchpath: [file://{VERL_CONFIG_DIR}]\ndefaults:\n  - ppo_trainer\n  - _self_\n" + OmegaConf.to_yaml(block)
    )
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    train, val = write_arithmetic_dataset(tmp_path / "data", ArithmeticConfig(train_size=64, val_size=8))
    run = subprocess.run(
        [sys.executable, "train.py", "isocompute.allocation.enable=true", "isocompute.allocation.curve=paper:qwen2.5-7b-easy",
         "isocompute.allocation.budget_rollouts=1e6", f"data.train_files={train}", f"data.val_files={val}", "hydra.run.dir=."],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert ("isocompute allocation: n = 128, b_problem = 32 (4096 rollouts/step), steps = 244" in run.stdout
            and "122.00 epochs of 64 problems" in run.stdout)  # D counted from data.train_files, as the recipes do
    assert "run_ppo n = 128 lr = 2e-06" in run.stdout
