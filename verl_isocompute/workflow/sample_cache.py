"""Curation's per-problem sample cache (``samples.jsonl``, ``curation.json``, with ``--pass-k`` ``rejection.jsonl``,
with ``--keep-correct`` ``traces.jsonl.gz``) and what to sample next from it: curation's k, then the rejection
rounds of pass@K. Appended as problems finish, so an interrupted curation resumes where it stopped.

Each line is one **outcome**: k samples of one problem (a rejection round's, a prefix-search rung's),
scored, ``{"id", "k", "correct", "response_tokens", "truncated", ...}``, as
:class:`verl_isocompute.workflow.rollouts.KSampler` returns it ("records" are only the paper's
record-breaking points, in the fit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from verl_isocompute import atomic
from verl_isocompute.errors import CurateError
from verl_isocompute.jsonl import JsonlAppender, JsonlError, read_jsonl

SAMPLES_FILE = "samples.jsonl"
SETTINGS_FILE = "curation.json"


class _Appended(JsonlAppender):
    """A cache file of JSON lines appended one outcome at a time (:mod:`verl_isocompute.jsonl`: a last line
    cut by an interruption is skipped and reported, any other bad line is an error naming it)."""

    def lines(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        try:
            return read_jsonl(self.path).dicts()
        except JsonlError as exc:
            raise CurateError(f"{exc}; or rerun with --restart to discard the cache in {self.path.parent}") from None


class SampleCache:
    """``samples.jsonl`` (one outcome per sampled problem: its first k samples) and ``curation.json`` (the
    settings it holds); with ``--pass-k``, ``rejection.jsonl`` (one outcome per rejection round of a problem);
    with ``--keep-correct``, ``traces.jsonl.gz`` (the correct responses, :mod:`verl_isocompute.guided.traces`).

    Outcomes are appended as problems (rounds) finish; a line cut by an interruption is skipped (and reported)
    on reading, any other bad line is an error naming it.
    The prefix search keeps its per-rung outcomes the same way under its own file names.
    """

    def __init__(self, out_dir: Path, settings: dict[str, Any], restart: bool = False,
                 samples_file: str = SAMPLES_FILE, settings_file: str = SETTINGS_FILE) -> None:
        from verl_isocompute.guided.traces import REJECTION_FILE, TRACES_FILE

        self.path = out_dir / samples_file
        self.settings_path = out_dir / settings_file
        out_dir.mkdir(parents=True, exist_ok=True)
        if restart:
            # curation's rejection rounds and traces go with its samples (not with another tool's cache)
            for name in (samples_file, *((REJECTION_FILE, TRACES_FILE) if samples_file == SAMPLES_FILE else ())):
                (out_dir / name).unlink(missing_ok=True)
        if self.settings_path.is_file() and self.path.is_file():
            old = json.loads(self.settings_path.read_text())
            changed = {k: (old.get(k), v) for k, v in settings.items() if old.get(k) != v}
            if changed:
                what = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
                raise CurateError(
                    f"{out_dir} holds samples taken with other settings ({what}); use another --out, "
                    "or --restart to discard them"
                )
        atomic.write_text(self.settings_path, json.dumps(settings, indent=2) + "\n")
        self.samples = _Appended(self.path)
        self.rounds = _Appended(out_dir / REJECTION_FILE)
        self.traces_path = out_dir / TRACES_FILE
        self._traces = None

    def outcomes(self) -> list[dict[str, Any]]:
        """Every complete outcome, in the order written."""
        return self.samples.lines()

    def load(self) -> dict[str, dict[str, Any]]:
        """The newest outcome of each problem (a problem re-sampled with --resample-untraced has two lines)."""
        return {outcome["id"]: outcome for outcome in self.samples.lines()}

    def load_rounds(self) -> dict[str, list[dict[str, Any]]]:
        """Each problem's rejection rounds, in order."""
        out: dict[str, list[dict[str, Any]]] = {}
        for outcome in self.rounds.lines():
            out.setdefault(outcome["id"], []).append(outcome)
        return out

    def append(self, outcome: dict[str, Any]) -> None:
        self.samples.append(outcome)

    def append_round(self, outcome: dict[str, Any]) -> None:
        self.rounds.append(outcome)

    def keep_traces(self) -> None:
        """Open ``traces.jsonl.gz`` for appending (created now, so an empty one says: kept, none correct yet)."""
        from verl_isocompute.guided.traces import TraceWriter

        if self._traces is None:
            self._traces = TraceWriter(self.traces_path)

    def append_traces(self, lines: list[dict[str, Any]]) -> None:
        self.keep_traces()
        self._traces.write(lines)

    def spend(self) -> dict[str, Any]:
        """Rollouts and tokens of every sampling in the cache per problem, recomputed from its lines (a rerun never
        adds twice): curation = the first k of each problem (also the k of an outcome later replaced), rejection =
        its rounds."""
        from verl_isocompute.guided.spend import CURATION, REJECTION_SAMPLING, per_problem

        return {CURATION: per_problem(self.samples.lines()), REJECTION_SAMPLING: per_problem(self.rounds.lines())}

    def close(self) -> None:
        self.samples.close()
        self.rounds.close()
        if self._traces is not None:
            self._traces.close()
            self._traces = None


