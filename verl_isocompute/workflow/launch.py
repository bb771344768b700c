"""Start a verl run as a child process, and stop it *and everything it started* on request.

A verl run is a driver process plus a Ray instance (raylet, GCS, dashboard, workers: ~18 processes on
CPU, several GB). Stopping only the driver leaves the rest running. So a run we launch (the demo, a
sweep cell) gets a process session of its own, and :func:`stop` ends the whole family: SIGTERM to the
session's process group, then whatever of the process tree is left, then any Ray process that still
names the driver's Ray session (a worker that was starting while its raylet died is re-parented to init
and escapes both the group and the tree).

:func:`deferred_signals` turns SIGTERM/SIGINT into an :class:`Interrupted` exception raised where the caller
checks for it, so a command can stop its children and save its state before it exits (the demo and the sweep:
they supervise child processes). :func:`stopping_ray` is for a process that starts Ray itself (``python -m
verl_isocompute.main``, ``isocompute curate``): the signal raises at once, also inside ``ray.get``, and
:func:`shutting_down_ray_on_error` shuts its Ray instance down on a signal or an error (:func:`shutdown_ray`).
Ray's driver installs handlers of its own in ``ray.init`` (a C++ failure handler that aborts on SIGTERM with a
stack dump, exit -6, and a Python one that calls ``sys.exit(15)``, which leaves the caller no way to report
what it kept), so the context disables the first (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1``, read by
``ray.init``) and puts ours back after ``ray.init`` returns.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# How long a stopped run gets to exit on SIGTERM before its processes are killed.
STOP_GRACE_S = 20.0
KILL_WAIT_S = 30.0  # a killed worker holding GBs can take seconds to go on a loaded machine
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RAY_FAILURE_HANDLER_ENV = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived; ``exit_code`` is the shell convention 128 + signal number.

    A :class:`KeyboardInterrupt`, hence no :class:`Exception`: verl's and Ray's ``except Exception``
    blocks (e.g. around a worker call) must not turn a stop into a logged error and carry on; and
    ``ray.get`` only lets a KeyboardInterrupt out of its wait (any other exception raised by a signal
    handler there is lost until the awaited task ends).
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class SignalLatch:
    """Records SIGTERM/SIGINT; :meth:`check` raises :class:`Interrupted` for the first one received."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def __call__(self, signum, frame) -> None:
        self.received.append(signum)

    def check(self) -> None:
        if self.received:
            raise Interrupted(self.received[0])


@contextmanager
def deferred_signals() -> Iterator[SignalLatch]:
    """Within the block SIGTERM/SIGINT only set a latch; the caller decides when to act on it."""
    latch = SignalLatch()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, latch)
    try:
        yield latch
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def stopping_ray() -> Iterator[SignalLatch]:
    """Within the block SIGTERM/SIGINT raise :class:`Interrupted` at once, even after ``ray.init``.

    ``ray.init`` replaces our SIGTERM handler (see the module docstring); it is wrapped for the block so
    that our handlers are installed again when it returns. A stop inside ``ray.get`` comes out of Ray as
    a plain KeyboardInterrupt: it leaves the block as :class:`Interrupted` with the signal received. On
    leaving, the previous handlers, ``ray.init`` and the environment are restored; the caller then shuts
    Ray down (:func:`shutdown_ray`).
    """
    import ray

    latch = SignalLatch()

    def handler(signum, frame) -> None:
        latch(signum, frame)
        raise Interrupted(signum)

    def install() -> None:
        for sig in STOP_SIGNALS:
            signal.signal(sig, handler)

    ray_init = ray.init

    def init_keeping_our_handlers(*args, **kwargs):
        try:
            return ray_init(*args, **kwargs)
        except SystemExit as exc:
            if exc.code != signal.SIGTERM:
                raise
            # SIGTERM while ray.init ran: Ray's own handler (sys.exit(15)) was in place
            latch(signal.SIGTERM, None)
            raise Interrupted(signal.SIGTERM) from None
        finally:
            install()

    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    env_before = os.environ.get(RAY_FAILURE_HANDLER_ENV)
    os.environ[RAY_FAILURE_HANDLER_ENV] = "1"
    install()
    ray.init = init_keeping_our_handlers
    try:
        yield latch
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        raise Interrupted(latch.received[0] if latch.received else signal.SIGINT) from None
    finally:
        ray.init = ray_init
        for sig, old in previous.items():
            signal.signal(sig, old)
        if env_before is None:
            os.environ.pop(RAY_FAILURE_HANDLER_ENV, None)
        else:
            os.environ[RAY_FAILURE_HANDLER_ENV] = env_before


