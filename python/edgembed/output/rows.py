"""The Embedder's output arithmetic without numpy, to the bit what ``arrays`` computes.

Pyodide has no numpy offline, so there ``embed`` returns a list of rows: ``array('f')`` for
float32, ``array('b')`` for int8 and binary, ``array('B')`` for uint8 and ubinary. Each row is
what the numpy path gives for the same text, bit for bit, because every float32 operation is
done as numpy does it:

* ``+ - * /`` and ``sqrt`` in float64 then rounded to float32 equal the float32 operation
  (float64 has more than 2·24 + 2 bits, so the double rounding never changes the result);
* sums follow numpy's pairwise summation (``@TYPE@_pairwise_sum``: blocks of at most 128
  summed with 8 accumulators, longer runs halved at a multiple of 8), which
  ``np.linalg.norm(x, axis=1)`` uses for float32 rows.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

from .precision import Precision

__all__ = [
    "Row",
    "RowOutput",
    "l2_normalize",
    "pairwise_sum_f32",
    "quantize_rows",
    "ranges_of",
]

Row: TypeAlias = "array[Any]"  # array('f'), or array('b') / array('B') after quantization

_PW_BLOCKSIZE = 128


_BOX: array[float] = array("f", [0.0])


def _f32(x: float) -> float:
    """``x`` rounded to float32 (round to nearest even, as a C cast)."""
    _BOX[0] = x
    return _BOX[0]


def pairwise_sum_f32(a: Sequence[float], lo: int = 0, n: int | None = None) -> float:
    """float32 sum of ``a[lo:lo + n]`` in numpy's pairwise order."""
    if n is None:
        n = len(a) - lo
    f = _f32
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res = f(res + a[i])
        return res
    if n <= _PW_BLOCKSIZE:
        r = [a[lo + j] for j in range(8)]
        i = 8
        stop = n - n % 8
        while i < stop:
            for j in range(8):
                r[j] = f(r[j] + a[lo + i + j])
            i += 8
        res = f(f(f(r[0] + r[1]) + f(r[2] + r[3])) + f(f(r[4] + r[5]) + f(r[6] + r[7])))
        while i < n:
            res = f(res + a[lo + i])
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return f(pairwise_sum_f32(a, lo, n2) + pairwise_sum_f32(a, lo + n2, n - n2))


def l2_normalize(rows: Sequence[Sequence[float]], dimensions: int | None = None) -> list[Row]:
    """Each row's first ``dimensions`` values divided by their L2 norm (at least 1e-12), as
    ``x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)`` in float32."""
    floor = _f32(1e-12)
    out = []
    for row in rows:
        x = row[:dimensions] if dimensions else row
        squares = array("f", [v * v for v in x])
        norm = _f32(math.sqrt(pairwise_sum_f32(squares)))
        norm = max(norm, floor)
        out.append(array("f", [v / norm for v in x]))
    return out


def ranges_of(rows: Sequence[Sequence[float]]) -> tuple[Row, Row]:
    """Per-dimension (minimum, maximum) of float32 rows."""
    lo = array("f", rows[0])
    hi = array("f", rows[0])
    for row in rows[1:]:
        for j, v in enumerate(row):
            if v < lo[j]:
                lo[j] = v
            elif v > hi[j]:
                hi[j] = v
    return lo, hi


def quantize_rows(
    rows: Sequence[Sequence[float]],
    precision: str,
    ranges: tuple[Sequence[float], Sequence[float]] | None = None,
) -> list[Row]:
    """``arrays.quantize_embeddings`` on rows (``precision`` is a Precision value):
    ``int8``/``uint8`` map each dimension's [lo, hi] onto 256 levels (clipped, truncated
    toward zero); ``binary``/``ubinary`` pack the sign bits (x > 0) 8 per byte, first
    dimension in the high bit, ``binary`` storing each byte minus 128."""
    if precision == "float32":
        return [array("f", r) for r in rows]
    if precision in ("binary", "ubinary"):
        out = []
        for r in rows:
            packed = bytearray((len(r) + 7) // 8)
            for j, v in enumerate(r):
                if v > 0:
                    packed[j >> 3] |= 0x80 >> (j & 7)
            if precision == "ubinary":
                out.append(array("B", packed))
            else:
                out.append(array("b", [b - 128 for b in packed]))
        return out
    if ranges is None:
        raise ValueError(f"precision {precision!r} needs calibration ranges")
    f = _f32
    lo = ranges[0]
    steps = []
    for a, b in zip(ranges[0], ranges[1], strict=True):
        width = f(b - a)
        steps.append(f(width / f(255.0)) if width > 0 else 1.0)
    out = []
    for r in rows:
        levels = [min(max(f(f(v - lo[j]) / steps[j]), 0.0), 255.0) for j, v in enumerate(r)]
        if precision == "uint8":
            out.append(array("B", [math.trunc(v) for v in levels]))
        else:
            out.append(array("b", [math.trunc(f(v - 128.0)) for v in levels]))
    return out


class RowOutput:
    """:class:`~edgembed.output.Output` on lists of ``array`` rows (no numpy)."""

    def encode(self, backend: Any, batch: Sequence[Sequence[int]],
               prompt_lengths: Sequence[int] | None = None) -> list[array[float]]:
        rows: list[array[float]] = (backend.encode_rows(batch) if prompt_lengths is None
                                    else backend.encode_rows(batch, prompt_lengths))
        return rows

    def alloc(self, n: int, dim: int) -> list[array[float]]:
        return [array("f")] * n

    def put(self, out: list[array[float]], indices: Sequence[int],
            block: list[array[float]]) -> None:
        for i, row in zip(indices, block, strict=True):
            out[i] = row

    def finish(self, pooled: Sequence[array[float]], normalize: bool,
               dimensions: int | None) -> list[Row]:
        if normalize:
            return l2_normalize(pooled, dimensions)
        return [array("f", r[:dimensions] if dimensions else r) for r in pooled]

    def quantize(self, vectors: Sequence[Sequence[float]], precision: Precision,
                 ranges: tuple[Row, Row] | None) -> list[Row]:
        return quantize_rows(vectors, precision.value, ranges)

    def ranges(self, vectors: Sequence[Sequence[float]]) -> tuple[Row, Row]:
        return ranges_of(vectors)

    def empty(self, dims: int, precision: Precision) -> list[Row]:
        return []

    def load(self, path: Path, n: int, dim: int) -> None:
        return None  # no cache without numpy's .npy reader

    def save(self, path: Path, vectors: Any) -> None:
        pass
