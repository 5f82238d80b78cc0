"""Build a sentence encoder as an ONNX graph straight from its description and weights.

No torch: the graph is written node by node with the ``onnx`` package, so edgembed controls
exactly what runs — pooling, Dense modules and L2 normalization inside the graph, and the
linear layers in whichever form a variant needs (fp32, fp16, block-wise int8 or int4; see
``variants.py``). One builder serves every family of ``model_dir.Family`` by its features:
absolute positions (offset or not), MPNet's relative position buckets, rotary positions with
global and sliding-window attention, post- or pre-norm, MLP or GLU feed-forward, biases or not.

Inputs: ``input_ids`` and ``attention_mask`` (int64, (B, T), right-padded, dynamic axes), and
``prompt_length`` (int64, (B,)) only for a model whose pooling leaves the prompt out
(``include_prompt: false``): the number of leading tokens of each text that belong to its prompt
(the special token before it included). Token type ids are always 0 for single-text
embeddings, so the token-type-0 row is folded into the position table; a cross-encoder of a
family with token types (BERT) takes ``token_type_ids`` (int64, (B, T)) for its pairs.

Rerank and sparse models end in their head instead of pooling (``heads.py``): their outputs are
``token_embeddings`` and ``logits`` (B, labels) or ``sparse_embedding`` (B, V). An embedding
model's outputs:

- ``token_embeddings`` (B, T, C): the last hidden states;
- ``pooled`` (B, E): pooling, then the Dense modules; not normalized;
- ``sentence_embedding`` (B, E): ``pooled`` L2-normalized when the model has a Normalize
  module, else ``pooled`` itself.

Shape letters: B = batch, T = tokens per sequence, C = hidden size, H = heads,
Dh = C / H, F = FFN size, E = output size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import UnsupportedArchitecture
from ..model_dir import (
    Activation,
    FfnKind,
    ModelDescription,
    NormPlacement,
    PoolingMode,
    PositionKind,
    Task,
    relative_position_bucket,
)
from .onnx_ops import (
    MS_DOMAIN,
    Array,
    Embedding,
    GraphBuilder,
    Linear,
    fp32_embedding,
    fp32_linear,
)

__all__ = ["MS_DOMAIN", "Array", "Embedding", "GraphBuilder", "Linear", "build_encoder_graph",
           "emit_activation", "fp32_embedding", "fp32_linear", "takes_token_types"]

OPSET = 17
MASKED = -10000.0  # additive attention mask: exp() of it underflows to 0 in float32


def emit_activation(g: GraphBuilder, x: str, act: Activation, num: Callable[[float], str]) -> str:
    """``act`` applied to ``x``; ``num(v)`` gives a scalar constant in x's dtype."""
    if act is Activation.GELU:  # 0.5 x (1 + erf(x / sqrt 2))
        erf = g.op("Erf", [g.op("Mul", [x, num(1.0 / math.sqrt(2.0))])])
        return g.op("Mul", [g.op("Mul", [x, num(0.5)]), g.op("Add", [erf, num(1.0)])],
                    hint="gelu")
    if act is Activation.GELU_TANH:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.op("Mul", [g.op("Mul", [x, x]), x])
        inner = g.op("Add", [x, g.op("Mul", [cube, num(0.044715)])])
        t = g.op("Tanh", [g.op("Mul", [inner, num(math.sqrt(2.0 / math.pi))])])
        return g.op("Mul", [g.op("Mul", [x, num(0.5)]), g.op("Add", [t, num(1.0)])],
                    hint="gelu_tanh")
    if act is Activation.RELU:
        return g.op("Relu", [x])
    if act is Activation.SILU:
        return g.op("Mul", [x, g.op("Sigmoid", [x])], hint="silu")
    if act is Activation.TANH:
        return g.op("Tanh", [x])
    if act is Activation.SIGMOID:
        return g.op("Sigmoid", [x])
    return x


def _check_supported(desc: ModelDescription) -> None:
    if desc.task is Task.EMBEDDING and desc.pooling is None:
        raise UnsupportedArchitecture(
            f"{desc.source_dir}: an embedding model needs a pooling configuration")


def takes_token_types(desc: ModelDescription) -> bool:
    """Whether the graph has a ``token_type_ids`` input: cross-encoders of families with more
    than one token type (BERT reads the document as type 1). Everything else uses type 0 only,
    folded into the position table."""
    return desc.task is Task.RERANK and desc.encoder.type_vocab_size > 1


