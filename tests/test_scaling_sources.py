"""`isocompute fit` reads runs where verl users keep them: tensorboard event files and wandb run directories.

The event files are written the way verl's tensorboard logger writes them (torch's SummaryWriter,
``add_scalar`` per key and step) and TF2-style (scalar tensors); the wandb runs by wandb itself in offline
mode, with a verl-shaped config, in a subprocess (wandb.init patches the process's streams).
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from verl_isocompute.commands.cli import main as cli_main
from verl_isocompute.scaling import ScalingError, load_curve, load_runs
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep

VERL_CONFIG = {
    "actor_rollout_ref": {"rollout": {"n": 16}, "model": {"path": "Qwen/Qwen2.5-7B-Instruct"}},
    "data": {"train_batch_size": 32},
    "trainer": {},
}


def _summary_writer():
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install 'verl-isocompute[tensorboard]')")
    return pytest.importorskip(
        "torch.utils.tensorboard", reason="torch's SummaryWriter (what verl uses) not importable"
    ).SummaryWriter


def _write_tb(folder: Path, rows: list[dict], start: int = 0) -> None:
    """As verl's _TensorboardAdapter.log does: one add_scalar per key of each step's metrics."""
    writer = _summary_writer()(str(folder))
    for step, data in enumerate(rows, start=start):
        for key, value in data.items():
            writer.add_scalar(key, value, step)
    writer.close()


def _steps(logs, fragment):
    (name,) = [r for r in logs.runs["run"] if fragment in r]
    return logs.steps[logs.steps["run"] == name].set_index("step"), logs.runs.set_index("run").loc[name]


# --- tensorboard -----------------------------------------------------------------------------------------


def test_tensorboard_run_as_verl_writes_it(tmp_path):
    run = tmp_path / "tensorboard_log" / "proj" / "easy_n16_bp32"
    rows = [{"critic/score/mean": 0.1 * s, "isocompute/rollouts": 512.0 * s} for s in range(9)]
    for s in (0, 4, 8):
        rows[s]["val/avg@4"] = 0.3 + 0.01 * s
    rows[6]["val/avg@4"] = float("nan")
    _write_tb(run, rows)
    _write_tb(run, [{"val/avg@4": 0.5, "isocompute/rollouts": 4096.0}], start=8)  # a restart re-logs step 8

    logs = load_runs([tmp_path])
    steps, meta = _steps(logs, "easy_n16_bp32")
    assert meta["format"] == "tensorboard" and (meta["n"], meta["b_problem"]) == (16, 32)
    assert meta["n_source"] == "run name" and meta["rollouts_source"] == "log"  # isocompute/rollouts -> rollouts
    assert list(steps.index) == list(range(9))
    assert steps.loc[4, "val/avg@4"] == pytest.approx(0.34) and steps.loc[8, "val/avg@4"] == pytest.approx(0.5)
    assert math.isnan(steps.loc[6, "val/avg@4"]) and math.isnan(steps.loc[2, "val/avg@4"])
    assert steps.loc[3, "rollouts"] == 1536.0 and logs.nonfinite == {"val/avg@4": 1}


def test_tensorboard_tf2_scalar_tensors(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed")
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util.tensor_util import make_tensor_proto

    writer = EventFileWriter(str(tmp_path / "run_n8_bp64"))
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for step in range(1, 4):
        value = Summary.Value(tag="val/avg@4", tensor=make_tensor_proto(0.25 * step), metadata=meta)
        writer.add_event(Event(step=step, wall_time=float(step), summary=Summary(value=[value])))
    writer.close()
    steps, meta_row = _steps(load_runs([tmp_path / "run_n8_bp64"]), "run_n8_bp64")
    assert list(steps["val/avg@4"]) == [0.25, 0.5, 0.75] and (meta_row["n"], meta_row["b_problem"]) == (8, 64)
    assert list(steps["rollouts"]) == [512.0, 1024.0, 1536.0]  # not logged: step x n x b_problem


def test_fit_from_tensorboard_runs(tmp_path, capsys):
    sweep = synthetic_sweep(curves_for(load_curve("paper:qwen2.5-7b-easy")), points_per_run=30, noise=0.0)
    for run, part in sweep.groupby("run"):
        writer = _summary_writer()(str(tmp_path / "tb" / run))
        for step, rollouts, reward in zip(part["step"], part["rollouts"], part["val/avg@4"]):
            writer.add_scalar("val/avg@4", reward, int(step))
            writer.add_scalar("isocompute/rollouts", rollouts, int(step))
        writer.close()
    assert cli_main(["fit", str(tmp_path / "tb"), "--out", str(tmp_path / "fit"), "--bootstrap", "0"]) == 0, (
        capsys.readouterr().err
    )
    curve = load_curve(tmp_path / "fit" / "curve.json")
    assert curve.n_grid == (8, 16, 32, 64, 128, 256, 512, 1024) and curve.provenance["num_runs"] == 8
    assert 64 <= curve.n_star(1e6) <= 256  # the paper's Easy curve says 118


def test_missing_metric_names_the_keys_found_and_the_flag(tmp_path, capsys):
    _write_tb(tmp_path / "easy_n16_bp32", [{"val-core/math/reward/mean@4": 0.3, "critic/score/mean": 0.2}] * 3)
    assert cli_main(["fit", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "'val/avg@4' is not in the logs; pass --metric" in err and "val-core/math/reward/mean@4" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "module, fmt, extra",
    [("tensorboard", "tensorboard", "[tensorboard]"), ("wandb", "wandb", "[wandb]")],
)
def test_missing_library_is_one_line_naming_the_pip_command(tmp_path, monkeypatch, capsys, module, fmt, extra):
    if fmt == "tensorboard":
        (tmp_path / "run_n8_bp32").mkdir()
        (tmp_path / "run_n8_bp32" / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    else:
        (tmp_path / "offline-run-x").mkdir()
        (tmp_path / "offline-run-x" / "run-x.wandb").write_bytes(b":W&B\xe1\xbe\x00")
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")] or [module]:
        monkeypatch.setitem(sys.modules, name, None)  # what an install without the library sees: ImportError
    assert cli_main(["fit", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"pip install 'verl-isocompute{extra}'" in err and len(err.strip().splitlines()) == 1


# --- wandb ---------------------------------------------------------------------------------------------

WANDB_RUN = textwrap.dedent(
    """
    import json, sys, wandb
    config, steps = json.loads(sys.argv[2]), int(sys.argv[3])
    run = wandb.init(project="proj", name="easy_sweep_cell", dir=sys.argv[1], config=config, mode="offline")
    for s in range(steps):
        data = {"critic/score/mean": s / 1000, "isocompute/rollouts": 512 * s, "note": "text is skipped"}
        data.update({f"actor/metric_{i}": s + i / 7 for i in range(8)})  # bulk: records span 32 KiB blocks
        if s % 10 == 0:
            data["val/avg@4"] = 0.3 + s / 10000
        if s == 20:
            data["val/avg@4"] = float("nan")
        run.log(data, step=s)
    run.finish()
    """
)


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory) -> Path:
    pytest.importorskip("wandb", reason="wandb not installed (pip install 'verl-isocompute[wandb]')")
    root = tmp_path_factory.mktemp("wandb_project")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "PATH": "/usr/bin:/bin", "HOME": str(root)}
    subprocess.run(
        [sys.executable, "-c", WANDB_RUN, str(root), json.dumps(VERL_CONFIG), "300"],
        check=True,
        env=env,
        timeout=120,
        capture_output=True,
    )
    return root / "wandb"


def test_wandb_offline_run_directory(wandb_dir):
    (run_dir,) = [p for p in wandb_dir.iterdir() if p.name.startswith("offline-run-")]
    assert (run_dir / f"run-{run_dir.name.rsplit('-', 1)[1]}.wandb").stat().st_size > 3 * 32 * 1024
    for given in (wandb_dir.parent, run_dir):  # the project folder (searched) or the run directory itself
        logs = load_runs([given])
        steps, meta = _steps(logs, ":easy_sweep_cell")
        assert meta["format"] == "wandb" and (meta["n"], meta["b_problem"]) == (16, 32)
        assert meta["n_source"] == "header" and meta["model"] == "Qwen/Qwen2.5-7B-Instruct"
        assert list(steps.index) == list(range(300)) and meta["rollouts_source"] == "log"
        assert steps.loc[299, "rollouts"] == 512 * 299 and steps.loc[123, "actor/metric_3"] == 123 + 3 / 7
        assert steps.loc[290, "val/avg@4"] == 0.3 + 290 / 10000 and math.isnan(steps.loc[20, "val/avg@4"])
        assert steps["val/avg@4"].notna().sum() == 29 and logs.nonfinite == {"val/avg@4": 1}
        assert "note" not in steps


def test_wandb_log_cut_off_mid_record_keeps_the_complete_records(wandb_dir, tmp_path):
    (run_dir,) = [p for p in wandb_dir.iterdir() if p.name.startswith("offline-run-")]
    (log,) = run_dir.glob("*.wandb")
    cut = tmp_path / "offline-run-cut"
    cut.mkdir()
    (cut / log.name).write_bytes(log.read_bytes()[: 2 * 32 * 1024 + 100])
    logs = load_runs([cut])
    steps, _ = _steps(logs, "offline-run-cut")
    assert 10 < len(steps) < 300 and np.array_equal(steps.index, np.arange(len(steps)))
    assert any("cut off" in note for note in logs.notes)


def test_wandb_damage_inside_a_real_log_is_an_error_not_an_early_end(wandb_dir, tmp_path):
    """Issue 46: a damaged chunk header two blocks in (its length, or one byte of its checksum) made the reader
    stop there as if the file ended, keeping the steps before it. wandb's own log, damaged: each chunk's
    checksum (CRC-32 of type and data, as wandb-core writes it) and block bounds are checked."""
    (run_dir,) = [p for p in wandb_dir.iterdir() if p.name.startswith("offline-run-")]
    (log,) = run_dir.glob("*.wandb")
    data = log.read_bytes()
    pos = 2 * 32 * 1024 + 100
    for damage in (lambda d, at: d.__setitem__(slice(at + 4, at + 6), b"\xff\xff"),  # the length
                   lambda d, at: d.__setitem__(at, d[at] ^ 0x10)):  # the checksum
        broken = bytearray(data)
        at = _chunk_after(data, pos)
        damage(broken, at)
        folder = tmp_path / f"offline-run-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        (folder / log.name).write_bytes(bytes(broken))
        with pytest.raises(ScalingError, match=rf"damaged wandb run log: .* at byte {at} \(\d+ records read before it"):
            load_runs([folder])


def _chunk_after(data: bytes, pos: int) -> int:
    """The first chunk of a .wandb log that starts at or after byte ``pos`` (walking the LevelDB framing)."""
    at = 7
    while at < pos:
        block_end = (at // 32768 + 1) * 32768
        crc, length, kind = struct.unpack_from("<IHB", data, at) if block_end - at >= 7 else (0, 0, 0)
        at = block_end if (crc, length, kind) == (0, 0, 0) else at + 7 + length
    return at


def test_wandb_damaged_log_is_one_clear_error(tmp_path):
    pytest.importorskip("wandb", reason="wandb not installed")
    (tmp_path / "run-1").mkdir()
    (tmp_path / "run-1" / "run-1.wandb").write_bytes(b"not a wandb log")
    with pytest.raises(ScalingError, match="not a wandb run log"):
        load_runs([tmp_path])


def test_old_wandb_files_history_and_config(tmp_path):
    files = tmp_path / "wandb" / "run-20200101_000000-abc" / "files"
    files.mkdir(parents=True)
    history = [
        {"_step": s, "_runtime": s, "val/avg@4": 0.3 + s / 100, "isocompute/rollouts": 256 * s} for s in range(1, 6)
    ]
    (files / "wandb-history.jsonl").write_text("\n".join(json.dumps(h) for h in history) + '\n{"_step": 6, "val/a')
    (files / "config.yaml").write_text(
        "actor_rollout_ref:\n  desc: null\n  value:\n    rollout:\n      n: 8\n"
        "data:\n  value:\n    train_batch_size: 32\n"
    )
    logs = load_runs([tmp_path])
    steps, meta = _steps(logs, "run-20200101_000000-abc")
    assert (meta["n"], meta["b_problem"]) == (8, 32) and list(steps.index) == [1, 2, 3, 4, 5]
    assert steps.loc[3, "val/avg@4"] == pytest.approx(0.33) and steps.loc[5, "rollouts"] == 1280
    assert any("cut off" in note for note in logs.notes)


# --- compute columns -------------------------------------------------------------------------------------


def test_verl_file_logger_uses_our_trainers_compute_counter(tmp_path):
    # evicted groups are charged too, so the counter is not step x n x b_problem (training/trainer.py)
    lines = [{"step": s, "data": {"isocompute/rollouts": 600 * s, "val/avg@4": 0.3 + s / 100}} for s in range(4)]
    (tmp_path / "easy_n16_bp32.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    steps, meta = _steps(load_runs([tmp_path]), "easy_n16_bp32")
    assert meta["rollouts_source"] == "log" and list(steps["rollouts"]) == [0, 600, 1200, 1800]


def test_missing_token_counts_name_the_keys_found_and_the_flag(tmp_path, capsys):
    _write_tb(tmp_path / "easy_n16_bp32", [{"val/avg@4": 0.3 + s / 100, "prompt_tokens/mean": 100.0} for s in range(5)])
    assert cli_main(["fit", str(tmp_path), "--out", str(tmp_path / "out"), "--compute", "tokens"]) == 2
    err = capsys.readouterr().err
    assert "found token-like keys: prompt_tokens/mean; use --compute rollouts" in err


def test_a_directory_with_event_files_is_one_run(tmp_path):
    run = tmp_path / "easy_n16_bp32"
    _write_tb(run, [{"val/avg@4": 0.3}, {"val/avg@4": 0.4}])
    # verl's file logger pointed at the same folder logs the same run again: not read twice
    (run / "easy_n16_bp32.jsonl").write_text(json.dumps({"step": 1, "data": {"val/avg@4": 0.4}}) + "\n")
    logs = load_runs([tmp_path])
    assert logs.runs["format"].tolist() == ["tensorboard"]
