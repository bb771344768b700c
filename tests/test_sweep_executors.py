"""The sweep's state file and executors, without Ray: atomic state, the local launcher's stop, Ray job options."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from omegaconf import OmegaConf

from verl_isocompute.workflow import launch
from verl_isocompute.workflow.sweep import state as st
from verl_isocompute.workflow.sweep.executors import RayJobExecutor, RayConfig
from verl_isocompute.workflow.sweep.plan import parse_plan
from verl_isocompute.workflow.sweep.preflight import ray_options


def test_state_file_is_replaced_atomically(tmp_path, monkeypatch):
    state = st.SweepState(tmp_path)
    state.cells["b2_n4"] = {"status": st.PENDING}
    state.save()
    before = state.path.read_text()

    def crash(src, dst):  # the process dies between writing the new state and putting it in place
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", crash)
    state.cells["b2_n4"]["status"] = st.RUNNING
    with pytest.raises(OSError):
        state.save()
    # a plain write would have left a half-new file here; the old state is intact and no temporary is left
    assert state.path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [st.STATE_FILE]
    assert st.SweepState(tmp_path).cells == {"b2_n4": {"status": st.PENDING}}


def test_state_counts_and_bad_json(tmp_path):
    state = st.SweepState(tmp_path)
    state.cells.update({"a": {"status": st.FINISHED}, "b": {"status": st.FINISHED}, "c": {"status": st.FAILED}})
    assert state.counts() == {st.FINISHED: 2, st.FAILED: 1}
    (tmp_path / st.STATE_FILE).write_text("{not json")
    with pytest.raises(st.SweepError, match="is not valid JSON .* move it away"):
        st.SweepState(tmp_path)


def test_stop_ends_the_child_and_a_grandchild_that_left_its_session(tmp_path):
    # the child starts a grandchild in a session of its own (as Ray does for some processes), then waits
    script = (
        "import subprocess, sys, time; "
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True); "
        "print(g.pid, flush=True); time.sleep(300)"
    )
    proc = launch.start([sys.executable, "-c", script], tmp_path / "log")
    deadline = time.monotonic() + 30
    while not (tmp_path / "log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    grandchild = psutil.Process(int((tmp_path / "log").read_text().split()[0]))
    assert os.getpgid(grandchild.pid) != os.getpgid(proc.pid)  # a process-group signal would miss it
    launch.stop(proc, grace_s=2)
    assert proc.poll() is not None
    grandchild.wait(timeout=10)  # raises TimeoutExpired if it is still running


def test_ray_job_executor_is_built_without_a_cluster_and_submits_its_options(tmp_path):
    plan = parse_plan({"name": "p", "recipe": "cpu_demo", "budget_rollouts": 8, "b_problem": [2], "n": [4]})
    executor = RayJobExecutor(RayConfig("10.0.0.1:8265", max_concurrent=3, python="/opt/py", env_vars={"A": "1"},
                                         num_gpus=2, num_cpus=4))
    assert executor.client is None and executor.address == "http://10.0.0.1:8265" and executor.max_concurrent == 3

    class Client:
        def __init__(self):
            self.submitted = []

        def submit_job(self, **kwargs):
            self.submitted.append(kwargs)

    executor.client = Client()
    handle = executor.start(plan, plan.cells()[0], tmp_path, ["a=1"])
    job = executor.client.submitted[0]
    assert handle.job_id == job["submission_id"] and handle.run_dir == tmp_path and handle.pid is None
    assert job["entrypoint"] == "RAY_ADDRESS=local /opt/py -m verl_isocompute.main --config-name cpu_demo a=1"
    assert (job["entrypoint_num_gpus"], job["entrypoint_num_cpus"]) == (2, 4)
    assert job["runtime_env"]["env_vars"]["A"] == "1"
    assert job["runtime_env"]["env_vars"]["VERL_FILE_LOGGER_PATH"] == str(tmp_path / "verl_metrics.jsonl")


@pytest.mark.parametrize(("ray", "trainer", "expected"), [
    ({}, {"n_gpus_per_node": 8, "nnodes": 1}, ("private", 8, 1, 2)),
    ({"num_gpus": None, "num_cpus": None}, {"n_gpus_per_node": 4, "nnodes": 1}, ("private", 4, 1, 2)),
    ({"num_gpus": 1, "max_concurrent": 5}, {"n_gpus_per_node": 8, "nnodes": 1}, ("private", 1, 1, 5)),
    ({"max_concurrent": 5}, {"n_gpus_per_node": 8, "nnodes": 2}, ("join", 16, 1, 1)),
])
def test_ray_options_resolve_the_plan_against_the_recipe(ray, trainer, expected):
    plan = parse_plan({"recipe": "cpu_demo", "budget_rollouts": 8, "b_problem": [2], "n": [4], "ray": ray})
    cfg = OmegaConf.create({"trainer": trainer, "isocompute": {"platform": None}})
    options = ray_options(plan, cfg, "head:8265", echo=lambda msg: None)
    assert (options.mode, options.num_gpus, options.num_cpus, options.concurrent) == expected


def test_private_mode_with_several_nodes_is_refused():
    plan = parse_plan({"recipe": "cpu_demo", "budget_rollouts": 8, "b_problem": [2], "n": [4], "ray": {"mode": "private"}})
    cfg = OmegaConf.create({"trainer": {"n_gpus_per_node": 8, "nnodes": 2}})
    with pytest.raises(st.SweepError, match="use ray.mode: join"):
        ray_options(plan, cfg, "head:8265")


def test_interrupted_is_not_an_exception():
    # verl's and Ray's `except Exception` must not swallow a stop; ray.get lets only KeyboardInterrupt out
    assert not issubclass(launch.Interrupted, Exception) and issubclass(launch.Interrupted, KeyboardInterrupt)
    assert launch.Interrupted(15).exit_code == 143 and launch.Interrupted(2).exit_code == 130


def test_a_signal_in_a_process_that_starts_ray_shuts_ray_down_before_the_exception_leaves(monkeypatch):
    """The one stop pattern of verl's driver, curation and the prefix search (no Ray started here: the
    shutdown is recorded, and our handlers are back once the block is left)."""
    import signal

    pytest.importorskip("ray")
    calls = []
    monkeypatch.setattr(launch, "shutdown_ray", lambda: calls.append(signal.getsignal(signal.SIGTERM)))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(launch.Interrupted) as caught:
        with launch.shutting_down_ray_on_error():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal raises here, at once
    assert caught.value.exit_code == 143 and calls == [before]  # shut down once, after the handlers were restored


def test_an_error_in_a_process_that_starts_ray_shuts_ray_down_before_the_exception_leaves(monkeypatch):
    """Ray prints its held-back worker log lines when the driver disconnects; shutting down before the
    exception leaves puts them before the one error line the caller prints (it was at exit, after it)."""
    pytest.importorskip("ray")
    calls = []
    monkeypatch.setattr(launch, "shutdown_ray", lambda: calls.append("shutdown"))
    with pytest.raises(ValueError):
        with launch.shutting_down_ray_on_error():
            raise ValueError("a worker failed")
    assert calls == ["shutdown"]
    with launch.shutting_down_ray_on_error():
        pass
    assert calls == ["shutdown"]  # a block that ends normally leaves Ray to the caller


def test_main_command_is_the_recipe_entry_point():
    assert launch.main_command("cpu_demo", ["a=1"], "py") == ["py", "-m", "verl_isocompute.main", "--config-name", "cpu_demo", "a=1"]


def test_shutting_ray_down_leaves_no_descendant_alive():
    """Ray's workers retitle themselves (``ray::WorkerDict``), so the session's name no longer finds them; after
    Ray's shutdown every descendant of the process is gone before it goes on to say "stopped" (CI once found a
    killed worker still alive 2 s after the command had exited). In a process of its own: it kills descendants."""
    pytest.importorskip("ray")
    code = (
        "import subprocess, sys, psutil, ray\n"
        "from verl_isocompute.workflow import launch\n"
        "ray.shutdown = lambda: None  # a worker that outlives Ray's own shutdown, as on a loaded machine\n"
        "launch.KILL_WAIT_S = 3.0\n"
        "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "launch.shutdown_ray()\n"
        "gone = worker.poll() is not None or not psutil.pid_exists(worker.pid)\n"
        "worker.kill()\n"
        "print('gone' if gone else 'alive')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "gone", out.stderr[-2000:]
