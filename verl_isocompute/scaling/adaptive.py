"""Per-step n in a run: the anytime n schedule and per-prompt n, as the isocompute trainer applies them.

Two features, each off by default, share this bookkeeping (``isocompute.schedule``, ``isocompute.per_prompt_n``;
the rules themselves are :mod:`verl_isocompute.scaling.schedule` and :mod:`verl_isocompute.scaling.per_prompt_n`):

- **the n schedule** decides, before each step, n_t = n*(c_t) on the sweep's grid (with a hysteresis), the
  step's peak learning rate at B_t = b_problem * n_t, and whether the budget pays for a step after this one
  (:meth:`AdaptiveN.plan_step`, :meth:`AdaptiveN.last_step`, and after the step's evictions
  :meth:`AdaptiveN.budget_spent`);
- **per-prompt n** divides the step's rollouts b_problem * n_t across its prompts, most where a group is least
  likely to agree (Knapsack RL, arXiv 2509.25849), with pass rates from curation's avg@k and the prompt's own
  earlier groups (:meth:`AdaptiveN.assign`, :meth:`AdaptiveN.observe`).

Either way every prompt sent to the rollout carries its own n (verl's ``__rollout_n__``), and this class keeps
a ledger of the groups in flight (verl's uid -> n_i), so that

- a group verl evicts (a failed rollout) is charged with the n_i rollouts it sampled, and its budget goes to the
  prompts that replace it (:meth:`AdaptiveN.evict`), so the step still trains exactly b_problem * n_t rollouts
  (one mini-batch: verl's mini-batch is ``ppo_mini_batch_size * rollout.n`` rows);
- the step's metrics say what the split bought, in expectation under the same posteriors: the expected share of
  rollouts in zero-variance groups and the expected number of groups with a gradient, under the n_i and under
  the fixed n_t (:meth:`AdaptiveN.observe`). The split maximises the second; the first can rise with it.

Pass rates are keyed by a stable prompt id (:func:`prompt_id`), not by verl's uid, which is a fresh uuid4 each
time the dataloader hands the prompt out. The state that must survive a checkpoint (the schedule's n and its
history, the pass-rate counts) round-trips through :meth:`AdaptiveN.state_dict`.

Pure Python: the trainer (:mod:`verl_isocompute.training.adaptive_trainer`) moves these decisions into verl.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from verl_isocompute import _compat
from verl_isocompute.scaling.schedule import NSchedule, ScheduleError, StepPlan
from verl_isocompute.scaling.per_prompt_n import (
    PassRate,
    PassRateTracker,
    PerPromptNError,
    allocate_rollouts,
    expected_nonzero_groups,
    expected_zero_variance_share,
)

# 0.2: the per-prompt n block has one type, the config schema's (issue 42); the old name gives it until 0.3.
__getattr__ = _compat.moved_names(__name__, {"PerPromptSettings": "verl_isocompute.training.schema"})

STATE_VERSION = 1
# n_max unset: at most this many times the step's n for one prompt (Knapsack RL reports up to 93 rollouts on
# its hardest prompts at a mean of 8 to 16; a cap keeps one prompt's group from stalling a step's rollout).
DEFAULT_N_MAX_FACTOR = 4


@dataclass
class Group:
    """One prompt sent to the rollout: its stable id, its n and the pass-rate belief its n was chosen under."""

    prompt_id: str
    n: int
    posterior: PassRate


def prompt_id(data_source: Any, index: Any, raw_prompt: Any) -> str:
    """A prompt's identity across fetches: its data source, its row index (``extra_info.index``, which verl puts
    in ``index``) and a CRC-32 of its prompt, so that rows sharing an index (a guided copy) stay apart."""
    text = json.dumps(raw_prompt, sort_keys=True, default=str)
    return f"{data_source}/{index}/{zlib.crc32(text.encode()):08x}"


@dataclass
class StepRecord:
    """What one step's groups did; :meth:`AdaptiveN.end_step` returns it and starts the next step's."""

    evicted_groups: int = 0
    evicted_rollouts: int = 0
    trained_n: list[int] = field(default_factory=list)


class AdaptiveN:
    """The per-step n of a run: fixed (``schedule`` None) or scheduled, split per prompt or not (module docstring).

    ``per_prompt``: the ``isocompute.per_prompt_n`` block as the config schema types it
    (:class:`verl_isocompute.training.schema.PerPromptSettings`, the one type of that block): each n_i in
    [``n_min``, ``n_max``] (:meth:`bounds`), curation's avg@k weighing ``curation_weight`` x k samples.
    """

    def __init__(self, n: int, b_problem: int, schedule: NSchedule | None = None, per_prompt: Any = None):
        self.n, self.b_problem = int(n), int(b_problem)
        self.schedule, self.per_prompt = schedule, per_prompt
        self.tracker = PassRateTracker(float(per_prompt.curation_weight)) if per_prompt else None
        self.plan: StepPlan | None = None
        self.groups: dict[str, Group] = {}  # uid -> group in flight this step
        self.record = StepRecord()

    # -- the schedule -------------------------------------------------------------------------------
    def plan_step(self, step: int, c: float) -> StepPlan | None:
        """Decide step ``step``'s n (and peak lr) after ``c`` rollouts spent; None without a schedule."""
        if self.schedule is None:
            return None
        self.plan = self.schedule.plan(step, c)
        self.n = self.plan.n
        return self.plan

    def budget_spent(self, c: float) -> bool:
        """Whether ``c`` rollouts spent leave a budget too small for another step (never without a schedule)."""
        return self.schedule is not None and self.schedule.steps_left(c) == 0

    def last_step(self, c: float) -> bool:
        """Whether the planned step, once it has spent its b_problem * n rollouts on top of ``c``, leaves a budget
        too small for another step (the trainer makes it verl's last step: final checkpoint and validation). Groups
        evicted during the step can spend the rest of the budget even when this says False: the trainer checks
        :meth:`budget_spent` again after the step's rollouts are charged."""
        return self.budget_spent(c + self.b_problem * self.n)

    # -- per-prompt n and the ledger ----------------------------------------------------------------
    def bounds(self, n: int | None = None) -> tuple[int, int]:
        """(n_min, n_max) of one prompt's n at a step of n rollouts per prompt (default: the current n); an unset
        n_max is :data:`DEFAULT_N_MAX_FACTOR` x n."""
        n = self.n if n is None else int(n)
        n_max = self.per_prompt.n_max
        return int(self.per_prompt.n_min), int(n_max) if n_max is not None else DEFAULT_N_MAX_FACTOR * n

    def assign(self, uids: Sequence[str], prompt_ids: Sequence[str], extra_infos: Sequence[Any],
               budget: int | None = None) -> list[int]:
        """n_i for prompts about to be sent: ``budget`` rollouts in all (default len(uids) * n), split by
        :func:`~verl_isocompute.scaling.per_prompt_n.allocate_rollouts` when per-prompt n is on, else n each."""
        count = len(uids)
        budget = count * self.n if budget is None else int(budget)
        if self.per_prompt is None:
            posteriors = [PassRate()] * count
            ns = _even_split(budget, count)
        else:
            posteriors = [self.tracker.posterior(pid, info) for pid, info in zip(prompt_ids, extra_infos, strict=True)]
            lo, hi = self.bounds()
            # a refill's budget is what its evicted groups had, each within [lo, hi]; keep it payable all the same
            budget = min(max(budget, count * lo), count * hi)
            ns = allocate_rollouts(posteriors, budget, lo, hi)
        for uid, pid, n_i, post in zip(uids, prompt_ids, ns, posteriors, strict=True):
            self.groups[str(uid)] = Group(str(pid), int(n_i), post)
        return ns

    def evict(self, live_uids: Iterable[str]) -> int:
        """Charge the groups in flight that verl has dropped (not among ``live_uids``, the prompts it still
        holds) and return their rollouts: the budget of the prompts that replace them."""
        live = {str(u) for u in live_uids}
        gone = [uid for uid in self.groups if uid not in live]
        rollouts = sum(self.groups.pop(uid).n for uid in gone)
        self.record.evicted_groups += len(gone)
        self.record.evicted_rollouts += rollouts
        return rollouts

    def observe(self, uids: Sequence[str], correct: Sequence[bool]) -> dict[str, float]:
        """Take the step's trained rows (one uid and one verdict per real rollout): update the pass rates and
        return the step's per-prompt metrics (n_i spread; expected zero-variance share and groups with a gradient
        under the n_i and under a fixed n for the same prompts)."""
        outcomes: dict[str, list[bool]] = {}
        for uid, ok in zip(uids, correct, strict=True):
            outcomes.setdefault(str(uid), []).append(bool(ok))
        known = [uid for uid in outcomes if uid in self.groups]
        groups = [self.groups.pop(uid) for uid in known]
        self.record.trained_n.extend(g.n for g in groups)
        if self.tracker is not None:
            for uid, group in zip(known, groups):
                self.tracker.observe(group.prompt_id, outcomes[uid])
        if not groups or self.per_prompt is None:
            return {}
        posts, ns = [g.posterior for g in groups], [g.n for g in groups]
        fixed = [self.n] * len(groups)
        return {
            "group_n_min": float(min(ns)), "group_n_max": float(max(ns)), "group_n_mean": sum(ns) / len(ns),
            "expected_zero_var_share": expected_zero_variance_share(posts, ns),
            "expected_zero_var_share_fixed_n": expected_zero_variance_share(posts, fixed),
            "expected_nonzero_groups": expected_nonzero_groups(posts, ns),
            "expected_nonzero_groups_fixed_n": expected_nonzero_groups(posts, fixed),
        }

    def end_step(self) -> StepRecord:
        """Close the step: groups still in flight were sampled and never trained (charged as evicted)."""
        record = self.record
        record.evicted_groups += len(self.groups)
        record.evicted_rollouts += sum(g.n for g in self.groups.values())
        self.groups, self.record = {}, StepRecord()
        return record

    @staticmethod
    def histogram(ns: Sequence[int]) -> dict[str, int]:
        """{n_i: prompts} of a step, keys as strings (a JSON object), in increasing n."""
        return {str(n): count for n, count in sorted(Counter(int(n) for n in ns).items())}

    # -- checkpoint ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION,
                "schedule": self.schedule.state_dict() if self.schedule is not None else None,
                "pass_rates": self.tracker.state_dict() if self.tracker is not None else None}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Restore a checkpoint's state; one saved with the other feature on or off is refused (ScheduleError)."""
        if not isinstance(d, Mapping) or d.get("version") != STATE_VERSION:
            raise ScheduleError(f"the checkpoint's per-step n state is not a version-{STATE_VERSION} state; resume "
                                "from a checkpoint this version saved, or start a new run")
        for name, mine, saved in (("isocompute.schedule", self.schedule, d.get("schedule")),
                                  ("isocompute.per_prompt_n", self.tracker, d.get("pass_rates"))):
            if (mine is None) != (saved is None):
                raise ScheduleError(f"the checkpoint was saved with {name} {'on' if saved is not None else 'off'}: "
                                    f"resume with the same setting, or start a new run")
        try:
            if self.schedule is not None:
                self.schedule.load_state_dict(d["schedule"])
                self.n = self.schedule.state.n or self.n
            if self.tracker is not None:
                self.tracker.load_state_dict(d["pass_rates"])
        except PerPromptNError as exc:
            raise ScheduleError(str(exc)) from None


def _even_split(budget: int, count: int) -> list[int]:
    """``budget`` rollouts over ``count`` prompts as evenly as integers allow (the first ones get the remainder)."""
    base, extra = divmod(int(budget), int(count))
    return [base + (i < extra) for i in range(count)]
