"""A seeded arithmetic problem set in verl's data format, for the CPU demo and tests.

Problems come from reasoning-gym's ``basic_arithmetic`` and ``products`` generators (seeded, verifiable answers),
or from our own two tasks, two-digit sums and two-digit by one-digit products (:data:`OWN_TASKS`), whose
problems never share an answer-determining fact (the evidence's tasks, docs/EVIDENCE.md). Each row
has verl's columns: ``data_source``, ``prompt`` (chat messages), ``ability``, ``reward_model``
(``{"style": "rule", "ground_truth": ...}``) and ``extra_info``. The instruction asks for the final
answer in ``\\boxed{}``, which our math-verify reward extracts.

Two prompt styles. ``instruction`` (the demo's): the problem and the instruction. ``worked_example``: the
same, after one solved problem of the same kind as an earlier chat turn (a one-shot prompt). SmolLM2-135M
mostly answers the first style with a bare ``4 + 3 = 7`` and no box, which the reward cannot read, so its
score measures the answer format more than the arithmetic; with the example it writes the box (the
evidence runs of docs/EVIDENCE.md use it). The example is fixed and never one of the generated problems'
answers' source: it is part of the prompt, like the instruction.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from verl_isocompute import _compat, atomic

DATA_SOURCE = "isocompute/arithmetic"
INSTRUCTION = "Solve the problem. Put the final answer in \\boxed{}."
PROMPT_STYLES = ("instruction", "worked_example")
# reasoning-gym generators: sums and differences ("Calculate 7 - 2."), or products only ("Solve the following
# multiplication: 3 * 4. Give only the result as your final answer."; operands 0..9 with one digit)
# Our own two tasks whose problems share no answer-determining fact (data/facts.py): two-digit sums
# ("Calculate 47 + 38.") and two-digit by one-digit products ("Calculate 23 * 7."), the evidence's tasks
# (docs/EVIDENCE.md): each problem is a fact of its own, so a held-out problem cannot be recalled from training.
OWN_TASKS = ("two_digit_sums", "two_digit_products")
TASKS = ("basic_arithmetic", "products", *OWN_TASKS)
# The one solved problem the worked_example style shows first (question, answer turn).
WORKED_EXAMPLE = ("Calculate 7 - 2.", "7 - 2 = 5. The answer is \\boxed{5}.")
# Per task, an example of the same task (the own tasks' generators never draw its fact).
WORKED_EXAMPLES = {
    "basic_arithmetic": WORKED_EXAMPLE,
    "products": WORKED_EXAMPLE,
    "two_digit_sums": ("Calculate 25 + 14.", "25 + 14 = 39. The answer is \\boxed{39}."),
    "two_digit_products": ("Calculate 12 * 3.", "12 * 3 = 36. The answer is \\boxed{36}."),
}


# The settings classes' one suffix (0.2): the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"ArithmeticSpec": "ArithmeticConfig"})


@dataclass(frozen=True)
class ArithmeticConfig:
    """What to generate: sizes, seed and difficulty (terms and digits per number)."""

    train_size: int = 256
    val_size: int = 32
    seed: int = 0
    min_terms: int = 2
    max_terms: int = 2
    min_digits: int = 1
    max_digits: int = 1
    operators: str = "+-*/"  # reasoning-gym's default: all four
    # reasoning-gym's switch between its two generators: True draws signed operands and may bracket or
    # negate them ("( -9 - 8 )", "2 - -1"); False gives plain "a + b" with operands in 0..10**digits
    allow_parentheses: bool = True
    prompt: str = "instruction"  # one of PROMPT_STYLES
    task: str = "basic_arithmetic"  # one of TASKS (products: operators and allow_parentheses do not apply)
    # True: no two problems share their answer-determining fact (reorderings, x1 / +0 variants), and none is
    # trivial (a factor 0, one operand left): data/facts.py. The generator draws until it has enough.
    distinct_facts: bool = False

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"isocompute.data.task={self.task!r}: use one of {', '.join(TASKS)}")
        if self.prompt not in PROMPT_STYLES:
            raise ValueError(f"isocompute.data.prompt={self.prompt!r}: use one of {', '.join(PROMPT_STYLES)}")
        if not self.operators or set(self.operators) - set("+-*/"):
            raise ValueError(f"isocompute.data.operators={self.operators!r}: use some of + - * /")
        if self.task in OWN_TASKS:  # their sizes are part of the task: a knob set here would be ignored
            knobs = ("min_terms", "max_terms", "min_digits", "max_digits", "operators", "allow_parentheses")
            changed = [k for k in knobs if getattr(self, k) != type(self).__dataclass_fields__[k].default]
            if changed:
                raise ValueError(f"isocompute.data.task={self.task}: its numbers have fixed sizes, so "
                                 f"{', '.join(changed)} do not apply; leave them unset")
        if self.task == "products":  # reasoning-gym's products generator draws * only, unbracketed
            changed = [k for k in ("operators", "allow_parentheses")
                       if getattr(self, k) != type(self).__dataclass_fields__[k].default]
            if changed:
                raise ValueError(f"isocompute.data.task=products multiplies only, so "
                                 f"{', '.join(f'isocompute.data.{k}' for k in changed)} would be ignored: leave it "
                                 "unset, or use task=basic_arithmetic with operators='*'")

    @property
    def name(self) -> str:
        extra = ""  # the demo's default set keeps the name (and the cached files) it always had
        if (self.operators, self.allow_parentheses, self.prompt) != ("+-*/", True, "instruction"):
            ops = "".join({"+": "a", "-": "s", "*": "m", "/": "d"}[o] for o in self.operators)
            extra = f"-o{ops}-p{int(self.allow_parentheses)}-{self.prompt}"
        if self.task != TASKS[0]:
            extra = f"-{self.task}-{self.prompt}"
        if self.distinct_facts:
            extra += "-facts"
        return (
            f"arith-s{self.seed}-t{self.min_terms}{self.max_terms}-d{self.min_digits}{self.max_digits}"
            f"-{self.train_size}-{self.val_size}{extra}"
        )


# distinct_facts draws this many times the problems asked for, once: a space with fewer facts is an error.
DISTINCT_FACTS_OVERDRAW = 8


def own_task_problems(task: str, size: int | None, seed: int) -> list[dict]:
    """``size`` problems of one of :data:`OWN_TASKS` (None: every fact of the task), seeded, each with a fact no
    other shares, none the worked example's: sums of two numbers in 10..99, or a number in 10..99 times one in
    2..9 (x0 and x1 would be trivial facts). Raises when the task has fewer facts than asked for (4,094 sums,
    719 products)."""
    from verl_isocompute.data.facts import fact_group

    rng = random.Random(seed)
    if task == "two_digit_sums":
        space = [(a, b) for a in range(10, 100) for b in range(a, 100)]
        op, value = "+", lambda a, b: a + b
    elif task == "two_digit_products":
        space = [(a, b) for a in range(10, 100) for b in range(2, 10)]
        op, value = "*", lambda a, b: a * b
    else:
        raise ValueError(f"{task!r} is not one of {OWN_TASKS}")
    taken = {fact_group(WORKED_EXAMPLES[task][0])}
    space = [pair for pair in space if fact_group(f"{pair[0]} {op} {pair[1]}") not in taken]
    if size is not None and size > len(space):
        raise ValueError(f"{task} has {len(space)} distinct facts; {size} problems asked for")
    problems = []
    for a, b in rng.sample(space, len(space) if size is None else size):
        if task == "two_digit_sums" and rng.random() < 0.5:
            a, b = b, a  # either order: the fact is the same
        problems.append({"question": f"Calculate {a} {op} {b}.", "answer": str(value(a, b))})
    return problems


def _problems(spec: ArithmeticConfig, size: int | None = None) -> list[dict]:
    size = size or spec.train_size + spec.val_size
    if spec.task in OWN_TASKS:
        return own_task_problems(spec.task, size, spec.seed)
    import reasoning_gym

    settings = dict(size=size * (DISTINCT_FACTS_OVERDRAW if spec.distinct_facts else 1), seed=spec.seed,
                    min_terms=spec.min_terms, max_terms=spec.max_terms, min_digits=spec.min_digits,
                    max_digits=spec.max_digits)
    if spec.task == "basic_arithmetic":  # the products generator has no operators or brackets
        settings.update(operators=tuple(spec.operators), allow_parentheses=spec.allow_parentheses)
    dataset = reasoning_gym.create_dataset(spec.task, **settings)
    problems = [{"question": item["question"], "answer": str(item["answer"])} for item in dataset]
    if not spec.distinct_facts:
        return problems
    import pandas as pd

    from verl_isocompute.data.facts import first_of_each_fact

    distinct = first_of_each_fact(pd.DataFrame(problems)).head(size)
    if len(distinct) < size:
        raise ValueError(
            f"isocompute.data.distinct_facts: {spec.task} with {spec.min_terms}-{spec.max_terms} terms of "
            f"{spec.min_digits}-{spec.max_digits} digits gave {len(distinct)} problems with distinct non-trivial "
            f"facts, {size} wanted: ask for fewer problems or allow more digits or terms"
        )
    return distinct[["question", "answer"]].to_dict("records")


def chat_prompt(question: str, style: str = "instruction", task: str = "basic_arithmetic") -> list[dict]:
    """The chat messages of one problem in a prompt style (:data:`PROMPT_STYLES`); the worked example is the
    task's (:data:`WORKED_EXAMPLES`)."""
    turns = []
    if style == "worked_example":
        example_question, example_answer = WORKED_EXAMPLES[task]
        turns = [{"role": "user", "content": f"{example_question} {INSTRUCTION}"},
                 {"role": "assistant", "content": example_answer}]
    return [*turns, {"role": "user", "content": f"{question} {INSTRUCTION}"}]


