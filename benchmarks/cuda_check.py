"""CUDA check for the Python host: fp16 on the GPU against fp32, and throughput.

One script for a machine with an NVIDIA GPU and ``pip install 'edgembed[cuda]'``; it downloads
nothing and ends in a few minutes. It needs the model already in the cache (``embed pull``
there, or ``EDGEMBED_HOME`` pointing at a copy) or an exported model directory (``--model
DIR`` holding ``edgembed.json`` and ``model.fp16.onnx``; the fp16 variant is exported on the
spot from the cached source if it is missing).

Checks, each printed with its number:

1. parity: fp16 on CUDA vs fp32 on the CPU (when the fp32 variant is there) and vs the
   sentence-transformers reference vectors in tests/fixtures (all-minilm-l6-v2), cosine
   >= 0.999 on every text, alone and batched;
2. throughput on a mixed-length corpus: edgembed fp16 on CUDA (I/O binding, token budget
   ``--batch-tokens``) and, where torch with CUDA and sentence-transformers are importable and
   the Hugging Face files are present, sentence-transformers in fp16 on the same GPU.

Exit status: 0 all checks passed, 1 a check failed, 2 nothing to check here (no usable GPU:
the message says why).

    python benchmarks/cuda_check.py [--model all-minilm-l6-v2] [--texts 4096]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "fixtures" / "reference" / "all-minilm-l6-v2.json"
PARITY = 0.999


def cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    cos: np.ndarray = np.sum(a * b, axis=1)
    return cos


def report(name: str, cos: np.ndarray) -> bool:
    ok = bool(cos.min() >= PARITY)
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: min {cos.min():.6f}, mean {cos.mean():.6f} "
          f"(bar {PARITY})")
    return ok


def mixed_corpus(texts: list[str], n: int) -> list[str]:
    rng = np.random.default_rng(0)
    prose = [t for t in texts if len(t) > 20]
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 8))
        out.append(" ".join(rng.choice(prose, size=k)))
    return out


def st_throughput(hf_dir: Path, texts: list[str], batch: int) -> tuple[float, np.ndarray] | str:
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        return f"skipped ({exc.name} is not importable)"
    if not torch.cuda.is_available():
        return "skipped (torch has no CUDA here)"
    if not (hf_dir / "model.safetensors").is_file():
        return f"skipped (no Hugging Face files in {hf_dir})"
    model = SentenceTransformer(str(hf_dir), device="cuda").half()
    model.encode(texts[:512], batch_size=batch)
    torch.cuda.synchronize()
    t = time.perf_counter()
    v = model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t, np.asarray(v, dtype=np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--texts", type=int, default=4096)
    ap.add_argument("--batch-tokens", type=int, default=None)
    ap.add_argument("--st-batch", type=int, default=256)
    args = ap.parse_args()

    from edgembed import BackendUnavailable, Embedder
    from edgembed.backends.onnx import cuda_available

    usable, why = cuda_available()
    if not usable:
        print(f"cuda_check: nothing to check here: {why}")
        return 2
    try:
        gpu = Embedder.load(args.model, variant="fp16", backend="cuda")
    except BackendUnavailable as exc:
        print(f"cuda_check: nothing to check here: {exc}")
        return 2
    print(f"{gpu!r} at {gpu.model_dir}")
    ok = True

    reference: dict[str, Any] | None = None
    if gpu.model_name == "all-minilm-l6-v2" and REFERENCE.is_file():
        reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    corpus = reference["texts"] if reference else mixed_corpus(["a short text"] * 8, 256)
    print("1. parity")
    batched = gpu.embed(corpus)
    alone = np.concatenate([gpu.embed(t) for t in corpus])
    ok &= report("fp16 CUDA alone vs batched", cos_rows(alone, batched))
    if "fp32" in gpu.manifest.variants:
        cpu = Embedder.load(gpu.model_dir, variant="fp32", backend="onnx")
        ok &= report("fp16 CUDA vs fp32 CPU", cos_rows(batched, cpu.embed(corpus)))
    if reference is not None:
        ref = np.asarray(reference["embeddings"], dtype=np.float32)
        ok &= report("fp16 CUDA alone vs sentence-transformers fp32", cos_rows(alone, ref))
        ok &= report("fp16 CUDA batched vs sentence-transformers fp32", cos_rows(batched, ref))

    print("2. throughput")
    texts = mixed_corpus(corpus, args.texts)
    tokens = sum(gpu.count_tokens(texts))
    gpu.embed(texts[:512], max_batch_tokens=args.batch_tokens)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        mine = gpu.embed(texts, max_batch_tokens=args.batch_tokens)
        best = min(best, time.perf_counter() - t)
    print(f"  edgembed fp16 CUDA: {len(texts) / best:,.0f} texts/s, {tokens / best:,.0f} tokens/s "
          f"({len(texts)} texts, {tokens:,} tokens, budget "
          f"{args.batch_tokens or gpu.max_batch_tokens} tokens)")
    st = st_throughput(gpu.model_dir / "source", texts, args.st_batch)
    if isinstance(st, str):
        print(f"  sentence-transformers fp16 CUDA: {st}")
    else:
        seconds, theirs = st
        print(f"  sentence-transformers fp16 CUDA: {len(texts) / seconds:,.0f} texts/s "
              f"(batch {args.st_batch}); edgembed is {seconds / best:.2f}× as fast")
        ok &= report("edgembed fp16 vs sentence-transformers fp16", cos_rows(mine, theirs))
    print("all checks passed" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
