"""The engine on real MPNet weights: all-mpnet-base-v2 (768 wide, 12 layers, relative position
buckets, positions offset by 2) in int8 meets the int8 bar against sentence-transformers' fp32
vectors (min cosine ≥ 0.995, mean ≥ 0.999 over the reference corpus), with fp32 attention and
with ``attention="auto"`` (int8 attention for most texts), is batch-invariant, and gives the same
bits natively and in wasm.

The reference is ``tests/fixtures/reference/all-mpnet-base-v2.npz`` (sentence-transformers' own
vectors and ``tokenizers``' ids: ``tests/fixtures/make_mpnet_reference.py``). The engine gets the
reference's token ids, so a tokenizer difference cannot hide in (or excuse) an encoder one; the
tokenizer has its own parity tests (test_tokenizer_parity*.py).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from edgembed.export.bundle import bundle_config, write_bundle
from edgembed.model_dir import read_model_dir

REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "all-mpnet-base-v2.npz"


AUTO_MIN_TOKENS = 9  # "auto" attention's threshold here: 176 corpus texts int8, 86 fp32


def _write(hf_dir: Path, tmp: Path, attention: str = "fp32",
           attention_min_tokens: int | None = None) -> Path:
    cfg = bundle_config(read_model_dir(hf_dir), name="all-mpnet-base-v2")
    assert (cfg.family, cfg.relative_buckets, cfg.position_offset, cfg.position_pad_id,
            cfg.type_vocab_size, cfg.max_length) == ("mpnet", 32, 2, 1, 0, 384)
    out = tmp / f"all-mpnet-base-v2.{attention}.emb"
    write_bundle(hf_dir, out, name="all-mpnet-base-v2", attention=attention,
                 attention_min_tokens=attention_min_tokens)
    return out


@pytest.fixture(scope="module")
def mpnet_bundle(mpnet_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(mpnet_hf_dir, tmp_path_factory.mktemp("mpnet"))


@pytest.fixture(scope="module")
def mpnet_auto_bundle(mpnet_hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(mpnet_hf_dir, tmp_path_factory.mktemp("mpnet-auto"), attention="auto",
                  attention_min_tokens=AUTO_MIN_TOKENS)


@pytest.fixture(scope="module")
def reference() -> dict[str, npt.NDArray[np.generic]]:
    with np.load(REFERENCE) as f:
        return {k: f[k] for k in f.files}


def _seqs(ref: dict[str, npt.NDArray[np.generic]]) -> list[list[int]]:
    starts = np.concatenate(([0], np.cumsum(ref["lengths"])))
    return [ref["ids"][a:b].tolist() for a, b in itertools.pairwise(starts)]


def _normalized(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    v64 = v.astype(np.float64)
    return np.asarray(v64 / np.linalg.norm(v64, axis=1, keepdims=True), dtype=np.float64)


def _encode_corpus(bundle: Path, seqs: list[list[int]]) -> npt.NDArray[np.float32]:
    from edgembed.backends.native import NativeBackend
    from edgembed.embedder import plan_batches

    engine = NativeBackend(bundle)
    got = np.zeros((len(seqs), 768), dtype=np.float32)
    for batch in plan_batches([len(s) for s in seqs], 2048, 128):  # the Embedder's batches
        got[batch] = engine.encode([seqs[i] for i in batch])
    rng = np.random.default_rng(5)
    for i in rng.choice(len(seqs), size=12, replace=False):  # alone: the same bits
        assert np.array_equal(engine.encode([seqs[i]])[0], got[i]), i
    engine.close()
    return got


@pytest.fixture(scope="module")
def fp32_vectors(
    mpnet_bundle: Path, reference: dict[str, npt.NDArray[np.generic]]
) -> npt.NDArray[np.float32]:
    return _encode_corpus(mpnet_bundle, _seqs(reference))


def _cosines(got: npt.NDArray[np.float32],
             ref: dict[str, npt.NDArray[np.generic]]) -> npt.NDArray[np.float64]:
    want = ref["vectors"].astype(np.float64)
    return np.asarray((_normalized(got) * want).sum(1) / np.linalg.norm(want, axis=1))


def test_int8_bar_and_batch_invariance(
    fp32_vectors: npt.NDArray[np.float32], reference: dict[str, npt.NDArray[np.generic]]
) -> None:
    cos = _cosines(fp32_vectors, reference)
    # measured: min 0.99823 (a 2-token text), mean 0.99966, every kernel set the same bits
    assert cos.min() >= 0.995 and cos.mean() >= 0.999, (cos.min(), cos.mean())


def test_auto_attention_meets_the_int8_bar(
    mpnet_auto_bundle: Path, fp32_vectors: npt.NDArray[np.float32],
    reference: dict[str, npt.NDArray[np.generic]]
) -> None:
    """``attention="auto"`` from 9 tokens on: int8 attention (QKᵀ and P·V in int8, 768 wide,
    12 heads, relative position biases) for most of the corpus still meets the int8 bar, and a
    text shorter than the threshold gets exactly the fp32-attention bundle's bits."""
    seqs = _seqs(reference)
    got = _encode_corpus(mpnet_auto_bundle, seqs)
    short = np.array([len(s) < AUTO_MIN_TOKENS for s in seqs])
    assert short.sum() == 86, short.sum()  # of 262: 176 texts get int8 attention
    assert np.array_equal(got[short], fp32_vectors[short])
    assert not np.array_equal(got[~short], fp32_vectors[~short])  # int8 attention did run
    cos = _cosines(got, reference)
    # measured: min 0.99823, mean 0.99957 (fp32 attention everywhere: 0.99823 / 0.99966)
    assert cos.min() >= 0.995 and cos.mean() >= 0.999, (cos.min(), cos.mean())


def test_native_and_wasm_give_the_same_bits(
    mpnet_bundle: Path, reference: dict[str, npt.NDArray[np.generic]]
) -> None:
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    from edgembed.backends.native import NativeBackend
    from edgembed.backends.wasm import WasmBackend

    seqs = [s for s in _seqs(reference) if len(s) <= 40][:8]
    native = NativeBackend(mpnet_bundle, threads=2).encode(seqs)
    assert np.array_equal(WasmBackend(mpnet_bundle, variant="simd128").encode(seqs), native)
