"""Guided rows next to the originals (verl_isocompute.guided.placement) and the assistant-placement agent loop."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from verl_isocompute.guided import placement as G

SOLUTION = "Let x = 3.\nThen 2x = 6.\nAdd 1: 7.\nCheck: 7 - 1 = 6.\nSo 2x + 1 = 7.\nThe answer is \\boxed{7}.\n"


def frame(n: int = 8, bad: dict[int, object] | None = None) -> pd.DataFrame:
    bad = bad or {}
    rows = [
        {
            "data_source": "t",
            "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Problem {i}?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "7"},
            "extra_info": {"index": i, "solution": bad.get(i, SOLUTION)},
        }
        for i in range(n)
    ]
    return pd.DataFrame(rows)


def guided_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[[info["guided"] for info in df["extra_info"]]]


def test_user_placement_pope_one_to_one():
    result = G.guided_dataset(frame(), "extra_info.solution", placement=G.USER)
    df = result.frame
    assert (result.unguided, result.guided, len(df)) == (8, 8, 16)
    originals, guided = df.iloc[:8], guided_rows(df)
    assert [r["prompt"][-1]["content"] for r in originals.to_dict("records")] == [f"Problem {i}?" for i in range(8)]
    assert all(not info["guided"] and info["prefix_fraction"] == 0 for info in originals["extra_info"])
    for row in guided.to_dict("records"):
        info, turns = row["extra_info"], row["prompt"]
        assert info["placement"] == G.USER and 0 < info["prefix_fraction"] <= 0.25
        assert [t["role"] for t in turns] == ["system", "user"]  # the prefix is context in the user turn
        assert turns[-1]["content"] == f"Problem {info['index']}?\n\n{G.CONTINUE_INSTRUCTION}\n\n{info['guide_prefix']}"
        assert SOLUTION.startswith(info["guide_prefix"])
    assert "agent_name" not in df.columns  # verl's default loop for every row


def test_assistant_placement_names_our_agent_loop():
    df = G.guided_dataset(frame(), "extra_info.solution", placement=G.ASSISTANT).frame
    for row in df.to_dict("records"):
        if row["extra_info"]["guided"]:
            assert row["agent_name"] == G.PREFIX_AGENT
            assert row["prompt"][-1] == {"role": "assistant", "content": row["extra_info"]["guide_prefix"]}
            assert row["prompt"][-2]["content"] == f"Problem {row['extra_info']['index']}?"  # user turn untouched
        else:
            assert row["agent_name"] == G.DEFAULT_AGENT and row["prompt"][-1]["role"] == "user"


def test_ratio_and_skipped_problems():
    df = frame(10, bad={0: None, 1: 12, 2: "one line only"})
    result = G.guided_dataset(df, "extra_info.solution", ratio=0.5, seed=1)
    assert (result.eligible, result.wanted, result.guided) == (7, 5, 5)
    assert result.skipped == {"missing": 1, "not_text": 1, "one_step": 1}
    assert {i["index"] for i in guided_rows(result.frame)["extra_info"]} <= set(range(3, 10))
    short = G.guided_dataset(df, "extra_info.solution", ratio=1.0)
    assert short.guided == 7 and "only 7 problems have a usable prefix" in short.summary()
    again = G.guided_dataset(df, "extra_info.solution", ratio=0.5, seed=1)
    assert list(again.frame["extra_info"]) == list(result.frame["extra_info"])  # seeded draw


def test_missing_column_skips_everything_without_crashing():
    result = G.guided_dataset(frame(4), "extra_info.no_such_key")
    assert result.guided == 0 and result.skipped == {"missing": 4} and len(result.frame) == 4


@pytest.mark.parametrize(("kw", "match"), [({"placement": "system"}, "placement"), ({"ratio": 2}, "ratio"), ({"ratio": 0}, "ratio")])
def test_bad_options_name_the_option(kw, match):
    with pytest.raises(ValueError, match=match):
        G.guided_dataset(frame(2), "extra_info.solution", **kw)


def test_parquet_round_trip_keeps_prompts_and_marks(tmp_path):
    frame(6).to_parquet(tmp_path / "train.parquet")
    result = G.write_guided(tmp_path / "train.parquet", tmp_path / "guided.parquet", "extra_info.solution", placement=G.ASSISTANT)
    back = pd.read_parquet(tmp_path / "guided.parquet")
    assert len(back) == 12 and sum(i["guided"] for i in back["extra_info"]) == result.guided == 6
    assert json.loads(json.dumps(list(back["prompt"].iloc[-1]))) == result.frame["prompt"].iloc[-1]


# -- the agent loop of the assistant placement, with verl's own prompt builder and the tiny model's tokenizer --


def _prefix_loop(model_path):
    from transformers import AutoConfig, AutoTokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from verl_isocompute.training.guided_agent_loop import PrefixContinuationAgentLoop

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    loop = object.__new__(PrefixContinuationAgentLoop)  # only what ct_build_initial_tokens reads
    loop.tokenizer = tokenizer
    loop.loop = asyncio.new_event_loop()
    loop.rollout_config = SimpleNamespace(prompt_length=512)
    loop.continuous_token_builder = create_continuous_token_builder(tokenizer, hf_model_type=AutoConfig.from_pretrained(model_path).model_type)
    return loop


def test_agent_loop_prompt_is_the_unguided_prompt_plus_the_prefix(tiny_model_path):
    loop = _prefix_loop(tiny_model_path)
    user = [{"role": "user", "content": "Calculate 3 + 4."}]
    prefix = "We add 3 and 4.\n"
    build = loop.ct_build_initial_tokens
    unguided = loop.loop.run_until_complete(_base(loop, user))
    guided = loop.loop.run_until_complete(build(G.assistant_turn(user, prefix)))
    assert guided == unguided + loop.tokenizer.encode(prefix, add_special_tokens=False)
    assert loop.tokenizer.decode(guided).endswith(prefix)
    with pytest.raises(ValueError, match="assistant message to continue"):
        loop.loop.run_until_complete(build(user))


async def _base(loop, messages):
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    return await SingleTurnAgentLoop.ct_build_initial_tokens(loop, messages)


def test_originals_all_prefixed_none_and_the_real_ratio():
    """all: every problem unguided too (1:1 only if every problem has a prefix); prefixed: POPE's 1:1 over the
    guided problems; none: PrefixRL's prefixed problems only. The summary says the real ratio."""
    df = frame(10, bad={0: None, 1: "one line only"})
    all_ = G.guided_dataset(df, "extra_info.solution")
    assert (all_.unguided, all_.guided) == (10, 8) and all_.ratio == 0.8
    assert all_.summary().startswith("10 unguided + 8 guided rows (0.80 guided per unguided: 8 of 10 problems guided; "
                                     "only 8 problems have a usable prefix; originals all)")
    prefixed = G.guided_dataset(df, "extra_info.solution", originals=G.PREFIXED)
    assert (prefixed.unguided, prefixed.guided) == (8, 8)
    unguided = {i["index"] for i in prefixed.frame["extra_info"] if not i["guided"]}
    assert unguided == {i["index"] for i in prefixed.frame["extra_info"] if i["guided"]} == set(range(2, 10))
    none = G.guided_dataset(df, "extra_info.solution", originals=G.NONE, copies=2, fraction=0.6, max_fraction=0.6)
    assert none.unguided == 0 and none.guided == 16 and "no unguided row" in none.summary()
    per_problem = {}
    for info in none.frame["extra_info"]:
        per_problem.setdefault(info["problem_id"], set()).add(info["prefix_fraction"])
    assert len(per_problem) == 8 and all(len(v) == 2 for v in per_problem.values())  # two lengths per problem
    with pytest.raises(ValueError, match="originals='some'"):
        G.guided_dataset(df, "extra_info.solution", originals="some")


