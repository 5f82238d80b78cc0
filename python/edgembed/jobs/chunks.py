"""One chunk of a job: consecutive input rows ─► their vectors, ids and malformed-row records.

Both engines compute chunks with this code (the local engine in the job's process, the Ray
engine in its actors), so a chunk's committed files do not depend on which engine made them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..io.readers import Row
from .checkpoint import JobManifest

if TYPE_CHECKING:
    import numpy.typing as npt

    from ..embedder import Embedder

__all__ = ["Chunk", "chunks_of", "digest_rows", "embed_rows", "error_record"]


@dataclass(frozen=True)
class Chunk:
    """Rows ``[first_row, first_row + len(rows))`` of the input, computed as one unit."""

    number: int
    first_row: int
    rows: list[Row]

    def digest(self) -> str:
        return digest_rows(self.rows)


def digest_rows(rows: Iterable[Row]) -> str:
    h = hashlib.sha256()
    for r in rows:
        h.update(r.fingerprint())
    return h.hexdigest()


def chunks_of(rows: Iterable[Row], size: int) -> Iterator[Chunk]:
    """Consecutive chunks of ``size`` rows (the last may be shorter)."""
    current: list[Row] = []
    number = 0
    for row in rows:
        current.append(row)
        if len(current) == size:
            yield Chunk(number, number * size, current)
            number += 1
            current = []
    if current:
        yield Chunk(number, number * size, current)


def embed_rows(
    embedder: Embedder, rows: list[Row], manifest: JobManifest
) -> tuple[npt.NDArray[Any], list[Any] | None, list[dict[str, Any]]]:
    """Vectors of the rows that have a text, their ids, and a record per malformed row.

    With truncation off, a text over the model's max length is a malformed row, not the end
    of the job.
    """
    good = [r for r in rows if r.error is None]
    problems = {r.index: r.error for r in rows if r.error is not None}
    if not manifest.truncate and good:
        counts = embedder.count_tokens([r.text or "" for r in good], prefix=manifest.prefix,
                                       truncate=False)
        for r, n in zip(list(good), counts, strict=True):
            if n > embedder.max_length:
                problems[r.index] = (f"{n} tokens, over the model's max length "
                                     f"{embedder.max_length} (truncation is off)")
        good = [r for r in good if r.index not in problems]
    vectors = embedder.embed([r.text or "" for r in good], normalize=manifest.normalize,
                             prefix=manifest.prefix or None, truncate=True,
                             dimensions=manifest.dimensions, precision=manifest.precision)
    ids = [r.id for r in good] if manifest.id_column is not None else None
    errors = [error_record(r, problems[r.index]) for r in rows if r.index in problems]
    return vectors, ids, errors


def error_record(row: Row, message: str) -> dict[str, Any]:
    """One line of the errors file."""
    record: dict[str, Any] = {"row": row.index}
    if row.line is not None:
        record["line"] = row.line
    if row.id is not None:
        record["id"] = row.id if isinstance(row.id, (str, int, float, bool)) else str(row.id)
    record["error"] = message
    return record
