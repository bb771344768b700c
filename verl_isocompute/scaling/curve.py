"""The n*(C) curve: the one place its formula and its file format live.

The IsoCompute playbook (arXiv 2603.12151, section 4) fits the compute-optimal number of rollouts per
problem as a sigmoid in log space, C in rollouts (or tokens), log base 10 for C and base 2 for n:

    log2 n*(C) = L / (1 + exp(-k * (log10 C - log10_C0))) + b

so n* rises from a floor 2^b at small budgets to a ceiling 2^(L + b) at large ones, with the switch
centred at C0 and its sharpness set by k.

Curve file (``curve.json``) contract: ``L``, ``k``, ``log10_C0``, ``b`` (numbers), ``compute_unit``
(``rollouts`` | ``tokens``), ``metric`` (a string), ``c_range`` ([C_min, C_max] it was fitted on, or
null), ``n_grid`` (the n values of the runs, positive integers), ``provenance`` (a JSON object: source,
fit date, runs, ...). Optional extra keys are kept on load (``extra``); ``isocompute fit`` adds
``reward_curves`` (the per-n reward curves and their C ranges, used by :mod:`verl_isocompute.scaling.compare`
for ``allocate --compare``), checked here with the rest of the file (:func:`reward_curve_entries`). Paper
presets ship as ``presets/<name>.json`` and are addressed as ``paper:<name>``.

A curve users allocate GPU-months from must never be silently misread, so a file is checked field by
field (JSON ``true`` or ``"6.0"`` is not a number) and its parameters must describe a usable curve:

- ``k > 0``: n* grows with compute (the paper's finding); no upper bound, a large k is a step (the
  paper's Hard joint fit sits at the fitter's bound k = 50).
- ``L >= 0``: the ceiling is not below the floor.
- ``b >= -3`` and ``L + b <= 30``: the floor 2^b is at least 1/8 (``isocompute fit`` lets b sit at
  most 3 doublings below the smallest n of a sweep, n >= 1) and the ceiling 2^(L + b) at most 2^30
  rollouts per problem, the top of the default n grid. This also keeps n* finite (L = 2000 would
  overflow to infinity).
- ``-1 <= log10_C0 <= 21``: the switch lies within a decade of [1, 1e20] rollouts or tokens (``isocompute
  fit`` places C0 at most a decade outside the compute it saw; the paper's: 10^5.84 rollouts, 10^9.18 tokens).
- ``c_range``: two numbers with 0 < C_min < C_max.
- ``reward_curves.curves``: each fixed n's R_n(C) = R0 + (A - R0) / (1 + (C_mid / C)^beta) as the fit writes
  it: n (and b_problem, when given) a positive integer, one curve per n (per (n, b_problem) when the fit
  grouped by both, ``group_by: "n,b_problem"``), C_mid > 0, beta > 0, R0 <= A (a fitted curve never falls), both inside the metric's
  range when it has one ([0, 1] for a share of samples, :func:`metric_range`), and 0 < C_min <= C_max.
  Optional (written since 0.2.0, absent from older files, read as none): ``at_bounds``, an object from a
  parameter (R0, A, C_mid, beta) to the bound of the fit it sits on (``"lower"`` | ``"upper"``), and
  ``not_identified``, the parameters the points do not determine (``"R0"``, ``"C_mid"``). Optional (since
  0.2.0, when the fit bootstrapped): ``bootstrap``, the curve refitted on each bootstrap resample of the runs,
  a list of [R0, A, C_mid, beta] (``null`` where it could not be refitted), the same resamples and so the same
  length for every curve: ``isocompute allocate --compare`` reads its intervals from them.

When a fit into a directory finds no curve, ``isocompute fit`` renames the directory's older
``curve.json`` to ``curve.stale.json``; :func:`load_curve` of that ``curve.json`` then names the stale file
instead of saying "not found", so a later ``isocompute allocate`` never uses an old curve unknowingly.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.numeric import as_count, is_real
from verl_isocompute.runlog import DEFAULT_METRIC

import numpy as np

# rollouts_with_guidance: C plus the rollouts spent before training on guided data (the run log's
# contract, verl_isocompute.runlog), for PrefixRL's comparison (arXiv 2601.18795); rollouts_with_curation: that
# plus the curation of the training problems (both arms of a comparison spend it)
COMPUTE_UNITS = ("rollouts", "tokens", "rollouts_with_guidance", "rollouts_with_curation")
PRESET_PREFIX = "paper:"
CURVE_FILE = "curve.json"
# Where `isocompute fit` moves an older curve.json when a new fit finds no curve (see load_curve).
STALE_CURVE_FILE = "curve.stale.json"
# The most compute (rollouts or tokens) the toolkit fits or reads a curve at: 1e20 is beyond any RL run
# (the paper's sweeps reach ~1e7 rollouts, ~1e10 tokens), so a larger value is a unit slip or a broken counter.
MAX_COMPUTE = 1e20
_REQUIRED = ("L", "k", "log10_C0", "b", "compute_unit", "metric")
# Bounds of a usable curve, in log2 n and log10 C (module docstring says why).
LOG2_N_FLOOR_MIN = -3.0
LOG2_N_CEILING_MAX = 30.0
LOG10_C0_RANGE = (-1.0, 21.0)
_FIX = "correct it in the file or rewrite the file with `isocompute fit`"
# The optional per-n reward curves of a curve file (written by scaling.reward_curves.reward_curves_field).
REWARD_CURVES_KEY = "reward_curves"
# The parameters of a per-n reward curve, R0 + (A - R0) / (1 + (C_mid / C)^beta).
_CURVE_PARAMS = ("R0", "A", "C_mid", "beta")
# Metrics that are shares of samples, hence in [0, 1]: avg/best/worst@k (ours, overall or per data source)
# and verl's per-source accuracy (val-core/<source>/acc/mean@k).
_SHARE_METRICS = re.compile(r"^val/(avg|best|worst)@\d+(/.*)?$|(^|/)acc(/|$)")


class CurveError(IsoComputeError, ValueError):
    """A curve file or preset that cannot be used; the message names the problem and the fix."""


def _is_count(value: Any) -> bool:
    """A positive integer (an integral float such as 8.0 counts)."""
    return as_count(value) is not None


def metric_range(metric: str) -> tuple[float, float] | None:
    """The range a metric's values must lie in: [0, 1] for a share of samples, None when not known."""
    return (0.0, 1.0) if _SHARE_METRICS.search(metric) else None


