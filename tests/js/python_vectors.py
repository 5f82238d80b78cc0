"""Raw vectors from the Python hosts, for tests/js/cross_runtime.test.mjs to compare byte for byte.

    python tests/js/python_vectors.py [BUNDLE]

Writes, as little-endian float32 into build/js/vectors/ next to the vectors each JavaScript host
writes:

- wasmtime.raw.f32: the reference corpus through BUNDLE (default build/js/all-minilm-l6-v2.emb)
  on the SIMD128 engine under wasmtime;
- wasmtime.<case>.raw.f32 and native.<case>.raw.f32: every case of build/js/cross_host.json
  (tests/fixtures/write_bundles.py), its texts through the wasmtime backend and through the
  native engine (build/native/libedgembed.so, this CPU's best kernels, one thread);
- wasmtime.<head>.scores.f32 and native.<head>.scores.f32: every reranker of the manifest's
  ``heads``, its pairs' logits (ids and token types from Hugging Face tokenizers' pair encoding,
  which the JS suite checks the engine's own pair tokenization against);
- wasmtime.<head>.sparse.f32 and native.<head>.sparse.f32: every SPLADE model's dense rows of
  the texts (the masked-LM head's output over the whole vocabulary).

Pooled vectors, not normalized (the engine's raw output): what every host must give bit for bit.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgembed.backends.native import NativeBackend
from edgembed.backends.wasm import WasmBackend

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "build" / "js" / "vectors"


def write(name: str, backend: Any, texts: Sequence[str]) -> None:
    try:
        vectors = backend.encode(backend.tokenize(texts))
    finally:
        backend.close()
    VECTORS.mkdir(parents=True, exist_ok=True)
    (VECTORS / name).write_bytes(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
    print(f"wrote {VECTORS / name} ({len(texts)} vectors of {vectors.shape[1]})")


def write_head(name: str, backend: Any, head: dict[str, Any], texts: Sequence[str]) -> None:
    try:
        if head["task"] == "rerank":
            from edgembed._tokenize import HFPairTokenizer

            model = ROOT / "tests" / "fixtures" / "models" / head["name"]
            tok = HFPairTokenizer(model, backend.max_length)
            ids, types, _ = tok.encode([(texts[q], texts[d]) for q, d in head["pairs"]])
            rows = backend.scores(ids, type_ids=types if backend.type_vocab_size else None)
        else:
            rows, _ = backend.sparse(backend.tokenize(texts))
    finally:
        backend.close()
    (VECTORS / name).write_bytes(np.ascontiguousarray(rows, dtype="<f4").tobytes())
    print(f"wrote {VECTORS / name} ({rows.shape[0]} rows of {rows.shape[1]})")


def main() -> None:
    bundle = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build/js/all-minilm-l6-v2.emb"
    corpus = json.loads((ROOT / "tests/fixtures/reference/corpus.json").read_text(encoding="utf-8"))
    write("wasmtime.raw.f32", WasmBackend(bundle, variant="simd128"), corpus)
    manifest = json.loads((ROOT / "build/js/cross_host.json").read_text(encoding="utf-8"))
    for case in manifest["cases"]:
        path = ROOT / case["bundle"]
        write(f"wasmtime.{case['name']}.raw.f32", WasmBackend(path, variant="simd128"),
              manifest["texts"])
        write(f"native.{case['name']}.raw.f32", NativeBackend(path, threads=1), manifest["texts"])
    for head in manifest.get("heads", []):
        path = ROOT / head["bundle"]
        kind = "scores" if head["task"] == "rerank" else "sparse"
        write_head(f"wasmtime.{head['name']}.{kind}.f32", WasmBackend(path, variant="simd128"),
                   head, manifest["texts"])
        write_head(f"native.{head['name']}.{kind}.f32", NativeBackend(path, threads=1), head,
                   manifest["texts"])


if __name__ == "__main__":
    main()
