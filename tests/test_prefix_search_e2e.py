"""End to end on CPU with the tiny model: ``isocompute prefix-search --traces`` through verl's rollout machinery
(Ray + our hf server), then resumed, then ``isocompute guide --prefixes``.

The ladders are cut from PrefixRL traces, searched like oracle solutions: a curation directory as
``isocompute curate --keep-correct`` leaves it (one kept correct response per problem; here the worked
solution, with its token ids). The tiny random model never solves arithmetic, so the parity test reward (1
for an odd-length response) gives the search varied outcomes: with k = 2 a rung has no success a quarter of
the time, so some problems climb the ladder and some are exhausted. Checked: the prompt ids sent for the
assistant placement (the default with traces) are the unguided prompt's ids followed by the prefix's ids
(what training's agent loop sends); the chosen rung is the shortest with a success and every problem without
one sampled every rung with no success (POPE's rule, checked here from the records, not with the search's own
code); a second run samples nothing (no Ray, spend unchanged); the guide command gives each problem its
chosen prefix. The search of a solution column runs in the walkthrough test (test_guided_walkthrough_e2e.py).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
import sys
from pathlib import Path

import pandas as pd
import pytest
from verl_runs import PARITY_REWARD

from verl_isocompute.data.problems import problem_id, row_problem_id
from verl_isocompute.data.worked import worked_arithmetic
from verl_isocompute.guided import placement as G
from verl_isocompute.guided import traces as T
from verl_isocompute.guided.prefixes import prefix_ladder

pytestmark = pytest.mark.e2e
K, MAX_FRACTION = 2, 0.6


def _cli(*args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def kept_traces(data: pd.DataFrame, root: Path, tok) -> Path:
    """A curation directory holding one kept trace per problem (its worked solution and the token ids)."""
    out = root / "curated"
    out.mkdir()
    writer = T.TraceWriter(out / T.TRACES_FILE)
    for row in data.to_dict("records"):
        text = row["extra_info"]["solution"]
        writer.write(T.trace_lines(row_problem_id(row), 0, [{"sample": 0, "text": text, "token_ids": tok.encode(text)}]))
    writer.close()
    return out


@pytest.fixture(scope="module")
def searched(tmp_path_factory, tiny_model_path):
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("prefix_search")
    data = root / "hard.parquet"
    frame = worked_arithmetic(6, terms=5, digits=2, seed=3)
    frame.assign(extra_info=[{k: v for k, v in i.items() if k != "solution"} for i in frame["extra_info"]]).to_parquet(data, index=False)
    traces = kept_traces(frame, root, AutoTokenizer.from_pretrained(tiny_model_path))
    out = root / "search"
    command = ["prefix-search", data, "-o", out, "--traces", traces, "--k", K, "--max-fraction", MAX_FRACTION, "--model", "tiny",
               "data.max_prompt_length=160", "data.max_response_length=8", PARITY_REWARD]
    first = _cli(*command)
    assert first.returncode == 0, first.stderr[-4000:]
    spend_first = json.loads((out / "spend.json").read_text())
    lines_first = (out / "rungs.jsonl").read_text()
    second = _cli(*command)
    assert second.returncode == 0, second.stderr[-4000:]
    return {"data": data, "frame": frame, "out": out, "first": first, "second": second, "spend_first": spend_first,
            "lines_first": lines_first, "root": root}


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rungs.jsonl").read_text().splitlines()]


def test_assistant_prompts_are_the_unguided_prompt_then_the_prefix(searched, tiny_model_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    rows = {problem_id([dict(m) for m in r["prompt"]], r["reward_model"]["ground_truth"]): r
            for r in searched["frame"].to_dict("records")}
    records = _records(searched["out"])
    assert records
    for record in records:
        row = rows[record["id"]]
        unguided = tok.apply_chat_template([dict(m) for m in row["prompt"]], add_generation_prompt=True, tokenize=True,
                                           return_dict=False)
        prefix = prefix_ladder(row["extra_info"]["solution"], MAX_FRACTION)[record["rung"] - 1].text
        assert record["prompt_ids"] == list(unguided) + tok.encode(prefix, add_special_tokens=False)
        assert record["k"] == K and len(record["scores"]) == K and record["correct"] == sum(record["scores"])


def test_chosen_rungs_follow_popes_rule_on_the_recorded_outcomes(searched):
    table = pd.read_parquet(searched["out"] / "prefixes.parquet")
    outcomes: dict[str, dict[int, int]] = {}
    for record in _records(searched["out"]):
        outcomes.setdefault(record["id"], {})[record["rung"]] = record["correct"]
    assert len(table) == 6 and set(table["status"]) <= {"chosen", "exhausted"}
    for row in table.itertuples():
        seen = outcomes[row.problem_id]
        if row.status == "chosen":
            assert seen[row.rung] >= 1 and all(seen[r] == 0 for r in range(1, row.rung))
            assert row.guided_avg_at_k == seen[row.rung] / K and row.prefix_fraction <= MAX_FRACTION
            assert max(seen) == row.rung  # the search stopped at the first success
        else:
            assert sorted(seen) == list(range(1, row.n_rungs + 1)) and not any(seen.values())
    assert (searched["out"] / "prefix_search.png").stat().st_size > 0
    assert "POPE" in (searched["out"] / "report.md").read_text()


def test_spend_counts_every_rung_sample_once_and_a_rerun_samples_nothing(searched):
    records = _records(searched["out"])
    stage = searched["spend_first"]["stages"]["prefix_search"]
    assert stage == {"rollouts": K * len(records), "tokens": sum(sum(r["response_tokens"]) for r in records)}
    per_problem = searched["spend_first"]["problems"]["prefix_search"]  # what a run restricts to its training problems
    assert per_problem == {pid: [K * n, sum(sum(r["response_tokens"]) for r in records if r["id"] == pid)]
                           for pid, n in Counter(r["id"] for r in records).items()}
    assert "round 1:" in searched["first"].stderr
    second = searched["second"].stderr
    assert "all decided by the cached rung samplings" in second and "round 1:" not in second
    report = (searched["out"] / "report.md").read_text()  # what the samples were drawn in
    assert re.search(r"rollout `hf` in (float32|bfloat16) \(the rollout's dtype", report), report
    assert json.loads((searched["out"] / "spend.json").read_text()) == searched["spend_first"]
    assert (searched["out"] / "rungs.jsonl").read_text() == searched["lines_first"]


def test_guide_gives_each_problem_its_searched_prefix(searched):
    out = searched["root"] / "guided.parquet"
    proc = _cli("guide", searched["data"], "-o", out, "--prefixes", searched["out"], "--placement", "assistant")
    assert proc.returncode == 0, proc.stderr
    table = pd.read_parquet(searched["out"] / "prefixes.parquet").set_index("problem_id")
    guided = [r for r in pd.read_parquet(out).to_dict("records") if r["extra_info"]["guided"]]
    assert len(guided) == int((table["status"] == "chosen").sum())
    for row in guided:
        pid = problem_id([dict(m) for m in row["prompt"][:-1]], row["reward_model"]["ground_truth"])
        assert row["prompt"][-1]["content"] == table.at[pid, "prefix"] and row["agent_name"] == G.PREFIX_AGENT
    if (table["status"] != "chosen").any():
        assert "no_prefix_found" in proc.stdout
    wrong = _cli("guide", searched["data"], "-o", out, "--prefixes", searched["out"], "--placement", "user")
    assert wrong.returncode == 2 and "searched with placement assistant" in wrong.stderr