def reward_curve_entries(field: Any, metric: str, source: str) -> list[dict[str, Any]]:
    """The per-n reward curves of a curve file's ``reward_curves`` field, checked (module docstring) and as
    plain values: ``n``, ``b_problem`` (int or None), ``R0``, ``A``, ``C_mid``, ``beta`` (floats), ``c_range``
    (two floats), ``runs``, ``at_bounds`` (dict) and ``not_identified`` (tuple; both empty in a file written
    before 0.2.0). :class:`CurveError` names the curve, the field and the fix."""
    fix = f"rewrite the file with `isocompute fit` (its '{REWARD_CURVES_KEY}' field)"
    entries = field.get("curves") if isinstance(field, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CurveError(f"{source}: {REWARD_CURVES_KEY} must be an object with a non-empty list 'curves'; {fix}")
    bounds = metric_range(metric)
    by_b_problem = field.get("group_by") == "n,b_problem"  # the fit's --group-by: one curve per n, or per (n, B_problem)
    out: list[dict[str, Any]] = []
    seen: dict[tuple, int] = {}
    for i, entry in enumerate(entries):
        where = f"{source}: {REWARD_CURVES_KEY}.curves[{i}]"
        if not isinstance(entry, dict) or any(key not in entry for key in ("n", *_CURVE_PARAMS, "c_range")):
            raise CurveError(f"{where} needs n, R0, A, C_mid, beta and c_range [C_min, C_max]; {fix}")
        n, b_problem, runs = entry["n"], entry.get("b_problem"), entry.get("runs", 1)
        if not _is_count(n) or not (b_problem is None or _is_count(b_problem)) or not _is_count(runs):
            raise CurveError(f"{where}: n, b_problem and runs must be positive integers (b_problem may be null), got "
                             f"n={n!r}, b_problem={b_problem!r}, runs={runs!r}; {fix}")
        where = f"{where} (n={int(n)})"
        values = [entry[key] for key in _CURVE_PARAMS]
        c_range = entry["c_range"]
        if not all(map(is_real, values)) or not (isinstance(c_range, list) and len(c_range) == 2 and all(map(is_real, c_range))):
            raise CurveError(f"{where}: R0, A, C_mid, beta and both ends of c_range must be finite numbers; {fix}")
        R0, A, C_mid, beta = map(float, values)
        lo, hi = map(float, c_range)
        if not (C_mid > 0 and beta > 0 and 0 < lo <= hi and R0 <= A):
            raise CurveError(f"{where} needs C_mid > 0, beta > 0, R0 <= A and 0 < C_min <= C_max, got C_mid={C_mid:g}, "
                             f"beta={beta:g}, R0={R0:g}, A={A:g}, c_range=[{lo:g}, {hi:g}]; {fix}")
        if bounds is not None and not bounds[0] <= R0 <= A <= bounds[1]:
            raise CurveError(f"{where}: R0 = {R0:g} and A = {A:g} must lie in [{bounds[0]:g}, {bounds[1]:g}], the range "
                             f"of {metric} (a share of samples); {fix}")
        key = (int(n), b_problem and int(b_problem)) if by_b_problem else (int(n),)
        if key in seen:
            what = f"n={key[0]}" + (f", b_problem={key[1]}" if by_b_problem else "")
            raise CurveError(f"{where}: a second curve for {what} (curves[{seen[key]}] is the first): the fit "
                             f"writes one per {'(n, b_problem)' if by_b_problem else 'n'}; {fix}")
        seen[key] = i
        at_bounds, not_identified = entry.get("at_bounds", {}), entry.get("not_identified", [])
        if not (isinstance(at_bounds, dict) and set(at_bounds) <= set(_CURVE_PARAMS)
                and all(side in ("lower", "upper") for side in at_bounds.values())):
            raise CurveError(f"{where}: at_bounds must map R0, A, C_mid or beta to \"lower\" or \"upper\", got "
                             f"{at_bounds!r}; {fix}")
        if not (isinstance(not_identified, list) and set(not_identified) <= {"R0", "C_mid"}):
            raise CurveError(f"{where}: not_identified must be a list of \"R0\" and \"C_mid\", got {not_identified!r}; {fix}")
        draws = entry.get("bootstrap")
        if draws is not None and not (isinstance(draws, list) and all(
                row is None or (isinstance(row, list) and len(row) == 4 and all(map(is_real, row))) for row in draws)):
            raise CurveError(f"{where}: bootstrap must be a list of [R0, A, C_mid, beta] rows of finite numbers "
                             f"(null for a resample not refitted); {fix}")
        if draws is not None and out and len(draws) != len(out[0]["bootstrap"] or []):
            raise CurveError(f"{where}: bootstrap has {len(draws)} resamples, curves[0] "
                             f"{len(out[0]['bootstrap'] or [])}: every curve holds the same resamples; {fix}")
        out.append({"n": int(n), "b_problem": None if b_problem is None else int(b_problem), "R0": R0, "A": A,
                    "C_mid": C_mid, "beta": beta, "c_range": (lo, hi), "runs": int(runs),
                    "at_bounds": dict(at_bounds), "not_identified": tuple(not_identified),
                    "bootstrap": None if draws is None else [None if row is None else [float(v) for v in row]
                                                             for row in draws]})
    return out


def sigmoid_log2_n(log10_c: Any, L: float, k: float, log10_C0: float, b: float) -> Any:
    """log2 n*(C) = L / (1 + exp(-k (log10 C - log10 C0))) + b, element-wise on arrays.

    The logistic is written as (1 + tanh(z / 2)) / 2, which is the same function but never overflows
    (exp(-z) does for a sharp switch far from C0). This is the one place the formula is written: the fitter
    (:mod:`verl_isocompute.scaling.fit`) uses it and :func:`sigmoid_log2_n_jacobian`.
    """
    return L * _logistic(k * (np.asarray(log10_c, dtype=float) - log10_C0)) + b


def sigmoid_log2_n_jacobian(log10_c: Any, L: Any, k: Any, log10_C0: Any, b: Any) -> np.ndarray:
    """d log2 n* / d(L, k, log10_C0, b), stacked on a last axis of 4 (the fitter's Jacobian).

    Parameters broadcast against ``log10_c``: scalars for one curve, shape (N, 1) against (N, M) for N curves.
    """
    x = np.asarray(log10_c, dtype=float) - log10_C0
    e = _logistic(k * x)
    slope = L * e * (1.0 - e)
    return np.stack(np.broadcast_arrays(e, slope * x, -slope * k, np.ones_like(e)), axis=-1)


def _logistic(z: Any) -> np.ndarray:
    # 1 / (1 + exp(-z)) written as (1 + tanh(z / 2)) / 2: the same function, but it never overflows.
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z, dtype=float)))


