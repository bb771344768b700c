"""Time our GRPO estimators against verl's ``grpo`` and ``grpo_vectorized`` on one large rollout batch.

The batch is the largest of the paper's sweep grid, B_max = 65,536 rollouts (arXiv 2603.12151, section 4),
here as b_problem = 4,096 problems x n = 16, with 1,024 response tokens, verl-shaped inputs (uuid string
uids, int64 response mask, the outcome reward on the last response token). The estimators run
round-robin so that load from other processes hits all of them alike; each row is the median of
``--repeats`` runs. Target: ours no slower than the faster of verl's two.

    python benchmarks/bench_advantage.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np
import torch
from verl.trainer.ppo import core_algos

from verl_isocompute.training import advantage
from verl_isocompute.rules.masks import step_masks

B_PROBLEM, N, RESPONSE_LENGTH = 4096, 16, 1024


def make_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    rollouts = B_PROBLEM * N
    index = np.array([str(uuid.UUID(int=int(i))) for i in range(B_PROBLEM)], dtype=object).repeat(N)
    acc = (torch.rand(rollouts, generator=gen) < 0.4).float()
    length = torch.randint(1, RESPONSE_LENGTH + 1, (rollouts,), generator=gen)
    response_mask = (torch.arange(RESPONSE_LENGTH)[None, :] < length[:, None]).long()
    rewards = torch.zeros(rollouts, RESPONSE_LENGTH)
    rewards[torch.arange(rollouts), length - 1] = acc
    return rewards, response_mask, index, acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    rewards, mask, index, acc = make_batch()

    def ours():
        return advantage.compute_isocompute_grpo(rewards, mask, index)

    acc_np = acc.numpy()

    def ours_with_variance_mask():
        # What the trainer does per step when the zero-variance filter is on.
        return advantage.compute_isocompute_grpo(rewards, mask, index), step_masks(index, acc_np, None, "regularizers")

    decoupled_mask = mask.clone()

    def ours_decoupled():
        # n_est = 16, n_train = 4, and the trainer's in-place zeroing of the excluded rollouts' response mask.
        adv = advantage.compute_isocompute_grpo_decoupled(rewards, decoupled_mask, index, n_train=4, seed=(0, 1))
        keep = torch.from_numpy(step_masks(index, acc_np, None, "off", n_train=4, seed=(0, 1)).keep)
        return adv, decoupled_mask.masked_fill_(~keep[:, None], 0)

    candidates = {
        "verl grpo": lambda: core_algos.compute_grpo_outcome_advantage(rewards, mask, index),
        "verl grpo_vectorized": lambda: core_algos.compute_grpo_vectorized_outcome_advantage(rewards, mask, index),
        "isocompute_grpo": ours,
        "isocompute_grpo + step_masks": ours_with_variance_mask,
        "isocompute_grpo_decoupled + train mask": ours_decoupled,
    }
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for fn in candidates.values():  # warm-up: first-touch allocations
        fn()
    for _ in range(args.repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)

    diff = (ours()[0] - core_algos.compute_grpo_outcome_advantage(rewards, mask, index)[0]).abs().max().item()
    medians = {name: statistics.median(t) for name, t in times.items()}
    reference = min(medians["verl grpo"], medians["verl grpo_vectorized"])
    print(
        f"{B_PROBLEM * N:,} rollouts x {RESPONSE_LENGTH:,} tokens (b_problem={B_PROBLEM}, n={N}), "
        f"median of {args.repeats}, torch threads={torch.get_num_threads()}; max |ours - verl grpo| = {diff:.1e}"
    )
    print(f"{'estimator':<40} {'median ms':>10} {'vs faster verl':>15}")
    for name, median in medians.items():
        print(f"{name:<40} {median * 1e3:>10.1f} {median / reference:>14.2f}x")


if __name__ == "__main__":
    main()