def test_every_row_carries_its_problems_id():
    from verl_isocompute.data.problems import row_problem_id

    df = frame(3)
    result = G.guided_dataset(df, "extra_info.solution", placement=G.ASSISTANT)
    ids = [row_problem_id(r) for r in df.to_dict("records")]
    assert [i["problem_id"] for i in result.frame["extra_info"]] == ids + ids  # originals, then their guided copies


def test_unsearched_problems_can_fall_back_to_the_fixed_fraction():
    from verl_isocompute.data.problems import row_problem_id

    df = frame(3)
    ids = [row_problem_id(r) for r in df.to_dict("records")]
    searched = {ids[0]: G.NO_PREFIX_FOUND, ids[1]: "one_step"}  # ids[2] not searched
    skip = G.guided_dataset(df, "extra_info.solution", searched=searched)
    assert skip.guided == 0 and dict(skip.skipped) == {G.NO_PREFIX_FOUND: 1, "one_step": 1, G.NOT_SEARCHED: 1}
    fallback = G.guided_dataset(df, "extra_info.solution", searched=searched, unsearched=G.FRACTION, fraction=0.5, max_fraction=0.5)
    assert (fallback.guided, fallback.fallback) == (1, 1) and "1 of them at the fixed fraction" in fallback.summary()
    with pytest.raises(ValueError, match="copies=2 with searched prefixes"):
        G.guided_dataset(df, "extra_info.solution", searched=searched, copies=2)
