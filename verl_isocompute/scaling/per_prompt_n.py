"""Per-prompt n: divide a step's rollouts across its prompts by difficulty (``isocompute.per_prompt_n``, off by default).

GRPO learns only from groups whose rewards differ: a group of n rollouts of a prompt with pass rate p has a
non-zero advantage with probability

    v(p, n) = 1 - p^n - (1 - p)^n,

which is what Knapsack RL (Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget Allocation,
arXiv 2509.25849) maximises: each prompt is an item whose value is v(p_i, n_i) at cost n_i, and the step's
budget R = B_problem * n (n from the recipe, the allocation or the n schedule) is shared so that the expected
number of groups with a gradient, sum_i v(p_i, n_i), is largest, with n_min <= n_i <= n_max and
sum_i n_i = R exactly (the compute counter and the LR rule see the same R as at a fixed n).

**Why greedy is optimal.** For fixed p the marginal value of one more rollout is
d(n) = v(p, n+1) - v(p, n) = p^n (1 - p) + (1 - p)^n p, which falls with n: v is concave in n. A separable
concave objective under one sum constraint and box bounds is maximised by handing out units one at a time
to the largest marginal gain (the classic resource-allocation result; Ibaraki and Katoh, Resource Allocation
Problems, 1988, ch. 4). Concavity holds from n = 2 on only: a group of 1 has no variance (v(p, 1) = 0, so
d(0) = 0 < d(1) = 2p(1-p)), which is why n_min >= 2 here; prompts skipped outright (n_i = 0, as GRESO,
arXiv 2506.02177, does) would need another solver.

**Pass rates.** p is not known, so v is averaged over a Beta posterior, E[v] = 1 - E[p^n] - E[(1-p)^n], with
E[p^n] = prod_{j<n} (a + j) / (a + b + j) under Beta(a, b). E[p^n] is a mixture of p^n, each convex and
falling in n, so E[v] is still concave and greedy still optimal; with a point mass it is the paper's v.
The posterior combines a uniform Beta(1, 1) prior, curation's avg@k when the data carries it (k
pseudo-samples, ``extra_info.difficulty_avg_at_k`` / ``difficulty_k``) and the prompt's own earlier groups in
this run (successes and failures), so it also works without curation. Averaging keeps a prompt never solved
so far worth sampling (Beta(1, 17) after 0 of 16 still has E[v] > 0), where the plug-in p = 0 gives v = 0.

**What it bought.** :func:`expected_zero_variance_share` is the expected share of a step's rollouts that land
in zero-variance groups under the chosen n_i, and under a fixed n for the same prompts: a low-noise measure
of the allocation's effect (no sampling noise), logged beside the realised share.

Related: VIP (arXiv 2602.01601) predicts p with a Gaussian process and solves a convex allocation;
Reinforce-Ada (arXiv 2510.04996) samples in rounds with per-prompt exit rules.

Pure Python (no torch, verl, hydra or OmegaConf); the trainer turns the n_i into verl's per-sample n.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from verl_isocompute.errors import IsoComputeError

# The keys curation adds to a row's extra_info (the base model's avg@k over k samples).
AVG_AT_K_KEY = "difficulty_avg_at_k"
K_KEY = "difficulty_k"
# A uniform prior on the pass rate: one pseudo-success and one pseudo-failure.
PRIOR = (1.0, 1.0)


class PerPromptNError(IsoComputeError, ValueError):
    """Settings or estimates the per-prompt allocation cannot use; the message names the fix."""


def nonzero_advantage_prob(p: float, n: int) -> float:
    """v(p, n) = 1 - p^n - (1 - p)^n: the chance that n rollouts at pass rate p do not all agree."""
    return 1.0 - p**n - (1.0 - p) ** n if n >= 1 else 0.0


@dataclass(frozen=True)
class PassRate:
    """Beta(a, b) belief about a prompt's pass rate (a: successes + prior, b: failures + prior)."""

    a: float = PRIOR[0]
    b: float = PRIOR[1]

    def __post_init__(self) -> None:
        if not (_finite(self.a) and _finite(self.b) and self.a > 0 and self.b > 0):
            raise PerPromptNError(f"a pass-rate posterior needs Beta(a, b) with a, b > 0, got a={self.a!r}, b={self.b!r}")

    @property
    def mean(self) -> float:
        return self.a / (self.a + self.b)

    def updated(self, successes: float, failures: float) -> "PassRate":
        """The posterior after ``successes`` correct and ``failures`` wrong rollouts."""
        if not (_finite(successes) and _finite(failures) and successes >= 0 and failures >= 0):
            raise PerPromptNError(f"successes and failures must be counts >= 0, got {successes!r}, {failures!r}")
        return PassRate(self.a + successes, self.b + failures)

    def zero_variance_prob(self, n: int) -> float:
        """E[p^n + (1-p)^n]: the chance that a group of n is all correct or all wrong, p averaged over the posterior."""
        return _moment(self.a, self.b, n) + _moment(self.b, self.a, n)

    def value(self, n: int) -> float:
        """E[v(p, n)] = 1 - E[p^n] - E[(1-p)^n], the expected chance of a non-zero advantage (0 for n < 2)."""
        return 0.0 if n < 2 else 1.0 - self.zero_variance_prob(n)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _moment(a: float, b: float, n: int) -> float:
    """E[p^n] under Beta(a, b) = prod_{j<n} (a + j) / (a + b + j), in logs (no overflow at large n)."""
    return math.exp(math.lgamma(a + n) - math.lgamma(a) + math.lgamma(a + b) - math.lgamma(a + b + n))


