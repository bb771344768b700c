"""Rollouts tied to their weights (rules/weight_version.py): before the update of step k every rollout must
carry the weight version k - 1 that verl stamps on it. The run that skips a weight sync is in test_e2e_cpu.py."""

from __future__ import annotations

import pytest

from verl_isocompute.rules.weight_version import StaleRolloutError, check_rollout_versions


def _tags(*spans, padding=0):
    rows = [{"status": "success", "min_global_steps": lo, "max_global_steps": hi} for lo, hi in spans]
    return rows + [{"is_padding": True, "min_global_steps": None, "max_global_steps": None}] * padding


def test_rollouts_of_the_current_weights_pass():
    assert check_rollout_versions(_tags((2, 2), (2, 2), padding=2), step=3) == 2
    assert check_rollout_versions(_tags((0, 0)), step=1) == 0  # the first step samples with the initial weights


@pytest.mark.parametrize(("spans", "found"), [
    ([(1, 1), (2, 2), (1, 1)], "2 from version 1"),  # a weight sync that did not happen
    ([(2, 2), (1, 2)], "1 from version 1 to 2"),  # a rollout whose turns saw two versions (partial rollout)
    ([(3, 3)], "1 from version 3"),
])
def test_rollouts_of_other_weights_stop_the_run(spans, found):
    with pytest.raises(StaleRolloutError, match=rf"^step 3: the trainer's weights are version 2 \(its number of updates so far\), "
                                                rf"but of {len(spans)} rollouts {found}: a weight sync did not reach"):
        check_rollout_versions(_tags(*spans), step=3)


def test_a_backend_that_reports_no_version_is_not_checked():
    assert check_rollout_versions(_tags((None, None)), step=3) is None
    assert check_rollout_versions([], step=3) is None
    with pytest.raises(StaleRolloutError, match="1 from version None"):  # some rows stamped, others not
        check_rollout_versions(_tags((2, 2), (None, None)), step=3)