def build_encoder_graph(
    desc: ModelDescription,
    weights: dict[str, Array],
    *,
    linear: Linear = fp32_linear,
    embedding: Embedding = fp32_embedding,
    compute_dtype: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """The whole encoder + pooling + Dense + normalize graph of ``desc``.

    ``weights`` are ``model_dir.load_weights(desc)``; ``linear``/``embedding`` choose the
    weight form. With ``compute_dtype=FLOAT16`` the hidden states flow in fp16 between layers
    while LayerNorm, attention scores, softmax, rotary positions, pooling and the Dense modules
    run in fp32 (casts around them).
    """
    _check_supported(desc)
    enc = desc.encoder
    g = GraphBuilder()
    c, h = enc.hidden_size, enc.num_heads
    dh = enc.head_dim
    f16 = compute_dtype == TensorProto.FLOAT16

    def to_compute(x: str) -> str:
        return g.op("Cast", [x], to=TensorProto.FLOAT16) if f16 else x

    def to_f32(x: str) -> str:
        return g.op("Cast", [x], to=TensorProto.FLOAT) if f16 else x

    ints: dict[str, Array] = {}

    def i64(name: str, v: Any) -> str:
        """An int64 constant called ``name``, made once (the same name is the same value)."""
        value = np.asarray(v, dtype=np.int64)
        if name not in ints:
            ints[name] = value
            g.const(name, value)
        assert np.array_equal(ints[name], value), name
        return name

    consts: dict[tuple[str, float], str] = {}

    def num(v: float, *, f32: bool = False) -> str:
        """A scalar constant in the compute dtype (or float32), made once."""
        dt = np.float32 if f32 or not f16 else np.float16
        key = (np.dtype(dt).name, v)
        if key not in consts:
            consts[key] = g.const(f"c_{len(consts)}_{np.dtype(dt).name}", np.asarray(v, dt))
        return consts[key]

    def layer_norm(x: str, prefix: str) -> str:
        inputs = [to_f32(x), g.const(prefix + ".weight", weights[prefix + ".weight"])]
        if prefix + ".bias" in weights:
            inputs.append(g.const(prefix + ".bias", weights[prefix + ".bias"]))
        return to_compute(g.op("LayerNormalization", inputs, hint=prefix, axis=-1,
                               epsilon=enc.layer_norm_eps))

    def activation(x: str, act: Activation, *, f32: bool = False) -> str:
        return emit_activation(g, x, act, lambda v: num(v, f32=f32))

    def lin(inp: str, name: str) -> str:
        return linear(g, inp, name, weights[name + ".weight"], weights.get(name + ".bias"))

    # --- sequence-length helpers ---
    shape = g.op("Shape", ["input_ids"])
    seq_len = g.op("Slice", [shape, i64("one_1d", [1]), i64("two_1d", [2])])  # [T]
    seq_len_scalar = g.op("Squeeze", [seq_len, i64("axis0_sq", [0])])
    positions = g.op("Range", [i64("zero_s", 0), seq_len_scalar, i64("one_s", 1)])  # (T,)

    # --- embeddings ---
    x = embedding(g, "input_ids", "embeddings.word", weights["embeddings.word"])  # f32
    types = takes_token_types(desc)
    if types:  # a pair's token types: rows of the (types, C) table
        x = g.op("Add", [x, g.op("Gather", [g.const("embeddings.token_type",
                                                     weights["embeddings.token_type"]),
                                            "token_type_ids"], axis=0)])
    if enc.position_kind is PositionKind.ABSOLUTE:
        table = weights["embeddings.position"].astype(np.float32)
        if enc.type_vocab_size and not types:
            table = table + weights["embeddings.token_type"][0][None, :]
        table_name = g.const("embeddings.position_table", table.astype(np.float32))
        if enc.position_offset == 0:
            pos = g.op("Slice", [table_name, i64("zero_1d", [0]), seq_len,
                                 i64("axis0_1d", [0])])  # (T, C)
        else:
            # transformers: positions count the non-padding tokens, starting at padding_idx + 1
            pad = enc.position_offset - 1
            is_pad = g.op("Equal", ["input_ids", i64("pad_id", pad)])
            not_pad = g.op("Cast", [g.op("Not", [is_pad])], to=TensorProto.INT64)
            count = g.op("CumSum", [not_pad, i64("axis1_s", 1)])
            ids = g.op("Add", [g.op("Mul", [count, not_pad]), i64("pad_id2", pad)])
            pos = g.op("Gather", [table_name, ids], axis=0)  # (B, T, C)
        x = g.op("Add", [x, pos])
    x = layer_norm(x, "embeddings.norm")

    # --- additive attention masks ---
    maskf = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)  # (B, T)
    neg = g.op("Mul", [g.op("Sub", [num(1.0, f32=True), maskf]), num(MASKED, f32=True)])
    key_mask = g.op("Unsqueeze", [neg, i64("axes_1_2", [1, 2])])  # (B, 1, 1, T)
    global_mask = key_mask
    local_mask = key_mask
    if enc.local_window:
        # ModernBERT's sliding window: i attends to j iff |i - j| <= local_window // 2
        rel = g.op("Sub", [g.op("Unsqueeze", [positions, i64("axes_0", [0])]),
                           g.op("Unsqueeze", [positions, i64("axes_1", [1])])])  # (T, T)
        outside = g.op("Greater", [g.op("Abs", [rel]), i64("half_window", enc.local_window // 2)])
        band = g.op("Mul", [g.op("Cast", [outside], to=TensorProto.FLOAT), num(MASKED, f32=True)])
        local_mask = g.op("Add", [key_mask, band])  # (B, 1, T, T)
    if enc.relative_buckets:
        # MPNet: one bias per head and relative distance, shared by all layers. The bucket of
        # every distance the model can see is computed here, exactly as transformers does.
        span = enc.max_positions
        buckets = relative_position_bucket(np.arange(-(span - 1), span, dtype=np.int64),
                                           enc.relative_buckets, enc.relative_max_distance)
        by_distance = weights["encoder.relative_bias"][buckets].astype(np.float32)  # (2S-1, H)
        rel = g.op("Sub", [g.op("Unsqueeze", [positions, i64("axes_0r", [0])]),
                           g.op("Unsqueeze", [positions, i64("axes_1r", [1])])])  # j - i
        idx = g.op("Add", [rel, i64("span_minus_1", span - 1)])
        bias = g.op("Gather", [g.const("encoder.relative_bias_by_distance", by_distance), idx],
                    axis=0)  # (T, T, H)
        bias = g.op("Unsqueeze", [g.op("Transpose", [bias], perm=[2, 0, 1]), i64("axes_0b", [0])])
        global_mask = g.op("Add", [key_mask, bias])  # (B, H, T, T)

    # --- rotary positions: cos/sin (T, Dh) per theta, as transformers computes them ---
    rotary: dict[float, tuple[str, str]] = {}

    def rope_tables(theta: float) -> tuple[str, str]:
        if theta not in rotary:
            inv = (1.0 / (np.float32(theta) ** (np.arange(0, dh, 2, dtype=np.float32)
                                                  / np.float32(dh)))).astype(np.float32)
            pf = g.op("Cast", [positions], to=TensorProto.FLOAT)
            freqs = g.op("Mul", [g.op("Unsqueeze", [pf, i64(f"axes_rope_{len(rotary)}", [1])]),
                                 g.const(f"rope.inv_freq_{len(rotary)}", inv[None, :])])
            emb = g.op("Concat", [freqs, freqs], axis=-1)  # (T, Dh)
            rotary[theta] = (g.op("Cos", [emb]), g.op("Sin", [emb]))
        return rotary[theta]

    half_split = i64("rope_split", [dh // 2, dh - dh // 2])

    def rotate(t: str, cos: str, sin: str) -> str:
        """t * cos + rotate_half(t) * sin, t of shape (B, H, T, Dh) in float32."""
        x1, x2 = g.ops("Split", [t, half_split], 2, axis=-1)
        rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [t, cos]), g.op("Mul", [rot, sin])])

    heads_shape = i64("heads_shape", [0, 0, h, dh])
    merge_shape = i64("merge_shape", [0, 0, c])
    scale = num(1.0 / math.sqrt(dh), f32=True)
    pre_norm = enc.norm_placement is NormPlacement.PRE

    for layer in range(enc.num_layers):
        p = f"layers.{layer}."
        is_global = enc.layer_is_global(layer)
        attn_in = x
        if pre_norm and p + "attention.norm.weight" in weights:
            attn_in = layer_norm(x, p + "attention.norm")
        q = g.op("Reshape", [lin(attn_in, p + "attention.q"), heads_shape])
        k = g.op("Reshape", [lin(attn_in, p + "attention.k"), heads_shape])
        v = g.op("Reshape", [lin(attn_in, p + "attention.v"), heads_shape])
        q = to_f32(g.op("Transpose", [q], perm=[0, 2, 1, 3]))  # (B, H, T, Dh)
        k = to_f32(g.op("Transpose", [k], perm=[0, 2, 1, 3]))  # (B, H, T, Dh)
        v = g.op("Transpose", [v], perm=[0, 2, 1, 3])  # (B, H, T, Dh)
        if enc.position_kind is PositionKind.ROTARY:
            cos, sin = rope_tables(enc.rope_theta if is_global else enc.rope_theta_local)
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])  # (B, H, Dh, T)
        scores = g.op("Mul", [g.op("MatMul", [q, kt]), scale])
        probs = g.op("Softmax", [g.op("Add", [scores, global_mask if is_global else local_mask])],
                     axis=-1)
        ctx = g.op("MatMul", [to_compute(probs), v])  # (B, H, T, Dh)
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        attn = lin(ctx, p + "attention.o")
        if pre_norm:
            x = g.op("Add", [x, attn])
            ffn_in = layer_norm(x, p + "ffn.norm")
        else:
            x = layer_norm(g.op("Add", [attn, x]), p + "attention.norm")
            ffn_in = x
        up = lin(ffn_in, p + "ffn.up")
        if enc.ffn_kind is FfnKind.GLU:
            f = enc.intermediate_size
            u, gate = g.ops("Split", [up, i64(f"glu_split_{layer}", [f, f])], 2, axis=-1)
            inner = g.op("Mul", [activation(u, enc.activation), gate])
        else:
            inner = activation(up, enc.activation)
        down = lin(inner, p + "ffn.down")
        if pre_norm:
            x = g.op("Add", [x, down])
        else:
            x = layer_norm(g.op("Add", [down, x]), p + "ffn.norm")
    if enc.final_norm:
        x = layer_norm(x, "final_norm")

    g.nodes.append(helper.make_node("Identity", [to_f32(x)], ["token_embeddings"]))
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    if types:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64,
                                                    ["batch", "sequence"]))
    token_states = helper.make_tensor_value_info("token_embeddings", TensorProto.FLOAT,
                                                 ["batch", "sequence", c])
    if desc.task is not Task.EMBEDDING:  # a cross-encoder's or SPLADE model's head
        from .heads import HeadContext, build_head

        head_outputs = build_head(HeadContext(
            g=g, desc=desc, weights=weights, hidden=x, maskf=maskf, linear=linear,
            layer_norm=layer_norm, activation=activation, to_f32=to_f32, i64=i64, num=num))
        return _model(g, desc, inputs, [token_states, *head_outputs])
    pooled = _pooling(g, desc, maskf, positions, i64, num)
    for i, d in enumerate(desc.dense):
        y = fp32_linear(g, pooled, f"dense.{i}", weights[f"dense.{i}.weight"],
                        weights.get(f"dense.{i}.bias"))
        y = activation(y, d.activation, f32=True)
        if d.residual:
            res = pooled if d.in_features == d.out_features else fp32_linear(
                g, pooled, f"dense.{i}.residual_proj", weights[f"dense.{i}.residual"], None)
            y = g.op("Add", [y, res])
        pooled = y
    g.nodes.append(helper.make_node("Identity", [pooled], ["pooled"]))
    if desc.normalize:  # sentence-transformers' Normalize: x / max(||x||, 1e-12)
        norm = g.op("ReduceL2", ["pooled"], axes=[-1], keepdims=1)
        norm = g.op("Max", [norm, num(1e-12, f32=True)])
        g.nodes.append(helper.make_node("Div", ["pooled", norm], ["sentence_embedding"]))
    else:
        g.nodes.append(helper.make_node("Identity", ["pooled"], ["sentence_embedding"]))

    e = desc.output_dim
    if desc.pooling is not None and not desc.pooling.include_prompt:
        inputs.append(helper.make_tensor_value_info("prompt_length", TensorProto.INT64,
                                                    ["batch"]))
    outputs = [
        token_states,
        helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", e]),
        helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", e]),
    ]
    return _model(g, desc, inputs, outputs)


