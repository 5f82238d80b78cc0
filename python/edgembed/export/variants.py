"""The variants ``embed export`` can write, each a choice of weight form for the BERT graph.

- fp32: MatMul with fp32 weights; fp32 word table.
- int8: MatMulNBits bits=8, block 32, symmetric (zero point 128), accuracy_level 4, so
  activations are quantized per token row and block of 32 (batch-invariant); int8 word table.
- int4: MatMulNBits bits=4, block 32, asymmetric (a zero point per block), weight-only
  (accuracy_level 0, fp32 activations); the FFN down-projection stays 8-bit; int8 word table.
- fp16: MatMul in fp16; LayerNorm, softmax, pooling and normalization in fp32; fp16 table.

docs/quantization.md states the int8 arithmetic precisely; the C engine implements the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np
import onnx
from onnx import TensorProto

from ..catalog import ModelSpec
from .graph import (
    MS_DOMAIN,
    Array,
    BertConfig,
    Embedding,
    GraphBuilder,
    Linear,
    build_bert_graph,
    fp32_embedding,
    fp32_linear,
)
from .quantize import BLOCK, quantize_blocks_int8

__all__ = ["VARIANTS", "Variant", "build_variant"]


class Variant(str, Enum):
    FP32 = "fp32"
    INT8 = "int8"
    INT4 = "int4"
    FP16 = "fp16"


def _nbits_linear(bits: int, accuracy_level: int) -> Linear:
    def emit(g: GraphBuilder, x: str, name: str, w: Array, b: Array) -> str:
        n, k = w.shape
        if bits == 8:
            q, scales = quantize_blocks_int8(w, BLOCK)
            packed = (q.astype(np.int16) + 128).astype(np.uint8).reshape(n, k // BLOCK, BLOCK)
            extra: list[str] = []
        else:
            u, scales, zp = _quantize_blocks_uint4(w, BLOCK)
            u = u.reshape(n, k // BLOCK, BLOCK)
            packed = (u[:, :, 0::2] | (u[:, :, 1::2] << 4)).astype(np.uint8)  # low nibble first
            nb = k // BLOCK
            zpad = np.zeros((n, nb + (nb % 2)), np.uint8)
            zpad[:, :nb] = zp
            zpacked = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
            extra = [g.const(f"{name}.zero_points", zpacked)]
        y = g.op(
            "MatMulNBits",
            [x, g.const(f"{name}.qweight", packed),
             g.const(f"{name}.scales", scales.astype(np.float32).reshape(-1)), *extra],
            hint=f"{name}.matmul", domain=MS_DOMAIN,
            K=k, N=n, bits=bits, block_size=BLOCK, accuracy_level=accuracy_level,
        )
        return g.op("Add", [y, g.const(f"{name}.bias", b.astype(np.float32))], hint=f"{name}.out")

    return emit


def _quantize_blocks_uint4(w: Array, block: int) -> tuple[Array, Array, Array]:
    """Asymmetric 4-bit per block: scale = (max - min) / 15, zero point in [0, 15]."""
    n, k = w.shape
    blocks = np.asarray(w, np.float32).reshape(n, k // block, block)
    lo = np.minimum(blocks.min(axis=2), 0.0)
    hi = np.maximum(blocks.max(axis=2), 0.0)
    scales = ((hi - lo) / np.float32(15.0)).astype(np.float32)
    safe = np.where(scales == 0, np.float32(1.0), scales)
    zp = np.clip(np.rint(-lo / safe), 0, 15).astype(np.uint8)
    q = np.clip(np.rint(blocks / safe[:, :, None]) + zp[:, :, None], 0, 15).astype(np.uint8)
    return q.reshape(n, k), scales, zp


def int8_embedding(g: GraphBuilder, ids: str, name: str, table: Array) -> str:
    """Word table stored int8 in blocks of 32 per row; rows dequantized on lookup."""
    d = table.shape[1]
    q, scales = quantize_blocks_int8(table, BLOCK)
    rows = g.op("Gather", [g.const(name + ".q", q), ids], axis=0)  # (B, T, D) int8
    s = g.op("Gather", [g.const(name + ".scales", scales), ids], axis=0)  # (B, T, D/32)
    rows = g.op("Reshape", [g.op("Cast", [rows], to=TensorProto.FLOAT),
                            g.const(name + ".blk_shape", np.array([0, 0, d // BLOCK, BLOCK],
                                                                  np.int64))])
    deq = g.op("Mul", [rows, g.op("Unsqueeze", [s, g.const(name + ".ax", np.array([3],
                                                                                np.int64))])])
    return g.op("Reshape", [deq, g.const(name + ".row_shape", np.array([0, 0, d], np.int64))],
                hint="word_emb")


def _int4_linear() -> Linear:
    """4-bit weights except the FFN down-projection, whose outlier columns need 8 bits."""
    four, eight = _nbits_linear(4, 0), _nbits_linear(8, 0)

    def emit(g: GraphBuilder, x: str, name: str, w: Array, b: Array) -> str:
        return (eight if name.endswith("output.dense") and "attention" not in name else four)(
            g, x, name, w, b)

    return emit


def fp16_linear(g: GraphBuilder, x: str, name: str, w: Array, b: Array) -> str:
    wt = g.const(f"{name}.weight_t", np.ascontiguousarray(w.T.astype(np.float16)))
    y = g.op("MatMul", [x, wt], hint=f"{name}.matmul")
    return g.op("Add", [y, g.const(f"{name}.bias", b.astype(np.float16))], hint=f"{name}.out")


def fp16_embedding(g: GraphBuilder, ids: str, name: str, table: Array) -> str:
    rows = g.op("Gather", [g.const(name, table.astype(np.float16)), ids], axis=0)
    return g.op("Cast", [rows], to=TensorProto.FLOAT, hint="word_emb")


@dataclass(frozen=True)
class VariantForm:
    linear: Linear
    embedding: Embedding
    compute_dtype: int
    description: str


VARIANTS: dict[Variant, VariantForm] = {
    Variant.FP32: VariantForm(fp32_linear, fp32_embedding, TensorProto.FLOAT,
                              "fp32 weights and compute"),
    Variant.INT8: VariantForm(_nbits_linear(8, 4), int8_embedding, TensorProto.FLOAT,
                              "int8 block-32 weights and per-token block-32 activations"),
    Variant.INT4: VariantForm(_int4_linear(), int8_embedding, TensorProto.FLOAT,
                              "int4 block-32 weight-only (FFN down-projection 8-bit), "
                              "fp32 activations"),
    Variant.FP16: VariantForm(fp16_linear, fp16_embedding, TensorProto.FLOAT16,
                              "fp16 weights and matmuls; LayerNorm/softmax/pooling in fp32"),
}


def build_variant(
    variant: Variant, weights: dict[str, Array], config: BertConfig, spec: ModelSpec
) -> onnx.ModelProto:
    form = VARIANTS[variant]
    return build_bert_graph(weights, config, spec, linear=form.linear,
                            embedding=form.embedding, compute_dtype=form.compute_dtype)


BuildFn = Callable[[Variant, dict[str, Array], BertConfig, ModelSpec], onnx.ModelProto]
