"""The Embedder against the sentence-transformers reference, and its options and contracts."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgembed import BackendUnavailable, InputError, InputTooLong, InvalidModelDir
from edgembed.backends.choice import CPU_BATCH_TOKENS, CUDA_BATCH_TOKENS, choose_backend
from edgembed.embedder import Embedder, Precision, plan_batches
from edgembed.output.arrays import output_layout, quantize_embeddings
from edgembed.prepare import _export

NO_NATIVE = (False, "the native engine (libedgembed.so) is not in this installation")
NO_CUDA = (False, "onnxruntime has no CUDA provider (pip install 'edgembed[cuda]')")
LONG = "word " * 400


@pytest.fixture(scope="module")
def ref_vectors(reference: dict[str, Any]) -> np.ndarray:
    return np.asarray(reference["embeddings"], dtype=np.float32)


@pytest.fixture(scope="module")
def int8(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="int8", backend="onnx")


@pytest.fixture(scope="module")
def fp32(exported_model_dir: Path) -> Embedder:
    return Embedder.load(exported_model_dir, variant="fp32", backend="onnx")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    cos: np.ndarray = np.sum(a * b, axis=1)
    return cos


# --- loading and properties ---


def test_load_by_directory(int8: Embedder, exported_model_dir: Path) -> None:
    assert (int8.dim, int8.max_length, int8.model_name) == (384, 256, "all-minilm-l6-v2")
    assert (int8.variant, int8.backend, int8.backend_reason) == ("int8", "onnx", "")
    assert int8.model_dir == exported_model_dir
    assert int8.max_batch_tokens == CPU_BATCH_TOKENS
    assert repr(int8) == ("Embedder(model='all-minilm-l6-v2', variant='int8', backend='onnx', "
                          "dim=384)")


def test_load_by_name_with_auto_backend(
    edgembed_home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EDGEMBED_HOME", str(edgembed_home))
    monkeypatch.setattr("edgembed.embedder.cuda_state", lambda _requested: NO_CUDA)
    monkeypatch.setattr("edgembed.embedder.native_state", lambda _requested: NO_NATIVE)
    with caplog.at_level(logging.INFO, logger="edgembed"):
        e = Embedder.load()
    assert caplog.records == []  # exported already: nothing to announce
    assert (e.model_name, e.variant, e.backend) == ("all-minilm-l6-v2", "int8", "onnx")
    assert e.backend_reason.startswith("auto: CPU because onnxruntime has no CUDA provider")
    assert e.backend_reason.endswith(f"no native engine: {NO_NATIVE[1]}")
    assert "variant='int8'" in repr(e) and "backend='onnx'" in repr(e)
    assert "reason=\"auto: CPU because" in repr(e)


def test_load_the_source_folder_means_the_model(exported_model_dir: Path) -> None:
    e = Embedder.load(exported_model_dir / "source", variant="fp32", backend="onnx")
    assert e.model_dir == exported_model_dir and e.variant == "fp32"


def test_load_rejects_bad_options(exported_model_dir: Path) -> None:
    with pytest.raises(InputError, match=r"unknown variant 'int3'.*fp32, int8, int4, fp16"):
        Embedder.load(exported_model_dir, variant="int3", backend="onnx")
    with pytest.raises(InputError, match="unknown backend 'tpu'"):
        Embedder.load(exported_model_dir, backend="tpu")
    with pytest.raises(InputError, match="threads must be a positive integer"):
        Embedder.load(exported_model_dir, backend="onnx", threads=0)


def test_missing_variant_of_a_copied_model_dir(exported_model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "edgembed.json").write_bytes((exported_model_dir / "edgembed.json").read_bytes())
    with pytest.raises(InvalidModelDir, match=r"no 'int4' variant.*--variants int4"):
        Embedder.load(copy, variant="int4", backend="onnx")


def test_first_use_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A first pull+export announces itself: to ``progress`` if given, else as a log warning."""
    monkeypatch.setenv("EDGEMBED_HOME", str(tmp_path / "empty-home"))
    def fake_export(model: str, *, variants: list[str], progress: Any) -> tuple[Any, Path]:
        progress("building int8 graph")
        return SimpleNamespace(name="m", variants={"int8": object()}), tmp_path

    lines: list[str] = []
    _export("all-minilm-l6-v2", "int8", lines.append, fake_export)
    assert lines[0] == ("first use of all-minilm-l6-v2: pulling its files and exporting the "
                        "int8 variant into the cache (once; about a minute)")
    assert lines[1] == "building int8 graph"
    with caplog.at_level(logging.INFO, logger="edgembed"):
        _export("all-minilm-l6-v2", "int8", None, fake_export)
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert levels[0][0] == logging.WARNING and "first use of all-minilm-l6-v2" in levels[0][1]
    assert levels[1] == (logging.INFO, "building int8 graph")


