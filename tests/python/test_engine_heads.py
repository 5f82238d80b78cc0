"""The engine's heads: a reranker's sequence-classification logits and SPLADE weights from a
masked-LM head, natively and in wasm, on small random models of each head (_engine_model.HEADS),
against the numpy model of the same int8 scheme (_engine_model.py), which computes the head from
the bundle's own tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _engine_model import HEADS, Model, random_model
from edgembed.backends._abi import SparsePooling
from edgembed.backends.native import NativeBackend, native_available
from edgembed.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
# the numpy model and the engine differ only where a last-bit float difference flips an
# activation's int8 rounding (measured: logits within 2e-4, sparse rows cosine > 0.99999)
SCORE_TOLERANCE = 2e-3
SPARSE_MIN_COSINE = 0.9999


@pytest.fixture(scope="module", autouse=True)
def _native() -> None:
    ok, why = native_available()
    if not ok:
        pytest.skip(why)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heads")
    out = {}
    for name, cfg in HEADS.items():
        random_model(root, cfg, seed=7)
        out[name] = root / f"{cfg.name}.emb"
    return out


def _inputs(cfg_name: str, n: int = 9, seed: int = 3) -> tuple[list[list[int]], list[list[int]]]:
    """Sequences of 1 .. max_length ids ([CLS] first, [SEP] last), and pair token types."""
    cfg = HEADS[cfg_name]
    rng = np.random.default_rng(seed)
    seqs, types = [], []
    for i in range(n):
        k = 1 if i == 0 else cfg.max_length if i == 1 else int(rng.integers(2, cfg.max_length))
        ids = [2, *rng.integers(5, cfg.vocab_size, size=k - 1).tolist()][:k]
        seqs.append(ids)
        types.append([0 if j < (k + 1) // 2 else 1 for j in range(k)])
    return seqs, types


@pytest.mark.parametrize("name", [n for n, c in HEADS.items() if c.head == "classifier"])
def test_scores_match_the_numpy_model(bundles: dict[str, Path], name: str) -> None:
    be = NativeBackend(bundles[name], threads=2)
    model = Model(bundles[name].read_bytes())
    seqs, types = _inputs(name)
    pairs = types if be.type_vocab_size > 1 else None
    got = be.scores(seqs, type_ids=pairs)
    assert got.shape == (len(seqs), HEADS[name].n_labels)
    want = np.stack([model.scores(s, t if pairs else None) for s, t in zip(seqs, types,
                                                                          strict=True)])
    assert np.abs(got - want).max() <= SCORE_TOLERANCE * (1 + np.abs(want).max())
    alone = np.concatenate([be.scores([s], type_ids=[t] if pairs else None)
                            for s, t in zip(seqs, types, strict=True)])
    assert alone.tobytes() == got.tobytes()  # a pair's score never depends on its batch
    if pairs:  # token types change the scores of a pair
        assert not np.array_equal(be.scores(seqs), got)
    with pytest.raises(InputError, match="masked-LM head"):
        be.sparse(seqs)
    be.close()


@pytest.mark.parametrize("name", [n for n, c in HEADS.items() if c.head == "mlm"])
def test_sparse_matches_the_numpy_model(bundles: dict[str, Path], name: str) -> None:
    be = NativeBackend(bundles[name], threads=2)
    model = Model(bundles[name].read_bytes())
    cfg = HEADS[name]
    seqs, _ = _inputs(name)
    pooled, idx = be.sparse(seqs)
    assert idx is None and pooled.shape == (len(seqs), cfg.vocab_size)
    rows, _ = be.sparse(seqs, per_token=True)
    assert rows.shape == (sum(map(len, seqs)), cfg.vocab_size)
    start = 0
    for i, s in enumerate(seqs):
        want_rows = model.sparse_rows(s)
        got_rows = rows[start:start + len(s)]
        start += len(s)
        cos = (want_rows * got_rows).sum(1) / np.maximum(
            np.linalg.norm(want_rows, axis=1) * np.linalg.norm(got_rows, axis=1), 1e-30)
        assert cos.min() >= SPARSE_MIN_COSINE, (i, cos.min())
        # the pooled row is the fold of the token rows (max, or the sum in token order)
        if cfg.sparse_pooling == "sum":
            fold = got_rows[0].copy()
            for r in got_rows[1:]:
                fold = (fold + r).astype(np.float32)
        else:
            fold = got_rows.max(0)
        assert fold.tobytes() == pooled[i].tobytes()
    assert (pooled >= 0).all() and 0.05 < (pooled > 0).mean() < 0.95  # SPLADE: sparse
    other = SparsePooling.MAX if cfg.sparse_pooling == "sum" else SparsePooling.SUM
    assert not np.array_equal(be.sparse(seqs, pooling=other)[0], pooled)

    # top-k: the k largest weights, best first, ties to the lower id; -1 / 0 past the nonzero
    for k in (1, 8, cfg.vocab_size):
        values, ids = be.sparse(seqs, top_k=k)
        assert values.shape == ids.shape == (len(seqs), k)  # type: ignore[union-attr]
        for row, v, j in zip(pooled, values, ids, strict=True):  # type: ignore[arg-type]
            order = sorted(np.flatnonzero(row > 0).tolist(), key=lambda t: (-row[t], t))[:k]
            assert j[:len(order)].tolist() == order and (j[len(order):] == -1).all()
            assert v[:len(order)].tobytes() == row[order].tobytes() and not v[len(order):].any()
    with pytest.raises(InputError, match="top_k"):
        be.sparse(seqs, top_k=cfg.vocab_size + 1)
    with pytest.raises(InputError, match="classification head"):
        be.scores(seqs)
    be.close()


@pytest.mark.parametrize("name", list(HEADS))
def test_wasm_gives_the_native_bits(bundles: dict[str, Path], name: str) -> None:
    """Both wasm builds (wasmtime) give the native engine's bits for every head output, on
    every kernel set natively too."""
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (ROOT / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    cfg = HEADS[name]
    seqs, types = _inputs(name, n=6)
    be = NativeBackend(bundles[name], threads=3)
    ref = NativeBackend(bundles[name], threads=1, kernels="reference")
    pairs = types if be.type_vocab_size > 1 else None
    if cfg.head == "classifier":
        def outputs(b: object) -> list[bytes]:
            return [b.scores(seqs, type_ids=pairs).tobytes()]  # type: ignore[attr-defined]
    else:
        def outputs(b: object) -> list[bytes]:
            got = [b.sparse(seqs)[0], b.sparse(seqs, per_token=True)[0],  # type: ignore[attr-defined]
                   *b.sparse(seqs, top_k=5), *b.sparse(seqs, top_k=3, per_token=True)]  # type: ignore[attr-defined]
            return [np.asarray(a).tobytes() for a in got]
    want = outputs(be)
    assert outputs(ref) == want
    for variant in ("simd128", "relaxed"):
        wasm = WasmBackend(bundles[name], variant=variant)
        assert outputs(wasm) == want, variant
        wasm.close()
    be.close()
    ref.close()
