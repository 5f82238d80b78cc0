"""The classification head of cross-encoders in int8: accuracy against sentence-transformers.

For every tiny cross-encoder of tests/fixtures/models/ (random weights; no trained reranker's
weights can be downloaded where edgembed is built), the logits of the reference pairs, each
pair alone, from three ONNX graphs of the exporter, against sentence-transformers'
``CrossEncoder.predict`` logits recorded in tests/fixtures/reference/tiny/<name>.json
(models/tiny/make_head_references.py):

- fp32;
- int8 as shipped: the encoder int8 (block-wise, per-token activations), the head fp32;
- int8 with the head int8 too: the pooler / classifier dense and the output layer as
  block-wise int8 MatMulNBits, the pooled row quantized per block of 32 like a token's.

Reported: Spearman of the logits to the reference's, and the largest |logit difference|
relative to the largest |logit| (at least 1).

Run: .venv/bin/python benchmarks/rerank_quantization.py

Results are in docs/quantization.md ("Rerankers and SPLADE models").
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    import onnx

    import edgembed.export.heads as heads
    from edgembed._tokenize import HFPairTokenizer
    from edgembed.backends.onnx import OnnxBackend
    from edgembed.export.graph import build_encoder_graph, fp32_embedding, fp32_linear
    from edgembed.export.validate import spearman
    from edgembed.export.variants import _nbits_linear, int8_embedding
    from edgembed.model_dir import load_weights, read_model_dir
    tiny = importlib.import_module("tiny_models")  # tests/python's fixture helpers
    head_reference, model_dir, names, texts = (tiny.head_reference, tiny.model_dir, tiny.names,
                                               tiny.texts)

    q8 = _nbits_linear(8, 4)
    tmp = Path(tempfile.mkdtemp(prefix="rerank-quant-"))
    print(f"{'model':28s} {'scheme':22s} {'Spearman':>9s} {'max |diff|':>10s}")
    for name in names("rerank"):
        desc = read_model_dir(model_dir(name))
        weights = load_weights(desc)
        ref = head_reference(name)
        assert ref.logits is not None
        tok = HFPairTokenizer(desc.source_dir, desc.max_seq_length)
        all_texts = texts()
        ids, types, _ = tok.encode([(all_texts[q], all_texts[d]) for q, d in ref.pairs])
        schemes: dict[str, tuple[Any, Any, Any]] = {
            "fp32": (fp32_linear, fp32_embedding, fp32_linear),
            "int8 (head fp32)": (q8, int8_embedding, fp32_linear),
            "int8 (head int8)": (q8, int8_embedding, q8),
        }
        for label, (linear, embedding, head_linear) in schemes.items():
            module = vars(heads)  # the head's dense layers are its fp32_linear
            saved, module["fp32_linear"] = module["fp32_linear"], head_linear
            try:
                model = build_encoder_graph(desc, weights, linear=linear, embedding=embedding)
            finally:
                module["fp32_linear"] = saved
            path = tmp / f"{name}.{len(label)}.onnx"
            onnx.save(model, str(path))
            be = OnnxBackend(path, threads=1)
            got = np.stack([be.encode([s], token_types=[t])[0] for s, t in
                            zip(ids, types, strict=True)])
            scale = max(float(np.max(np.abs(ref.logits))), 1.0)
            diff = float(np.max(np.abs(got - ref.logits))) / scale
            rho = spearman(got.ravel(), ref.logits.ravel())
            print(f"{name:28s} {label:22s} {rho:9.5f} {diff:10.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
