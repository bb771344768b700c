"""`isocompute fit` on the logs verl users already have (issue 19, section 2): n and B_problem of each run from
the hydra config file our recipes leave (interpolations, not numbers), from a tensorboard run's experiment name,
from a per-run table, and from what our trainer logs into verl's loggers.

The hydra config files are the real ones: a recipe composed as ``python -m verl_isocompute.main`` composes it,
saved unresolved as hydra saves ``.hydra/config.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_isocompute.commands import cli
from verl_isocompute.scaling import ScalingError, load_curve, load_runs
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep

METRIC = "val/avg@4"


@pytest.fixture(scope="module")
def recipe_config():
    """cpu_demo as hydra saves it: rollout.n is '${isocompute.allocation:n,...}', not a number."""
    from verl_isocompute.training.config import compose_recipe

    cfg = compose_recipe("cpu_demo", ["isocompute.model=tiny"])
    assert "${isocompute.allocation:n" in OmegaConf.to_container(cfg)["actor_rollout_ref"]["rollout"]["n"]
    return cfg


def _record(folder: Path, cfg, **updates) -> Path:
    cfg = cfg.copy()
    for key, value in updates.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    (folder / ".hydra").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, folder / ".hydra" / "config.yaml")  # what hydra writes: unresolved
    return folder / ".hydra" / "config.yaml"


def _file_logger(path: Path, steps: int = 5, extra=lambda s: {}) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [{"step": s, "data": {METRIC: 0.3 + s / 100, **extra(s)}} for s in range(steps)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _tensorboard(folder: Path, rows: list[dict]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step, data in enumerate(rows):
        for key, value in data.items():
            writer.add_scalar(key, value, step)
    writer.close()


def _meta(logs, fragment):
    (name,) = [r for r in logs.runs["run"] if fragment in r]
    return logs.runs.set_index("run").loc[name]


# --- the hydra config file of a recipe run---------------------------------------------------------------


def test_recipe_hydra_config_file_is_resolved_as_the_run_resolved_it(tmp_path, recipe_config):
    run = tmp_path / "runs" / "cpu_demo"
    _record(run, recipe_config)  # cpu_demo's own sizes: B_problem 8, n 4
    _file_logger(run / "metrics" / "cpu_demo.jsonl")
    meta = _meta(load_runs([tmp_path / "runs"]), "cpu_demo")
    assert (meta["n"], meta["b_problem"]) == (4, 8) and meta["n_source"] == ".hydra/config.yaml"


def test_a_record_whose_allocation_decided_n_says_so_and_names_the_run_table(tmp_path, recipe_config):
    run = tmp_path / "alloc"
    _record(run, recipe_config, isocompute__allocation__enable=True)
    _file_logger(run / "a.jsonl")
    with pytest.raises(ScalingError) as err:
        load_runs([run])
    message = str(err.value)
    assert "decided by the allocation at run start" in message and "--run-table FILE" in message
    assert "put the run's .hydra/config.yaml next to the log" not in message  # it is there already


# --- tensorboard: tensorboard_log/<project>/<experiment> away from the run dir -------------------------


def test_tensorboard_run_finds_its_config_by_experiment_name(tmp_path, recipe_config):
    launch = tmp_path / "work"
    for experiment, n in (("pilot_small", 4), ("pilot_large", 16)):
        _record(launch / "runs" / experiment, recipe_config, trainer__experiment_name=experiment,
                actor_rollout_ref__rollout__n=n, trainer__project_name="proj")
        _tensorboard(launch / "tensorboard_log" / "proj" / experiment, [{METRIC: 0.3 + s / 100} for s in range(4)])
    # hydra's own output dir for a third run (outputs/<date>/<time>/.hydra), another project with the same name
    _record(launch / "outputs" / "2026-01-01" / "00-00-00", recipe_config, trainer__experiment_name="pilot_small",
            actor_rollout_ref__rollout__n=64, trainer__project_name="other")
    # a recipe's own names on the CPU are interpolations too (${isocompute.on_cpu:gsm8k,cpu}): experiment "cpu"
    from verl_isocompute.training.config import compose_recipe

    _record(launch / "runs" / "cpu", compose_recipe("isocompute_hard", ["+platform=cpu"]))
    _tensorboard(launch / "tensorboard_log" / "isocompute" / "cpu", [{METRIC: 0.3 + s / 100} for s in range(4)])
    logs = load_runs([launch / "tensorboard_log"])
    assert _meta(logs, "pilot_small")[["n", "b_problem"]].tolist() == [4, 8]
    assert _meta(logs, "pilot_large")[["n", "b_problem", "n_source"]].tolist() == [16, 8, ".hydra/config.yaml"]
    assert _meta(logs, "isocompute/cpu")[["n", "b_problem"]].tolist() == [4, 8]


def test_tensorboard_run_without_a_record_names_what_was_looked_for(tmp_path):
    _tensorboard(tmp_path / "tensorboard_log" / "proj" / "exp", [{METRIC: 0.3}, {METRIC: 0.4}])
    with pytest.raises(ScalingError, match=r"no hydra config file of project 'proj', experiment 'exp' .*--run-table FILE"):
        load_runs([tmp_path / "tensorboard_log"])


# --- a run table for logs from elsewhere ---------------------------------------------------------------


@pytest.fixture
def tensorboard_sweep(tmp_path) -> tuple[Path, dict[str, int]]:
    """A sweep whose run names say nothing of n: each cell's tensorboard directory is named after a colour."""
    sweep = synthetic_sweep(curves_for(load_curve("paper:qwen2.5-7b-easy")), points_per_run=12, noise=0.0)
    names = {}
    for colour, (run, part) in zip(("red", "green", "blue", "teal"), [g for g in sweep.groupby("run")][1::2]):
        rows = [{METRIC: v, "isocompute/rollouts": c} for v, c in zip(part[METRIC], part["rollouts"])]
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(tmp_path / "tb" / colour))
        for step, row in zip(part["step"], rows):
            for key, value in row.items():
                writer.add_scalar(key, value, int(step))
        writer.close()
        names[colour] = int(part["n"].iloc[0])
    return tmp_path / "tb", names


