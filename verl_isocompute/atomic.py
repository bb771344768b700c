"""Atomic writes: a reader (or a crash) never sees half a result file.

Every result file of the package (curve.json and the fit's tables, sweep state, curated sets, run-log
rewrites on resume, converted models) is written to a temporary file in the *same directory* and moved
over the target with ``os.replace``, which is atomic on POSIX within one filesystem. On an error the
temporary file is removed and the previous target is left exactly as it was. A result gets the permissions
a new file gets from a plain write (0666 less the umask), so on shared storage the team reads what one
member wrote. Pure standard library.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; on success it replaces ``path``, on error it is removed.

    For writers that want a file name (``DataFrame.to_parquet``, ``Figure.savefig``, a checkpoint)::

        with replacing(out / "difficulty.parquet") as tmp:
            frame.to_parquet(tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_file(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _new_file(path: Path) -> Path:
    """An empty, new temporary file next to ``path`` with the permissions a new file gets from a plain
    write, 0666 less the umask (the kernel applies the umask to ``os.open``'s mode). ``tempfile.mkstemp``
    would make every result 0600, unreadable to the rest of a team on shared storage."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"no free temporary name next to {path}")


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (flushed to disk before the rename)."""
    with replacing(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return Path(path)


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes(path, text.encode("utf-8"))


def write_parquet(path: str | os.PathLike, frame: Any, index: bool = False) -> Path:
    """A pandas DataFrame as parquet (without the index, as verl's readers expect rows)."""
    with replacing(path) as tmp:
        frame.to_parquet(tmp, index=index)
    return Path(path)


def save_figure(path: str | os.PathLike, fig: Any, **savefig_kwargs: Any) -> Path:
    """A matplotlib Figure as an image, in the format of the path's suffix (png by default)."""
    path = Path(path)
    with replacing(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", **savefig_kwargs)
    return path


def write_json(path: str | os.PathLike, data: Any, indent: int | None = 2, **dumps_kwargs: Any) -> Path:
    """Write ``data`` as JSON (with a final newline) to ``path`` atomically."""
    return write_text(path, json.dumps(data, indent=indent, **dumps_kwargs) + "\n")


@contextmanager
def staged_dir(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a hidden staging directory *inside* ``out_dir``; on success move each staged file into place.

    The staging directory lives in ``out_dir`` itself (not its parent), so a writable output directory
    under a read-only parent works. Each file is moved with its own ``os.replace``; on an error nothing
    in ``out_dir`` changes. The staging directory is removed in both cases.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=out_dir))
    try:
        yield staging
        for path in sorted(staging.iterdir()):
            os.replace(path, out_dir / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
