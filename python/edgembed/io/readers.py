"""Texts in: an input file (or stdin) read lazily as numbered rows, malformed ones included.

A malformed row carries its ``error`` instead of a text: ``embed -i`` stops at the first one
(naming its line), ``embed batch`` records it (with its row and line number) and goes on, so
one broken line does not cost a night's work. A *row* is:

- txt: every line (an empty line is the empty text);
- jsonl: every non-blank line: a JSON string, or an object whose ``--field`` holds the text;
- csv: every record after the header (``--column``);
- parquet: every row (``--column``).

Rows are numbered from 0 in input order, malformed ones included, so chunk boundaries — and
with them checkpoints — do not depend on what the rows contain.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ..errors import InputError
from .formats import input_format, pyarrow_parquet
from .storage import Location

__all__ = ["STDIN", "Row", "RowReader", "TooDeep", "loads", "nonblank_lines", "top_level_string"]

STDIN = "-"
_PARQUET_BATCH = 1024


@dataclass(frozen=True)
class Row:
    """One input row: its text, or why it has none (``error``)."""

    index: int
    text: str | None
    id: Any = None
    error: str | None = None
    line: int | None = None  # 1-based line number, for line-based formats

    def fingerprint(self) -> bytes:
        """The bytes checkpoint digests are computed over (text, id and error)."""
        return json.dumps([self.text, self.id, self.error], default=str,
                          ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"

    @property
    def where(self) -> str:
        """``:LINE`` for line-based formats, else `` row N`` (after the input's name)."""
        return f":{self.line}" if self.line is not None else f": row {self.index}"


class RowReader:
    """Reads one input's rows lazily. Opening checks what can be checked without reading on
    (the file exists; csv header and parquet schema have the columns asked for).

    ``source``: a :class:`Location`, a path or URL, or ``"-"`` for stdin (``location`` is then
    None, and a parquet input is read whole before its first row).
    """

    def __init__(
        self,
        source: Location | str,
        fmt: str | None = None,
        *,
        field: str | None = None,
        column: str | None = None,
        id_column: str | None = None,
        encoding_errors: str = "strict",
    ) -> None:
        location = Location(source) if isinstance(source, str) and source != STDIN else source
        self.location: Location | None = location if isinstance(location, Location) else None
        self.name = "<stdin>" if self.location is None else self.location.text
        self.format = input_format("" if self.location is None else self.location.name, fmt)
        self.field = field or "text"
        self.column = column or "text"
        self.id_column = id_column
        self.encoding_errors = encoding_errors
        self.total_rows: int | None = None
        self.total_bytes = None if self.location is None else self.location.size()
        self.id_type: Any = None  # parquet: the id column's arrow type, kept in the output
        self._fh: IO[bytes] = (sys.stdin.buffer if self.location is None
                               else self.location.open_read())
        self._parquet: Any = None
        self._csv: Any = None
        try:
            if self.format == "parquet":
                self._open_parquet()
            elif self.format == "csv":
                self._open_csv()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.location is not None:  # stdin stays open
            self._fh.close()

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def position(self) -> float | None:
        """Fraction of the file read, for line-based formats whose size is known."""
        if self.total_bytes and self.format != "parquet":
            try:
                return min(1.0, self._fh.tell() / self.total_bytes)
            except (OSError, ValueError):
                return None
        return None

    def rows(self) -> Iterator[Row]:
        """Every row, in order."""
        if self.format == "txt":
            return self._txt()
        if self.format == "jsonl":
            return self._jsonl()
        if self.format == "csv":
            return self._csv_rows()
        return self._parquet_rows()

    def valid_rows(self) -> Iterator[Row]:
        """Every row, in order; the first malformed one raises InputError naming where it is
        (a command stops there, where a job keeps it as a record)."""
        for row in self.rows():
            if row.error is not None:
                raise InputError(f"{self.name}{row.where}: {row.error}")
            yield row

    # -- line formats ----------------------------------------------------------------------------

    def _lines(self) -> Iterator[tuple[int, str | None, str | None]]:
        """(line number, text, error): the text is None when the line is not UTF-8."""
        for n, raw in enumerate(self._fh, 1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield n, raw.decode("utf-8"), None
            except UnicodeDecodeError as exc:
                if self.encoding_errors == "replace":
                    yield n, raw.decode("utf-8", "replace"), None
                else:
                    yield n, None, (f"invalid UTF-8 (byte {exc.start + 1} of the line); "
                                    "--errors replace embeds it with U+FFFD")

    def _txt(self) -> Iterator[Row]:
        for index, (n, line, error) in enumerate(self._lines()):
            text = None if line is None else line.rstrip("\n").removesuffix("\r")
            yield Row(index, text, None, error, n)

    def _jsonl(self) -> Iterator[Row]:
        index = 0
        for n, line, error in self._lines():
            if line is not None and not line.strip():
                continue
            if error is None:
                assert line is not None
                text, rid, error = self._json_row(line)
            else:
                text, rid = None, None
            yield Row(index, text, rid, error, n)
            index += 1

    def _json_row(self, line: str) -> tuple[str | None, Any, str | None]:
        try:
            obj = loads(line)
        except ValueError as exc:
            return None, None, f"not valid JSON ({exc})"
        if isinstance(obj, str) and self.id_column is None:
            return obj, None, None
        if not isinstance(obj, dict):
            return None, None, f"expected a JSON object with a {self.field!r} field"
        rid = None
        if self.id_column is not None:
            if self.id_column not in obj:
                return None, None, f"no id field {self.id_column!r}"
            rid = obj[self.id_column]
        if self.field not in obj:
            return None, rid, (f"no field {self.field!r} (fields: {', '.join(map(str, obj))}); "
                               "choose one with --field")
        value = obj[self.field]
        if not isinstance(value, str):
            return None, rid, f"field {self.field!r} is {_kind(value)}, not a string"
        return value, rid, None

    def _open_csv(self) -> None:
        mode = "replace" if self.encoding_errors == "replace" else "surrogateescape"

        def decoded() -> Iterator[str]:
            for n, raw in enumerate(self._fh, 1):
                if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                yield raw.decode("utf-8", mode)

        self._csv = csv.DictReader(decoded())
        header = self._csv.fieldnames or []
        for name, option in ((self.column, "--column"), (self.id_column, "--id-column")):
            if header and name is not None and name not in header:
                raise InputError(f"{self.name}: no column {name!r} (columns: "
                                 f"{', '.join(header)}); choose one with {option}")

    def _csv_rows(self) -> Iterator[Row]:
        reader = self._csv
        for index, record in enumerate(reader):
            text = record.get(self.column)
            rid = record.get(self.id_column) if self.id_column else None
            error = None
            if text is None:
                error = f"the record has no {self.column!r} value"
            elif _has_surrogates(text) or (isinstance(rid, str) and _has_surrogates(rid)):
                text, rid = None, None
                error = "invalid UTF-8; --errors replace embeds it with U+FFFD"
            yield Row(index, text, rid, error, reader.line_num)

    # -- parquet ---------------------------------------------------------------------------------

    def _open_parquet(self) -> None:
        pq = pyarrow_parquet("reading parquet")
        source: Any = self._fh if self.location is not None else io.BytesIO(self._fh.read())
        try:
            pf = pq.ParquetFile(source)
        except Exception as exc:  # pyarrow raises ArrowInvalid and friends
            raise InputError(f"{self.name} is not a readable parquet file ({exc})") from None
        names = list(pf.schema_arrow.names)
        for name, option in ((self.column, "--column"), (self.id_column, "--id-column")):
            if name is not None and name not in names:
                raise InputError(f"{self.name}: no column {name!r} (columns: "
                                 f"{', '.join(names)}); choose one with {option}")
        if self.id_column is not None:
            self.id_type = pf.schema_arrow.field(self.id_column).type
        self.total_rows = int(pf.metadata.num_rows)
        self._parquet = pf

    def _parquet_rows(self) -> Iterator[Row]:
        index = 0
        for batch in self._parquet.iter_batches(batch_size=_PARQUET_BATCH,
                                                columns=self._columns()):
            rows = self._table_rows(batch, index)
            index += len(rows)
            yield from rows

    def parquet_range(self, start: int, stop: int) -> list[Row]:
        """Rows ``[start, stop)`` of a parquet input, reading only the row groups that hold
        them (how Ray actors read their chunks)."""
        if self._parquet is None:
            raise InputError("row ranges can be read from parquet input only")
        meta = self._parquet.metadata
        out: list[Row] = []
        offset = 0
        for group in range(meta.num_row_groups):
            n = meta.row_group(group).num_rows
            if offset + n > start and offset < stop:
                table = self._parquet.read_row_group(group, columns=self._columns())
                lo, hi = max(start - offset, 0), min(stop - offset, n)
                out += self._table_rows(table.slice(lo, hi - lo), offset + lo)
            offset += n
            if offset >= stop:
                break
        return out

    def _columns(self) -> list[str]:
        return [self.column] if self.id_column is None else [self.column, self.id_column]

    def _table_rows(self, table: Any, first: int) -> list[Row]:
        data = table.to_pydict()
        texts = data[self.column]
        ids = data[self.id_column] if self.id_column is not None else [None] * len(texts)
        out = []
        for i, (text, rid) in enumerate(zip(texts, ids, strict=True)):
            if isinstance(text, str):
                out.append(Row(first + i, text, rid))
            else:
                out.append(Row(first + i, None, rid,
                               f"column {self.column!r} is {_kind(text)}, not a string"))
        return out


class TooDeep(ValueError):
    """A JSON value nests deeper than Python's parser can follow."""


def loads(text: str | bytes) -> Any:
    """``json.loads``, raising ValueError for every kind of bad line: a value nested so deep
    that the parser runs out of recursion (``[[[[…`` 100,000 deep) is TooDeep, not a crash."""
    try:
        return json.loads(text)
    except RecursionError:
        raise TooDeep("the JSON nests too deeply to be read") from None


def top_level_string(raw: bytes, key: str) -> str | None:
    """The string value of ``key`` in the JSON object ``raw`` at its top level, found without
    parsing the nested values (for a line :func:`loads` cannot read); None if absent.

    Scans bytes: strings (with their escapes) are skipped as units, depth counts brackets
    outside strings, and a top-level key followed by a string value is decoded alone.
    """
    depth = 0
    i, n = 0, len(raw)
    pending_key: bytes | None = None
    while i < n:
        c = raw[i]
        if c == 0x22:  # a string: find its end, escapes included
            j = i + 1
            while j < n and raw[j] != 0x22:
                j += 2 if raw[j] == 0x5C else 1
            token = raw[i:j + 1]
            if depth == 1:
                k = j + 1
                while k < n and raw[k] in b" \t\r\n":
                    k += 1
                if k < n and raw[k] == 0x3A:  # ':' follows: a key
                    pending_key = token
                elif pending_key is not None:
                    try:
                        if json.loads(pending_key) == key:
                            value = json.loads(token)
                            return value if isinstance(value, str) else None
                    except ValueError:
                        return None
                    pending_key = None
            i = j + 1
            continue
        if c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
        elif c == 0x2C and depth == 1:
            pending_key = None
        i += 1
    return None


def nonblank_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of every non-blank line of a local file, as bytes."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.strip():
                yield n, raw


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _has_surrogates(text: str) -> bool:
    return any("\udc80" <= c <= "\udcff" for c in text)
