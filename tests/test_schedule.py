"""The anytime n schedule (scaling/schedule.py): n follows n*(c) on the grid with hysteresis, B and lr follow n,
the state survives a checkpoint, and settings it cannot honour are refused in one line.

The test curve has round numbers so that every threshold is solved by hand from
log2 n*(C) = 4 / (1 + exp(-2 (log10 C - 4))) + 1: n* = 8 at C = 1e4, floor 2, ceiling 32.
"""

from __future__ import annotations

import json
import math

import pytest

from verl_isocompute.scaling.curve import Curve, load_curve
from verl_isocompute.scaling.schedule import NSchedule, ScheduleError, ScheduleState, snap

CURVE = Curve(L=4, k=2, log10_C0=4, b=1, c_range=(1e3, 1e6), n_grid=(2, 4, 8, 16, 32))
GRID = (2, 4, 8, 16, 32)


def threshold(log2_n: float) -> float:
    """The C at which the test curve reaches log2 n* = log2_n (the sigmoid solved for C by hand)."""
    return 10 ** (4 - math.log(4 / (log2_n - 1) - 1) / 2)


def run(schedule: NSchedule, steps: int | None = None, start: tuple[int, float] = (1, 0.0)):
    """Plan steps until the budget is spent (or ``steps`` steps), spending B rollouts per step."""
    step, c = start
    plans = []
    while schedule.steps_left(c) > 0 and (steps is None or len(plans) < steps):
        plan = schedule.plan(step, c)
        plans.append(plan)
        step, c = step + 1, c + plan.batch_rollouts
    return plans, (step, c)


def test_snap_keeps_n_until_the_midpoint_is_passed_by_the_margin():
    # no current n: nearest in log2, ties to the smaller n
    assert snap(3.55, GRID) == 16 and snap(3.45, GRID) == 8 and snap(2.5, GRID) == 4
    # from 8, up only past 3.5 + 0.1; from 16, down only below 3.5 - 0.1: no flip around 3.5
    assert snap(3.55, GRID, current=8, margin=0.1) == 8
    assert snap(3.65, GRID, current=8, margin=0.1) == 16
    assert snap(3.45, GRID, current=16, margin=0.1) == 16
    assert snap(3.35, GRID, current=16, margin=0.1) == 8
    # a jump over several midpoints lands at once; the ends hold
    assert snap(4.9, GRID, current=2, margin=0.1) == 32
    assert snap(9.0, GRID, current=32) == 32 and snap(-3.0, GRID, current=2) == 2


def test_a_run_steps_up_the_grid_at_the_hand_computed_compute():
    schedule = NSchedule(CURVE, b_problem=4, budget_rollouts=200_000, margin=0.1, warmup_steps=0)
    plans, (_, spent) = run(schedule)
    # c = 0 reads n* at C_min = 1e3: log2 n* = 1 + 4 / (1 + e^2) = 1.4768, nearest grid value 2
    assert plans[0].n == 2 and plans[0].n_star == pytest.approx(2 ** (1 + 4 / (1 + math.e**2)))
    changes = schedule.state.changes
    assert [(ch["old_n"], ch["new_n"]) for ch in changes] == [(None, 2), (2, 4), (4, 8), (8, 16), (16, 32)]
    by_step = {p.step: p for p in plans}
    # each switch comes at the first step whose c is past the midpoint + margin (2^1.6, 2^2.6, 2^3.6, 2^4.6)
    for change, log2_n in zip(changes[1:], (1.6, 2.6, 3.6, 4.6)):
        before = by_step[change["step"] - 1]
        assert before.c <= threshold(log2_n) < change["c"], (change, threshold(log2_n))
    # 8 -> 16 at C ~ 20,395 rollouts, not at the plain midpoint (2^3.5, C ~ 18,006)
    assert threshold(3.6) == pytest.approx(20395, rel=1e-4) and threshold(3.5) == pytest.approx(18006, rel=1e-4)
    # B and lr follow n: lr = 1e-6 * sqrt(4 n / 1024)
    for plan in plans:
        assert plan.batch_rollouts == 4 * plan.n
        assert plan.lr == pytest.approx(1e-6 * math.sqrt(4 * plan.n / 1024))
    assert [p.changed for p in plans].count(True) == 5
    # the run ends at the budget: never over it, less than one step of the last n left
    assert spent <= 200_000 < spent + 4 * plans[-1].n
    assert schedule.steps_left(spent) == 0 and plans[-1].steps_left == 1


def test_yaml_floats_for_counts_are_read_as_integers():
    schedule = NSchedule(CURVE, b_problem=4.0, budget_rollouts=2e5)
    assert (schedule.b_problem, schedule.budget_rollouts) == (4, 200_000)
    with pytest.raises(ScheduleError, match="budget_rollouts must be a positive integer, got 1000.5"):
        NSchedule(CURVE, b_problem=4, budget_rollouts=1000.5)


