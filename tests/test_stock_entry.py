"""verl's own entry point (``python -m verl.trainer.main_ppo``) resolves each recipe to the same config as ours.

Composed without running: the stock side is what ``main_ppo`` composes (verl's config module, our recipe found
through the search path our plugin registers, our resolvers), the other is ``python -m verl_isocompute.main``'s
compose + :func:`prepare`. For every recipe, with and without the allocation, the fully resolved configs must
be equal: LR rule, allocation, model, data, run dir.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import verl  # noqa: F401  (loads our plugin: resolvers and search path, as in main_ppo)
import yaml
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from verl_isocompute.scaling.allocation import AllocationConfig, allocate_config
from verl_isocompute.training.config import compose_recipe
from verl_isocompute.training.prepare import prepare

RECIPES = ["isocompute_easy", "isocompute_hard", "isocompute_mixed", "cpu_demo"]
GPU = {"isocompute_easy", "isocompute_hard", "isocompute_mixed"}
ALLOCATION = ["isocompute.allocation.enable=true", "isocompute.allocation.curve=paper:qwen2.5-7b-hard",
              "isocompute.allocation.budget_rollouts=2e5", "isocompute.allocation.b_problem=8"]


def compose_stock(recipe: str, overrides: list[str]):
    """What `python -m verl.trainer.main_ppo --config-name RECIPE OVERRIDES` composes."""
    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose(config_name=recipe, overrides=overrides)


@pytest.fixture
def data_files(isocompute_cache):
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    return write_arithmetic_dataset(isocompute_cache / "stock-data", ArithmeticConfig(train_size=64, val_size=8))


def overrides(recipe: str, tmp_path, tiny_model_path, data_files) -> list[str]:
    given = [f"isocompute.run_dir={tmp_path}/run"]
    if recipe in GPU:  # a GPU recipe names its model and data; cpu_demo builds and generates them
        given += [f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={data_files[0]}",
                  f"data.val_files={data_files[1]}"]
    else:
        # the old-log-prob reuse of cpu_demo is applied by our entry point only (a stock run says so in one line)
        given += ["isocompute.model=tiny", "isocompute.reuse_rollout_log_probs=false"]
    return given


@pytest.mark.parametrize("allocated", [False, True], ids=["plain", "allocation"])
@pytest.mark.parametrize("recipe", RECIPES)
def test_both_entry_points_resolve_to_the_same_config(recipe, allocated, tmp_path, tiny_model_path, data_files, monkeypatch):
    if recipe in GPU:
        monkeypatch.delenv("VERL_PLATFORM", raising=False)
    else:
        monkeypatch.setenv("VERL_PLATFORM", "cpu")  # what a stock CPU run needs in its environment
    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    given = overrides(recipe, tmp_path, tiny_model_path, data_files) + (ALLOCATION if allocated else [])

    stock = OmegaConf.to_container(compose_stock(recipe, given), resolve=True)
    ours = OmegaConf.to_container(prepare(compose_recipe(recipe, given)), resolve=True)
    assert stock == ours

    b_problem, n = stock["data"]["train_batch_size"], stock["actor_rollout_ref"]["rollout"]["n"]
    base_lr = stock["isocompute"]["lr"]["base_lr"]
    assert stock["actor_rollout_ref"]["actor"]["optim"]["lr"] == pytest.approx(base_lr * math.sqrt(b_problem * n / 1024))
    assert stock["isocompute"]["run_dir"] == str(tmp_path / "run")
    if allocated:
        block = {**stock["isocompute"]["allocation"], "dataset_size": 56}  # 64 generated, 8 of them for validation
        chosen = allocate_config(AllocationConfig(**block))
        assert (n, b_problem, stock["trainer"]["total_training_steps"]) == (chosen.n, chosen.b_problem, chosen.steps)
        assert stock["actor_rollout_ref"]["actor"]["optim"]["lr"] == chosen.lr
    else:
        assert (b_problem, n) == ((8, 4) if recipe == "cpu_demo" else (32, 16))


def test_command_line_value_replaces_the_interpolation(tmp_path, tiny_model_path, data_files, monkeypatch):
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    given = overrides("isocompute_hard", tmp_path, tiny_model_path, data_files)
    cfg = compose_stock("isocompute_hard", [*given, "actor_rollout_ref.rollout.n=64", "actor_rollout_ref.actor.optim.lr=3e-6"])
    assert cfg.actor_rollout_ref.rollout.n == 64 and cfg.actor_rollout_ref.actor.optim.lr == 3e-6
    # with the allocation on, a key it decides is a contradiction: one error naming both values
    cfg = compose_stock("isocompute_hard", [*given, *ALLOCATION, "actor_rollout_ref.rollout.n=64"])
    with pytest.raises(Exception, match=r"actor_rollout_ref.rollout.n=64 \(allocation: \d+\).*enable=false"):
        OmegaConf.to_container(cfg, resolve=True)


def _main_ppo(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], check=False, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})}, cwd="/")


@pytest.mark.e2e  # three fresh main_ppo processes
def test_recipes_are_found_the_verl_way_and_resolve_the_rule(tmp_path, tiny_model_path, data_files):
    """`--config-name` alone, with `hydra.searchpath=[pkg://...]`, and with `--config-path` (the documented ways)."""
    from concurrent.futures import ThreadPoolExecutor
    from importlib import resources

    recipes_dir = str(resources.files("verl_isocompute.recipes"))
    given = overrides("isocompute_easy", tmp_path, tiny_model_path, data_files)
    ways = (([], []), ([], ["hydra.searchpath=[pkg://verl_isocompute.recipes]"]), (["--config-path", recipes_dir], []))
    with ThreadPoolExecutor(len(ways)) as pool:  # three separate processes, started at once (each mostly imports)
        procs = list(pool.map(lambda way: _main_ppo("--cfg", "job", "--resolve", *way[0], "--config-name", "isocompute_easy",
                                                    *given, *way[1], env={"VERL_PLATFORM": ""}), ways))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-2000:]
        cfg = yaml.safe_load(proc.stdout)
        assert cfg["actor_rollout_ref"]["actor"]["optim"]["lr"] == pytest.approx(1e-6 * math.sqrt(32 * 16 / 1024))
        assert cfg["trainer"]["v1"]["trainer_mode"] == "isocompute"


@pytest.mark.e2e  # main_ppo in a fresh process
def test_cpu_platform_without_verl_platform_stops_with_one_line(tmp_path):
    proc = _main_ppo("--config-name", "cpu_demo", "isocompute.model=tiny", f"isocompute.run_dir={tmp_path}",
                     env={"VERL_PLATFORM": ""})
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("isocompute: error: isocompute.platform=cpu needs VERL_PLATFORM=cpu") and "VERL_PLATFORM=cpu python -m" in last
    assert "Traceback" not in proc.stderr


@pytest.mark.e2e  # python -m verl_isocompute.main in a fresh process
def test_our_entry_prints_the_resolved_config(tmp_path):
    """`python -m verl_isocompute.main ... --cfg job --resolve` prints the config a run would use: on the CPU
    platform it sets VERL_PLATFORM as it does for a run (it used to exit 1 asking for our own entry point)."""
    proc = subprocess.run([sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo", "isocompute.model=tiny",
                           f"isocompute.run_dir={tmp_path}", "--cfg", "job", "--resolve"], check=False, capture_output=True,
                          text=True, timeout=300, env={k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}, cwd="/")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["trainer"]["device"] == "cpu" and cfg["actor_rollout_ref"]["rollout"]["name"] == "hf"
    assert cfg["actor_rollout_ref"]["actor"]["optim"]["lr"] == pytest.approx(1e-5 * math.sqrt(8 * 4 / 1024))
