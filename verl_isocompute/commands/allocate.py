"""Turn a rollout budget into n, B_problem, steps and lr from an n*(C) curve (the playbook's allocation rule).

``--format overrides`` prints verl overrides to paste after ``python -m verl.trainer.main_ppo``;
``--format json`` feeds other tools; ``--format table`` is for reading. The rule itself lives in
:mod:`verl_isocompute.scaling.allocation`.

``--recipe NAME [KEY=VALUE ...]`` reads the recipe's ``isocompute.allocation`` block (and through it the
LR rule of ``isocompute.lr``, and ``isocompute.decoupled.n_train`` under the decoupled baseline) exactly
as the run's allocation hook would, so the printed lr is the one the run uses; flags given here win over
the recipe. ``--compare [n=N,N,...]`` adds what each fixed n of the fitted sweep costs at this budget
(:mod:`verl_isocompute.scaling.compare`; needs the per-n curves `isocompute fit` stores in curve.json, which
paper presets do not have), with 95% intervals when the fit bootstrapped over seeds. Errors print one
line and exit with status 2; a closed pipe (``| head``) ends quietly (:mod:`verl_isocompute.commands.cli`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from dataclasses import replace
from typing import Any

from verl_isocompute.scaling.allocation import (
    Allocation,
    AllocationConfig,
    AllocationError,
    allocate_config,
)
from verl_isocompute.scaling.curve import preset_names
from verl_isocompute.training.allocation_hook import overrides

PROG = "isocompute allocate"

_DEFAULTS = AllocationConfig()
# flag dest -> isocompute.allocation key, for flags that set a key of the block
_FLAG_KEYS = {
    "curve": "curve", "budget": "budget_rollouts", "budget_tokens": "budget_tokens", "b_max": "b_max",
    "b_problem": "b_problem", "b_problem_floor": "b_problem_floor", "batch_rollouts": "batch_rollouts",
    "dataset_size": "dataset_size", "mean_response_tokens": "mean_response_tokens", "n_grid": "n_grid",
    "min_steps": "min_steps", "base_lr": "base_lr", "b_ref": "b_ref", "lr_rule": "lr_rule", "warmup_steps": "warmup_steps",
}


def _grid(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 8,16,32, got {text!r}") from None


def _help(key: str) -> str:
    default = getattr(_DEFAULTS, key)
    text = AllocationConfig.help(key).replace("%", "%%")
    return text if default is None else f"{text} (default {_cell(default)})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--curve",
        help=f"curve.json from `isocompute fit`, or a paper preset: {', '.join('paper:' + n for n in preset_names())}",
    )
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=float, metavar="C", help="sampling budget in rollouts (e.g. 1e6)")
    budget.add_argument(
        "--budget-tokens", type=float, metavar="T", help="sampling budget in generated tokens (needs --mean-response-tokens)"
    )
    parser.add_argument("--b-max", type=int, metavar="N", help=_help("b_max"))
    parser.add_argument("--b-problem", type=int, metavar="N", help=_help("b_problem"))
    parser.add_argument("--b-problem-floor", type=int, metavar="N", help=_help("b_problem_floor"))
    parser.add_argument("--batch-rollouts", type=int, metavar="B", help=_help("batch_rollouts") + " (--b-problem unused)")
    parser.add_argument("--dataset-size", type=int, metavar="D", help=_help("dataset_size"))
    parser.add_argument("--mean-response-tokens", type=float, metavar="L", help=_help("mean_response_tokens"))
    parser.add_argument("--n-grid", type=_grid, metavar="N,N,...", help=_help("n_grid"))
    parser.add_argument("--min-steps", type=int, metavar="M", help=_help("min_steps"))
    lr = parser.add_argument_group("LR rule (default: the recipe's with --recipe, else the paper's)")
    lr.add_argument("--base-lr", type=float, metavar="LR", help=_help("base_lr"))
    lr.add_argument("--b-ref", type=float, metavar="B", help=_help("b_ref"))
    lr.add_argument("--lr-rule", choices=("sqrt", "constant", "linear"), help=_help("lr_rule"))
    lr.add_argument("--warmup-steps", type=int, metavar="W", help=_help("warmup_steps"))
    lr.add_argument(
        "--n-train", type=int, metavar="N",
        help="decoupled baseline: rollouts trained on per problem; n >= n_train and the LR rule counts "
             "b_problem x n_train (default: isocompute.decoupled.n_train with --recipe under isocompute_grpo_decoupled)",
    )
    parser.add_argument(
        "--recipe", metavar="NAME",
        help="read the isocompute.allocation block (LR rule, n_train, ...) of one of our recipes, e.g. cpu_demo",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides of --recipe, as on the run's command line")
    parser.add_argument(
        "--format", choices=("table", "json", "overrides"), default="table", help="output format (default %(default)s)"
    )
    parser.add_argument(
        "--strict", action="store_true",
        help=f"refuse a budget more than {EXTRAPOLATION_LIMIT:g}x outside the compute range the curve was fitted on "
             "(without it: a warning on stderr, and the json's extrapolation field)",
    )
    parser.add_argument(
        "--compare", nargs="?", const="all", metavar="n=N,N,...",
        help="also show what each fixed n of the fitted sweep (default: all) costs at this budget against the "
             "compute-optimal n, with 95%% intervals over the fit's resamples of each n's seeds when it has them; "
             "needs a curve.json from `isocompute fit` (paper presets carry only n*(C))",
    )


def _from_recipe(recipe: str, recipe_overrides: list[str]) -> tuple[AllocationConfig, int | None]:
    """The allocation block and n_train of a composed recipe, read as the run's hook reads them."""
    from verl_isocompute.training.allocation_hook import (
        allocation_settings,
        decoupled_n_train,
    )
    from verl_isocompute.training.config import RecipeError, compose_recipe

    # Composing imports verl (its config package), whose import-time notices (engines not installed, no
    # accelerator) concern training, not this command: keep them off the one line a user reads.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            cfg = compose_recipe(recipe, recipe_overrides)
        except RecipeError as exc:
            raise AllocationError(str(exc)) from None
        finally:
            logging.disable(logging.NOTSET)
    return allocation_settings(cfg), decoupled_n_train(cfg)


