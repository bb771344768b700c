"""Runs from where verl users already keep their logs: wandb run directories and tensorboard event files.

:mod:`verl_isocompute.scaling.records` reads our run log, verl's file logger and CSV exports, and hands
the two formats here to this module (it only dispatches). Both are read offline, through their own
libraries, only when those are installed (verl's ``verl-core`` extra installs both; otherwise
``pip install 'verl-isocompute[tensorboard]'`` or ``[wandb]``):

* **tensorboard**: a directory of ``events.out.tfevents.*`` files is one run (verl's tensorboard logger
  writes ``$TENSORBOARD_DIR`` or ``tensorboard_log/<project>/<experiment>/``; a restarted run adds a file
  to the same directory). Read with tensorboard's ``EventAccumulator``: scalars written by
  ``torch.utils.tensorboard`` (verl's logger, ``simple_value``) and TF2-style scalar tensors (plugin
  ``scalars``). A step logged twice (a restart) keeps the value written last. Tensorboard stores scalars
  as float32 (7 significant digits: exact for rollout counts below 2^24 = 1.7e7).
* **wandb**: a run directory ``wandb/run-<date>-<id>/`` or ``wandb/offline-run-<date>-<id>/``. wandb
  0.10+ keeps a run's history only in its transaction log ``run-<id>.wandb``: records of wandb's own
  protobuf ``Record`` (``wandb.proto.wandb_internal_pb2``), framed as a LevelDB log (a 7-byte header
  ``:W&B`` + magic + version, then 32 KiB blocks of chunks ``crc32c(4) length(2) type(1) data`` with type
  full / first / middle / last; wandb-core's ``store`` package). The history rows, the run's name and
  its config are read from it; a last record cut off by a kill is skipped. Older wandb wrote
  ``files/wandb-history.jsonl`` (one JSON row per step, ``_step``) and ``files/config.yaml``
  (``key: {value: ...}``); those are read too, without the wandb package.

n and B_problem come from the wandb config (``actor_rollout_ref.rollout.n``, ``data.train_batch_size``,
the keys verl's config logs) into the run's header; tensorboard logs carry no config, so records.py
takes them from ``--n``/``--b-problem``, a ``.hydra/config.yaml`` nearby or the run name
(``..._n16_bp32``). Our trainer's compute counters reach verl's loggers as ``isocompute/rollouts`` and
``isocompute/tokens``; they become the ``rollouts`` and ``tokens`` columns (:func:`compute_names`, also
applied to verl's file logger). Pure: no verl, no torch.
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import pandas as pd

from verl_isocompute.scaling.errors import ScalingError

WANDB, TENSORBOARD = "wandb", "tensorboard"
FORMATS = (WANDB, TENSORBOARD)
TB_EVENTS_PREFIX = "events.out.tfevents."
WANDB_SUFFIX = ".wandb"
WANDB_HISTORY = "wandb-history.jsonl"
# Our trainer's cumulative compute, as verl's loggers receive it (training/trainer.py).
COMPUTE_ALIASES = {"isocompute/rollouts": "rollouts", "isocompute/tokens": "tokens",
                   "isocompute/rollouts_with_guidance": "rollouts_with_guidance",
                   "isocompute/rollouts_with_curation": "rollouts_with_curation"}
# Where verl's config keeps n and B_problem.
CONFIG_KEYS = {"n": ("actor_rollout_ref", "rollout", "n"), "b_problem": ("data", "train_batch_size")}
INSTALL = {
    TENSORBOARD: "pip install 'verl-isocompute[tensorboard]' (or pip install tensorboard)",
    WANDB: "pip install 'verl-isocompute[wandb]' (or pip install wandb)",
}

# The LevelDB log framing of a .wandb file (see the module docstring).
_WANDB_MAGIC = b":W&B"
_WANDB_HEADER = 7
_BLOCK = 32 * 1024
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32c, length, type
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


@dataclass
class SourceRun:
    """One run as read: ``frame`` has ``step`` and one float column per metric (NaN = not logged at that
    step); ``header`` has ``n`` / ``b_problem`` / ``model`` when the source's config says."""

    name: str
    path: Path
    frame: pd.DataFrame
    header: dict[str, Any] = field(default_factory=dict)
    nonfinite: Counter = field(default_factory=Counter)
    truncated: bool = False


