"""The anytime n schedule: n follows n*(c) as a run spends its rollouts (``isocompute.schedule``, off by default).

The IsoCompute playbook (Optimally Scaling Sampling Compute for LLM RL, arXiv 2603.12151, section 4) fits the
compute-optimal rollouts per problem n*(C) over whole runs at a fixed n, and the allocation
(:mod:`verl_isocompute.scaling.allocation`) reads it once, at the final budget C. Users rarely know C in
advance: they stop early or extend. Since n*(C) is small at small C and large at large C, a run whose n
follows n*(c) of the compute c it has spent so far should stay near the frontier at every stopping point,
where a fixed n is optimal at one budget only. This is a hypothesis to measure against fixed n at equal C,
not a published result.

The rule, before step t (1-based, verl's global step) with c_t rollouts already spent:

1. x_t = log2 n*(c_t) from the curve, with c_t clamped to the curve's fitted ``c_range`` (n* is never
   extrapolated past the compute the fit saw; at c = 0 the run starts at n*(C_min)).
2. n_t on the grid (powers of two, each within the n values the curve was fitted on, never outside them):
   the first step takes the grid value nearest to x_1 in log2 (ties to the smaller n, as the allocation);
   later steps keep n_{t-1} unless x_t has crossed the log2 midpoint to a neighbouring grid value by more
   than ``margin`` (a hysteresis, :func:`snap`), so n cannot flip back and forth around a midpoint when
   the curve or its compute unit (tokens counted from a noisy mean length) moves c_t's reading.
3. B_t = b_problem * n_t (b_problem fixed for the run) and lr_t = the recipe's LR rule at B_t
   (:func:`verl_isocompute.rules.lr.resolve_lr`, lr = base_lr * sqrt(B / B_ref)) with the warm-up counted
   in updates (:func:`verl_isocompute.rules.lr.lr_for_update`), exactly as a fixed-n run at that n.
4. The run ends at the budget: :meth:`NSchedule.steps_left` is how many steps of B_t rollouts still fit;
   the remainder (less than one step) is unspent, as in the allocation. A step plans B_t rollouts, but a group
   verl evicts (a failed rollout) is replaced, and its rollouts are charged to C too: they were sampled. So the
   step whose evictions leave no room for another is the last, and C can end above the budget by the evicted
   rollouts of that last step, never more (every earlier step was planned with its B_t inside the budget).
   Holding C under the budget instead would mean training a short last step (another B and mini-batch, and
   verl's replay buffer waits for B_problem whole groups) or keeping a reserve that no number of evictions is
   sure to fit (a refill can fail again); the run log's last row records the excess (:meth:`NSchedule.budget_end`).

Every change of n is recorded (step, c, old n, new n) in :class:`ScheduleState`, which serialises to a plain
dict for the checkpoint, so a resumed run continues with the same n and the same history.

This module is pure (no torch, verl, hydra or OmegaConf); the trainer applies its decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.scaling.curve import Curve
from verl_isocompute.rules.lr import B_REF, BASE_LR, WARMUP_STEPS, lr_for_update, resolve_lr

# A switch needs n*(c) a tenth of a doubling past the midpoint: enough to absorb a noisy compute reading,
# small enough that n follows the curve closely (n goes from 8 to 16 once n* > 2^3.6 = 12.1).
DEFAULT_MARGIN = 0.1
STATE_VERSION = 1


class ScheduleError(IsoComputeError, ValueError):
    """A schedule setting or a saved state the schedule cannot honour; the message names the fix."""


def snap(log2_n_star: float, grid: Sequence[int], current: int | None = None, margin: float = DEFAULT_MARGIN) -> int:
    """The grid value for a continuous log2 n*, with hysteresis around ``current``.

    Without ``current``: the grid value nearest in log2 (ties to the smaller n). With it: move to the next
    value up only while ``log2_n_star`` exceeds the log2 midpoint to it by more than ``margin``, and down only
    while it is below the midpoint to the next value down by more than ``margin``; otherwise keep ``current``.
    """
    grid = sorted(grid)
    if current is None:
        return min(grid, key=lambda g: (abs(math.log2(g) - log2_n_star), g))
    i = grid.index(current)
    while i + 1 < len(grid) and log2_n_star > (math.log2(grid[i]) + math.log2(grid[i + 1])) / 2 + margin:
        i += 1
    while i > 0 and log2_n_star < (math.log2(grid[i - 1]) + math.log2(grid[i])) / 2 - margin:
        i -= 1
    return grid[i]


@dataclass(frozen=True)
class StepPlan:
    """What step ``step`` runs with: n, B = b_problem * n and the learning rate of that update."""

    step: int
    c: float  # rollouts spent before this step
    n_star: float  # the continuous n*(c) read off the curve (c clamped to its fitted range)
    n: int
    b_problem: int
    peak_lr: float  # the LR rule at B (what a fixed-n run at this n would use after its warm-up)
    lr: float  # the rate of this update, warm-up included
    changed: bool  # n differs from the previous step's
    steps_left: int  # steps of B rollouts that fit the remaining budget, this one included

    @property
    def batch_rollouts(self) -> int:
        return self.b_problem * self.n


@dataclass
class ScheduleState:
    """The schedule's memory: the current n, the last step planned, and every change of n.

    ``changes`` holds one dict per change, ``{"step", "c", "old_n", "new_n"}`` (``old_n`` is None for the
    first step's choice). :meth:`to_dict` / :meth:`from_dict` round-trip through plain JSON types.
    """

    n: int | None = None
    step: int = 0
    c: float = 0.0
    changes: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "n": self.n, "step": self.step, "c": self.c,
                "changes": [dict(change) for change in self.changes]}

    @classmethod
    def from_dict(cls, d: Any) -> "ScheduleState":
        fix = "resume from the checkpoint the schedule state was saved with, or start a new run"
        if not isinstance(d, dict) or d.get("version") != STATE_VERSION:
            raise ScheduleError(f"the saved n-schedule state is not a version-{STATE_VERSION} state ({d!r:.80}); {fix}")
        n, step, c, changes = d.get("n"), d.get("step"), d.get("c"), d.get("changes")
        if not (n is None or _is_int(n) and n >= 2) or not (_is_int(step) and step >= 0) \
                or not (_is_number(c) and c >= 0) or not isinstance(changes, list):
            raise ScheduleError(f"the saved n-schedule state needs n (>= 2 or null), step >= 0, c >= 0 and a list of "
                                f"changes, got n={n!r}, step={step!r}, c={c!r}; {fix}")
        keys = {"step", "c", "old_n", "new_n"}
        if any(not isinstance(change, dict) or set(change) != keys for change in changes):
            raise ScheduleError(f"each change in the saved n-schedule state needs exactly {sorted(keys)}; {fix}")
        return cls(n=n, step=step, c=float(c), changes=[dict(change) for change in changes])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class NSchedule:
    """n_t = n*(c_t) on the grid with hysteresis, B_t = b_problem * n_t, lr_t from the LR rule (module docstring).

    Args:
        curve: the fitted or preset n*(C) curve the allocation reads; it must record its ``c_range`` and its
            ``n_grid`` (the n values it was fitted on), the limits the schedule never leaves.
        b_problem: problems per step, fixed for the run.
        budget_rollouts: the run's budget C in rollouts; the run ends when no step of B_t fits any more.
        n_grid: the n values allowed (powers of two >= 2 inside the curve's n_grid); unset: the curve's own.
        margin: the hysteresis, in doublings past a midpoint, in [0, 0.5).
        mean_response_tokens: generated tokens per rollout, needed to read a curve fitted on tokens.
        base_lr, b_ref, lr_rule, warmup_steps, n_train: the LR rule's settings (:mod:`verl_isocompute.rules.lr`);
            ``n_train`` (the decoupled baseline) also removes grid values below it.
    """

    def __init__(
        self,
        curve: Curve,
        b_problem: int,
        budget_rollouts: int,
        *,
        n_grid: Sequence[int] | None = None,
        margin: float = DEFAULT_MARGIN,
        mean_response_tokens: float | None = None,
        base_lr: float = BASE_LR,
        b_ref: float = B_REF,
        lr_rule: str = "sqrt",
        warmup_steps: int = WARMUP_STEPS,
        n_train: int | None = None,
    ):
        if curve.compute_unit not in ("rollouts", "tokens"):
            raise ScheduleError(f"the curve counts {curve.compute_unit}, which a run's counter does not: fit the curve "
                                "on rollouts or tokens (isocompute fit --compute rollouts) for the n schedule")
        if curve.compute_unit == "tokens" and not (_is_number(mean_response_tokens) and mean_response_tokens > 0):
            raise ScheduleError("the curve counts tokens, so the n schedule needs mean_response_tokens > 0 (generated "
                                f"tokens / rollouts of a pilot run), got {mean_response_tokens!r}")
        if curve.c_range is None or not curve.n_grid:
            raise ScheduleError("the curve records no c_range or no n_grid (the compute and the n it was fitted on), so "
                                "the schedule cannot keep n inside them; rewrite it with `isocompute fit` or use a paper: preset")
        for name, value in (("b_problem", b_problem), ("budget_rollouts", budget_rollouts)):
            if not (_is_int(value) or isinstance(value, float) and value.is_integer()) or value < 1:
                raise ScheduleError(f"{name} must be a positive integer, got {value!r}")
        b_problem, budget_rollouts = int(b_problem), int(budget_rollouts)  # YAML writes 1e6 as a float
        if not (_is_number(margin) and 0 <= margin < 0.5):
            raise ScheduleError(f"margin must be in [0, 0.5) doublings past a midpoint, got {margin!r}")
        self.curve, self.b_problem, self.budget_rollouts, self.margin = curve, b_problem, budget_rollouts, float(margin)
        self.grid = self._check_grid(curve, n_grid, n_train)
        self.mean_response_tokens = mean_response_tokens
        self.lr_settings = {"base_lr": base_lr, "b_ref": b_ref, "rule": lr_rule, "warmup_steps": warmup_steps,
                            "n_train": n_train}
        try:
            resolve_lr(b_problem, self.grid[-1], **self.lr_settings)
        except ValueError as exc:
            raise ScheduleError(str(exc)) from None
        first = snap(self.log2_n_star(0), self.grid)
        if budget_rollouts < b_problem * first:
            raise ScheduleError(f"budget_rollouts {budget_rollouts:,} does not pay for one step of b_problem {b_problem} x "
                                f"n {first} = {b_problem * first:,} rollouts; raise the budget or lower b_problem")
        self.state = ScheduleState()

    @staticmethod
    def _check_grid(curve: Curve, n_grid: Sequence[int] | None, n_train: int | None) -> tuple[int, ...]:
        lo, hi = min(curve.n_grid), max(curve.n_grid)
        given = n_grid is not None
        values = list(n_grid) if given else [g for g in curve.n_grid if g >= 2 and g & (g - 1) == 0]
        bad = [g for g in values if not _is_int(g) or g < 2 or g & (g - 1)]
        if bad or not values:
            raise ScheduleError(f"n_grid must be powers of two >= 2 (the sweep's grid; GRPO needs a group of 2), got "
                                f"{list(values)!r}; use e.g. [4, 8, 16]")
        outside = [g for g in values if not lo <= g <= hi]
        if outside:
            raise ScheduleError(f"n_grid values {outside} lie outside the n the curve was fitted on [{lo}, {hi}]: n*(c) "
                                "is not known there; keep the grid inside it or fit a wider sweep")
        if n_train is not None:
            values = [g for g in values if g >= n_train]
            if not values:
                raise ScheduleError(f"no n_grid value is >= n_train {n_train} (the decoupled baseline samples at least "
                                    "n_train per problem); lower n_train or raise the grid")
        return tuple(sorted(set(values)))

    def log2_n_star(self, c: float) -> float:
        """log2 n*(c) for c rollouts spent, with c (in the curve's unit) clamped to the fitted c_range."""
        curve_c = c * self.mean_response_tokens if self.curve.compute_unit == "tokens" else c
        lo, hi = self.curve.c_range
        return float(self.curve.log2_n_star(min(max(curve_c, lo), hi)))

    def next_n(self, c: float) -> int:
        """The n the next step would run at after c rollouts spent (the state is not changed)."""
        return snap(self.log2_n_star(c), self.grid, self.state.n, self.margin)

    def steps_left(self, c: float, n: int | None = None) -> int:
        """Steps of b_problem * n rollouts that fit the budget after c rollouts spent; n unset: :meth:`next_n`,
        so 0 means the run is over (stop before planning another step)."""
        n = self.next_n(c) if n is None else n
        return max(0, int(self.budget_rollouts - c) // (self.b_problem * n))

    def plan(self, step: int, c: float) -> StepPlan:
        """Decide step ``step`` (1-based, increasing) after ``c`` rollouts spent (non-decreasing), record a change
        of n, and return the step's n, batch and lr. Past the budget (no step of B rollouts fits) it refuses."""
        state = self.state
        if not _is_int(step) or step <= state.step:
            raise ScheduleError(f"step {step!r} follows step {state.step}: steps are planned once each, in order "
                                "(a resumed run must load the schedule state of its own checkpoint)")
        if not _is_number(c) or c < state.c:
            raise ScheduleError(f"compute went from {state.c:,.0f} to {c!r} rollouts: the compute counter and the "
                                "schedule state come from different checkpoints; resume both from the same one")
        plan = self._decide(step, c, state.n)
        if plan.changed:
            state.changes.append({"step": step, "c": c, "old_n": state.n, "new_n": plan.n})
        state.n, state.step, state.c = plan.n, step, float(c)
        return plan

    def first_step(self) -> StepPlan:
        """Step 1 of a fresh run (c = 0, no n before it), whatever the state holds: what the run log's header
        records as the run's n and lr, as it does for a fixed-n run."""
        return self._decide(1, 0.0, None)

    def _decide(self, step: int, c: float, current: int | None) -> StepPlan:
        """The plan of step ``step`` after ``c`` rollouts with ``current`` the previous step's n (the state unchanged)."""
        x = self.log2_n_star(c)
        n = snap(x, self.grid, current, self.margin)
        left = self.steps_left(c, n)
        if left == 0:
            raise ScheduleError(f"the budget of {self.budget_rollouts:,} rollouts is spent ({c:,.0f} used; a step of n = {n} "
                                f"takes {self.b_problem * n:,}): stop the run when steps_left() is 0")
        peak = resolve_lr(self.b_problem, n, **self.lr_settings).lr
        return StepPlan(step=step, c=c, n_star=2.0**x, n=n, b_problem=self.b_problem, peak_lr=peak,
                        lr=lr_for_update(step, peak, self.lr_settings["warmup_steps"]), changed=n != current,
                        steps_left=left)

    def budget_end(self, c: float) -> dict[str, int]:
        """What the row of a run's last step records of the budget: the budget it ran to (a resume may have changed
        it) and the rollouts C passed it by. Only groups evicted during that last step can take C past the budget:
        the step was planned with its B rollouts inside it, and the evicted groups' rollouts were sampled before
        they failed (module docstring, point 4)."""
        return {"budget_rollouts": self.budget_rollouts, "rollouts_over_budget": max(0, int(c) - self.budget_rollouts)}

    def header(self) -> dict[str, Any]:
        """The settings a run log's header records for the schedule."""
        return {"n_grid": list(self.grid), "b_problem": self.b_problem, "budget_rollouts": self.budget_rollouts,
                "margin": self.margin, "c_range": list(self.curve.c_range), "compute_unit": self.curve.compute_unit,
                "mean_response_tokens": self.mean_response_tokens, **self.lr_settings}

    def state_dict(self) -> dict[str, Any]:
        """The state to save in a checkpoint, with the settings it was made under."""
        return {**self.state.to_dict(), "n_grid": list(self.grid), "b_problem": self.b_problem,
                "budget_rollouts": self.budget_rollouts}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a checkpoint's state; refuses one saved under another grid or b_problem.

        The budget may differ: an anytime run is extended (or cut short) by resuming it with another
        ``budget_rollouts``; n_t depends on the compute spent and the curve only, the budget decides the end.
        """
        state = ScheduleState.from_dict(d)
        saved = {"n_grid": d.get("n_grid"), "b_problem": d.get("b_problem")}
        ours = {"n_grid": list(self.grid), "b_problem": self.b_problem}
        if saved != ours:
            diff = ", ".join(f"{k} {saved[k]!r} (now {ours[k]!r})" for k in ours if saved[k] != ours[k])
            raise ScheduleError(f"the checkpoint's n schedule was made with {diff}: resume with the same "
                                "isocompute.schedule settings, or start a new run")
        if state.n is not None and state.n not in self.grid:
            raise ScheduleError(f"the checkpoint's n = {state.n} is not on the grid {list(self.grid)}; resume with the same grid")
        self.state = state
