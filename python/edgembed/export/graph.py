"""Build a BERT-family sentence encoder as an ONNX graph straight from safetensors.

No torch: the graph is written node by node with the ``onnx`` package, so edgembed controls
exactly what runs — pooling and L2 normalization inside the graph, and the linear layers in
whichever form a variant needs (fp32, fp16, block-wise int8 or int4; see ``variants.py``).

Inputs ``input_ids`` and ``attention_mask`` (int64, shape (B, T), dynamic axes). Token type
ids are always 0 for single-text embeddings, so the token-type-0 row is folded into the
position table. Outputs:

- ``token_embeddings`` (B, T, D): the last hidden states;
- ``pooled`` (B, D): mean (or CLS) pooling, not normalized;
- ``sentence_embedding`` (B, D): ``pooled`` L2-normalized when the model normalizes.

Shape letters: B = batch, T = tokens per sequence, D = hidden size, H = heads,
Dh = D / H, F = FFN size.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..catalog import ModelSpec, Pooling
from ..errors import InvalidModelDir, UnsupportedArchitecture

__all__ = ["BertConfig", "GraphBuilder", "Linear", "build_bert_graph", "load_bert_weights"]

OPSET = 17
MS_DOMAIN = "com.microsoft"
Array = npt.NDArray[Any]


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_position: int
    layer_norm_eps: float
    hidden_act: str

    @classmethod
    def from_dir(cls, path: Path) -> BertConfig:
        try:
            cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidModelDir(f"{path / 'config.json'} cannot be read: {exc}") from None
        try:
            out = cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=int(cfg["hidden_size"]),
                num_layers=int(cfg["num_hidden_layers"]),
                num_heads=int(cfg["num_attention_heads"]),
                intermediate_size=int(cfg["intermediate_size"]),
                max_position=int(cfg.get("max_position_embeddings", 512)),
                layer_norm_eps=float(cfg.get("layer_norm_eps", 1e-12)),
                hidden_act=str(cfg.get("hidden_act", "gelu")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidModelDir(
                f"{path / 'config.json'} lacks a BERT field or has a bad value: {exc!r}"
            ) from None
        if out.hidden_act not in ("gelu", "gelu_python"):
            raise UnsupportedArchitecture(
                f"{path / 'config.json'}: hidden_act {out.hidden_act!r} is not supported "
                "(supported: 'gelu', the exact erf form)"
            )
        if out.hidden_size % out.num_heads:
            raise InvalidModelDir(f"{path / 'config.json'}: hidden_size % num_heads != 0")
        return out


def load_bert_weights(path: Path, config: BertConfig, name: str | None = None) -> dict[str, Array]:
    """Read model.safetensors, dropping a ``bert.`` prefix, and check every tensor's shape.
    ``name``: the catalog name, for the remedy in error messages."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    f = path / "model.safetensors"
    try:
        raw = load_file(str(f))
    except FileNotFoundError:
        raise InvalidModelDir(f"{f} is missing") from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise InvalidModelDir(
            f"{f} is not a readable safetensors file ({exc}); it may be truncated: "
            f"run `embed pull --force {name or 'MODEL'}`"
        ) from None
    w = {k.removeprefix("bert."): v for k, v in raw.items()}
    d, ff = config.hidden_size, config.intermediate_size
    expect: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, d),
        "embeddings.position_embeddings.weight": (config.max_position, d),
        "embeddings.LayerNorm.weight": (d,),
        "embeddings.LayerNorm.bias": (d,),
    }
    for i in range(config.num_layers):
        p = f"encoder.layer.{i}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            expect[p + name + ".weight"] = (d, d)
            expect[p + name + ".bias"] = (d,)
        expect[p + "intermediate.dense.weight"] = (ff, d)
        expect[p + "intermediate.dense.bias"] = (ff,)
        expect[p + "output.dense.weight"] = (d, ff)
        expect[p + "output.dense.bias"] = (d,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            expect[p + ln + ".weight"] = (d,)
            expect[p + ln + ".bias"] = (d,)
    for name, shape in expect.items():
        if name not in w:
            raise InvalidModelDir(f"{f} has no tensor {name!r}; is this a BERT model?")
        if tuple(w[name].shape) != shape:
            raise InvalidModelDir(
                f"{f}: tensor {name!r} has shape {tuple(w[name].shape)}, "
                f"config.json implies {shape}"
            )
    out = {k: np.asarray(v, dtype=np.float32) for k, v in w.items() if v.dtype.kind == "f"}
    tt = w.get("embeddings.token_type_embeddings.weight")
    out["embeddings.token_type_embeddings.weight"] = (
        np.asarray(tt, np.float32) if tt is not None else np.zeros((1, d), np.float32)
    )
    return out


class GraphBuilder:
    """A small helper around onnx.helper that names nodes and collects initializers."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0
        self.uses_ms_domain = False

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, name: str, value: Array) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None,
           domain: str | None = None, n_out: int = 1, **attrs: Any) -> str:
        outs = [self.fresh(hint or op_type) for _ in range(n_out)]
        if domain == MS_DOMAIN:
            self.uses_ms_domain = True
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0],
                                           domain=domain, **attrs))
        return outs[0]


# A Linear emits y = x @ W.T + b for x of shape (..., K) and W of shape (N, K).
Linear = Callable[[GraphBuilder, str, str, Array, Array], str]


def fp32_linear(g: GraphBuilder, x: str, name: str, w: Array, b: Array) -> str:
    wt = g.const(f"{name}.weight_t", np.ascontiguousarray(w.T.astype(np.float32)))
    y = g.op("MatMul", [x, wt], hint=f"{name}.matmul")
    return g.op("Add", [y, g.const(f"{name}.bias", b.astype(np.float32))], hint=f"{name}.out")


# An Embedding emits the rows of a (V, D) table for int64 ids of shape (B, T).
Embedding = Callable[[GraphBuilder, str, str, Array], str]


def fp32_embedding(g: GraphBuilder, ids: str, name: str, table: Array) -> str:
    return g.op("Gather", [g.const(name, table.astype(np.float32)), ids], hint="word_emb", axis=0)


def build_bert_graph(
    weights: dict[str, Array],
    config: BertConfig,
    spec: ModelSpec,
    *,
    linear: Linear = fp32_linear,
    embedding: Embedding = fp32_embedding,
    compute_dtype: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """The whole encoder + pooling graph. ``linear``/``embedding`` choose the weight form.

    With ``compute_dtype=FLOAT16`` the hidden states flow in fp16 between layers while
    LayerNorm, softmax, pooling and normalization run in fp32 (casts around them).
    """
    g = GraphBuilder()
    d, h = config.hidden_size, config.num_heads
    dh = d // h
    f16 = compute_dtype == TensorProto.FLOAT16

    def to_compute(x: str) -> str:
        return g.op("Cast", [x], to=TensorProto.FLOAT16) if f16 else x

    def to_f32(x: str) -> str:
        return g.op("Cast", [x], to=TensorProto.FLOAT) if f16 else x

    def layer_norm(x: str, prefix: str) -> str:
        y = g.op("LayerNormalization",
                 [to_f32(x), g.const(prefix + ".weight", weights[prefix + ".weight"]),
                  g.const(prefix + ".bias", weights[prefix + ".bias"])],
                 hint=prefix, axis=-1, epsilon=config.layer_norm_eps)
        return to_compute(y)

    def i64(name: str, v: Any) -> str:
        return g.const(name, np.asarray(v, dtype=np.int64))

    # --- embeddings: word + (position + token type 0), LayerNorm ---
    words = embedding(g, "input_ids", "embeddings.word_embeddings", weights[
        "embeddings.word_embeddings.weight"])
    pos_table = (weights["embeddings.position_embeddings.weight"]
                 + weights["embeddings.token_type_embeddings.weight"][0][None, :])
    shape = g.op("Shape", ["input_ids"])
    seq_len = g.op("Slice", [shape, i64("one_1d", [1]), i64("two_1d", [2])])  # [T]
    pos = g.op("Slice", [g.const("embeddings.position_table", pos_table.astype(np.float32)),
                         i64("zero_1d", [0]), seq_len, i64("axis0_1d", [0])])  # (T, D)
    x = layer_norm(g.op("Add", [words, pos]), "embeddings.LayerNorm")

    # --- additive attention mask (B, 1, 1, T): 0 for real tokens, -10000 for padding ---
    maskf = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    neg = g.op("Mul", [g.op("Sub", [g.const("one_f", np.float32(1.0)), maskf]),
                       g.const("neg_big", np.float32(-10000.0))])
    add_mask = g.op("Unsqueeze", [neg, i64("axes_1_2", [1, 2])])

    heads_shape = i64("heads_shape", [0, 0, h, dh])
    merge_shape = i64("merge_shape", [0, 0, d])
    scale = g.const("attn_scale", np.float32(1.0 / math.sqrt(dh)))
    inv_sqrt2 = g.const("inv_sqrt2", np.float32(1.0 / math.sqrt(2.0)))
    half = g.const("half", np.float32(0.5))
    one = g.const("one_f32", np.float32(1.0))
    if f16:
        inv_sqrt2 = g.op("Cast", [inv_sqrt2], to=TensorProto.FLOAT16)
        half = g.op("Cast", [half], to=TensorProto.FLOAT16)
        one = g.op("Cast", [one], to=TensorProto.FLOAT16)

    for i in range(config.num_layers):
        p = f"encoder.layer.{i}."

        def lin(inp: str, name: str, p: str = p) -> str:
            return linear(g, inp, p + name, weights[p + name + ".weight"],
                          weights[p + name + ".bias"])

        q = g.op("Reshape", [lin(x, "attention.self.query"), heads_shape])
        k = g.op("Reshape", [lin(x, "attention.self.key"), heads_shape])
        v = g.op("Reshape", [lin(x, "attention.self.value"), heads_shape])
        q = g.op("Transpose", [q], perm=[0, 2, 1, 3])  # (B, H, T, Dh)
        k = g.op("Transpose", [k], perm=[0, 2, 3, 1])  # (B, H, Dh, T)
        v = g.op("Transpose", [v], perm=[0, 2, 1, 3])  # (B, H, T, Dh)
        scores = g.op("Mul", [g.op("MatMul", [to_f32(q), to_f32(k)]), scale])
        probs = g.op("Softmax", [g.op("Add", [scores, add_mask])], axis=-1)
        ctx = g.op("MatMul", [to_compute(probs), v])  # (B, H, T, Dh)
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        attn = lin(ctx, "attention.output.dense")
        x = layer_norm(g.op("Add", [attn, x]), p + "attention.output.LayerNorm")
        inter = lin(x, "intermediate.dense")
        # exact GELU: 0.5 * u * (1 + erf(u / sqrt(2)))
        erf = g.op("Erf", [g.op("Mul", [inter, inv_sqrt2])])
        gelu = g.op("Mul", [g.op("Mul", [inter, half]), g.op("Add", [erf, one])])
        out = lin(gelu, "output.dense")
        x = layer_norm(g.op("Add", [out, x]), p + "output.LayerNorm")

    tokens = to_f32(x)
    g.nodes.append(helper.make_node("Identity", [tokens], ["token_embeddings"]))

    # --- pooling (fp32) ---
    if spec.pooling is Pooling.CLS:
        pooled = g.op("Gather", ["token_embeddings", i64("zero_idx", 0)], axis=1)
    else:
        m = g.op("Unsqueeze", [maskf, i64("axes_2", [2])])  # (B, T, 1)
        summed = g.op("ReduceSum", [g.op("Mul", ["token_embeddings", m]), i64("axes_t", [1])],
                      keepdims=0)
        count = g.op("Clip", [g.op("ReduceSum", [m, i64("axes_t2", [1])], keepdims=0),
                              g.const("min_count", np.float32(1e-9))])
        pooled = g.op("Div", [summed, count])
    g.nodes.append(helper.make_node("Identity", [pooled], ["pooled"]))
    if spec.normalize:
        norm = g.op("ReduceL2", ["pooled"], axes=[-1], keepdims=1)
        norm = g.op("Max", [norm, g.const("norm_eps", np.float32(1e-12))])
        g.nodes.append(helper.make_node("Div", ["pooled", norm], ["sentence_embedding"]))
    else:
        g.nodes.append(helper.make_node("Identity", ["pooled"], ["sentence_embedding"]))

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
    ]
    outputs = [
        helper.make_tensor_value_info("token_embeddings", TensorProto.FLOAT,
                                      ["batch", "sequence", d]),
        helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", d]),
        helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", d]),
    ]
    graph = helper.make_graph(g.nodes, f"edgembed_{spec.name}", inputs, outputs,
                              initializer=g.inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if g.uses_ms_domain:
        opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="edgembed")
    model.ir_version = 8
    return model
