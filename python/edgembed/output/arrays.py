"""The Embedder's output arithmetic on numpy arrays (CPython)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import InputError
from .precision import Precision, precision_of

__all__ = ["ArrayOutput", "l2_normalize", "output_layout", "quantize_embeddings"]

FloatArray = npt.NDArray[np.float32]


def l2_normalize(x: FloatArray) -> FloatArray:
    """Each row divided by its L2 norm (at least 1e-12), in float32."""
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out: FloatArray = (x / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)
    return out


def quantize_embeddings(
    embeddings: FloatArray,
    precision: str | Precision,
    ranges: FloatArray | None = None,
) -> npt.NDArray[Any]:
    """Quantize float32 embeddings the way sentence-transformers' ``quantize_embeddings`` does.

    ``ranges`` (shape (2, d): per-dimension lower and upper bound) is needed for int8/uint8.
    With ``v = clip((x - lo) / ((hi - lo) / 255), 0, 255)``: ``uint8 = trunc(v)`` and
    ``int8 = trunc(v - 128)`` (truncation toward zero): sentence-transformers' formula, so the
    same ranges give the same bytes, plus the clipping it lacks. The Embedder passes ranges
    measured on the calibration corpus, so a vector's quantized form does not depend on the
    other texts of the call (sentence-transformers, given no calibration set, measures them on
    the call's own embeddings).
    """
    p = precision_of(precision)
    if p is Precision.FLOAT32:
        return np.asarray(embeddings, dtype=np.float32)
    if p in (Precision.BINARY, Precision.UBINARY):
        packed = np.packbits(embeddings > 0, axis=-1)
        if p is Precision.UBINARY:
            return np.asarray(packed, dtype=np.uint8)
        return np.asarray(packed.astype(np.int16) - 128, dtype=np.int8)
    if ranges is None:
        raise InputError(f"precision {p.value!r} needs calibration ranges")
    lo = ranges[0].astype(np.float32)
    width = (ranges[1] - ranges[0]).astype(np.float32)
    steps = np.where(width > 0, width / np.float32(255.0), np.float32(1.0))
    levels = np.clip((embeddings - lo) / steps, 0, 255)
    if p is Precision.UINT8:
        return np.asarray(np.trunc(levels), dtype=np.uint8)
    return np.asarray(np.trunc(levels - 128), dtype=np.int8)


def output_layout(dims: int, precision: str | Precision) -> tuple[int, np.dtype[Any]]:
    """(row width, dtype) of ``embed``'s output for ``dims`` dimensions at ``precision``."""
    p = precision_of(precision)
    if p in (Precision.BINARY, Precision.UBINARY):
        return (dims + 7) // 8, np.dtype(np.int8 if p is Precision.BINARY else np.uint8)
    return dims, np.dtype({Precision.FLOAT32: np.float32, Precision.INT8: np.int8,
                           Precision.UINT8: np.uint8}[p])


class ArrayOutput:
    """:class:`~edgembed.output.Output` on numpy arrays."""

    def encode(self, backend: Any, batch: Sequence[Sequence[int]],
               prompt_lengths: Sequence[int] | None = None) -> FloatArray:
        out: FloatArray = (backend.encode(batch) if prompt_lengths is None
                           else backend.encode(batch, prompt_lengths=prompt_lengths))
        return out

    def alloc(self, n: int, dim: int) -> FloatArray:
        return np.zeros((n, dim), dtype=np.float32)

    def put(self, out: FloatArray, indices: Sequence[int], block: FloatArray) -> None:
        out[list(indices)] = block

    def finish(self, pooled: FloatArray, normalize: bool, dimensions: int | None) -> FloatArray:
        out = pooled[:, :dimensions] if dimensions else pooled
        return l2_normalize(out) if normalize else np.array(out, dtype=np.float32)

    def quantize(self, vectors: FloatArray, precision: Precision,
                 ranges: FloatArray | None) -> npt.NDArray[Any]:
        return quantize_embeddings(vectors, precision, ranges)

    def ranges(self, vectors: FloatArray) -> FloatArray:
        return np.stack([vectors.min(axis=0), vectors.max(axis=0)]).astype(np.float32)

    def empty(self, dims: int, precision: Precision) -> npt.NDArray[Any]:
        width, dtype = output_layout(dims, precision)
        return np.zeros((0, width), dtype=dtype)

    def load(self, path: Path, n: int, dim: int) -> FloatArray | None:
        if not path.is_file():
            return None
        with contextlib.suppress(OSError, ValueError):
            cached = np.load(path)
            if cached.shape == (n, dim) and cached.dtype == np.float32:
                return np.asarray(cached, dtype=np.float32)
        return None

    def save(self, path: Path, vectors: FloatArray) -> None:
        with contextlib.suppress(OSError):
            fd, tmp = tempfile.mkstemp(prefix=".calibration-", suffix=".npy", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                np.save(f, vectors)
            os.replace(tmp, path)
