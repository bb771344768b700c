"""End to end: a guided dataset (POPE user-turn rows, PrefixRL assistant-turn rows, unguided originals, in
one dataset) through the Hard recipe in a real CPU verl run (tiny model, 2 steps).

The assistant-turn rows use PrefixRL's own choices: two copies per problem at different prefix lengths, cut
by tokens from a kept trace (its token ids appended as they are, never re-tokenised), made with
``originals=none`` (prefixed problems only; the user-turn transform brings the originals).

What the actor workers train on is read back from the TransferQueue after the advantage step by a test
trainer (tests/fixtures/batch_dump_trainer.py): prompt ids, response ids, ``response_mask``, ``loss_mask``
and ``extra_info`` of every row. Checked: every guided row's prompt holds its prefix (assistant placement:
the prompt ids are exactly the unguided prompt's ids followed by the trace's kept ids, so no prefix token can
be a response token and none is under ``response_mask``); the masks cover exactly the response; validation
sees only the unguided problems; guided and unguided training accuracy are logged apart, and per placement.
The trainer's own run-time check (guided/check.py) ran on every assistant-placed row of every step; the run
log records the mixture as verl built it (every guided row made is trained on) and adds the spend files of
the guided data (``isocompute.guided.spend``) to C, counting only the problems of the training set (pinned
by hand-counted spend files that also hold validation and non-Hard problems).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from verl_runs import FIXTURES, PARITY_REWARD, Run, run_recipe

from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset
from verl_isocompute.data.problems import row_problem_id
from verl_isocompute.guided import placement as G
from verl_isocompute.guided import spend
from verl_isocompute.guided import traces as T
from verl_isocompute.training.guided_mixture import GuideConfig

pytestmark = pytest.mark.e2e
B_PROBLEM, N, STEPS = 8, 4, 2
S = spend.Spend


def with_solutions(path: Path) -> pd.DataFrame:
    """The arithmetic problems with a made-up multi-line oracle solution in ``extra_info.solution``."""
    df = pd.read_parquet(path)
    df["extra_info"] = [
        {**i, "solution": f"Step 1: read problem {i['index']}.\nStep 2: combine the numbers.\nThe result is {i['answer']}.\n"
                          f"So the answer is \\boxed{{{i['answer']}}}.\n"}
        for i in df["extra_info"]
    ]
    return df


def kept_traces(problems: pd.DataFrame, root: Path, tok, model: Path) -> Path:
    """A curation directory as ``curate --keep-correct`` writes it: one kept trace per problem whose token ids
    are the solution tokenised one character at a time, a valid tokenisation that is NOT the tokenizer's own
    (so a prefix re-tokenised from its text would differ from the kept ids)."""
    out = root / "curated"
    out.mkdir()
    writer = T.TraceWriter(out / T.TRACES_FILE)
    for row in problems.to_dict("records"):
        ids = [t for ch in row["extra_info"]["solution"] for t in tok.encode(ch, add_special_tokens=False)]
        writer.write(T.trace_lines(row_problem_id(row), 0, [{"sample": 0, "text": tok.decode(ids), "token_ids": ids}]))
    writer.close()
    (out / "curation.json").write_text(json.dumps({"model": str(model)}))
    return out


def mixed_dataset(problems: pd.DataFrame, traces: Path) -> tuple[pd.DataFrame, int]:
    """Originals + user-placed guided copies (one transform) + two assistant-placed token-cut copies per problem
    (another, with originals none); and how many guided rows were made."""
    kw = {"fraction": 0.5, "max_fraction": 0.5}
    assistant = GuideConfig(traces=str(traces), cut="tokens", copies=2, originals="none", **kw).build(problems)
    user = G.guided_dataset(problems, "extra_info.solution", placement=G.USER, **kw)
    assert user.guided == len(problems) and assistant.guided == 2 * len(problems) and assistant.unguided == 0
    made = pd.concat([assistant.frame, user.frame.assign(agent_name=G.DEFAULT_AGENT)], ignore_index=True)
    return made, assistant.guided + user.guided


def spend_files(root: Path, problems: pd.DataFrame) -> dict[str, S]:
    """Two spend files holding the training problems' spend and spend on problems the run does not train on
    (validation, non-Hard); returns the stages counted by hand over the training problems only."""
    trained = [row_problem_id(r) for r in problems.to_dict("records")]
    spend.write(root / "search", spend.PREFIX_SEARCH, {**{pid: S(4, 10) for pid in trained[:10]}, "val-1": S(8, 99)})
    spend.write(root / "traces", spend.CURATION, {**{pid: S(16, 100 + i) for i, pid in enumerate(trained)},
                                                 "easy-1": S(16, 500), "val-1": S(16, 400)})
    spend.write(root / "traces", spend.REJECTION_SAMPLING, {trained[0]: S(32, 700), "val-2": S(64, 900)})
    return {spend.PREFIX_SEARCH: S(40, 100), spend.CURATION: S(256, 16 * 100 + sum(range(16))),
            spend.REJECTION_SAMPLING: S(32, 700)}


@pytest.fixture(scope="module")
def guided_run(tmp_path_factory, isocompute_cache, tiny_model_path) -> tuple[Run, pd.DataFrame, Path]:
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("guided")
    train, val = write_arithmetic_dataset(root / "data", ArithmeticConfig(train_size=16, val_size=8))
    problems = with_solutions(train)
    mixed, made = mixed_dataset(problems, kept_traces(problems, root, AutoTokenizer.from_pretrained(tiny_model_path), tiny_model_path))
    mixed.to_parquet(root / "guided.parquet", index=False)
    dump = root / "batches"
    counted = spend_files(root, problems)
    run = run_recipe(
        "isocompute_hard", root / "run", "+platform=cpu", PARITY_REWARD, "isocompute.data.source=files",
        f"data.train_files={root / 'guided.parquet'}", f"data.val_files={val}", "data.max_prompt_length=256",
        f"trainer.total_training_steps={STEPS}", "trainer.val_before_train=false",
        "trainer.v1.trainer_mode=isocompute_batch_dump",
        f"isocompute.guided.spend=[{root / 'search'},{root / 'traces' / 'spend.json'}]",
        env={"PYTHONPATH": str(FIXTURES), "VERL_USE_EXTERNAL_MODULES": "batch_dump_trainer", "ISOCOMPUTE_BATCH_DUMP": str(dump)},
    )
    return run, problems, dump, mixed, made, counted


def dumped_rows(dump: Path) -> list[dict]:
    rows = [json.loads(line) for step in range(1, STEPS + 1) for line in (dump / f"{step}.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS * B_PROBLEM * N
    return rows


def test_prompts_hold_the_prefix_and_masks_cover_only_the_response(guided_run, tiny_model_path):
    from transformers import AutoTokenizer

    _, problems, dump, *_ = guided_run
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
            # prompt = unguided prompt + the trace's kept ids: every prefix token sits before the first response token
            prefix_ids = [int(t) for t in info["guide_prefix_ids"]]
            assert prompt == render(messages) + prefix_ids
        else:
            assert prompt == render(G.user_turn(messages, info["guide_prefix"]))
        assert response[: len(prefix_ids)] != prefix_ids  # the policy was not handed the prefix to re-emit
    assert min(seen.values()) > 0, seen  # both placements and unguided rows were in the batches trained on


def test_validation_sees_only_unguided_problems(guided_run):
    run, *_ = guided_run
    samples = [json.loads(x) for f in sorted((run.run_dir / "validation").glob("*.jsonl")) for x in f.read_text().splitlines()]
    assert samples
    for s in samples:  # every guided prompt holds "Step 1: read problem" (test_prompts_hold_the_prefix...)
        assert G.CONTINUE_INSTRUCTION not in s["input"] and "Step 1: read problem" not in s["input"]


def test_guided_and_unguided_accuracy_are_logged_apart(guided_run):
    run, _, dump, *_ = guided_run
    header, *rows = run.run_log
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
    run, _, dump, *_ = guided_run
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


def test_every_guided_row_made_is_trained_and_the_mixture_is_on_record(guided_run):
    """The mixture verl built (after its prompt filter) is the mixture made: 16 originals, 16 user-placed and
    32 assistant-placed guided rows; the run log says the real ratio (3 guided per unguided, not 1:1)."""
    run, problems, _, mixed, made, _ = guided_run
    header = run.run_log[0]["header"]
    assert header["dataset_size"] == len(mixed) == 16 + made
    assert header["guided_mixture"] == {"guided": made, "unguided": 16, "ratio": made / 16, "problems": 16,
                                        "problems_guided": 16, "placements": {G.USER: 16, G.ASSISTANT: 32}}


def test_assistant_copies_use_the_kept_token_ids_at_two_lengths(guided_run, tiny_model_path):
    """PrefixRL's token cut: the prompt ends with the trace's kept ids, which differ from the prefix text
    re-tokenised (the agent loop did not re-tokenise); each problem has two copies at different lengths."""
    from transformers import AutoTokenizer

    _, problems, dump, mixed, *_ = guided_run
    tok = AutoTokenizer.from_pretrained(tiny_model_path)
    lengths: dict[str, set[int]] = {}
    for info in mixed["extra_info"]:
        if info["placement"] == G.ASSISTANT:
            lengths.setdefault(info["problem_id"], set()).add(len(info["guide_prefix_ids"]))
    assert len(lengths) == 16 and all(len(v) == 2 for v in lengths.values())
    differ = 0
    for row in dumped_rows(dump):
        info = row["extra_info"]
        if info["placement"] != G.ASSISTANT:
            continue
        kept = [int(t) for t in info["guide_prefix_ids"]]
        assert row["prompts"][-len(kept):] == kept
        differ += kept != tok.encode(info["guide_prefix"], add_special_tokens=False)
    assert differ > 0  # re-tokenising the text would have given other ids


def test_run_log_counts_c_with_and_without_the_guidance_spend(guided_run):
    """Hand-counted: of the two spend files, only the 16 training problems' spend counts (not the validation
    or non-Hard problems'); rollouts_with_guidance adds rejection sampling + prefix search, rollouts_with_curation
    curation on top."""
    run, *_, counted = guided_run
    header, *rows = run.run_log
    assert header["header"]["guidance_spend"] == spend.as_json(counted) and header["header"]["spend_problems"] == 16
    guidance = counted[spend.PREFIX_SEARCH] + counted[spend.REJECTION_SAMPLING]  # 72 rollouts, 800 tokens
    assert (guidance.rollouts, guidance.tokens) == (72, 800) and counted[spend.CURATION] == S(256, 1720)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1)) and rows[-1]["rollouts"] == STEPS * B_PROBLEM * N
    for r in rows:  # rollouts stay training-only; the spend before training is added on top
        assert r["rollouts_with_guidance"] == r["rollouts"] + 72 and r["tokens_with_guidance"] == r["tokens"] + 800
        assert r["rollouts_with_curation"] == r["rollouts"] + 72 + 256 and r["tokens_with_curation"] == r["tokens"] + 800 + 1720
