"""The allocation is decided once per launch (issue 42): one function, read by every key, report and check, under
our entry point, verl's main_ppo (driver and TaskRunner) and a third-party entry point; one recipe file writes
``rollout.n``; n's route to verl is the one docs/ALLOCATION.md lists ("How the decision reaches verl").

Evaluations are counted at the rule itself (:func:`verl_isocompute.scaling.allocation.allocate`). verl's TaskRunner
is a Ray actor in its own process: here the config verl would send it is pickled with Ray's cloudpickle and
resolved as ``TaskRunnerV1.run`` resolves it, with this process's table of decisions emptied first (what a fresh
process has), and once more in a real fresh process (e2e).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray.cloudpickle as cloudpickle
import verl  # noqa: F401  (loads our plugin: resolvers and search path, as in main_ppo)
import yaml
from hydra_apps import run_app
from omegaconf import OmegaConf

import verl_isocompute
from verl_isocompute.scaling import allocation as rule
from verl_isocompute.training import allocation_hook
from verl_isocompute.training.config import compose_recipe

ROOT = Path(__file__).resolve().parent.parent
ALLOCATION = ["isocompute.allocation.enable=true", "isocompute.allocation.curve=paper:qwen2.5-7b-hard",
              "isocompute.allocation.budget_rollouts=2e5", "isocompute.allocation.b_problem=8"]
ENTRIES = {"ours": "verl_isocompute.main", "stock": "verl.trainer.main_ppo"}
LAUNCHES = {  # each passes verl's validate_config on the CPU, so the launch reaches run_ppo
    "cpu_demo": ["--config-name", "cpu_demo", "isocompute.model=tiny"],
    "hard+platform=cpu": ["--config-name", "isocompute_hard", "+platform=cpu"],
}


@pytest.fixture
def counted(monkeypatch):
    """Calls of the allocation rule, by process role ("driver", then "taskrunner")."""
    calls = {"driver": 0, "taskrunner": 0}
    role = ["driver"]
    real = rule.allocate

    def allocate(*args, **kwargs):
        calls[role[0]] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(rule, "allocate", allocate)
    allocation_hook._memo.clear()  # this test process has decided other configs before: start as a fresh one
    return calls, role


def taskrunner(role, seen):
    """verl's run_ppo as far as the config goes: pickled by Ray to the TaskRunner, which resolves it there."""

    def run_ppo(config, task_runner_class=None):
        blob = cloudpickle.dumps(config)
        role[0] = "taskrunner"
        allocation_hook._memo.clear()  # the TaskRunner is another process: nothing of the driver's but the pickle
        config = cloudpickle.loads(blob)
        OmegaConf.to_container(config, resolve=True)  # TaskRunnerV1.run: pprint(to_container(resolve=True)) ...
        OmegaConf.resolve(config)  # ... then resolve in place
        seen.update(n=config.actor_rollout_ref.rollout.n, b_problem=config.data.train_batch_size,
                    steps=config.trainer.total_training_steps, lr=config.actor_rollout_ref.actor.optim.lr,
                    decision=allocation_hook.decide(config))  # what our trainer's run-log header reads

    return run_ppo


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_the_allocation_is_decided_once_per_launch(entry, launch, counted, tmp_path, tiny_model_path):
    calls, role = counted
    seen: dict = {}
    env = {"VERL_PLATFORM": "cpu" if entry == "stock" else "", "VERL_FILE_LOGGER_PATH": ""}
    argv = [*LAUNCHES[launch], *ALLOCATION, f"isocompute.run_dir={tmp_path}/run", "isocompute.reuse_rollout_log_probs=false"]
    result = run_app(ENTRIES[entry], argv, env=env, cwd=str(tmp_path), run_ppo=taskrunner(role, seen))
    assert result.code == 0, result.err[-3000:]
    assert calls == {"driver": 1, "taskrunner": 0}
    chosen = seen["decision"].allocation
    assert (seen["n"], seen["b_problem"], seen["steps"]) == (chosen.n, chosen.b_problem, chosen.steps) == (8, 8, 3125)
    assert seen["lr"] == chosen.lr == seen["decision"].lr.lr
    if entry == "ours":  # it prints the decision it used, and the lr that follows from it
        assert "[isocompute] allocation: isocompute allocation: n = 8, b_problem = 8" in result.out
        assert f"[isocompute] lr: {chosen.lr:.3g} (sqrt rule" in result.out