def settings_from_args(args: argparse.Namespace) -> tuple[AllocationConfig, int | None]:
    """The allocation settings of a command line: the defaults, or the recipe's block, then the flags given."""
    if args.recipe is not None:
        settings, n_train = _from_recipe(args.recipe, args.overrides)
    elif args.overrides:
        raise AllocationError(f"overrides {' '.join(args.overrides)} need a recipe: add --recipe NAME (e.g. cpu_demo)")
    else:
        settings, n_train = _DEFAULTS, None
    if args.budget is not None or args.budget_tokens is not None:
        settings = replace(settings, budget_rollouts=None, budget_tokens=None)  # a budget flag replaces the recipe's
    given = {key: getattr(args, dest) for dest, key in _FLAG_KEYS.items() if getattr(args, dest) is not None}
    settings = replace(settings, **given)
    if settings.curve is None:
        raise AllocationError("no curve: give --curve (a curve.json or paper:<preset>), or isocompute.allocation.curve with --recipe")
    if settings.budget_rollouts is None and settings.budget_tokens is None:
        raise AllocationError(
            "one of the arguments --budget --budget-tokens is required (or isocompute.allocation.budget_rollouts with --recipe)"
        )
    return settings, args.n_train if args.n_train is not None else n_train


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _table(allocation: Allocation) -> str:
    rows = {key: value for key, value in allocation.to_dict().items() if key != "reasons"}
    width = max(len(key) for key in rows)
    lines = [f"{key:<{width}}  {_cell(value)}" for key, value in rows.items()]
    lines += [f"reason: {reason}" for reason in allocation.reasons]
    return "\n".join(lines)


def _compare_value(args: argparse.Namespace) -> None:
    """``--compare`` takes an optional value, so argparse hands it the next word even when that word is a
    recipe override (``--compare trainer.total_epochs=2``): give such a word back to the overrides."""
    value = args.compare
    if value is not None and "=" in value and not value.strip().lower().startswith("n="):
        args.overrides = [*args.overrides, value]
        args.compare = "all"