# --- backend selection (no GPU here: the decisions are tested as data) ---


def test_choose_backend_auto_without_cuda() -> None:
    c = choose_backend("auto", None, cuda=NO_CUDA)
    assert (c.backend, c.variant, c.max_batch_tokens, c.device) == (
        "onnx", "int8", CPU_BATCH_TOKENS, "cpu")
    assert c.reason == f"auto: CPU because {NO_CUDA[1]}"


def test_choose_backend_auto_prefers_the_native_engine_for_int8() -> None:
    c = choose_backend("auto", None, cuda=NO_CUDA, native=(True, "native engine with avx2"))
    assert (c.backend, c.variant, c.device) == ("native", "int8", "cpu")
    assert c.reason == "auto: native engine with avx2"
    c = choose_backend("auto", "fp32", cuda=NO_CUDA, native=(True, "native engine"))
    assert c.backend == "onnx"
    assert choose_backend("auto", None, cuda=(True, "ok"), native=(True, "x")).backend == "cuda"
    assert choose_backend("native", None, cuda=NO_CUDA).backend == "native"
    with pytest.raises(InputError, match="int8"):
        choose_backend("native", "fp32", cuda=NO_CUDA)


def test_load_with_the_native_backend(
    edgembed_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import shutil

    from edgembed.backends.native import native_available

    ok, why = native_available()
    if not ok:
        pytest.skip(why)
    # a home of its own (hard links: instant), since loading writes the engine bundle there
    home = tmp_path / "home"
    shutil.copytree(edgembed_home, home, copy_function=os.link)
    monkeypatch.setenv("EDGEMBED_HOME", str(home))
    monkeypatch.setattr("edgembed.embedder.cuda_state", lambda _requested: NO_CUDA)
    auto = Embedder.load(backend="auto")
    assert auto.backend == "native" and auto.backend_reason.startswith("auto: native engine")
    onnx = Embedder.load(backend="onnx")
    texts = ["a short query", "and a somewhat longer passage about int8 kernels " * 5]
    cos = (auto.embed(texts) * onnx.embed(texts)).sum(1)
    # the same int8 scheme, different float rounding (docs/quantization.md, "In onnxruntime")
    assert cos.min() >= 0.9995


def test_choose_backend_auto_with_cuda() -> None:
    c = choose_backend("auto", None, cuda=(True, "ok"))
    assert (c.backend, c.variant, c.max_batch_tokens, c.device) == (
        "cuda", "fp16", CUDA_BATCH_TOKENS, "cuda")
    assert choose_backend("auto", "fp32", cuda=(True, "ok")).backend == "cuda"
    on_cpu = choose_backend("auto", "int8", cuda=(True, "ok"))
    assert (on_cpu.backend, on_cpu.variant) == ("onnx", "int8")
    assert "int8 variant runs on the CPU" in on_cpu.reason


def test_choose_backend_by_name() -> None:
    assert choose_backend("onnx", None, cuda=NO_CUDA).variant == "int8"
    assert choose_backend("ONNX", "fp32", cuda=NO_CUDA).backend == "onnx"
    assert choose_backend("cuda", None, cuda=(True, "ok")).variant == "fp16"
    assert choose_backend("cuda", "int8", cuda=(True, "ok")).variant == "int8"
    assert choose_backend("wasm", None, cuda=NO_CUDA).backend == "wasm"
    with pytest.raises(BackendUnavailable, match=r"'cuda' cannot run here.*edgembed\[cuda\]"):
        choose_backend("cuda", None, cuda=NO_CUDA)


def test_cuda_backend_fails_with_a_reason_here(exported_model_dir: Path) -> None:
    from edgembed.backends.onnx import cuda_available

    ok, why = cuda_available()
    if ok:
        pytest.skip("this machine has a usable GPU; benchmarks/cuda_check.py covers it")
    with pytest.raises(BackendUnavailable, match="backend 'cuda' cannot run here") as err:
        Embedder.load(exported_model_dir, backend="cuda")
    assert why in str(err.value)


def test_auto_falls_back_when_the_cuda_session_fails(
    exported_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CUDA looks usable but the provider cannot start: auto runs on the CPU and says why."""
    monkeypatch.setattr("edgembed.embedder.cuda_state", lambda _requested: (True, "present"))
    monkeypatch.setattr("edgembed.backends.onnx.cuda_available",
                        lambda: (False, "libcudnn.so.9 is missing"))
    e = Embedder.load(exported_model_dir, variant="fp32", backend="auto")
    assert (e.backend, e.variant) == ("onnx", "fp32")
    assert e.backend_reason.startswith("auto: CPU because backend 'cuda' cannot run here")
    assert "libcudnn.so.9 is missing" in repr(e)


def test_wasm_backend_runs_the_engine_or_says_what_to_do(
    exported_model_dir: Path, int8: Embedder
) -> None:
    try:
        wasm = Embedder.load(exported_model_dir, backend="wasm")
    except BackendUnavailable as exc:  # no wasmtime or no built engine in this installation
        assert re.search(r"embed bundle|wasmtime|wasm", str(exc))
        return
    assert wasm.backend == "wasm" and wasm.variant == "int8"
    texts = ["The quick brown fox", "", "naïve café ☕", "What is the capital of France?"]
    # The same int8 scheme as onnxruntime's MatMulNBits, computed by the C engine with other
    # float rounding: a last-bit difference can flip an activation's code and grow from there,
    # which short texts show most. onnxruntime differs from its own unoptimized graph as much
    # (docs/quantization.md, "In onnxruntime"; test_backend_native.py measures both).
    assert cosines(wasm.embed(texts), int8.embed(texts)).min() >= 0.9995


# --- vectors against the reference ---


def test_fp32_matches_sentence_transformers(
    fp32: Embedder, reference: dict[str, Any], ref_vectors: np.ndarray
) -> None:
    got = fp32.embed(reference["texts"])
    assert got.shape == (len(reference["texts"]), 384) and got.dtype == np.float32
    cos = cosines(got, ref_vectors)
    assert cos.min() >= 0.99999, reference["texts"][int(cos.argmin())]
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_int8_quality(
    int8: Embedder, reference: dict[str, Any], ref_vectors: np.ndarray
) -> None:
    cos = cosines(int8.embed(reference["texts"]), ref_vectors)
    assert cos.min() >= 0.995 and cos.mean() >= 0.999


def test_tokenize_matches_hf_tokenizers(int8: Embedder, reference: dict[str, Any]) -> None:
    assert int8.tokenize(reference["texts"]) == reference["token_ids"]
    assert int8.count_tokens(reference["texts"]) == [len(i) for i in reference["token_ids"]]
    assert int8.tokenize("hello") == [[101, 7592, 102]]
    assert int8.count_tokens([LONG]) == [256]
    assert int8.count_tokens([LONG], truncate=False) == [402]
    assert int8.count_tokens(["hello"], prefix="query: ") == [len(int8.tokenize("query: hello")[0])]


def test_order_is_restored_and_batching_changes_nothing(
    int8: Embedder, reference: dict[str, Any]
) -> None:
    texts = reference["texts"][::5]
    together = int8.embed(texts)
    small_batches = int8.embed(texts, max_batch_tokens=64)
    alone = np.concatenate([int8.embed(t) for t in texts])
    assert cosines(together, alone).min() >= 0.99999
    assert cosines(small_batches, alone).min() >= 0.99999
    reversed_ = int8.embed(texts[::-1])[::-1]
    assert cosines(together, reversed_).min() >= 0.99999


def test_single_string_empty_and_whitespace(int8: Embedder, ref_vectors: np.ndarray,
                                            reference: dict[str, Any]) -> None:
    one = int8.embed("hello")
    assert one.shape == (1, 384)
    np.testing.assert_array_equal(one, int8.embed(["hello"]))
    empty = int8.embed([])
    assert empty.shape == (0, 384) and empty.dtype == np.float32
    assert int8.embed([], precision="ubinary").shape == (0, 48)
    idx = [reference["texts"].index(t) for t in ("", "   ", "\t\n")]
    got = int8.embed([reference["texts"][i] for i in idx])
    assert cosines(got, ref_vectors[idx]).min() >= 0.995


def test_non_strings_raise_type_error_with_index(int8: Embedder) -> None:
    with pytest.raises(TypeError, match=r"texts\[2\] is int, not str"):
        int8.embed(["a", "b", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"texts\[0\] is NoneType"):
        int8.embed([None])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not bytes"):
        int8.embed(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not int"):
        int8.embed(5)  # type: ignore[arg-type]


def test_truncation(int8: Embedder, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="edgembed"):
        cut = int8.embed(["short", LONG])
    assert "1 of 2 texts were longer than 256 tokens and were truncated" in caplog.text
    first_254_words = int8.embed(" ".join(["word"] * 254))  # 254 + [CLS] + [SEP] = 256
    assert cosines(cut[1:], first_254_words)[0] >= 0.99999
    with pytest.raises(InputTooLong, match=r"texts\[1\] has 402 tokens, over .* 256"):
        int8.embed(["short", LONG], truncate=False)


def test_prefixes(int8: Embedder) -> None:
    np.testing.assert_array_equal(int8.embed("x", prefix="query: "), int8.embed("query: x"))
    # all-MiniLM-L6-v2 has no prefixes: queries and documents embed as plain texts
    np.testing.assert_array_equal(int8.embed_query("x"), int8.embed("x"))
    np.testing.assert_array_equal(int8.embed_document(["x", "y"]), int8.embed(["x", "y"]))


# --- dimensions, normalization, precision ---


def test_dimensions_truncate_then_renormalize(int8: Embedder) -> None:
    texts = ["a cat sat on the mat", "stock prices fell"]
    raw = int8.embed(texts, normalize=False)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    np.testing.assert_allclose(int8.embed(texts), raw / np.linalg.norm(raw, axis=1,
                                                                       keepdims=True), atol=1e-6)
    small = int8.embed(texts, dimensions=64)
    assert small.shape == (2, 64)
    want = raw[:, :64] / np.linalg.norm(raw[:, :64], axis=1, keepdims=True)
    np.testing.assert_allclose(small, want, atol=1e-6)
    np.testing.assert_allclose(int8.embed(texts, dimensions=64, normalize=False), raw[:, :64])
    for bad in (0, 385, 1.5, True, "64"):
        with pytest.raises(InputError, match="dimensions must be an integer from 1 to 384"):
            int8.embed(texts, dimensions=bad)  # type: ignore[arg-type]


def test_binary_precisions(int8: Embedder) -> None:
    texts = ["a cat", "a dog", "the stock market"]
    full = int8.embed(texts)
    ub = int8.embed(texts, precision="ubinary")
    assert ub.dtype == np.uint8 and ub.shape == (3, 48)
    np.testing.assert_array_equal(np.unpackbits(ub, axis=1).astype(bool), full > 0)
    b = int8.embed(texts, precision=Precision.BINARY)
    assert b.dtype == np.int8
    np.testing.assert_array_equal(b.astype(np.int16) + 128, ub)
    assert int8.embed(texts, precision="binary", dimensions=20).shape == (3, 3)


def sentence_transformers_int8(emb: np.ndarray, ranges: np.ndarray, unsigned: bool) -> np.ndarray:
    """sentence_transformers.quantize_embeddings (v3) with ``ranges`` given, verbatim."""
    starts = ranges[0, :]
    steps = (ranges[1, :] - ranges[0, :]) / 255
    if unsigned:
        return np.asarray(((emb - starts) / steps).astype(np.uint8))
    return np.asarray(((emb - starts) / steps - 128).astype(np.int8))


def test_scalar_precisions_follow_sentence_transformers(int8: Embedder,
                                                        reference: dict[str, Any]) -> None:
    ranges = int8.quantization_ranges()
    assert ranges.shape == (2, 384) and np.all(ranges[0] < ranges[1])
    calib = int8.embed(reference["texts"])  # the calibration corpus is the reference corpus
    np.testing.assert_allclose(ranges, [calib.min(axis=0), calib.max(axis=0)], atol=1e-6)
    texts = reference["texts"][40:60]
    full = int8.embed(texts)
    inside = np.all((full >= ranges[0]) & (full <= ranges[1]), axis=1)
    assert inside.all()
    for precision, unsigned in (("int8", False), ("uint8", True)):
        got = int8.embed(texts, precision=precision)
        assert got.dtype == (np.uint8 if unsigned else np.int8)
        want = sentence_transformers_int8(full, ranges, unsigned)
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1  # float rounding at edges
        assert np.mean(got == want) > 0.99
    # batch-invariant: a text's bytes do not depend on the other texts of the call
    np.testing.assert_array_equal(int8.embed(texts[3], precision="int8"),
                                  int8.embed(texts, precision="int8")[3:4])
    # outside the calibration range values clip instead of wrapping
    clipped = quantize_embeddings(np.array([[-9.0] * 384, [9.0] * 384], np.float32), "int8",
                                  ranges)
    assert clipped[0].tolist() == [-128] * 384 and clipped[1].tolist() == [127] * 384
    small = int8.quantization_ranges(dimensions=8, normalize=False)
    assert small.shape == (2, 8)


def test_precision_names(int8: Embedder) -> None:
    assert output_layout(384, "float32") == (384, np.dtype(np.float32))
    assert output_layout(384, "int8") == (384, np.dtype(np.int8))
    assert output_layout(10, "ubinary") == (2, np.dtype(np.uint8))
    with pytest.raises(InputError, match="unknown precision 'float16'"):
        int8.embed("x", precision="float16")
    with pytest.raises(InputError, match="max_batch_tokens must be a positive integer"):
        int8.embed("x", max_batch_tokens=0)


# --- streaming and threads ---


def test_embed_iter_streams_in_chunks(int8: Embedder, reference: dict[str, Any]) -> None:
    texts = reference["texts"][:23]
    pulled: list[int] = []

    def source() -> Iterator[str]:
        for i, t in enumerate(texts):
            pulled.append(i)
            yield t

    it = int8.embed_iter(source(), chunk_size=10)
    first = next(it)
    assert first.shape == (10, 384) and len(pulled) <= 11  # bounded: one chunk read ahead
    rest = list(it)
    assert [a.shape[0] for a in rest] == [10, 3]
    np.testing.assert_allclose(np.concatenate([first, *rest]), int8.embed(texts), atol=1e-6)
    with pytest.raises(TypeError, match=r"texts\[12\] is int"):
        list(int8.embed_iter([*texts[:12], 7], chunk_size=5))  # type: ignore[list-item]
    with pytest.raises(InputError, match="chunk_size"):
        next(int8.embed_iter(texts, chunk_size=0))


def test_thread_safety(int8: Embedder, reference: dict[str, Any]) -> None:
    """One Embedder, six threads at once: every thread gets exactly its sequential result."""
    groups = [reference["texts"][i:90:6] for i in range(6)]
    want = [int8.embed(g) for g in groups]
    got: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def work(i: int) -> None:
        try:
            barrier.wait()
            got[i] = int8.embed(groups[i], max_batch_tokens=512)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(6):
        assert cosines(got[i], want[i]).min() >= 0.99999


# --- the batch planner ---


def test_plan_batches_examples() -> None:
    assert plan_batches([], 100) == []
    assert plan_batches([5, 50, 10, 50], 100) == [[1, 3], [2, 0]]
    assert plan_batches([300, 2], 100) == [[0], [1]]  # an over-long text goes alone
    assert plan_batches([3] * 5, 1000, max_batch_size=2) == [[0, 1], [2, 3], [4]]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 256), max_size=60), st.integers(1, 4096), st.integers(1, 64))
def test_plan_batches_properties(lengths: list[int], budget: int, size: int) -> None:
    batches = plan_batches(lengths, budget, size)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat, reverse=True)
    for b in batches:
        assert len(b) <= size
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= budget


def test_calibration_is_cached_beside_the_model(int8: Embedder, exported_model_dir: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ranges = int8.quantization_ranges()
    sha = int8.manifest.variants["int8"].sha256[:16]
    assert (exported_model_dir / f"calibration.int8.{sha}.npy").is_file()
    again = Embedder.load(exported_model_dir, variant="int8", backend="onnx")

    def no_encoding(*_a: Any) -> None:
        raise AssertionError("the calibration corpus was embedded again")

    monkeypatch.setattr(again, "_pooled", no_encoding)
    np.testing.assert_array_equal(again.quantization_ranges(), ranges)


def test_cuda_io_binding_path(exported_model_dir: Path) -> None:
    """The CUDA path's I/O binding, driven through a stand-in session that runs on the CPU."""
    from edgembed.backends.onnx import OnnxBackend

    backend = OnnxBackend(exported_model_dir / "model.fp32.onnx")
    real = backend.session
    calls: list[tuple[str, Any]] = []

    class Binding:
        def __init__(self) -> None:
            self.inputs: dict[str, np.ndarray] = {}
            self.out: list[np.ndarray] = []

        def bind_cpu_input(self, name: str, value: np.ndarray) -> None:
            self.inputs[name] = value

        def bind_output(self, name: str, device: str, device_id: int) -> None:
            calls.append(("bind_output", (name, device, device_id)))

        def copy_outputs_to_cpu(self) -> list[np.ndarray]:
            return self.out

    class Session:
        def io_binding(self) -> Binding:
            return Binding()

        def run_with_iobinding(self, binding: Binding) -> None:
            calls.append(("run", sorted(binding.inputs)))
            binding.out = real.run(["pooled"], binding.inputs)

    batch = [[101, 7592, 102], [101, 7592, 2088, 2023, 102]]
    want = backend.encode(batch)
    backend.session, backend.device = Session(), "cuda"
    got = backend.encode(batch)
    np.testing.assert_array_equal(got, want)
    assert calls == [("bind_output", ("pooled", "cuda", 0)),
                     ("run", ["attention_mask", "input_ids"])]


def test_backend_names_are_one_set_everywhere() -> None:
    """Python, the embed CLI and embed serve take the same backend names; 'cpu' is a
    deprecated alias of 'onnx' in all three."""
    import argparse
    import contextlib
    import io

    from edgembed.backends.choice import BACKENDS
    from edgembed.cli.options import add_model_options
    from edgembed.serve.cli import build_parser

    assert BACKENDS == ("auto", "native", "onnx", "wasm", "cuda")
    with pytest.warns(DeprecationWarning, match="'cpu' is deprecated; use 'onnx'"):
        assert choose_backend("cpu", None, cuda=NO_CUDA).backend == "onnx"
    with pytest.raises(InputError, match="choose from auto, native, onnx, wasm, cuda"):
        choose_backend("gpu", None, cuda=NO_CUDA)
    embed = argparse.ArgumentParser()
    add_model_options(embed)
    for parser in (embed, build_parser()):
        for name in BACKENDS:
            assert parser.parse_args(["--backend", name]).backend == name
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert parser.parse_args(["--backend", "cpu"]).backend == "onnx"
        assert "deprecated" in err.getvalue()
        with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
            parser.parse_args(["--backend", "gpu"])
        assert "{auto,native,onnx,wasm,cuda}" in parser.format_help()
