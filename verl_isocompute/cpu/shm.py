"""The shared memory a verl run on the CPU leaves in /dev/shm, and its removal when the run ends.

vLLM's engine and workers (the message queues between its processes, 160 and 240 MiB) and verl's weight sync
without CUDA IPC (one bucket per sync) create POSIX shared-memory segments and named semaphores, which the
creating process removes when it exits normally. Ray ends a run's actors with SIGKILL, so every run with verl's
vLLM rollout left ~400 MiB in /dev/shm (2 GiB after a failed sync) until the machine restarted.

So every process of a run on the CPU platform records the name of each segment and semaphore it creates, as an
empty file in the run's ledger directory (``ISOCOMPUTE_SHM_LEDGER``, set in the run's driver before Ray starts and
inherited by every process of the run); when the run ends (finished, failed or stopped) the driver removes the
recorded ones that still exist. Only names this run created are touched, never another run's. The driver is ours
(``python -m verl_isocompute.main``, :func:`removing_shared_memory`), curation's and the prefix search's Ray session
(:func:`verl_isocompute.workflow.rollouts.running`), or verl's own ``python -m verl.trainer.main_ppo``, where our
plugin does it (:func:`removing_at_exit`).
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LEDGER_ENV = "ISOCOMPUTE_SHM_LEDGER"
MAIN_PPO = "verl.trainer.main_ppo"  # verl's own entry point, whose driver our plugin cleans up after
SHM_DIR = Path("/dev/shm")  # where Linux keeps POSIX shared memory and named semaphores ("sem." + name)
_recording = False


def _record(name: str) -> None:
    ledger = os.environ.get(LEDGER_ENV)
    # no ledger directory (yet, or any more): nothing to record into; recording must never fail the creation
    if ledger and name and os.path.isdir(ledger):
        Path(ledger, name).touch()


def record_shared_memory() -> None:
    """In this process, record every shared-memory segment and named semaphore created from now on (idempotent;
    nothing changes where ``ISOCOMPUTE_SHM_LEDGER`` is unset). Called by our verl plugin on the CPU platform and,
    as a ``vllm.general_plugins`` entry point, in every vLLM process (vLLM's engine imports no verl)."""
    global _recording
    if _recording or not os.environ.get(LEDGER_ENV):
        return
    from multiprocessing import shared_memory, synchronize

    segment_init = shared_memory.SharedMemory.__init__

    @functools.wraps(segment_init)
    def record_segment(self, name=None, create=False, size=0, *args, **kwargs):
        segment_init(self, name, create, size, *args, **kwargs)
        if create:
            _record(self.name)

    semaphore_init = synchronize.SemLock.__init__

    @functools.wraps(semaphore_init)
    def record_semaphore(self, *args, **kwargs):
        semaphore_init(self, *args, **kwargs)
        name = getattr(self._semlock, "name", None)  # None where the semaphore was unlinked at once (fork)
        if name:
            _record("sem." + name.lstrip("/"))

    shared_memory.SharedMemory.__init__ = record_segment
    synchronize.SemLock.__init__ = record_semaphore
    _recording = True


def remove_recorded(ledger: Path) -> list[str]:
    """Remove the recorded segments and semaphores that still exist; returns their names."""
    removed = []
    for entry in sorted(Path(ledger).iterdir()) if Path(ledger).is_dir() else []:
        try:
            (SHM_DIR / entry.name).unlink()
            removed.append(entry.name)
        except FileNotFoundError:
            pass
    return removed


def _open_ledger() -> tuple[Path, bool]:
    """This run's ledger, and whether this process opened it (else it was given: ``ISOCOMPUTE_SHM_LEDGER``)."""
    given = os.environ.get(LEDGER_ENV)
    ledger = Path(given) if given else Path(tempfile.mkdtemp(prefix="isocompute-shm-"))
    ledger.mkdir(parents=True, exist_ok=True)
    os.environ[LEDGER_ENV] = str(ledger)
    record_shared_memory()
    return ledger, not given


def _close_ledger(ledger: Path, opened: bool) -> None:
    """Remove what is left of the recorded shared memory; a ledger this process opened goes with it (a given one is
    kept, so that its caller can check it)."""
    remove_recorded(ledger)
    if opened:
        shutil.rmtree(ledger, ignore_errors=True)
        if os.environ.get(LEDGER_ENV) == str(ledger):
            os.environ.pop(LEDGER_ENV)


@contextmanager
def removing_shared_memory() -> Iterator[Path]:
    """Within the block, this process and the ones it starts record the shared memory they create; on leaving,
    however the block ends, what is left of it is removed. The ledger is ``ISOCOMPUTE_SHM_LEDGER`` when set
    (kept, so that a caller can check it), else a temporary directory removed with the segments."""
    ledger, opened = _open_ledger()
    try:
        yield ledger
    finally:
        _close_ledger(ledger, opened)


def removing_at_exit() -> None:
    """:func:`removing_shared_memory` for a run driven by verl's own ``python -m verl.trainer.main_ppo``: the
    ledger is opened now, when our plugin loads (at ``import verl``, before the driver starts Ray), and closed when
    the driver exits: finished, failed, Ctrl-C or SIGTERM (measured: the segments are removed, then Ray's driver
    prints its signal report and ends with status -6). A SIGKILL leaves them. The plugin calls it in every process
    of a run on the CPU platform; it acts only in the process started as main_ppo (its command line: ``import
    verl`` runs before main_ppo's own module exists), so that a process of ours that imports verl (a sweep, the
    demo) never hands one ledger to several runs."""
    argv = sys.orig_argv
    started_as_main_ppo = any(flag == "-m" and module == MAIN_PPO for flag, module in zip(argv, argv[1:]))
    if os.environ.get(LEDGER_ENV) or multiprocessing.parent_process() is not None or not started_as_main_ppo:
        return
    atexit.register(_close_ledger, *_open_ledger())