@contextmanager
def shutting_down_ray_on_error() -> Iterator[SignalLatch]:
    """:func:`stopping_ray`, and on any exception (:class:`Interrupted` included) :func:`shutdown_ray` before
    the exception leaves the block: the one stop pattern of a process that starts Ray itself (``python -m
    verl_isocompute.main``, curation, the prefix search). The caller catches the exception to print one line
    on what happened or what it kept. Shutting down first makes that line the last: Ray holds back repeated
    worker log lines ("[repeated 77x across cluster]") and prints them when the driver disconnects, which
    would otherwise be at interpreter exit, after the caller's line."""
    try:
        with stopping_ray() as latch:
            yield latch
    except BaseException:
        shutdown_ray()
        raise


def shutdown_ray() -> None:
    """Stop the Ray instance this process started (``ray.shutdown``), then any of its processes still alive."""
    import psutil
    import ray

    # a second signal while Ray shuts down must not cut the shutdown short
    with deferred_signals():
        # Ray's workers retitle themselves (``ray::WorkerDict``): their command lines no longer name the session,
        # so they are found as this process's descendants, taken before Ray's shutdown re-parents them
        family = psutil.Process().children(recursive=True)
        try:
            ray.shutdown()
        finally:
            _, alive = psutil.wait_procs(family, timeout=KILL_WAIT_S / 3)  # Ray ends them itself; a loaded machine lags
            _kill(alive + ray_session_processes(os.getpid()))


def main_command(recipe: str, overrides: list[str] | tuple[str, ...], python: str = sys.executable) -> list[str]:
    """The command line of one verl run of ``recipe``: ``python -m verl_isocompute.main --config-name ...``."""
    return [python, "-m", "verl_isocompute.main", "--config-name", recipe, *overrides]


def start(cmd: list[str], log_path: str | os.PathLike, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in a session of its own, stdout and stderr into ``log_path``, stdin closed.

    The child starts a private Ray instance (``RAY_ADDRESS=local``): a cluster someone else started on
    this machine is never joined by accident.
    """
    env = dict(os.environ if env is None else env)
    env["RAY_ADDRESS"] = "local"
    with open(Path(log_path), "w") as log:
        return subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True,
        )


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's process group, then kill whatever of it (and its descendants) is left."""
    import psutil

    if proc.poll() is not None:
        _kill(ray_session_processes(proc.pid))
        return
    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    for p in family:  # Ray may have moved some of verl's processes into sessions of their own
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=5)
    _kill(alive)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    _kill(ray_session_processes(proc.pid))


def _kill(processes) -> None:
    """SIGKILL ``processes`` and wait until they are gone (up to KILL_WAIT_S), so that a caller that then says
    "stopped" is right: CI saw a killed ray::WorkerDict still alive 2 s after the command had exited."""
    import psutil

    killed = []
    for p in processes:
        try:
            p.kill()
            killed.append(p)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(killed, timeout=KILL_WAIT_S)


def ray_session_processes(driver_pid: int) -> list:
    """Live processes of the Ray instance a driver started: their command lines name ``session_<time>_<pid>``."""
    import psutil

    pattern = re.compile(rf"session_\d{{4}}-\d\d-\d\d_\d\d-\d\d-\d\d_\d+_{driver_pid}(?!\d)")
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.pid != os.getpid() and pattern.search(" ".join(p.info["cmdline"] or [])) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
