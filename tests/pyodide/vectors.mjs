// Raw vectors of every cross-host case (build/js/cross_host.json) from edgembed's wasm backend
// inside Pyodide under Node (its js.WebAssembly host), for tests/js/cross_runtime.test.mjs.
//
//   node tests/pyodide/vectors.mjs
//
// Runs the package from the source tree (python/ and build/wasm/ mounted into Pyodide's file
// system; tests/python/test_pyodide.py tests the installed wheel), offline, without numpy, and
// writes build/js/vectors/pyodide.<case>.raw.f32 (little-endian float32, pooled, not normalized),
// and pyodide.<head>.sparse.f32 for every SPLADE model of the manifest's heads (the masked-LM
// head's dense rows; the rerankers need Python's pair tokenizer, which Pyodide lacks offline).
// Also checks that Embedder.embed_sparse applies a bundle's own sparse.max_active_dims there (the
// manifest's "capped" bundle against its uncapped model with the same cap given).
// Needs `npm ci` in tests/pyodide (js/test.sh runs it), ./build.sh wasm and write_bundles.py.
import path from "node:path";
import { fileURLToPath } from "node:url";
import { loadPyodide } from "pyodide";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const pyodide = await loadPyodide({ stdout: (s) => console.log(s), stderr: (s) => console.error(s) });
pyodide.mountNodeFS("/repo", ROOT);
await pyodide.runPythonAsync(`
import json, os, sys
sys.path.insert(0, "/repo/python")
os.environ["EDGEMBED_WASM_DIR"] = "/repo/build/wasm"
from edgembed.backends.wasm import WasmBackend

manifest = json.load(open("/repo/build/js/cross_host.json", encoding="utf-8"))
os.makedirs("/repo/build/js/vectors", exist_ok=True)
for case in manifest["cases"]:
    backend = WasmBackend("/repo/" + case["bundle"], variant="simd128")
    try:
        rows = backend.encode_rows(backend.tokenize(manifest["texts"]))
    finally:
        backend.close()
    out = f"/repo/build/js/vectors/pyodide.{case['name']}.raw.f32"
    with open(out, "wb") as f:
        for row in rows:
            f.write(row.tobytes())  # wasm32 is little-endian
    print(f"wrote {out[len('/repo/'):]} ({len(rows)} vectors of {backend.dim}, {sys.platform})")
for head in manifest.get("heads", []):
    if head["task"] != "sparse":
        continue
    backend = WasmBackend("/repo/" + head["bundle"], variant="simd128")
    try:
        rows = backend.sparse_rows(backend.tokenize(manifest["texts"]))
    finally:
        backend.close()
    out = f"/repo/build/js/vectors/pyodide.{head['name']}.sparse.f32"
    with open(out, "wb") as f:
        for row in rows:
            f.write(row.tobytes())
    print(f"wrote {out[len('/repo/'):]} ({len(rows)} rows of {len(rows[0])}, {sys.platform})")
capped = manifest.get("capped")
if capped:  # a SPLADE model saved with its own max_active_dims: Embedder applies it here too
    from edgembed import Embedder
    k = capped["max_active_dims"]
    plain_case = next(h for h in manifest["heads"] if h["name"] == capped["of"])
    e = Embedder.from_bundle("/repo/" + capped["bundle"], wasm_build="simd128")
    plain = Embedder.from_bundle("/repo/" + plain_case["bundle"], wasm_build="simd128")
    got = e.embed_sparse(manifest["texts"])
    want = plain.embed_sparse(manifest["texts"], max_active_dims=k)
    assert all(len(v) <= k for v in got) and any(len(v) == k for v in got), [len(v) for v in got]
    for i, (a, b) in enumerate(zip(got, want)):
        assert type(a.indices).__name__ == "array", type(a.indices)  # no numpy here
        assert list(a.indices) == list(b.indices) and a.values.tobytes() == b.values.tobytes(), i
    print(f"{capped['name']}: the model's max_active_dims ({k}) applied to {len(got)} texts")
`);
