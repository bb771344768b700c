"""Shared fixtures: the tiny model is built once per session into a temporary cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def isocompute_cache(tmp_path_factory) -> Path:
    """A cache directory shared by the whole session (models, generated data)."""
    root = Path(os.environ.get("ISOCOMPUTE_TEST_CACHE") or tmp_path_factory.mktemp("isocompute-cache"))
    os.environ["ISOCOMPUTE_CACHE"] = str(root)
    return root


@pytest.fixture(scope="session")
def tiny_model_path(isocompute_cache) -> Path:
    from verl_isocompute.cpu.models import ensure_model

    return ensure_model("tiny", root=isocompute_cache / "models")


# --- hydra's compose, once per config and overrides per session -------------------------------------------
# The fast lane composes verl's ppo_trainer and our recipes a few hundred times, often with the same overrides
# (~0.2-0.5 s each, the largest share of its time after imports). Composition is deterministic in the config
# sources (with their files' sizes and times, so a config a test writes and rewrites is composed again), the
# config name and the overrides; each caller gets its own deep copy, and a failing composition is never cached.
_composed: dict = {}


def _sources_key(gh) -> tuple:
    key = []
    for source in gh.config_loader().get_sources():
        files = ()
        if source.provider and source.scheme() == "file" and os.path.isdir(source.path):
            files = tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in Path(source.path).rglob("*.yaml")))
        key.append((source.scheme(), source.path, files))
    return tuple(key)


def _cached_compose(original):
    import copy
    import functools

    @functools.wraps(original)
    def compose(config_name=None, overrides=None, return_hydra_config=False, strict=None):
        from hydra.core.global_hydra import GlobalHydra

        if strict is not None or not GlobalHydra().is_initialized():
            return original(config_name, overrides, return_hydra_config, strict)
        key = (_sources_key(GlobalHydra.instance()), config_name, tuple(overrides or ()), return_hydra_config)
        if key not in _composed:
            _composed[key] = original(config_name, list(overrides or ()), return_hydra_config)
        return copy.deepcopy(_composed[key])

    return compose


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the collection order (see LONGEST_FIRST)
        config.option.loadscopereorder = False
    import hydra

    if not getattr(hydra.compose, "_isocompute_cached", False):
        hydra.compose = _cached_compose(hydra.compose)
        hydra.compose._isocompute_cached = True


# --- the longest modules first ----------------------------------------------------------------------------
# The full suite runs on two workers with `--dist loadfile` (README): each worker takes whole files in collection
# order, so a long file collected last would run alone while the other worker idles. Longest first keeps both
# busy to the end (setup + calls per module, about, in seconds on 2 cores; only the order matters). xdist would
# otherwise reorder the files by their number of tests, which puts the e2e files (few tests, minutes each) last:
# pytest_configure turns that off (the same as `--no-loadscope-reorder`).
LONGEST_FIRST = (  # seconds measured on 2 busy cores, 2026-12-02 (early stop, calibration: 2026-12-03)
    "test_adaptive_e2e.py",             # 350: the schedule's two runs, its budget spent by evictions, per-prompt n
    "test_sweep_e2e.py",                # 340: curate, a sweep stopped and resumed on a Ray head, fit, train
    "test_recipe_e2e.py",               # 340: three runs, one killed and resumed
    "test_vllm_cpu_e2e.py",             # 290: two runs with verl's vLLM rollout (one whose vLLM worker dies, 20 s bound)
    "test_e2e_cpu.py",                  # 240: the README's demo run, and again with a weight sync skipped
    "test_stop_e2e.py",                 # 190: four commands stopped by SIGTERM
    "test_verl_unaffected.py",          # 175: verl's own CPU tests, with and without our plugin
    "test_guided_walkthrough_e2e.py",   # 135: the guided page's commands as written
    "test_early_stop_e2e.py",           # 120: one cell (n = 2 given finished) stopped by the sequential pilot, rerun
    "test_stock_e2e.py",                # 115: two runs through verl's own main_ppo
    "test_plugin_on_import.py",         # 90: fresh processes importing one module first
    "test_doctor.py",                   # 85: the doctor's fresh processes
    "test_guided_e2e.py",               # 85
    "test_user_config_e2e.py",          # 80: verl's ppo_trainer with the user's CPU sizes
    "test_resolved_configs.py",         # 65: 50 launches resolved in process
    "test_calibration.py",              # 50: known-truth sweeps fitted and bootstrapped, in process
    "test_traces_e2e.py",               # 40
    "test_prefix_search_e2e.py",        # 35
)


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keeps its order