@dataclass(frozen=True)
class Curve:
    L: float
    k: float
    log10_C0: float
    b: float
    compute_unit: str = "rollouts"
    metric: str = DEFAULT_METRIC
    c_range: tuple[float, float] | None = None
    n_grid: tuple[int, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("L", "k", "log10_C0", "b"):
            if not is_real(getattr(self, name)):
                raise CurveError(f"{name} must be a finite number, got {getattr(self, name)!r}; {_FIX}")
        if self.k <= 0:
            raise CurveError(f"k must be > 0 (n* grows with compute; a fit gives 0.001..50), got {self.k!r}; {_FIX}")
        if self.L < 0:
            raise CurveError(f"L must be >= 0 (the ceiling 2^(L+b) is not below the floor 2^b), got {self.L!r}; {_FIX}")
        if self.b < LOG2_N_FLOOR_MIN:
            raise CurveError(
                f"b must be >= {LOG2_N_FLOOR_MIN:g} (a floor n* = 2^b of at least 1/8), got {self.b!r}; {_FIX}"
            )
        if self.L + self.b > LOG2_N_CEILING_MAX:
            raise CurveError(
                f"L + b must be <= {LOG2_N_CEILING_MAX:g} (a ceiling n* = 2^(L+b) of at most 2^30 rollouts per "
                f"problem), got L = {self.L!r}, b = {self.b!r}; {_FIX}"
            )
        low, high = LOG10_C0_RANGE
        if not low <= self.log10_C0 <= high:
            raise CurveError(
                f"log10_C0 must be in [{low:g}, {high:g}] (the switch within a decade of 1 to 1e20 {self.compute_unit}), "
                f"got {self.log10_C0!r}; {_FIX}"
            )
        if self.compute_unit not in COMPUTE_UNITS:
            raise CurveError(f"compute_unit must be one of {', '.join(COMPUTE_UNITS)}, got {self.compute_unit!r}; {_FIX}")
        if self.c_range is not None:
            if len(self.c_range) != 2 or not all(is_real(c) for c in self.c_range) or not 0 < self.c_range[0] < self.c_range[1]:
                raise CurveError(f"c_range must be [C_min, C_max] with 0 < C_min < C_max, or null, got {self.c_range!r}; {_FIX}")

    def log2_n_star(self, compute: float | np.ndarray) -> float | np.ndarray:
        """log2 n*(C) from the sigmoid; ``compute`` in this curve's ``compute_unit``."""
        out = sigmoid_log2_n(np.log10(np.asarray(compute, dtype=float)), self.L, self.k, self.log10_C0, self.b)
        return float(out) if np.ndim(out) == 0 else out

    def n_star(self, compute: float | np.ndarray) -> float | np.ndarray:
        """The compute-optimal (continuous) n at budget C."""
        out = np.exp2(self.log2_n_star(compute))
        return float(out) if np.ndim(out) == 0 else out

    @property
    def n_floor(self) -> float:
        return 2.0**self.b

    @property
    def n_ceiling(self) -> float:
        return 2.0 ** (self.L + self.b)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["c_range"] = list(self.c_range) if self.c_range is not None else None
        d["n_grid"] = list(self.n_grid)
        extra = d.pop("extra")
        d.update(extra)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<dict>") -> "Curve":
        """A curve from a parsed ``curve.json``; :class:`CurveError` names the field, the file and the fix."""
        if not isinstance(d, dict):
            raise CurveError(f"{source}: a curve file must hold a JSON object, got {type(d).__name__}")
        missing = [key for key in _REQUIRED if key not in d]
        if missing:
            raise CurveError(
                f"{source}: curve is missing {', '.join(missing)}; a curve file needs "
                f"{', '.join(_REQUIRED)} (write one with `isocompute fit`, or use a paper: preset)"
            )
        for key in ("L", "k", "log10_C0", "b"):
            if not is_real(d[key]):
                raise CurveError(f"{source}: {key} must be a finite number, got {d[key]!r}; {_FIX}")
        if not isinstance(d["metric"], str) or not d["metric"]:
            raise CurveError(f"{source}: metric must be a metric name such as \"val/avg@4\", got {d['metric']!r}; {_FIX}")
        c_range = d.get("c_range")
        if c_range is not None and not (isinstance(c_range, list) and len(c_range) == 2 and all(map(is_real, c_range))):
            raise CurveError(f"{source}: c_range must be [C_min, C_max] (two numbers) or null, got {c_range!r}; {_FIX}")
        n_grid = d.get("n_grid")
        if n_grid is not None and not (isinstance(n_grid, list) and all(map(_is_count, n_grid))):
            raise CurveError(f"{source}: n_grid must be a list of positive integers such as [8, 16, 32], got {n_grid!r}; {_FIX}")
        provenance = d.get("provenance")
        if provenance is not None and not isinstance(provenance, dict):
            raise CurveError(f"{source}: provenance must be a JSON object (source, date, runs, ...) or null, got {provenance!r}; {_FIX}")
        if d.get(REWARD_CURVES_KEY) is not None:
            reward_curve_entries(d[REWARD_CURVES_KEY], d["metric"], source)
        known = set(_REQUIRED) | {"c_range", "n_grid", "provenance"}
        try:
            return cls(
                **{key: float(d[key]) for key in ("L", "k", "log10_C0", "b")},
                compute_unit=d["compute_unit"],
                metric=d["metric"],
                c_range=None if c_range is None else (float(c_range[0]), float(c_range[1])),
                n_grid=tuple(int(n) for n in n_grid or ()),
                provenance=dict(provenance or {}),
                extra={k: v for k, v in d.items() if k not in known},
            )
        except CurveError as exc:
            raise CurveError(f"{source}: {exc}") from None


def preset_names() -> list[str]:
    """Names of the paper presets shipped with the package (use as ``paper:<name>``)."""
    folder = resources.files("verl_isocompute.scaling") / "presets"
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def load_curve(spec: str | Path) -> Curve:
    """Load a curve from a ``curve.json`` path or a ``paper:<name>`` preset."""
    spec_str = str(spec)
    if spec_str.startswith(PRESET_PREFIX):
        name = spec_str[len(PRESET_PREFIX):]
        names = preset_names()
        if name not in names:
            raise CurveError(f"unknown preset {spec_str!r}; presets: {', '.join(PRESET_PREFIX + n for n in names)}")
        text = (resources.files("verl_isocompute.scaling") / "presets" / f"{name}.json").read_text()
        source = spec_str
    else:
        path = Path(spec_str)
        stale = path.with_name(STALE_CURVE_FILE)
        if not path.exists() and path.name == CURVE_FILE and stale.is_file():
            raise CurveError(
                f"curve file {path} not found: the last `isocompute fit` into {path.parent} found no n*(C) curve "
                f"(see its report.md) and set the older curve aside as {stale}; fix the fit, or pass {stale} to "
                "use the older curve knowingly"
            )
        if not path.is_file():
            raise CurveError(f"curve file {path} not found; pass a curve.json written by `isocompute fit` or a paper: preset")
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise CurveError(f"cannot read curve file {path} ({exc}); pass a curve.json written by `isocompute fit`") from None
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CurveError(f"{source}: not valid JSON ({exc}); re-run `isocompute fit` to rewrite it") from None
    return Curve.from_dict(data, source=source)

