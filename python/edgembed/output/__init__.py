"""What the Embedder does to pooled vectors before returning them, with numpy or without.

::

    pooled (n, dim) float32 ─► first ``dimensions`` (Matryoshka) ─► L2 normalization ─► precision

The arithmetic exists twice, to the bit the same: ``arrays`` on numpy arrays (CPython), ``rows``
on lists of ``array('f')`` rows (Pyodide, which has no numpy offline; see its docstring for why
the bits agree). The Embedder is one core that holds one of the two as its ``Output``; which
one follows ``env.HOST.numpy``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from .. import env
from .precision import Precision, precision_of

__all__ = ["Output", "Precision", "default_output", "precision_of"]


class Output(Protocol):
    """The vector arithmetic of one representation (numpy arrays or ``array`` rows).

    ``Vectors`` below is an (n, d) float32 array, or a list of n ``array('f')`` rows.
    """

    def encode(self, backend: Any, batch: Sequence[Sequence[int]],
               prompt_lengths: Sequence[int] | None = None) -> Any:
        """The backend's pooled vectors of one batch, in this representation;
        ``prompt_lengths``: the leading tokens of each text that pooling leaves out."""
        ...

    def alloc(self, n: int, dim: int) -> Any:
        """Room for ``n`` pooled vectors, filled by ``put``."""
        ...

    def put(self, out: Any, indices: Sequence[int], block: Any) -> None:
        """Store an encoded batch's vectors at ``indices`` of ``out``."""
        ...

    def finish(self, pooled: Any, normalize: bool, dimensions: int | None) -> Any:
        """The first ``dimensions`` of each vector, L2-normalized when ``normalize``."""
        ...

    def quantize(self, vectors: Any, precision: Precision, ranges: Any) -> Any:
        """``vectors`` at ``precision`` (``ranges`` from ``ranges`` for int8/uint8)."""
        ...

    def ranges(self, vectors: Any) -> Any:
        """Per-dimension [lo, hi] of calibration vectors (what ``quantize`` takes)."""
        ...

    def empty(self, dims: int, precision: Precision) -> Any:
        """The result of embedding no text."""
        ...

    def load(self, path: Path, n: int, dim: int) -> Any | None:
        """Cached float32 vectors of shape (n, dim), or None (absent, unreadable, or no cache)."""
        ...

    def save(self, path: Path, vectors: Any) -> None:
        """Cache vectors at ``path`` (atomically; silently not where it cannot write)."""
        ...


def default_output() -> Output:
    """numpy arrays where numpy is installed, else ``array`` rows."""
    if env.HOST.numpy:
        from .arrays import ArrayOutput

        return ArrayOutput()
    from .rows import RowOutput

    return RowOutput()
