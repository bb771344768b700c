"""End to end through verl's own entry point: ``VERL_PLATFORM=cpu python -m verl.trainer.main_ppo``, tiny model.

The two commands of docs/STOCK_VERL.md, read from the doc (tests/doc_snippets.py) with a short run's settings
added: a recipe (``cpu_demo``), with ``VERL_FILE_LOGGER_ROOT`` set, and verl's stock ``ppo_trainer`` with our
pieces (the doc's three and the zero-variance filter, which has nothing to mask there) and ``+platform=cpu``,
one after the other; each must write our run log into the run dir, with the lr of the sqrt rule and verl's
metrics where the doc says. (Not at the same time: each run's workers pick a free port for torch.distributed's
store, and two runs starting together can pick the same one: EADDRINUSE.)
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from doc_snippets import commands, placeholders, snippet
from verl_runs import LEAK_FILE_ENV, LEAKING_REWARD, PARITY_REWARD, left_in_dev_shm

from verl_isocompute.cpu.shm import LEDGER_ENV

pytestmark = pytest.mark.e2e
SHORT = ["trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.test_freq=-1"]


def doc_command(name: str, values: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment and main_ppo arguments of the STOCK_VERL.md snippet ``name``, placeholders filled in."""
    (command,) = commands(snippet(name).text)
    assert command.argv[:3] == ["python", "-m", "verl.trainer.main_ppo"] and command.env.get("VERL_PLATFORM") == "cpu"
    return command.env, placeholders(command.argv[3:], values)


class MainPpo:
    """``python -m verl.trainer.main_ppo`` started now; :meth:`result` waits for it and reads its run log."""

    def __init__(self, run_dir, *args: str, env: dict | None = None, metrics=None, reward: str = PARITY_REWARD) -> None:
        self.run_dir = run_dir
        self.metrics = metrics or run_dir / "verl_metrics.jsonl"  # where verl's file logger should write
        self.cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *args, reward, *SHORT, f"isocompute.run_dir={run_dir}"]
        self.out = open(run_dir.parent / "main_ppo.log", "w+")
        # a user's shell: no file-logger path or shared-memory ledger left in this process's environment
        base = {k: v for k, v in os.environ.items() if k not in ("VERL_FILE_LOGGER_PATH", LEDGER_ENV)}
        self.proc = subprocess.Popen(self.cmd, stdout=self.out, stderr=subprocess.STDOUT, env={**base, **(env or {})},
                                     cwd=run_dir.parent)

    def result(self) -> tuple[dict, list[dict]]:
        try:
            rc = self.proc.wait(timeout=900)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self.out.seek(0)
        self.output = self.out.read()
        assert rc == 0, f"{' '.join(self.cmd)}\n{self.output[-6000:]}"
        lines = [json.loads(line) for line in (self.run_dir / "isocompute.jsonl").read_text().splitlines()]
        assert self.metrics.is_file()  # verl's file logger: in the run dir (our trainer), or under VERL_FILE_LOGGER_ROOT
        assert (self.run_dir / ".hydra" / "config.yaml").is_file()  # hydra's copy of the config in the run dir, as documented
        return lines[0]["header"], lines[1:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, isocompute_cache, tiny_model_path) -> dict[str, MainPpo]:
    """Both runs, one after the other."""
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    train, val = write_arithmetic_dataset(isocompute_cache / "stock-data", ArithmeticConfig(train_size=64, val_size=8))
    values = {"M": str(tiny_model_path), "T": str(train), "V": str(val)}
    env, args = doc_command("stock-cpu-demo", values)
    root = tmp_path_factory.mktemp("recipe")
    # its reward leaves a shared-memory segment in each process that scores (the clean-up test below)
    started = {"recipe": MainPpo(root / "run", *args, env={**env, "VERL_FILE_LOGGER_ROOT": str(root / "logs"),
                                                           LEAK_FILE_ENV: str(root / "leaked")},
                                 metrics=root / "logs" / "isocompute" / "cpu_demo.jsonl",  # <root>/<project>/<experiment>
                                 reward=LEAKING_REWARD)}
    try:
        started["recipe"].proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        pass  # result() reports it
    env, args = doc_command("stock-pieces", values)
    assert "+isocompute=[estimator,lr_rule,run_log]" in args
    args = [a.replace("run_log]", "run_log,zero_variance]") for a in args]  # regularizers mode, nothing to mask
    started.update({"pieces": MainPpo(tmp_path_factory.mktemp("pieces") / "run", *args, "isocompute.lr.base_lr=1e-4", env=env)})
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


def test_main_ppo_leaves_no_shared_memory_behind(runs):
    """verl's driver is not ours there: our plugin, loaded in it, records the shared memory the run's processes
    create and removes what is left when the driver exits (vLLM's queues left ~400 MB per run). The recipe run's
    reward left a segment in each process that scored, as a process killed by Ray leaves its own."""
    runs["recipe"].result()
    left, still = left_in_dev_shm(runs["recipe"].run_dir.parent / "leaked")
    assert left and still == [], (left, still)


def test_pieces_on_verls_ppo_trainer_write_our_run_log(runs):
    header, rows = runs["pieces"].result()
    assert header["adv_estimator"] == "isocompute_grpo" and header["lr_from_rule"] is True
    assert header["lr"] == pytest.approx(1e-4 * math.sqrt(8 * 4 / 1024))
    assert rows[0]["lr"] == pytest.approx(header["lr"] / 10)  # update 1 of a 10-step warm-up


def test_the_overlay_and_the_pieces_say_what_they_do_once(runs):
    """+platform=cpu lists what it changed; the zero-variance filter with nothing to mask warns; each once."""
    run = runs["pieces"]
    header, rows = run.result()
    changed = [line for line in run.output.splitlines() if line.startswith("[isocompute] +platform=cpu changed")]
    assert len(changed) == 1 and "actor_rollout_ref.rollout.name: ??? -> hf" in changed[0]
    assert "rollout.n:" not in changed[0] and "data.train_batch_size:" not in changed[0]  # the user's sizes stay
    assert run.output.count("zero_variance.mode=regularizers masks the KL loss") == 1
    assert header["zero_variance_mode"] == "regularizers" and rows[0]["isocompute/reg_active_frac"] == 0.0


def test_verls_own_logs_are_enough_for_fit(runs):
    """verl's file logger alone (no run log, no config next to it) gives the fit each run's n and B_problem."""
    from verl_isocompute.scaling import load_runs

    for name, (n, b_problem) in {"recipe": (4, 8), "pieces": (4, 8)}.items():
        runs[name].result()
        (meta,) = load_runs([runs[name].metrics]).runs.to_dict("records")
        assert (meta["n"], meta["b_problem"], meta["n_source"]) == (n, b_problem, "log"), name
