"""Old import paths of modules that moved in 0.2, kept working for one release (listed in CHANGELOG.md).

``import verl_isocompute.trainer`` (or ``pkg://verl_isocompute.reward`` in a verl config) still works: a
finder at the front of ``sys.meta_path`` maps exactly the old names to the modules' new homes, so both
names are the *same* module object (no second copy, no second registration), and warns with the new
name. It must come first: ``verl_isocompute.sweep`` is now ``workflow/sweep/``, and the default finder
would otherwise load ``verl_isocompute.sweep.plan`` a second time from that directory.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

# old module path -> new module path (0.1 -> 0.2)
MOVED: dict[str, str] = {
    "verl_isocompute.advantage": "verl_isocompute.training.advantage",
    "verl_isocompute.regularizers": "verl_isocompute.training.regularizers",
    "verl_isocompute.trainer": "verl_isocompute.training.trainer",
    "verl_isocompute.reward": "verl_isocompute.rules.reward",
    "verl_isocompute.lr": "verl_isocompute.rules.lr",
    "verl_isocompute.metrics": "verl_isocompute.rules.metrics",
    "verl_isocompute.compose": "verl_isocompute.training.config",
    "verl_isocompute.allocation": "verl_isocompute.training.allocation_hook",  # the hook; re-exports the pure rule
    "verl_isocompute.allocation_cli": "verl_isocompute.commands.allocate",
    "verl_isocompute.cli": "verl_isocompute.commands.cli",
    "verl_isocompute.demo": "verl_isocompute.commands.demo",
    "verl_isocompute.doctor": "verl_isocompute.commands.doctor",
    "verl_isocompute.scaling.cli": "verl_isocompute.commands.fit",
    "verl_isocompute.data.curate": "verl_isocompute.workflow.curate",
    "verl_isocompute.data.curate_cli": "verl_isocompute.commands.curate",
    "verl_isocompute.data.rollouts": "verl_isocompute.workflow.rollouts",
    "verl_isocompute.sweep": "verl_isocompute.workflow.sweep",
    "verl_isocompute.sweep.plan": "verl_isocompute.workflow.sweep.plan",
    "verl_isocompute.sweep.runner": "verl_isocompute.workflow.sweep.runner",
    "verl_isocompute.sweep.cli": "verl_isocompute.commands.sweep",
    # renamed in 0.2 so that each says what it holds ("records" meant run logs, the paper's record-breaking
    # points, cache lines and JSON rows; a "recipe" module held no recipe; "registrations" registers nothing)
    "verl_isocompute.scaling.records": "verl_isocompute.scaling.run_logs",
    "verl_isocompute.scaling.frontier": "verl_isocompute.scaling.points",
    "verl_isocompute.guided.search": "verl_isocompute.guided.search_rules",
    "verl_isocompute.guided.prefix_search": "verl_isocompute.guided.search_tables",
    "verl_isocompute.guided.recipe": "verl_isocompute.training.guided_mixture",
    "verl_isocompute.registrations": "verl_isocompute.registration_probes",
    # 0.2, the layers as folders: the pure rules verl-facing code uses go to rules/ (and the run-time n rules
    # to scaling/); the guided hooks verl runs go to training/, leaving guided/ pure
    "verl_isocompute.training.answers": "verl_isocompute.rules.answers",
    "verl_isocompute.training.format_metrics": "verl_isocompute.rules.format_metrics",
    "verl_isocompute.training.lr": "verl_isocompute.rules.lr",
    "verl_isocompute.training.masks": "verl_isocompute.rules.masks",
    "verl_isocompute.training.metrics": "verl_isocompute.rules.metrics",
    "verl_isocompute.training.names": "verl_isocompute.rules.names",
    "verl_isocompute.training.progress": "verl_isocompute.rules.progress",
    "verl_isocompute.training.reward": "verl_isocompute.rules.reward",
    "verl_isocompute.training.weight_version": "verl_isocompute.rules.weight_version",
    "verl_isocompute.training.adaptive": "verl_isocompute.scaling.adaptive",
    "verl_isocompute.training.per_prompt_n": "verl_isocompute.scaling.per_prompt_n",
    "verl_isocompute.guided.agent_loop": "verl_isocompute.training.guided_agent_loop",
    "verl_isocompute.guided.mixture": "verl_isocompute.training.guided_mixture",
    "verl_isocompute.guided.training_set": "verl_isocompute.training.guided_training_set",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old name to the already-importable new module."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname == "verl_isocompute.sweep")

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; the old name goes away in 0.3", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        pass  # the new module is already executed


def install() -> None:
    """Add the alias finder once (idempotent). It claims only the names in :data:`MOVED`."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())


def moved_names(module: str, moved: dict[str, str], renamed: dict[str, str] | None = None,
                replaced: dict[str, tuple[str, Any]] | None = None):
    """A module-level ``__getattr__`` for names that moved out of ``module`` when it was split (0.2): each
    resolves from its new home (the same object) with a ``DeprecationWarning`` naming it, for one release.
    ``moved``: name -> the module it lives in now; ``renamed``: old name -> its new name in ``module`` (the
    settings classes' one suffix, 0.2); ``replaced``: old name -> (what to write instead, the value the old name
    still gives: a function that calls the replacement). Any other missing name is the usual AttributeError."""
    renamed, replaced = renamed or {}, replaced or {}

    def __getattr__(name: str):
        if name in moved:
            warnings.warn(f"{module}.{name} moved to {moved[name]}; the old path goes away in 0.3", DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(moved[name]), name)
        if name in renamed:
            warnings.warn(f"{module}.{name} is now {module}.{renamed[name]}; the old name goes away in 0.3", DeprecationWarning, stacklevel=2)
            return getattr(sys.modules[module], renamed[name])
        if name in replaced:
            spelling, value = replaced[name]
            warnings.warn(f"{module}.{name} is now {spelling}; the old name goes away in 0.3", DeprecationWarning, stacklevel=2)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