def to_verl_row(question: str, answer: str, split: str, index: int, data_source: str = DATA_SOURCE,
                prompt: str = "instruction", task: str = "basic_arithmetic") -> dict:
    """One problem as a verl RL-dataset row."""
    return {
        "data_source": data_source,
        "prompt": chat_prompt(question, prompt, task),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": split, "index": index, "question": question, "answer": answer},
    }


def write_arithmetic_dataset(out_dir: Path, spec: ArithmeticConfig = ArithmeticConfig()) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``val.parquet`` under ``out_dir`` (reused when already there)."""
    import pandas as pd

    out_dir = Path(out_dir)
    train, val = out_dir / "train.parquet", out_dir / "val.parquet"
    if train.is_file() and val.is_file():
        return train, val
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = _problems(spec)
    rows_val = [
        to_verl_row(p["question"], p["answer"], "val", i, prompt=spec.prompt, task=spec.task) for i, p in enumerate(problems[: spec.val_size])
    ]
    rows_train = [
        to_verl_row(p["question"], p["answer"], "train", i, prompt=spec.prompt, task=spec.task)
        for i, p in enumerate(problems[spec.val_size :])
    ]
    for rows, path in ((rows_train, train), (rows_val, val)):
        atomic.write_parquet(path, pd.DataFrame(rows))
    return train, val


def write_problems(path: Path, spec: ArithmeticConfig, size: int) -> Path:
    """``size`` generated problems in one verl parquet file, for ``isocompute curate --data`` (reused when there)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [to_verl_row(p["question"], p["answer"], "curate", i, prompt=spec.prompt, task=spec.task)
                for i, p in enumerate(_problems(spec, size))]
        atomic.write_parquet(path, pd.DataFrame(rows))
    return path


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