# How far outside the fitted compute range a budget may go before allocate warns (issue 43): within 2x the curve
# is read a little past its data, as the grid's ends are; beyond, n*(C) is a guess the runs did not test.
EXTRAPOLATION_LIMIT = 2.0


def extrapolation(curve_spec: Any, allocation: Any) -> dict[str, Any] | None:
    """How far the allocation's budget lies outside the curve's fitted compute range: ``{"C", "c_range", "factor"}``
    (factor = C / C_max above the range, C_min / C below it), or None inside it or without a range."""
    from verl_isocompute.scaling.curve import load_curve

    curve = load_curve(curve_spec) if isinstance(curve_spec, (str, os.PathLike)) else curve_spec
    if curve is None or curve.c_range is None:
        return None
    c = allocation.budget_tokens if curve.compute_unit == "tokens" else allocation.budget_rollouts
    if not c:
        return None
    lo, hi = curve.c_range
    factor = max(lo / c, c / hi)
    return {"C": float(c), "c_range": [float(lo), float(hi)], "factor": float(factor)} if factor > 1 else None


_LR_KEYS = ("base_lr", "b_ref", "lr_rule", "warmup_steps")


def _runs_lr(settings: Any, args: argparse.Namespace) -> tuple[Any, str | None]:
    """The lr settings of the runs behind a fitted curve (``provenance.lr_settings``, issue 43), used unless the
    command line or a recipe gives its own; a reason line says which were used."""
    from verl_isocompute.scaling.curve import load_curve

    curve = load_curve(settings.curve) if isinstance(settings.curve, (str, os.PathLike)) else settings.curve
    runs = (getattr(curve, "provenance", None) or {}).get("lr_settings")
    if not isinstance(runs, dict) or not all(key in runs for key in ("base_lr", "b_ref", "lr_rule", "warmup_steps")):
        return settings, None
    theirs = {key: runs[key] for key in _LR_KEYS}
    said = ", ".join(f"{key} {runs[key]:g}" if isinstance(runs[key], (int, float)) else f"{key} {runs[key]}" for key in _LR_KEYS)
    if args.recipe is not None or any(getattr(args, key, None) is not None for key in _LR_KEYS):
        ours = ", ".join(f"{key} {getattr(settings, key)}" for key in _LR_KEYS)
        return settings, f"lr: uses {ours} (given), not the settings of the runs behind the curve ({said})"
    return replace(settings, **theirs), f"lr: the settings of the runs behind the curve ({said}), from its provenance"


def run(args: argparse.Namespace) -> int:
    from verl_isocompute.commands.cli import error

    _compare_value(args)
    settings, n_train = settings_from_args(args)
    settings, lr_note = _runs_lr(settings, args)
    allocation = allocate_config(settings, n_train=n_train)
    if lr_note:
        allocation = replace(allocation, reasons=(*allocation.reasons, lr_note))
    beyond = extrapolation(settings.curve, allocation)
    if beyond and beyond["factor"] > EXTRAPOLATION_LIMIT:
        lo, hi = beyond["c_range"]
        where = (f"C = {beyond['C']:.3g} is {beyond['factor']:.3g}x {'above' if beyond['C'] > hi else 'below'} the "
                 f"compute range the curve was fitted on [{lo:.3g}, {hi:.3g}]")
        if args.strict:
            return error(PROG, f"{where}: --strict refuses an extrapolation beyond {EXTRAPOLATION_LIMIT:g}x; fit runs "
                               "that reach this budget, or choose a budget within the range")
        print(f"{PROG}: warning: {where}: n*(C) is extrapolated, not measured; --strict refuses this", file=sys.stderr)
    if args.compare is not None:
        from verl_isocompute.scaling.compare import for_allocation

        comparison = for_allocation(settings.curve, allocation, args.compare, args.format)
    if args.format == "json":
        print(json.dumps({**allocation.to_dict(), "extrapolation": beyond,
                          **({"compare": comparison} if args.compare else {})}, indent=2, allow_nan=False))
    elif args.format == "overrides":
        print(" ".join(overrides(allocation)))
    else:
        print(_table(allocation) + (f"\n\n{comparison}" if args.compare else ""))
    return 0

