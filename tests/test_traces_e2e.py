"""End to end on CPU with the tiny model: ``isocompute curate --keep-correct --pass-k`` through verl's rollout
servers (Ray + our hf server), then the same command again (resume).

The reward (tests/fixtures/counting_reward.py) accepts chosen calls per problem, so which samples are correct
is known while the responses are the model's own: k = 2, K = 6, six problems whose correct calls are
"1,2" (both of curation's k), "2" (one), "" (never), "3" (the first rejection round), "5" (the second),
"7" (beyond K).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from verl_runs import FIXTURES

from verl_isocompute.data.arithmetic import to_verl_row

pytestmark = pytest.mark.e2e
ACCEPT = {"a": "1,2", "b": "2", "c": "", "d": "3", "e": "5", "f": "7"}
K, PASS_K = 2, 6


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def curated(tmp_path_factory, tiny_model_path):
    root = tmp_path_factory.mktemp("traces")
    pd.DataFrame([to_verl_row(f"Problem {tag}.", f"{tag}|{calls}", "train", i) for i, (tag, calls) in enumerate(ACCEPT.items())]
                 ).to_parquet(root / "problems.parquet")
    out = root / "curated"
    cmd = [sys.executable, "-m", "verl_isocompute.commands.cli", "curate", "--data", str(root / "problems.parquet"),
           "--out", str(out), "--model", "tiny", "--k", str(K), "--keep-correct", "--pass-k", str(PASS_K),
           "--no-answer-check", "--easy", "0,1", "--sets", "easy", "--mixture-size", "2",
           f"reward.custom_reward_function.path={FIXTURES / 'counting_reward.py'}"]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr[-4000:]
    files = {name: (out / name).read_bytes() for name in ("samples.jsonl", "rejection.jsonl", "traces.jsonl.gz", "spend.json")}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    return {"out": out, "first": first, "again": again, "files": files, "model": tiny_model_path}




def test_traces_are_exactly_the_correct_samples_with_their_token_ids(curated):
    from transformers import AutoTokenizer

    out = curated["out"]
    samples = {r["id"]: r for r in _rows(out / "samples.jsonl")}
    rounds = _rows(out / "rejection.jsonl")
    with gzip.open(out / "traces.jsonl.gz", "rt") as handle:
        traces = [json.loads(line) for line in handle]
    correct = {(pid, 0, i) for pid, r in samples.items() for i, s in enumerate(r["scores"]) if s == 1}
    correct |= {(r["id"], r["round"], i) for r in rounds for i, s in enumerate(r["scores"]) if s == 1}
    assert {(t["id"], t["round"], t["sample"]) for t in traces} == correct and len(traces) == len(correct) == 5
    tokenizer = AutoTokenizer.from_pretrained(curated["model"])
    lengths = {(pid, 0): r["response_tokens"] for pid, r in samples.items()} | {(r["id"], r["round"]): r["response_tokens"] for r in rounds}
    for t in traces:
        assert t["token_ids"] and tokenizer.decode(t["token_ids"], skip_special_tokens=True) == t["text"]
        assert len(t["token_ids"]) == lengths[(t["id"], t["round"])][t["sample"]]
        assert t["stage"] == ("curation" if t["round"] == 0 else "rejection_sampling")


def test_pass_k_samples_only_unsolved_problems_and_stops_at_the_first_success(curated):
    out = curated["out"]
    samples = _rows(out / "samples.jsonl")
    rows = pd.read_parquet(out / "difficulty.parquet")
    # the difficulty is curation's first k only: a, b solved there; c..f at 0 whatever rejection found
    assert sorted(rows["correct"]) == [0, 0, 0, 0, 1, 2] and set(rows["k"]) == {K}
    rounds: dict[str, list[dict]] = {}
    for r in _rows(out / "rejection.jsonl"):
        rounds.setdefault(r["id"], []).append(r)
    first_k = {r["id"]: r["correct"] for r in samples}
    assert set(rounds) == {pid for pid, c in first_k.items() if c == 0}  # only problems with no success
    assert len(samples) == 6
    for rs in rounds.values():
        assert [r["round"] for r in rs] == list(range(1, len(rs) + 1)) and all(r["k"] == K for r in rs)
        assert all(r["correct"] == 0 for r in rs[:-1])  # a success ends a problem's rounds ...
        assert rs[-1]["correct"] > 0 or K + sum(r["k"] for r in rs) == PASS_K  # ... else it runs to K samples
    # "3": a success in round 1; "5": in round 2; "" and "7": none within K = 6 (two rounds each)
    assert sorted((len(rs), sum(r["correct"] for r in rs)) for rs in rounds.values()) == [(1, 1), (2, 0), (2, 0), (2, 1)]
    report = (out / "report.md").read_text()
    assert "Rejection sampling (pass@6): 4 problems" in report and "never change them" in report
    assert "traces: 5 correct responses of 4 problems" in curated["first"].stderr
    assert "pass@6: 2 of 4 unsolved problems found one" in curated["first"].stderr


def test_spend_equals_the_counted_rollouts_and_resume_samples_nothing(curated):
    out = curated["out"]
    samples, rounds = _rows(out / "samples.jsonl"), _rows(out / "rejection.jsonl")
    spend = json.loads((out / "spend.json").read_text())["stages"]
    assert spend["curation"] == {"rollouts": 6 * K, "tokens": sum(sum(r["response_tokens"]) for r in samples)}
    assert spend["rejection_sampling"] == {"rollouts": 14, "tokens": sum(sum(r["response_tokens"]) for r in rounds)}
    again = curated["again"]
    assert again.returncode == 0, again.stderr[-3000:]
    assert "6 cached, 0 to sample" in again.stderr and "sampling k=" not in again.stderr
    for name, data in curated["files"].items():  # nothing re-sampled, nothing counted twice
        assert (out / name).read_bytes() == data, name
