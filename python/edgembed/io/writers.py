"""Vectors out: ``.npy``, ``.jsonl`` or ``.parquet`` files, or stdout, written as they come.

A file is written under a temporary name beside it and renamed into place by ``finish``, so
its folder is checked for writability before any work and it is never left half written
(``abort`` removes the temporary); it gets the permissions a new file gets under the umask (or
keeps those of the file it replaces). A symlink is followed: the file it names is replaced and
the link stays. A FIFO or a device (``/dev/stdout``, ``/dev/null``) is written through, like
stdout, never replaced. ``.npy`` reserves its header and fills it in at the end, so
rows stream to the disk; on stdout, which cannot seek back, its rows are kept until the end.
Without a path, each vector is printed as one JSON array per line.

    jsonl    {"id": …, "embedding": [...]} per line ("id" only with ids)
    parquet  columns id (the input's arrow type, else string) and embedding (fixed-size list)

Sparse vectors (``sparse=True``, a SPLADE model's ``SparseEmbedding`` rows, ``write_sparse``)
go to jsonl or parquet as their nonzero entries:

    jsonl    {"id": …, "indices": [...], "values": [...]} per line (on stdout without -o too)
    parquet  columns id, indices (list<int32>) and values (list<float32>)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from ..errors import InputError
from .formats import output_format, pyarrow_parquet
from .storage import is_special, new_file_mode, output_target

__all__ = ["STDOUT", "VectorWriter", "row_json"]

STDOUT = "-"
_NPY_HEADER = 128  # bytes reserved for the .npy header: magic, version, length, dict


def row_json(row: npt.NDArray[Any]) -> str:
    """One vector as a JSON array (integers for integer precisions)."""
    return "[" + ",".join(map(str, row.tolist() if row.dtype.kind in "iu" else row)) + "]"


class VectorWriter:
    """Where vectors go (see the module docstring): ``path`` a local file, ``"-"`` for stdout
    (jsonl unless ``fmt`` says otherwise), or None for JSON arrays on stdout."""

    def __init__(self, path: str | None, fmt: str | None, with_ids: bool, *,
                 sparse: bool = False) -> None:
        self.path = path
        self.with_ids = with_ids
        self.sparse = sparse
        self.id_type: Any = None  # set from a parquet input; otherwise ids are strings
        if path not in (None, STDOUT) and Path(path).is_dir():
            raise InputError(f"{path} is a directory; give a file name for -o")
        if path is None:
            self.format = "lines"
        elif path == STDOUT and not fmt:
            self.format = "jsonl"
        else:
            self.format = output_format(path, fmt)
        if sparse and self.format == "npy":
            raise InputError(f"-o {path}: sparse vectors (a SPLADE model's) are written as "
                             ".jsonl or .parquet, not .npy")
        if self.format == "parquet":
            self._pa = pyarrow_parquet("writing parquet")
        self._tmp: Path | None = None
        self._file: IO[bytes] | None = None
        self._stream: IO[bytes] | None = None  # a FIFO or device written through
        self._rows = 0
        self._shape_dtype: tuple[int, np.dtype[Any]] | None = None
        self._buffer: list[npt.NDArray[Any]] = []
        self._writer: Any = None
        self._target: Path | None = None
        if path not in (None, STDOUT):
            # A symlink is followed (the file it names is written, the link stays a link);
            # a FIFO or device is written through, as stdout is (it cannot be renamed into).
            target = Path(output_target(path))
            self._target = target
            if is_special(target):
                try:
                    self._stream = open(target, "wb")  # noqa: SIM115 - closed in finish/abort
                except OSError as exc:
                    raise OSError(exc.errno, f"cannot write there ({exc.strerror})",
                                  path) from None
                return
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                           dir=target.parent)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot write there ({exc.strerror})", path) from None
            self._tmp = Path(tmp)
            self._file = os.fdopen(fd, "wb")
            if self.format == "npy":
                self._file.write(b"\0" * _NPY_HEADER)  # the header is written at the end

    @property
    def _fh(self) -> IO[bytes]:
        if self._file is not None:
            return self._file
        return self._out

    @property
    def _out(self) -> IO[bytes]:
        """The stream of a streamed output: the FIFO or device, or stdout."""
        if self._stream is not None:
            return self._stream
        sys.stdout.flush()
        return sys.stdout.buffer

    def write(self, vectors: npt.NDArray[Any], ids: Sequence[Any]) -> None:
        """Append rows of vectors (and their ids, one per row; ignored without ids)."""
        if self._shape_dtype is None:
            self._shape_dtype = (int(vectors.shape[1]), vectors.dtype)
        if self.format == "lines":
            self._fh.write("".join(row_json(r) + "\n" for r in vectors).encode())
            self._fh.flush()
        elif self.format == "jsonl":
            out = []
            for r, rid in zip(vectors, ids, strict=True):
                head = f'{{"id": {json.dumps(rid, default=str)}, ' if self.with_ids else "{"
                out.append(f'{head}"embedding": {row_json(r)}}}\n')
            self._fh.write("".join(out).encode())
        elif self.format == "npy":
            if self._tmp is None:  # stdout cannot seek back to the header: keep rows
                self._buffer.append(vectors)
            else:
                self._fh.write(np.ascontiguousarray(vectors).tobytes())
        else:
            self._write_parquet(vectors, ids)
        self._rows += len(vectors)

    def write_sparse(self, vectors: Sequence[Any], ids: Sequence[Any]) -> None:
        """Append sparse vectors (``SparseEmbedding``: indices, values) and their ids."""
        if self.format in ("lines", "jsonl"):
            out = []
            for v, rid in zip(vectors, ids, strict=True):
                head = (f'{{"id": {json.dumps(rid, default=str)}, '
                        if self.with_ids and self.format == "jsonl" else "{")
                out.append(f'{head}"indices": {row_json(np.asarray(v.indices))}, '
                           f'"values": {row_json(np.asarray(v.values))}}}\n')
            self._fh.write("".join(out).encode())
            if self.format == "lines":
                self._fh.flush()
        else:
            self._write_parquet_table(self._sparse_table(vectors, ids))
        self._rows += len(vectors)

    def _sparse_table(self, vectors: Sequence[Any], ids: Sequence[Any]) -> Any:
        import pyarrow as pa

        columns = {"indices": pa.array([np.asarray(v.indices, np.int32) for v in vectors],
                                       type=pa.list_(pa.int32())),
                   "values": pa.array([np.asarray(v.values, np.float32) for v in vectors],
                                      type=pa.list_(pa.float32()))}
        if self.with_ids:
            values = list(ids) if self.id_type is not None else [_id_text(i) for i in ids]
            columns = {"id": pa.array(values, type=self.id_type or pa.string()), **columns}
        return pa.table(columns)

    def _table(self, vectors: npt.NDArray[Any], ids: Sequence[Any]) -> Any:
        import pyarrow as pa

        dim = int(vectors.shape[1])
        flat = pa.array(np.ascontiguousarray(vectors).reshape(-1))
        columns = {"embedding": pa.FixedSizeListArray.from_arrays(flat, dim)}
        if self.with_ids:
            values = list(ids) if self.id_type is not None else [_id_text(i) for i in ids]
            columns = {"id": pa.array(values, type=self.id_type or pa.string()), **columns}
        return pa.table(columns)

    def _write_parquet(self, vectors: npt.NDArray[Any], ids: Sequence[Any]) -> None:
        self._write_parquet_table(self._table(vectors, ids))

    def _write_parquet_table(self, table: Any) -> None:
        if self._writer is None:
            sink: Any = str(self._tmp) if self._tmp is not None else io.BytesIO()
            self._sink = sink
            self._writer = self._pa.ParquetWriter(sink, table.schema)
        self._writer.write_table(table)

    def finish(self, dim: int, dtype: np.dtype[Any]) -> None:
        """Complete the output (an empty input still gives a valid, empty file)."""
        dim, dtype = self._shape_dtype or (dim, dtype)
        if self.format == "parquet":
            if self._writer is None and self.sparse:
                self._write_parquet_table(self._sparse_table([], []))
            elif self._writer is None:
                self._write_parquet(np.zeros((0, dim), dtype), [])
            self._writer.close()
            if self._tmp is None:
                self._out.write(self._sink.getvalue())
        elif self.format == "npy":
            header = _npy_header(dtype, (self._rows, dim))
            if self._tmp is None:
                rows = (np.concatenate(self._buffer) if self._buffer
                        else np.zeros((0, dim), dtype))
                self._out.write(header + np.ascontiguousarray(rows).tobytes())
            else:
                self._fh.seek(0)
                self._fh.write(header)
        self._fh.flush()
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        if self._tmp is not None:
            self._fh.close()
            assert self._target is not None
            os.chmod(self._tmp, new_file_mode(self._target))  # mkstemp made it 0600
            os.replace(self._tmp, self._target)
            self._tmp = None

    def abort(self) -> None:
        """Remove the temporary file (the target is left as it was)."""
        if self._writer is not None and self._tmp is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        if self._stream is not None:
            with contextlib.suppress(OSError):
                self._stream.close()
            self._stream = None
        if self._tmp is not None:
            self._fh.close()
            self._tmp.unlink(missing_ok=True)
            self._tmp = None


def _id_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _npy_header(dtype: np.dtype[Any], shape: tuple[int, int]) -> bytes:
    """A version 1.0 .npy header padded to exactly _NPY_HEADER bytes."""
    text = (f"{{'descr': {np.lib.format.dtype_to_descr(dtype)!r}, 'fortran_order': False, "
            f"'shape': {shape!r}, }}")
    body = text.ljust(_NPY_HEADER - 10 - 1) + "\n"
    head = b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")
    assert len(head) == _NPY_HEADER
    return head

