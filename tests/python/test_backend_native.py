"""The native CPU backend (python/edgembed/backends/native.py) on all-MiniLM-L6-v2.

Tokenizer ids against Hugging Face ``tokenizers`` (the reference fixture), vectors against the
wasm engine (bit-identical expected), the int8 accuracy bar against sentence-transformers,
agreement with onnxruntime running the exported int8 model, batch invariance, every thread count
and kernel set giving the same bits, and the refusals: a damaged library, one for another
architecture, bad arguments. Needs build/native (built here when missing, with the system C
compiler).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from edgembed.backends.native import (
    NativeBackend,
    check_library_file,
    find_library,
    load_library,
    native_available,
)
from edgembed.errors import (
    BackendUnavailable,
    BundleError,
    EngineError,
    InputError,
    InputTooLong,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def library(native_library: Path) -> Path:
    return native_library


@pytest.fixture(scope="session")
def backend(library: Path, bundle: Path) -> NativeBackend:
    return NativeBackend(bundle, threads=2, library=library)


def cosines(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos: npt.NDArray[np.float64] = (a64 * b64).sum(1) / np.linalg.norm(a64, axis=1) \
        / np.linalg.norm(b64, axis=1)
    return cos


def test_describes_its_kernels(backend: NativeBackend, library: Path) -> None:
    assert backend.name == "native" and backend.dim == 384 and backend.max_length == 256
    assert backend.threads == 2
    assert backend.kernels == backend.available_kernels[0]
    assert backend.available_kernels[-1] == "reference"
    assert backend.kernels in repr(backend) and "threads=2" in repr(backend)
    assert "2 threads" in backend.describe() and str(library.resolve()) in backend.describe()
    ok, why = native_available(library)
    if backend.kernels == "reference":
        assert not ok and "reference only" in why
    else:
        assert ok and backend.kernels in why


def test_tokenizer_matches_hugging_face(backend: NativeBackend, reference: dict[str, Any]) -> None:
    assert backend.tokenize(reference["texts"]) == reference["token_ids"]
    assert backend.count_tokens(reference["texts"]) == [len(s) for s in reference["token_ids"]]


def test_int8_bar_against_sentence_transformers(
    backend: NativeBackend, reference: dict[str, Any]
) -> None:
    got = backend.encode(reference["token_ids"])
    want = np.asarray(reference["embeddings"], dtype=np.float32)
    cos = cosines(got, want)
    assert cos.min() >= 0.995, f"min cosine {cos.min():.5f}"
    assert cos.mean() >= 0.999, f"mean cosine {cos.mean():.5f}"


def test_agrees_with_onnxruntime_as_closely_as_onnxruntime_agrees_with_itself(
    backend: NativeBackend, exported_model_dir: Path, reference: dict[str, Any]
) -> None:
    """The engine against onnxruntime running the exported int8 model (the same weights and
    scheme), every reference text alone.

    int8 activations make the network discontinuous: a last-bit float difference anywhere
    before a quantizer can move one activation to the next code, and that difference grows
    layer by layer. onnxruntime therefore disagrees with itself between its own graph
    optimization levels (fusing the bias into MatMulNBits changes a few last bits) by as much
    as the engine disagrees with it; agreement only a bit-identical implementation could
    exceed. Measured on x86-64 with onnxruntime 1.32: engine vs onnxruntime min 0.99960, mean
    0.99990; onnxruntime vs itself min 0.99958, mean 0.99990 (docs/quantization.md).
    """
    import onnxruntime as ort

    def session(level: ort.GraphOptimizationLevel) -> ort.InferenceSession:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.graph_optimization_level = level
        return ort.InferenceSession(str(exported_model_dir / "model.int8.onnx"), options,
                                    providers=["CPUExecutionProvider"])

    def run_alone(s: ort.InferenceSession) -> npt.NDArray[np.float32]:
        rows = []
        for seq in reference["token_ids"]:
            ids = np.asarray([seq], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            rows.append(s.run(["sentence_embedding"], feed)[0][0])
        return np.stack(rows)

    fused = run_alone(session(ort.GraphOptimizationLevel.ORT_ENABLE_ALL))  # the default
    plain = run_alone(session(ort.GraphOptimizationLevel.ORT_DISABLE_ALL))
    engine = np.stack([backend.encode([s])[0] for s in reference["token_ids"]])
    ort_self, ours = cosines(fused, plain), cosines(engine, fused)
    assert ours.min() >= 0.9995 and ours.mean() >= 0.9998, (ours.min(), ours.mean())
    # as close as onnxruntime's own two graphs are to each other, within a small margin
    assert ours.min() >= ort_self.min() - 1e-4, (ours.min(), ort_self.min())
    assert ours.mean() >= ort_self.mean() - 2e-5, (ours.mean(), ort_self.mean())


def test_same_vectors_as_the_wasm_engine(
    backend: NativeBackend, bundle: Path, reference: dict[str, Any]
) -> None:
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (REPO / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    seqs = [s for s in reference["token_ids"] if len(s) <= 80][:48]
    wasm = WasmBackend(bundle, variant="simd128").encode(seqs)
    native = backend.encode(seqs)
    assert cosines(native, wasm).min() >= 0.99999
    assert np.array_equal(native, wasm)  # the same arithmetic in the same order: the same bits


def test_int8_attention_bar_invariance_and_wasm_bits(
    library: Path, hf_model_dir: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    """int8 attention (``attention="int8"``): at the int8 bar against sentence-transformers
    (measured: min 0.99773, mean 0.99933; fp32 attention 0.99825, 0.99946), every text the
    same bits alone and in its batch, and the same bits in both wasm builds."""
    from edgembed.export.bundle import write_bundle

    path = tmp_path / "int8-attention.emb"
    assert write_bundle(hf_model_dir, path, name="all-minilm-l6-v2",
                        attention="int8")["attention"] == "int8"
    backend = NativeBackend(path, threads=2, library=library)
    seqs = reference["token_ids"]
    got = backend.encode(seqs)
    cos = cosines(got, np.asarray(reference["embeddings"], dtype=np.float32))
    assert cos.min() >= 0.995 and cos.mean() >= 0.999, (cos.min(), cos.mean())
    picks = [s for s in seqs if len(s) <= 80][:32]
    together = backend.encode(picks)
    assert all(np.array_equal(backend.encode([s])[0], together[i]) for i, s in enumerate(picks))
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (REPO / "build" / "wasm" / "edgembed-relaxed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    for variant in ("simd128", "relaxed"):
        assert np.array_equal(WasmBackend(path, variant=variant).encode(picks), together), variant


def test_offsets_match_hugging_face_on_both_engines(
    backend: NativeBackend, bundle: Path, hf_model_dir: Path, reference: dict[str, Any]
) -> None:
    """tokenize_offsets: the ids and character offsets of tokenizers (no padding, truncation at
    the bundle's max length), natively and in wasm alike."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(hf_model_dir / "tokenizer.json"))
    hf.no_padding()
    hf.enable_truncation(backend.max_length)
    texts = [*reference["texts"][:200], "Ünïcödé ﬁ ½ 日本語", "x[MASK]y  [SEP]", "é\u0301 \ud800 z"]
    want = [[(i, a, b) for i, (a, b) in zip(e.ids, e.offsets, strict=True)]
            for e in hf.encode_batch([t.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                                      for t in texts])]
    got = backend.tokenize_offsets(texts)
    assert got[:-1] == want[:-1]
    assert [t[0] for t in got[-1]] == [t[0] for t in want[-1]]  # a lone surrogate: 1 character
    long = ["word " * 300]  # 302 tokens with [CLS] and [SEP]
    with pytest.raises(InputTooLong, match="a text has 302 tokens") as native_error:
        backend.tokenize_offsets(long, truncate=False)
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (REPO / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    wasm = WasmBackend(bundle, variant="simd128")
    assert wasm.tokenize_offsets(texts) == got
    with pytest.raises(InputTooLong) as wasm_error:
        wasm.tokenize_offsets(long, truncate=False)
    assert str(wasm_error.value) == str(native_error.value)


@pytest.mark.parametrize("name", ["xlm-roberta-mean-prompts", "modernbert-mean"])
def test_offsets_of_unigram_and_bpe_bundles_on_both_engines(
    library: Path, tmp_path: Path, name: str
) -> None:
    """tokenize_offsets on the tiny XLM-RoBERTa (SentencePiece Unigram) and ModernBERT
    (byte-level BPE) models of tests/fixtures/models/, bundled by write_bundle: tokenizers' ids
    and character offsets on their reference texts and generated ones (characters outside the
    BMP among them), natively and in wasm alike."""
    from tokenizers import Tokenizer

    from edgembed.export.bundle import write_bundle
    from tiny_models import model_dir
    from tiny_models import texts as tiny_texts
    from tokenizer_texts import random_texts

    src = model_dir(name)
    path = tmp_path / f"{name}.emb"
    write_bundle(src, path)
    backend = NativeBackend(path, threads=1, library=library)
    hf = Tokenizer.from_file(str(src / "tokenizer.json"))
    hf.no_padding()
    hf.enable_truncation(backend.max_length)
    words = [w.lstrip("\u2581\u0120") for w in hf.get_vocab() if w.strip("\u2581\u0120")]
    texts = [*tiny_texts()[:100], *random_texts(300, 16, sorted(words)),
             "emoji 😀 and 𝒳 math, 🇫🇷 flags", "😀😀 x😀y", "日本語 𠀋 CJK Ext B", "<mask> 😀 é"]
    assert sum(any(ord(c) > 0xFFFF for c in t) for t in texts) > 20
    want = [[(i, a, b) for i, (a, b) in zip(e.ids, e.offsets, strict=True)]
            for e in hf.encode_batch(texts)]
    got = backend.tokenize_offsets(texts)
    assert got == want
    backend.close()
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (REPO / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    assert WasmBackend(path, variant="simd128").tokenize_offsets(texts) == want


def test_batch_invariance(backend: NativeBackend, reference: dict[str, Any]) -> None:
    rng = np.random.default_rng(11)
    seqs = reference["token_ids"]
    picks = [seqs[i] for i in rng.choice(len(seqs), size=30, replace=False)]
    alone = np.stack([backend.encode([s])[0] for s in picks])
    for cut in (1, 7, 30):
        together = np.concatenate([backend.encode(picks[i : i + cut]) for i in range(0, 30, cut)])
        assert np.array_equal(alone, together)


def test_thread_counts_and_kernel_sets_agree(
    library: Path, bundle: Path, reference: dict[str, Any]
) -> None:
    seqs = reference["token_ids"][:60]
    small = [s for s in seqs if len(s) <= 12][:5]  # a few tokens: the column split
    base = NativeBackend(bundle, threads=1, library=library)
    want, want_small = base.encode(seqs), base.encode(small)
    assert base.threads == 1
    for kernels in base.available_kernels:
        for threads in (1, 2, 3):
            if kernels == "reference" and threads > 1:
                continue
            b = NativeBackend(bundle, threads=threads, kernels=kernels, library=library)
            assert b.kernels == kernels and b.threads == threads
            assert np.array_equal(b.encode(seqs), want), (kernels, threads)
            assert np.array_equal(np.concatenate([b.encode([s]) for s in small]), want_small)
            b.close()
    base.close()


def test_packed_input_and_chunking(library: Path, bundle: Path, reference: dict[str, Any]) -> None:
    b = NativeBackend(bundle, threads=2, library=library, max_tokens=300)
    seqs = [s for s in reference["token_ids"] if len(s) > 100][:6]  # > 300 tokens: several calls
    ids = np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs])
    lengths = np.asarray([len(s) for s in seqs], dtype=np.int32)
    packed = b.encode_packed(ids, lengths)
    assert packed.shape == (6, 384) and packed.dtype == np.float32
    assert np.array_equal(packed, b.encode(seqs))
    assert np.array_equal(packed[2], b.encode([seqs[2]])[0])
    assert b.encode([]).shape == (0, 384)
    with pytest.raises(InputError):
        b.encode_packed(ids[:-1], lengths)
    b.close()
    b.close()  # twice is fine


def test_one_call_encode_is_run_packed_to_the_bit(
    library: Path, bundle: Path, reference: dict[str, Any]
) -> None:
    # encode() of a batch that fits one engine call goes through buffers made at load; every
    # result must be the general path's (run_packed), whatever came before it in the buffers
    b = NativeBackend(bundle, threads=2, library=library, max_tokens=300)
    seqs = reference["token_ids"]
    long = [s for s in seqs if len(s) > 100]
    batches = [[seqs[0]], seqs[1:9], long[:2], [long[0]], [seqs[3]], [seqs[0]] * 30,
               [[101, 102]], long[:4]]  # long[:4]: over 300 tokens, several calls
    for batch in batches:
        ids = np.fromiter((t for s in batch for t in s), dtype=np.int32)
        lengths = np.asarray([len(s) for s in batch], dtype=np.int32)
        want = b.run_packed(ids, lengths)[0]
        got = b.encode(batch)
        assert got.shape == (len(batch), 384) and got.dtype == np.float32
        assert np.array_equal(got, want)
        assert np.array_equal(b.encode([tuple(s) for s in batch]), want)  # any sequences
    first = b.encode([seqs[0]])
    assert not np.shares_memory(first, b.encode([seqs[0]]))  # a new array every call
    # the refusals are the general path's, and a refused call leaves the next one right
    with pytest.raises(EngineError):
        b.encode([[101, 10 ** 6, 102]])  # an id past the vocabulary: the engine refuses it
    with pytest.raises(InputTooLong):
        b.encode([seqs[0], [101] * 257])
    with pytest.raises(InputError):
        b.encode([seqs[0], []])
    with pytest.raises((OverflowError, ValueError)):
        b.encode([[101, 2 ** 40, 102]])
    assert np.array_equal(b.encode([seqs[0]]), first)
    b.close()
    with pytest.raises(EngineError, match="closed"):
        b.encode([seqs[0]])


def test_errors(backend: NativeBackend, library: Path, bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(InputTooLong):
        backend.tokenize(["word " * 300], truncate=False)
    assert backend.count_tokens(["word " * 300], truncate=False) == [302]
    assert backend.count_tokens(["word " * 300]) == [256]
    assert backend.tokenize(["\udcff broken \ud800"])[0][0] == 101  # lone surrogates do not crash
    with pytest.raises(InputTooLong):
        backend.encode([[101] * 257])
    with pytest.raises(InputError):
        backend.encode([[]])
    bad = tmp_path / "bad.emb"
    bad.write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
    with pytest.raises(BundleError, match="not an edgembed bundle"):
        NativeBackend(bad, library=library)
    for threads in (0, 65, 1.5, True):
        with pytest.raises(InputError):
            NativeBackend(bundle, threads=threads, library=library)  # type: ignore[arg-type]
    with pytest.raises(BackendUnavailable, match="not available here"):
        NativeBackend(bundle, kernels="no-such-kernels", library=library)


def test_a_bad_library_is_refused_clearly(library: Path, tmp_path: Path) -> None:
    garbage = tmp_path / "libedgembed.so"
    garbage.write_bytes(b"this is not a library" * 10)
    with pytest.raises(BackendUnavailable, match="not a shared library"):
        load_library(garbage)
    ok, why = native_available(garbage)
    assert not ok and "not a shared library" in why

    other = tmp_path / "other-arch.so"  # a valid header for the architecture this machine is not
    head = bytearray(library.read_bytes()[:4096])
    machine = int.from_bytes(head[18:20], "little")
    head[18:20] = (0xB7 if machine == 0x3E else 0x3E).to_bytes(2, "little")
    other.write_bytes(bytes(head))
    with pytest.raises(BackendUnavailable, match="was built for"):
        check_library_file(other)

    cut = tmp_path / "truncated.so"  # the right header, the rest missing (a partial download)
    cut.write_bytes(library.read_bytes()[:20000])
    with pytest.raises(BackendUnavailable, match="damaged"):
        load_library(cut)

    flipped = tmp_path / "flipped" / "libedgembed.so"  # one byte changed, sha256 recorded beside it
    flipped.parent.mkdir()
    data = bytearray(library.read_bytes())
    (flipped.parent / "libedgembed.so.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    data[len(data) // 2] ^= 0x40
    flipped.write_bytes(bytes(data))
    with pytest.raises(BackendUnavailable, match="damaged"):
        load_library(flipped)

    notlib = tmp_path / "notlib.so"  # a whole, valid ELF file that dlopen cannot load
    notlib.write_bytes((REPO / "build" / "native" / "test_native").read_bytes()
                       if (REPO / "build" / "native" / "test_native").is_file() else b"")
    if notlib.stat().st_size:
        with pytest.raises(BackendUnavailable, match=r"cannot load|older or foreign"):
            load_library(notlib)

    with pytest.raises(BackendUnavailable, match="does not exist"):
        find_library(tmp_path / "missing.so")


def test_library_found_from_the_environment(library: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGEMBED_NATIVE_LIB", str(library))
    assert find_library() == library
    monkeypatch.delenv("EDGEMBED_NATIVE_LIB")
    assert find_library().name == "libedgembed.so"


def test_cross_built_library_gives_the_same_vectors(
    backend: NativeBackend, bundle: Path, reference: dict[str, Any]
) -> None:
    """The zig-built library (runtime/build.sh cross), when present, agrees with the gcc one."""
    import platform

    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                        platform.machine().lower())
    cross = REPO / "build" / f"native-{arch}" / "libedgembed.so"
    if not cross.is_file():
        pytest.skip(f"{cross} not built (runtime/build.sh cross)")
    seqs = reference["token_ids"][:20]
    other = NativeBackend(bundle, threads=1, library=cross)
    assert np.array_equal(other.encode(seqs), backend.encode(seqs))
    other.close()


def test_auto_attention_by_each_texts_own_length(
    library: Path, hf_model_dir: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    """``attention="auto"``: a text of at least attention.int8_min_tokens tokens gets int8
    attention's bits, a shorter one fp32's, by its own length alone or in any batch; at the int8
    bar against sentence-transformers (the reference fixture); the same bits in wasm."""
    from edgembed.export.bundle import write_bundle

    paths = {k: tmp_path / f"{k}.emb" for k in ("fp32", "int8", "auto")}
    for k, p in paths.items():
        write_bundle(hf_model_dir, p, name="all-minilm-l6-v2", attention=k,
                     attention_min_tokens=32 if k == "auto" else None)
    got = {k: NativeBackend(p, threads=2, library=library) for k, p in paths.items()}
    seqs = reference["token_ids"]
    long = [s for s in seqs if len(s) >= 32][:8]
    short = [s for s in seqs if len(s) < 32][:8]
    assert long and short
    mixed = [x for pair in zip(long, short, strict=True) for x in pair]
    auto = got["auto"].encode(mixed)
    assert np.array_equal(auto[0::2], got["int8"].encode(long))
    assert np.array_equal(auto[1::2], got["fp32"].encode(short))
    assert all(np.array_equal(got["auto"].encode([s])[0], auto[i]) for i, s in enumerate(mixed))
    cos = cosines(got["auto"].encode(seqs), np.asarray(reference["embeddings"], dtype=np.float32))
    assert cos.min() >= 0.995 and cos.mean() >= 0.999, (cos.min(), cos.mean())
    with pytest.raises(InputError, match="attention_min_tokens"):
        write_bundle(hf_model_dir, tmp_path / "x.emb", attention="int8", attention_min_tokens=8)
    with pytest.raises(InputError, match=r"1 \.\. 65536"):
        write_bundle(hf_model_dir, tmp_path / "x.emb", attention="auto", attention_min_tokens=0)
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (REPO / "build" / "wasm" / "edgembed-relaxed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    for variant in ("simd128", "relaxed"):
        assert np.array_equal(WasmBackend(paths["auto"], variant=variant).encode(mixed), auto)
