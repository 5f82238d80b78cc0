"""Sparse vectors: the SparseEmbedding representation (with numpy and without), and
``Embedder.embed_sparse`` end to end on the tiny SPLADE models of tests/fixtures/models against
sentence-transformers' SparseEncoder (references by models/tiny/make_head_references.py)."""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
import pytest

from edgembed import Embedder, InputError, SparseEmbedding
from edgembed.backends.native import NativeBackend
from edgembed.sparse import from_dense_rows, sparse_dot
from tiny_models import head_reference, model_dir, texts

FP32_ABS = 2e-5


def test_representation_with_numpy() -> None:
    block = np.array([[0.0, 2.0, 0.0, 0.5, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
    a, empty = from_dense_rows(block)
    assert a.indices.dtype == np.int32 and a.values.dtype == np.float32
    assert (a.indices.tolist(), a.values.tolist(), a.dim, len(a)) == ([1, 3, 4], [2.0, 0.5, 1.0],
                                                                      5, 3)
    assert len(empty) == 0 and empty.to_dict() == {}
    assert a.to_dict() == {1: 2.0, 3: 0.5, 4: 1.0}
    assert a.to_tei() == [{"index": 1, "value": 2.0}, {"index": 3, "value": 0.5},
                          {"index": 4, "value": 1.0}]
    np.testing.assert_array_equal(a.to_dense(), block[0])
    b = from_dense_rows(np.array([[1.0, 1.0, 0.0, 4.0, 0.0]], np.float32))[0]
    assert a.dot(b) == sparse_dot(b, a) == 2.0 + 2.0
    assert a.top(2).to_dict() == {1: 2.0, 4: 1.0} and a.top(5) is a
    capped = from_dense_rows(block, max_active_dims=1)[0]
    assert capped.to_dict() == {1: 2.0}
    ties = from_dense_rows(np.array([[1.0, 3.0, 1.0, 1.0]], np.float32), max_active_dims=2)[0]
    assert ties.to_dict() == {0: 1.0, 1: 3.0}  # equal values: the lower id is kept
    with pytest.raises(ValueError, match="different sizes"):
        a.dot(SparseEmbedding(np.array([0], np.int32), np.array([1.0], np.float32), 3))


def test_representation_without_numpy_is_the_same() -> None:
    """Pyodide has no numpy offline: the engine's array('f') rows give array('i') / array('f')
    vectors with the same entries, and the same ops."""
    rng = np.random.default_rng(0)
    block = np.maximum(rng.normal(-1.0, 1.0, (6, 40)), 0).astype(np.float32)
    rows = [array("f", r.tobytes()) for r in block]
    for top in (None, 5):
        with_np = from_dense_rows(block, top)
        without = from_dense_rows(rows, top)
        for x, y in zip(with_np, without, strict=True):
            assert isinstance(y.indices, array) and y.indices.typecode == "i"
            assert isinstance(y.values, array) and y.values.typecode == "f"
            assert x == y and x.to_dict() == y.to_dict()
            assert list(y.top(3).indices) == x.top(3).indices.tolist()
            assert abs(x.dot(with_np[0]) - y.dot(without[0])) == 0.0


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sparse-home")


@pytest.fixture()
def sp_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("EDGEMBED_HOME", str(home))
    monkeypatch.setattr("edgembed.embedder.cuda_state", lambda _r: (False, "no GPU in tests"))
    return home


@pytest.mark.parametrize("name", ["splade-bert", "splade-bert-sum-log1p", "splade-bert-legacy",
                                  "splade-distilbert"])
def test_embed_sparse_is_sparse_encoder(name: str, sp_home: Path) -> None:
    e = Embedder.load(model_dir(name), variant="fp32", backend="onnx")
    ref = head_reference(name)
    assert ref.vectors is not None
    got = e.embed_sparse(texts())
    assert len(got) == len(texts()) and all(v.dim == e.dim == ref.vectors.shape[1] for v in got)
    dense = np.stack([v.to_dense() for v in got])
    assert np.max(np.abs(dense - ref.vectors)) <= FP32_ABS * max(1.0, float(ref.vectors.max()))
    for v in got:
        assert np.all(np.diff(v.indices) > 0) and np.all(v.values > 0)
    assert e.count_tokens(texts()) == ref.token_counts
    assert (e.manifest.task, e.manifest.head["pooling"]) == ("sparse", ref.raw["pooling_strategy"])


def test_a_text_alone_is_the_same_in_any_batch(sp_home: Path) -> None:
    """Batch invariance as onnxruntime gives it (padding changes its float summation order):
    every value within 1e-5 of the largest, the same entries but for those that small."""
    for variant in ("fp32", "int8"):
        e = Embedder.load(model_dir("splade-bert"), variant=variant, backend="onnx")
        items = texts()[:60]
        together = e.embed_sparse(items)
        alone = [e.embed_sparse(t)[0] for t in items]
        small = e.embed_sparse(items, max_batch_tokens=40)
        for x, y, z in zip(together, alone, small, strict=True):
            a, b, c = x.to_dense(), y.to_dense(), z.to_dense()
            tol = 1e-5 * max(1.0, float(a.max()))
            assert np.max(np.abs(a - b)) <= tol and np.max(np.abs(a - c)) <= tol
            assert np.all((a > tol) <= (b > 0)) and np.all((b > tol) <= (a > 0))


def test_options(sp_home: Path) -> None:
    e = Embedder.load(model_dir("splade-bert"), variant="fp32", backend="onnx")
    text = texts()[30]
    full = e.embed_sparse(text)[0]
    assert len(full) > 10
    top = e.embed_sparse(text, max_active_dims=10)[0]
    assert top == full.top(10) and len(top) == 10
    prompted = e.embed_sparse(text, prefix="query: ")[0]
    assert prompted == e.embed_sparse("query: " + text)[0] and prompted != full
    decoded = e.decode_sparse(full, top_k=4)
    weights = [w for _, w in decoded]
    assert len(decoded) == 4 and weights == sorted(weights, reverse=True)
    assert e.embed_sparse([]) == []
    with pytest.raises(InputError, match="max_active_dims must be a positive integer"):
        e.embed_sparse("x", max_active_dims=0)
    with pytest.raises(InputError, match="splade-bert is a sparse \\(SPLADE\\) model: "
                                         "embed_sparse gives its vectors"):
        e.embed("x")
    dense = Embedder.load(model_dir("bert-h48-mean"), variant="fp32", backend="onnx")
    with pytest.raises(InputError, match="is an embedding model, not a sparse one"):
        dense.embed_sparse("x")


def test_a_bare_checkpoint_is_sparse_when_the_caller_says(sp_home: Path) -> None:
    """splade-bert-bare has no sentence-transformers files (as SPLADE-tiny): read as is it is a
    mean-pooled BERT, as sentence-transformers would wrap it; its catalog entry says sparse."""
    plain = Embedder.load(model_dir("splade-bert-bare"), variant="fp32", backend="onnx")
    assert plain.task == "embedding" and plain.dim == 32


def test_auto_takes_the_engine_or_fp32_and_int8_goes_to_the_engine(sp_home: Path) -> None:
    """Sparse models run where their quality bar holds: auto takes the native engine when it
    loads (its SPLADE bundle is the rescored one) and onnxruntime takes fp32, not its int8;
    int8, named, runs where int8 runs best (the native engine when it loads, as for
    embeddings; test_engine_rerank_sparse.py checks its vectors)."""
    from edgembed.backends.native import native_available

    onnx = Embedder.load(model_dir("splade-bert"), backend="onnx")
    assert (onnx.backend, onnx.variant) == ("onnx", "fp32")
    assert onnx.backend_reason == ("sparse models default to fp32 on onnxruntime (its int8 "
                                   "misses their quality bar, see docs/quantization.md)")
    auto = Embedder.load(model_dir("splade-bert"))
    if native_available()[0]:
        assert (auto.backend, auto.variant) == ("native", "int8")
        assert auto.backend_reason.startswith("auto: native engine")
        assert auto.backend_reason.count("rescored SPLADE bundle") == 1, auto.backend_reason
        assert auto.backend_reason.endswith("int8 decoder made exact: it meets their quality "
                                            "bar, see docs/quantization.md)")
        assert np.array_equal(auto.embed_sparse(["a cat sat"])[0].to_dense(),
                              Embedder.load(model_dir("splade-bert"), backend="native")
                              .embed_sparse(["a cat sat"])[0].to_dense())
    else:
        assert (auto.backend, auto.variant) == ("onnx", "fp32")
        assert auto.backend_reason.startswith("auto: sparse models default to fp32")
    int8 = Embedder.load(model_dir("splade-bert"), variant="int8")
    engine = "native" if native_available()[0] else "onnx"
    assert (int8.backend, int8.variant) == (engine, "int8")
    if engine == "native":  # docs/quantization.md: int8 "gets the rescored bundle there too"
        assert Path(int8._backend.bundle_path).name == "splade-bert.rescored.emb"  # type: ignore[attr-defined]
        rescored = NativeBackend(sp_home / "models" / "splade-bert" / "splade-bert.rescored.emb",
                                 threads=1)
        ids = int8.tokenize(texts()[:8])
        want = rescored.sparse(ids)[0]
        got = np.stack([v.to_dense() for v in int8.embed_sparse(texts()[:8])])
        assert got.tobytes() == want.tobytes()
        rescored.close()
    from edgembed.export import export_bundle
    from edgembed.export.bundle import read_bundle_header

    # the engine bundle of a SPLADE model holds its masked-LM head, rescored by default (the
    # one the engine loaded above when it runs natively)
    record, cached = export_bundle(model_dir("splade-bert"))
    assert (record["sparse"], cached.name) == ("rescored", "splade-bert.rescored.emb")
    _, path = export_bundle(model_dir("splade-bert"), out=sp_home / "x.emb")
    meta = read_bundle_header(path).metadata
    assert (meta["head"], meta["sparse.pooling"], meta["vocab_size"]) == ("mlm", "max", "1000")
    assert meta["quantization"] == "fp32-rescored"



def test_an_int8_bundle_in_the_cache_is_replaced_by_the_rescored_one(sp_home: Path) -> None:
    """A SPLADE model whose cache holds its int8 engine bundle (``embed bundle --sparse int8``,
    or one written before the rescored scheme) runs the rescored one on the engine: auto keeps
    the engine for sparse models because the rescored bundle meets their bar, the int8 one
    does not."""
    from edgembed.backends.native import native_available
    from edgembed.export import export_bundle
    from edgembed.manifest import Manifest
    from edgembed.sources import pull

    if not native_available()[0]:
        pytest.skip(f"needs the native engine: {native_available()[1]}")
    record, _ = export_bundle(model_dir("splade-bert"), sparse="int8")
    assert record["sparse"] == "int8"
    auto = Embedder.load(model_dir("splade-bert"))
    assert auto.backend == "native"
    entry = Manifest.load(pull(model_dir("splade-bert")).dir).bundles["int8"]
    assert (entry["sparse"], Path(str(entry["file"])).name) == (
        "rescored", "splade-bert.rescored.emb")
    assert auto.manifest.bundles["int8"] == entry  # the rewrite, in the loaded manifest too
    rescored = Embedder.load(Path(str(entry["path"])))  # the bundle file, on the wasm engine
    got, want = auto.embed_sparse(texts()[:8]), rescored.embed_sparse(texts()[:8])
    for a, b in zip(got, want, strict=True):  # the same bits on every host
        assert np.array_equal(a.indices, b.indices) and np.array_equal(a.values, b.values)


def test_embed_bundle_sparse_rescored(sp_home: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``embed bundle MODEL --sparse rescored``: the fp32 encoder and word table, the int8
    decoder (docs/bundle-format.md), recorded in the manifest; the engine gives
    sentence-transformers' fp32 vectors from it (test_sparse_real.py holds SPLADE-tiny's to the
    bar). The option is for SPLADE models only."""
    from edgembed.backends.native import NativeBackend, native_available
    from edgembed.cli import main
    from edgembed.export import export_bundle
    from edgembed.export.bundle import read_bundle_header

    out = tmp_path / "r.emb"
    assert main(["bundle", str(model_dir("splade-bert")), "--sparse", "rescored",
                 "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}\t")
    header = read_bundle_header(out)
    assert header.metadata["quantization"] == "fp32-rescored"
    t = header.tensors
    assert (t["embeddings.word"]["dtype"], t["layers.0.attention.qkv.weight"]["dtype"],
            t["mlm.transform.weight"]["dtype"], t["mlm.decoder.q"]["dtype"]) == (
                "F32", "F32", "F32", "I8")
    assert "embeddings.word.q" not in t and "mlm.decoder.weight" not in t  # tied: the word table
    record, cached = export_bundle(model_dir("splade-bert"))  # the recorded one, not rewritten
    assert (record["sparse"], record["scheme"], cached.name) == (
        "rescored", "fp32-rescored", "splade-bert.rescored.emb")
    record8, cached8 = export_bundle(model_dir("splade-bert"), sparse="int8")
    assert (record8["sparse"], cached8.name) == ("int8", "splade-bert.int8.emb")
    assert read_bundle_header(cached8).metadata["quantization"] == "int8-block32"
    with pytest.raises(InputError, match="not a SPLADE model: sparse='rescored' is for sparse"):
        export_bundle(model_dir("bert-h48-mean"), sparse="rescored")
    with pytest.raises(InputError, match="sparse 'fp16': choose one of int8, rescored"):
        export_bundle(model_dir("splade-bert"), sparse="fp16")
    if not native_available()[0]:
        pytest.skip("native engine not built")
    ref = head_reference("splade-bert").vectors
    assert ref is not None
    be = NativeBackend(out, threads=2)
    ids = be.tokenize(texts())
    got = np.concatenate([be.sparse(ids[i:i + 16])[0] for i in range(0, len(ids), 16)])
    # measured: within 1.0e-5 of sentence-transformers' weights (the int8 bundle: 0.40)
    assert np.max(np.abs(got - ref)) <= 5e-5

def capped_copy(dest: Path, k: int, name: str = "splade-bert") -> Path:
    """``name``'s directory with ``max_active_dims: k`` in config_sentence_transformers.json,
    where sentence-transformers' SparseEncoder saves it (and reads it as its default)."""
    import json
    import shutil

    out = dest / f"{name}-top{k}"
    shutil.copytree(model_dir(name), out)
    cfg_path = out / "config_sentence_transformers.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["max_active_dims"] = k
    cfg_path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out


def reference_top(row: np.ndarray, k: int) -> list[int] | None:
    """The ids of ``row``'s k largest positive weights, ascending; None when the k-th and the
    next are too close (2e-4) for fp32 rounding to settle which one is kept."""
    order = np.argsort(-row, kind="stable")
    if np.count_nonzero(row > 0) > k and row[order[k - 1]] - row[order[k]] < 2e-4:
        return None
    return sorted(int(j) for j in order[:k] if row[j] > 0)


def test_the_models_max_active_dims(sp_home: Path, tmp_path: Path) -> None:
    """A SparseEncoder saved with max_active_dims keeps that many weights by default, as
    sentence-transformers does (its top-k of the full vector); an explicit cap overrides it."""
    e = Embedder.load(capped_copy(tmp_path, 6), variant="fp32", backend="onnx")
    assert e._manifest.head["max_active_dims"] == 6  # recorded by export, from the model dir
    ref = head_reference("splade-bert")
    assert ref.vectors is not None
    got = e.embed_sparse(texts())
    checked = 0
    for v, row in zip(got, ref.vectors, strict=True):
        want = reference_top(row, 6)
        assert len(v) == min(6, int(np.count_nonzero(row > 1e-4))) or want is None
        if want is not None:
            assert v.indices.tolist() == want
            np.testing.assert_allclose(v.values, row[want], atol=FP32_ABS)
            checked += 1
    assert checked >= 0.9 * len(got)
    wider = e.embed_sparse(texts()[30], max_active_dims=10)[0]
    full = Embedder.load(model_dir("splade-bert"), variant="fp32", backend="onnx")
    assert wider == full.embed_sparse(texts()[30])[0].top(10) and len(wider) == 10
