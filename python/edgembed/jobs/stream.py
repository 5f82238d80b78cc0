"""Rows ─► chunks ─► vectors ─► a writer, in one pass: the ``embed -i FILE -o FILE`` form of a
job, with no work directory and no checkpoint (``embed batch`` commits each chunk instead, see
``runner.py``).

The rows are cut by ``chunks.chunks_of``, as a job's are; each chunk goes to the Embedder
(``embed_counted`` for a dense model, ``embed_sparse`` for a SPLADE one) and its vectors to the
:class:`~edgembed.io.writers.VectorWriter` at once, so memory holds one chunk. The caller owns
the writer: it finishes or aborts it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..io.readers import Row
from .chunks import chunks_of

if TYPE_CHECKING:
    from ..embedder import Embedder
    from ..io.writers import VectorWriter

__all__ = ["STREAM_CHUNK", "Streamed", "VectorOptions", "embed_into"]

STREAM_CHUNK = 512  # rows per Embedder call


@dataclass(frozen=True)
class VectorOptions:
    """How the texts become vectors (the Embedder's arguments of the same names). A sparse
    model takes ``prefix``, ``prompt_name``, ``truncate`` and ``max_batch_tokens`` only."""

    normalize: bool | None = None
    prefix: str | None = None
    prompt_name: str | None = None
    truncate: bool = True
    dimensions: int | None = None
    precision: str = "float32"
    max_batch_tokens: int | None = None


@dataclass(frozen=True)
class Streamed:
    """What a pass wrote: ``rows`` texts, ``truncated`` of them cut at the model's max length
    (always 0 for a sparse model, whose truncation is not counted)."""

    rows: int
    truncated: int


def embed_into(
    embedder: Embedder,
    rows: Iterable[Row],
    output: VectorWriter,
    options: VectorOptions,
    *,
    chunk_size: int = STREAM_CHUNK,
    on_chunk: Callable[[int], None] | None = None,
) -> Streamed:
    """Every row's vector written to ``output`` with its id, in input order (a row without a
    text is the empty text); ``on_chunk(n)`` after each chunk of ``n`` rows is written."""
    sparse = embedder.task == "sparse"
    truncated = total = 0
    for chunk in chunks_of(rows, chunk_size):
        texts = [r.text or "" for r in chunk.rows]
        ids = [r.id for r in chunk.rows]
        if sparse:
            output.write_sparse(
                embedder.embed_sparse(
                    texts, prefix=options.prefix, prompt_name=options.prompt_name,
                    truncate=options.truncate, max_batch_tokens=options.max_batch_tokens),
                ids)
        else:
            vectors, cut = embedder.embed_counted(
                texts, start=total, normalize=options.normalize, prefix=options.prefix,
                prompt_name=options.prompt_name, truncate=options.truncate,
                dimensions=options.dimensions, precision=options.precision,
                max_batch_tokens=options.max_batch_tokens)
            output.write(vectors, ids)
            truncated += cut
        total += len(chunk.rows)
        if on_chunk is not None:
            on_chunk(len(chunk.rows))
    return Streamed(total, truncated)
