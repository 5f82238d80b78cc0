# ruff: noqa: F704, F821  (top-level await and BASE_URL, set by run.mjs)
# edgembed inside Pyodide: run by tests/pyodide/run.mjs (top-level await is allowed here).
#
# /work is the test's work directory (a Node folder mounted into Pyodide's file system). This
# script installs the edgembed wheel with micropip, embeds the reference corpus every way a
# Pyodide user can load a bundle, writes the vectors to /work/out/ for the test to compare byte
# for byte with CPython's, and returns a JSON report of everything else it observed.
import asyncio
import glob
import json
import os
import shutil
import sys
import time

import micropip

report: dict = {"platform": sys.platform}
OUT = "/work/out"
os.makedirs(OUT, exist_ok=True)


def save(name, rows):
    with open(f"{OUT}/{name}", "wb") as f:
        for r in rows:
            f.write(r.tobytes())


def error_of(fn):
    try:
        fn()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return None


async def aerror_of(coro):
    try:
        await coro
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return None


(wheel,) = glob.glob("/work/wheels/edgembed-*.whl")
try:
    await micropip.install(f"emfs:{wheel}")  # dependencies resolved (all marked not for emscripten)
except Exception as exc:
    report["install_error"] = f"{type(exc).__name__}: {exc}"
else:
    import edgembed
    from edgembed import Embedder

    heavy = ("numpy", "onnx", "onnxruntime", "tokenizers", "safetensors", "wasmtime")
    report["heavy_modules_after_import"] = [m for m in heavy if m in sys.modules]
    report["installed_at"] = os.path.dirname(edgembed.__file__)
    report["wasm_files"] = sorted(os.listdir(os.path.join(report["installed_at"], "_wasm")))
    with open("/work/corpus.json", encoding="utf-8") as f:
        texts = json.load(f)

    # 1. a bundle in the Emscripten file system (MEMFS), loaded by path
    os.makedirs("/models", exist_ok=True)
    shutil.copy("/work/all-minilm-l6-v2.emb", "/models/all-minilm-l6-v2.emb")
    t = time.perf_counter()
    emb = Embedder.load("/models/all-minilm-l6-v2.emb")
    report["load_s"] = round(time.perf_counter() - t, 3)
    report["embedder"] = repr(emb)
    report["backend"] = [emb.backend, emb.backend_reason, emb._backend.variant]
    t = time.perf_counter()
    rows = emb.embed(texts)
    report["embed_s"] = round(time.perf_counter() - t, 3)
    report["row_type"] = [type(rows).__name__, type(rows[0]).__name__, rows[0].typecode, len(rows)]
    save("embed.f32", rows)
    save("embed_dims64.f32", emb.embed(texts, dimensions=64))
    save("embed_int8.i8", emb.embed(texts, precision="int8"))
    save("embed_binary.i8", emb.embed(texts, precision="binary"))
    ids = emb.tokenize(texts)
    save("raw.f32", emb._backend.encode_rows(ids))
    report["count_tokens"] = [emb.count_tokens("word " * 300, truncate=False),
                              emb.count_tokens("word " * 300)]

    # 2. bytes, and 3. a URL through pyfetch (edgembed.web.load compiles asynchronously)
    import edgembed.web

    with open("/models/all-minilm-l6-v2.emb", "rb") as f:
        data = f.read()


    def same(a, b):
        if len(a) != len(b):
            return False
        return all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))

    from_bytes = Embedder.load(data)
    report["bytes_identical"] = same(from_bytes.embed(texts[:40]), rows[:40])
    from_url = await edgembed.web.load(BASE_URL + "all-minilm-l6-v2.emb")
    report["url_identical"] = same(from_url.embed(texts[:40]), rows[:40])
    report["url_name"] = from_url.model_name

    # 4. the adaptive batcher on Pyodide's event loop (no threads here)
    from edgembed import batching

    report["threaded_batcher"] = error_of(lambda: batching.AdaptiveBatcher(emb))
    batcher = batching.EventLoopBatcher(emb, latency_target_ms=5000)
    report["batcher_class"] = type(batcher).__name__
    picks = texts[:24]
    results = await asyncio.gather(*(batcher.embed(t) for t in picks))
    many = await batcher.embed(picks[:3])
    await batcher.aclose()
    stats = batcher.stats()
    report["batcher"] = {
        "identical": same(results, rows[:24]) and same(many, rows[:3]),
        "completed": stats.completed,
        "batches": stats.batches,
        "closed": batcher.closed,
    }

    # 5. bad input: the errors CPython gives
    report["errors"] = {
        "missing_bundle": error_of(lambda: Embedder.load("/models/nowhere.emb")),
        "not_a_bundle": error_of(lambda: Embedder.load(b"\x08\0\0\0\0\0\0\0{}      ")),
        "catalog_name": error_of(lambda: Embedder.load("all-minilm-l6-v2")),
        "onnx_backend": error_of(lambda: Embedder.load(data, backend="onnx")),
        "url_404": await aerror_of(edgembed.web.load(BASE_URL + "nowhere.emb")),
        "too_long": error_of(lambda: emb.embed("word " * 300, truncate=False)),
    }
    wasm = os.path.join(report["installed_at"], "_wasm", "edgembed.wasm")
    os.rename(wasm, wasm + ".away")
    try:
        report["errors"]["missing_wasm"] = error_of(lambda: Embedder.load(data))
        report["errors"]["missing_wasm_async"] = await aerror_of(edgembed.web.load(data))
    finally:
        os.rename(wasm + ".away", wasm)

    # 6. a cross-encoder's bundle: the engine tokenizes the pairs; scores on array rows
    from edgembed import Reranker

    pairs = [(texts[i], texts[i + 1]) for i in range(0, 60, 2)]
    reranker = await edgembed.web.load_reranker(BASE_URL + "rerank-bert.emb")
    report["reranker"] = [repr(reranker), reranker.truncation, reranker.num_labels]
    logits = reranker.score(pairs, raw=True)
    scores = reranker.score(pairs)
    save("rerank_logits.f32", [logits])
    save("rerank_scores.f32", [scores])
    report["rerank_types"] = [type(scores).__name__, scores.typecode, len(scores)]
    report["rerank_top"] = [[r.index, r.score] for r in
                            reranker.rerank(texts[0], texts[1:30], top_n=3)]
    report["rerank_tokens"] = reranker.tokenize([(texts[0], texts[1])])
    by_path = Reranker.load("/work/rerank-bert.emb")
    report["rerank_by_path_identical"] = by_path.score(pairs, raw=True) == logits
    report["errors"]["rerank_of_embedder"] = error_of(
        lambda: Reranker.load("/models/all-minilm-l6-v2.emb"))
    report["heavy_modules_at_end"] = [m for m in heavy if m in sys.modules]

json.dumps(report)
