"""End to end: a guided dataset (POPE user-turn rows, PrefixRL assistant-turn rows, unguided originals, in
one dataset) through the Hard recipe in a real CPU verl run (tiny model, 2 steps).

What the actor workers train on is read back from the TransferQueue after the advantage step by a test
trainer (tests/fixtures/batch_dump_trainer.py): prompt ids, response ids, ``response_mask``, ``loss_mask``
and ``extra_info`` of every row. Checked: every guided row's prompt holds its prefix (assistant placement:
the prompt ids are exactly the unguided prompt's ids followed by the prefix's ids, so no prefix token can be
a response token and none is under ``response_mask``); the masks cover exactly the response; validation
sees only the unguided problems; guided and unguided training accuracy are logged apart, and per placement.
The trainer's own run-time check (guided/check.py) ran on every assistant-placed row of every step, and the
run log adds the spend files of the guided data (``isocompute.guided.spend``) to C.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from verl_runs import FIXTURES, PARITY_REWARD, Run, run_recipe

from verl_isocompute.data.arithmetic import ArithmeticSpec, write_arithmetic_dataset
from verl_isocompute.guided import placement as G
from verl_isocompute.guided import spend

pytestmark = pytest.mark.e2e
B_PROBLEM, N, STEPS = 8, 4, 2
# What the (simulated) tools that made the guided data spent before training: two spend files.
SPENT = {spend.PREFIX_SEARCH: spend.Spend(96, 12_345), spend.REJECTION_SAMPLING: spend.Spend(512, 70_000)}


def with_solutions(path: Path) -> pd.DataFrame:
    """The arithmetic problems with a made-up multi-line oracle solution in ``extra_info.solution``."""
    df = pd.read_parquet(path)
    df["extra_info"] = [
        {**i, "solution": f"Step 1: read problem {i['index']}.\nStep 2: combine the numbers.\nThe result is {i['answer']}.\n"
                          f"So the answer is \\boxed{{{i['answer']}}}.\n"}
        for i in df["extra_info"]
    ]
    return df


def mixed_dataset(problems: pd.DataFrame) -> pd.DataFrame:
    """Originals + assistant-placed guided copies (one transform) + user-placed guided copies (another)."""
    kw = {"fraction": 0.5, "max_fraction": 0.5}
    assistant = G.guided_dataset(problems, "extra_info.solution", placement=G.ASSISTANT, **kw)
    user = G.guided_dataset(problems, "extra_info.solution", placement=G.USER, **kw)
    assert assistant.guided == user.guided == len(problems)
    user_rows = user.frame[[i["guided"] for i in user.frame["extra_info"]]].assign(agent_name=G.DEFAULT_AGENT)
    return pd.concat([assistant.frame, user_rows], ignore_index=True)


@pytest.fixture(scope="module")
def guided_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> tuple[Run, pd.DataFrame, Path]:
    root = tmp_path_factory.mktemp("guided")
    train, val = write_arithmetic_dataset(root / "data", ArithmeticSpec(train_size=16, val_size=8))
    problems = with_solutions(train)
    mixed = mixed_dataset(problems)
    mixed.to_parquet(root / "guided.parquet", index=False)
    dump = root / "batches"
    spend.write(root / "search", spend.PREFIX_SEARCH, SPENT[spend.PREFIX_SEARCH])
    spend.write(root / "traces", spend.REJECTION_SAMPLING, SPENT[spend.REJECTION_SAMPLING])
    run = run_recipe(
        "isocompute_hard", root / "run", "+platform=cpu", PARITY_REWARD, "isocompute.data.source=files",
        f"data.train_files={root / 'guided.parquet'}", f"data.val_files={val}", "data.max_prompt_length=256",
        f"trainer.total_training_steps={STEPS}", "trainer.val_before_train=false",
        "trainer.v1.trainer_mode=isocompute_batch_dump",
        f"isocompute.guided.spend=[{root / 'search'},{root / 'traces' / 'spend.json'}]",
        env={"PYTHONPATH": str(FIXTURES), "VERL_USE_EXTERNAL_MODULES": "batch_dump_trainer", "ISOCOMPUTE_BATCH_DUMP": str(dump)},
    )
    return run, problems, dump


def dumped_rows(dump: Path) -> list[dict]:
    rows = [json.loads(line) for step in range(1, STEPS + 1) for line in (dump / f"{step}.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS * B_PROBLEM * N
    return rows


def test_prompts_hold_the_prefix_and_masks_cover_only_the_response(guided_run, tiny_model_path):
    from transformers import AutoTokenizer

    _, problems, dump = guided_run
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    originals = {i["index"]: list(p) for i, p in zip(problems["extra_info"], problems["prompt"], strict=True)}

    def render(messages) -> list[int]:
        return list(tok.apply_chat_template([dict(m) for m in messages], add_generation_prompt=True, tokenize=True, return_dict=False))

    seen = {"": 0, G.USER: 0, G.ASSISTANT: 0}
    for row in dumped_rows(dump):
        info, prompt, response = row["extra_info"], row["prompts"], row["responses"]
        seen[info["placement"]] += 1
        # the masks are over the response positions only, and cover what the policy generated
        assert len(row["response_mask"]) == len(row["loss_mask"]) == len(response) > 0
        assert sum(row["response_mask"]) == sum(row["loss_mask"]) > 0
        messages = originals[info["index"]]
        if not info["guided"]:
            assert prompt == render(messages)
            continue
        prefix_ids = tok.encode(info["guide_prefix"], add_special_tokens=False)
        assert info["guide_prefix"] in tok.decode(prompt)
        if info["placement"] == G.ASSISTANT:
            # prompt = unguided prompt + prefix: every prefix token sits before the first response token
            assert prompt == render(messages) + prefix_ids
        else:
            assert prompt == render(G.user_turn(messages, info["guide_prefix"]))
        assert response[: len(prefix_ids)] != prefix_ids  # the policy was not handed the prefix to re-emit
    assert min(seen.values()) > 0, seen  # both placements and unguided rows were in the batches trained on


def test_validation_sees_only_unguided_problems(guided_run):
    run, _, _ = guided_run
    samples = [json.loads(x) for f in sorted((run.run_dir / "validation").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert samples
    for s in samples:  # every guided prompt holds "Step 1: read problem" (test_prompts_hold_the_prefix...)
        assert G.CONTINUE_INSTRUCTION not in s["input"] and "Step 1: read problem" not in s["input"]


def test_guided_and_unguided_accuracy_are_logged_apart(guided_run):
    run, _, dump = guided_run
    header, *rows = run.run_log
    assert header["header"]["dataset_size"] == 16 * 3  # nothing filtered: originals + two guided copies each
    for step in range(1, STEPS + 1):
        batch = [json.loads(x) for x in (dump / f"{step}.jsonl").read_text().splitlines()]
        row = next(r for r in rows if r["step"] == step)
        for kind, rows_of_kind in (("guided", [b for b in batch if b["extra_info"]["guided"]]),
                                   ("unguided", [b for b in batch if not b["extra_info"]["guided"]])):
            assert row[f"isocompute/{kind}_rows"] == len(rows_of_kind)
            if rows_of_kind:  # the parity reward's acc is its score
                mean = sum(b["score"] for b in rows_of_kind) / len(rows_of_kind)
                assert row[f"isocompute/{kind}/train_acc"] == pytest.approx(mean)


def test_trainer_checked_every_assistant_prefix_and_logs_each_placement(guided_run):
    run, _, dump = guided_run
    rows = {r["step"]: r for r in run.run_log[1:]}
    for step in range(1, STEPS + 1):
        batch = [json.loads(x) for x in (dump / f"{step}.jsonl").read_text().splitlines()]
        row = rows[step]
        assistant = [b for b in batch if b["extra_info"]["placement"] == G.ASSISTANT]
        assert row["isocompute/guided_prefix_checked"] == len(assistant) > 0  # every assistant-placed row, each step
        for placement in G.PLACEMENTS:
            of_kind = [b for b in batch if b["extra_info"]["placement"] == placement]
            assert row[f"isocompute/guided_{placement}_rows"] == len(of_kind) > 0
            assert row[f"isocompute/guided_{placement}/train_acc"] == pytest.approx(sum(b["score"] for b in of_kind) / len(of_kind))


def test_run_log_counts_c_with_and_without_the_guidance_spend(guided_run):
    run, _, _ = guided_run
    header, *rows = run.run_log
    assert header["header"]["guidance_spend"] == spend.as_json(SPENT)
    total = sum(SPENT.values(), spend.Spend())
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)) and rows[-1]["rollouts"] == STEPS * B_PROBLEM * N
    for r in rows:  # rollouts stay training-only; the guided data's spend is added on top
        assert r["rollouts_with_guidance"] == r["rollouts"] + total.rollouts
        assert r["tokens_with_guidance"] == r["tokens"] + total.tokens