def _model(g: GraphBuilder, desc: ModelDescription, inputs: list[onnx.ValueInfoProto],
           outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, f"edgembed_{desc.name}", inputs, outputs,
                              initializer=g.inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if g.uses_ms_domain:
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="edgembed")
    model.ir_version = 8
    return model


def _pooling(g: GraphBuilder, desc: ModelDescription, maskf: str, positions: str,
             i64: Callable[[str, Any], str], num: Callable[..., str]) -> str:
    """sentence-transformers' Pooling in float32 over ``token_embeddings``: (B, len(modes) C).

    With ``include_prompt: false`` the pooling mask leaves out each text's first
    ``prompt_length`` tokens, as sentence-transformers zeroes them in its attention mask.
    """
    assert desc.pooling is not None
    tok = "token_embeddings"
    pm = maskf  # (B, T): the tokens pooling looks at
    if not desc.pooling.include_prompt:
        after = g.op("GreaterOrEqual", [g.op("Unsqueeze", [positions, i64("axes_0p", [0])]),
                                        g.op("Unsqueeze", ["prompt_length", i64("axes_1p", [1])])])
        pm = g.op("Mul", [maskf, g.op("Cast", [after], to=TensorProto.FLOAT)])
    pm3 = g.op("Unsqueeze", [pm, i64("axes_2", [2])])  # (B, T, 1)
    t_axis = i64("axes_t", [1])
    count: str | None = None

    def token_count() -> str:
        nonlocal count
        if count is None:
            count = g.op("Clip", [g.op("ReduceSum", [pm3, t_axis], keepdims=0),
                                  num(1e-9, f32=True)])  # (B, 1)
        return count

    def pick(index: str, source: str) -> str:
        """Row ``index`` (B,) of ``source`` (B, T, C) for each sequence, by a one-hot sum."""
        hot = g.op("Cast", [g.op("Equal", [g.op("Unsqueeze", [positions, i64("axes_0h", [0])]),
                                           g.op("Unsqueeze", [index, i64("axes_1h", [1])])])],
                   to=TensorProto.FLOAT)  # (B, T)
        hot3 = g.op("Unsqueeze", [hot, i64("axes_2h", [2])])
        return g.op("ReduceSum", [g.op("Mul", [source, hot3]), t_axis], keepdims=0)

    parts: list[str] = []
    for mode in desc.pooling.modes:
        if mode is PoolingMode.CLS:
            if desc.pooling.include_prompt:
                parts.append(g.op("Gather", [tok, i64("zero_idx", 0)], axis=1))
            else:  # the first pooled token; the first token when none is (sentence-transformers)
                parts.append(pick(g.op("ArgMax", [pm], axis=1, keepdims=0), tok))
        elif mode is PoolingMode.MAX:
            keep = g.op("Cast", [pm3], to=TensorProto.BOOL)
            lowest = num(float(np.finfo(np.float32).min), f32=True)
            parts.append(g.op("ReduceMax", [g.op("Where", [keep, tok, lowest])], axes=[1],
                              keepdims=0))
        elif mode in (PoolingMode.MEAN, PoolingMode.MEAN_SQRT_LEN_TOKENS):
            summed = g.op("ReduceSum", [g.op("Mul", [tok, pm3]), t_axis], keepdims=0)
            denom = token_count()
            if mode is PoolingMode.MEAN_SQRT_LEN_TOKENS:
                denom = g.op("Sqrt", [denom])
            parts.append(g.op("Div", [summed, denom]))
        elif mode is PoolingMode.WEIGHTEDMEAN:  # weights 1, 2, ... by position
            w = g.op("Add", [g.op("Cast", [positions], to=TensorProto.FLOAT), num(1.0, f32=True)])
            w3 = g.op("Mul", [pm3, g.op("Unsqueeze", [w, i64("axes_w", [0, 2])])])  # (B, T, 1)
            summed = g.op("ReduceSum", [g.op("Mul", [tok, w3]), t_axis], keepdims=0)
            wsum = g.op("Clip", [g.op("ReduceSum", [w3, t_axis], keepdims=0),
                                 num(1e-9, f32=True)])
            parts.append(g.op("Div", [summed, wsum]))
        elif mode is PoolingMode.LASTTOKEN:
            # the last real token, zero when pooling excludes it (sentence-transformers)
            real = g.op("ReduceSum", [g.op("Cast", ["attention_mask"], to=TensorProto.INT64),
                                      t_axis], keepdims=0)
            last = g.op("Sub", [real, i64("one_last", 1)])
            parts.append(pick(last, g.op("Mul", [tok, pm3])))
        else:  # pragma: no cover - PoolingMode is closed
            raise UnsupportedArchitecture(f"pooling mode {mode.value}")
    return parts[0] if len(parts) == 1 else g.op("Concat", parts, axis=-1)
