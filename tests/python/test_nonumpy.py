"""The numpy-free output arithmetic (Pyodide's path) equals numpy's to the bit."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pytest

from edgembed.output import rows as nn
from edgembed.output.arrays import l2_normalize, quantize_embeddings

DIMS = [1, 5, 7, 8, 9, 31, 64, 127, 128, 129, 200, 256, 383, 384, 768, 1024]


def rows_of(x: np.ndarray) -> list[array[float]]:
    return [array("f", r.astype(np.float32).tobytes()) for r in x]


def as_np(rows: list[array[Any]], dtype: type | np.dtype[Any]) -> np.ndarray:
    return np.array([list(r) for r in rows], dtype=dtype)


@pytest.mark.parametrize("d", DIMS)
def test_pairwise_sum_is_numpys(d: int) -> None:
    rng = np.random.default_rng(d)
    x = (rng.standard_normal((20, d)) * rng.choice([1e-3, 1.0, 40.0])).astype(np.float32)
    want = np.add.reduce(x * x, axis=1)
    got = [nn.pairwise_sum_f32(array("f", (r * r).tobytes())) for r in x]
    assert np.array_equal(np.asarray(got, dtype=np.float32), want)


@pytest.mark.parametrize("d", DIMS)
def test_l2_normalize_is_numpys(d: int) -> None:
    rng = np.random.default_rng(100 + d)
    x = (rng.standard_normal((30, d)) * 3.0).astype(np.float32)
    x[0] = 0.0  # the 1e-12 floor
    got = as_np(nn.l2_normalize(rows_of(x)), np.float32)
    assert np.array_equal(got.view(np.uint32), l2_normalize(x).view(np.uint32))
    if d > 4:  # Matryoshka: the first dimensions, renormalized
        got = as_np(nn.l2_normalize(rows_of(x), d // 2), np.float32)
        assert np.array_equal(got.view(np.uint32), l2_normalize(x[:, : d // 2]).view(np.uint32))


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantize_is_numpys(precision: str) -> None:
    rng = np.random.default_rng(3)
    x = l2_normalize(rng.standard_normal((50, 384)).astype(np.float32))
    calib = l2_normalize(rng.standard_normal((80, 384)).astype(np.float32))  # some x clip
    ranges = np.stack([calib.min(axis=0), calib.max(axis=0)])
    ranges[:, 7] = 0.25  # a zero-width dimension
    want = quantize_embeddings(x, precision, ranges)
    got = nn.quantize_rows(rows_of(x), precision, (array("f", ranges[0].tobytes()),
                                                   array("f", ranges[1].tobytes())))
    assert got[0].typecode == ("b" if precision in ("int8", "binary") else "B")
    assert np.array_equal(as_np(got, want.dtype), want)
    assert want.min() < 0 or precision in ("uint8", "ubinary")


def test_ranges_of() -> None:
    x = np.random.default_rng(5).standard_normal((40, 17)).astype(np.float32)
    lo, hi = nn.ranges_of(rows_of(x))
    assert np.array_equal(np.asarray(lo, np.float32), x.min(axis=0))
    assert np.array_equal(np.asarray(hi, np.float32), x.max(axis=0))
