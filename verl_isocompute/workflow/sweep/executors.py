"""Where a sweep's cells run: an :class:`Executor` starts, polls and stops one cell's verl run.

Every cell is ``python -m verl_isocompute.main --config-name RECIPE <overrides>`` with its run directory
``<sweep dir>/cells/<cell id>`` (:func:`verl_isocompute.workflow.launch.main_command`). Two executors:

- :class:`LocalExecutor`: one cell at a time, a child process in a session of its own started and
  stopped by :mod:`verl_isocompute.workflow.launch` (the demo's launcher too), so a stop reaches verl's
  Ray processes. Each child starts a private Ray instance (``RAY_ADDRESS=local``): a cluster someone
  else started on this machine is never joined by accident.
- :class:`RayJobExecutor`: cells submitted to an existing cluster through Ray's job API
  (:class:`ray.job_submission.JobSubmissionClient`), several at a time. Constructing it only checks its
  :class:`RayOptions`; :meth:`RayJobExecutor.connect` reaches the cluster (a test can build one without
  Ray). The sweep directory must be on a filesystem the cluster's nodes share with this machine: the
  cells write their logs there.

A running cell is a :class:`CellHandle`; how its process ended is an :class:`Outcome` (the exit status
only: whether the log reaches the last step is the runner's check).
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from verl_isocompute.runlog import CONSOLE_LOG, VERL_METRICS
from verl_isocompute.workflow import launch
from verl_isocompute.workflow.sweep.plan import DEFAULT_MAX_CONCURRENT, RAY_MODES, Cell, Plan
from verl_isocompute.workflow.sweep.state import SweepError

CONNECT_TIMEOUT_S = 10.0


@dataclass
class Outcome:
    """How a cell's process ended: ``ok`` is the exit status only; the log check comes after."""

    ok: bool
    message: str = ""
    returncode: int | None = None


@dataclass
class CellHandle:
    """A started cell: its run directory and either a local process or a Ray job id."""

    run_dir: Path
    proc: subprocess.Popen | None = None
    job_id: str | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


class Executor(Protocol):
    """What :class:`~verl_isocompute.workflow.sweep.runner.Sweep` needs of a place to run cells."""

    name: str  # recorded in the state, so a resumed sweep only reattaches to its own kind of cell
    max_concurrent: int

    def connect(self) -> None:
        """Reach whatever the executor runs on; raises :class:`SweepError` naming the fix."""

    def start(self, plan: Plan, cell: Cell, run_dir: Path, overrides: list[str]) -> CellHandle: ...

    def poll(self, handle: CellHandle) -> Outcome | None:
        """None while the cell runs."""

    def stop(self, handle: CellHandle) -> None:
        """Stop the cell and everything it started."""

    def finish(self, handle: CellHandle) -> None:
        """After the cell ended: put its console output into ``run_dir/verl.log`` if not there yet."""

    def reattach(self, record: dict[str, Any], run_dir: Path) -> CellHandle | None:
        """A cell an earlier sweep process left running (state ``record``) to follow, or None."""


class LocalExecutor:
    """One cell at a time, as a child process in a session of its own."""

    name = "local"
    max_concurrent = 1

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def connect(self) -> None:
        return None

    def start(self, plan: Plan, cell: Cell, run_dir: Path, overrides: list[str]) -> CellHandle:
        proc = launch.start(launch.main_command(plan.recipe, overrides, self.python), run_dir / CONSOLE_LOG)
        return CellHandle(run_dir, proc=proc)

    def poll(self, handle: CellHandle) -> Outcome | None:
        rc = handle.proc.poll()
        if rc is None:
            return None
        if rc == 0:
            return Outcome(True, returncode=0)
        return Outcome(False, f"verl exited with status {rc}", returncode=rc)

    def stop(self, handle: CellHandle) -> None:
        launch.stop(handle.proc)

    def finish(self, handle: CellHandle) -> None:
        return None  # verl's output already went to verl.log

    def reattach(self, record: dict[str, Any], run_dir: Path) -> CellHandle | None:
        return None  # a local child does not outlive its sweep process


def dashboard_address(address: str) -> str:
    """Ray's job API speaks HTTP to the dashboard: accept ``host:port`` and add the scheme."""
    address = address.strip()
    if "://" not in address:
        address = "http://" + address
    return address


