"""Backends run the encoder on token ids; the Embedder does everything around them.

A backend takes a batch of token-id sequences (with ``[CLS]``/``[SEP]``, no padding) and
returns their pooled, not yet normalized vectors, shape (n, dim), float32. The Embedder
tokenizes, sorts by length, cuts token-budget batches, normalizes and restores order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # numpy is optional in Pyodide, where the wasm backend returns array('f') rows
    import numpy as np
    import numpy.typing as npt

__all__ = ["Backend"]


@runtime_checkable
class Backend(Protocol):
    name: str
    dim: int

    def encode(self, batch: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
        """Pooled (not normalized) vectors for a batch of id sequences."""
        ...
