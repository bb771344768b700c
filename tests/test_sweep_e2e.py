"""End to end on CPU with the tiny model: curate -> pilot sweep (interrupted, then resumed as Ray jobs on a real
local Ray head) -> fit -> allocate -> train (through `isocompute demo`, so its allocation, progress and summary are
checked on that run).

Every cell is a real verl run (~1 minute each on 2 cores), so the grid is tiny: 2 x 2 (B_problem 2, 4 x n 4, 8)
with a budget of 16 rollouts per cell, so the 4 x 8 cell is reported as below one step and three cells run. The
first cell runs and the second is stopped by SIGTERM on this machine (the local executor); the same command with
--ray-address then resumes the sweep on the Ray head, where the two cells left run at the same time, each a Ray
job. (n >= 4: the CPU recipe's micro-batches of 8 sequences must divide a step's rollouts.) The pilot is far too
small for an n*(C) curve (4 validation points per n are needed), so the workflow allocates from a paper preset,
as the example script does when the fit finds no curve; the fitted path is covered with synthetic logs in
test_sweep_plan.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import psutil
import pytest
import yaml
from verl_runs import PARITY_REWARD, alive

from verl_isocompute.commands import cli
from verl_isocompute.workflow.launch import ray_session_processes

pytestmark = pytest.mark.e2e
PRESET = "paper:qwen2.5-7b-hard"


def _cli(*args, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl_isocompute.commands.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _steps(run_dir: Path) -> list[int]:
    return [r["step"] for r in _rows(run_dir / "isocompute.jsonl") if "header" not in r and r["step"] > 0]


def _state(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "sweep_state.json").read_text())


# --- the workflow -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workflow(tmp_path_factory, tiny_model_path):
    root = tmp_path_factory.mktemp("workflow")
    out: dict = {"root": root}

    # 1. curate 24 generated problems; --easy 0,1 keeps them all in one set to train on
    curated = root / "curated"
    curate = ["curate", "--generate", "basic_arithmetic", "--size", 24, "--gen-arg", "max_digits=2", "--out", curated,
              "--model", "tiny", "--k", 4, "--easy", "0,1", "--sets", "easy", "--mixture-size", 8, PARITY_REWARD]
    out["curate"] = _cli(*curate)
    assert out["curate"].returncode == 0, out["curate"].stderr[-4000:]
    out["difficulty"] = pd.read_parquet(curated / "difficulty.parquet")
    # everything is cached now: the same command samples nothing (no Ray) and writes the same sets
    out["recurate"] = _cli(*curate)

    # 2. the pilot plan
    plan = root / "pilot.yaml"
    plan.write_text(yaml.safe_dump({
        "name": "pilot", "recipe": "cpu_demo", "overrides": ["isocompute.model=tiny", PARITY_REWARD],
        "data": {"train_files": "curated/sets/easy/train.parquet", "val_files": "curated/sets/easy/val.parquet"},
        "budget_rollouts": 16, "b_problem": [2, 4], "n": [4, 8], "test_freq": 1, "fit": {"bootstrap": 0},
        "ray": {"max_concurrent": 2, "python": sys.executable},  # used only with --ray-address (the resume)
    }))
    sweep_dir = root / "runs" / "pilot"
    out["dry_run"] = _cli("sweep", "--plan", plan, "--dry-run")

    # 3. the sweep, stopped with SIGTERM while its second cell runs
    log = open(root / "sweep1.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "verl_isocompute.commands.cli", "sweep", "--plan", str(plan)],
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(1)
        try:
            record = _state(sweep_dir)["cells"]["b2_n8"]
        except (FileNotFoundError, KeyError, json.JSONDecodeError):
            continue
        if record["status"] == "running" and time.time() - record["started"] > 20:
            break
    assert proc.poll() is None, (root / "sweep1.log").read_text()[-3000:]
    out["first_cell_log"] = (sweep_dir / "cells" / "b2_n4" / "isocompute.jsonl").read_text()
    family = psutil.Process(proc.pid).children(recursive=True)
    cell_pid = _state(sweep_dir)["cells"]["b2_n8"]["pid"]
    proc.send_signal(signal.SIGTERM)
    out["interrupted_rc"] = proc.wait(timeout=120)
    log.close()
    time.sleep(3)
    leftover = alive(family) + ray_session_processes(cell_pid)
    out["leftover"] = [(p.pid, p.name()) for p in leftover]
    for p in leftover:  # do not leave processes behind on a shared machine, even if the test fails
        p.kill()
    out["interrupted_state"] = _state(sweep_dir)
    out["interrupted_output"] = (root / "sweep1.log").read_text()

    # 4. the same command again, on a Ray cluster: resumes (the two cells left as Ray jobs, at the same time) and fits
    from ray.job_submission import JobSubmissionClient

    with ray_head() as (address, env):
        out["resumed"] = _cli("sweep", "--plan", plan, "--ray-address", address, "--no-progress", env=env)
        out["jobs"] = {j.submission_id: j for j in JobSubmissionClient(address).list_jobs()}
    out["state"] = _state(sweep_dir)

    # 5. allocate a budget from the pilot's curve, or from the paper preset if the pilot fitted none
    curve = sweep_dir / "fit" / "curve.json"
    out["curve"] = str(curve) if curve.is_file() else PRESET
    dataset_size = len(pd.read_parquet(curated / "sets" / "easy" / "train.parquet"))
    allocate = _cli("allocate", "--curve", out["curve"], "--budget", 32, "--b-problem", 2, "--n-grid", "4,8",
                    "--dataset-size", dataset_size, "--format", "json")
    assert allocate.returncode == 0, allocate.stderr
    out["allocation"] = json.loads(allocate.stdout)

    # 6. train with the allocation hook of our recipe, through `isocompute demo` (whose own output is checked
    #    here too: one verl run for both)
    train_dir = root / "train"
    out["train_overrides"] = [
        PARITY_REWARD, "isocompute.data.source=files", f"data.train_files={curated / 'sets/easy/train.parquet'}",
        f"data.val_files={curated / 'sets/easy/val.parquet'}", "isocompute.allocation.enable=true",
        f"isocompute.allocation.curve={out['curve']}", "isocompute.allocation.budget_rollouts=32",
        "isocompute.allocation.b_problem=2", "isocompute.allocation.n_grid=[4,8]",
    ]
    out["train"] = _cli("demo", "--model", "tiny", "--run-dir", train_dir, *out["train_overrides"])
    out["train_dir"] = train_dir
    out.update(sweep_dir=sweep_dir, curated=curated, dataset_size=dataset_size)
    return out


def test_curation_wrote_difficulty_splits_and_sets(workflow):
    curated = workflow["curated"]
    for name in ("difficulty.parquet", "difficulty.png", "report.md", "samples.jsonl", "curation.json",
                 "splits/easy.parquet", "splits/hard.parquet", "splits/extremely_hard.parquet", "splits/very_easy.parquet",
                 "mixtures/hard_only.parquet", "mixtures/dual.parquet", "mixtures/tri.parquet",
                 "sets/easy/train.parquet", "sets/easy/val.parquet"):
        assert (curated / name).is_file(), name
    difficulty = pd.read_parquet(curated / "difficulty.parquet")
    assert len(difficulty) == 24 and set(difficulty["k"]) == {4}
    train, val = (pd.read_parquet(curated / "sets" / "easy" / f"{s}.parquet") for s in ("train", "val"))
    assert (len(train), len(val)) == (20, 4)  # 20% of 24 held out
    ids = lambda f: {e["difficulty_id"] for e in f["extra_info"]}  # noqa: E731
    assert not ids(train) & ids(val)


def test_curation_samples_were_real_and_are_cached(workflow):
    curated = workflow["curated"]
    samples = _rows(curated / "samples.jsonl")
    assert len(samples) == 24 and all(len(s["scores"]) == 4 and s["correct"] == sum(s["scores"]) for s in samples)
    assert all(0 < t <= 48 for s in samples for t in s["response_tokens"])  # generated, capped by the recipe
    assert workflow["difficulty"]["avg@k"].nunique() > 1  # the parity reward varies over real responses
    assert "0 cached, 24 to sample" in workflow["curate"].stderr
    proc = workflow["recurate"]
    assert proc.returncode == 0 and "24 cached, 0 to sample" in proc.stderr, proc.stderr[-2000:]
    assert "sampling k=" not in proc.stderr  # no progress bar: nothing was sampled
    pd.testing.assert_frame_equal(pd.read_parquet(curated / "difficulty.parquet"), workflow["difficulty"])


def test_dry_run_lists_the_grid(workflow):
    proc = workflow["dry_run"]
    assert proc.returncode == 0, proc.stderr
    assert "3 cells to run (1 skipped" in proc.stdout and "skipped: one step takes 32 rollouts > budget 16" in proc.stdout


def test_sigterm_stops_the_running_cell_and_its_processes(workflow):
    assert workflow["interrupted_rc"] == 128 + signal.SIGTERM, workflow["interrupted_output"][-3000:]
    assert workflow["leftover"] == []  # the cell's verl driver, Ray and workers are all gone
    cells = workflow["interrupted_state"]["cells"]
    assert cells["b2_n4"]["status"] == "done" and cells["b2_n4"]["attempts"] == 1
    assert cells["b2_n8"]["status"] == "interrupted" and cells["b2_n8"]["attempts"] == 1
    assert cells["b4_n4"]["status"] == "pending" and cells["b4_n4"]["attempts"] == 0
    assert cells["b4_n8"]["status"] == "skipped" and "less than one step" in cells["b4_n8"]["reason"]


def test_resumed_sweep_completes_every_cell_once(workflow):
    proc, sweep_dir = workflow["resumed"], workflow["sweep_dir"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "1 cell already finished: b2_n4" in proc.stderr
    cells = workflow["state"]["cells"]
    assert {k: r["status"] for k, r in cells.items()} == {"b2_n4": "done", "b2_n8": "done", "b4_n4": "done", "b4_n8": "skipped"}
    # the finished cell was not run again; the interrupted one was restarted from a clean directory
    assert cells["b2_n4"]["attempts"] == 1 and cells["b2_n8"]["attempts"] == 2 and cells["b4_n4"]["attempts"] == 1
    assert (sweep_dir / "cells" / "b2_n4" / "isocompute.jsonl").read_text() == workflow["first_cell_log"]
    assert (sweep_dir / "attempts" / "b2_n8-attempt1").is_dir()
    assert cells["b2_n4"]["executor"] == "local" and {cells[c]["executor"] for c in ("b2_n8", "b4_n4")} == {"ray"}
    for cell, (b, n, steps) in {"b2_n4": (2, 4, 2), "b2_n8": (2, 8, 1), "b4_n4": (4, 4, 1)}.items():
        rows = _rows(sweep_dir / "cells" / cell / "isocompute.jsonl")
        assert rows[0]["header"]["n"] == n and rows[0]["header"]["b_problem"] == b
        assert [r["step"] for r in rows[1:]] == list(range(0, steps + 1)), cell  # each step exactly once
        assert rows[-1]["rollouts"] == steps * b * n and "val/avg@4" in rows[-1]


def test_sweep_ran_the_fit(workflow):
    fit = workflow["state"]["fit"]
    fit_dir = workflow["sweep_dir"] / "fit"
    assert fit["runs"] == 3  # the cell run here and the two run as Ray jobs
    # three one- or two-step runs cannot give a curve the 4 points per n it needs: the sweep says so
    assert fit["status"] == "no_curve" and "4 validation points" in fit["reason"], fit
    for name in ("frontier.csv", "records.csv", "fits.csv", "report.md"):
        assert (fit_dir / name).is_file(), name
    assert f"fit no_curve: {fit['reason']}" in workflow["resumed"].stdout


def test_allocation_and_training_run(workflow, capsys):
    allocation, train = workflow["allocation"], workflow["train"]
    assert workflow["curve"] == PRESET
    assert allocation["n"] in (4, 8) and allocation["b_problem"] == 2
    assert allocation["steps"] == 32 // (2 * allocation["n"])
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-3000:]
    rows = _rows(workflow["train_dir"] / "isocompute.jsonl")
    header = rows[0]["header"]
    steps = allocation["steps"]
    assert (header["n"], header["b_problem"], header["total_training_steps"]) == (allocation["n"], 2, steps)
    assert _steps(workflow["train_dir"]) == list(range(1, steps + 1))
    assert [r["rollouts"] for r in rows[1:] if r["step"] > 0] == [s * 2 * allocation["n"] for s in range(1, steps + 1)]
    assert rows[-1]["rollouts"] == allocation["rollouts_used"]  # never more than the budget
    # `isocompute allocate` over the recipe and the run's overrides prints the plan and the lr the run used
    assert cli.main(["allocate", "--recipe", "cpu_demo", "isocompute.model=tiny", *workflow["train_overrides"][1:],
                     "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["n"], printed["b_problem"], printed["steps"]) == (allocation["n"], 2, steps)
    assert (printed["lr"], printed["warmup_steps"]) == (header["lr"], header["lr_warmup_steps"])


def test_demo_shows_the_allocation_progress_and_summary(workflow):
    train, train_dir, steps = workflow["train"], workflow["train_dir"], workflow["allocation"]["steps"]
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-3000:]
    log = (train_dir / "verl.log").read_text()
    decision = next(line for line in log.splitlines() if line.startswith("[isocompute] allocation:"))
    assert f"n={workflow['allocation']['n']}" in decision.replace(" ", ""), decision
    assert decision in train.stdout  # the decision is shown to the user, not only written to the log
    summary = json.loads((train_dir / "demo_summary.json").read_text())
    assert summary["steps"] == steps and summary["rollouts"] == workflow["allocation"]["rollouts_used"]
    assert f"rollouts: {summary['rollouts']}" in train.stdout
    # the dtype choice with its reason, and progress inside the steps (phase and elapsed time, then the time left)
    assert "[isocompute] dtype: " in train.stdout and "isocompute.cpu.dtype=" in train.stdout
    for status in ("validation before training ... ", f"step 1/{steps}: ", f"step {steps}/{steps}: ", "left="):
        assert status in train.stderr, status  # tqdm's line, on stderr


# --- the Ray cluster --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT_TAKEN = ("Failed to start the grpc server", "Address already in use")  # in the head's log


def _start_head(env: dict) -> tuple[subprocess.Popen, str, Path, bool]:
    """`ray start --head` on ports free a moment ago: the head, its address, its log, and whether its job API
    answered (within 2 minutes, the head still running)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rayhead", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    dashboard = _free_port()
    ray = Path(sys.executable).with_name("ray")
    with open(temp_dir / "head.log", "w") as log:
        head = subprocess.Popen(
            [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={_free_port()}",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", f"--dashboard-agent-listen-port={_free_port()}",
             "--num-cpus=64", "--num-gpus=2", f"--temp-dir={temp_dir}", "--disable-usage-stats"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    address = f"http://127.0.0.1:{dashboard}"
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + 120
    while head.poll() is None and time.monotonic() < deadline:
        try:
            JobSubmissionClient(address).list_jobs()
            return head, address, temp_dir / "head.log", True
        except Exception:
            time.sleep(1)
    return head, address, temp_dir / "head.log", False


@contextmanager
def ray_head():
    """A real Ray head on 127.0.0.1 (logical GPUs for verl's pools), stopped by its own pid at the end.

    Its temp dir is private, so `ray.init()` elsewhere on this shared machine never finds it, and token
    authentication is off for this throwaway cluster. Its ports are picked free just before it starts, and
    another process (the other test worker's Ray, say) may take one in between: a head that fails on a taken
    port is started again on fresh ports, up to three times.
    """
    env = dict(os.environ, RAY_AUTH_MODE="disabled")
    for _ in range(3):
        head, address, log, ready = _start_head(env)
        if ready or head.poll() is None or not any(text in log.read_text() for text in PORT_TAKEN):
            break
    try:
        if not ready:
            raise RuntimeError("the Ray head did not start:\n" + log.read_text()[-3000:])
        yield address, env
    finally:
        family = psutil.Process(head.pid).children(recursive=True) if head.poll() is None else []
        head.terminate()  # `ray start --block` stops its processes on SIGTERM
        psutil.wait_procs([psutil.Process(head.pid)] + family if head.poll() is None else family, timeout=60)
        for p in alive(family):
            p.kill()


def test_sweep_as_ray_jobs_on_a_local_head(workflow):
    """The resume with --ray-address: each cell left is a Ray job of its own on the head, both at the same time."""
    assert workflow["resumed"].returncode == 0, workflow["resumed"].stdout[-2000:] + workflow["resumed"].stderr[-4000:]
    sweep_dir = workflow["sweep_dir"]
    cells = workflow["state"]["cells"]
    for cell, steps in (("b2_n8", 1), ("b4_n4", 1)):
        assert cells[cell]["executor"] == "ray" and cells[cell]["job_id"].startswith(f"isocompute-pilot-{cell}-")
        assert _steps(sweep_dir / "cells" / cell) == list(range(1, steps + 1))
        assert "Training Progress" in (sweep_dir / "cells" / cell / "verl.log").read_text()  # the job's logs
    # both cells ran at the same time on the cluster
    a, b = cells["b2_n8"], cells["b4_n4"]
    assert a["started"] < b["finished"] and b["started"] < a["finished"]
    jobs = workflow["jobs"]
    assert set(jobs) == {a["job_id"], b["job_id"]}
    for job in jobs.values():
        cell = job.metadata["cell"]
        assert job.status.value == "SUCCEEDED" and job.driver_exit_code == 0
        assert job.entrypoint.startswith("RAY_ADDRESS=local ")  # each cell in a Ray instance of its own
        assert job.runtime_env["env_vars"]["VERL_FILE_LOGGER_PATH"] == str(sweep_dir / "cells" / cell / "verl_metrics.jsonl")


def test_unreachable_ray_address_is_a_clear_error(tmp_path):
    plan = tmp_path / "p.yaml"
    plan.write_text(yaml.safe_dump({"recipe": "cpu_demo", "budget_rollouts": 8, "b_problem": [2], "n": [2]}))
    start = time.monotonic()
    proc = _cli("sweep", "--plan", plan, "--ray-address", f"127.0.0.1:{_free_port()}", timeout=60)
    assert proc.returncode == 2 and "cannot reach a Ray cluster" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - start < 30
