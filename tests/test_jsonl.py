"""One JSON-lines policy for every file the package appends to (verl_isocompute.jsonl): table-driven.

Each reader row is one of the package's readers of an appended JSON-lines file: the run log
(`runlog.read_run_log`), curation's sample cache (`SampleCache.outcomes`, also the prefix search's rung
outcomes) and the gzip traces file (`traces.read_traces`). Each damage row is one kind of file content. The
policy, the same for every reader: a last line cut short by a kill is skipped and reported in one line
naming the file and the line; any other bad line is one error naming the file and the line; blank lines
and a byte-order mark are fine. Then the appenders: after a kill, appending never leaves a bad middle line.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from verl_isocompute import errors, jsonl, runlog
from verl_isocompute.guided import traces as T
from verl_isocompute.workflow import sample_cache as sc


@dataclass(frozen=True)
class Reader:
    name: str
    file: str  # the file's name in its directory
    read: Callable[[Path], list[dict]]  # the package's reader, given the directory
    error: type  # what it raises for a bad file
    append: Callable[[Path, list[dict]], None]  # the package's appender (what a resumed job does)


def _records(*ids: int) -> list[dict]:
    return [{"id": f"p{i}", "step": i, "k": 4} for i in ids]


def _run_log_rows(folder: Path) -> list[dict]:
    return [row for _, row in runlog.read_run_log(folder / runlog.RUN_LOG).rows]


def _run_log_append(folder: Path, rows: list[dict]) -> None:
    for row in rows:
        runlog.RunLogWriter(folder)._append(row)  # the writer's append, without the row-key check


def _cache(folder: Path) -> sc.SampleCache:
    return sc.SampleCache(folder, {"k": 4})


def _cache_append(folder: Path, rows: list[dict]) -> None:
    cache = _cache(folder)
    for row in rows:
        cache.append(row)
    cache.close()


def _traces_append(folder: Path, rows: list[dict]) -> None:
    writer = T.TraceWriter(folder / T.TRACES_FILE)
    writer.write(rows)
    writer.close()


READERS = [
    Reader("run log", runlog.RUN_LOG, _run_log_rows, runlog.RunLogError, _run_log_append),
    Reader("curation cache", sc.SAMPLES_FILE, lambda folder: _cache(folder).outcomes(), errors.CurateError, _cache_append),
    Reader("traces", T.TRACES_FILE, T.read_traces, T.TracesError, _traces_append),
]


def _write(folder: Path, reader: Reader, text: bytes, cut_stream: bool = False) -> Path:
    path = folder / reader.file
    if reader.file.endswith(".gz"):
        data = gzip.compress(text)
        text = data[:-8] if cut_stream else data  # cut_stream: the 8-byte trailer never written
    path.write_bytes(text)
    return path


def _lines(rows: list[Any]) -> bytes:
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


WHOLE = _lines(_records(1, 2, 3))
CUT = _lines(_records(1, 2)) + b'{"id": "p3", "st'  # a kill in the middle of the third line
# (name, file content, records read or None for an error, piece of the error / note, cut_stream)
DAMAGE = [
    ("whole file", WHOLE, _records(1, 2, 3), None),
    ("blank lines and a byte-order mark", b"\xef\xbb\xbf\n" + WHOLE.replace(b"\n", b"\n\n"), _records(1, 2, 3), None),
    ("last line cut by a kill", CUT, _records(1, 2), "line 3: the last line is cut short"),
    ("bad middle line", _lines(_records(1)) + b'{"id": "p2", "st\n' + _lines(_records(3)), None, "line 2: not valid JSON"),
    ("two values on a middle line", _lines(_records(1)) + b'{"id": "p2"}, {"id": "p9"}\n' + _lines(_records(3)), None,
     "line 2: not valid JSON"),
    ("a middle line that is not an object", _lines(_records(1)) + b"[1, 2]\n" + _lines(_records(3)), None,
     "line 2: expected a JSON object, got list"),
    # issue 46: what no writer of these files could have begun is damage, not a torn tail (it was skipped as "cut")
    ("a file that is one line of text", b"this is not a log\n", None, "line 1: not valid JSON"),
    ("a last line of text", _lines(_records(1, 2)) + b"garbage\n", None, "line 3: not valid JSON"),
    ("a file whose one line is cut by a kill", b'{"id": "p1", "st', [], "line 1: the last line is cut short"),
]


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
@pytest.mark.parametrize(("text", "records", "message"), [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_every_reader_follows_the_one_policy(tmp_path, capsys, reader, text, records, message):
    path = _write(tmp_path, reader, text)
    if records is None:
        with pytest.raises(reader.error) as info:
            reader.read(tmp_path)
        shown = str(info.value)
        assert "\n" not in shown and f"{path}, {message}" in shown  # one line naming file and line
        return
    assert [{k: r[k] for k in ("id", "step", "k")} for r in reader.read(tmp_path)] == records
    err = capsys.readouterr().err
    if message is None:
        assert err == ""
    else:  # reported once, however often the file is read
        reader.read(tmp_path)
        err += capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"note: {path}, {message}"), err


def test_a_gzip_stream_cut_by_a_kill_is_read_up_to_where_it_stops(tmp_path):
    reader = READERS[2]
    _write(tmp_path, reader, WHOLE, cut_stream=True)
    parsed = jsonl.read_jsonl(tmp_path / reader.file)
    assert parsed.cut_stream and not parsed.cut_last_line and parsed.values == _records(1, 2, 3)


@pytest.mark.parametrize("reader", READERS, ids=[r.name for r in READERS])
@pytest.mark.parametrize("cut_stream", [False, True], ids=["cut line", "cut gzip stream"])
def test_appending_after_a_kill_leaves_no_bad_middle_line(tmp_path, capsys, reader, cut_stream):
    if cut_stream and not reader.file.endswith(".gz"):
        pytest.skip("only gzip has a stream to cut")
    _write(tmp_path, reader, CUT, cut_stream=cut_stream)
    reader.append(tmp_path, _records(4))
    assert [r["id"] for r in reader.read(tmp_path)] == ["p1", "p2", "p4"]  # the cut p3 is gone, nothing else
    assert jsonl.read_jsonl(tmp_path / reader.file, report=False).cut_last_line is False
    reader.append(tmp_path, _records(5))  # and the repaired file takes more
    assert [r["id"] for r in reader.read(tmp_path)] == ["p1", "p2", "p4", "p5"]
    assert capsys.readouterr().err.count("line 3: the last line is cut short") == 1


def test_an_unreadable_file_is_named_as_such(tmp_path):
    with pytest.raises(jsonl.JsonlError, match="not a regular file"):
        jsonl.read_jsonl(tmp_path)
    (tmp_path / "x.jsonl.gz").write_bytes(b"plain text")
    with pytest.raises(jsonl.JsonlError, match=r"x.jsonl.gz: not a gzip file"):
        jsonl.read_jsonl(tmp_path / "x.jsonl.gz")
    link = tmp_path / "unreadable.jsonl"
    link.symlink_to("/proc/self/mem")  # a regular file whose read fails (EIO), for root too
    with pytest.raises(jsonl.JsonlError, match=r"unreadable.jsonl: cannot read it \(Input/output error\)"):
        jsonl.read_jsonl(link)


def test_the_appender_writes_numpy_values_as_numbers_and_opens_only_to_write(tmp_path):
    np = pytest.importorskip("numpy")
    path = tmp_path / "a.jsonl"
    with jsonl.JsonlAppender(path) as out:
        out.append()
    assert not path.exists()  # nothing to add: no file
    with jsonl.JsonlAppender(path) as out:
        out.append({"x": np.float32(0.5), "n": np.int64(3)}, {"v": np.arange(2)})
    assert path.read_text() == '{"x": 0.5, "n": 3}\n{"v": [0, 1]}\n'


def test_plain_is_the_one_conversion_to_json_values():
    """Parquet rows (numpy arrays of dicts of arrays), numpy scalars and tuples become JSON data; NaN stays
    unless ``nan_to_none`` (what compare.json and curve files need, as strict JSON)."""
    np = pytest.importorskip("numpy")
    row = {"prompt": np.array([{"role": "user", "content": np.str_("hi")}], dtype=object),
           1: (np.int64(2), np.float32(0.5), np.bool_(True)), "x": np.float64("nan"), "y": float("inf")}
    out = jsonl.plain(row)
    assert out["prompt"] == [{"role": "user", "content": "hi"}] and out["1"] == [2, 0.5, True]
    assert [type(v) for v in out["1"]] == [int, float, bool] and out["x"] != out["x"] and out["y"] == float("inf")
    strict = jsonl.plain(row, nan_to_none=True)
    assert strict["x"] is None and strict["y"] is None and strict["1"] == [2, 0.5, True]
    json.dumps(strict, allow_nan=False)  # strict JSON now
    assert jsonl.plain("text") == "text" and jsonl.plain(None) is None