def check_address(address: str) -> None:
    """An address the job API can use (``http(s)://host[:port]``), or :class:`SweepError` naming the fix."""
    url = urlparse(address)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise SweepError(
            f"--ray-address {address!r}: give the Ray dashboard's HTTP address, e.g. http://127.0.0.1:8265 "
            "(the job API; not the GCS port 6379 and not ray://)"
        )


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast (``timeout`` s) on an address nobody listens on, instead of hanging in the client."""
    check_address(address)
    url = urlparse(address)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        raise SweepError(
            f"cannot reach a Ray cluster at {address} ({exc}); start one (ray start --head) or pass the "
            "dashboard address it printed with --ray-address"
        ) from None


@dataclass(frozen=True)
class RayOptions:
    """How cells use a Ray cluster (a plan's ``ray:`` block, resolved against the recipe).

    ``mode``: ``private`` (the job reserves ``num_gpus`` / ``num_cpus`` on the cluster and its verl driver
    starts a Ray instance of its own) or ``join`` (the driver joins the cluster; one cell at a time).
    ``env_vars`` go into every job's runtime_env. A plan's ``ray:`` block is checked when the plan is
    parsed (:func:`.plan.parse_plan`) and resolved into these options by :func:`.preflight.ray_options`.
    """

    address: str
    max_concurrent: int = DEFAULT_MAX_CONCURRENT
    python: str = "python"
    env_vars: dict[str, str] = field(default_factory=dict)
    mode: str = "private"
    num_gpus: float | None = None
    num_cpus: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", dashboard_address(self.address))
        check_address(self.address)
        if self.mode not in RAY_MODES:
            raise SweepError(f"ray.mode={self.mode!r}: use private (each cell its own Ray instance) or join")

    @property
    def concurrent(self) -> int:
        """Cells at once: ``join`` runs one (verl's TransferQueue controller is global to a cluster)."""
        return self.max_concurrent if self.mode == "private" else 1


class RayJobExecutor:
    """Cells as Ray jobs on an existing cluster, ``options.concurrent`` at a time.

    Two ways for a cell to use the cluster:

    - ``private`` (default for single-node cells): the job reserves the cell's GPUs on the cluster
      (``entrypoint_num_gpus``; Ray then restricts the job to them) and its verl driver starts a Ray
      instance of its own on that node (``RAY_ADDRESS=local``). The cluster schedules and isolates cells,
      so several run at once. This is needed because verl 0.9.1's trainer always starts TransferQueue,
      whose controller is a named actor global to a Ray cluster (``TransferQueueController`` in namespace
      ``transfer_queue``): two verl runs joined to one cluster share it and the second one hangs.
    - ``join``: the verl driver joins the cluster (multi-node cells need this); because of the shared
      TransferQueue controller, cells then run one at a time. The recipe's logical
      ``num_cpus``/``num_gpus`` are dropped from ``ray_init`` (the cluster must offer them:
      ``ray start --head --num-gpus=... --num-cpus=...``).
    """

    name = "ray"

    def __init__(self, options: RayOptions) -> None:
        self.options = options
        self.address = options.address
        self.max_concurrent = options.concurrent
        self.client = None

    def connect(self) -> None:
        """Reach the cluster's job API (fails in ``CONNECT_TIMEOUT_S`` on an address nobody listens on)."""
        from ray.job_submission import JobSubmissionClient

        check_reachable(self.address)
        try:
            self.client = JobSubmissionClient(self.address)
        except Exception as exc:  # the client raises ConnectionError / RuntimeError with Ray's own message
            raise SweepError(f"cannot use the Ray job API at {self.address}: {exc}") from None

    def _client(self):
        if self.client is None:
            self.connect()
        return self.client

    def entrypoint(self, plan: Plan, overrides: list[str]) -> str:
        command = launch.main_command(plan.recipe, overrides, self.options.python)
        if self.options.mode == "join":
            # the driver joins the cluster: ray.init must not be given resources (Ray refuses them)
            return shlex.join(command + ["++ray_kwargs.ray_init.num_cpus=null", "++ray_kwargs.ray_init.num_gpus=null"])
        # the job supervisor points RAY_ADDRESS at the cluster; the cell starts its own instance instead
        return "RAY_ADDRESS=local " + shlex.join(command)

    def runtime_env(self, run_dir: Path) -> dict[str, Any]:
        env = {
            # verl's file logger reads its path in the TaskRunner, a Ray worker (of the cluster in join mode)
            "VERL_FILE_LOGGER_PATH": str(run_dir / VERL_METRICS),
            **{k: os.environ[k] for k in ("VERL_PLATFORM", "ISOCOMPUTE_CACHE") if k in os.environ},
            **self.options.env_vars,
        }
        return {"env_vars": env}

    def start(self, plan: Plan, cell: Cell, run_dir: Path, overrides: list[str]) -> CellHandle:
        submission_id = f"isocompute-{plan.name}-{cell.id}-{uuid.uuid4().hex[:8]}"
        resources = {}
        if self.options.mode == "private":
            resources = {"entrypoint_num_gpus": self.options.num_gpus or None,
                         "entrypoint_num_cpus": self.options.num_cpus or None}
        self._client().submit_job(
            entrypoint=self.entrypoint(plan, overrides), submission_id=submission_id,
            runtime_env=self.runtime_env(run_dir), metadata={"isocompute_sweep": plan.name, "cell": cell.id},
            **resources,
        )
        return CellHandle(run_dir, job_id=submission_id)

    def poll(self, handle: CellHandle) -> Outcome | None:
        from ray.job_submission import JobStatus

        info = self._client().get_job_info(handle.job_id)
        if not info.status.is_terminal():
            return None
        if info.status == JobStatus.SUCCEEDED:
            return Outcome(True, returncode=0)
        rc = getattr(info, "driver_exit_code", None)
        return Outcome(False, f"Ray job {handle.job_id} {info.status.value}: {info.message or ''}".strip(), returncode=rc)

    def finish(self, handle: CellHandle) -> None:
        try:
            logs = self._client().get_job_logs(handle.job_id)
        except Exception as exc:  # logs are a convenience; the run log is what counts
            logs = f"(could not fetch the job's logs: {exc})\n"
        (handle.run_dir / CONSOLE_LOG).write_text(logs)

    def stop(self, handle: CellHandle) -> None:
        client = self._client()
        try:
            client.stop_job(handle.job_id)
        except Exception:
            return
        deadline = time.monotonic() + launch.STOP_GRACE_S + 10
        while time.monotonic() < deadline:
            if client.get_job_status(handle.job_id).is_terminal():
                break
            time.sleep(1.0)
        self.finish(handle)

    def reattach(self, record: dict[str, Any], run_dir: Path) -> CellHandle | None:
        """A job a previous sweep process submitted and left running: follow it instead of restarting."""
        job_id = record.get("job_id")
        if not job_id or record.get("executor") != self.name:
            return None
        try:
            status = self._client().get_job_status(job_id)
        except Exception:
            return None
        if status.is_terminal() and status.value != "SUCCEEDED":
            return None
        return CellHandle(run_dir, job_id=job_id)
