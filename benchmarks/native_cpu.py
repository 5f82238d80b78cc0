"""Native CPU backend: the engine's int8 kernels against onnxruntime and sentence-transformers.

One run, the same texts, 1 and 2 threads for every engine:

- native int8: ``edgembed.backends.native`` (libedgembed.so, this CPU's kernel set);
- onnxruntime fp32: edgembed's fp32 export;
- onnxruntime MatMulNBits 8-bit: edgembed's int8 export (block 32, ``accuracy_level=4``: the
  same block-wise int8 scheme as the engine);
- onnxruntime ``quantize_dynamic`` int8 (per-channel weights, per-tensor dynamic activations)
  of the fp32 export, made as benchmarks/quantization.py makes it;
- sentence-transformers on torch (fp32) in another Python (``--st-python``, default
  /tmp/refvenv/bin/python when it exists; torch is never a dependency of edgembed).

End to end means texts in, normalized vectors out, through the Embedder's pipeline for every
edgembed engine: Hugging Face ``tokenizers`` (truncation at 256), longest first, token-budget
batches (``edgembed.embedder.plan_batches``, 2,048 padded tokens, at most 128 texts), encode, L2
normalization. sentence-transformers runs its own ``encode(batch_size=32)``.

The corpus is the mixed-length reference corpus (262 texts, 2 to 256 tokens). Every engine
runs once to warm up; then ``--rounds`` rounds run every (engine, threads) in turn, with a short
pause between runs (onnxruntime's threads spin for a while after each run), so that a busy moment
on a shared machine hits all alike; the median counts. Columns: tokens/s ([CLS] and
[SEP] included), speed against onnxruntime fp32 at the same thread count, G-MAC/s (10.6 M
multiply-accumulates per token in the linear layers + 4,608·n² per text of n tokens) and its
share of the CPU's int8 peak (``--peak``: G-MAC/s of one core, measured with independent
vpdpbusd; 234 on the 2-core AVX-512 VNNI VM of docs/benchmarks.md, i.e. 64 per cycle at 3.67
GHz), min/mean cosine against the sentence-transformers fixture, and the min cosine between
texts embedded alone and in their batches (1.0: batch-invariant).

``--model`` takes any catalog model the engine runs (all-mpnet-base-v2: 768 dimensions, 12
layers, truncation at 384): the multiply-accumulates follow from its config.json, the texts are
the same corpus, and for a model without a committed fixture the quality columns compare with
sentence-transformers' vectors of this run (so they need ``--st-python``).

    .venv/bin/python benchmarks/native_cpu.py [--model NAME] [--rounds 5] [--st-python PY]
                                              [--peak 234]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from st_child import SentenceTransformersChild

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "fixtures" / "reference" / "all-minilm-l6-v2.json"


def mac_counts(config: dict[str, int]) -> tuple[int, int]:
    """Multiply-accumulates of a BERT-shaped encoder: per token in the linear layers
    (L × (QKV + out + FFN up + down)), and per text × n² in attention (scores, weighted sum)."""
    c, f, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return layers * (4 * c * c + 2 * c * f), layers * 2 * c

Vectors = npt.NDArray[np.float32]


def pipeline(encode: Callable[[list[list[int]]], Vectors],
             tokenize: Callable[[], list[list[int]]], dim: int) -> Vectors:
    """The Embedder's path: tokenize, longest first in token-budget batches, encode, normalize."""
    from edgembed.backends.choice import CPU_BATCH_TOKENS
    from edgembed.embedder import plan_batches

    ids = tokenize()
    out = np.zeros((len(ids), dim), dtype=np.float32)
    for batch in plan_batches([len(s) for s in ids], CPU_BATCH_TOKENS, 128):
        out[batch] = encode([ids[i] for i in batch])
    normalized: Vectors = out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True),
                                           np.float32(1e-12))
    return normalized


def cosines(a: Vectors, b: Vectors) -> npt.NDArray[np.float64]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos: npt.NDArray[np.float64] = (a64 * b64).sum(1) / np.linalg.norm(a64, axis=1) \
        / np.linalg.norm(b64, axis=1)
    return cos


