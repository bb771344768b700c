"""The shared memory a run's processes create is recorded and removed when the run ends (verl_isocompute/cpu/shm.py).

The end-to-end check (vLLM's own queues, a finished and a failed run) is tests/test_vllm_cpu_e2e.py; here, in this
process: a segment and a named semaphore created inside the block are recorded and gone after it, also when the
block ends with an error, and a segment created outside it is left alone.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import shared_memory

import pytest

from verl_isocompute.cpu.shm import LEDGER_ENV, SHM_DIR, removing_shared_memory


# the lock's own finaliser then finds its semaphore already removed (as a run's processes would, were they alive)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_what_the_block_created_is_removed_when_it_ends(tmp_path, monkeypatch):
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger"))
    outside = shared_memory.SharedMemory(create=True, size=4096)
    try:
        with pytest.raises(RuntimeError, match="the run failed"), removing_shared_memory() as ledger:
            segment = shared_memory.SharedMemory(create=True, size=4096)
            lock = multiprocessing.get_context("spawn").Lock()  # vLLM's processes are spawned: named semaphores
            names = sorted(p.name for p in ledger.iterdir())
            assert segment.name in names and any(n.startswith("sem.mp-") for n in names), names
            assert outside.name not in names
            assert all((SHM_DIR / n).exists() for n in names)
            raise RuntimeError("the run failed")
        assert [n for n in names if (SHM_DIR / n).exists()] == []
        assert (SHM_DIR / outside.name).exists()
    finally:
        segment.close()
        outside.close()
        outside.unlink()
    del lock


def test_a_segment_made_after_the_ledger_is_gone_is_made_unrecorded(tmp_path, monkeypatch):
    """Recording stays on in a process once a block turned it on; a segment created later, while the variable
    names a ledger that does not exist (a later block's, not opened yet), is created and simply not recorded."""
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "first"))
    with removing_shared_memory():
        pass  # turns recording on in this process, as an earlier run's block in the same process would
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "not-yet"))
    segment = shared_memory.SharedMemory(create=True, size=4096)
    try:
        assert (SHM_DIR / segment.name).exists() and not (tmp_path / "not-yet").exists()
    finally:
        segment.close()
        segment.unlink()
