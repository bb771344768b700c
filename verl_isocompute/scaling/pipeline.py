"""The whole fit, as one call: run logs -> frontier -> per-n fits -> n*(C) sigmoid -> files.

``isocompute fit`` and the end of ``isocompute sweep`` both call :func:`run_fit` with a
:class:`FitOptions`; its defaults are the command's defaults (one place), so a sweep's ``fit:`` block
and the command line mean the same thing. Pure: no verl, no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from verl_isocompute.scaling.curve import Curve


@dataclass(frozen=True)
class FitOptions:
    """Settings of a fit (arXiv 2603.12151, section 4); see ``isocompute fit --help`` for each."""

    metric: str = "val/avg@4"
    compute: str = "rollouts"
    bucket: float = 0.01
    group_by: str = "n"
    fit_on: str = "all"
    shared_r0: bool = True
    ema: float = 0.0
    window: int = 5
    k_max: float = 50.0
    bootstrap: int = 200
    seed: int = 0
    n: int | None = None
    b_problem: int | None = None
    derive_compute: bool = False

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "FitOptions":
        """Options from a plain mapping (a sweep plan's ``fit:`` block); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown fit option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)


@dataclass
class FitOutcome:
    """What a fit produced: the in-memory result and the files written (empty when nothing was)."""

    result: Any  # scaling.fit.FrontierFit
    written: list[Path]

    @property
    def curve(self) -> Curve | None:
        return self.result.curve


def run_fit(
    runs: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike | None,
    options: FitOptions = FitOptions(),
    compare: Curve | None = None,
    compare_label: str | None = None,
    command: str | None = None,
) -> FitOutcome:
    """Load ``runs``, fit, and (when ``out_dir`` is given) write every output atomically.

    Raises :class:`~verl_isocompute.scaling.errors.ScalingError` on bad input and
    :class:`~verl_isocompute.scaling.errors.FitError` when a fit cannot be made; in both cases nothing
    is written. A fit without an n*(C) curve (e.g. one value of n) still writes the frontier.
    """
    from verl_isocompute.scaling.errors import ScalingError
    from verl_isocompute.scaling.fit import fit_frontier
    from verl_isocompute.scaling.frontier import build_frontier
    from verl_isocompute.scaling.records import load_runs
    from verl_isocompute.scaling.report import write_outputs

    if options.bootstrap < 0:
        raise ScalingError(f"--bootstrap must be >= 0, got {options.bootstrap}")
    if compare is not None and compare.compute_unit != options.compute:
        raise ScalingError(
            f"{compare_label or 'the comparison curve'} counts compute in {compare.compute_unit}, this fit in "
            f"{options.compute}; pass --compute {compare.compute_unit} (a sweep plan: fit: {{compute: "
            f"{compare.compute_unit}}}) or compare with another curve"
        )
    logs = load_runs(runs, n=options.n, b_problem=options.b_problem, derive_compute=options.derive_compute)
    frontier = build_frontier(logs, metric=options.metric, compute=options.compute, bucket=options.bucket, ema=options.ema)
    result = fit_frontier(
        frontier, group_by=options.group_by, fit_on=options.fit_on, shared_r0=options.shared_r0,
        window=options.window, k_max=options.k_max, bootstrap=options.bootstrap, seed=options.seed,
    )
    written = [] if out_dir is None else write_outputs(
        result, out_dir, compare=compare, compare_label=compare_label, command=command
    )
    return FitOutcome(result, written)
