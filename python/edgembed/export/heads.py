"""The heads of cross-encoders and SPLADE models, on the encoder graph of ``graph.py``.

``build_encoder_graph`` builds the encoder of every model; for a model whose task is not
embedding it hands its last hidden states to :func:`build_head`, which adds the head exactly as
transformers computes it and returns the graph's outputs:

- **classification** (rerank) → ``logits`` (B, labels), float32. The first token's state
  (``cls``) or the masked mean over the sequence (ModernBERT's ``classifier_pooling: mean``)
  goes through the family's head: BERT's pooler (dense + tanh) then the classifier;
  RoBERTa-likes' and MPNet's dense + tanh + out_proj; DistilBERT's pre_classifier + relu +
  classifier; ModernBERT's dense + activation + LayerNorm, then the classifier. One row per
  pair, so these layers run in fp32 in every variant (as Dense modules do).
- **masked LM + SPLADE pooling** (sparse) → ``sparse_embedding`` (B, V), float32. Per token:
  dense + activation + LayerNorm, then the decoder (V, C) — by far the largest matrix of these
  models, run in the variant's form (block-wise int8 in the int8 variant) like every per-token
  layer — then, over the text's tokens, sentence-transformers' SpladePooling: ``max`` or
  ``sum`` of log(1 + relu(logit)) ("relu") or log(1 + log(1 + relu(logit))) ("log1p_relu").
  For max pooling the maximum is taken first (log1p and relu are non-decreasing, so
  max f(x) = f(max x), and the padding's zeros never win over relu's zero): the (B, T, V)
  logits are reduced before anything else is computed on them. log1p is computed accurately
  for small x (``log(u) * x / (u - 1)``, u = 1 + x; x itself where u rounds to 1), as torch's.

Shape letters: B = batch, T = tokens per sequence, C = hidden size, V = vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto, ValueInfoProto, helper

from ..errors import UnsupportedArchitecture
from ..model_dir import Activation, Family, HeadKind, ModelDescription
from .onnx_ops import Array, GraphBuilder, Linear, fp32_linear

__all__ = ["HeadContext", "build_head"]


@dataclass(frozen=True)
class HeadContext:
    """What the head needs from the encoder graph being built."""

    g: GraphBuilder
    desc: ModelDescription
    weights: dict[str, Array]
    hidden: str  # (B, T, C), in the compute dtype
    maskf: str  # (B, T) float32: 1 for the text's tokens, 0 for padding
    linear: Linear  # the variant's form of a per-token linear layer
    layer_norm: Callable[[str, str], str]  # (x, prefix) → LayerNorm with the encoder's eps
    activation: Callable[..., str]  # (x, act, f32=...) → act(x)
    to_f32: Callable[[str], str]
    i64: Callable[[str, Any], str]
    num: Callable[..., str]


def build_head(ctx: HeadContext) -> list[ValueInfoProto]:
    """Add the head of ``ctx.desc`` to the graph; returns its outputs' value infos."""
    kind = ctx.desc.head.kind
    if kind is HeadKind.CLASSIFICATION:
        return [_classification(ctx)]
    if kind is HeadKind.MLM:
        return [_splade(ctx)]
    raise UnsupportedArchitecture(f"{ctx.desc.source_dir}: no head to build for task "
                                  f"{ctx.desc.task.value}")


def _classification(ctx: HeadContext) -> ValueInfoProto:
    g, desc, w = ctx.g, ctx.desc, ctx.weights
    head = desc.head
    h = ctx.to_f32(ctx.hidden)  # (B, T, C)
    if head.pooling == "mean":  # ModernBERT: Σ m h / Σ m (no clamp, as transformers)
        m3 = g.op("Unsqueeze", [ctx.maskf, ctx.i64("head_axes_2", [2])])
        t_axis = ctx.i64("head_axes_t", [1])
        summed = g.op("ReduceSum", [g.op("Mul", [h, m3]), t_axis], keepdims=0)
        pooled = g.op("Div", [summed, g.op("ReduceSum", [m3, t_axis], keepdims=0)])
    else:
        pooled = g.op("Gather", [h, ctx.i64("head_first", 0)], axis=1)  # (B, C)

    def dense(x: str, name: str) -> str:
        return fp32_linear(g, x, name, w[name + ".weight"], w.get(name + ".bias"))

    act = head.activation if isinstance(head.activation, Activation) else Activation(
        head.activation)
    fam = desc.encoder.family
    if fam is Family.BERT:
        x = ctx.activation(dense(pooled, "pooler.dense"), Activation.TANH, f32=True)
    elif fam is Family.MODERNBERT:
        x = ctx.activation(dense(pooled, "classifier.dense"), act, f32=True)
        x = ctx.to_f32(ctx.layer_norm(x, "classifier.norm"))
    else:  # RoBERTa-likes and MPNet (tanh), DistilBERT (relu)
        x = ctx.activation(dense(pooled, "classifier.dense"), act, f32=True)
    g.nodes.append(helper.make_node("Identity", [dense(x, "classifier.out")], ["logits"]))
    return helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                         ["batch", head.num_labels])


def _log1p(ctx: HeadContext, x: str) -> str:
    """log(1 + x) for x >= 0, accurate where 1 + x rounds (Goldberg's formula)."""
    g = ctx.g
    one = ctx.num(1.0, f32=True)
    u = g.op("Add", [x, one])
    um1 = g.op("Sub", [u, one])
    scaled = g.op("Mul", [g.op("Log", [u]), g.op("Div", [x, um1])])
    return g.op("Where", [g.op("Equal", [u, one]), x, scaled], hint="log1p")


def _splade(ctx: HeadContext) -> ValueInfoProto:
    g, desc, w = ctx.g, ctx.desc, ctx.weights
    head = desc.head
    t = ctx.linear(g, ctx.hidden, "mlm.transform", w["mlm.transform.weight"],
                   w.get("mlm.transform.bias"))
    t = ctx.activation(t, head.transform_activation)
    t = ctx.layer_norm(t, "mlm.norm")
    logits = ctx.to_f32(ctx.linear(g, t, "mlm.decoder", w["mlm.decoder.weight"],
                                   w.get("mlm.decoder.bias")))  # (B, T, V)
    m3 = g.op("Unsqueeze", [ctx.maskf, ctx.i64("splade_axes_2", [2])])  # (B, T, 1)
    t_axis = ctx.i64("splade_axes_t", [1])
    twice = head.activation == "log1p_relu"
    if head.pooling == "max":
        keep = g.op("Cast", [m3], to=TensorProto.BOOL)
        lowest = ctx.num(float(np.finfo(np.float32).min), f32=True)
        best = g.op("ReduceMax", [g.op("Where", [keep, logits, lowest])], axes=[1],
                    keepdims=0)  # (B, V)
        out = _log1p(ctx, g.op("Relu", [best]))
        if twice:
            out = _log1p(ctx, out)
    else:  # sum over the text's tokens
        per_token = _log1p(ctx, g.op("Relu", [logits]))
        if twice:
            per_token = _log1p(ctx, per_token)
        out = g.op("ReduceSum", [g.op("Mul", [per_token, m3]), t_axis], keepdims=0)
    g.nodes.append(helper.make_node("Identity", [out], ["sparse_embedding"]))
    return helper.make_tensor_value_info("sparse_embedding", TensorProto.FLOAT,
                                         ["batch", desc.encoder.vocab_size])
