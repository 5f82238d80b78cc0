"""Block size of the int8 scheme: what blocks of 64 or 128 along K would cost in accuracy.

The int8 scheme gives every block of 32 values along K its own scale, in the weights and in
the activations (docs/quantization.md). A block is also the unit of the engine's float
epilogue: on AMX, where one ``tdpbssd`` could take 64 codes of K, a block of 32 does half a
tile's work and every block needs its own epilogue (``benchmarks/block64.c`` measures what
blocks of 64 would give the GEMM, on AMX and on AVX-512 VNNI). This script measures the other
side, the vectors: each model's linear layers as onnxruntime ``MatMulNBits`` nodes of 8 bits
in blocks of B (``accuracy_level`` 4, so the activations are quantized per token row in blocks
of the same B, as the engine does), the word table int8 as shipped, against the fp32 export, on the
calibration corpus (262 texts) — the measurement ``embed export`` makes for the shipped int8,
with B = 32 reproducing its recorded numbers.

Run: .venv/bin/python benchmarks/block_size.py [--models all-minilm-l6-v2,all-mpnet-base-v2]
    [--blocks 32,64,128] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

MIN_COS, MEAN_COS = 0.995, 0.999  # the int8 bar (docs/quantization.md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="all-minilm-l6-v2,all-mpnet-base-v2")
    ap.add_argument("--blocks", default="32,64,128", help="block sizes along K, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    blocks = [int(b) for b in args.blocks.split(",")]
    if any(b < 16 or b % 16 for b in blocks):
        ap.error("--blocks: each block size must be a multiple of 16 (MatMulNBits' rule)")

    import onnx
    import onnxruntime

    from edgembed._tokenize import load_tokenizer
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export import export_model
    from edgembed.export.graph import build_encoder_graph
    from edgembed.export.validate import calibration_texts, embed_alone, measure_quality
    from edgembed.export.variants import _nbits_linear, int8_embedding
    from edgembed.model_dir import load_weights, read_model_dir
    from edgembed.sources import pull

    print(f"# int8 block size — {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, onnxruntime {onnxruntime.__version__}; MatMulNBits 8-bit, "
          f"accuracy_level 4 (activations per token row in blocks of the same size); "
          f"cosine to the fp32 export on the calibration corpus; the bar: min ≥ {MIN_COS}, "
          f"mean ≥ {MEAN_COS}")
    print("| model | block | min cos vs fp32 | mean cos | alone vs batch (min) | bar |")
    print("|---|---|---|---|---|---|")
    tmp = Path(tempfile.mkdtemp(prefix="edgembed-blocks-"))
    for name in args.models.split(","):
        manifest, model_dir = export_model(name, variants="fp32")
        pulled = pull(name)
        tok = load_tokenizer(pulled.source_dir, manifest.max_length)
        ids = [e.ids for e in tok.encode_batch(calibration_texts())]
        fp32 = OnnxBackend(model_dir / manifest.variants["fp32"].file, threads=args.threads)
        reference = embed_alone(fp32, ids)
        desc = read_model_dir(pulled.source_dir, pulled.spec.name)
        weights = load_weights(desc)
        for block in blocks:
            path = tmp / f"{name}.b{block}.onnx"
            graph = build_encoder_graph(desc, weights, linear=_nbits_linear(8, 4, block=block),
                                        embedding=int8_embedding)
            onnx.save(graph, str(path))
            q = measure_quality(OnnxBackend(path, threads=args.threads), ids, reference)
            meets = q.min_cosine >= MIN_COS and q.mean_cosine >= MEAN_COS
            print(f"| {name} | {block} | {q.min_cosine:.4f} | {q.mean_cosine:.5f} | "
                  f"{q.alone_vs_batch_min_cosine:.6f} | {'meets' if meets else 'misses'} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
