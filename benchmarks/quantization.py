"""Quantization benchmark: accuracy, batch invariance, speed and size of each int8/int4 form.

Compares, in one run on the same corpus and threads:

- fp32 export (the reference);
- edgembed int8 (MatMulNBits 8-bit, block 32, per-token block activations);
- onnxruntime ``quantize_dynamic`` int8 (per-channel weights, per-tensor dynamic activations);
- weight-only 8-bit (MatMulNBits 8-bit, block 32, fp32 activations: accuracy_level 0);
- edgembed int4 and fp16.

Cosines are against fp32 on the calibration corpus; "alone vs batch" compares each text's
vector computed alone with the same text inside length-sorted batches of 16. Throughput is
measured interleaved (every round runs every model once, in turn) on batches of 32
medium-length texts (16–128 tokens) and reported as a ratio to fp32.

Run: .venv/bin/python benchmarks/quantization.py [--threads 2] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    args = ap.parse_args()

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from edgembed._tokenize import load_tokenizer
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export import export_model
    from edgembed.export.validate import calibration_texts, embed_alone, measure_quality
    from edgembed.export.variants import _nbits_linear, int8_embedding
    from edgembed.sources import pull

    manifest, model_dir = export_model(args.model, variants="fp32,int8,int4,fp16")
    pulled = pull(args.model)
    tok = load_tokenizer(pulled.source_dir, manifest.max_length)
    ids = [e.ids for e in tok.encode_batch(calibration_texts())]

    tmp = Path(tempfile.mkdtemp(prefix="edgembed-bench-"))
    paths = {v: model_dir / manifest.variants[v].file for v in ("fp32", "int8", "int4", "fp16")}
    qd = tmp / "quantize_dynamic.onnx"
    quantize_dynamic(str(paths["fp32"]), str(qd), per_channel=True, weight_type=QuantType.QInt8)
    paths["quantize_dynamic"] = qd
    from edgembed.export.graph import build_encoder_graph
    from edgembed.model_dir import load_weights, read_model_dir

    desc = read_model_dir(pulled.source_dir, pulled.spec.name)
    wo = build_encoder_graph(desc, load_weights(desc), linear=_nbits_linear(8, 0),
                             embedding=int8_embedding)
    onnx.save(wo, str(tmp / "weight_only_8bit.onnx"))
    paths["weight_only_8bit"] = tmp / "weight_only_8bit.onnx"

    order = ["fp32", "int8", "quantize_dynamic", "weight_only_8bit", "int4", "fp16"]
    backends = {k: OnnxBackend(paths[k], threads=args.threads) for k in order}
    reference = embed_alone(backends["fp32"], ids)
    quality = {k: measure_quality(backends[k], ids, reference) for k in order}

    medium = sorted((s for s in ids if 16 <= len(s) <= 128), key=len)
    batches = [medium[i: i + 32] for i in range(0, len(medium), 32)]
    n_tokens = sum(len(s) for s in medium)
    times: dict[str, list[float]] = {k: [] for k in order}
    for k in order:  # warm-up
        for b in batches:
            backends[k].encode(b)
    for _ in range(args.rounds):
        for k in order:
            t0 = time.perf_counter()
            for b in batches:
                backends[k].encode(b)
            times[k].append(time.perf_counter() - t0)

    base = statistics.median(times["fp32"])
    print(f"# quantization benchmark — {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, {args.threads} threads, onnxruntime "
          f"{__import__('onnxruntime').__version__}")
    print(f"# corpus: {len(ids)} texts; speed: {len(medium)} texts of 16–128 tokens "
          f"({n_tokens} tokens) in batches of 32, median of {args.rounds} interleaved rounds")
    print("| variant | min cos vs fp32 | mean cos | alone vs batch (min) | tokens/s | "
          "speed vs fp32 | size MB |")
    print("|---|---|---|---|---|---|---|")
    for k in order:
        q = quality[k]
        med = statistics.median(times[k])
        print(f"| {k} | {q.min_cosine:.4f} | {q.mean_cosine:.5f} | "
              f"{q.alone_vs_batch_min_cosine:.6f} | {n_tokens / med:,.0f} | {base / med:.2f}× | "
              f"{paths[k].stat().st_size / 1e6:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
