"""Bad input to `isocompute guide` and `isocompute prefix-search`: one clear line, exit 2, nothing written.

Each row is (the command's arguments, written into a fresh directory) -> (exit status, a piece of the one
error line). `guide` used to exit 0 having written no guided row when no solution was usable (a missing
column, a typo in --solution-key), which the search refused; a traces directory whose records lack keys and
an -o naming a directory ended in tracebacks. Run in-process through the CLI's ``main``.
"""

from __future__ import annotations

import gzip
import json

import pytest

from verl_isocompute.commands.cli import main
from verl_isocompute.data.worked import worked_arithmetic


def _write(root) -> None:
    """train.parquet (worked problems), bare.parquet (no solution column), bad_traces/ (records without keys)."""
    frame = worked_arithmetic(3, terms=5)
    frame.to_parquet(root / "train.parquet")
    frame.assign(extra_info=[{k: v for k, v in i.items() if k != "solution"} for i in frame["extra_info"]]).to_parquet(root / "bare.parquet")
    (root / "bad_traces").mkdir()
    with gzip.open(root / "bad_traces" / "traces.jsonl.gz", "wt") as handle:
        handle.write(json.dumps({"stage": "curation", "text": "1 + 2 = 3\n"}) + "\n")
    (root / "a_dir").mkdir()


ROWS = [
    # (id, arguments, exit status, piece of the message)
    ("guide: no solution column", ["guide", "bare.parquet", "-o", "g.parquet"], 2,
     "no problem has a usable prefix at solution_key=extra_info.solution (3 unguided + 0 guided rows"),
    ("guide: solution-key typo", ["guide", "train.parquet", "-o", "g.parquet", "--solution-key", "extra_info.soluton"], 2,
     "point solution_key (--solution-key) at the oracle solution column"),
    ("guide: traces without keys", ["guide", "train.parquet", "-o", "g.parquet", "--traces", "bad_traces"], 2,
     "traces.jsonl.gz: record 1 is not a trace (lacks ['id', 'token_ids'])"),
    ("guide: -o a directory", ["guide", "train.parquet", "-o", "a_dir"], 2, "-o a_dir is a directory; give the parquet file"),
    ("guide: copies 0", ["guide", "train.parquet", "-o", "g.parquet", "--copies", "0"], 2, "copies=0"),
    ("guide: token cut without traces", ["guide", "train.parquet", "-o", "g.parquet", "--cut", "tokens"], 2,
     "cut=tokens cuts the kept token ids of traces: give traces"),
    ("search: no solution column", ["prefix-search", "bare.parquet", "-o", "out"], 2,
     "no problem has a usable prefix at --solution-key extra_info.solution ({'missing': 3})"),
    ("search: solution-key typo", ["prefix-search", "train.parquet", "-o", "out", "--solution-key", "extra_info.soluton"], 2,
     "point --solution-key at the oracle solution column"),
    ("search: traces without keys", ["prefix-search", "train.parquet", "-o", "out", "--traces", "bad_traces"], 2,
     "record 1 is not a trace"),
    ("search: traces missing", ["prefix-search", "train.parquet", "-o", "out", "--traces", "a_dir"], 2,
     "--traces a_dir: no traces.jsonl.gz there"),
]


@pytest.mark.parametrize(("args", "status", "message"), [pytest.param(*row[1:], id=row[0]) for row in ROWS])
def test_bad_guided_input_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, args, status, message):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path)
    rc = main(args)
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == status and message in lines[-1], err
    assert lines[-1].startswith(f"isocompute {args[0]}: error: ") and "Traceback" not in err
    assert not (tmp_path / "g.parquet").exists() and not (tmp_path / "out" / "rungs.jsonl").exists()
