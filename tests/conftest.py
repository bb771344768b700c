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
