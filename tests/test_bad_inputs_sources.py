"""Bad input in the logs verl users already have (issue 22, section 6): one row per class, one policy for all
readers (ours, verl's file logger, CSV exports, tensorboard event files, wandb run directories).

- A damaged record is one line naming the file and the record, never the silent loss of the rest of the run;
  only a last record cut off by a kill is skipped, with a note (as a cut last JSONL line is).
- A value that is not a number in a metric that holds numbers is one line naming the file, where and the key.
- A metric that holds no number at all in one run, while other runs log it, is refused when it is the metric
  fitted (the run would otherwise be left out with a note only).

Each row builds a small synthetic sweep (4 values of n, enough for a curve) in one format, damages it, runs
``isocompute fit`` in this process and checks the exit status, the single line and that nothing was written.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from verl_isocompute.commands import cli
from verl_isocompute.scaling import load_curve
from verl_isocompute.scaling.synthetic import curves_for, synthetic_sweep, write_run_logs

METRIC = "val/avg@4"
CURVES = curves_for(load_curve("paper:qwen2.5-7b-easy"))


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    frame = synthetic_sweep(CURVES, points_per_run=12, noise=0.0)
    return frame[frame["n"].isin([16, 64, 256, 1024])].reset_index(drop=True)


def _runs(sweep: pd.DataFrame):
    return [(run, part.reset_index(drop=True)) for run, part in sweep.groupby("run", sort=True)]


# --- writers: the same sweep in each format ------------------------------------------------------------


def _tensorboard(root: Path, sweep: pd.DataFrame) -> dict[str, Path]:
    from torch.utils.tensorboard import SummaryWriter

    files = {}
    for run, part in _runs(sweep):
        writer = SummaryWriter(str(root / run))
        for row in part.itertuples():
            writer.add_scalar(METRIC, getattr(row, "_7"), int(row.step))
            writer.add_scalar("isocompute/rollouts", row.rollouts, int(row.step))
        writer.close()
        (files[run],) = (root / run).iterdir()
    return files


def _wandb_log(path: Path, history: list[dict], config: dict) -> None:
    """A ``run-<id>.wandb`` transaction log as wandb writes it (LevelDB framing of wandb's protobuf Records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    run = pb.Record()
    run.run.run_id = path.stem
    for key, value in config.items():
        item = run.run.config.update.add()
        item.key, item.value_json = key, json.dumps(value)
    records.append(run)
    for row in history:
        record = pb.Record()
        for key, value in row.items():
            item = record.history.item.add()
            item.key, item.value_json = key, json.dumps(value)
        records.append(record)
    out = bytearray(b":W&B" + bytes([0xE1, 0xBE, 0x00]))
    for record in records:
        data = record.SerializeToString()
        assert len(data) < 30_000 and (len(out) % 32768) + 7 + len(data) <= 32768  # one FULL chunk per record
        crc = zlib.crc32(data, zlib.crc32(bytes([1])))  # wandb-core's: CRC-32 (IEEE) of the type byte and the data
        out += struct.pack("<IHB", crc, len(data), 1) + data
    path.write_bytes(bytes(out))


def _chunk_starts(data: bytes) -> list[int]:
    """Where each chunk of a ``_wandb_log`` file starts (one FULL chunk per record, all in the first block)."""
    starts, pos = [], 7
    while pos < len(data):
        starts.append(pos)
        pos += 7 + struct.unpack_from("<H", data, pos + 4)[0]
    return starts


def _wandb(root: Path, sweep: pd.DataFrame, value=lambda run, row: row[METRIC]) -> dict[str, Path]:
    files = {}
    for run, part in _runs(sweep):
        folder = root / "wandb" / f"offline-run-20260101_000000-{run}"
        folder.mkdir(parents=True)
        history = [{"_step": int(row["step"]), "isocompute/rollouts": float(row["rollouts"]), METRIC: value(run, row)}
                   for _, row in part.iterrows()]
        config = {"actor_rollout_ref": {"rollout": {"n": int(part["n"][0])}}, "data": {"train_batch_size": 32}}
        files[run] = folder / f"run-{run}.wandb"
        _wandb_log(files[run], history, config)
    return files


def _csv(root: Path, sweep: pd.DataFrame) -> Path:
    path = root / "sweep.csv"
    sweep.to_csv(path, index=False)
    return path


# --- rows ----------------------------------------------------------------------------------------------

RUN = "n64_bp32_s0"  # the run a row damages


def flip_byte_mid_file(tmp: Path, sweep) -> list[str]:
    event_file = _tensorboard(tmp / "tb", sweep)[RUN]
    data = bytearray(event_file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside a record in the middle of the run
    event_file.write_bytes(bytes(data))
    return [str(tmp / "tb")]


def cut_last_record(tmp: Path, sweep) -> list[str]:
    event_file = _tensorboard(tmp / "tb", sweep)[RUN]
    event_file.write_bytes(event_file.read_bytes()[:-7])  # a kill mid-write: the last record is incomplete
    return [str(tmp / "tb")]


def wandb_text_in_metric(tmp: Path, sweep) -> list[str]:
    step = sweep.loc[sweep["run"] == RUN, "step"].iloc[3]
    _wandb(tmp, sweep, value=lambda run, row: "oops" if (run, row["step"]) == (RUN, step) else row[METRIC])
    return [str(tmp / "wandb")]


def wandb_metric_all_text(tmp: Path, sweep) -> list[str]:
    _wandb(tmp, sweep, value=lambda run, row: f"{row[METRIC]:.3f}" if run == RUN else row[METRIC])
    return [str(tmp / "wandb")]


def wandb_legacy_text_in_metric(tmp: Path, sweep) -> list[str]:
    for run, part in _runs(sweep):
        files = tmp / "wandb" / f"run-20200101_000000-{run}" / "files"
        files.mkdir(parents=True)
        rows = [{"_step": int(r["step"]), "isocompute/rollouts": r["rollouts"], METRIC: r[METRIC]} for _, r in part.iterrows()]
        if run == RUN:
            rows[3][METRIC] = [0.5]
        (files / "wandb-history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (files / "config.yaml").write_text(f"actor_rollout_ref:\n  value:\n    rollout:\n      n: {part['n'][0]}\n"
                                           "data:\n  value:\n    train_batch_size: 32\n")
    return [str(tmp / "wandb")]


def _damage_wandb(tmp: Path, sweep, damage: Callable[[bytearray, int], None]) -> list[str]:
    """The sweep as wandb run logs, with ``damage(data, start)`` applied to the chunk in the middle of RUN's log."""
    log = _wandb(tmp, sweep)[RUN]
    data = bytearray(log.read_bytes())
    starts = _chunk_starts(bytes(data))
    damage(data, starts[len(starts) // 2])
    log.write_bytes(bytes(data))
    return [str(tmp / "wandb")]


def wandb_damaged_chunk_length(tmp: Path, sweep) -> list[str]:
    # a length past the end of the file: read as a record cut by a kill, the run kept its first half, exit 0
    return _damage_wandb(tmp, sweep, lambda data, start: data.__setitem__(slice(start + 4, start + 6), b"\xff\x7f"))


def wandb_damaged_chunk_type(tmp: Path, sweep) -> list[str]:
    # a FULL chunk marked MIDDLE: appended to nothing and parsed alone
    return _damage_wandb(tmp, sweep, lambda data, start: data.__setitem__(start + 6, 3))


def wandb_flipped_byte_in_a_record(tmp: Path, sweep) -> list[str]:
    # the last byte of a history record: the low byte of a float64 value, so it parses as another number
    def flip(data: bytearray, start: int) -> None:
        end = start + 7 + struct.unpack_from("<H", data, start + 4)[0]
        data[end - 1] ^= 0x01
    return _damage_wandb(tmp, sweep, flip)


def wandb_cut_last_record(tmp: Path, sweep) -> list[str]:
    log = _wandb(tmp, sweep)[RUN]
    log.write_bytes(log.read_bytes()[:-5])  # a kill mid-write: the last record's chunk is incomplete
    return [str(tmp / "wandb")]


def csv_metric_all_text_in_one_run(tmp: Path, sweep) -> list[str]:
    frame = sweep.astype({METRIC: object})
    frame.loc[frame["run"] == RUN, METRIC] = "n/a"
    return [str(_csv(tmp, frame))]


def jsonl_metric_all_text_in_one_run(tmp: Path, sweep) -> list[str]:
    write_run_logs(sweep, tmp / "runs")
    log = tmp / "runs" / RUN / "isocompute.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    for row in lines[1:]:
        row[METRIC] = "n/a"
    log.write_text("".join(json.dumps(row) + "\n" for row in lines))
    return [str(tmp / "runs")]


@dataclass
class Row:
    name: str
    build: Callable[[Path, pd.DataFrame], list[str]]
    code: int
    message: str


ROWS = [
    Row("tensorboard: a damaged record mid-file", flip_byte_mid_file, 2,
        f"{RUN}/events.out.tfevents"),
    Row("tensorboard: the last record cut off by a kill", cut_last_record, 0, "cut off mid-write and skipped"),
    Row("wandb: text in a numeric metric", wandb_text_in_metric, 2, f"run-{RUN}.wandb, step {{}}: {METRIC} is 'oops', not a number"),
    Row("wandb: the metric all text in one run", wandb_metric_all_text, 2, f"{METRIC} holds no number in that run"),
    # issue 46: damage inside a .wandb file is never read as its end (7 of 30 points kept, exit 0) nor as data
    Row("wandb: a damaged chunk length mid-file", wandb_damaged_chunk_length, 2,
        f"run-{RUN}.wandb: damaged wandb run log: a chunk of 32767 bytes that would cross its 32 KiB block"),
    Row("wandb: a damaged chunk type mid-file", wandb_damaged_chunk_type, 2,
        f"run-{RUN}.wandb: damaged wandb run log: a chunk whose checksum does not match its data"),
    Row("wandb: a flipped byte inside a record", wandb_flipped_byte_in_a_record, 2,
        f"run-{RUN}.wandb: damaged wandb run log: a chunk whose checksum does not match its data"),
    Row("wandb: the last record cut off by a kill", wandb_cut_last_record, 0, "cut off mid-write and skipped"),
    Row("wandb (files/wandb-history.jsonl): a list in the metric", wandb_legacy_text_in_metric, 2,
        f"wandb-history.jsonl, line 4: {METRIC} is [0.5], not a number"),
    Row("csv: the metric all text in one run", csv_metric_all_text_in_one_run, 2, f"{METRIC} is 'n/a', not a number"),
    Row("run log: the metric all text in one run", jsonl_metric_all_text_in_one_run, 2,
        f"{METRIC} holds no number in that run"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_reader_bad_inputs(sweep, tmp_path, capsys, row):
    inputs = row.build(tmp_path, sweep)
    code = cli.main(["fit", *inputs, "--out", str(tmp_path / "out"), "--bootstrap", "0"])
    out, err = capsys.readouterr()
    assert code == row.code, err
    assert "Traceback" not in err
    if row.code == 2:
        assert err.startswith("isocompute fit: error: ") and err.count("\n") == 1, err
        assert row.message.format(int(sweep.loc[sweep["run"] == RUN, "step"].iloc[3])) in err, err
        assert not (tmp_path / "out").exists()
    else:
        assert row.message in err and "n*(C): L=" in out


def test_a_damaged_tensorboard_record_names_the_record(sweep, tmp_path, capsys):
    flip_byte_mid_file(tmp_path, sweep)
    assert cli.main(["fit", str(tmp_path / "tb"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "damaged tensorboard record" in err and "checksum at byte" in err