def prior_from_curation(extra_info: Mapping[str, Any] | None, weight: float = 1.0) -> PassRate:
    """The prior of a prompt: Beta(1, 1) plus curation's avg@k as ``weight * k`` pseudo-samples when the row
    carries it (``extra_info.difficulty_avg_at_k`` and ``difficulty_k``, written by curation), else Beta(1, 1).

    ``weight`` < 1 discounts the base model's evidence, which grows stale as the policy learns.
    """
    if not (_finite(weight) and weight >= 0):
        raise PerPromptNError(f"the curation weight must be a number >= 0, got {weight!r}")
    info = extra_info if isinstance(extra_info, Mapping) else {}
    avg, k = info.get(AVG_AT_K_KEY), info.get(K_KEY)
    if avg is None or k is None:
        return PassRate()
    if not (_finite(avg) and 0 <= avg <= 1 and _finite(k) and k >= 1):
        raise PerPromptNError(f"extra_info has {AVG_AT_K_KEY}={avg!r} and {K_KEY}={k!r}: avg@k must be in [0, 1] and "
                              "k >= 1; re-run the curation that wrote the data")
    return PassRate().updated(weight * avg * k, weight * (1 - avg) * k)


class PassRateTracker:
    """Each prompt's posterior during a run: its curation prior updated by its own groups, keyed by prompt id.

    :meth:`state_dict` / :meth:`load_state_dict` keep it across a checkpoint resume (plain JSON types).
    """

    def __init__(self, curation_weight: float = 1.0):
        self.curation_weight = curation_weight
        self.counts: dict[str, list[float]] = {}  # prompt id -> [successes, failures] seen in this run

    def posterior(self, prompt_id: str, extra_info: Mapping[str, Any] | None = None) -> PassRate:
        successes, failures = self.counts.get(str(prompt_id), (0.0, 0.0))
        return prior_from_curation(extra_info, self.curation_weight).updated(successes, failures)

    def observe(self, prompt_id: str, correct: Iterable[bool]) -> None:
        """Add one group's outcomes (one bool per rollout: the verifier accepted it)."""
        seen = [bool(c) for c in correct]
        counts = self.counts.setdefault(str(prompt_id), [0.0, 0.0])
        counts[0] += sum(seen)
        counts[1] += len(seen) - sum(seen)

    def state_dict(self) -> dict[str, Any]:
        return {"curation_weight": self.curation_weight, "counts": {k: list(v) for k, v in self.counts.items()}}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        counts = d.get("counts") if isinstance(d, Mapping) else None
        if not isinstance(counts, Mapping) or any(
            not (isinstance(v, list) and len(v) == 2 and all(_finite(x) and x >= 0 for x in v)) for v in counts.values()
        ):
            raise PerPromptNError("the saved pass-rate state needs counts {prompt id: [successes, failures]}; resume from "
                                  "the checkpoint it was saved with, or start a new run")
        weight = d.get("curation_weight", self.curation_weight)
        if not (_finite(weight) and weight >= 0):
            raise PerPromptNError(f"the saved pass-rate state has curation_weight {weight!r}; resume from the checkpoint "
                                  "it was saved with, or start a new run")
        self.curation_weight = weight
        self.counts = {str(k): [float(x) for x in v] for k, v in counts.items()}


