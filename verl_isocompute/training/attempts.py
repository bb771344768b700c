"""One run directory, one run: a fresh run vs. a resume from a checkpoint, and verl's metrics kept across.

A run directory (``isocompute.run_dir``) holds the files of one run: our run log (``isocompute.jsonl``),
verl's file-logger metrics (``verl_metrics.jsonl``), validation generations, rollout dumps and checkpoints.
A run may take several attempts: killed, then resumed from a checkpoint. Whether an attempt continues a
run is decided by the checkpoint verl actually loaded, never by what the directory holds: the trainer asks
after verl's ``_load_checkpoint`` has run (``global_steps``: 0 when ``trainer.resume_mode=disable``, when
``auto`` found no checkpoint in ``trainer.default_local_dir``; the checkpoint's step otherwise, also for
``resume_path``). Then :func:`start_attempt`:

- **a new run** (no checkpoint loaded) in a directory a previous run wrote to: that run's files are moved
  into ``<run_dir>/previous/<UTC time>/`` (same relative paths) with one line saying so, so the new run's
  log starts with its own header and the old one is neither mixed in nor deleted. Only files inside the
  run directory are moved; a metrics file or checkpoint directory elsewhere is verl's business as usual.
- **a resume** from the checkpoint of step s: the run log keeps its header and its rows up to s
  (:meth:`verl_isocompute.runlog.RunLogWriter.resume`). verl's ``FileLogger`` opens its file for writing
  from scratch (``open(path, "wb")``, verl/utils/tracking.py), which would lose the steps before s, so
  :class:`MetricsHistory` moves the file aside (``<file>.before-resume``) before verl opens it and, once
  verl's logger exists and before it logs anything, writes the rows up to step s back through that logger
  (``FileLogger.log``: verl's own format, one file for the whole run), then removes the aside copy. Rows
  past s belong to steps the resumed run does again; like the run log's, they are replaced. A kill between
  the two leaves the aside copy, which the next attempt takes as the history.

Both work the same under ``python -m verl_isocompute.main`` and verl's own ``main_ppo``: it is the trainer
that does them. Pure file operations (no verl import).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from verl_isocompute.jsonl import read_jsonl
from verl_isocompute.runlog import RUN_LOG, TRAIN_PROBLEMS, VAL_PROBLEMS, RunLogError, verl_line

PREVIOUS_DIR = "previous"  # <run_dir>/previous/<UTC time>/: the files of earlier runs in this directory
ASIDE_SUFFIX = ".before-resume"  # verl's metrics file while a resumed run re-logs it


def file_logger_path(config) -> Path | None:
    """Where verl's ``FileLogger`` writes in this process (None when ``trainer.logger`` has no ``file``):
    ``$VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl`` (verl/utils/tracking.py)."""
    backends = OmegaConf.select(config, "trainer.logger", default=None) or []
    backends = [backends] if isinstance(backends, str) else list(backends)
    if "file" not in backends:
        return None
    path = os.environ.get("VERL_FILE_LOGGER_PATH")
    if path is None:
        root = os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", "."))
        path = os.path.join(root, str(config.trainer.project_name), f"{config.trainer.experiment_name}.jsonl")
    return Path(path).absolute()


def run_files(config, run_dir: Path) -> list[Path]:
    """The paths a run writes inside ``run_dir``: the run log and its per-problem validation and training counts, verl's
    metrics file, the validation and rollout dumps and the checkpoint directory (each only if it lies inside
    ``run_dir``)."""
    run_dir = run_dir.absolute()
    candidates = [run_dir / RUN_LOG, run_dir / VAL_PROBLEMS, run_dir / TRAIN_PROBLEMS, file_logger_path(config)]
    for key in ("trainer.validation_data_dir", "trainer.rollout_data_dir", "trainer.default_local_dir"):
        value = OmegaConf.select(config, key, default=None)
        candidates.append(Path(os.path.expanduser(str(value))).absolute() if value else None)
    files = []
    for path in candidates:
        if path is not None and path != run_dir and run_dir in path.parents and path not in files:
            files.append(path)
    return files


def move_previous_run(run_dir: Path, files: list[Path], now: datetime | None = None) -> tuple[Path, list[str]] | None:
    """Move the ``files`` that exist into ``run_dir/previous/<UTC time>/``, keeping their paths relative
    to ``run_dir``; returns (that directory, the names moved), or None when there was nothing to move."""
    present = [p for p in files if p.exists() or p.with_name(p.name + ASIDE_SUFFIX).exists()]
    if not present:
        return None
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    dest = run_dir / PREVIOUS_DIR / stamp
    suffix = 1
    while dest.exists():
        suffix += 1
        dest = run_dir / PREVIOUS_DIR / f"{stamp}-{suffix}"
    moved = []
    for path in present:
        for source in (path, path.with_name(path.name + ASIDE_SUFFIX)):
            if source.exists():
                target = dest / source.relative_to(run_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, target)
                moved.append(str(source.relative_to(run_dir)) + ("/" if target.is_dir() else ""))
    return dest, moved


@dataclass
class MetricsHistory:
    """verl's metrics file across a resume (module docstring): set aside before verl reopens it, re-logged
    through verl's logger (rows up to ``step``) before anything else is logged."""

    path: Path | None = None
    step: int = 0
    rows: int = 0  # rows written back (known after :meth:`restore`)
    done: bool = field(default=True)

    @classmethod
    def set_aside(cls, path: Path | None, step: int) -> MetricsHistory:
        """Move ``path`` to its aside copy (unless a killed earlier resume left one: that copy is the history)."""
        if path is None:
            return cls()
        aside = path.with_name(path.name + ASIDE_SUFFIX)
        if not aside.exists():
            if not path.exists():
                return cls()
            os.replace(path, aside)
        return cls(path=path, step=step, done=False)

    def restore(self, logger: Any) -> None:
        """Write the kept rows back through verl's ``Tracking`` (its ``file`` backend only: the other
        backends keep their own history), then drop the aside copy. Idempotent."""
        if self.done:
            return
        self.done = True
        file_logger = (getattr(logger, "logger", None) or {}).get("file")
        aside = self.path.with_name(self.path.name + ASIDE_SUFFIX)
        if file_logger is None or Path(file_logger.filepath).absolute() != self.path:
            os.replace(aside, self.path)  # verl writes elsewhere: the file stays as it was
            return
        for step, data in kept_rows(aside, self.step):
            file_logger.log(data=data, step=step)
            self.rows += 1
        aside.unlink()