def alone_vs_batch(encode: Callable[[list[list[int]]], Vectors], ids: list[list[int]]) -> float:
    """Min cosine between texts embedded alone and inside one length-sorted batch."""
    picks = sorted(ids[:48], key=len, reverse=True)
    together = encode(picks)
    alone = np.concatenate([encode([s]) for s in picks])
    return float(cosines(alone, together).min())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--st-python", default="/tmp/refvenv/bin/python" if Path(
        "/tmp/refvenv/bin/python").exists() else "", help="a Python with sentence-transformers")
    ap.add_argument("--peak", type=float, default=234.0,
                    help="int8 G-MAC/s of one core (vpdpbusd peak) for the share column")
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from edgembed._tokenize import load_tokenizer
    from edgembed.backends.native import NativeBackend
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export import export_bundle, export_model
    from edgembed.sources import pull

    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    texts: list[str] = reference["texts"]
    manifest, model_dir = export_model(args.model, variants="fp32,int8")
    _, bundle = export_bundle(args.model)
    pulled = pull(args.model)
    config = json.loads((pulled.source_dir / "config.json").read_text(encoding="utf-8"))
    linear_macs, attention_macs = mac_counts(config)
    tok = load_tokenizer(pulled.source_dir, manifest.max_length, truncate=True)
    ids = [e.ids for e in tok.encode_batch(texts)]
    own_fixture = args.model == reference["model"]
    if own_fixture:
        assert ids == reference["token_ids"], "tokenizer ids differ from the fixture"
    elif not args.st_python:
        ap.error(f"{args.model} has no committed fixture: give --st-python for its reference")
    n_tokens = sum(len(s) for s in ids)
    macs = n_tokens * linear_macs + attention_macs * sum(len(s) ** 2 for s in ids)

    tmp = Path(tempfile.mkdtemp(prefix="edgembed-native-bench-"))
    qd = tmp / "quantize_dynamic.onnx"
    quantize_dynamic(str(model_dir / manifest.variants["fp32"].file), str(qd), per_channel=True,
                     weight_type=QuantType.QInt8)
    onnx_files = {
        "onnxruntime fp32": model_dir / manifest.variants["fp32"].file,
        "onnxruntime MatMulNBits 8-bit": model_dir / manifest.variants["int8"].file,
        "onnxruntime quantize_dynamic int8": qd,
    }

    def tokenize() -> list[list[int]]:
        return [e.ids for e in tok.encode_batch(texts)]

    engines: dict[tuple[str, int], Callable[[list[list[int]]], Vectors]] = {}
    described = ""
    for threads in thread_counts:
        native = NativeBackend(bundle, threads=threads)
        described = native.describe()
        engines[("native int8", threads)] = native.encode
        for name, path in onnx_files.items():
            engines[(name, threads)] = OnnxBackend(path, threads=threads).encode

    st = None
    if args.st_python:
        try:
            st = SentenceTransformersChild(args.st_python, pulled.source_dir, texts,
                                           manifest.max_length)
        except (OSError, RuntimeError) as exc:
            if not own_fixture:
                raise
            print(f"# sentence-transformers skipped: {exc}", file=sys.stderr)

    times: dict[tuple[str, int], list[float]] = {k: [] for k in engines}
    vectors: dict[tuple[str, int], Vectors] = {}
    for key, enc in engines.items():  # warm-up, and the vectors for the quality columns
        vectors[key] = pipeline(enc, tokenize, manifest.dim)
    if st is not None:
        for threads in thread_counts:
            times[("sentence-transformers fp32", threads)] = []
            _, vectors[("sentence-transformers fp32", threads)] = st.run(threads)
    # the quality columns: the committed fixture, else sentence-transformers of this run
    want = (np.asarray(reference["embeddings"], dtype=np.float32) if own_fixture
            else vectors[("sentence-transformers fp32", thread_counts[0])])
    load_before = os.getloadavg()[0]
    for _ in range(args.rounds):
        for key in times:
            time.sleep(0.2)  # the previous engine's idle threads (onnxruntime spins) go to sleep
            name, threads = key
            if name.startswith("sentence-transformers"):
                assert st is not None
                seconds, _ = st.run(threads)
            else:
                t0 = time.perf_counter()
                pipeline(engines[key], tokenize, manifest.dim)
                seconds = time.perf_counter() - t0
            times[key].append(seconds)
    invariance = {key: alone_vs_batch(enc, ids) for key, enc in engines.items() if key[1] == 1}
    if st is not None:
        st.close()

    import onnxruntime

    print(f"# native CPU benchmark, {args.model} ({manifest.dim} dims, "
          f"{config['num_hidden_layers']} layers, max {manifest.max_length} tokens) — "
          f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, "
          f"{os.cpu_count()} cores, onnxruntime {onnxruntime.__version__}"
          + (f", torch {st.info['torch']}, sentence-transformers {st.info['st']}" if st else ""))
    print(f"# {described}")
    print(f"# load average (1 min) {load_before:.1f} before the timed rounds, "
          f"{os.getloadavg()[0]:.1f} after: other work on a shared machine slows every engine")
    against = "the fixture" if own_fixture else "sentence-transformers of this run"
    print(f"# corpus: {len(texts)} texts, {n_tokens} tokens, {macs / 1e9:.1f} G-MAC; "
          f"min/mean cos against {against}; median of {args.rounds} interleaved rounds")
    print("| engine | threads | tokens/s | vs onnxruntime fp32 | G-MAC/s | of int8 peak | "
          "min cos vs ST | mean cos | alone vs batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for threads in thread_counts:
        base = statistics.median(times[("onnxruntime fp32", threads)])
        for key in (k for k in times if k[1] == threads):
            med = statistics.median(times[key])
            cos = cosines(vectors[key], want)
            inv = invariance.get((key[0], 1))
            print(f"| {key[0]} | {threads} | {n_tokens / med:,.0f} | {base / med:.2f}× | "
                  f"{macs / med / 1e9:.1f} | {macs / med / 1e9 / (args.peak * threads):.0%} | "
                  f"{cos.min():.4f} | {cos.mean():.5f} | "
                  f"{'—' if inv is None else f'{inv:.6f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
