"""Launch a real verl run through `python -m verl_isocompute.main` and read what it wrote (for e2e tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
PARITY_REWARD = f"reward.custom_reward_function.path={FIXTURES / 'parity_reward.py'}"
HALF_CONSTANT_REWARD = f"reward.custom_reward_function.path={FIXTURES / 'half_constant_reward.py'}"
LEAKING_REWARD = f"reward.custom_reward_function.path={FIXTURES / 'leaking_reward.py'}"
LEAK_FILE_ENV = "ISOCOMPUTE_TEST_LEAK_FILE"  # tests/fixtures/leaking_reward.py writes the names it left there


@dataclass
class Run:
    run_dir: Path
    stdout: str
    returncode: int = 0

    def _jsonl(self, name: str) -> list[dict]:
        return [json.loads(line) for line in (self.run_dir / name).read_text().splitlines() if line.strip()]

    @property
    def verl_rows(self) -> list[dict]:
        """verl's own metrics, one dict per logged step: {"step": s, "data": {...}}."""
        return self._jsonl("verl_metrics.jsonl")

    @property
    def train_rows(self) -> list[dict]:
        return [r for r in self.verl_rows if "timing_s/step" in r["data"]]

    @property
    def run_log(self) -> list[dict]:
        """Our run log (isocompute.jsonl), header first."""
        return self._jsonl("isocompute.jsonl")


def fixture_env(module: str, **extra: str) -> dict:
    """Environment for a run that loads the test module ``module`` of tests/fixtures in every verl process
    (verl's ``VERL_USE_EXTERNAL_MODULES``), plus ``extra`` variables."""
    path = os.pathsep.join(p for p in (str(FIXTURES), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path, "VERL_USE_EXTERNAL_MODULES": module, **extra}


def _command(recipe: str, run_dir: Path, overrides) -> list[str]:
    return [sys.executable, "-m", "verl_isocompute.main", "--config-name", recipe, *overrides, f"isocompute.run_dir={run_dir}"]


def run_recipe(recipe: str, run_dir: Path, *overrides: str, timeout: int = 900, env: dict | None = None,
               check: bool = True) -> Run:
    """Run ``recipe`` on CPU with the tiny model; fail the test with the run's output on a non-zero exit
    (``check=False``: return it, stderr after stdout). ``env``: extra environment variables for the run (and
    its Ray workers, which inherit them)."""
    cmd = _command(recipe, run_dir, overrides)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if not check:
        return Run(run_dir, proc.stdout + proc.stderr, proc.returncode)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return Run(run_dir, proc.stdout)


def run_until_killed(recipe: str, run_dir: Path, *overrides: str, when, log_path: Path, timeout: float = 600) -> str:
    """Start ``recipe`` as :func:`run_recipe` would, wait until ``when()`` holds, then SIGKILL the driver, every
    process it started and its Ray instance at once: a crash or an OOM kill, nothing flushed or shut down.
    Returns what the run printed."""
    import psutil

    from verl_isocompute.workflow.launch import ray_session_processes

    with open(log_path, "w") as log:
        proc = subprocess.Popen(_command(recipe, run_dir, overrides), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not when():
            assert proc.poll() is None, f"the run ended before it could be killed:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no kill point after {timeout} s:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        family = [psutil.Process(proc.pid)] if proc.poll() is None else []
        for p in [*family, *(c for f in family for c in f.children(recursive=True)), *ray_session_processes(proc.pid)]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait(timeout=60)
        psutil.wait_procs(alive(ray_session_processes(proc.pid)), timeout=30)
    return log_path.read_text()


def alive(procs) -> list:
    """The processes of ``procs`` still running (zombies and vanished ones left out): what a stop left behind."""
    import psutil

    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def left_in_dev_shm(leak_file: Path) -> tuple[list[str], list[str]]:
    """The shared-memory segments tests/fixtures/leaking_reward.py left (one per process that scored), and those of
    them still in /dev/shm, which are removed here: a failing test leaves nothing on the machine."""
    from verl_isocompute.cpu.shm import SHM_DIR

    left = leak_file.read_text().split() if leak_file.is_file() else []
    still = [name for name in left if (SHM_DIR / name).exists()]
    for name in still:
        (SHM_DIR / name).unlink(missing_ok=True)
    return left, still
