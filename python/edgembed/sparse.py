"""Sparse vectors (SPLADE): a text's nonzero vocabulary entries, without scipy.

``Embedder.embed_sparse`` returns one :class:`SparseEmbedding` per text: its ``indices``
(vocabulary ids, ascending) and their ``values``, as numpy arrays (int32, float32) where numpy
is installed, else as ``array('i')`` and ``array('f')`` (Pyodide has no numpy offline). The same
shape as TEI's ``/embed_sparse`` entries (``[{"index", "value"}]``, :meth:`to_tei`), fastembed's
``SparseEmbedding`` and what Qdrant, Elasticsearch and OpenSearch index; no scipy needed.

``from_dense_rows`` turns the engine's (B, V) rows into sparse vectors batch by batch, so a
large call never holds all of them dense. ``max_active_dims`` (sentence-transformers' name)
keeps only each vector's largest entries.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import env

__all__ = ["SparseEmbedding", "from_dense_rows", "sparse_dot"]


@dataclass(frozen=True, eq=False)
class SparseEmbedding:
    """One text's sparse vector: ``values[i]`` at vocabulary id ``indices[i]``, ids ascending,
    every value positive; ``dim`` is the vocabulary size."""

    indices: Any
    values: Any
    dim: int

    def __len__(self) -> int:
        return len(self.indices)

    def __repr__(self) -> str:
        return f"SparseEmbedding(nnz={len(self)}, dim={self.dim})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SparseEmbedding):
            return NotImplemented
        return (self.dim == other.dim and list(self.indices) == list(other.indices)
                and list(self.values) == list(other.values))

    def to_dict(self) -> dict[int, float]:
        """{vocabulary id: value}."""
        return {int(i): float(v) for i, v in zip(self.indices, self.values, strict=True)}

    def to_tei(self) -> list[dict[str, float | int]]:
        """TEI's ``/embed_sparse`` form: ``[{"index": id, "value": v}, ...]``."""
        return [{"index": int(i), "value": float(v)}
                for i, v in zip(self.indices, self.values, strict=True)]

    def to_dense(self) -> Any:
        """The full (dim,) float32 vector: a numpy array, or ``array('f')`` without numpy."""
        if not env.HOST.numpy:
            out = array("f", bytes(4 * self.dim))
            for i, v in zip(self.indices, self.values, strict=True):
                out[int(i)] = v
            return out
        import numpy as np

        dense = np.zeros(self.dim, np.float32)
        dense[np.asarray(self.indices, np.int64)] = np.asarray(self.values, np.float32)
        return dense

    def dot(self, other: SparseEmbedding) -> float:
        """The dot product with ``other`` (SPLADE's similarity)."""
        return sparse_dot(self, other)

    def top(self, k: int) -> SparseEmbedding:
        """The ``k`` largest entries (ties: the lower id first), ids still ascending."""
        if len(self) <= k:
            return self
        ranked = sorted(range(len(self)), key=lambda j: (-float(self.values[j]), j))[:k]
        keep = sorted(ranked)
        return _make([int(self.indices[j]) for j in keep], [float(self.values[j]) for j in keep],
                     self.dim, numpy=not isinstance(self.indices, array))


def sparse_dot(a: SparseEmbedding, b: SparseEmbedding) -> float:
    """Dot product of two sparse vectors (a merge of their sorted ids, in float64)."""
    if a.dim != b.dim:
        raise ValueError(f"sparse vectors of different sizes ({a.dim} and {b.dim})")
    i = j = 0
    total = 0.0
    ai, av, bi, bv = a.indices, a.values, b.indices, b.values
    while i < len(ai) and j < len(bi):
        x, y = int(ai[i]), int(bi[j])
        if x == y:
            total += float(av[i]) * float(bv[j])
            i += 1
            j += 1
        elif x < y:
            i += 1
        else:
            j += 1
    return total


def _make(indices: Sequence[int], values: Sequence[float], dim: int, *,
          numpy: bool) -> SparseEmbedding:
    if numpy:
        import numpy as np

        return SparseEmbedding(np.asarray(indices, np.int32), np.asarray(values, np.float32),
                               dim)
    return SparseEmbedding(array("i", indices), array("f", values), dim)


def from_dense_rows(rows: Any, max_active_dims: int | None = None) -> list[SparseEmbedding]:
    """Sparse vectors of dense rows: a (B, V) numpy array, or a list of ``array('f')`` rows.
    Entries that are not positive are left out (SPLADE's are never negative)."""
    if isinstance(rows, list):  # array('f') rows: no numpy
        out = []
        for row in rows:
            ids = [j for j, v in enumerate(row) if v > 0.0]
            e = SparseEmbedding(array("i", ids), array("f", [row[j] for j in ids]), len(row))
            out.append(e.top(max_active_dims) if max_active_dims else e)
        return out
    import numpy as np

    block = np.asarray(rows, np.float32)
    result = []
    for row in block:
        idx = np.flatnonzero(row > 0).astype(np.int32)
        vals = row[idx]
        if max_active_dims is not None and len(idx) > max_active_dims:
            # the largest values, ties to the lower id (a stable sort of -values)
            keep = np.sort(np.argsort(-vals, kind="stable")[:max_active_dims])
            idx, vals = idx[keep], vals[keep]
        result.append(SparseEmbedding(idx, np.ascontiguousarray(vals, np.float32),
                                      int(block.shape[1])))
    return result
