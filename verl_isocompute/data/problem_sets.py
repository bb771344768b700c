"""Problem files for curation and the prefix search: verl's RL parquet rows loaded, generated (reasoning-gym, or
our worked arithmetic) and screened (no ground truth, an answer the verifier cannot parse, duplicates: counted
and skipped with the reason).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from verl_isocompute.data.problems import ground_truth_of, messages_of, problem_id
from verl_isocompute.errors import CurateError


def load_parquet(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Rows of verl RL-dataset parquet files (prompt, reward_model, data_source, ...), concatenated."""
    frames = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise CurateError(f"{path} does not exist; pass parquet files in verl's format (--data FILE ...)")
        try:
            frames.append(pd.read_parquet(path))
        except Exception as exc:  # pyarrow raises several types for a file that is not parquet
            raise CurateError(f"{path} is not a readable parquet file: {exc}") from None
    if not frames:
        raise CurateError("no data: pass --data FILE.parquet ... or --generate TASK")
    df = pd.concat(frames, ignore_index=True)
    for column in ("prompt", "reward_model"):
        if column not in df.columns:
            raise CurateError(
                f"the data has no {column!r} column (columns: {list(df.columns)}); verl's format needs prompt "
                "(chat messages) and reward_model.ground_truth"
            )
    return df


WORKED = "worked"  # our generator with a worked solution per problem (verl_isocompute.data.worked), not reasoning-gym's


def generate(task: str, size: int, seed: int = 0, **kwargs: Any) -> pd.DataFrame:
    """A seeded, offline problem set from a reasoning-gym generator, as verl rows; ``worked``: arithmetic chains
    with a worked solution in ``extra_info.solution`` (options ``terms``, ``digits``), for guided training."""
    from verl_isocompute.data.arithmetic import to_verl_row

    if task == WORKED:
        from verl_isocompute.data.worked import worked_arithmetic

        unknown = sorted(set(kwargs) - {"terms", "digits"})
        if unknown:
            raise CurateError(f"--generate worked: unknown --gen-arg {', '.join(unknown)}; it takes terms and digits")
        try:
            return worked_arithmetic(size, seed=seed, **{k: int(v) for k, v in kwargs.items()})
        except (TypeError, ValueError) as exc:
            raise CurateError(f"--generate worked: {exc}") from None

    try:
        import reasoning_gym
    except ImportError:
        raise CurateError("--generate needs reasoning-gym: pip install reasoning-gym==0.1.25") from None
    if size < 1:
        raise CurateError(f"--size must be at least 1, got {size}")
    try:
        dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **kwargs)
    except Exception as exc:  # unknown task names and bad generator options
        raise CurateError(f"reasoning-gym task {task!r} with {kwargs}: {exc}") from None
    rows = [
        to_verl_row(item["question"], str(item["answer"]), "curate", i, data_source=f"reasoning_gym/{task}")
        for i, item in enumerate(dataset)
    ]
    return pd.DataFrame(rows)


def answer_checks_out(ground_truth: str) -> bool:
    """Does the reference answer, written as a final ``\\boxed{}`` answer, score 1 with our math reward?

    If it does not, math-verify cannot parse it, and no response could ever be scored correct.
    """
    from verl_isocompute.rules.reward import compute_score

    return bool(compute_score("curate", f"\\boxed{{{ground_truth}}}", ground_truth)["acc"])


def screen(df: pd.DataFrame, check_answers: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split rows into usable problems (with a ``problem_id`` column) and skipped ones (with a reason)."""
    ids, keep, skipped = [], [], []
    seen: dict[str, int] = {}
    for i, row in enumerate(df.itertuples(index=False)):
        row = row._asdict()
        messages = messages_of(row.get("prompt"))
        truth = ground_truth_of(row.get("reward_model"))
        reason, detail = None, ""
        if messages is None:
            reason = "prompt is not a list of chat messages"
        elif truth is None:
            reason = "no ground truth"
        elif check_answers and not answer_checks_out(truth):
            reason, detail = "unparsable ground truth", truth[:80]
        else:
            pid = problem_id(messages, truth)
            if pid in seen:
                reason, detail = "duplicate", f"same prompt and answer as row {seen[pid]}"
            else:
                seen[pid] = i
                ids.append(pid)
                keep.append(i)
        if reason is not None:
            skipped.append({"row": i, "reason": reason, "detail": detail})
    problems = df.iloc[keep].reset_index(drop=True)
    problems.insert(0, "problem_id", ids)
    return problems, pd.DataFrame(skipped, columns=["row", "reason", "detail"])
