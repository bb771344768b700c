"""The n*(C) curve: the one place its formula and its file format live.

The IsoCompute playbook (arXiv 2603.12151, section 4) fits the compute-optimal number of rollouts per
problem as a sigmoid in log space, C in rollouts (or tokens), log base 10 for C and base 2 for n:

    log2 n*(C) = L / (1 + exp(-k * (log10 C - log10_C0))) + b

so n* rises from a floor 2^b at small budgets to a ceiling 2^(L + b) at large ones, with the switch
centred at C0 and its sharpness set by k.

Curve file (``curve.json``) contract: ``L``, ``k``, ``log10_C0``, ``b``, ``compute_unit``
(``rollouts`` | ``tokens``), ``metric``, ``c_range`` ([C_min, C_max] it was fitted on), ``n_grid``
(the n values of the runs), ``provenance`` (free-form dict: source, fit date, runs, ...). Optional
extra keys are kept on load (``extra``). Paper presets ship as ``presets/<name>.json`` and are
addressed as ``paper:<name>``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

COMPUTE_UNITS = ("rollouts", "tokens")
PRESET_PREFIX = "paper:"
_REQUIRED = ("L", "k", "log10_C0", "b", "compute_unit", "metric")


class CurveError(ValueError):
    """A curve file or preset that cannot be used; the message names the problem and the fix."""


@dataclass(frozen=True)
class Curve:
    L: float
    k: float
    log10_C0: float
    b: float
    compute_unit: str = "rollouts"
    metric: str = "val/avg@4"
    c_range: tuple[float, float] | None = None
    n_grid: tuple[int, ...] = ()
    provenance: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def log2_n_star(self, compute: float | np.ndarray) -> float | np.ndarray:
        """log2 n*(C) from the sigmoid; ``compute`` in this curve's ``compute_unit``."""
        x = np.log10(np.asarray(compute, dtype=float))
        out = self.L / (1.0 + np.exp(-self.k * (x - self.log10_C0))) + self.b
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
        if not isinstance(d, dict):
            raise CurveError(f"{source}: a curve file must hold a JSON object, got {type(d).__name__}")
        missing = [key for key in _REQUIRED if key not in d]
        if missing:
            raise CurveError(
                f"{source}: curve is missing {', '.join(missing)}; a curve file needs "
                f"{', '.join(_REQUIRED)} (write one with `isocompute fit`, or use a paper: preset)"
            )
        values = {}
        for key in ("L", "k", "log10_C0", "b"):
            try:
                values[key] = float(d[key])
            except (TypeError, ValueError):
                raise CurveError(f"{source}: {key} must be a number, got {d[key]!r}") from None
            if not math.isfinite(values[key]):
                raise CurveError(f"{source}: {key} must be finite, got {d[key]!r}")
        if d["compute_unit"] not in COMPUTE_UNITS:
            raise CurveError(f"{source}: compute_unit must be one of {COMPUTE_UNITS}, got {d['compute_unit']!r}")
        c_range = d.get("c_range")
        known = set(_REQUIRED) | {"c_range", "n_grid", "provenance"}
        return cls(
            **values,
            compute_unit=d["compute_unit"],
            metric=str(d["metric"]),
            c_range=tuple(float(c) for c in c_range) if c_range else None,
            n_grid=tuple(int(n) for n in d.get("n_grid") or ()),
            provenance=dict(d.get("provenance") or {}),
            extra={k: v for k, v in d.items() if k not in known},
        )


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
        if not path.is_file():
            raise CurveError(f"curve file {path} not found; pass a curve.json written by `isocompute fit` or a paper: preset")
        text = path.read_text()
        source = str(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CurveError(f"{source}: not valid JSON ({exc}); re-run `isocompute fit` to rewrite it") from None
    return Curve.from_dict(data, source=source)
