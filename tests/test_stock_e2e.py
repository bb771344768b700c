"""End to end through verl's own entry point: ``VERL_PLATFORM=cpu python -m verl.trainer.main_ppo``, tiny model.

One run of a recipe (``cpu_demo``) and one of verl's stock ``ppo_trainer`` with three of our pieces; each
must write our run log into the run dir, with the lr of the sqrt rule and verl's metrics next to it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from verl_runs import PARITY_REWARD

pytestmark = pytest.mark.e2e
SHORT = ["trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1"]


def main_ppo(run_dir, *args: str) -> tuple[dict, list[dict]]:
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *args, PARITY_REWARD, *SHORT, f"isocompute.run_dir={run_dir}"]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=900, env={**os.environ, "VERL_PLATFORM": "cpu"})
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    lines = [json.loads(line) for line in (run_dir / "isocompute.jsonl").read_text().splitlines()]
    assert (run_dir / "verl_metrics.jsonl").is_file()  # verl's file logger pointed at the run dir by our trainer
    return lines[0]["header"], lines[1:]


def test_recipe_through_verls_main_ppo_writes_our_run_log(tmp_path, isocompute_cache, tiny_model_path):
    header, rows = main_ppo(tmp_path / "run", "--config-name", "cpu_demo", "isocompute.model=tiny")
    assert header["recipe"] == "cpu_demo" and header["lr_from_rule"] is True
    assert header["lr"] == pytest.approx(1e-5 * math.sqrt(8 * 4 / 1024))  # cpu_demo: base_lr 1e-5, B = 8 x 4
    assert [r["step"] for r in rows] == [1] and rows[0]["rollouts"] == 32


def test_pieces_on_verls_ppo_trainer_write_our_run_log(tmp_path, isocompute_cache, tiny_model_path):
    from verl_isocompute.data.arithmetic import ArithmeticSpec, write_arithmetic_dataset

    train, val = write_arithmetic_dataset(isocompute_cache / "stock-data", ArithmeticSpec(train_size=64, val_size=8))
    header, rows = main_ppo(
        tmp_path / "run", "+platform=cpu", "+isocompute=[estimator,lr_rule,run_log]",
        f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "isocompute.lr.base_lr=1e-4",
    )
    assert header["adv_estimator"] == "isocompute_grpo" and header["lr_from_rule"] is True
    assert header["lr"] == pytest.approx(1e-4 * math.sqrt(8 * 4 / 1024))
    assert rows[0]["lr"] == pytest.approx(header["lr"] / 10)  # update 1 of a 10-step warm-up
