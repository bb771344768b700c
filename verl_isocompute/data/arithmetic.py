"""A seeded arithmetic problem set in verl's data format, for the CPU demo and tests.

Problems come from reasoning-gym's ``basic_arithmetic`` generator (seeded, verifiable answers). Each row
has verl's columns: ``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model``
(``{"style": "rule", "ground_truth": ...}``) and ``extra_info``. The instruction asks for the final
answer in ``\\boxed{}``, which our math-verify reward extracts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from verl_isocompute import atomic

DATA_SOURCE = "isocompute/arithmetic"
INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."


@dataclass(frozen=True)
class ArithmeticSpec:
    """What to generate: sizes, seed and difficulty (terms and digits per number)."""

    train_size: int = 256
    val_size: int = 32
    seed: int = 0
    min_terms: int = 2
    max_terms: int = 2
    min_digits: int = 1
    max_digits: int = 1

    @property
    def name(self) -> str:
        return (
            f"arith-s{self.seed}-t{self.min_terms}{self.max_terms}-d{self.min_digits}{self.max_digits}"
            f"-{self.train_size}-{self.val_size}"
        )


def _problems(spec: ArithmeticSpec) -> list[dict]:
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(
        "basic_arithmetic",
        size=spec.train_size + spec.val_size,
        seed=spec.seed,
        min_terms=spec.min_terms,
        max_terms=spec.max_terms,
        min_digits=spec.min_digits,
        max_digits=spec.max_digits,
    )
    return [{"question": item["question"], "answer": str(item["answer"])} for item in dataset]


def to_verl_row(question: str, answer: str, split: str, index: int, data_source: str = DATA_SOURCE) -> dict:
    """One problem as a verl RL-dataset row."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def write_arithmetic_dataset(out_dir: Path, spec: ArithmeticSpec = ArithmeticSpec()) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``val.parquet`` under ``out_dir`` (reused when already there)."""
    import pandas as pd

    out_dir = Path(out_dir)
    train, val = out_dir / "train.parquet", out_dir / "val.parquet"
    if train.is_file() and val.is_file():
        return train, val
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = _problems(spec)
    rows_val = [to_verl_row(p["question"], p["answer"], "val", i) for i, p in enumerate(problems[: spec.val_size])]
    rows_train = [
        to_verl_row(p["question"], p["answer"], "train", i) for i, p in enumerate(problems[spec.val_size :])
    ]
    for rows, path in ((rows_train, train), (rows_val, val)):
        with atomic.replacing(path) as tmp:
            pd.DataFrame(rows).to_parquet(tmp, index=False)
    return train, val


def tokenizer_corpus(size: int = 4000, seed: int = 0) -> list[str]:
    """Text to train the tiny model's tokenizer on: chat-formatted arithmetic prompts and answers."""
    rng = random.Random(seed)
    lines = []
    for _ in range(size):
        a, b = rng.randint(-99, 99), rng.randint(-99, 99)
        op = rng.choice("+-*/")
        lines.append(
            f"<|im_start|>user\nCalculate {a} {op} {b}. {INSTRUCTION}<|im_end|>\n"
            f"<|im_start|>assistant\nThe answer is \\boxed{{{a + b}}}.<|im_end|>\n"
        )
    return lines
