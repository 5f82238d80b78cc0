"""The wasm engine under wasmtime: kernels agree, the backend matches the fixture and native.

Needs build/wasm (``runtime/build.sh wasm``: pip ziglang, npm binaryen); the fixture builds it
when it is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed.backends._abi import Pooling, Status
from edgembed.errors import BundleError, InputTooLong

REPO = Path(__file__).resolve().parents[2]

wasmtime = pytest.importorskip("wasmtime", reason="pip install wasmtime")


@pytest.fixture(scope="session")
def backends(wasm_dir: Path, bundle: Path) -> dict[str, Any]:
    from edgembed.backends.wasm import WasmBackend

    return {v: WasmBackend(bundle, variant=v, wasm_dir=wasm_dir) for v in ("relaxed", "simd128")}


def test_sizes_and_toolchain(wasm_dir: Path) -> None:
    for name in ("edgembed.wasm", "edgembed-relaxed.wasm", "edgembed-threads.wasm"):
        assert (wasm_dir / name).stat().st_size <= 300 * 1024, name
    assert "zig" in (wasm_dir / "toolchain.txt").read_text()


def test_exports_match_the_abi(wasm_dir: Path) -> None:
    sys.path.insert(0, str(REPO / "runtime" / "tools"))
    try:
        import build_wasm
    finally:
        sys.path.pop(0)
    for name in ("edgembed", "edgembed-relaxed", "edgembed-threads"):
        build_wasm.check_exports(wasm_dir / f"{name}.wasm", name)  # exits on a mismatch


def test_kernel_variants_agree_bit_for_bit(wasm_dir: Path) -> None:
    cfg = wasmtime.Config()
    cfg.wasm_relaxed_simd = True
    engine = wasmtime.Engine(cfg)
    store = wasmtime.Store(engine)
    module = wasmtime.Module.from_file(engine, str(wasm_dir / "kernels_test.wasm"))
    ex = wasmtime.Instance(store, module, []).exports(store)
    assert ex["emb_test_relaxed_probe"](store) == 1  # wasmtime computes it exactly
    for seed in (1, 7, 12345):
        assert ex["emb_test_kernels"](store, seed) == 0


def test_variant_probe(backends: dict[str, Any]) -> None:
    assert backends["relaxed"].variant == "relaxed"
    assert backends["simd128"].variant == "simd128"


def test_tokenizer_and_int8_bar(backends: dict[str, Any], reference: dict[str, Any]) -> None:
    b = backends["relaxed"]
    assert b.dim == 384 and b.max_length == 256
    assert b.tokenize(reference["texts"]) == reference["token_ids"]
    got = b.encode(reference["token_ids"])
    got = got / np.linalg.norm(got, axis=1, keepdims=True)
    want = np.asarray(reference["embeddings"], dtype=np.float64)
    cos = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.995 and cos.mean() >= 0.999, (cos.min(), cos.mean())


def test_variants_and_native_are_identical(
    backends: dict[str, Any], reference: dict[str, Any], bundle: Path
) -> None:
    seqs = [s for s in reference["token_ids"] if len(s) <= 48][:40]
    relaxed, simd = backends["relaxed"].encode(seqs), backends["simd128"].encode(seqs)
    assert np.array_equal(relaxed, simd)
    lib = REPO / "build" / "native" / "libedgembed.so"
    if not lib.exists():
        pytest.skip("build/native/libedgembed.so not built")
    from test_engine_native import Engine, load_lib

    native = Engine(load_lib(lib), bundle.read_bytes()).encode(seqs, pooling=0, normalize=0)
    # the same arithmetic in the same order: native gcc and wasm clang agree to the bit
    assert np.array_equal(native, relaxed)


def test_batch_invariance_and_chunking(backends: dict[str, Any], reference: dict[str, Any]) -> None:
    b = backends["relaxed"]
    rng = np.random.default_rng(7)
    seqs = [s for s in reference["token_ids"] if len(s) <= 64]
    picks = [seqs[i] for i in rng.choice(len(seqs), size=20, replace=False)]
    alone = np.stack([b.encode([s])[0] for s in picks])
    together = b.encode(picks)
    assert np.array_equal(alone, together)
    long = next(s for s in reference["token_ids"] if len(s) == 256)
    out = b.encode([long] * 9)  # 2304 tokens: more than one context (2048), cut into two calls
    assert all(np.array_equal(out[0], row) for row in out[1:])


def test_errors(backends: dict[str, Any], wasm_dir: Path, tmp_path: Path) -> None:
    from edgembed.backends.wasm import WasmBackend

    b = backends["simd128"]
    with pytest.raises(InputTooLong):
        b.tokenize(["word " * 300], truncate=False)
    assert b.count_tokens(["word " * 300], truncate=False) == [302]
    assert b.count_tokens(["word " * 300]) == [256]
    assert b.tokenize(["\udcff broken \ud800"])[0][0] == 101  # lone surrogates do not crash
    bad = tmp_path / "bad.emb"
    bad.write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
    with pytest.raises(BundleError, match="not an edgembed bundle"):
        WasmBackend(bad, wasm_dir=wasm_dir)


def test_threads_variant_shares_one_model(
    wasm_dir: Path, bundle: Path, reference: dict[str, Any]
) -> None:
    """Two instances of edgembed-threads.wasm on one shared memory, one model, one context
    each, the second on a stack of its own (as the JS worker pool runs it), encoding at once."""
    import ctypes
    import threading

    cfg = wasmtime.Config()
    cfg.wasm_threads = True
    cfg.shared_memory = True
    engine = wasmtime.Engine(cfg)
    mem = wasmtime.SharedMemory(
        engine, wasmtime.MemoryType(wasmtime.Limits(64, 16384), shared=True)
    )
    try:
        mem._as_extern()
    except TypeError:  # wasmtime-py 50 wraps the shared memory's pointer twice
        from wasmtime import _ffi as ffi

        def as_extern(self: Any) -> object:
            union = ffi.wasmtime_extern_union(sharedmemory=self.ptr())
            return ffi.wasmtime_extern_t(ffi.WASMTIME_EXTERN_SHAREDMEMORY, union)

        wasmtime.SharedMemory._as_extern = as_extern
    module = wasmtime.Module.from_file(engine, str(wasm_dir / "edgembed-threads.wasm"))

    def instance() -> tuple[Any, Any]:
        store = wasmtime.Store(engine)
        linker = wasmtime.Linker(engine)
        linker.define(store, "env", "memory", mem)
        return store, linker.instantiate(store, module).exports(store)

    base = ctypes.addressof(mem.data_ptr().contents)

    def u32(ptr: int) -> int:
        return int.from_bytes(ctypes.string_at(base + ptr, 4), "little")

    sa, ea = instance()
    data = bundle.read_bytes()
    p = ea["emb_alloc_wasm"](sa, len(data))
    ctypes.memmove(base + p, data, len(data))
    scratch = ea["emb_alloc_wasm"](sa, 8)
    assert ea["emb_model_init_wasm"](sa, scratch, p, len(data)) == Status.OK
    model = u32(scratch)
    sb, eb = instance()
    stack = ea["emb_alloc_wasm"](sa, 1 << 18)
    eb["__stack_pointer"].set_value(sb, stack + (1 << 18))

    seqs = [s for s in reference["token_ids"] if 10 < len(s) < 60][:12]
    results: dict[tuple[int, int], Any] = {}

    def work(store: Any, ex: dict[str, Any], who: int) -> None:
        sc = ex["emb_alloc_wasm"](store, 8)
        assert ex["emb_context_init_wasm"](store, sc, model, 256) == Status.OK
        ctx = u32(sc)
        ids, lens, out = (ex["emb_alloc_wasm"](store, n) for n in (4 * 256, 4, 4 * 384))
        for _ in range(2):
            for i, s in enumerate(seqs):
                a = np.asarray(s, dtype=np.int32)
                ctypes.memmove(base + ids, a.ctypes.data, a.nbytes)
                ctypes.memmove(base + lens, np.asarray([len(s)], dtype=np.int32).ctypes.data, 4)
                encode = ex["emb_context_encode_wasm"]
                st = encode(store, ctx, ids, lens, 1, Pooling.MODEL, 1, out, 384)
                assert st == Status.OK
                results[(who, i)] = np.frombuffer(ctypes.string_at(base + out, 4 * 384), np.float32)

    threads = [threading.Thread(target=work, args=a) for a in ((sa, ea, 0), (sb, eb, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 * len(seqs)
    for i, s in enumerate(seqs):
        assert np.array_equal(results[(0, i)], results[(1, i)])
        want = np.asarray(reference["embeddings"][reference["token_ids"].index(s)])
        assert results[(0, i)] @ want / np.linalg.norm(want) >= 0.995


def test_every_feature_gives_the_native_bits(wasm_dir: Path, tmp_path: Path) -> None:
    """One small random model per encoder feature (_engine_model.FEATURES): SIMD128,
    relaxed SIMD and the native engine give the same bits, with token types and prompts."""
    from _engine_model import FEATURES, random_model
    from edgembed.backends.native import NativeBackend
    from edgembed.backends.wasm import WasmBackend

    rng = np.random.default_rng(11)
    for feature, (cfg, dense) in sorted(FEATURES.items()):
        path = tmp_path / f"{feature}.emb"
        path.write_bytes(random_model(tmp_path, cfg, seed=5, dense=dense))
        seqs = [[2, *rng.integers(1, cfg.vocab_size, size=n - 2).tolist(), 3]
                for n in (2, 4, 9, cfg.max_length)]
        types = ([rng.integers(0, 2, size=len(s)).tolist() for s in seqs]
                 if cfg.type_vocab_size > 1 else None)
        prompts = [int(rng.integers(0, len(s))) for s in seqs]
        native = NativeBackend(path, threads=2).encode(seqs, type_ids=types, prompt_lengths=prompts)
        for variant in ("simd128", "relaxed"):
            got = WasmBackend(path, variant=variant, wasm_dir=wasm_dir).encode(
                seqs, type_ids=types, prompt_lengths=prompts)
            assert np.array_equal(got, native), (feature, variant)
        if cfg.type_vocab_size > 1:  # the inputs reach the engine: other types, other vectors
            other = NativeBackend(path).encode(seqs, prompt_lengths=prompts)
            assert not np.array_equal(other, native), feature
