"""End to end through verl's own entry point: ``VERL_PLATFORM=cpu python -m verl.trainer.main_ppo``, tiny model.

One run of a recipe (``cpu_demo``) and one of verl's stock ``ppo_trainer`` with three of our pieces, one after
the other; each must write our run log into the run dir, with the lr of the sqrt rule and verl's metrics
next to it. (Not at the same time: each run's workers pick a free port for torch.distributed's store, and
two runs starting together can pick the same one: EADDRINUSE.)
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


class MainPpo:
    """``python -m verl.trainer.main_ppo`` started now; :meth:`result` waits for it and reads its run log."""

    def __init__(self, run_dir, *args: str) -> None:
        self.run_dir = run_dir
        self.cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *args, PARITY_REWARD, *SHORT, f"isocompute.run_dir={run_dir}"]
        self.out = open(run_dir.parent / "main_ppo.log", "w+")
        # a user's shell: no file-logger path left in this process's environment by an in-process prepare()
        env = {k: v for k, v in os.environ.items() if k != "VERL_FILE_LOGGER_PATH"}
        self.proc = subprocess.Popen(self.cmd, stdout=self.out, stderr=subprocess.STDOUT, env={**env, "VERL_PLATFORM": "cpu"})

    def result(self) -> tuple[dict, list[dict]]:
        try:
            rc = self.proc.wait(timeout=900)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.out.seek(0)
        assert rc == 0, f"{' '.join(self.cmd)}\n{self.out.read()[-6000:]}"
        lines = [json.loads(line) for line in (self.run_dir / "isocompute.jsonl").read_text().splitlines()]
        assert (self.run_dir / "verl_metrics.jsonl").is_file()  # verl's file logger pointed at the run dir by our trainer
        return lines[0]["header"], lines[1:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, isocompute_cache, tiny_model_path) -> dict[str, MainPpo]:
    """Both runs, one after the other."""
    from verl_isocompute.data.arithmetic import ArithmeticSpec, write_arithmetic_dataset

    train, val = write_arithmetic_dataset(isocompute_cache / "stock-data", ArithmeticSpec(train_size=64, val_size=8))
    started = {"recipe": MainPpo(tmp_path_factory.mktemp("recipe") / "run", "--config-name", "cpu_demo", "isocompute.model=tiny")}
    try:
        started["recipe"].proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        pass  # result() reports it
    started.update({
        "pieces": MainPpo(
            tmp_path_factory.mktemp("pieces") / "run", "+platform=cpu", "+isocompute=[estimator,lr_rule,run_log]",
            f"actor_rollout_ref.model.path={tiny_model_path}", f"data.train_files={train}", f"data.val_files={val}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8", "isocompute.lr.base_lr=1e-4",
        ),
    })
    yield started
    for run in started.values():
        if run.proc.poll() is None:
            run.proc.kill()
        run.out.close()


def test_recipe_through_verls_main_ppo_writes_our_run_log(runs):
    header, rows = runs["recipe"].result()
    assert header["recipe"] == "cpu_demo" and header["lr_from_rule"] is True
    assert header["lr"] == pytest.approx(1e-5 * math.sqrt(8 * 4 / 1024))  # cpu_demo: base_lr 1e-5, B = 8 x 4
    assert [r["step"] for r in rows] == [1] and rows[0]["rollouts"] == 32


def test_pieces_on_verls_ppo_trainer_write_our_run_log(runs):
    header, rows = runs["pieces"].result()
    assert header["adv_estimator"] == "isocompute_grpo" and header["lr_from_rule"] is True
    assert header["lr"] == pytest.approx(1e-4 * math.sqrt(8 * 4 / 1024))
    assert rows[0]["lr"] == pytest.approx(header["lr"] / 10)  # update 1 of a 10-step warm-up
