"""How many threads a computing CPU process of a verl run uses (the rollout servers and the trainer's workers).

Its own module, below the package's registration code, so the rollout server can import it without
importing the package that registers it.
"""

from __future__ import annotations

import os

THREADS_ENV = "ISOCOMPUTE_CPU_THREADS"


def cpu_threads() -> int:
    """Threads a computing CPU process of the run uses: ``ISOCOMPUTE_CPU_THREADS``, else the cores this
    process may run on. Ray starts every worker with ``OMP_NUM_THREADS=1`` (it assumes many small tasks
    share the cores); verl's trainer computes in one process at a time (rollout, then log-probs, then the
    update), so one thread would leave all but one core idle."""
    value = os.environ.get(THREADS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def record_cpu_threads() -> int:
    """In the driver, before Ray starts: fix the thread count its workers will use (an ``OMP_NUM_THREADS``
    the user set wins), passed to them through the environment they inherit."""
    if not os.environ.get(THREADS_ENV, "").strip():
        user = os.environ.get("OMP_NUM_THREADS", "").strip()
        os.environ[THREADS_ENV] = user if user.isdigit() and int(user) > 0 else str(cpu_threads())
    return cpu_threads()