def sniff(path: Path) -> str | None:
    """The format of a log file named on the command line (directories: :func:`run_in_dir`), or None."""
    if path.name.startswith(TB_EVENTS_PREFIX):
        return TENSORBOARD
    if path.suffix == WANDB_SUFFIX or path.name == WANDB_HISTORY:
        return WANDB
    return None


def run_in_dir(folder: Path, filenames: list[str]) -> str | None:
    """The format of the run that ``folder`` holds (``filenames``: its files), or None.

    A wandb run directory has a ``run-<id>.wandb`` log (or an old ``files/wandb-history.jsonl``); a
    tensorboard run directory has ``events.out.tfevents.*`` files.
    """
    if any(name.endswith(WANDB_SUFFIX) for name in filenames) or (folder / "files" / WANDB_HISTORY).is_file():
        return WANDB
    if any(name.startswith(TB_EVENTS_PREFIX) for name in filenames):
        return TENSORBOARD
    return None


def read(path: Path, fmt: str) -> SourceRun:
    """Read one run (a run directory, or one of its files) in format ``fmt`` (wandb | tensorboard)."""
    run = _read_tensorboard(path) if fmt == TENSORBOARD else _read_wandb(path)
    frame = run.frame.rename(columns=compute_names(run.frame.columns))
    if "step" not in frame or frame.empty:
        raise ScalingError(f"{path}: no logged steps found in this {fmt} run")
    run.frame = frame.sort_values("step", kind="stable").reset_index(drop=True)
    return run


def compute_names(keys: Iterable[str]) -> dict[str, str]:
    """Our trainer's counters as verl's loggers name them (``isocompute/rollouts``, ``isocompute/tokens``)
    -> the ``rollouts`` / ``tokens`` columns they become, unless the log (``keys``) has those already."""
    keys = set(keys)
    return {k: v for k, v in COMPUTE_ALIASES.items() if k in keys and v not in keys}


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _table(rows: dict[float, dict[str, float]]) -> pd.DataFrame:
    """{step: {metric: value}} -> a frame with ``step`` and float metric columns."""
    frame = pd.DataFrame.from_dict(rows, orient="index", dtype=float)
    frame.index.name = "step"
    return frame.reset_index()


