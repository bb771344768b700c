"""The shared memory a verl run on the CPU leaves in /dev/shm, and its removal when the run ends.

vLLM's engine and workers (the message queues between its processes, 160 and 240 MiB) and verl's weight sync
without CUDA IPC (one bucket per sync) create POSIX shared-memory segments and named semaphores, which the
creating process removes when it exits normally. Ray ends a run's actors with SIGKILL, so every run with verl's
vLLM rollout left ~400 MiB in /dev/shm (2 GiB after a failed sync) until the machine restarted.

So every process of a run on the CPU platform records the name of each segment and semaphore it creates, as an
empty file in the run's ledger directory (``ISOCOMPUTE_SHM_LEDGER``, set by the entry point before Ray starts and
inherited by every process of the run); when the run ends (finished, failed or stopped) the entry point removes
the recorded ones that still exist. Only names this run created are touched, never another run's.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LEDGER_ENV = "ISOCOMPUTE_SHM_LEDGER"
SHM_DIR = Path("/dev/shm")  # where Linux keeps POSIX shared memory and named semaphores ("sem." + name)
_recording = False


def _record(name: str) -> None:
    ledger = os.environ.get(LEDGER_ENV)
    if ledger and name:
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


@contextmanager
def removing_shared_memory() -> Iterator[Path]:
    """Within the block, this process and the ones it starts record the shared memory they create; on leaving,
    however the block ends, what is left of it is removed. The ledger is ``ISOCOMPUTE_SHM_LEDGER`` when set
    (kept, so that a caller can check it), else a temporary directory removed with the segments."""
    given = os.environ.get(LEDGER_ENV)
    ledger = Path(given) if given else Path(tempfile.mkdtemp(prefix="isocompute-shm-"))
    ledger.mkdir(parents=True, exist_ok=True)
    os.environ[LEDGER_ENV] = str(ledger)
    record_shared_memory()
    try:
        yield ledger
    finally:
        remove_recorded(ledger)
        if not given:
            shutil.rmtree(ledger, ignore_errors=True)
            os.environ.pop(LEDGER_ENV, None)
