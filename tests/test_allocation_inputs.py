"""`isocompute allocate` and curve files under bad input: one line naming the problem and the fix, exit 2.

Also: a closed pipe ends the command quietly, JSON output is strict JSON, and the lr it prints is the one
the run uses (the recipe's LR rule, not the paper's default).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from verl_isocompute.commands import cli
from verl_isocompute.scaling.allocation import MAX_STEPS, allocate
from verl_isocompute.scaling.curve import CurveError, load_curve

EASY = load_curve("paper:qwen2.5-7b-easy")
EASY_DICT = EASY.to_dict()
FIX = "rewrite the file with `isocompute fit`"


def _allocate(capsys, *args: str) -> tuple[int, str, str]:
    """The real `isocompute allocate` dispatch, in this process (a subprocess per row would cost seconds each)."""
    try:
        code = cli.main(["allocate", *args])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def _strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


# --- curve files ------------------------------------------------------------------------------------

BAD_CURVES = [
    ({"k": 0}, "k must be > 0"),
    ({"k": -4.75}, "k must be > 0"),
    ({"L": -1.0}, "L must be >= 0"),
    ({"b": -50}, "b must be >= -3"),
    ({"L": 2000}, "L + b must be <= 30"),
    ({"log10_C0": 584}, "log10_C0 must be in [-1, 21]"),
    ({"k": True}, "k must be a finite number, got True"),
    ({"L": "6.09"}, "L must be a finite number, got '6.09'"),
    ({"b": None}, "b must be a finite number, got None"),
    ({"metric": 4}, "metric must be a metric name"),
    ({"compute_unit": "flops"}, "compute_unit must be one of rollouts, tokens"),
    ({"n_grid": ["8", 16]}, "n_grid must be a list of positive integers"),
    ({"n_grid": "8,16"}, "n_grid must be a list of positive integers"),
    ({"n_grid": [8, True]}, "n_grid must be a list of positive integers"),
    ({"c_range": ["1e5", 1e7]}, "c_range must be [C_min, C_max] (two numbers) or null"),
    ({"c_range": [1e5]}, "c_range must be [C_min, C_max] (two numbers) or null"),
    ({"c_range": [1e7, 1e5]}, "c_range must be [C_min, C_max] with 0 < C_min < C_max"),
    ({"provenance": "the paper"}, "provenance must be a JSON object"),
    ({"provenance": ["the paper"]}, "provenance must be a JSON object"),
]


@pytest.mark.parametrize(("change", "message"), BAD_CURVES, ids=[m for _, m in BAD_CURVES])
def test_bad_curve_files_are_refused_by_field(tmp_path, capsys, change, message):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({**EASY_DICT, **change}))
    with pytest.raises(CurveError) as info:
        load_curve(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value) and FIX in str(info.value)
    code, out, err = _allocate(capsys, "--curve", str(path), "--budget", "1e6", "--format", "json")
    assert (code, out) == (2, "")
    assert err == f"isocompute allocate: error: {info.value}\n"


@pytest.mark.parametrize("text", ['{"L": NaN, "k": 4.75, "log10_C0": 5.84, "b": 2.73, "compute_unit": "rollouts", "metric": "m"}',
                                  "[1, 2]", "{not json"])
def test_non_json_numbers_and_shapes(tmp_path, text):
    path = tmp_path / "curve.json"
    path.write_text(text)
    with pytest.raises(CurveError, match="finite number|JSON object|not valid JSON"):
        load_curve(path)


def test_a_valid_curve_round_trips_and_a_bom_is_fine(tmp_path):
    path = tmp_path / "curve.json"
    path.write_text(json.dumps(EASY_DICT), encoding="utf-8-sig")
    assert load_curve(path) == EASY


def test_curves_built_in_code_are_checked_too():
    with pytest.raises(CurveError, match="k must be > 0"):
        replace(EASY, k=-1.0)


def test_curves_at_the_fitters_bounds_are_accepted():
    # `isocompute fit` bounds L >= 0, k >= 1e-3, b >= log2(smallest n) - 3, log10_C0 within a decade of the C seen
    for params in ({"L": 0.0, "k": 1e-3, "b": -3.0, "log10_C0": -1.0}, {"L": 27.0, "k": 50.0, "b": 3.0, "log10_C0": 21.0}):
        assert replace(EASY, **params).n_star(1e6) > 0


def test_the_largest_allowed_curve_stays_finite():
    steep = replace(EASY, L=27.0, b=3.0, k=1e6)  # ceiling 2^30, a step function: no overflow anywhere
    assert steep.n_star(1e300) == 2.0**30 and steep.n_star(1e-300) == 2.0**3


# --- presets carry the C range the paper fitted on ---------------------------------------------------

@pytest.mark.parametrize("name", ["qwen2.5-7b-easy", "qwen2.5-7b-hard", "qwen2.5-7b-easy-joint", "qwen2.5-7b-hard-joint"])
def test_rollout_presets_were_fitted_on_1e5_to_1e7_rollouts(name):
    curve = load_curve(f"paper:{name}")
    assert curve.c_range == (1e5, 1e7) and "c_range" in curve.provenance
    assert any("outside the range the curve was fitted on [1e+05, 1e+07]" in r for r in allocate(curve, 5e4).reasons)
    assert not any("extrapolated" in r for r in allocate(curve, 1e6).reasons)


def test_token_preset_range_is_the_rollout_range_shifted_by_its_offset():
    curve = load_curve("paper:qwen2.5-7b-easy-tokens")
    offset = curve.log10_C0 - EASY.log10_C0  # tokens give the same shape, shifted in log C
    assert [math.log10(c) for c in curve.c_range] == pytest.approx([5 + offset, 7 + offset], abs=0.01)
    a = allocate(curve, 1e12, budget_unit="tokens", mean_response_tokens=2000)
    assert any("outside the range the curve was fitted on" in r for r in a.reasons)


# --- the command line -------------------------------------------------------------------------------

EASY_ARGS = ("--curve", "paper:qwen2.5-7b-easy")
BAD_ARGS = [
    ((*EASY_ARGS, "--budget", "1e30"), f"more than {MAX_STEPS:,}: check the budget"),
    ((*EASY_ARGS, "--budget-tokens", "1e33", "--mean-response-tokens", "1000"), f"more than {MAX_STEPS:,}"),
    ((*EASY_ARGS, "--budget", "inf"), "budget (rollouts) must be a positive finite number"),
    ((*EASY_ARGS, "--budget=-1e6"), "budget (rollouts) must be a positive finite number"),
    ((*EASY_ARGS, "--budget", "1e6", "--b-problem", "0"), "b_problem must be a positive integer"),
    ((*EASY_ARGS, "--budget", "1e6", "--b-max=-4"), "b_max must be a positive integer"),
    ((*EASY_ARGS, "--budget", "1e6", "--n-grid", "0,8"), "n_grid value must be a positive integer"),
    ((*EASY_ARGS, "--budget", "1e6", "--base-lr", "0"), "base_lr must be a positive finite number"),
    ((*EASY_ARGS, "--budget", "1e6", "--base-lr", "nan"), "base_lr must be a positive finite number"),
    ((*EASY_ARGS, "--budget", "1e6", "--b-ref=-1024"), "b_ref must be a positive finite number"),
    ((*EASY_ARGS, "--budget", "1e6", "--warmup-steps=-1"), "warmup_steps must be a non-negative integer"),
    ((*EASY_ARGS, "--budget", "1e6", "--n-train", "0"), "n_train must be a positive integer"),
    ((*EASY_ARGS, "--budget", "1e6", "--n-train", "64", "--n-grid", "8,16,32"), "n_grid has no n >= n_train 64"),
    ((*EASY_ARGS, "--budget", "1e6", "--mean-response-tokens", "0"), "mean_response_tokens must be a positive"),
    (("--budget", "1e6"), "no curve: give --curve"),
    (EASY_ARGS, "one of the arguments --budget --budget-tokens is required"),
    ((*EASY_ARGS, "--budget", "1e6", "isocompute.allocation.b_problem=4"), "need a recipe: add --recipe NAME"),
    ((*EASY_ARGS, "--budget", "1e6", "--recipe", "no_such_recipe"), "recipe 'no_such_recipe'"),
    (("--curve", "runs/none/curve.json", "--budget", "1e6"), "not found; pass a curve.json written by `isocompute fit`"),
]


@pytest.mark.parametrize(("args", "message"), BAD_ARGS, ids=[m for _, m in BAD_ARGS])
def test_bad_command_lines_are_one_line_and_exit_2(capsys, args, message):
    code, out, err = _allocate(capsys, *args, "--format", "json")
    assert (code, out) == (2, "")
    assert err.startswith("isocompute allocate: error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize("args", [("--lr-rule", "cubic"), ("--budget", "lots"), ("--n-grid", "8,x")])
def test_argparse_refusals_name_the_flag(capsys, args):
    code, out, err = _allocate(capsys, *EASY_ARGS, *(("--budget", "1e6") if args[0] != "--budget" else ()), *args)
    assert (code, out) == (2, "") and "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"isocompute allocate: error: argument {args[0]}")


@pytest.mark.parametrize("budget", ["1", "1e3", "1e5", "1e7", "1e10"])
@pytest.mark.parametrize("preset", ["qwen2.5-7b-easy", "qwen2.5-7b-hard-joint"])
def test_json_output_is_strict_json(capsys, preset, budget):
    code, out, err = _allocate(capsys, "--curve", f"paper:{preset}", "--budget", budget, "--b-problem-floor", "1",
                               "--format", "json")
    if code == 2:  # a budget below one step is refused, in one line
        assert out == "" and "minimum budget" in err
        return
    assert code == 0, err
    d = _strict_json(out)
    assert math.isfinite(d["n_star"]) and d["rollouts_used"] <= float(budget)


def test_a_closed_pipe_ends_quietly():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written, as with `| true`
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "verl_isocompute.commands.cli", "allocate", *EASY_ARGS, "--budget", "1e6", "--format", "json"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == ""


# --- the lr printed is the lr the run uses -------------------------------------------------------------

# The workflow's step 4 / step 5 pair (run_examples/workflow_cpu.sh): the CPU recipe's base lr is 1e-5.
WORKFLOW = ["isocompute.allocation.curve=paper:qwen2.5-7b-hard", "isocompute.allocation.budget_rollouts=384",
            "isocompute.allocation.b_problem=4", "isocompute.allocation.n_grid=[2,4,8]",
            "isocompute.allocation.dataset_size=50"]


def test_recipe_lr_is_the_lr_the_run_uses(capsys):
    from verl_isocompute.training.config import compose_recipe, lr_from_rule

    code, out, err = _allocate(capsys, "--recipe", "cpu_demo", *WORKFLOW, "--format", "json")
    assert code == 0, err
    printed = _strict_json(out)
    assert (printed["n"], printed["b_problem"], printed["warmup_steps"]) == (8, 4, 1)
    assert printed["lr"] == pytest.approx(1e-5 * math.sqrt(4 * 8 / 1024))  # cpu_demo's base_lr, not the paper's 1e-6

    run = compose_recipe("cpu_demo", [*WORKFLOW, "isocompute.allocation.enable=true"])  # the recipe's resolvers
    assert run.actor_rollout_ref.rollout.n == printed["n"]
    optim = run.actor_rollout_ref.actor.optim
    assert (optim.lr, optim.lr_warmup_steps) == (printed["lr"], printed["warmup_steps"])

    # The overrides pasted into a run without the hook: the lr is the one the recipe's rule gives.
    code, out, err = _allocate(capsys, "--recipe", "cpu_demo", *WORKFLOW, "--format", "overrides")
    run = compose_recipe("cpu_demo", out.split())
    assert run.actor_rollout_ref.actor.optim.lr == pytest.approx(printed["lr"]) and lr_from_rule(run)


def test_lr_flags_give_the_same_lr_as_the_recipe(capsys):
    flags = ["--curve", "paper:qwen2.5-7b-hard", "--budget", "384", "--b-problem", "4", "--n-grid", "2,4,8",
             "--format", "json"]
    by_flags = _strict_json(_allocate(capsys, *flags, "--base-lr", "1e-5", "--warmup-steps", "1")[1])
    by_recipe = _strict_json(_allocate(capsys, *flags, "--recipe", "cpu_demo")[1])
    assert by_flags == by_recipe
    assert by_flags["lr"] != _strict_json(_allocate(capsys, *flags)[1])["lr"]  # the paper's 1e-6 would differ
    constant = _strict_json(_allocate(capsys, *flags, "--lr-rule", "constant", "--b-ref", "32")[1])
    assert constant["lr"] == 1e-6 and constant["lr_rule"] == "constant"


def test_flags_win_over_the_recipe(capsys):
    code, out, err = _allocate(capsys, "--recipe", "cpu_demo", *WORKFLOW, "--budget", "768", "--base-lr", "2e-5",
                               "--format", "json")
    d = _strict_json(out)
    assert d["budget_rollouts"] == 768 and d["lr"] == pytest.approx(2e-5 * math.sqrt(4 * 8 / 1024))


def test_recipe_under_the_decoupled_baseline_reads_n_train(capsys):
    decoupled = ["algorithm.adv_estimator=isocompute_grpo_decoupled", "isocompute.allocation.n_grid=null"]
    code, out, err = _allocate(capsys, "--recipe", "cpu_demo", *WORKFLOW, *decoupled, "isocompute.decoupled.n_train=4",
                               "--format", "json")
    assert code == 0, err
    d = _strict_json(out)
    assert (d["n"], d["n_train"]) == (8, 4)
    assert d["lr"] == pytest.approx(1e-5 * math.sqrt(4 * 4 / 1024))  # B counts the 4 trained on, not all 8
    assert d["rollouts_used"] == d["steps"] * 4 * 8  # compute counts all n

    code, out, err = _allocate(capsys, "--recipe", "cpu_demo", *WORKFLOW, *decoupled, "isocompute.decoupled.n_train=16",
                               "--format", "json")
    assert _strict_json(out)["n"] == 16  # n*(384 rollouts) ~ 7, but n is never below n_train
    missing = _allocate(capsys, "--recipe", "cpu_demo", *WORKFLOW, decoupled[0], "--format", "json")
    assert missing[0] == 2 and "needs isocompute.decoupled.n_train" in missing[2]
