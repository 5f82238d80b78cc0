"""The block-wise int8 arithmetic of docs/quantization.md, checked on real numbers."""

from __future__ import annotations

import numpy as np
import pytest

from edgembed.export.quantize import BLOCK, dequantize_blocks, quantize_blocks_int8


def test_scales_and_codes_follow_the_documented_rule() -> None:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((5, 64)).astype(np.float32)
    w[2, 40] = 175.0  # an outlier only affects its own block
    q, s = quantize_blocks_int8(w)
    assert q.dtype == np.int8 and s.dtype == np.float32
    assert q.shape == (5, 64) and s.shape == (5, 64 // BLOCK)
    blocks = w.reshape(5, 2, BLOCK)
    np.testing.assert_array_equal(s, (np.abs(blocks).max(axis=2) / np.float32(127)))
    expect = np.clip(np.rint(blocks / s[:, :, None]), -127, 127).astype(np.int8).reshape(5, 64)
    np.testing.assert_array_equal(q, expect)
    assert q.min() >= -127  # -128 is never produced
    assert np.abs(q.reshape(5, 2, BLOCK)).max(axis=2).min() == 127  # each block uses full range
    # the outlier's block is coarse, the other block of that row keeps its precision
    err = np.abs(dequantize_blocks(q, s) - w).reshape(5, 2, BLOCK).max(axis=2)
    assert err[2, 1] > 0.3 and err[2, 0] < 0.03


def test_zero_block_gets_zero_scale() -> None:
    w = np.zeros((2, 32), np.float32)
    w[1, 3] = -1.0
    q, s = quantize_blocks_int8(w)
    assert s[0, 0] == 0 and not q[0].any()
    assert q[1, 3] == -127


def test_round_half_even() -> None:
    # amax 127 -> scale exactly 1.0, so codes are round_half_even(w)
    w = np.zeros((1, 32), np.float32)
    w[0, :5] = [127.0, 0.5, 1.5, 2.5, -0.5]
    q, s = quantize_blocks_int8(w)
    assert s[0, 0] == 1.0
    assert q[0, :5].tolist() == [127, 0, 2, 2, 0]


def test_short_last_block() -> None:
    """K = 48: one block of 32 and a short block of 16, scaled by the max of its 16 values."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 48)).astype(np.float32)
    q, s = quantize_blocks_int8(w)
    assert q.shape == (3, 48) and s.shape == (3, 2)
    np.testing.assert_array_equal(s[:, 1], np.abs(w[:, 32:]).max(axis=1) / np.float32(127))
    expect = np.clip(np.rint(w[:, 32:] / s[:, 1:]), -127, 127).astype(np.int8)
    np.testing.assert_array_equal(q[:, 32:], expect)
    assert (np.abs(q[:, 32:]).max(axis=1) == 127).all()
    # the same as quantizing the rows padded with zeros to 64, then cutting them back
    padded = np.zeros((3, 64), np.float32)
    padded[:, :48] = w
    qp, sp = quantize_blocks_int8(padded)
    np.testing.assert_array_equal(q, qp[:, :48])
    np.testing.assert_array_equal(s, sp)
    np.testing.assert_array_equal(dequantize_blocks(q, s), dequantize_blocks(qp, sp)[:, :48])


def test_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="2-D"):
        quantize_blocks_int8(np.ones(32, np.float32))
