"""End to end through verl's own entry point: ``VERL_PLATFORM=cpu python -m verl.trainer.main_ppo``, tiny model.

The two commands of docs/STOCK_VERL.md, read from the doc (tests/doc_snippets.py) with a short run's settings
added: a recipe (``cpu_demo``), with ``VERL_FILE_LOGGER_ROOT`` set, and verl's stock ``ppo_trainer`` with our
pieces (the doc's three and the zero-variance filter, which has nothing to mask there) and ``+platform=cpu``,
one after the other; each must write our run log into the run dir, with the lr of the sqrt rule and verl's
metrics where the doc says. (Not at the same time: each run's workers pick a free port for torch.distributed's
store, and two runs starting together can pick the same one: EADDRINUSE.)

The pieces run also carries per-prompt n (issue 21; the ``per_prompt_n`` piece, on data whose rows carry
curation's avg@k, two steps over the rows in order): one verl start-up for both, since the doc's pieces command
is the stock ``ppo_trainer`` run per-prompt n is checked on, at the same sizes.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
from doc_snippets import commands, placeholders, snippet
from verl_runs import PARITY_REWARD

pytestmark = pytest.mark.e2e
SHORT = ["trainer.val_before_train=false", "trainer.test_freq=-1"]
B_PROBLEM, N = 8, 4  # the doc commands' batch
AVG_AT_16 = (0.5, 0.0625, 0.9375, 0.25)  # per-prompt n's data: curation's avg@16 of row i is AVG_AT_16[i % 4]
PIECES_STEPS = 2  # per-prompt n over two steps' prompts


def doc_command(name: str, values: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The environment and main_ppo arguments of the STOCK_VERL.md snippet ``name``, placeholders filled in."""
    (command,) = commands(snippet(name).text)
    assert command.argv[:3] == ["python", "-m", "verl.trainer.main_ppo"] and command.env.get("VERL_PLATFORM") == "cpu"
    return command.env, placeholders(command.argv[3:], values)


class MainPpo:
    """``python -m verl.trainer.main_ppo`` started now; :meth:`result` waits for it and reads its run log."""

    def __init__(self, run_dir, *args: str, env: dict | None = None, metrics=None, steps: int = 1) -> None:
        self.run_dir = run_dir
        self.metrics = metrics or run_dir / "verl_metrics.jsonl"  # where verl's file logger should write
        self.cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *args, PARITY_REWARD, *SHORT,
                    f"trainer.total_training_steps={steps}", f"isocompute.run_dir={run_dir}"]
        self.out = open(run_dir.parent / "main_ppo.log", "w+")
        # a user's shell: no file-logger path left in this process's environment by an in-process prepare()
        base = {k: v for k, v in os.environ.items() if k != "VERL_FILE_LOGGER_PATH"}
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
        assert (self.run_dir / ".hydra" / "config.yaml").is_file()  # hydra's record in the run dir, as documented
        return lines[0]["header"], lines[1:]


def with_curation_avg(train, out) -> pd.DataFrame:
    """``train`` with curation's avg@16 in every row's extra_info (AVG_AT_16), written to ``out``."""
    frame = pd.read_parquet(train)
    frame["extra_info"] = [{**info, "difficulty_avg_at_k": AVG_AT_16[i % 4], "difficulty_k": 16}
                           for i, info in enumerate(frame["extra_info"])]
    frame.to_parquet(out)
    return frame


@pytest.fixture(scope="module")
def runs(tmp_path_factory, isocompute_cache, tiny_model_path) -> dict[str, MainPpo]:
    """Both runs, one after the other."""
    from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset

    train, val = write_arithmetic_dataset(isocompute_cache / "stock-data", ArithmeticConfig(train_size=64, val_size=8))
    values = {"M": str(tiny_model_path), "T": str(train), "V": str(val)}
    env, args = doc_command("stock-cpu-demo", values)
    root = tmp_path_factory.mktemp("recipe")
    started = {"recipe": MainPpo(root / "run", *args, env={**env, "VERL_FILE_LOGGER_ROOT": str(root / "logs")},
                                 metrics=root / "logs" / "isocompute" / "cpu_demo.jsonl")}  # <root>/<project>/<experiment>
    try:
        started["recipe"].proc.wait(timeout=900)
    except subprocess.TimeoutExpired:
        pass  # result() reports it
    pieces_root = tmp_path_factory.mktemp("pieces")
    frame = with_curation_avg(train, pieces_root / "train.parquet")
    env, args = doc_command("stock-pieces", {**values, "T": str(pieces_root / "train.parquet")})
    assert "+isocompute=[estimator,lr_rule,run_log]" in args
    # zero_variance: regularizers mode, nothing to mask; per_prompt_n: the rows in order, each seen once
    args = [a.replace("run_log]", "run_log,zero_variance,per_prompt_n]") for a in args]
    started.update({"pieces": MainPpo(pieces_root / "run", *args, "isocompute.lr.base_lr=1e-4", "data.shuffle=false",
                                      env=env, steps=PIECES_STEPS)})
    started["pieces"].frame = frame
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


def test_each_steps_n_i_are_the_allocation_for_its_prompts_and_sum_to_the_budget(runs):
    """Per-prompt n through verl's own main_ppo: each step's n_i are those the allocation gives for its prompts
    (from curation's avg@k in the rows), they sum to B_problem x n, and C counts every rollout."""
    from verl_isocompute.training.adaptive import AdaptiveN
    from verl_isocompute.training.per_prompt_n import allocate_rollouts, prior_from_curation

    header, rows = runs["pieces"].result()
    frame = runs["pieces"].frame
    assert header["per_prompt_n"] == {"n_min": 2, "n_max": None, "curation_weight": 1.0}
    assert [r["step"] for r in rows] == list(range(1, PIECES_STEPS + 1))
    for row in rows:  # data.shuffle=false: step t trains rows 8(t-1) .. 8t-1, each seen for the first time
        infos = frame["extra_info"].iloc[B_PROBLEM * (row["step"] - 1): B_PROBLEM * row["step"]]
        expected = allocate_rollouts([prior_from_curation(info) for info in infos], B_PROBLEM * N, 2, 4 * N)
        assert row["group_n_hist"] == AdaptiveN.histogram(expected) and len(row["group_n_hist"]) > 1
        assert sum(int(n) * count for n, count in row["group_n_hist"].items()) == B_PROBLEM * N
        assert row["isocompute/group_n_mean"] == N and row["isocompute/trained_per_group_max"] == max(expected)
        assert row["isocompute/expected_nonzero_groups"] >= row["isocompute/expected_nonzero_groups_fixed_n"]
        assert 0 <= row["isocompute/zero_var_rollout_share"] <= 1
    # C counts every rollout sampled: B_problem x n a step, whatever the split
    assert [r["rollouts"] for r in rows] == [B_PROBLEM * N * (s + 1) for s in range(PIECES_STEPS)]