def allocate_rollouts(posteriors: Sequence[PassRate], budget: int, n_min: int = 2, n_max: int | None = None) -> list[int]:
    """n_i per prompt maximising sum_i E[v(p_i, n_i)] with n_min <= n_i <= n_max and sum_i n_i = budget.

    Greedy on marginal gains (module docstring: optimal because E[v] is concave in n >= 2). Ties go to the
    prompt listed first, so the result is deterministic. ``n_max`` unset: no cap beyond the budget.
    """
    count = len(posteriors)
    if count == 0:
        raise PerPromptNError("no prompts to allocate rollouts to")
    n_max = budget if n_max is None else n_max
    for name, value in (("budget", budget), ("n_min", n_min), ("n_max", n_max)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise PerPromptNError(f"{name} must be an integer, got {value!r}")
    if n_min < 2 or n_max < n_min:
        raise PerPromptNError(f"per-prompt n needs 2 <= n_min <= n_max (a group of 1 has no baseline), got "
                              f"n_min={n_min}, n_max={n_max}")
    if not count * n_min <= budget <= count * n_max:
        raise PerPromptNError(f"a step budget of {budget} rollouts cannot give {count} prompts between {n_min} and "
                              f"{n_max} rollouts each ({count * n_min}..{count * n_max}); change n_min / n_max or the budget")
    ns = [n_min] * count
    gains = [(-_gain(post, n_min), i) for i, post in enumerate(posteriors)]
    heapq.heapify(gains)
    for _ in range(budget - count * n_min):
        _, i = heapq.heappop(gains)
        ns[i] += 1
        if ns[i] < n_max:
            heapq.heappush(gains, (-_gain(posteriors[i], ns[i]), i))
    return ns


def _gain(post: PassRate, n: int) -> float:
    """E[v(n + 1)] - E[v(n)] = E[p^n (1 - p)] + E[(1 - p)^n p], written without the cancellation of a difference."""
    total = post.a + post.b
    return _moment(post.a, post.b, n) * post.b / (total + n) + _moment(post.b, post.a, n) * post.a / (total + n)


def expected_nonzero_groups(posteriors: Sequence[PassRate], ns: Sequence[int]) -> float:
    """sum_i E[v(p_i, n_i)]: the expected number of groups with a non-zero advantage, what the split maximises."""
    if len(posteriors) != len(ns):
        raise PerPromptNError(f"need one n per prompt, got {len(ns)} n for {len(posteriors)} prompts")
    return sum(post.value(n) for post, n in zip(posteriors, ns))


def expected_zero_variance_share(posteriors: Sequence[PassRate], ns: Sequence[int]) -> float:
    """Expected share of the rollouts that fall in zero-variance groups: sum_i n_i P(group i agrees) / sum_i n_i.

    Called with the chosen n_i and with a fixed n for every prompt (same total), it compares the two in
    expectation under the same posteriors. It is not what the split maximises: moving rollouts to a hard prompt
    raises its chance of one correct answer (more groups with a gradient, :func:`expected_nonzero_groups`) while
    most of its larger group may still be all wrong, so this share can rise (tests/test_per_prompt_n.py has a case).
    """
    if len(posteriors) != len(ns) or not ns or any(n < 1 for n in ns):
        raise PerPromptNError(f"need one n >= 1 per prompt, got {len(ns)} n for {len(posteriors)} prompts")
    return sum(n * post.zero_variance_prob(n) for post, n in zip(posteriors, ns)) / sum(ns)
