"""Multi-term arithmetic with a worked oracle solution, one step per line: data for guided exploration.

POPE (arXiv 2601.18779) and PrefixRL (arXiv 2601.18795) need a reference solution per problem to cut
prefixes from. This generator writes, deterministically from a seed, chains such as ``47 + 86 - 39 + 72``
with the solution the prefix ladder cuts at line ends (:mod:`verl_isocompute.guided.prefixes`)::

    47 + 86 = 133
    133 - 39 = 94
    94 + 72 = 166
    The answer is \\boxed{166}.

Each line is one left-to-right step, so rung r of the ladder hands over the first r partial results and
the policy must finish the rest. Rows are in verl's format (the instruction of the arithmetic demo set,
answer in ``\\boxed{}``), the solution in ``extra_info.solution``. Long chains of 2-3 digit numbers are
hard for a 135M model (0 of k unguided), the coverage benchmark's Hard set
(``benchmarks/bench_guided_coverage.py``).

On the command line: ``isocompute curate --generate worked [--gen-arg terms=5 --gen-arg digits=2]`` and, in a
recipe, ``isocompute.data.source=worked`` (train and validation files generated once into the cache, as the
arithmetic demo set; what ``+platform=cpu`` generates for a guided recipe).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from verl_isocompute import _compat, atomic
from verl_isocompute.data.arithmetic import to_verl_row

DATA_SOURCE = "isocompute/worked_arithmetic"


def worked_problem(rng: random.Random, terms: int, digits: int) -> tuple[str, str, str]:
    """(question, answer, worked solution) of one chain of ``terms`` numbers of ``digits`` digits."""
    numbers = [rng.randint(10 ** (digits - 1), 10**digits - 1) for _ in range(terms)]
    ops = [rng.choice("+-") for _ in range(terms - 1)]
    question = "Calculate " + " ".join([str(numbers[0])] + [f"{o} {n}" for o, n in zip(ops, numbers[1:])]) + "."
    total, lines = numbers[0], []
    for op, n in zip(ops, numbers[1:]):
        result = total + n if op == "+" else total - n
        lines.append(f"{total} {op} {n} = {result}")
        total = result
    lines.append(f"The answer is \\boxed{{{total}}}.")
    return question, str(total), "\n".join(lines) + "\n"


def worked_arithmetic(size: int, terms: int = 4, digits: int = 2, seed: int = 0, split: str = "train") -> pd.DataFrame:
    """``size`` problems in verl's format with ``extra_info.solution`` (seeded, deterministic)."""
    if size < 1 or terms < 2 or digits < 1:
        raise ValueError(f"size={size}, terms={terms}, digits={digits}: need size >= 1, terms >= 2, digits >= 1")
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        question, answer, solution = worked_problem(rng, terms, digits)
        row = to_verl_row(question, answer, split, i, data_source=DATA_SOURCE)
        row["extra_info"]["solution"] = solution
        rows.append(row)
    return pd.DataFrame(rows)


# The settings classes' one suffix (0.2): the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"WorkedSpec": "WorkedConfig"})


@dataclass(frozen=True)
class WorkedConfig:
    """The generated worked set of ``isocompute.data.source=worked``: sizes, seed, chain length and digits."""

    train_size: int = 256
    val_size: int = 32
    seed: int = 0
    terms: int = 5  # numbers per chain: 4 steps, so a prefix capped at a quarter leaves most of the work
    digits: int = 2

    @property
    def name(self) -> str:
        return f"worked-s{self.seed}-t{self.terms}-d{self.digits}-{self.train_size}-{self.val_size}"


def write_worked_dataset(out_dir: Path, spec: WorkedConfig = WorkedConfig()) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``val.parquet`` under ``out_dir`` (reused when already there): one seeded
    draw, the first ``val_size`` problems held out for validation."""
    out_dir = Path(out_dir)
    train, val = out_dir / "train.parquet", out_dir / "val.parquet"
    if train.is_file() and val.is_file():
        return train, val
    out_dir.mkdir(parents=True, exist_ok=True)
    problems = worked_arithmetic(spec.train_size + spec.val_size, spec.terms, spec.digits, spec.seed)
    frames = {val: problems.iloc[: spec.val_size], train: problems.iloc[spec.val_size:]}
    for path, frame in frames.items():
        split = "val" if path == val else "train"
        frame = frame.reset_index(drop=True).assign(
            extra_info=[{**info, "split": split, "index": i} for i, info in enumerate(frame["extra_info"])])
        atomic.write_parquet(path, frame)
    return train, val
