"""The Embedder over a bundle alone (Pyodide's path), checked in CPython: rows without numpy
equal the numpy path's arrays; bundles from bytes, paths and URLs; the event-loop batcher."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed import _bundle, env
from edgembed.backends.wasm import WasmBackend
from edgembed.batching import EventLoopBatcher
from edgembed.embedder import Embedder
from edgembed.errors import BatcherClosed, InputError, InputTooLong, ModelNotFound

pytest.importorskip("wasmtime", reason="pip install wasmtime")

REPO = Path(__file__).resolve().parents[2]
TEXTS = json.loads((REPO / "tests/fixtures/reference/corpus.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def embedder(bundle: Path) -> Iterator[Embedder]:
    emb = Embedder.from_bundle(bundle)
    yield emb
    close(emb)


@pytest.fixture(scope="module")
def rows_embedder(bundle: Path) -> Iterator[Embedder]:
    """The same bundle on a host without numpy, as Pyodide is: rows of ``array('f')``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(env, "HOST", dataclasses.replace(env.HOST, numpy=False))
        emb = Embedder.from_bundle(bundle)
    yield emb
    close(emb)


def close(emb: Embedder) -> None:
    """Free the engine's memory now (a test loads many)."""
    backend = emb._backend
    assert isinstance(backend, WasmBackend)
    backend.close()


def rows_as_np(rows: Any, dtype: type | np.dtype[Any]) -> np.ndarray:
    return np.array([list(r) for r in rows], dtype=dtype)


def test_loads_a_bundle_with_its_catalog_metadata(embedder: Embedder) -> None:
    assert (embedder.model_name, embedder.dim, embedder.max_length) == ("all-minilm-l6-v2",
                                                                      384, 256)
    assert (embedder.backend, embedder.variant) == ("wasm", "int8")
    assert embedder.manifest.pooling == "mean"
    assert embedder.tokenize("Hello world!") == [[101, 7592, 2088, 999, 102]]
    assert embedder.count_tokens(["word " * 300, "a b"], truncate=False) == [302, 4]
    assert embedder.count_tokens(["word " * 300]) == [256]
    with pytest.raises(InputTooLong, match=r"texts\[1\] has 302 tokens"):
        embedder.embed(["short", "word " * 300], truncate=False)


@pytest.mark.parametrize(
    "options",
    [{}, {"dimensions": 64}, {"normalize": False}, {"precision": "binary"},
     {"precision": "uint8"}, {"prefix": "query: "}],
)
def test_rows_equal_the_numpy_path(
    embedder: Embedder, rows_embedder: Embedder, options: dict[str, Any]
) -> None:
    texts = TEXTS[:60]
    want = embedder.embed(texts, **options)
    got = rows_embedder.embed(texts, **options)
    assert isinstance(got, list) and len(got) == len(texts)
    assert got[0].typecode == {"float32": "f", "binary": "b", "uint8": "B"}[
        options.get("precision", "float32")]
    assert np.array_equal(rows_as_np(got, want.dtype), want)
    assert rows_embedder.embed([]) == []


def test_reference_corpus_matches_sentence_transformers(rows_embedder: Embedder) -> None:
    ref = json.loads((REPO / "tests/fixtures/reference/all-minilm-l6-v2.json").read_text())
    got = rows_as_np(rows_embedder.embed(ref["texts"]), np.float64)
    want = np.asarray(ref["embeddings"])
    cos = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.995 and cos.mean() >= 0.999, (cos.min(), cos.mean())


def test_bytes_and_paths(bundle: Path, embedder: Embedder) -> None:
    from_bytes = Embedder.from_bundle(bundle.read_bytes())
    try:
        assert np.array_equal(from_bytes.embed(TEXTS[:8]), embedder.embed(TEXTS[:8]))
        assert from_bytes.model_name == "all-minilm-l6-v2"
    finally:
        close(from_bytes)
    assert _bundle.is_bundle_source(b"x") and _bundle.is_bundle_source("m/a.EMB")
    assert not _bundle.is_bundle_source("all-minilm-l6-v2")
    with pytest.raises(ModelNotFound, match=r"does not exist"):
        Embedder.from_bundle(bundle.with_name("missing.emb"))


@pytest.fixture
def http_dir(bundle: Path) -> Iterator[str]:
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(bundle.parent))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_web_load_from_a_url(http_dir: str, embedder: Embedder) -> None:
    import edgembed.web

    async def main() -> None:
        emb = await edgembed.web.load(http_dir + "all-minilm-l6-v2.emb")
        try:
            assert np.array_equal(emb.embed(TEXTS[:5]), embedder.embed(TEXTS[:5]))
        finally:
            close(emb)
        with pytest.raises(ModelNotFound, match="HTTP 404"):
            await edgembed.web.fetch_bundle(http_dir + "missing.emb")

    asyncio.run(main())


# ── the batcher on an event loop ──


def test_event_loop_batcher_groups_and_matches(embedder: Embedder) -> None:
    async def main() -> tuple[list[Any], object]:
        async with EventLoopBatcher(embedder, latency_target_ms=5000) as b:
            out = await asyncio.gather(*(b.embed(t) for t in TEXTS[:16]))
            out.append(await b.embed(TEXTS[16:19]))
        return out, b.stats()

    out, stats = asyncio.run(main())
    want = embedder.embed(TEXTS[:19])
    assert all(np.array_equal(out[i], want[i]) for i in range(16))
    assert np.array_equal(out[16], want[16:19])
    assert stats.completed == 17 and 1 <= stats.batches < 17  # type: ignore[attr-defined]


def test_event_loop_batcher_cancel_close_and_errors() -> None:
    calls: list[list[str]] = []

    def target(texts: list[str]) -> list[list[int]]:
        calls.append(list(texts))
        if "boom" in texts:
            raise ValueError("boom")
        return [[len(t)] for t in texts]

    async def main() -> None:
        b = EventLoopBatcher(target, latency_target_ms=1000)
        keep = b.submit("abc")
        gone = b.submit("withdrawn")
        gone.cancel()
        bad = b.submit("boom")
        assert await keep == [3]
        with pytest.raises(ValueError, match="boom"):
            await bad  # a failing request fails alone
        assert all("withdrawn" not in c for c in calls)
        assert await b.submit([]) == []
        b.close(drain=False)
        with pytest.raises(BatcherClosed):
            b.submit("late")
        await b.aclose()
        assert b.stats().cancelled == 1

    asyncio.run(main())


def test_wasm_build_names_the_engine_build(bundle: Path, embedder: Embedder) -> None:
    """``wasm_build`` picks the engine build; ``wasm_variant``, its old name, warns and must
    agree ("variant" names a model's quantization everywhere else)."""
    built = Embedder.from_bundle(bundle, wasm_build="simd128")
    try:
        backend = built._backend
        assert isinstance(backend, WasmBackend) and backend.variant == "simd128"
        assert np.array_equal(built.embed(TEXTS[:4]), embedder.embed(TEXTS[:4]))
    finally:
        close(built)
    with pytest.warns(DeprecationWarning, match="wasm_variant is deprecated: it is now "
                                                "wasm_build"):
        old = Embedder.from_bundle(bundle, wasm_variant="simd128")
    close(old)
    with pytest.raises(InputError, match="wasm_variant is the old name of wasm_build"), \
            pytest.warns(DeprecationWarning):
        Embedder.from_bundle(bundle, wasm_build="simd128", wasm_variant="relaxed")