def test_a_third_party_entry_point_decides_once_with_the_same_rule(counted):
    """apply_allocation (docs/ALLOCATION.md, "From another verl project") is decide() and check_allocation_keys():
    once, and a command-line value is refused in the recipes' words."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    calls, _ = counted
    block = ["+isocompute.allocation.enable=true", "+isocompute.allocation.curve=paper:qwen2.5-7b-hard",
             "+isocompute.allocation.budget_rollouts=2e5", "+isocompute.allocation.dataset_size=64"]
    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=block)
        refused = compose(config_name="ppo_trainer", overrides=[*block, "actor_rollout_ref.rollout.n=4"])
    chosen = allocation_hook.apply_allocation(cfg, set())
    OmegaConf.to_container(cfg, resolve=True)
    assert calls["driver"] == 1 and cfg.actor_rollout_ref.rollout.n == chosen.n == 8
    with pytest.raises(rule.AllocationError, match=r"actor_rollout_ref.rollout.n=4 \(allocation: 8\)"):
        allocation_hook.apply_allocation(refused, {"actor_rollout_ref.rollout.n"})
    assert calls["driver"] == 1  # the same inputs on disk: the decision is not made again


def test_a_changed_input_is_decided_afresh(tmp_path, counted):
    """The decision is kept per config and per inputs: another budget, or a curve file rewritten at the same path,
    is a new decision; a config keeps its own after its training files change (our trainer's guided mixture)."""
    from importlib import resources

    calls, _ = counted
    presets = resources.files("verl_isocompute.scaling") / "presets"
    curve = tmp_path / "curve.json"
    curve.write_text((presets / "qwen2.5-7b-hard.json").read_text())
    given = ["isocompute.model=tiny", "isocompute.allocation.enable=true", f"isocompute.allocation.curve={curve}",
             "isocompute.allocation.budget_rollouts=1e6", "isocompute.allocation.b_problem=8"]  # Hard: n = 64
    n = "actor_rollout_ref.rollout.n"
    cfg = compose_recipe("cpu_demo", given)
    n_first = OmegaConf.select(cfg, n)
    assert n_first == 64 and calls["driver"] == 1
    assert OmegaConf.select(compose_recipe("cpu_demo", given), n) == n_first
    assert calls["driver"] == 1  # a second composition of the same launch: the same decision
    budget = compose_recipe("cpu_demo", [*given, "isocompute.allocation.budget_rollouts=2e6"])
    assert OmegaConf.select(budget, n) > n_first and calls["driver"] == 2
    curve.write_text((presets / "qwen2.5-7b-easy.json").read_text())  # the same path, another curve: decided again
    assert OmegaConf.select(compose_recipe("cpu_demo", given), n) == 128 != n_first
    assert calls["driver"] == 3
    cfg.data.train_files = str(tmp_path / "guided.parquet")  # kept: the config was first resolved with the originals
    assert OmegaConf.select(cfg, n) == n_first and calls["driver"] == 3


def test_one_recipe_file_writes_rollout_n():
    writers = [path.relative_to(ROOT).as_posix() for path in sorted((ROOT / "recipes").rglob("*.yaml"))
               if "n" in ((yaml.safe_load(path.read_text()) or {}).get("actor_rollout_ref") or {}).get("rollout", {})]
    assert writers == ["recipes/isocompute/allocation.yaml"]


# Helpers every setting goes through, not steps of n's route (docs/ALLOCATION.md says so).
HELPERS = {"settings.py", "numeric.py", "training/conf.py", "verl_keys.py"}


def documented_route() -> list[str]:
    doc = (ROOT / "docs" / "ALLOCATION.md").read_text()
    section = re.search(r"## How the decision reaches verl\n(.*?)\n## ", doc, re.S).group(1)
    return re.findall(r"^\d+\. `verl_isocompute/([\w/]+\.py)`", section, re.M)


def test_the_route_of_n_to_verl_is_the_documented_one(counted, tiny_model_path):
    """The files whose code runs from verl's key `actor_rollout_ref.rollout.n` to the decision and back (traced, the
    helpers aside) are the numbered list of docs/ALLOCATION.md, in that order of first visit, at most 6."""
    package = str(Path(verl_isocompute.__file__).parent) + os.sep
    cfg = compose_recipe("isocompute_hard", ["actor_rollout_ref.model.path=M", "data.train_files=T", "data.val_files=V",
                                             *ALLOCATION, "isocompute.allocation.dataset_size=64"])
    visited: list[str] = []

    def trace(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and name.startswith(package):
            relative = name[len(package):]
            if relative not in visited and relative not in HELPERS:
                visited.append(relative)

    sys.setprofile(trace)
    try:
        n = OmegaConf.select(cfg, "actor_rollout_ref.rollout.n")
    finally:
        sys.setprofile(None)
    assert n == 8
    assert visited == documented_route()
    assert len(visited) <= 6


@pytest.mark.e2e  # a fresh interpreter imports verl (its plugin loading) as the TaskRunner's process does
def test_a_fresh_process_reads_the_pickled_decision(tmp_path, counted, monkeypatch):
    monkeypatch.setenv("VERL_PLATFORM", "cpu")  # cpu_demo's trainer.device, as in a CPU run's driver
    cfg = compose_recipe("cpu_demo", ["isocompute.model=tiny", *ALLOCATION])
    expected = OmegaConf.to_container(cfg, resolve=True)
    (tmp_path / "config.pkl").write_bytes(cloudpickle.dumps(cfg))
    code = (
        "import sys, json, verl, ray.cloudpickle as cp\n"
        "from omegaconf import OmegaConf\n"
        "from verl_isocompute.scaling import allocation as rule\n"
        "calls = []\n"
        "real = rule.allocate\n"
        "rule.allocate = lambda *a, **k: calls.append(1) or real(*a, **k)\n"
        "cfg = cp.loads(open(sys.argv[1], 'rb').read())\n"
        "resolved = OmegaConf.to_container(cfg, resolve=True)\n"
        "print(json.dumps({'calls': len(calls), 'n': resolved['actor_rollout_ref']['rollout']['n'],"
        " 'lr': resolved['actor_rollout_ref']['actor']['optim']['lr']}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "config.pkl")], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "VERL_PLATFORM": "cpu"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"calls": 0, "n": expected["actor_rollout_ref"]["rollout"]["n"],
                   "lr": expected["actor_rollout_ref"]["actor"]["optim"]["lr"]}
