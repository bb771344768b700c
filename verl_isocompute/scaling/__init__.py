"""Scaling toolkit: from run logs to the compute-optimal frontier and the n*(C) sigmoid.

Layer: pure rules.

Pure Python on numpy/scipy/pandas/matplotlib: nothing here imports verl or torch. The notebook path,
each step returning plain data (dataclasses holding dataframes)::

    from verl_isocompute import scaling
    logs = scaling.load_runs(["runs/easy_sweep"])                 # RunLogs
    frontier = scaling.build_frontier(logs, metric="val/avg@4")   # Frontier (points, records)
    result = scaling.fit_frontier(frontier, group_by="n")         # FrontierFit (groups, grid, curve, ci)
    figures = scaling.plot_frontier(result, compare=scaling.load_curve("paper:qwen2.5-7b-easy"))
    scaling.write_outputs(result, "fit_out")                      # what `isocompute fit` writes

Names are imported lazily so that ``isocompute --help`` does not pay for pandas and scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Curve": "curve", "CurveError": "curve", "load_curve": "curve", "preset_names": "curve",
    "ScalingError": "errors", "FitError": "errors",
    "RunLogs": "run_logs", "load_runs": "run_logs", "find_logs": "log_files",
    "Frontier": "points", "build_frontier": "points", "validation_points": "points",
    "record_breaking": "points", "record_mask": "points", "frontier_value": "points", "bucket_index": "points", "smooth_in_compute": "points",
    "FrontierFit": "fit", "fit_frontier": "fit", "SaturatingCurve": "saturating", "fit_saturating": "saturating",
    "SigmoidFit": "sigmoid_fit", "fit_sigmoid": "sigmoid_fit",
    "plot_frontier": "plots", "save_plots": "plots",
    "write_outputs": "report", "render_report": "report",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
