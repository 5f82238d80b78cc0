"""The pieces every ONNX graph edgembed writes is built from: a node and initializer collector
(``GraphBuilder``) and the fp32 linear and embedding emitters that the quantized variants
replace. The encoder (``graph.py``) and the rerank/SPLADE heads (``heads.py``) both use them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import helper, numpy_helper

__all__ = ["MS_DOMAIN", "Array", "Embedding", "GraphBuilder", "Linear", "fp32_embedding",
           "fp32_linear"]

MS_DOMAIN = "com.microsoft"
Array = npt.NDArray[Any]


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
        # np.asarray, not np.ascontiguousarray, which turns a scalar into shape (1,)
        self.inits.append(numpy_helper.from_array(np.asarray(value, order="C"), name))
        return name

    def ops(self, op_type: str, inputs: list[str], n_out: int, hint: str | None = None,
            domain: str | None = None, **attrs: Any) -> list[str]:
        outs = [self.fresh(hint or op_type) for _ in range(n_out)]
        if domain == MS_DOMAIN:
            self.uses_ms_domain = True
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0],
                                           domain=domain, **attrs))
        return outs

    def op(self, op_type: str, inputs: list[str], hint: str | None = None,
           domain: str | None = None, **attrs: Any) -> str:
        return self.ops(op_type, inputs, 1, hint, domain, **attrs)[0]


# A Linear emits y = x @ W.T (+ b) for x of shape (..., K) and W of shape (N, K).
Linear = Callable[[GraphBuilder, str, str, Array, "Array | None"], str]


def fp32_linear(g: GraphBuilder, x: str, name: str, w: Array, b: Array | None) -> str:
    wt = g.const(f"{name}.weight_t", np.ascontiguousarray(w.T.astype(np.float32)))
    y = g.op("MatMul", [x, wt], hint=f"{name}.matmul")
    if b is None:
        return y
    return g.op("Add", [y, g.const(f"{name}.bias", b.astype(np.float32))], hint=f"{name}.out")


# An Embedding emits the rows of a (V, C) table for int64 ids of shape (B, T), in float32.
Embedding = Callable[[GraphBuilder, str, str, Array], str]


def fp32_embedding(g: GraphBuilder, ids: str, name: str, table: Array) -> str:
    return g.op("Gather", [g.const(name, table.astype(np.float32)), ids], hint="word_emb", axis=0)
