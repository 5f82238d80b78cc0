"""Block-wise symmetric int8 quantization: the one arithmetic every edgembed engine implements.

See docs/quantization.md for the full scheme. In short, a weight matrix W of shape (N, K)
(N output channels, K inputs) is cut along K into blocks of ``block`` (32) values; each block
of each row gets its own scale ``s = max|w| / 127`` and ``q = round_half_even(w / s)`` in
[-127, 127]. When K is not a multiple of 32 the last block of each row is short: its scale is
the maximum over its real values / 127. Activations are quantized the same way at run time,
per token row and block, so a token's vector never depends on its batch-mates.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["BLOCK", "dequantize_blocks", "quantize_blocks_int8"]

BLOCK = 32


def _blocks(w: npt.NDArray[np.float32], block: int) -> npt.NDArray[np.float32]:
    """(N, ceil(K / block), block): the rows cut in blocks, the last one padded with zeros."""
    n, k = w.shape
    nb = -(-k // block)
    if k == nb * block:
        return w.reshape(n, nb, block)
    padded = np.zeros((n, nb * block), dtype=np.float32)
    padded[:, :k] = w
    return padded.reshape(n, nb, block)


def quantize_blocks_int8(
    w: npt.NDArray[np.float32], block: int = BLOCK
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Quantize each row of ``w`` (N, K) in blocks of ``block`` along K.

    Returns ``(q, scales)``: ``q`` int8 of shape (N, K), ``scales`` float32 of shape
    (N, ceil(K / block)). A block of zeros gets scale 0 and zeros. A short last block
    (K % block != 0) is quantized as if padded with zeros, which leaves its maximum unchanged.
    """
    w = np.ascontiguousarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {w.shape}")
    n, k = w.shape
    blocks = _blocks(w, block)
    amax = np.max(np.abs(blocks), axis=2)
    scales = (amax / np.float32(127.0)).astype(np.float32)
    safe = np.where(scales == 0, np.float32(1.0), scales)
    q = np.rint(blocks / safe[:, :, None])
    q = np.clip(q, -127, 127).astype(np.int8)
    return np.ascontiguousarray(q.reshape(n, -1)[:, :k]), scales


def dequantize_blocks(
    q: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], block: int = BLOCK
) -> npt.NDArray[np.float32]:
    """Inverse of :func:`quantize_blocks_int8` (up to rounding)."""
    n, k = q.shape
    blocks = _blocks(q.astype(np.float32), block)
    out = blocks * scales[:, :, None]
    return np.ascontiguousarray(out.reshape(n, -1)[:, :k]).astype(np.float32)