def test_the_warm_up_counts_updates_as_a_fixed_n_run():
    schedule = NSchedule(CURVE, b_problem=4, budget_rollouts=200_000, warmup_steps=10)
    plans, _ = run(schedule, steps=12)
    # n = 2, B = 8: peak 1e-6 * sqrt(8 / 1024) = 8.839e-8; update 5 of 10 runs at half of it
    assert plans[4].peak_lr == pytest.approx(8.8388e-8, rel=1e-4)
    assert plans[4].lr == pytest.approx(plans[4].peak_lr * 0.5)
    assert plans[11].lr == plans[11].peak_lr


def test_n_star_is_never_extrapolated_past_the_fitted_compute():
    easy = load_curve("paper:qwen2.5-7b-easy")  # c_range 1e5..1e7, n_grid 8..1024
    schedule = NSchedule(easy, b_problem=32, budget_rollouts=10**9)
    assert schedule.log2_n_star(0) == schedule.log2_n_star(1e5)
    assert schedule.log2_n_star(1e9) == schedule.log2_n_star(1e7)
    # at C_max: log2 n* = 6.09 / (1 + exp(-4.75 * 1.16)) + 2.73 = 8.7955 -> 512, however long the run
    assert schedule.log2_n_star(1e7) == pytest.approx(6.09 / (1 + math.exp(-4.75 * 1.16)) + 2.73)
    assert snap(schedule.log2_n_star(1e9), schedule.grid) == 512


def test_a_token_curve_reads_c_times_the_mean_response_length():
    tokens = load_curve("paper:qwen2.5-7b-easy-tokens")
    schedule = NSchedule(tokens, b_problem=32, budget_rollouts=10**7, mean_response_tokens=2200)
    assert schedule.log2_n_star(10**6) == pytest.approx(tokens.log2_n_star(2.2e9))


def test_the_state_survives_a_checkpoint_and_the_run_continues_identically():
    whole = NSchedule(CURVE, b_problem=4, budget_rollouts=60_000)
    plans, _ = run(whole)
    first = NSchedule(CURVE, b_problem=4, budget_rollouts=60_000)
    head, resume_at = run(first, steps=700)
    saved = json.loads(json.dumps(first.state_dict()))  # a checkpoint holds plain JSON
    second = NSchedule(CURVE, b_problem=4, budget_rollouts=60_000)
    second.load_state_dict(saved)
    tail, _ = run(second, start=resume_at)
    assert head + tail == plans
    assert second.state.changes == whole.state.changes
    assert ScheduleState.from_dict(saved).to_dict() == first.state.to_dict()


@pytest.mark.parametrize("kwargs, words", [
    ({"n_grid": [4, 8, 64]}, "outside the n the curve was fitted on [2, 32]"),
    ({"n_grid": [1, 2, 4]}, "powers of two >= 2"),
    ({"n_grid": [4, 6, 8]}, "powers of two >= 2"),
    ({"margin": 0.5}, "margin must be in [0, 0.5)"),
    ({"budget_rollouts": 7}, "does not pay for one step of b_problem 4 x n 2 = 8"),
    ({"b_problem": 0}, "b_problem must be a positive integer"),
    ({"n_train": 64}, "no n_grid value is >= n_train 64"),
    ({"lr_rule": "cube"}, "unknown lr rule"),
])
def test_settings_it_cannot_honour_are_refused_in_one_line(kwargs, words):
    settings = {"b_problem": 4, "budget_rollouts": 10_000, **kwargs}
    with pytest.raises(ScheduleError) as info:
        NSchedule(CURVE, **settings)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_curves_without_limits_or_with_an_unreadable_unit_are_refused():
    for curve, words in [
        (Curve(L=4, k=2, log10_C0=4, b=1, n_grid=GRID), "no c_range or no n_grid"),
        (Curve(L=4, k=2, log10_C0=4, b=1, c_range=(1e3, 1e6)), "no c_range or no n_grid"),
        (load_curve("paper:qwen2.5-7b-easy-tokens"), "needs mean_response_tokens"),
        (Curve(L=4, k=2, log10_C0=4, b=1, c_range=(1e3, 1e6), n_grid=GRID, compute_unit="rollouts_with_curation"),
         "fit the curve on rollouts or tokens"),
    ]:
        with pytest.raises(ScheduleError) as info:
            NSchedule(curve, b_problem=4, budget_rollouts=10**6)
        assert words in str(info.value) and "\n" not in str(info.value)


def test_out_of_order_steps_a_falling_counter_and_a_spent_budget_are_refused():
    schedule = NSchedule(CURVE, b_problem=4, budget_rollouts=20)
    schedule.plan(1, 0)
    with pytest.raises(ScheduleError, match="steps are planned once each"):
        schedule.plan(1, 8)
    with pytest.raises(ScheduleError, match="from different checkpoints"):
        schedule.plan(2, -1)
    schedule.plan(2, 8)
    assert schedule.steps_left(16) == 0
    with pytest.raises(ScheduleError, match="budget of 20 rollouts is spent"):
        schedule.plan(3, 16)


