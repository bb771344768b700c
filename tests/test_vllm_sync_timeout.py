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
