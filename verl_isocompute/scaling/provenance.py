"""What curve.json records of where its n*(C) came from (``provenance``): the tool, the runs, the fit's
settings, and the fit's own figures: R², RMSE, bounds and 95% intervals for a sigmoid; for a flat curve (one
n best at every C) the placeholders it carries and the bootstrap's support. It is for people: the curve-file
contract (:mod:`verl_isocompute.scaling.curve`) takes any JSON object here and no code reads it back.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def sigmoid_provenance(frontier, groups, settings, fit, ci, stats) -> dict[str, Any]:
    """A fitted sigmoid's: its R², RMSE in log2 n, parameters at a bound, resamples fitted, 95% intervals."""
    prov = {
        **runs_provenance(frontier, groups, settings),
        "r2": fit.r2,
        "rmse_log2_n": fit.rmse,
        "at_bounds": list(fit.at_bounds),
        "bootstrap_succeeded": stats["succeeded"],
        "bootstrap_flat": stats.get("flat", 0),  # of them, resamples on which n* does not move (counted as L = 0)
    }
    if ci is not None:
        prov["ci95"] = {row.param: [float(row.low), float(row.high)] for row in ci.itertuples()}
    return prov


def flat_provenance(frontier, groups, settings, flat) -> dict[str, Any]:
    """A flat curve's: which parameters are placeholders, and on how many resamples the same n won everywhere."""
    return {
        **runs_provenance(frontier, groups, settings),
        "flat": True,  # one n is n* at every C: L = 0, and k, log10_C0 are placeholders
        "not_identified": ["k", "log10_C0"],
        "bootstrap_succeeded": flat["succeeded"],
        "bootstrap_flat": flat["flat"],
    }


def runs_provenance(frontier, groups, settings) -> dict[str, Any]:
    """What every curve.json records of where it came from: the tool, the runs, the fit's settings."""
    from verl_isocompute import __version__

    runs = sorted({run for g in groups for run in g.runs})
    return {
        "source": "isocompute fit (IsoCompute playbook workflow, arXiv 2603.12151 section 4)",
        "tool_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "num_runs": len(runs),
        "runs": runs,
        "b_problem": sorted(int(b) for b in frontier.points["b_problem"].unique()),
        **settings,
        **({"lr_settings": lr} if (lr := lr_settings(frontier.runs, runs)) else {}),
    }


def lr_settings(table, runs) -> dict[str, Any] | None:
    """The lr settings of the runs behind the curve, from their run-log headers (issue 43): ``lr_rule``,
    ``warmup_steps``, and ``base_lr`` / ``b_ref`` as one run's lr and its batch (rollouts per step), which is the
    rule's anchor: under the sqrt rule lr(B) = base_lr x sqrt(B / b_ref) for any run of it. ``runs`` lists each
    run's lr and batch. None when the headers do not say (logs other than ours), or the runs disagree on the rule
    or the warm-up (then there is no one setting to reuse)."""
    keys = ("lr", "lr_warmup_steps", "lr_rule", "lr_batch_rollouts")
    if table is None or not set(keys) <= set(table.columns):
        return None
    rows = table[table["run"].isin(runs)]
    if rows.empty or rows[list(keys)].isna().any().any():
        return None
    if rows["lr_rule"].nunique() != 1 or rows["lr_warmup_steps"].nunique() != 1:
        return None
    first = rows.iloc[0]
    return {
        "lr_rule": str(first["lr_rule"]), "warmup_steps": int(first["lr_warmup_steps"]),
        "base_lr": float(first["lr"]), "b_ref": float(first["lr_batch_rollouts"]),
        "runs": {str(r["run"]): {"lr": float(r["lr"]), "batch_rollouts": float(r["lr_batch_rollouts"])}
                 for _, r in rows.iterrows()},
    }
