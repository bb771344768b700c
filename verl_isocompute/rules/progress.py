"""Progress inside a training step: the trainer announces each phase, the demo shows it with elapsed time.

A SmolLM2 step on a 2-core CPU takes about a minute, validation tens of seconds; with nothing on the
screen meanwhile a slow machine looks hung. The trainer (in verl's TaskRunner, a Ray actor) prints one
marker line when a phase starts - :func:`phase_marker` - which Ray forwards to the driver's output (with
a ``(TaskRunner pid=...)`` prefix, hence :func:`parse_phase` searches the line). The marker carries the
wall-clock time it was printed at, so forwarding delays do not distort the elapsed time shown by
:func:`format_status`. After the first step :func:`eta_seconds` estimates what is left.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

MARKER = "[isocompute] phase"
# Phase names, in the order a step runs them (verl's timing_s/* names in brackets).
ROLLOUT = "rollout"  # sampling + reward (gen)
OLD_LOG_PROB = "old log-prob"  # (old_log_prob; instant when reused from the rollout)
REF_LOG_PROB = "ref log-prob"  # (ref)
ADVANTAGE = "advantage"  # (adv)
UPDATE = "update"  # (update_actor)
WEIGHT_SYNC = "weight sync"  # (update_weights)
VALIDATION = "validation"  # (testing)
_PATTERN = re.compile(re.escape(MARKER) + r" step=(\d+)/(\d+) t=([0-9.]+) name=(.+?)\s*$")


@dataclass(frozen=True)
class Phase:
    step: int  # 0: before the first training step
    total: int
    started: float  # time.time() when the phase began
    name: str


def phase_marker(step: int, total: int, name: str, now: float) -> str:
    return f"{MARKER} step={int(step)}/{int(total)} t={now:.3f} name={name}"


def parse_phase(line: str) -> Phase | None:
    """The phase a log line announces (anywhere in the line), or None."""
    if MARKER not in line:
        return None
    m = _PATTERN.search(line)
    if m is None:
        return None
    return Phase(int(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4))


def format_duration(seconds: float) -> str:
    """``41 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def format_status(phase: Phase, now: float) -> str:
    """``step 1/4: rollout ... 41 s`` (validation before training: ``validation before training ... 12 s``)."""
    elapsed = format_duration(now - phase.started)
    if phase.name == VALIDATION:
        where = "validation before training" if phase.step == 0 else f"step {phase.step}/{phase.total}: validation"
        return f"{where} ... {elapsed}"
    return f"step {phase.step}/{phase.total}: {phase.name} ... {elapsed}"


def eta_seconds(step_times: list[float], total_steps: int, validation_s: float | None, final_validation: bool) -> float | None:
    """Remaining time after ``len(step_times)`` finished steps: the median step time for each step left,
    plus one more validation (as long as the one before training) if the run validates at the end.
    None before the first step (nothing to extrapolate from)."""
    if not step_times:
        return None
    left = max(0, int(total_steps) - len(step_times))
    eta = statistics.median(step_times) * left
    if final_validation and left > 0 and validation_s is not None and math.isfinite(validation_s):
        eta += validation_s
    return eta


class PhaseAnnouncer:
    """Trainer mixin (before verl's trainer in the bases): prints :func:`phase_marker` as each phase starts.

    Only prints; every hook hands straight on to verl's own implementation.
    """

    def _announce(self, name: str) -> None:
        import time

        step = int(getattr(self, "global_steps", 0) or 0)
        total = int(getattr(self, "total_training_steps", 0) or 0)
        print(phase_marker(step, total, name, time.time()), flush=True)

    def on_validate_begin(self):
        # verl's global_steps: 0 before training, k when validating after step k
        self._announce(VALIDATION)
        return super().on_validate_begin()

    def on_sample_begin(self):
        self._announce(ROLLOUT)
        return super().on_sample_begin()

    def _compute_old_log_prob(self, batch, metrics):
        self._announce(OLD_LOG_PROB)
        return super()._compute_old_log_prob(batch, metrics)

    def _compute_ref_log_prob(self, batch, metrics):
        self._announce(REF_LOG_PROB)
        return super()._compute_ref_log_prob(batch, metrics)

    def _compute_advantage(self, batch, metrics):
        self._announce(ADVANTAGE)
        return super()._compute_advantage(batch, metrics)

    def _update_actor(self, batch, metrics):
        self._announce(UPDATE)
        return super()._update_actor(batch, metrics)

    def on_step_end(self):
        self._announce(WEIGHT_SYNC)
        return super().on_step_end()
