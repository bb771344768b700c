"""The ``isocompute`` command: one subcommand per step of the workflow.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
modules are imported only when their subcommand runs, so ``isocompute fit`` never imports torch or verl.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help). Order is the order of a user's day.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("verl_isocompute.doctor", "check that verl sees this plugin and the CPU backend works"),
    "demo": ("verl_isocompute.demo", "run the CPU demo: a few real verl GRPO steps on a small model"),
    "allocate": ("verl_isocompute.allocation_cli", "turn a rollout budget into n, B_problem, steps and lr from an n*(C) curve"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="isocompute",
        description="Compute-optimal RL for LLMs on verl (IsoCompute playbook, arXiv 2603.12151).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sp = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip().split("\n\n")[0])
        module.add_arguments(sp)
        sp.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
