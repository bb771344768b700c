"""SIGTERM stops a whole run: real verl / Ray on CPU with the tiny model, no process of the run left.

Each long-running command is started, the test waits until its Ray instance is up (and, for training,
until verl's workers are running the trainer), sends SIGTERM to the command's own process (as ``kill``
does), and checks: the exit status is 143 (128 + SIGTERM), stderr ends with the one line saying what was
kept, and no process the command started (its process tree, and every process of the Ray session its
driver started) is alive. The sweep's stop is covered in test_sweep_e2e.py. About 2.5 minutes on 2 cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from verl_runs import LEAK_FILE_ENV, LEAKING_REWARD, PARITY_REWARD, alive, left_in_dev_shm

from verl_isocompute.workflow.launch import ray_session_processes

pytestmark = pytest.mark.e2e


def _ray_processes(pids) -> list[psutil.Process]:
    return [p for pid in pids for p in ray_session_processes(pid)]


def _stop_when(cmd: list[str], ready, log_path: Path, timeout: float = 240, env: dict | None = None) -> dict:
    """Start ``cmd``, wait until ``ready()`` and its Ray instance is up, SIGTERM it; what was left."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout
    family: list[psutil.Process] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            family = psutil.Process(proc.pid).children(recursive=True)
            if _ray_processes([proc.pid, *(p.pid for p in family)]) and ready():
                break
        assert proc.poll() is None, f"the command ended before it could be stopped:\n{log_path.read_text()[-3000:]}"
        family = psutil.Process(proc.pid).children(recursive=True)
        pids = [proc.pid, *(p.pid for p in family)]
        n_ray = len(_ray_processes(pids))
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=90)
        time.sleep(2)
        leftover = alive(family) + _ray_processes(pids)
        return {"rc": rc, "n_ray": n_ray, "leftover": [(p.pid, p.name()) for p in leftover],
                "output": log_path.read_text()}
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in alive(family) + _ray_processes([proc.pid, *(p.pid for p in family)]):
            try:
                p.kill()  # never leave processes behind on a shared machine, even when the test fails
            except psutil.NoSuchProcess:
                pass
        log.close()


def _last_line(output: str) -> str:
    return [line for line in output.splitlines() if line.strip()][-1]


def test_sigterm_stops_a_training_run_and_all_its_ray_processes(tmp_path, tiny_model_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "verl_isocompute.main", "--config-name", "cpu_demo", "isocompute.model=tiny",
           PARITY_REWARD, f"isocompute.run_dir={run_dir}", "trainer.total_training_steps=100"]
    # the run log exists once verl's trainer runs: the actors (FSDP workers, rollout server) are all up
    out = _stop_when(cmd, lambda: (run_dir / "isocompute.jsonl").is_file(), tmp_path / "main.log")
    assert out["n_ray"] >= 3, out["output"][-2000:]
    assert out["rc"] == 128 + signal.SIGTERM, out["output"][-3000:]
    assert out["leftover"] == []
    assert _last_line(out["output"]) == (
        f"isocompute: stopped by SIGTERM; verl and its Ray processes are stopped; kept the run directory {run_dir} "
        "(its run log has the steps finished so far)"
    )
    assert "SIGTERM received at time" not in out["output"]  # Ray's failure handler did not abort the driver


def test_sigterm_stops_the_demo_and_the_verl_run_it_started(tmp_path, tiny_model_path):
    run_dir = tmp_path / "demo"
    cmd = [sys.executable, "-m", "verl_isocompute.commands.cli", "demo", "--model", "tiny", "--run-dir", str(run_dir),
           "--steps", "100", PARITY_REWARD]
    out = _stop_when(cmd, lambda: (run_dir / "isocompute.jsonl").is_file(), tmp_path / "demo.log")
    assert out["rc"] == 128 + signal.SIGTERM, out["output"][-3000:]
    assert out["leftover"] == []
    assert _last_line(out["output"]).startswith("isocompute demo: stopped by SIGTERM; verl and its Ray processes are stopped; kept")
    assert str(run_dir) in _last_line(out["output"])


def test_sigterm_stops_a_curation_and_keeps_its_cache(tmp_path, tiny_model_path):
    """Also removed: the shared memory its processes left (its reward leaves a segment in each process that scores)."""
    out_dir = tmp_path / "curated"
    cmd = [sys.executable, "-m", "verl_isocompute.commands.cli", "curate", "--generate", "basic_arithmetic",
           "--size", "400", "--out", str(out_dir), "--model", "tiny", "--k", "4", "--concurrency", "2", LEAKING_REWARD]
    out = _stop_when(cmd, lambda: (out_dir / "samples.jsonl").is_file(), tmp_path / "curate.log",
                     env={LEAK_FILE_ENV: str(tmp_path / "leaked")})
    assert out["rc"] == 128 + signal.SIGTERM, out["output"][-3000:]
    assert out["leftover"] == []
    assert _last_line(out["output"]) == (
        f"isocompute curate: stopped by SIGTERM; Ray is stopped; kept the samples taken so far in "
        f"{out_dir / 'samples.jsonl'}: rerun the same command to resume"
    )
    assert (out_dir / "samples.jsonl").read_text().strip()  # what was sampled is cached
    left, still = left_in_dev_shm(tmp_path / "leaked")
    assert left and still == [], (left, still)


def test_sigterm_stops_a_prefix_search_and_keeps_its_rungs(tmp_path, tiny_model_path):
    from verl_isocompute.data.worked import worked_arithmetic

    worked_arithmetic(200, terms=5).to_parquet(tmp_path / "hard.parquet", index=False)
    out_dir = tmp_path / "search"
    cmd = [sys.executable, "-m", "verl_isocompute.commands.cli", "prefix-search", str(tmp_path / "hard.parquet"), "-o",
           str(out_dir), "--k", "2", "--max-fraction", "0.6", "--placement", "assistant", "--concurrency", "2",
           "isocompute.model=tiny", "data.max_prompt_length=160", PARITY_REWARD]
    out = _stop_when(cmd, lambda: (out_dir / "rungs.jsonl").is_file(), tmp_path / "search.log")
    assert out["rc"] == 128 + signal.SIGTERM, out["output"][-3000:]
    assert out["leftover"] == []
    assert _last_line(out["output"]) == (
        f"isocompute prefix-search: stopped by SIGTERM; Ray is stopped; kept the rungs sampled so far in "
        f"{out_dir / 'rungs.jsonl'}: rerun the same command to resume"
    )
    assert (out_dir / "rungs.jsonl").read_text().strip()
