"""The bound on each wait of a vLLM weight sync (verl_isocompute/cpu/vllm_cpu.py, point 6): the default, the
environment's setting, and a bad setting refused with the variable's name and the fix."""

from __future__ import annotations

import pytest

from verl_isocompute.cpu.vllm_cpu import SYNC_REPLY_TIMEOUT_S, SYNC_TIMEOUT_ENV, sync_reply_timeout_s
from verl_isocompute.errors import IsoComputeError


def test_unset_is_the_default_and_a_whole_number_replaces_it(monkeypatch):
    monkeypatch.delenv(SYNC_TIMEOUT_ENV, raising=False)
    assert sync_reply_timeout_s() == SYNC_REPLY_TIMEOUT_S == 40
    monkeypatch.setenv(SYNC_TIMEOUT_ENV, "7")
    assert sync_reply_timeout_s() == 7


@pytest.mark.parametrize("value", ["0", "-5", "2.5", "ten"])
def test_a_bad_setting_is_refused_by_name_not_replaced_by_the_default(monkeypatch, value):
    monkeypatch.setenv(SYNC_TIMEOUT_ENV, value)
    with pytest.raises(IsoComputeError, match=rf"{SYNC_TIMEOUT_ENV}='{value}' is not a positive whole number.*unset it"):
        sync_reply_timeout_s()


def test_a_bad_setting_stops_a_vllm_launch_on_cpu_before_ray_starts(monkeypatch):
    """The launch's platform check reads the setting, so a typo is one line at launch, not an error raised in a
    rollout worker once Ray is up (the bound itself is read there, in the process that syncs)."""
    from omegaconf import OmegaConf

    from verl_isocompute.training.config import RecipeError, check_platform

    cfg = OmegaConf.create({"isocompute": {"platform": "cpu"}, "actor_rollout_ref": {"rollout": {"name": "vllm"}}})
    monkeypatch.delenv("VERL_PLATFORM", raising=False)
    monkeypatch.setenv(SYNC_TIMEOUT_ENV, "soon")
    with pytest.raises(RecipeError, match=SYNC_TIMEOUT_ENV):  # the launcher's one-line error
        check_platform(cfg)
