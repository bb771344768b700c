"""Built-in models and the generated arithmetic data set."""

from __future__ import annotations

import pandas as pd
import pytest

from verl_isocompute.cpu.models import (
    ModelError,
    build_tiny_tokenizer,
    check_model_path,
    ensure_model,
)
from verl_isocompute.data.arithmetic import ArithmeticConfig, write_arithmetic_dataset


def test_tiny_tokenizer_is_byte_level_chatml():
    tok = build_tiny_tokenizer()
    assert len(tok.encode("\n", add_special_tokens=False)) == 1  # transformers' Qwen2 check
    text = "Calculate (12 + -3) * 7. \\boxed{63} é€"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text  # byte-level: lossless on any text
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True)["input_ids"]
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_tiny_model_is_built_once_and_reused(tiny_model_path, isocompute_cache):
    stamp = (tiny_model_path / "model.safetensors").stat().st_mtime_ns
    again = ensure_model("tiny", root=isocompute_cache / "models")
    assert again == tiny_model_path and (again / "model.safetensors").stat().st_mtime_ns == stamp
    check_model_path(tiny_model_path)  # usable by verl: config + chat template


def test_unknown_model_names_the_fix(tmp_path):
    with pytest.raises(ModelError, match="no config.json.*local checkpoint"):
        check_model_path(tmp_path / "nope")
    with pytest.raises(ModelError, match="smollm2, tiny"):
        ensure_model("llama-70b", root=tmp_path)


def test_tokenizer_without_chat_template_is_rejected(tiny_model_path, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    target = tmp_path / "no-template"
    shutil.copytree(tiny_model_path, target)
    (target / "chat_template.jinja").unlink(missing_ok=True)
    tok = AutoTokenizer.from_pretrained(target)
    tok.chat_template = None
    tok.save_pretrained(target)
    (target / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ModelError, match="no chat template"):
        check_model_path(target)


def test_arithmetic_dataset_in_verl_format(tmp_path):
    spec = ArithmeticConfig(train_size=20, val_size=5, seed=3)
    train, val = write_arithmetic_dataset(tmp_path / "a", spec)
    df_train, df_val = pd.read_parquet(train), pd.read_parquet(val)
    assert len(df_train) == 20 and len(df_val) == 5
    assert set(df_train.columns) >= {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = df_train.iloc[0]
    assert row["prompt"][0]["role"] == "user" and "\\boxed{}" in row["prompt"][0]["content"]
    assert row["reward_model"]["ground_truth"] == row["extra_info"]["answer"]
    # seeded: the same spec gives the same problems
    train2, _ = write_arithmetic_dataset(tmp_path / "b", spec)
    assert pd.read_parquet(train2)["extra_info"].map(lambda e: e["question"]).tolist() == df_train["extra_info"].map(lambda e: e["question"]).tolist()


def test_worked_example_prompt_and_plain_operands(tmp_path):
    from verl_isocompute.data.arithmetic import WORKED_EXAMPLE, write_problems

    spec = ArithmeticConfig(max_digits=2, operators="+-", allow_parentheses=False, prompt="worked_example")
    df = pd.read_parquet(write_problems(tmp_path / "p.parquet", spec, size=50))
    assert len(df) == 50
    prompt = df.iloc[0]["prompt"]
    # the solved example is an earlier turn, the problem itself the last user turn, with the same instruction
    assert [m["role"] for m in prompt] == ["user", "assistant", "user"]
    assert prompt[1]["content"] == WORKED_EXAMPLE[1] and prompt[2]["content"].startswith(df.iloc[0]["extra_info"]["question"])
    for question, answer in zip(df["extra_info"].map(lambda e: e["question"]), df["reward_model"].map(lambda r: r["ground_truth"])):
        a, op, b = question.removeprefix("Calculate ").rstrip(".").split()
        assert op in "+-" and 0 <= int(a) <= 100 and 0 <= int(b) <= 100  # plain operands: no sign, no brackets
        assert int(answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
    # the demo's default set keeps its name (its cached files); another spec gets its own
    assert ArithmeticConfig().name == "arith-s0-t22-d11-256-32" and spec.name != ArithmeticConfig(max_digits=2).name
    with pytest.raises(ValueError, match="isocompute.data.prompt='fewshot'"):
        ArithmeticConfig(prompt="fewshot")


def test_products_task_multiplies_its_operands(tmp_path):
    """The products generator (docs/EVIDENCE.md's task): every answer is the product of the question's
    one-digit operands, the set has its own name (and cache), and an unknown task is refused by name."""
    from math import prod

    from verl_isocompute.data.arithmetic import write_problems

    spec = ArithmeticConfig(task="products", min_terms=3, max_terms=3, prompt="worked_example")
    df = pd.read_parquet(write_problems(tmp_path / "p.parquet", spec, size=40))
    for question, answer in zip(df["extra_info"].map(lambda e: e["question"]), df["reward_model"].map(lambda r: r["ground_truth"])):
        expression = question.removeprefix("Solve the following multiplication: ").split(".")[0]
        operands = [int(x) for x in expression.split(" * ")]
        assert len(operands) == 3 and all(0 <= x <= 9 for x in operands)
        assert int(answer) == prod(operands)
    assert spec.name != ArithmeticConfig(min_terms=3, max_terms=3, prompt="worked_example").name
    with pytest.raises(ValueError, match="isocompute.data.task='sums'"):
        ArithmeticConfig(task="sums")


def test_own_tasks_refuse_the_size_knobs_they_ignore():
    """two_digit_sums / two_digit_products fix their numbers' sizes: a digits or terms setting would be ignored
    silently, so it is refused (and the set's name differs from the reasoning-gym tasks')."""
    from verl_isocompute.data.arithmetic import ArithmeticConfig

    for knob in ({"max_digits": 3}, {"min_terms": 3, "max_terms": 3}, {"operators": "+"}, {"allow_parentheses": False}):
        with pytest.raises(ValueError, match=f"task=two_digit_sums: .*{next(iter(knob))}"):
            ArithmeticConfig(task="two_digit_sums", **knob)
    assert "two_digit_products" in ArithmeticConfig(task="two_digit_products", prompt="worked_example").name