def to_resample(outcomes: dict[str, dict[str, Any]], problem_ids: Iterable[str], out: Path, keep_correct: bool,
                resample_untraced: bool) -> set[str]:
    """Cached problems to sample again: with --keep-correct, those with a correct sample whose responses were
    not kept (sampled without the flag). Never mixed silently: without --resample-untraced they are an error
    naming the fix. (A cached problem with no correct sample has nothing to keep and stays as it is.)"""
    if not keep_correct:
        return set()
    stale = {pid for pid in problem_ids if pid in outcomes and outcomes[pid]["correct"] > 0
             and not outcomes[pid].get("traces_kept")}
    if stale and not resample_untraced:
        raise CurateError(
            f"{out} holds {len(stale)} problems with correct samples taken without --keep-correct (their responses "
            "are gone): add --resample-untraced to sample them again (their avg@k is measured anew), or use "
            "another --out, or --restart"
        )
    return stale


def progress_of(outcome: dict[str, Any] | None, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A problem's sampling so far: curated (has its first k), samples taken, correct found, rejection rounds done."""
    if outcome is None:
        return {"curated": False, "taken": 0, "found": 0, "rounds": 0}
    return {"curated": True, "taken": int(outcome["k"]) + sum(int(r["k"]) for r in rounds),
            "found": int(outcome["correct"]) + sum(int(r["correct"]) for r in rounds), "rounds": len(rounds)}


def next_round(state: dict[str, Any], k: int, pass_k: int | None) -> tuple[int, int]:
    """(round, samples) a problem needs next: round 0 = curation's k; then the rejection rounds of
    :func:`verl_isocompute.guided.traces.rejection_round`; samples 0 when it needs nothing."""
    from verl_isocompute.guided.traces import rejection_round

    if not state["curated"]:
        return 0, k
    return state["rounds"] + 1, rejection_round(k, pass_k, state["taken"], state["found"])


def trace_counts(outcomes: dict[str, dict[str, Any]], rounds: dict[str, list[dict[str, Any]]],
                 traces: list[dict[str, Any]], pass_k: int | None) -> dict[str, Any]:
    """What the report says about traces and rejection sampling (all recomputed from the cache files)."""
    have = {t["id"] for t in traces}
    found = {pid for pid, r in outcomes.items() if r["correct"] > 0} | {pid for pid, rs in rounds.items() if any(r["correct"] for r in rs)}
    rejected = [r for rs in rounds.values() for r in rs]
    return {
        "pass_k": pass_k, "traces": len(traces), "problems_with_trace": len(have),
        "problems_correct_without_trace": len(found - have),
        "rejection": {"problems": len(rounds), "rounds": len(rejected), "samples": sum(int(r["k"]) for r in rejected),
                      "problems_solved": sum(1 for rs in rounds.values() if any(r["correct"] for r in rs))},
    }
