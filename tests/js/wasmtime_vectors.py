"""Raw pooled vectors of the reference corpus from the SIMD128 engine under wasmtime (Python).

Written as little-endian float32 to build/js/vectors/wasmtime.raw.f32 (or the path given), next
to the vectors each JavaScript host writes, for tests/js/cross_runtime.test.mjs to compare byte
for byte. Usage: python tests/js/wasmtime_vectors.py BUNDLE [OUT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from edgembed.backends.wasm import WasmBackend

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    bundle = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build/js/vectors/wasmtime.raw.f32"
    texts = json.loads((ROOT / "tests/fixtures/reference/corpus.json").read_text(encoding="utf-8"))
    backend = WasmBackend(bundle, variant="simd128")
    try:
        vectors = backend.encode(backend.tokenize(texts))
    finally:
        backend.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
    print(f"wrote {out} ({len(texts)} vectors of {vectors.shape[1]})")


if __name__ == "__main__":
    main()
