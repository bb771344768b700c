"""The ``isocompute`` command: one subcommand per step of the workflow.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
only the module of the subcommand being run is imported, so ``isocompute fit`` never imports torch or verl.

A closed pipe (``isocompute allocate ... | head -1``, ``isocompute fit ... | true``) is not an error: the
reader has gone, so the rest of the output is dropped and the command finishes its work and exits with
its own status. This is handled here, once, for every subcommand (:func:`closed_pipe_safe`). So is bad input:
any :class:`~verl_isocompute.errors.IsoComputeError` a subcommand raises is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from verl_isocompute.errors import IsoComputeError

# name -> (module, one-line help). Order is the order of a user's day.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("verl_isocompute.commands.doctor", "check that verl sees this plugin and the CPU backend works"),
    "demo": ("verl_isocompute.commands.demo", "run the CPU demo: a few real verl GRPO steps on a small model"),
    "curate": ("verl_isocompute.commands.curate", "measure per-problem difficulty (avg@k) and write Easy/Hard/mixed sets"),
    "prefix-search": ("verl_isocompute.commands.prefix_search", "choose each hard problem's oracle-prefix length with the base model (POPE / PrefixRL rules)"),
    "guide": ("verl_isocompute.commands.guide", "mix guided copies of hard problems (oracle-solution prefixes, POPE/PrefixRL) into a training set"),
    "sweep": ("verl_isocompute.commands.sweep", "run a pilot sweep (B_problem x n grid), locally or on a Ray cluster, then fit"),
    "fit": ("verl_isocompute.commands.fit", "fit the compute-optimal frontier and the n*(C) sigmoid from run logs"),
    "forecast": ("verl_isocompute.commands.forecast", "forecast each run's and each n's metric at a budget from partial logs, with intervals"),
    "allocate": ("verl_isocompute.commands.allocate", "turn a rollout budget into n, B_problem, steps and lr from an n*(C) curve"),
}


def _chosen(argv: list[str]) -> str | None:
    """The subcommand named on the command line, if any (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``isocompute`` parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="isocompute",
        description="Compute-optimal RL for LLMs on verl (IsoCompute playbook, arXiv 2603.12151).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _chosen(sys.argv[1:] if argv is None else argv)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=help_text, description=help_text)
            continue
        module = importlib.import_module(module_name)
        description = (module.__doc__ or help_text).strip()
        sp = sub.add_parser(
            name, help=help_text, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sp)
        sp.set_defaults(_module=module)
    return parser


class _QuietWhenClosed:
    """A stand-in for stdout that drops output, without an error, once the reading end of its pipe closed."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        # Point the descriptor at /dev/null so that the interpreter's last flush of what is still buffered
        # does not raise again on the way out ("Exception ignored ... BrokenPipeError").
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def closed_pipe_safe() -> Iterator[None]:
    """Run a command with stdout that tolerates its reader going away (see the module docstring)."""
    real = sys.stdout
    quiet = _QuietWhenClosed(real)
    sys.stdout = quiet
    try:
        yield
        quiet.flush()
    finally:
        sys.stdout = real


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``argv`` parsed as ``isocompute`` parses it (a bad argument: argparse's exit 2), without running anything."""
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    # A subcommand whose module names a positional list in TRAILING also takes the positional words that come
    # after its options (argparse gives each positional one contiguous run): `prefix-search DATA -o OUT k=v`.
    trailing = getattr(getattr(args, "_module", None), "TRAILING", None)
    stray = [word for word in extra if word.startswith("-")] if trailing else extra
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if trailing:
        getattr(args, trailing).extend(extra)
    return args


def error(prog: str, message: str) -> int:
    """How every subcommand refuses: one line on stderr, ``PROG: error: MESSAGE``, and exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def run_command(prog: str, run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run a subcommand the one way: stdout that tolerates a closed pipe, and any
    :class:`~verl_isocompute.errors.IsoComputeError` it raises reported by :func:`error` (one line, exit 2).
    Subcommands do not catch the package's errors themselves."""
    try:
        with closed_pipe_safe():
            return int(run(args) or 0)
    except IsoComputeError as exc:  # the package's errors carry their fix: one line, never a traceback
        return error(prog, str(exc))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command(f"isocompute {args.command}", args._module.run, args)


if __name__ == "__main__":
    sys.exit(main())