def kept_rows(path: Path, step: int) -> list[tuple[int, dict]]:
    """(step, data) of the verl file-logger rows of ``path`` up to ``step``, in order; a last line cut by a
    kill is skipped, any other unreadable line is an error naming file and line."""
    rows = []
    for no, obj in read_jsonl(path).objects:
        line = verl_line(obj)
        if line is None or not isinstance(line[0], int):
            raise RunLogError(f"{path}, line {no}: not in verl's file-logger format {{\"step\": N, \"data\": {{...}}}}")
        if line[0] <= step:
            rows.append(line)
    return rows


def missing_step_notice(last_row: dict | None, resumed_step: int, rollouts_per_step: int) -> str | None:
    """One line when the run log has no row for the step of the checkpoint a run resumes from: verl saves a
    step's checkpoint before the step is logged, so a run stopped in between resumes after a step whose
    rollouts its counters never saw. None when the log is complete (or the run did not resume)."""
    if resumed_step <= 0 or (last_row is not None and last_row.get("step") == resumed_step):
        return None
    return (f"[isocompute] warning: the run log has no row for step {resumed_step}, whose checkpoint this run resumes "
            f"from (the run stopped between saving the checkpoint and logging the step): from here on C and tokens "
            f"miss that step's rollouts (at least {rollouts_per_step})")


def start_attempt(config, run_dir: Path, resumed_step: int) -> MetricsHistory:
    """Prepare ``run_dir`` for this attempt (module docstring); prints one line when it moved or kept
    anything. ``resumed_step``: the step of the checkpoint verl loaded, 0 for none."""
    run_dir = run_dir.absolute()
    if resumed_step <= 0:
        result = move_previous_run(run_dir, run_files(config, run_dir))
        if result is not None:
            dest, moved = result
            print(f"[isocompute] a new run (trainer.resume_mode={OmegaConf.select(config, 'trainer.resume_mode')}, no "
                  f"checkpoint loaded) in {run_dir}, which held another run's files: moved {', '.join(moved)} to "
                  f"{dest}", flush=True)
        return MetricsHistory()
    history = MetricsHistory.set_aside(file_logger_path(config), resumed_step)
    kept = f"; verl's metrics ({history.path}) keep steps 0-{resumed_step}" if history.path is not None else ""
    print(f"[isocompute] resuming from the checkpoint of step {resumed_step}: the run log keeps steps 0-{resumed_step}"
          f"{kept}; later steps are run again", flush=True)
    return history
