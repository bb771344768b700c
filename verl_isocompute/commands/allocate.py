"""Turn a rollout budget into n, B_problem, steps and lr from an n*(C) curve (the playbook's allocation rule).

``--format overrides`` prints verl overrides to paste after ``python -m verl.trainer.main_ppo``;
``--format json`` feeds other tools; ``--format table`` is for reading. The rule itself lives in
:mod:`verl_isocompute.scaling.allocation`.
"""

from __future__ import annotations

import argparse
import json
import sys

from verl_isocompute.scaling.allocation import (
    DEFAULT_ALLOCATION_CONFIG,
    Allocation,
    AllocationError,
    allocate,
    overrides,
)
from verl_isocompute.scaling.curve import CurveError, preset_names

PROG = "isocompute allocate"


def _grid(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 8,16,32, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--curve", required=True,
        help=f"curve.json from `isocompute fit`, or a paper preset: {', '.join('paper:' + n for n in preset_names())}",
    )
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--budget", type=float, metavar="C", help="sampling budget in rollouts (e.g. 1e6)")
    budget.add_argument(
        "--budget-tokens", type=float, metavar="T", help="sampling budget in generated tokens (needs --mean-response-tokens)"
    )
    parser.add_argument("--b-max", type=int, metavar="N", help="most rollouts one step may take (hardware limit); default no cap")
    parser.add_argument(
        "--b-problem", type=int, metavar="N", default=DEFAULT_ALLOCATION_CONFIG["b_problem"],
        help="problems per step (default %(default)s, the paper's fixed-B_problem setting)",
    )
    parser.add_argument(
        "--b-problem-floor", type=int, metavar="N",
        help="lowest b_problem before n is lowered (default min(b_problem, 32); 1 with --batch-rollouts)",
    )
    parser.add_argument(
        "--batch-rollouts", type=int, metavar="B",
        help="fixed-hardware-batch mode: B rollouts per step, b_problem = B // n (--b-problem unused)",
    )
    parser.add_argument("--dataset-size", type=int, metavar="D", help="number of training problems (for epochs)")
    parser.add_argument(
        "--mean-response-tokens", type=float, metavar="L", help="mean generated tokens per rollout (token budgets or token curves)"
    )
    parser.add_argument("--n-grid", type=_grid, metavar="N,N,...", help="allowed n values (default powers of two from 2)")
    parser.add_argument(
        "--min-steps", type=int, metavar="M", default=DEFAULT_ALLOCATION_CONFIG["min_steps"],
        help="at least this many steps (default %(default)s)",
    )
    parser.add_argument(
        "--format", choices=("table", "json", "overrides"), default="table", help="output format (default %(default)s)"
    )


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


def run(args: argparse.Namespace) -> int:
    budget_unit = "rollouts" if args.budget is not None else "tokens"
    try:
        allocation = allocate(
            args.curve,
            args.budget if args.budget is not None else args.budget_tokens,
            budget_unit=budget_unit,
            b_max=args.b_max,
            b_problem=args.b_problem,
            b_problem_floor=args.b_problem_floor,
            dataset_size=args.dataset_size,
            n_grid=args.n_grid,
            min_steps=args.min_steps,
            batch_rollouts=args.batch_rollouts,
            mean_response_tokens=args.mean_response_tokens,
        )
    except (AllocationError, CurveError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps(allocation.to_dict(), indent=2))
    elif args.format == "overrides":
        print(" ".join(overrides(allocation)))
    else:
        print(_table(allocation))
    return 0
