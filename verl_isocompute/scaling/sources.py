"""Runs from where verl users already keep their logs: wandb run directories and tensorboard event files.

:mod:`verl_isocompute.scaling.run_logs` reads our run log, verl's file logger and CSV exports, and hands
the two formats here to this module (it only dispatches). Both are read offline, through their own
libraries, only when those are installed (verl's ``verl-core`` extra installs both; otherwise
``pip install 'verl-isocompute[tensorboard]'`` or ``[wandb]``):

* **tensorboard**: a directory of ``events.out.tfevents.*`` files is one run (verl's tensorboard logger
  writes ``$TENSORBOARD_DIR`` or ``tensorboard_log/<project>/<experiment>/``; a restarted run adds a file
  to the same directory). Read record by record with tensorboard's own protobufs and checksum: scalars
  written by ``torch.utils.tensorboard`` (verl's logger, ``simple_value``) and TF2-style scalar tensors
  (plugin ``scalars``). A step logged twice (a restart) keeps the value written last. A damaged record is
  an error naming the file and the record (tensorboard's ``EventAccumulator`` would stop there silently);
  a last record cut off by a kill is skipped. Tensorboard stores scalars as float32 (7 significant digits:
  exact for rollout counts below 2^24 = 1.7e7).
* **wandb**: a run directory ``wandb/run-<date>-<id>/`` or ``wandb/offline-run-<date>-<id>/``. wandb
  0.10+ keeps a run's history only in its transaction log ``run-<id>.wandb``: records of wandb's own
  protobuf ``Record`` (``wandb.proto.wandb_internal_pb2``), framed as a LevelDB log (a 7-byte header
  ``:W&B`` + magic ``0xBEE1`` + version 0, then 32 KiB blocks of chunks ``crc(4) length(2) type(1) data``,
  type full / first / middle / last, crc the CRC-32 (zlib's, not LevelDB's CRC-32C) of type and data, as
  wandb-core's ``store`` writes it). Its history rows, name and config are read, with every check the format
  allows, as wandb's own reader makes them (chunk checksums, chunks within their block, in order): only a file
  ending inside its last chunk is a write cut by a kill (skipped, said so); any other failure is damage that
  would read as an early end or as wrong numbers: an error naming the file, the byte and the records read.
  Older wandb wrote
  ``files/wandb-history.jsonl`` (one JSON row per step, ``_step``) and ``files/config.yaml``
  (``key: {value: ...}``); those are read too, without the wandb package.

Values that are not numbers follow the policy of the JSONL and CSV readers (:class:`_Rows`): an error
naming where, unless the key holds no number at all in the run (a tag, a table, an image).

n and B_problem come from the wandb config (``actor_rollout_ref.rollout.n``, ``data.train_batch_size``,
the keys verl's config logs) into the run's header; tensorboard logs carry no config, so
:mod:`verl_isocompute.scaling.run_settings` finds them (a run table, ``--n``/``--b-problem``, the run's
hydra config file, the run name). Our trainer's compute counters and the run's n and B_problem reach verl's
loggers as ``isocompute/rollouts``, ``isocompute/tokens``, ``isocompute/n`` and ``isocompute/b_problem``;
they become the ``rollouts``, ``tokens``, ``n`` and ``b_problem`` columns (:func:`compute_names`, also
applied to verl's file logger). Pure: no verl, no torch.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import pandas as pd

from verl_isocompute import verl_keys
from verl_isocompute.jsonl import JsonlError, read_jsonl
from verl_isocompute.runlog import WITH_CURATION, WITH_GUIDANCE, metric_key
from verl_isocompute.scaling.errors import ScalingError

WANDB, TENSORBOARD = "wandb", "tensorboard"
FORMATS = (WANDB, TENSORBOARD)
TB_EVENTS_PREFIX = "events.out.tfevents."
WANDB_SUFFIX = ".wandb"
WANDB_HISTORY = "wandb-history.jsonl"
# Our trainer's cumulative compute and the run's n and B_problem, as verl's loggers receive them (training/trainer.py).
COMPUTE_ALIASES = {metric_key(name): name for name in (
    "rollouts", "tokens", WITH_GUIDANCE["rollouts"], WITH_CURATION["rollouts"], "n", "b_problem")}
# Where verl's config keeps n and B_problem.
CONFIG_KEYS = {"n": tuple(verl_keys.N.split(".")), "b_problem": tuple(verl_keys.B_PROBLEM.split("."))}
INSTALL = {
    TENSORBOARD: "pip install 'verl-isocompute[tensorboard]' (or pip install tensorboard)",
    WANDB: "pip install 'verl-isocompute[wandb]' (or pip install wandb)",
}

# The LevelDB log framing of a .wandb file (see the module docstring).
_WANDB_MAGIC = b":W&B"
_WANDB_START = struct.pack("<4sHB", _WANDB_MAGIC, 0xBEE1, 0)  # ident, magic, version: what wandb's reader accepts
_BLOCK = 32 * 1024
_CHUNK_HEADER = struct.Struct("<IHB")  # crc (CRC-32 of type + data), length, type
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
    text_cells: dict[str, str] = field(default_factory=dict)  # keys that held no number: key -> where first seen


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


class _Rows:
    """Logged values by step, with the reader's policy for what is not a number.

    A value that is not a number (a string, ``true``, a list, a wandb table or image) is never dropped
    silently, since dropping it would lose a point or the whole metric of a run: in a key that also holds
    numbers in this run it is an error naming the record and the key; a key that holds no number at all in
    this run (a tag, a note, a media panel) is not a metric and is left out, remembered in ``text_cells``
    (an error if it is the metric being fitted: :func:`~verl_isocompute.scaling.points.validation_points`).
    NaN, inf and null are counted per key and kept as NaN (not logged)."""

    def __init__(self) -> None:
        self.values: dict[float, dict[str, float]] = {}
        self.nonfinite: Counter = Counter()
        self.numeric: set[str] = set()
        self.text: dict[str, str] = {}  # key -> where its first non-number was logged

    def add(self, step: Any, key: str, value: Any, where: str) -> None:
        if value is None:
            self.nonfinite[key] += 1
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            self.text.setdefault(key, f"{where}: {key} is {_shown_value(value)}")
            return
        elif not math.isfinite(value):
            self.nonfinite[key] += 1
        self.numeric.add(key)
        self.values.setdefault(float(step), {})[key] = math.nan if value is None or not math.isfinite(value) else float(value)

    def run(self, name: str, path: Path, header: dict[str, Any], truncated: bool) -> SourceRun:
        mixed = sorted(self.numeric & set(self.text))
        if mixed:
            raise ScalingError(
                f"{self.text[mixed[0]]}, not a number; fix that value in the log (a value not logged at a step is "
                "left out), or fit from a CSV export of the run"
            )
        frame = pd.DataFrame.from_dict(self.values, orient="index", dtype=float)
        frame.index.name = "step"
        return SourceRun(name, path, frame.reset_index(), header, self.nonfinite, truncated, dict(self.text))


def _shown_value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- tensorboard ---------------------------------------------------------------------------------------


def _read_tensorboard(path: Path) -> SourceRun:
    """Scalars of every event file of a run, in file-name order (the order they were written).

    Read record by record (TFRecord framing: length, its masked crc32c, the ``Event``, its masked
    crc32c), not through tensorboard's ``EventAccumulator``, which stops at a damaged record without a word
    and so drops the rest of the run. Here a record whose checksum fails is an error naming the file and
    the record; only a last record cut off by a kill (the file ends inside it) is skipped, with a note.
    """
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
        from tensorboard.util import tensor_util
    except ImportError:
        raise ScalingError(
            f"{path}: reading tensorboard event files needs tensorboard: {INSTALL[TENSORBOARD]}"
        ) from None
    from google.protobuf.message import DecodeError

    files = [path] if path.is_file() else sorted(p for p in path.iterdir() if p.name.startswith(TB_EVENTS_PREFIX))
    rows = _Rows()
    scalar_tags: dict[str, bool] = {}  # tag -> written by the scalars plugin (TF2 puts the metadata on its first value)
    cut = False
    for file in files:
        try:
            data = file.read_bytes()
        except OSError as exc:
            raise ScalingError(f"{file}: cannot read the tensorboard event file ({exc})") from None
        for index, record in _tf_records(file, data, masked_crc32c):
            if record is None:
                cut = True
                break
            try:
                event = Event.FromString(record)
            except DecodeError:
                raise ScalingError(f"{file}: damaged tensorboard record {index} (not an Event); {_TB_FIX}") from None
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if value.metadata.plugin_data.plugin_name:
                    scalar_tags[value.tag] = value.metadata.plugin_data.plugin_name == "scalars"
                if kind == "simple_value":  # torch's SummaryWriter, verl's tensorboard logger
                    number: Any = float(value.simple_value)
                elif kind == "tensor" and scalar_tags.get(value.tag):
                    array = tensor_util.make_ndarray(value.tensor)
                    number = array.item() if array.size == 1 else array.tolist()
                else:
                    continue  # histograms, images, text, ...
                rows.add(event.step, value.tag, number, f"{file}, record {index}")
    folder = path if path.is_dir() else path.parent
    return rows.run(_shown(folder), path, {}, cut)


_TB_FIX = "the rest of the run would be lost: export the run as a CSV from another copy, or pass the event files before it"


def _tf_records(file: Path, data: bytes, masked_crc32c):
    """(record number from 1, bytes) of a TFRecord file; (n, None) when the file ends inside record n."""
    pos, index = 0, 0
    while pos < len(data):
        index += 1
        if pos + 12 > len(data):
            yield index, None
            return
        header = data[pos : pos + 8]
        (length,), (header_crc,) = struct.unpack("<Q", header), struct.unpack("<I", data[pos + 8 : pos + 12])
        if masked_crc32c(header) != header_crc:
            raise ScalingError(f"{file}: damaged tensorboard record {index} (length checksum at byte {pos}); {_TB_FIX}")
        end = pos + 12 + length + 4
        if end > len(data):
            yield index, None
            return
        record = data[pos + 12 : end - 4]
        if masked_crc32c(record) != struct.unpack("<I", data[end - 4 : end])[0]:
            raise ScalingError(f"{file}: damaged tensorboard record {index} (data checksum at byte {pos}); {_TB_FIX}")
        yield index, record
        pos = end


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
    rows = _Rows()
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
                        rows.add(step, key, json.loads(text), f"{log}, step {step}")
            elif kind == "run":
                name = record.run.display_name or record.run.run_id or name
                config.update({_wandb_key(item): json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                config.update({_wandb_key(item): json.loads(item.value_json) for item in record.config.update})
    return rows.run(_shown(folder) + (f":{name}" if name else ""), path, _header(config), truncated)


def _wandb_key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


def _wandb_records(log: Path) -> tuple[list[Any], bool]:
    """The protobuf records of a ``.wandb`` log, and whether its last record was cut off (see the module
    docstring: a cut is the file ending inside its last chunk; any other failed check is damage, an error)."""
    try:
        from google.protobuf.message import DecodeError
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise ScalingError(f"{log}: reading a wandb run log needs wandb: {INSTALL[WANDB]}") from None
    data = log.read_bytes()
    if data[: len(_WANDB_MAGIC)] != _WANDB_MAGIC:
        raise ScalingError(f"{log}: not a wandb run log (it does not start with {_WANDB_MAGIC!r})")
    if len(data) >= len(_WANDB_START) and data[: len(_WANDB_START)] != _WANDB_START:
        raise ScalingError(f"{log}: a wandb run log of another format (header {data[:7]!r}, not {_WANDB_START!r}, wandb "
                           "0.10 and later's); read a CSV export of the run instead")
    records: list[Any] = []
    pending, pos = None, len(_WANDB_START)  # pending: the record being assembled from first / middle chunks

    def damaged(what: str) -> ScalingError:
        return ScalingError(f"{log}: damaged wandb run log: {what} at byte {pos} ({len(records)} records read before it; "
                            "the rest cannot be trusted); export the run as CSV from wandb, or leave it out")

    while pos < len(data):
        block_end = (pos // _BLOCK + 1) * _BLOCK
        if block_end - pos < _CHUNK_HEADER.size:  # block trailer: zero padding
            pos = block_end
            continue
        if pos + _CHUNK_HEADER.size > len(data):
            return records, True  # the file ends inside a chunk header: a write cut by a kill
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, pos)
        if (crc, length, kind) == (0, 0, 0):  # the rest of the block is padding
            pos = block_end
            continue
        if (end := pos + _CHUNK_HEADER.size + length) > block_end:
            raise damaged(f"a chunk of {length} bytes that would cross its 32 KiB block")
        if end > len(data):
            return records, True  # the file ends inside the chunk's data: a write cut by a kill
        chunk = data[pos + _CHUNK_HEADER.size : end]
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise damaged("a chunk whose checksum does not match its data")
        if kind not in (_FULL, _FIRST, _MIDDLE, _LAST):
            raise damaged(f"a chunk of unknown type {kind}")
        if (pending is None) == (kind in (_MIDDLE, _LAST)):
            raise damaged("a record's chunks out of order (first / middle / last)")
        pending = bytearray(chunk) if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            try:
                record.ParseFromString(bytes(pending))
            except DecodeError:
                raise damaged("a record that is not a wandb protobuf Record") from None
            records.append(record)
            pending = None
        pos = end
    return records, pending is not None


def _read_wandb_history(folder: Path, history: Path) -> SourceRun:
    import yaml

    try:  # the package's one policy for JSON lines: a cut last line is skipped, any other bad line refused
        jsonl = read_jsonl(history, report=False)
        jsonl.dicts()
    except JsonlError as exc:
        raise ScalingError(f"{exc}; or read a CSV export of the run") from None
    rows = _Rows()
    for no, obj in jsonl.objects:
        step = obj.get("_step", no - 1)
        for key, value in obj.items():
            if not key.startswith("_"):
                rows.add(step, key, value, f"{history}, line {no}")
    config_file = folder / "files" / "config.yaml"
    config = {}
    if config_file.is_file():
        loaded = yaml.safe_load(config_file.read_text()) or {}
        config = {k: v.get("value") if isinstance(v, dict) and "value" in v else v for k, v in loaded.items()}
    return rows.run(_shown(folder), history, _header(config), jsonl.cut_last_line)


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
