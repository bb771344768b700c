"""End to end: two real verl runs with the same seed give the same rollouts and validations (the CPU rollout's
reproducible sampling, docs/EVIDENCE.md), and our reward's format metrics reach the run log, verl's metrics and
the per-problem file.

The demo recipe with the tiny model, one step, validation before and after it, fp32 throughout; the training
rollouts are dumped too (``trainer.rollout_data_dir``). About three minutes on 2 cores (two runs).
"""

from __future__ import annotations

import json

import pytest
from verl_runs import run_recipe

pytestmark = pytest.mark.e2e
STEP_FILES = ("validation/0.jsonl", "validation/1.jsonl", "rollouts/1.jsonl")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, isocompute_cache, tiny_model_path):
    runs = []
    for name in ("first", "second"):
        run_dir = tmp_path_factory.mktemp("reproducible") / name
        runs.append(run_recipe(
            "cpu_demo", run_dir, "isocompute.model=tiny", "trainer.total_training_steps=1", "trainer.test_freq=1",
            "isocompute.cpu.dtype=float32", f"trainer.rollout_data_dir={run_dir / 'rollouts'}",
        ))
    return runs


def _responses(run, name: str) -> list[tuple[str, str]]:
    """(prompt, response) of every sample in a dump, sorted: verl orders a dump by its random problem uids, and
    a prompt's samples are the same set but may sit in its rows in another order when the agent loop sent
    them in two waves (cpu/hf_rollout.py)."""
    rows = [json.loads(line) for line in (run.run_dir / name).read_text().splitlines()]
    return sorted((row["input"], row["output"]) for row in rows)


def test_the_same_seed_gives_the_same_rollouts_and_validations(two_runs):
    first, second = two_runs
    for name in STEP_FILES:
        responses = _responses(first, name)
        assert responses == _responses(second, name), name
        assert len({r for _, r in responses}) > 1, name  # real samples, not one repeated string


def test_format_metrics_are_logged_at_every_validation(two_runs):
    run = two_runs[0]
    header, *rows = run.run_log
    assert header["header"]["rollout_dtype"] == "float32" and header["header"]["rollout_seed"] is not None
    validated = [row for row in rows if "val/avg@4" in row]
    assert [row["step"] for row in validated] == [0, 1]
    for row in validated:
        for rate in ("val/strict_acc", "val/answer_rate", "val/echo_rate", "val/lenient_acc"):
            assert 0.0 <= row[rate] <= 1.0, rate
        assert row["val/strict_acc"] == pytest.approx(row["val/avg@4"])
    verl_keys = set().union(*(r["data"] for r in run.verl_rows))
    assert {"val/answer_rate", "val/lenient_acc"} <= verl_keys
    records = [json.loads(line) for line in (run.run_dir / "validation_problems.jsonl").read_text().splitlines()]
    val_size = len(records) // 2
    assert [r["step"] for r in records] == [0] * val_size + [1] * val_size
    assert all(r["problem"] != "" and 0 <= r["correct"] <= r["answered"] <= r["k"] == 4 for r in records)
