"""What the bench scripts read back from the runs they made, read one way.

The report, go / no-go and verdict stages of ``bench_learning.py``, ``bench_evidence.py``, ``bench_adaptive.py``
and ``bench_tis.py`` read files written by a run, by a publish step or by hand: our run log
(``isocompute.jsonl``), verl's metrics (``verl_metrics.jsonl``), verl's validation dumps, ``sets.csv``, and each
run's ``learning_run.json`` / ``tis_run.json``. Every read goes through here, so that a file that is missing,
is not what its writer writes, or lacks what the stage needs (a run-log header without ``n``, a cell folder
whose name carries no seed, a metric a report needs) is one :class:`BenchError` line naming the file and what is
wrong: exit status 2, as the ``isocompute`` commands report theirs, never a traceback from json, pandas or a
missing key. JSON-lines files follow the package's one policy (:mod:`verl_isocompute.jsonl`: a last line cut
by a kill is skipped, any other bad line is an error).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.numeric import is_real


class BenchError(IsoComputeError):
    """A setting or a file a benchmark cannot use: one line and exit status 2, as the ``isocompute`` commands report
    theirs (:func:`verl_isocompute.commands.cli.run_command`)."""


def read_json(path: Path, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """A JSON object written by a bench script (``learning_run.json``, ``tis_run.json``) with ``keys`` in it."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: missing; run the stage that writes it again") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchError(f"{path}: cannot be read ({exc}); run the stage that writes it again") from None
    except ValueError as exc:
        raise BenchError(f"{path}: not JSON ({exc}); run the stage that writes it again, or remove the run") from None
    if not isinstance(data, dict):
        raise BenchError(f"{path}: a JSON {type(data).__name__}, not the object the bench script writes; run it again")
    missing = [key for key in keys if key not in data]
    if missing:
        raise BenchError(f"{path}: no {', '.join(missing)} in it; run the stage that writes it again")
    return data


def read_csv(path: Path, columns: tuple[str, ...]):
    """A CSV table (``sets.csv``) with ``columns``, every cell read as text."""
    import pandas as pd

    if not path.is_file():
        raise BenchError(f"{path}: missing; draw the sets (--stage sets) or publish them again (--stage publish)")
    try:
        table = pd.read_csv(path, dtype=str)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # pandas' ParserError and EmptyDataError are ValueErrors
        raise BenchError(f"{path}: not a CSV table ({str(exc).splitlines()[0]}); draw or publish it again") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise BenchError(f"{path}: no column {', '.join(missing)}; draw or publish it again")
    return table


def read_log(run_dir: Path, header: tuple[str, ...] = ()):
    """The run's log (``isocompute.jsonl``), each step row with the keys of the contract as numbers and the
    ``header`` keys asked for as numbers; a run directory without one, or with a log no run of ours wrote, is
    refused in one line."""
    from verl_isocompute.runlog import ROW_KEYS, RUN_LOG, read_run_log

    path = run_dir / RUN_LOG
    if not path.is_file():
        raise BenchError(f"{run_dir}: no {RUN_LOG} there; train it first (--stage train), or name a trained run "
                         "(--out, --run, --runs-dir)")
    log = read_run_log(path)
    for line, row in log.rows:
        bad = [key for key in ROW_KEYS if not is_real(row.get(key))]
        if bad:
            raise BenchError(f"{path}, line {line}: {', '.join(bad)} missing or not a number; a run log of our trainer "
                             "has them on every row: train the run again")
    bad = [key for key in header if not is_real(log.header.get(key))]
    if bad:
        raise BenchError(f"{path}: its header has no {', '.join(bad)} (or not a number); a run log of our trainer "
                         "records it: train the run again")
    return log


def verl_metrics(run_dir: Path, keys: tuple[str, ...] = (), prefix: str = "") -> list[tuple[int, dict[str, Any]]]:
    """(step, metrics) of each line of verl's file logger (``verl_metrics.jsonl``) that has a key starting with
    ``prefix``; each such line must carry every one of ``keys`` as a number."""
    from verl_isocompute.jsonl import read_jsonl
    from verl_isocompute.runlog import VERL_METRICS, verl_line

    path = run_dir / VERL_METRICS
    if not path.is_file():
        raise BenchError(f"{run_dir}: no {VERL_METRICS} there; run it first (--stage run / train)")
    rows = []
    for no, obj in read_jsonl(path, report=False).objects:
        line = verl_line(obj)
        if line is None:
            raise BenchError(f"{path}, line {no}: not a line of verl's file logger ({{\"step\": N, \"data\": {{...}}}})")
        step, data = line
        if not any(key.startswith(prefix) for key in data):
            continue
        bad = [key for key in keys if not is_real(data.get(key))]
        if bad:
            raise BenchError(f"{path}, line {no} (step {step}): {', '.join(bad)} missing or not a number")
        rows.append((step, data))
    return rows


def cell_seed(cell: Path) -> int:
    """The seed of a sweep cell's folder, ``<cell>-s<seed>`` (``b8_n2-s0``)."""
    match = re.fullmatch(r".+-s(\d+)", cell.name)
    if match is None:
        raise BenchError(f"{cell}: a cell folder is named <cell>-s<seed> (e.g. b8_n2-s0), as the sweep writes it; "
                         "rename or remove it")
    return int(match.group(1))


def run_started(run_dir: Path) -> float:
    """When the training run started (unix time): recorded when it ends, else when hydra wrote its config (else when
    the run log was last written)."""
    from verl_isocompute.runlog import RUN_LOG

    info = read_json(run_dir / "learning_run.json") if (run_dir / "learning_run.json").is_file() else {}
    try:
        if "started_unix" in info:
            return float(info["started_unix"])
        if "started" in info:  # local time, to the second
            return time.mktime(time.strptime(info["started"], "%Y-%m-%d %H:%M:%S"))
    except (TypeError, ValueError):
        raise BenchError(f"{run_dir / 'learning_run.json'}: its start time is not a time; train the run again") from None
    return min(p.stat().st_mtime for p in [*(run_dir / ".hydra").glob("*"), run_dir / RUN_LOG])


def validation_points(run_dir: Path) -> list[dict]:
    """Every validation of the run: step, rollouts C at that step, avg@k and its SE over problems, and the
    wall time from the run's start to the moment verl wrote that validation's samples."""
    from verl_isocompute.commands.demo import per_problem_avg
    from verl_isocompute.rules import metrics

    log = read_log(run_dir)
    rollouts = {int(r["step"]): r["rollouts"] for _, r in log.rows}
    k = int(log.header.get("val_n") or 4)
    started = run_started(run_dir)
    points = []
    dumps = list((run_dir / "validation").glob("*.jsonl"))
    for path in dumps:
        if not path.stem.isdigit():
            raise BenchError(f"{path}: verl names a validation dump <step>.jsonl; rename or remove it")
    for path in sorted(dumps, key=lambda p: int(p.stem)):
        per = per_problem_avg(path, k)
        if not per:
            raise BenchError(f"{path}: no validation sample in it (verl writes one JSON line per sample); remove it, or "
                             "train the run again")
        step = int(path.stem)
        points.append({"step": step, "rollouts": rollouts.get(step, 0), "problems": len(per),
                       "avg": sum(per.values()) / len(per), "se": metrics.stderr_over_problems(per.values()),
                       "wall_s": round(path.stat().st_mtime - started, 1),
                       "per_problem": per})
    return points
