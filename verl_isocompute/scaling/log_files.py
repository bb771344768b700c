"""Finding run logs: which files under the paths given are runs, and in which format (ours, verl's file
logger, a CSV export, a wandb run directory, tensorboard event files). Reading them:
:mod:`verl_isocompute.scaling.log_readers` and :mod:`verl_isocompute.scaling.sources`.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Iterable

from verl_isocompute.runlog import RUN_LOG, verl_line
from verl_isocompute.scaling import sources
from verl_isocompute.scaling.errors import ScalingError


def find_logs(paths: Iterable[str | os.PathLike]) -> list[tuple[Path, str, Path]]:
    """(file, format, root) for every run log under ``paths``; format is isocompute | verl | csv.

    A directory holding ``isocompute.jsonl`` is one run (its other files are not read: our trainer may
    also run verl's file logger there). Other directories are searched recursively for
    ``isocompute.jsonl`` and verl file-logger ``.jsonl`` files; CSVs are read only when named.
    """
    found: dict[str, tuple[Path, str, Path]] = {}
    real_dir.cache_clear()  # links may have changed since the last load
    paths = list(paths)
    if not paths:
        raise ScalingError("no runs given: pass run directories, isocompute.jsonl / verl .jsonl / .csv files")
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise ScalingError(f"{path} does not exist; pass run directories or log files")
        if not path.is_dir() and not path.is_file():
            raise ScalingError(not_regular(path))
        if path.is_file():
            fmt = sniff_format(path) or sources.sniff(path)
            if fmt is None:
                raise ScalingError(
                    f"{path} is not a run log: expected isocompute.jsonl, a verl file-logger .jsonl "
                    "(lines {\"step\": N, \"data\": {...}}), a .csv with one row per step, a wandb run "
                    "directory or tensorboard event files"
                )
            found.setdefault(real_path(path), (path, fmt, path.parent))
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            here = Path(dirpath)
            logs = [name for name in sorted(filenames) if name.endswith(".jsonl")]
            for name in logs:  # a FIFO or a device would block the read that sniffs it: refuse it first
                if not (here / name).is_file():
                    raise ScalingError(not_regular(here / name))
            if RUN_LOG in filenames:
                dirnames[:] = []
                found.setdefault(real_path(here / RUN_LOG), (here / RUN_LOG, "isocompute", path))
                continue
            fmt = sources.run_in_dir(here, filenames)
            if fmt is not None:  # one run per directory, like isocompute.jsonl; wandb's subfolders are its own
                found.setdefault(real_path(here), (here, fmt, path))
                if fmt == sources.WANDB:
                    dirnames[:] = []
                continue
            for name in logs:
                if sniff_format(here / name) == "verl":
                    found.setdefault(real_path(here / name), (here / name, "verl", path))
    if not found:
        raise ScalingError(
            f"no runs found in {', '.join(str(p) for p in paths)}: looked for {RUN_LOG}, verl "
            "file-logger .jsonl files (trainer.logger=['file']), wandb run directories and tensorboard event "
            "files; pass a .csv export by name"
        )
    return sorted(found.values(), key=lambda item: str(item[0]))


def real_path(path: str | os.PathLike) -> str:
    """``str(path.resolve())`` for an existing path, each directory resolved once per load (the runs of
    a sweep share their parents; strings, as pathlib objects cost more than the lookups here)."""
    path = os.path.abspath(path)
    parent, name = os.path.split(path)
    if not name or os.path.islink(path):
        return os.path.realpath(path)
    return os.path.join(real_dir(parent), name)


@functools.lru_cache(maxsize=4096)
def real_dir(folder: str) -> str:
    return real_path(folder)


def unreadable(path: Path, exc: OSError) -> str:
    return f"{path}: cannot read it ({exc.strerror or exc}); fix its permissions or leave it out of RUNS"


def not_regular(path: Path) -> str:
    return f"{path} is not a regular file (a FIFO, socket or device?): pass run directories or log files written to disk"


def sniff_format(path: Path) -> str | None:
    if path.suffix.lower() == ".csv":
        return "csv"
    if path.name == RUN_LOG:
        return "isocompute"
    if path.suffix.lower() not in (".jsonl", ".json"):
        return None
    try:
        with open(path, "rb") as fh:
            first = next((line for line in fh if line.strip()), b"")
    except OSError as exc:
        raise ScalingError(unreadable(path, exc)) from None
    try:
        obj = json.loads(first)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "header" in obj:
        return "isocompute"
    if verl_line(obj) is not None:
        return "verl"
    if "step" in obj and ("rollouts" in obj or "n" in obj):
        return "isocompute"
    return None
