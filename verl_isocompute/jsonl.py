"""JSON-lines files: one reader, one appender, one policy for a damaged file.

Every JSON-lines file the package writes is appended one line at a time while a long job runs (the run
log, verl's file logger, curation's sample cache and rejection rounds, the prefix search's rung outcomes,
the gzip traces file), so a kill can leave exactly one kind of damage: the last line cut short. The
policy, the same for every such file:

- a last line that is not valid JSON but begins as every line of these files does (``{``, or ``[``:
  :func:`begun_as_json`) is a write cut by a kill: it is skipped, and reported in one line
  (:attr:`JsonlFile.note`; :func:`read_jsonl` prints it unless the caller reports it itself);
- any other line that is not valid JSON, the last one included when it could not be the start of a line
  (text, a file that is one line of something else), is damage nobody can explain: one error naming the
  file and the line (:class:`JsonlError`), never a silent skip, so no line is lost without a word;
- blank lines are ignored and a UTF-8 byte-order mark is accepted; a ``.gz`` file is a gzip stream of
  such lines, and a stream cut by a kill (no end marker) is read up to where it stops.

:class:`JsonlAppender` writes one line per value, flushed as it goes. Before its first line it repairs a
file whose last line was cut (rewritten atomically from its complete lines; for gzip, also a stream without
its end marker), so the new line never lands after a broken one, where it would become a bad middle line.

Pure standard library (and orjson, verl's JSON library, to parse faster when it is there).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import sys
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_isocompute import atomic
from verl_isocompute.errors import IsoComputeError

try:  # verl's file logger writes with orjson, so it comes with verl; plain json does the same, slower
    import orjson

    _LOADS = (orjson.loads, json.loads)
except ImportError:  # pragma: no cover
    _LOADS = (json.loads,)


class JsonlError(IsoComputeError, ValueError):
    """A JSON-lines file that cannot be read; the message names the file (and the line) and the fix."""


@dataclass
class JsonlFile:
    """The objects of a JSON-lines file with their 1-based line numbers."""

    path: Path
    objects: list[tuple[int, Any]] = field(default_factory=list)
    cut_last_line: bool = False  # the last line was not valid JSON (a write cut short by a kill): skipped
    cut_line_no: int | None = None  # its line number
    cut_stream: bool = False  # a gzip stream without its end marker (a kill before the writer closed it)
    lines: list[str] = field(default_factory=list)  # the non-blank raw lines, for readers that scan text

    @property
    def values(self) -> list[Any]:
        """The parsed values, in file order."""
        return [obj for _, obj in self.objects]

    def dicts(self) -> list[dict[str, Any]]:
        """The values, each a JSON object: any other value is an error naming its line."""
        for no, obj in self.objects:
            if not isinstance(obj, dict):
                raise JsonlError(f"{self.path}, line {no}: expected a JSON object, got {type(obj).__name__}")
        return self.values

    @property
    def note(self) -> str | None:
        """One line reporting the skipped cut last line, or None when the file is whole."""
        if not self.cut_last_line:
            return None
        return (f"{self.path}, line {self.cut_line_no}: the last line is cut short (a write interrupted by a kill); "
                "skipped, the lines before it are read")


def _gunzip(path: Path) -> tuple[bytes, bool]:
    """The decompressed bytes of a gzip file and whether its stream ended cleanly."""
    out = bytearray()
    try:
        with gzip.open(path, "rb") as handle:
            while chunk := handle.read1(1 << 20):  # read1: what one raw read gives, kept if the next one fails
                out += chunk
    except (EOFError, zlib.error):  # a stream without its end marker: keep what was read so far
        return bytes(out), False
    except gzip.BadGzipFile as exc:
        raise JsonlError(f"{path}: not a gzip file ({exc})") from None
    return bytes(out), True


def read_jsonl(path: str | os.PathLike, report: bool = True) -> JsonlFile:
    """Read a JSON-lines file (gzip when its name ends in ``.gz``) under the module's policy.

    ``report``: print :attr:`JsonlFile.note` to stderr when the last line is cut (pass False when the caller
    reports it its own way, or reads a file another process is still writing). Raises :class:`JsonlError`.
    """
    path = Path(path)
    if not path.is_file():
        raise JsonlError(f"{path}: not a regular file")
    try:
        if path.name.endswith(".gz"):
            data, clean = _gunzip(path)
        else:
            data, clean = path.read_bytes(), True
    except OSError as exc:
        raise JsonlError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    text = data.decode("utf-8-sig", errors="replace")
    lines = text.splitlines()
    numbers: Sequence[int] = range(1, len(lines) + 1)
    if not all(map(str.strip, lines)):  # drop blank lines (the usual file has none: no per-line work then)
        numbers = [no for no, line in zip(numbers, lines) if line.strip()]
        lines = [line for line in lines if line.strip()]
    result = JsonlFile(path, lines=lines, cut_stream=not clean)
    whole = "[" + ",".join(lines) + "]"
    # One parse for the whole file, by orjson when it can (4x faster than json on a big sweep's logs);
    # json's own parse for what orjson refuses but json reads (NaN and Infinity literals, which json.dumps
    # writes; lone surrogates); line by line only to find what is wrong. (orjson reads an integer past
    # 64 bits as a float, json as an int: no file of ours has one.)
    for loads in _LOADS:
        try:
            values = loads(whole)
        except ValueError:  # orjson.JSONDecodeError is a ValueError too
            continue
        if len(values) != len(lines):  # a line holding two values ("{...}, {...}") parses as two: find it below
            break
        result.objects = list(zip(numbers, values))
        return result
    for i, (no, line) in enumerate(zip(numbers, lines)):
        try:
            result.objects.append((no, json.loads(line)))  # json.loads refuses two values on one line
        except ValueError:
            if i == len(lines) - 1 and begun_as_json(line):
                result.cut_last_line, result.cut_line_no = True, no
                continue
            raise JsonlError(f"{path}, line {no}: not valid JSON; fix or remove that line") from None
    if report and result.cut_last_line:
        _report(result)
    return result


def begun_as_json(line: str) -> bool:
    """Can ``line``, not valid JSON, be one of these files' lines cut short by a kill? Every writer of them
    (ours, verl's file logger, wandb's old history file) writes one JSON object, or array, per line, so a cut
    line begins with ``{`` or ``[``; anything else was never such a line."""
    return line.lstrip().startswith(("{", "["))


_REPORTED: set[tuple[str, int | None, int]] = set()


def _report(jsonl: JsonlFile) -> None:
    """Print the cut-line note once per file and damage (a file read several times is reported once)."""
    key = (str(jsonl.path.absolute()), jsonl.cut_line_no, len(jsonl.lines))
    if key not in _REPORTED:
        _REPORTED.add(key)
        print(f"note: {jsonl.note}", file=sys.stderr, flush=True)


def plain(value: Any, nan_to_none: bool = False) -> Any:
    """``value`` as JSON-able data, the package's one conversion: dicts (keys as strings), lists and tuples
    walked recursively; numpy / torch / pandas scalars and arrays (anything with ``.tolist()``) as Python
    numbers and lists (parquet rows come back as numpy arrays and dicts). ``nan_to_none``: a non-finite
    float becomes None (null), for files read by strict JSON readers; otherwise it is kept (``json.dumps``
    writes NaN). Needs no numpy: anything else is returned as it is."""
    if isinstance(value, dict):
        return {str(k): plain(v, nan_to_none) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, nan_to_none) for v in value]
    if hasattr(value, "tolist"):
        return plain(value.tolist(), nan_to_none)  # arrays of objects (dicts of arrays) are walked on
    if nan_to_none and isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _default(obj: Any) -> Any:
    """``json.dumps``' hook for what it cannot write itself (the same rule as :func:`plain`, only where
    needed: a run log's lines are written while training runs)."""
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def dumps(obj: Any) -> str:
    """One JSON line (no newline); numpy or torch values are written as plain numbers and lists."""
    return json.dumps(obj, default=_default)


def write_jsonl(path: str | os.PathLike, values: Iterable[Any]) -> Path:
    """Write a whole JSON-lines file atomically (gzip when its name ends in ``.gz``)."""
    data = "".join(dumps(value) + "\n" for value in values).encode("utf-8")
    return atomic.write_bytes(path, gzip.compress(data) if Path(path).name.endswith(".gz") else data)


def _needs_repair(path: Path) -> bool:
    """Whether appending to ``path`` would land after a broken end: a plain file whose last byte is not a
    newline (one byte read, not the whole file), or any gzip file whose stream or last line is cut."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    if path.name.endswith(".gz"):
        read = read_jsonl(path, report=False)
        return read.cut_stream or read.cut_last_line
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) != b"\n"


class JsonlAppender:
    """Appends values to a JSON-lines file (gzip when its name ends in ``.gz``), one line each, flushed.

    Opened at the first value: a job with nothing to add leaves the file as it was. A file whose end was
    cut by a kill is first rewritten from its complete lines (the cut line is reported once, by the
    reader). Use as a context manager, or call :meth:`close` (it writes gzip's end marker and syncs).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._file: Any = None

    def append(self, *values: Any) -> None:
        if not values:
            return
        if self._file is None:
            self._open()
        self._file.write("".join(dumps(value) + "\n" for value in values))
        self._file.flush()  # gzip: a sync flush, so everything written so far is readable after a kill

    def _open(self) -> None:
        if _needs_repair(self.path):
            write_jsonl(self.path, read_jsonl(self.path).values)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # gzip: a new member after the complete ones (gzip readers read all members as one stream)
        opener = gzip.open if self.path.name.endswith(".gz") else open
        self._file = opener(self.path, "at", encoding="utf-8", newline="\n")  # noqa: SIM115 -- open while the job runs

    def close(self) -> None:
        if self._file is None:
            return
        self._file.close()  # gzip: writes the member's end marker
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)  # on disk before the job reports it done
        finally:
            os.close(fd)
        self._file = None

    def __enter__(self) -> "JsonlAppender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