def _add(rows: dict, nonfinite: Counter, step: float, key: str, value: Any) -> None:
    """One logged value; numbers only (wandb also logs tables, images, strings), NaN/inf counted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        nonfinite[key] += 1
        value = math.nan
    rows.setdefault(float(step), {})[key] = float(value)


# --- tensorboard ---------------------------------------------------------------------------------------


def _read_tensorboard(path: Path) -> SourceRun:
    try:
        from tensorboard.backend.event_processing import event_accumulator
        from tensorboard.util import tensor_util
    except ImportError:
        raise ScalingError(
            f"{path}: reading tensorboard event files needs tensorboard: {INSTALL[TENSORBOARD]}"
        ) from None
    sizes = {event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}  # 0 = keep every event
    acc = event_accumulator.EventAccumulator(str(path), size_guidance=sizes)
    try:
        acc.Reload()  # a damaged file is skipped by tensorboard (no steps: read() says so)
    except OSError as exc:
        raise ScalingError(f"{path}: cannot read the tensorboard event file(s) ({exc})") from None
    rows: dict[float, dict[str, float]] = {}
    nonfinite: Counter = Counter()
    tags = acc.Tags()
    for tag in tags.get(event_accumulator.SCALARS, []):
        for event in acc.Scalars(tag):  # in the order written: a restart's later value wins
            _add(rows, nonfinite, event.step, tag, float(event.value))
    for tag in tags.get(event_accumulator.TENSORS, []):
        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue  # histograms, text, ...
        for event in acc.Tensors(tag):
            _add(rows, nonfinite, event.step, tag, float(tensor_util.make_ndarray(event.tensor_proto).item()))
    folder = path if path.is_dir() else path.parent
    return SourceRun(_shown(folder), path, _table(rows), {}, nonfinite)


# --- wandb ---------------------------------------------------------------------------------------------


def _read_wandb(path: Path) -> SourceRun:
    folder = path if path.is_dir() else path.parent
    if path.name == WANDB_HISTORY:
        folder = path.parent.parent
    logs = [path] if path.suffix == WANDB_SUFFIX else sorted(folder.glob(f"*{WANDB_SUFFIX}"))
    legacy = folder / "files" / WANDB_HISTORY
    if path.name == WANDB_HISTORY or not logs:
        if not legacy.is_file():
            raise ScalingError(f"{path}: no run-<id>.wandb log nor files/{WANDB_HISTORY}: not a wandb run directory")
        return _read_wandb_history(folder, legacy)
    rows: dict[float, dict[str, float]] = {}
    nonfinite: Counter = Counter()
    config: dict[str, Any] = {}
    name = None
    truncated = False
    for log in logs:
        records, cut = _wandb_records(log)
        truncated |= cut
        for record in records:
            kind = record.WhichOneof("record_type")
            if kind == "history":
                values = {_wandb_key(item): item.value_json for item in record.history.item}
                step = json.loads(values["_step"]) if "_step" in values else record.history.step.num
                for key, text in values.items():
                    if not key.startswith("_"):
                        _add(rows, nonfinite, step, key, json.loads(text))
            elif kind == "run":
                name = record.run.display_name or record.run.run_id or name
                config.update({_wandb_key(item): json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                config.update({_wandb_key(item): json.loads(item.value_json) for item in record.config.update})
    shown = _shown(folder) + (f":{name}" if name else "")
    return SourceRun(shown, path, _table(rows), _header(config), nonfinite, truncated)


def _wandb_key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


def _wandb_records(log: Path) -> tuple[list[Any], bool]:
    """The protobuf records of a ``.wandb`` log, and whether its last record was cut off."""
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise ScalingError(f"{log}: reading a wandb run log needs wandb: {INSTALL[WANDB]}") from None
    data = log.read_bytes()
    if data[: len(_WANDB_MAGIC)] != _WANDB_MAGIC:
        raise ScalingError(f"{log}: not a wandb run log (it does not start with {_WANDB_MAGIC!r})")
    records, pending, pos, cut = [], b"", _WANDB_HEADER, False
    while pos < len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos += left
            continue
        if pos + _CHUNK_HEADER.size > len(data):
            cut = True
            break
        _, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:  # the rest of the block is padding
            pos += left
            continue
        chunk = data[pos + _CHUNK_HEADER.size : pos + _CHUNK_HEADER.size + length]
        if len(chunk) < length:
            cut = True
            break
        pos += _CHUNK_HEADER.size + length
        if kind in (_FULL, _FIRST):
            pending = chunk
        elif kind in (_MIDDLE, _LAST):
            pending += chunk
        else:
            raise ScalingError(
                f"{log}: damaged wandb run log (chunk type {kind} at byte {pos}); read a CSV export instead"
            )
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(pending)
            except DecodeError:
                raise ScalingError(f"{log}: damaged wandb record near byte {pos}; read a CSV export instead") from None
            records.append(record)
            pending = b""
    return records, cut or bool(pending)


def _read_wandb_history(folder: Path, history: Path) -> SourceRun:
    import yaml

    rows: dict[float, dict[str, float]] = {}
    nonfinite: Counter = Counter()
    cut = False
    lines = history.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:  # cut off mid-write
                cut = True
                continue
            raise ScalingError(f"{history}, line {i + 1}: not JSON; read a CSV export instead") from None
        step = obj.get("_step", i)
        for key, value in obj.items():
            if not key.startswith("_"):
                _add(rows, nonfinite, step, key, value)
    config_file = folder / "files" / "config.yaml"
    config = {}
    if config_file.is_file():
        loaded = yaml.safe_load(config_file.read_text()) or {}
        config = {k: v.get("value") if isinstance(v, dict) and "value" in v else v for k, v in loaded.items()}
    return SourceRun(_shown(folder), history, _table(rows), _header(config), nonfinite, cut)


def _header(config: dict[str, Any]) -> dict[str, Any]:
    """n, b_problem and the model from a logged verl config (nested, or flattened with dots)."""
    header = {}
    for key, parts in {**CONFIG_KEYS, "model": ("actor_rollout_ref", "model", "path")}.items():
        node: Any = config.get(".".join(parts), config)
        if node is config:
            for part in parts:
                node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            header[key] = node
    return header
