"""End to end: a verl user's own entry point and config, on CPU (issue 19, sections 3 and 5).

docs/ALLOCATION.md's "From another verl project" entry point, read from the doc (tests/doc_snippets.py) and run
as written on a config of the user's own (verl's ``ppo_trainer`` plus their sizes, names and the
``isocompute.allocation`` block), with ``+platform=cpu`` and none of our pieces: one real verl run (Ray, FSDP2,
the tiny model). The allocation decides n, B_problem and the steps; the overlay changes only what the CPU
needs and says so; the user's project and experiment names stay, so verl's file logger writes where
``VERL_FILE_LOGGER_ROOT`` says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from doc_snippets import snippet
from test_platform_overlay import USER_CONFIG
from verl_runs import PARITY_REWARD

pytestmark = pytest.mark.e2e
ALLOCATION_BLOCK = """\
isocompute:
  allocation: {enable: false, curve: null, budget_rollouts: null, b_problem: 32}
"""


@pytest.fixture(scope="module")
def hook_run(tmp_path_factory, isocompute_cache, tiny_model_path):
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    train, val = write_arithmetic_dataset(isocompute_cache / "stock-data", ArithmeticConfig(train_size=64, val_size=8))
    root = tmp_path_factory.mktemp("user")
    (root / "config").mkdir()
    (root / "config" / "my_trainer.yaml").write_text(USER_CONFIG + ALLOCATION_BLOCK)
    (root / "app.py").write_text(snippet("allocation-hook").text)
    cmd = [sys.executable, "app.py", "+platform=cpu", f"actor_rollout_ref.model.path={tiny_model_path}",
           f"data.train_files={train}", f"data.val_files={val}", PARITY_REWARD, "trainer.logger=[console,file]",
           "trainer.val_before_train=false", "trainer.test_freq=-1",
           # the user's CPU sizes for verl's workers, as in docs/STOCK_VERL.md's example (ppo_trainer starts 8 of
           # each kind, every one a process to start on 2 cores; the overlay leaves sizes to the user)
           "actor_rollout_ref.rollout.agent.num_workers=1", "reward.num_workers=1", "data.dataloader_num_workers=0",
           "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
           # 32 rollouts at n = 4 (the only n of the grid) and B_problem = 4: two steps
           "isocompute.allocation.enable=true", "isocompute.allocation.curve=paper:qwen2.5-7b-hard",
           "isocompute.allocation.budget_rollouts=32", "isocompute.allocation.b_problem=4", "+isocompute.allocation.n_grid=[4]"]
    env = {k: v for k, v in os.environ.items() if k != "VERL_FILE_LOGGER_PATH"}
    env.update({"VERL_PLATFORM": "cpu", "VERL_FILE_LOGGER_ROOT": str(root / "logs")})
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return root, proc.stdout


def test_the_documented_hook_runs_a_user_config_with_the_allocation(hook_run):
    root, out = hook_run
    assert "isocompute allocation: n = 4, b_problem = 4 (16 rollouts/step), steps = 2" in out, out[-3000:]
    rows = [json.loads(line) for line in (root / "logs" / "my_project" / "my_experiment.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "timing_s/step" in r["data"]] == [1, 2]  # the allocation's steps, not the config's 7


def test_the_overlay_changed_only_what_the_cpu_needs(hook_run):
    _, out = hook_run
    (line,) = [line for line in out.splitlines() if line.startswith("[isocompute] +platform=cpu changed")]
    assert "actor_rollout_ref.rollout.name: ??? -> hf" in line and "trainer.device: cuda -> cpu" in line
    for kept in ("experiment_name:", "project_name:", "total_training_steps:", "rollout.n:", "logger:"):
        assert kept not in line
