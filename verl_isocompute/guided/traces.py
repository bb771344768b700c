"""PrefixRL's successful traces from the base model: the traces file, the pass@K stopping rule, the choice per problem.

PrefixRL ("Reuse your FLOPs", arXiv 2601.18795) conditions a hard problem on the prefix of a *successful
off-policy trace*; in the paper the traces come from rejection sampling the base model. Curation already
samples k responses per problem to measure avg@k; ``isocompute curate --keep-correct`` keeps the correct
ones, so those FLOPs become traces, and ``--pass-k K`` samples problems with no success yet in more rounds
of k until the first success or K samples in all (rejection sampling).

Files in the curation's output directory (written by :mod:`verl_isocompute.workflow.curate`):

- ``traces.jsonl.gz``: one JSON line per correct response, ``{"id", "stage", "round", "sample", "text",
  "token_ids"}`` (``stage`` is ``curation`` for round 0, the first k samples, or ``rejection_sampling``;
  ``text`` is the decoded ``token_ids``, special tokens skipped, exactly what the reward scored). Gzip,
  appended and flushed as each problem (or round) finishes; a kill leaves an unfinished gzip stream, whose
  complete lines are read back and rewritten (:class:`TraceWriter`) before anything is appended. Read and
  written with the package's one JSON-lines policy (:mod:`verl_isocompute.jsonl`).
- ``rejection.jsonl``: one outcome per rejection round of one problem (same fields as the sample cache's
  outcomes, ``k`` = the round's samples, plus ``round``); the curation cache ``samples.jsonl`` keeps the
  first k only, so avg@k and the splits never see rejection samples.

A trace line is written right *after* its outcome, so an outcome never lacks a trace except for an
interruption between the two writes (the report counts such problems); nothing is ever written twice.

Pure standard library.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from verl_isocompute.errors import IsoComputeError
from verl_isocompute.jsonl import JsonlAppender, JsonlError, read_jsonl, write_jsonl

TRACES_FILE = "traces.jsonl.gz"
REJECTION_FILE = "rejection.jsonl"
CURATION_ROUND = 0  # round 0 = curation's first k samples; rejection rounds are 1, 2, ...


class TracesError(IsoComputeError, ValueError):
    """A traces file that cannot be used; the message names the file and the fix."""


def traces_path(where: str | os.PathLike) -> Path:
    """``where`` is a curation output directory or the traces file itself."""
    where = Path(os.path.expanduser(str(where)))
    return where if where.name.endswith(".gz") else where / TRACES_FILE


def read_traces(where: str | os.PathLike) -> list[dict[str, Any]]:
    """Every trace line of ``where`` (a curation directory or the file), in the order written (a last line
    cut by a kill is skipped and reported; any other bad line is an error naming it: :mod:`verl_isocompute.jsonl`)."""
    path = traces_path(where)
    if not path.is_file():
        raise TracesError(f"{path} not found: run `isocompute curate --keep-correct --out {path.parent}` first "
                          "(it keeps the base model's correct responses there)")
    try:
        return read_jsonl(path).dicts()
    except JsonlError as exc:
        raise TracesError(f"{exc}; rerun `isocompute curate --keep-correct` into that directory "
                          "(with --restart to start over)") from None


class TraceWriter(JsonlAppender):
    """Appends trace lines to ``traces.jsonl.gz`` (created at once: its presence says the correct responses
    were kept, even if none was correct yet); a file cut by a kill is first rewritten from its complete lines."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        if not path.is_file():  # an empty gzip file
            write_jsonl(path, [])

    def write(self, lines: Iterable[dict[str, Any]]) -> None:
        self.append(*lines)


def trace_lines(problem_id: str, round_: int, kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The traces file's lines for the correct responses ``kept`` of one sampling round."""
    stage = "curation" if round_ == CURATION_ROUND else "rejection_sampling"
    return [{"id": problem_id, "stage": stage, "round": round_, "sample": int(t["sample"]), "text": t["text"],
             "token_ids": [int(i) for i in t["token_ids"]]} for t in kept]


def rejection_round(k: int, pass_k: int | None, taken: int, found: int) -> int:
    """Samples in a problem's next rejection round (0: stop), PrefixRL-style rejection sampling.

    A problem is sampled in rounds of ``k`` only while it has no correct sample (``found == 0``), until
    ``pass_k`` samples in all (``taken`` counts curation's first k too); the last round is cut to reach
    exactly ``pass_k``. ``pass_k`` None (no ``--pass-k``) never samples."""
    if pass_k is None or found > 0 or taken >= pass_k:
        return 0
    return min(k, pass_k - taken)


TRACE_KEYS = ("id", "text", "token_ids")  # what choosing and cutting a trace reads


def by_problem(lines: Iterable[dict[str, Any]], path: str | os.PathLike | None = None) -> dict[str, list[dict[str, Any]]]:
    """The trace lines per problem id; a line without :data:`TRACE_KEYS` is a :class:`TracesError` naming the
    file (``path``) and the line."""
    out: dict[str, list[dict[str, Any]]] = {}
    for number, line in enumerate(lines, start=1):
        if not isinstance(line, dict) or any(key not in line for key in TRACE_KEYS) or not isinstance(line["token_ids"], list):
            missing = [k for k in TRACE_KEYS if not isinstance(line, dict) or k not in line]
            raise TracesError(f"{path or 'traces'}: record {number} is not a trace (lacks {missing or ['a token_ids list']}); "
                              "it must come from `isocompute curate --keep-correct`: rerun it into that directory "
                              "(with --restart to start over)")
        out.setdefault(str(line["id"]), []).append(line)
    return out


def choose_trace(traces: list[dict[str, Any]], usable) -> dict[str, Any] | None:
    """The trace whose prefix ladder guides a problem: the shortest (fewest tokens) with a usable prefix.

    ``usable(trace)`` says whether a trace has a prefix within the cap (e.g. guided.prefixes.skip_reason of its
    text is None).
    The shortest correct trace is the most direct known path to the answer, so its early steps carry more of
    the solution per token. Ties go to the first written (curation before rejection, lower sample index).
    When no trace is usable, the shortest one comes back (its skip reason is then counted by the caller)."""
    if not traces:
        return None
    pool = [t for t in traces if usable(t)] or traces
    return min(pool, key=lambda t: len(t["token_ids"]))  # min keeps the first of equals
