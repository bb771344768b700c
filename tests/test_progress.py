"""Progress inside a step: the trainer's phase markers, the status line the demo shows, the ETA."""

from __future__ import annotations

import pytest

from verl_isocompute.rules import progress
from verl_isocompute.rules.progress import Phase


def test_marker_survives_rays_line_prefix():
    line = "(TaskRunner pid=4242) " + progress.phase_marker(2, 4, progress.OLD_LOG_PROB, 1700000000.25)
    assert progress.parse_phase(line) == Phase(2, 4, 1700000000.25, "old log-prob")
    assert progress.parse_phase("[isocompute] lr: 1e-5") is None
    assert progress.parse_phase("[isocompute] phase step=x") is None


@pytest.mark.parametrize(("seconds", "text"), [(0.4, "0 s"), (41.4, "41 s"), (59.6, "1 min 00 s"), (185, "3 min 05 s"),
                                               (3720, "1 h 02 min"), (-3, "0 s")])
def test_format_duration(seconds, text):
    assert progress.format_duration(seconds) == text


def test_status_names_step_phase_and_elapsed():
    assert progress.format_status(Phase(1, 4, 100.0, progress.ROLLOUT), 141.2) == "step 1/4: rollout ... 41 s"
    assert progress.format_status(Phase(0, 4, 100.0, progress.VALIDATION), 112) == "validation before training ... 12 s"
    assert progress.format_status(Phase(4, 4, 0.0, progress.VALIDATION), 65) == "step 4/4: validation ... 1 min 05 s"


def test_eta_counts_the_steps_left_and_the_final_validation():
    assert progress.eta_seconds([], 4, 30.0, True) is None
    assert progress.eta_seconds([60.0], 4, 30.0, True) == 3 * 60 + 30
    assert progress.eta_seconds([60.0], 4, 30.0, False) == 180
    assert progress.eta_seconds([50.0, 70.0, 400.0], 4, None, True) == 70  # median: one slow step does not dominate
    assert progress.eta_seconds([60.0] * 4, 4, 30.0, True) == 0  # verl logs the last step after its final validation


def test_announcer_prints_markers_and_hands_on_to_verl(capsys):
    calls = []

    class Verl:
        def on_sample_begin(self):
            calls.append("sample")

        def _update_actor(self, batch, metrics):
            calls.append("update")
            return batch

        def on_validate_begin(self):
            calls.append("validate")

    class Trainer(progress.PhaseAnnouncer, Verl):
        global_steps, total_training_steps = 3, 4

    t = Trainer()
    t.on_sample_begin()
    assert t._update_actor("batch", {}) == "batch"
    t.global_steps = 4  # verl validates after step k with global_steps still k
    t.on_validate_begin()
    phases = [progress.parse_phase(line) for line in capsys.readouterr().out.splitlines()]
    assert [(p.step, p.total, p.name) for p in phases] == [(3, 4, "rollout"), (3, 4, "update"), (4, 4, "validation")]
    assert calls == ["sample", "update", "validate"]
