"""The variants ``embed export`` can write, each a choice of weight form for the encoder graph.

- fp32: MatMul with fp32 weights; fp32 word table.
- int8: MatMulNBits bits=8, block 32, symmetric (zero point 128), accuracy_level 4, so
  activations are quantized per token row and block of 32 (batch-invariant); int8 word table.
  A K that is not a multiple of 32 ends each row with a short block (docs/quantization.md).
- int4: MatMulNBits bits=4, block 32, asymmetric (a zero point per block), weight-only
  (accuracy_level 0, fp32 activations); the FFN down-projection stays 8-bit; int8 word table.
- fp16: MatMul in fp16; LayerNorm, softmax, pooling and normalization in fp32; fp16 table.

Dense modules run in fp32 in every variant: one small matrix per text, not per token.

docs/quantization.md states the int8 arithmetic precisely; the C engine implements the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import numpy as np
import onnx
from onnx import TensorProto

from ..model_dir import ModelDescription
from .graph import (
    MS_DOMAIN,
    Array,
    Embedding,
    GraphBuilder,
    Linear,
    build_encoder_graph,
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


def _pad_k(a: Array, fill: int, block: int = BLOCK) -> Array:
    """(N, K) → (N, nb * block), the columns past K set to ``fill``: MatMulNBits' packed layout
    covers whole blocks, and onnxruntime pads the activations' last block with zeros."""
    n, k = a.shape
    nb = -(-k // block)
    if k == nb * block:
        return a
    out = np.full((n, nb * block), fill, dtype=a.dtype)
    out[:, :k] = a
    return out


def _add_bias(g: GraphBuilder, y: str, name: str, b: Array | None) -> str:
    if b is None:
        return y
    return g.op("Add", [y, g.const(f"{name}.bias", b.astype(np.float32))], hint=f"{name}.out")


def _nbits_linear(bits: int, accuracy_level: int, block: int = BLOCK) -> Linear:
    """MatMulNBits of ``bits``; ``block`` other than 32 (8 bits only) is for measurements
    (benchmarks/sparse_quantization.py), not a shipped form."""
    if bits != 8 and block != BLOCK:
        raise ValueError(f"{bits}-bit MatMulNBits is built in blocks of {BLOCK} only")

    def emit(g: GraphBuilder, x: str, name: str, w: Array, b: Array | None) -> str:
        n, k = w.shape
        nb = -(-k // block)
        if bits == 8:
            q, scales = quantize_blocks_int8(w, block)
            stored = (q.astype(np.int16) + 128).astype(np.uint8)  # zero point 128
            packed = _pad_k(stored, 128, block).reshape(n, nb, block)
            extra: list[str] = []
        else:
            u, scales, zp = _quantize_blocks_uint4(w, BLOCK)
            # padding holds each block's zero point, so it dequantizes to 0
            u = _pad_k(u, 0).reshape(n, nb, BLOCK)
            if k % BLOCK:
                u[:, -1, k % BLOCK:] = zp[:, -1:]
            packed = (u[:, :, 0::2] | (u[:, :, 1::2] << 4)).astype(np.uint8)  # low nibble first
            zpad = np.zeros((n, nb + (nb % 2)), np.uint8)
            zpad[:, :nb] = zp
            zpacked = (zpad[:, 0::2] | (zpad[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
            extra = [g.const(f"{name}.zero_points", zpacked)]
        y = g.op(
            "MatMulNBits",
            [x, g.const(f"{name}.qweight", packed),
             g.const(f"{name}.scales", scales.astype(np.float32).reshape(-1)), *extra],
            hint=f"{name}.matmul", domain=MS_DOMAIN,
            K=k, N=n, bits=bits, block_size=block, accuracy_level=accuracy_level,
        )
        return _add_bias(g, y, name, b)

    return emit


def _quantize_blocks_uint4(w: Array, block: int) -> tuple[Array, Array, Array]:
    """Asymmetric 4-bit per block: scale = (max - min) / 15, zero point in [0, 15]. A short
    last block takes its range from its real values."""
    n, k = w.shape
    nb = -(-k // block)
    wf = np.asarray(w, np.float32)
    lo = np.zeros((n, nb), np.float32)
    hi = np.zeros((n, nb), np.float32)
    for j in range(nb):
        part = wf[:, j * block:(j + 1) * block]
        lo[:, j] = np.minimum(part.min(axis=1), 0.0)
        hi[:, j] = np.maximum(part.max(axis=1), 0.0)
    scales = ((hi - lo) / np.float32(15.0)).astype(np.float32)
    safe = np.where(scales == 0, np.float32(1.0), scales)
    zp = np.clip(np.rint(-lo / safe), 0, 15).astype(np.uint8)
    col_block = np.arange(k) // block
    q = np.clip(np.rint(wf / safe[:, col_block]) + zp[:, col_block], 0, 15).astype(np.uint8)
    return q, scales, zp


def int8_embedding(g: GraphBuilder, ids: str, name: str, table: Array) -> str:
    """Word table stored int8 in blocks of 32 per row; rows dequantized on lookup. A row of C
    values with C % 32 != 0 is stored padded with zeros to whole blocks, then cut back to C."""
    c = table.shape[1]
    q, scales = quantize_blocks_int8(table, BLOCK)
    nb = scales.shape[1]
    rows = g.op("Gather", [g.const(name + ".q", _pad_k(q, 0)), ids], axis=0)  # (B, T, nb*32)
    s = g.op("Gather", [g.const(name + ".scales", scales), ids], axis=0)  # (B, T, nb)
    rows = g.op("Reshape", [g.op("Cast", [rows], to=TensorProto.FLOAT),
                            g.const(name + ".blk_shape", np.array([0, 0, nb, BLOCK], np.int64))])
    deq = g.op("Mul", [rows, g.op("Unsqueeze", [s, g.const(name + ".ax", np.array([3],
                                                                                np.int64))])])
    out = g.op("Reshape", [deq, g.const(name + ".row_shape", np.array([0, 0, nb * BLOCK],
                                                                       np.int64))])
    if nb * BLOCK == c:
        return out
    return g.op("Slice", [out, g.const(name + ".cut0", np.array([0], np.int64)),
                          g.const(name + ".cut1", np.array([c], np.int64)),
                          g.const(name + ".cut_axis", np.array([2], np.int64))], hint="word_emb")


def _int4_linear() -> Linear:
    """4-bit weights except the FFN down-projection, whose outlier columns need 8 bits."""
    four, eight = _nbits_linear(4, 0), _nbits_linear(8, 0)

    def emit(g: GraphBuilder, x: str, name: str, w: Array, b: Array | None) -> str:
        return (eight if name.endswith("ffn.down") else four)(g, x, name, w, b)

    return emit


def fp16_linear(g: GraphBuilder, x: str, name: str, w: Array, b: Array | None) -> str:
    wt = g.const(f"{name}.weight_t", np.ascontiguousarray(w.T.astype(np.float16)))
    y = g.op("MatMul", [x, wt], hint=f"{name}.matmul")
    if b is None:
        return y
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
    variant: Variant, desc: ModelDescription, weights: dict[str, Array]
) -> onnx.ModelProto:
    """The ONNX graph of ``variant`` for the model ``desc`` (weights from ``load_weights``)."""
    form = VARIANTS[variant]
    return build_encoder_graph(desc, weights, linear=form.linear, embedding=form.embedding,
                               compute_dtype=form.compute_dtype)


BuildFn = Callable[[Variant, ModelDescription, dict[str, Array]], onnx.ModelProto]