def test_a_checkpoint_from_other_settings_or_a_broken_state_is_refused():
    first = NSchedule(CURVE, b_problem=4, budget_rollouts=60_000)
    run(first, steps=3)
    saved = first.state_dict()
    other = NSchedule(CURVE, b_problem=8, budget_rollouts=60_000)
    with pytest.raises(ScheduleError, match=r"b_problem 4 \(now 8\)"):
        other.load_state_dict(saved)
    for broken in ({**saved, "n": "8"}, {**saved, "version": 0}, {**saved, "changes": [{"step": 1}]}, None):
        with pytest.raises(ScheduleError):
            NSchedule(CURVE, b_problem=4, budget_rollouts=60_000).load_state_dict(broken)


def test_a_resume_may_extend_the_budget_and_continues_as_one_long_run():
    """An anytime run stopped at its budget and resumed with a larger one plans exactly what a run with the
    larger budget from the start would have (n depends on the compute spent, the budget only ends the run)."""
    long = NSchedule(CURVE, b_problem=4, budget_rollouts=60_000)
    plans, _ = run(long)
    short = NSchedule(CURVE, b_problem=4, budget_rollouts=20_000)
    head, resume_at = run(short)
    extended = NSchedule(CURVE, b_problem=4, budget_rollouts=60_000)
    extended.load_state_dict(json.loads(json.dumps(short.state_dict())))
    tail, _ = run(extended, start=resume_at)
    assert [p.n for p in head + tail] == [p.n for p in plans] and extended.state.changes == long.state.changes


def test_the_run_ends_when_the_next_n_no_longer_fits_even_if_the_current_one_would():
    # with 4 problems per step n goes 8 -> 16 at c = 20,416 (first step past C ~ 20,395); 40 rollouts are
    # left then: one more step at n = 8 (32 rollouts) would fit, one at the scheduled n = 16 (64) does not
    schedule = NSchedule(CURVE, b_problem=4, budget_rollouts=20_456)
    plans, (_, spent) = run(schedule)
    assert spent == 20_416 and plans[-1].n == 8
    assert schedule.next_n(spent) == 16 and schedule.steps_left(spent) == 0 and schedule.steps_left(spent, n=8) == 1
    with pytest.raises(ScheduleError, match="a step of n = 16 takes 64"):
        schedule.plan(plans[-1].step + 1, spent)


def test_step_one_is_read_from_a_fresh_start_whatever_the_state_holds():
    """The run log's header records step 1's n and lr (first_step), written after a resume has loaded a state
    that is far along: it is the plan a fresh schedule makes at c = 0, and reading it changes nothing."""
    schedule = NSchedule(CURVE, b_problem=4, budget_rollouts=200_000, warmup_steps=2)
    schedule.plan(1, 0)
    later = schedule.plan(2, 30_000)  # log2 n*(3e4) = 1 + 4 / (1 + e^-0.954) = 3.89, past 3.5 + 0.1: n jumps to 16
    state = schedule.state_dict()
    first = schedule.first_step()
    assert first == NSchedule(CURVE, b_problem=4, budget_rollouts=200_000, warmup_steps=2).plan(1, 0)
    assert (first.step, first.c, first.n, later.n) == (1, 0, 2, 16)
    assert first.peak_lr == pytest.approx(1e-6 * math.sqrt(4 * 2 / 1024)) and first.lr == pytest.approx(first.peak_lr / 2)
    assert schedule.state_dict() == state


def test_the_last_rows_budget_record_counts_only_rollouts_past_the_budget():
    schedule = NSchedule(CURVE, b_problem=4, budget_rollouts=20)
    assert schedule.budget_end(16) == {"budget_rollouts": 20, "rollouts_over_budget": 0}  # 4 unspent: no excess
    assert schedule.budget_end(26) == {"budget_rollouts": 20, "rollouts_over_budget": 6}


def test_the_cpu_benchmarks_stated_curve_runs_8_steps_at_n_2_then_4_at_4_then_4_at_8():
    """run_examples/schedule_cpu_curve.json (bench_adaptive's schedule arm, docs/SCALING.md) promises in its
    provenance the plan its validations line up with: at B_problem 8 and 512 rollouts, n = 2 for steps 1-8,
    4 from c = 128 (steps 9-12), 8 from c = 256 (steps 13-16), and the allocation's fixed n at 512 is 8."""
    from pathlib import Path

    from verl_isocompute.scaling.allocation import allocate

    path = Path(__file__).resolve().parents[1] / "run_examples" / "schedule_cpu_curve.json"
    curve = load_curve(str(path))
    plans, (_, spent) = run(NSchedule(curve, 8, 512, base_lr=1.6e-4, warmup_steps=2))
    assert [p.n for p in plans] == [2] * 8 + [4] * 4 + [8] * 4 and spent == 512
    assert [p.c for p in plans[1:] if p.n != plans[p.step - 2].n] == [128, 256]
    # the LR rule at B = 8 n: 1.6e-4 * sqrt(B / 1024), after the 2-update warm-up
    assert [plans[i].lr for i in (2, 8, 12)] == pytest.approx([2e-5, 2e-5 * math.sqrt(2), 4e-5])
    assert allocate(curve, 512, b_problem=8, b_problem_floor=None, b_max=None, min_steps=1, n_grid=curve.n_grid).n == 8