@pytest.mark.parametrize("fmt", ["csv", "yaml"])
def test_a_run_table_gives_each_run_its_n(tensorboard_sweep, tmp_path, capsys, fmt):
    root, names = tensorboard_sweep
    table = tmp_path / f"runs.{fmt}"
    if fmt == "csv":
        table.write_text("run,n,b_problem\n" + "".join(f"{colour},{n},32\n" for colour, n in names.items()))
    else:
        table.write_text("".join(f"{colour}: {{n: {n}, b_problem: 32}}\n" for colour, n in names.items()))
    assert cli.main(["fit", str(root), "--run-table", str(table), "--out", str(tmp_path / "fit"), "--bootstrap", "0"]) == 0, (
        capsys.readouterr().err
    )
    fitted = json.loads((tmp_path / "fit" / "curve.json").read_text())
    assert fitted["n_grid"] == sorted(names.values())


def test_a_run_table_row_that_matches_no_run_or_contradicts_the_log_is_an_error(tensorboard_sweep, tmp_path):
    root, names = tensorboard_sweep
    table = tmp_path / "runs.csv"
    table.write_text("run,n,b_problem\n" + "".join(f"{c},{n},32\n" for c, n in names.items()) + "purple,8,32\n")
    with pytest.raises(ScalingError, match=r"line 6: run 'purple' matches no run given"):
        load_runs([root], run_table=table)
    _file_logger(tmp_path / "logged" / "red.jsonl", extra=lambda s: {"isocompute/n": 8, "isocompute/b_problem": 32})
    table.write_text("run,n\nred,16\n")
    with pytest.raises(ScalingError, match=r"n=16 for '.*red', but its log says n=8; fix the run table"):
        load_runs([tmp_path / "logged"], run_table=table)


# --- what our trainer logs into verl's loggers ---------------------------------------------------------


def test_our_trainers_n_and_b_problem_in_verls_file_logger(tmp_path):
    _file_logger(tmp_path / "proj" / "anything.jsonl", extra=lambda s: {"isocompute/n": 8, "isocompute/b_problem": 16} if s else {})
    meta = _meta(load_runs([tmp_path]), "anything")
    assert (meta["n"], meta["b_problem"], meta["n_source"]) == (8, 16, "log")
