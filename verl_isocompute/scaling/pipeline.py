"""The whole fit, as one call: run logs -> frontier -> per-n fits -> n*(C) sigmoid -> files.

``isocompute fit`` and the end of ``isocompute sweep`` both call :func:`run_fit` with a
:class:`FitConfig`; its defaults are the command's defaults (one place), so a sweep's ``fit:`` block
and the command line mean the same thing. Pure: no verl, no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from verl_isocompute import _compat
from verl_isocompute.numeric import is_real, yaml_number
from verl_isocompute.runlog import DEFAULT_METRIC, VAL_PREFIX
from verl_isocompute.scaling.curve import Curve
from verl_isocompute.scaling.fit_defaults import (
    BOOTSTRAP_OVER,
    DEFAULT_BOOTSTRAP,
    DEFAULT_BOOTSTRAP_OVER,
    DEFAULT_BUCKET,
    DEFAULT_WINDOW,
    K_MAX,
)
from verl_isocompute.settings import setting


# The fewest resamples that define the 2.5th and 97.5th percentiles of a 95 % percentile interval: with B resamples
# each tail holds (B + 1) x 0.025 of them (Davison & Hinkley, "Bootstrap Methods and their Application", 1997),
# at least one only from 39 on; with 1 or 2 the "interval" is the resamples themselves.
MIN_BOOTSTRAP = 40

# The per-step EMA of earlier releases (``--ema``, a plan's ``fit: {ema: ...}``) lagged by n x B_problem rollouts a
# step, 4x more at n = 8 than at n = 2, and so favoured small n (issue 43): refused, naming its replacement.
REPLACED_EMA = ("--ema (fit: ema) was removed: it smoothed per step, a lag that grows with n; use --half-life C "
                "(fit: half_life), a half-life in units of C that is the same for every n, or no smoothing (the default)")

# The settings classes' one suffix (0.2): the old name works for one release.
__getattr__ = _compat.moved_names(__name__, {}, renamed={"FitOptions": "FitConfig"})


@dataclass(frozen=True)
class FitConfig:
    """Settings of a fit (arXiv 2603.12151, section 4): ``isocompute fit``'s options and a sweep plan's ``fit:``
    block, each with its help text (the command's ``--help`` is built from them)."""

    metric: str | None = setting(
        None, "logged metric to maximise; val/best@4 or val/worst@4 give their own n*",
        default_help="default: val/avg@k, with the k the runs validated with: val/avg@4 in our recipes, val/avg@1 with "
                     "our pieces on verl's ppo_trainer",
    )
    compute: str = setting(
        "rollouts", "compute unit C: cumulative rollouts, generated tokens, rollouts_with_guidance (plus the rollouts "
        "spent before training to find the guidance, PrefixRL's count) or rollouts_with_curation (plus curation too: "
        "both arms of a comparison spend it); spend on the training problems only (docs/GUIDED.md)",
    )
    bucket: float = setting(DEFAULT_BUCKET, "reward bucket width for record-breaking points; 0 = none")
    group_by: str = setting("n", "one curve per n (B_problem fixed) or per (n, B_problem) for the joint sweep")
    fit_on: str = setting("all", "fit each group's curve to all validation points or to its record-breaking points")
    shared_r0: bool = setting(True, "share one R0 (reward at C -> 0) across groups; false fits it per group")
    half_life: float = setting(0.0, "smooth each run's metric in compute: an exponential kernel of this half-life in units "
                               "of C (rollouts or tokens), the same for every n; 0 = off")
    window: int = setting(DEFAULT_WINDOW, "running-average window over the n*(C) grid, in grid points (20 per decade)")
    k_max: float = setting(K_MAX, "upper bound on the sigmoid's k")
    bootstrap: int = setting(DEFAULT_BOOTSTRAP, "bootstrap resamples for 95 % confidence intervals: 0 = none, else at "
                                                f"least {MIN_BOOTSTRAP}")
    bootstrap_over: str = setting(
        DEFAULT_BOOTSTRAP_OVER, "what the bootstrap resamples: seeds = each n's runs among its own, so the intervals "
        "carry run-to-run variation (with one run per n it is not measured: no intervals, and the fit says so); "
        "runs = all runs together (before 0.2.0), where a resample can leave an n out",
    )
    seed: int = setting(0, "bootstrap seed")
    n: int | None = setting(
        None, "n for every run whose log, run table and hydra config file do not say it (verl file logs, tensorboard, CSVs)"
    )
    b_problem: int | None = setting(
        None, "B_problem (data.train_batch_size) for every run whose log, run table and hydra config file do not say it"
    )
    run_table: str | None = setting(
        None, "n and B_problem per run, for logs that do not record them: a CSV with columns run,n,b_problem or a "
        "YAML run: {n: N, b_problem: B}; run = the run's name as fit shows it or its last path component (a "
        "tensorboard run: its experiment name)",
    )
    derive_compute: bool = setting(False, "ignore logged compute counters; use C = step x n x b_problem")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "FitConfig":
        """Options from a plain mapping (a sweep plan's ``fit:`` block); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        if "ema" in values:
            from verl_isocompute.scaling.errors import ScalingError

            raise ScalingError(REPLACED_EMA)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown fit option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values = dict(values)
        for name in ("bucket", "half_life", "k_max"):  # YAML 1.1 reads 1e-2 (no dot) as a string
            if name in values:
                values[name] = yaml_number(values[name])  # a string that is no number: check() names it
        return cls(**values)

    def check(self) -> FitConfig:
        """Refuse a setting that cannot be fitted with one line naming the option and the fix; return self.

        :func:`run_fit` calls it before reading any log, and ``isocompute sweep`` calls it on a plan's
        ``fit:`` block before the first cell trains. Messages name the command-line flag (``--bucket``);
        the plan key is the same name with ``_`` (``bucket``). Raises
        :class:`~verl_isocompute.scaling.errors.ScalingError`.
        """
        from verl_isocompute.scaling.curve import COMPUTE_UNITS
        from verl_isocompute.scaling.errors import ScalingError
        from verl_isocompute.scaling.fit import FIT_ON
        from verl_isocompute.scaling.groups import GROUP_BYS
        from verl_isocompute.scaling.sigmoid_fit import K_MIN

        def refuse(name: str, wanted: str, why: str = "") -> None:
            value = getattr(self, name)
            raise ScalingError(f"--{name.replace('_', '-')} must be {wanted}, got {value!r}" + (f" ({why})" if why else ""))

        def number(name: str) -> float | None:
            value = getattr(self, name)
            return float(value) if is_real(value) else None

        def integer(name: str) -> int | None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                return None
            return value

        if self.metric is not None and (not isinstance(self.metric, str) or not self.metric):
            refuse("metric", "a logged metric name such as val/avg@4")
        if self.compute not in COMPUTE_UNITS:
            refuse("compute", " or ".join(COMPUTE_UNITS))
        if self.group_by not in GROUP_BYS:
            refuse("group_by", " or ".join(GROUP_BYS))
        if self.fit_on not in FIT_ON:
            refuse("fit_on", " or ".join(FIT_ON))
        if self.bootstrap_over not in BOOTSTRAP_OVER:
            refuse("bootstrap_over", " or ".join(BOOTSTRAP_OVER))
        bucket = number("bucket")
        if bucket is None or bucket < 0:
            refuse("bucket", "a finite number >= 0", "a reward bucket width such as 0.01; 0 = exact records")
        half_life = number("half_life")
        if half_life is None or half_life < 0:
            refuse("half_life", "a finite number >= 0", "a half-life in units of C, e.g. 256 rollouts; 0 = off")
        window = integer("window")
        if window is None or window < 1:
            refuse("window", "an integer >= 1", "grid points of the n* running average; 5 = a quarter decade")
        k_max = number("k_max")
        if k_max is None or k_max <= K_MIN:
            refuse("k_max", f"a finite number > {K_MIN:g}", "the largest k of the sigmoid; default 50")
        bootstrap = integer("bootstrap")
        if bootstrap is None or bootstrap < 0:
            refuse("bootstrap", "an integer >= 0", "resamples over runs; 0 = no intervals")
        if 0 < bootstrap < MIN_BOOTSTRAP:
            refuse("bootstrap", f"0 (no intervals) or at least {MIN_BOOTSTRAP}", "the fewest resamples that give a 95 % "
                   f"interval a resample beyond each end; {DEFAULT_BOOTSTRAP} is the default")
        seed = integer("seed")
        if seed is None or seed < 0:
            refuse("seed", "an integer >= 0", "the bootstrap's random generator takes no negative seed")
        for name in ("n", "b_problem"):
            value = integer(name)
            if getattr(self, name) is not None and (value is None or value < 1):
                refuse(name, "an integer >= 1")
        if self.run_table is not None and (not isinstance(self.run_table, (str, os.PathLike)) or not str(self.run_table)):
            refuse("run_table", "a CSV or YAML file of run -> n, b_problem")
        for name in ("shared_r0", "derive_compute"):
            if not isinstance(getattr(self, name), bool):
                refuse(name, "true or false")
        return self


def logged_avg_at_k(logs) -> tuple[str, str | None]:
    """The metric a fit without ``--metric`` maximises: ``val/avg@k`` with the k the runs validated with.

    Our recipes validate with k = 4 (``val_kwargs.n``); verl's own ``ppo_trainer`` samples once
    (``val_kwargs.n=1``), so a run with our pieces on a stock config logs ``val/avg@1``. One k in the logs: that
    one (with a note when it is not 4); several: ``val/avg@4`` if logged, else an error naming them; none:
    ``val/avg@4``, which then stops the fit with the list of logged metrics.
    """
    import re

    from verl_isocompute.scaling.errors import ScalingError

    found = sorted((m for m in logs.metrics if re.fullmatch(rf"{VAL_PREFIX}/avg@\d+", m)), key=lambda m: int(m.split("@")[1]))
    if DEFAULT_METRIC in found or not found:
        return DEFAULT_METRIC, None
    if len(found) == 1:
        return found[0], f"fitting {found[0]}, the val/avg@k these runs logged (validation with val_kwargs.n={found[0].split('@')[1]}); --metric chooses another"
    raise ScalingError(f"the runs log {', '.join(found)} (validation with different val_kwargs.n): pass --metric to choose one")


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
    options: FitConfig = FitConfig(),
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
    from verl_isocompute.scaling.points import build_frontier
    from verl_isocompute.scaling.run_logs import load_runs
    from verl_isocompute.scaling.report import write_outputs

    options.check()
    if compare is not None and compare.compute_unit != options.compute:
        raise ScalingError(
            f"{compare_label or 'the comparison curve'} counts compute in {compare.compute_unit}, this fit in "
            f"{options.compute}; pass --compute {compare.compute_unit} (a sweep plan: fit: {{compute: "
            f"{compare.compute_unit}}}) or compare with another curve"
        )
    logs = load_runs(runs, n=options.n, b_problem=options.b_problem, derive_compute=options.derive_compute,
                     run_table=options.run_table)
    metric, note = (options.metric, None) if options.metric is not None else logged_avg_at_k(logs)
    frontier = build_frontier(logs, metric=metric, compute=options.compute, bucket=options.bucket, half_life=options.half_life)
    if note:
        frontier.notes.insert(0, note)
    result = fit_frontier(
        frontier, group_by=options.group_by, fit_on=options.fit_on, shared_r0=options.shared_r0,
        window=options.window, k_max=options.k_max, bootstrap=options.bootstrap, seed=options.seed,
        bootstrap_over=options.bootstrap_over,
    )
    written = [] if out_dir is None else write_outputs(
        result, out_dir, compare=compare, compare_label=compare_label, command=command
    )
    return FitOutcome(result, written)
