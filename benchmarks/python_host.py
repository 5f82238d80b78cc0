"""Python host throughput on a mixed-length corpus (8–256 tokens), all engines in one run.

Compares, on the same texts and the same CPU threads:

- edgembed ``Embedder`` (length-sorted token-budget batches): int8 on the native C engine (what
  ``backend="auto"`` picks on a CPU when the engine library is built; skipped with a note when it
  is not), int8 and fp32 on onnxruntime;
- sentence-transformers on torch (CPU, fp32: the usual user choice), run by another Python
  that has torch and sentence-transformers (``--st-python``; they are never dependencies of
  edgembed), skipped with a note when there is none;
- plain onnxruntime on the same ONNX files, batching in input order with padding to each
  batch's longest (how fastembed and transformers.js batch), batch size ``--plain-batch``.

Every engine embeds the whole corpus once to warm up (sentence-transformers: 64 texts), then
``--rounds`` rounds time each engine in turn, so a busy moment on a shared machine hits all of
them alike; each engine's median counts. Quality columns: min/mean cosine against
sentence-transformers (or against edgembed fp32 when sentence-transformers is absent).

    .venv/bin/python benchmarks/python_host.py --st-python /tmp/benchvenv/bin/python

with /tmp/benchvenv made by ``python3 -m venv /tmp/benchvenv && /tmp/benchvenv/bin/pip
install torch==2.13.0 sentence-transformers``. Results go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from edgembed import Embedder
from edgembed.backends.native import native_available
from st_child import SentenceTransformersChild

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"

def make_corpus(embedder: Embedder, n: int, seed: int) -> list[str]:
    """``n`` English texts whose token counts spread evenly over 8..256, in shuffled order."""
    texts = json.loads(CORPUS.read_text(encoding="utf-8"))
    words = " ".join(t for t in texts if t.isascii() and len(t) > 40).split()
    rng = random.Random(seed)
    targets = [int(8 + (256 - 8) * i / max(n - 1, 1)) for i in range(n)]
    rng.shuffle(targets)
    out: list[str] = []
    for target in targets:
        start = rng.randrange(len(words))
        k = max(1, int(target * 0.7))
        text = " ".join(words[(start + j) % len(words)] for j in range(k))
        while embedder.count_tokens(text, truncate=False)[0] > target and k > 1:
            k -= 1
            text = " ".join(words[(start + j) % len(words)] for j in range(k))
        out.append(text)
    return out


def timed(fn: Callable[[], np.ndarray]) -> Callable[[], tuple[float, np.ndarray]]:
    def run() -> tuple[float, np.ndarray]:
        t = time.perf_counter()
        result = fn()
        return time.perf_counter() - t, result

    return run


def plain_onnxruntime(model_path: Path, tokenizer_dir: Path, max_length: int,
                      batch_size: int) -> Callable[[list[str]], np.ndarray]:
    """The common pipeline: tokenize a batch in input order, pad to its longest, run."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    tok.enable_truncation(max_length)
    tok.enable_padding()  # to the batch's longest
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])

    def run(texts: list[str]) -> np.ndarray:
        parts = []
        for i in range(0, len(texts), batch_size):
            enc = tok.encode_batch(texts[i:i + batch_size])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            (v,) = session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})
            parts.append(v)
        return np.concatenate(parts).astype(np.float32)

    return run


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="all-minilm-l6-v2")
    ap.add_argument("--texts", type=int, default=512, help="corpus size (default 512)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved timed rounds; each engine's median counts (default 3)")
    ap.add_argument("--plain-batch", type=int, default=32,
                    help="batch size of the plain onnxruntime pipeline (default 32)")
    ap.add_argument("--st-python", help="a Python with torch and sentence-transformers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds of pause before each timed run (default 1)")
    args = ap.parse_args()

    int8 = Embedder.load(args.model, variant="int8", backend="onnx")
    fp32 = Embedder.load(args.model, variant="fp32", backend="onnx")
    ok, why = native_available()
    native = Embedder.load(args.model, variant="int8", backend="native") if ok else None
    texts = make_corpus(int8, args.texts, args.seed)
    lengths = np.array(int8.count_tokens(texts))
    padded_plain = sum(
        len(lengths[i:i + args.plain_batch]) * lengths[i:i + args.plain_batch].max()
        for i in range(0, len(texts), args.plain_batch))
    print(f"machine: {cpu_name()}, {os.cpu_count()} logical CPUs, {platform.system()} "
          f"{platform.machine()}, Python {platform.python_version()}")
    print(f"corpus: {len(texts)} texts, {lengths.sum():,} tokens, lengths {lengths.min()}–"
          f"{lengths.max()} (median {int(np.median(lengths))}); plain pipeline pads to "
          f"{padded_plain:,} tokens")

    source = int8.model_dir / "source"
    engines: dict[str, Callable[[], tuple[float, np.ndarray | None]]] = {}
    if native is not None:
        engines["edgembed int8 (native engine)"] = timed(lambda: native.embed(texts))
    else:
        print(f"edgembed native engine: skipped ({why})")
    engines["edgembed int8 (onnxruntime)"] = timed(lambda: int8.embed(texts))
    engines["edgembed fp32 (onnxruntime)"] = timed(lambda: fp32.embed(texts))
    for variant in ("int8", "fp32"):
        run = plain_onnxruntime(int8.model_dir / f"model.{variant}.onnx", source,
                                int8.max_length, args.plain_batch)
        engines[f"plain onnxruntime {variant}"] = timed(functools.partial(run, texts))
    for engine in engines.values():  # warm-up
        engine()
    st_key = "sentence-transformers (torch CPU fp32)"
    st_note = "sentence-transformers: skipped (no --st-python)"
    child = None
    if args.st_python:
        child = SentenceTransformersChild(args.st_python, source, texts, int8.max_length)
        engines[st_key] = child.run
        st_note = (f"sentence-transformers {child.info['st']}, torch {child.info['torch']}, "
                   f"{child.info['threads']} threads, batch 32")
    times: dict[str, list[float]] = {name: [] for name in engines}
    vectors: dict[str, np.ndarray] = {}
    for r in range(args.rounds):  # interleaved, so a busy moment hits every engine alike
        for name, engine in engines.items():
            time.sleep(args.settle)  # let the previous engine's worker threads go idle
            seconds, v = engine()
            times[name].append(seconds)
            if v is not None:
                vectors[name] = v
        print(f"  round {r + 1}: " + ", ".join(f"{n} {t[-1]:.1f} s" for n, t in times.items()),
              flush=True)
    if child is not None:
        child.close()
    print(st_note)
    results = {name: (float(np.median(t)), vectors[name]) for name, t in times.items()}

    ref_name = st_key if st_key in results else "edgembed fp32 (onnxruntime)"
    ref = results[ref_name][1]
    print(f"\n| engine | texts/s | tokens/s | vs sentence-transformers | vs plain onnxruntime "
          f"(same variant) | cosine vs {ref_name.split(' (')[0]}: min / mean |")
    print("|---|---:|---:|---:|---:|---|")
    for name, (seconds, vecs) in results.items():
        cos = np.sum(vecs * ref, axis=1)
        vs_st = (f"{results[st_key][0] / seconds:.2f}×" if st_key in results else "–")
        variant = "fp32" if "fp32" in name else "int8"
        plain = f"plain onnxruntime {variant}"
        vs_plain = (f"{results[plain][0] / seconds:.2f}×"
                    if name.startswith("edgembed") and plain in results else "–")
        print(f"| {name} | {len(texts) / seconds:,.1f} | {lengths.sum() / seconds:,.0f} | "
              f"{vs_st} | {vs_plain} | {cos.min():.5f} / {cos.mean():.6f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
