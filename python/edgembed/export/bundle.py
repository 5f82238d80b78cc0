"""The engine bundle (.emb): one file with everything the C engine needs.

The byte layout is documented where it is read, at the top of ``runtime/include/edgembed.h``
(also ``docs/bundle-format.md``). In short: a valid safetensors file whose JSON header starts
with the magic ``{"__metadata__":{"edgembed_bundle":"2"``, holding the model's configuration
(the encoder's features, pooling, Dense modules, normalization) and the tokenizer's flags as
metadata strings, the tokenizer's tables as tensors, and int8 weights already packed in the
kernels' "n4k4" layout, every tensor 64-byte aligned, the whole file covered by a CRC-32.

::

    model directory ─► read_model_dir() ─► bundle_config() ─► BundleConfig ─┐
                    └► load_weights() ─► canonical tensors ─────────────────┴► write_bundle_parts()
                                         (docs/architectures.md)      (+ tokenizer_tables())

Why safetensors: any tool that reads safetensors (``safetensors``, ``huggingface_hub``, Netron)
can list a bundle's tensors and metadata without edgembed, while the engine still maps the file
as is: the weights are used in place, with no parsing beyond one small JSON header.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import (
    BundleError,
    ChecksumMismatch,
    InputError,
    InvalidModelDir,
    UnsupportedArchitecture,
)
from ..model_dir import (
    Activation,
    Family,
    FfnKind,
    ModelDescription,
    PositionKind,
    Task,
    load_weights,
    read_model_dir,
    relative_position_bucket,
)
from .quantize import BLOCK, quantize_blocks_int8
from .tokenizer_tables import tokenizer_tables

__all__ = [
    "ACTIVATIONS",
    "ATTENTION_KINDS",
    "AUTO_INT8_MIN_TOKENS",
    "BUNDLE_VERSION",
    "BUNDLE_VERSION_MAX",
    "BUNDLE_VERSION_MIN",
    "POOLING_MODES",
    "SPARSE_SCHEMES",
    "BundleConfig",
    "BundleHeader",
    "auto_min_tokens",
    "bundle_config",
    "bundle_tensors",
    "check_bundle",
    "pack_linear",
    "read_bundle_header",
    "relative_bucket_table",
    "rotary_tables",
    "write_bundle",
    "write_bundle_parts",
]

BUNDLE_VERSION = 2
BUNDLE_VERSION_MIN = 2
BUNDLE_VERSION_MAX = 2
ALIGN = 64
MAGIC_PREFIX = b'{"__metadata__":{"edgembed_bundle":"'
POOLING_MODES = ("cls", "mean", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu")
DENSE_ACTIVATIONS = ("identity", "tanh", "silu")
HEADS = ("none", "classifier", "mlm")
CLASSIFIER_ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "silu", "tanh", "identity")
SPARSE_POOLINGS = ("max", "sum")
SPARSE_ACTIVATIONS = ("relu", "log1p_relu")
# the attention's products: int8 GEMMs, fp32, or "auto": int8 for each sequence of at least
# attention_min_tokens tokens (its own length, never its batch's), fp32 below
ATTENTION_KINDS = ("int8", "fp32", "auto")
AUTO_INT8_MIN_TOKENS = 128  # "auto"'s threshold (docs/benchmarks.md, "auto attention")
# a SPLADE model's weights (docs/quantization.md, "Rerankers and SPLADE models"): "int8" every
# linear layer and the word table int8; "rescored" the encoder, the transform and the word table
# fp32, the masked-LM decoder int8 with its logits rescored exactly (bundle quantization
# "fp32-rescored")
SPARSE_SCHEMES = ("int8", "rescored")
QUANTIZATION = {"int8": "int8-block32", "rescored": "fp32-rescored"}
MAX_DENSE = 8
_NAME_RE = re.compile(r"^[\x20-\x7e]{1,128}$")
_CRC_PLACEHOLDER = b'"crc32":"00000000"'
_REGENERATE = "regenerate it with `embed bundle MODEL`"


def _pad32(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK * BLOCK


# ── the configuration ──────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class BundleConfig:
    """What the engine runs: one value per feature, as the bundle's metadata spells them
    (runtime/include/edgembed.h, "BUNDLE FORMAT"). ``layer_attention`` has one character per
    layer, 'g' global or 'l' sliding-window; empty means all global."""

    name: str
    family: str
    dim: int
    n_layers: int
    n_heads: int
    ffn_dim: int
    vocab_size: int
    max_length: int
    layer_norm_eps: float = 1e-12
    position: str = "absolute"            # or "rotary"
    max_positions: int = 512
    position_offset: int = 0
    position_pad_id: int | None = None
    rope_theta_global: float = 10000.0
    rope_theta_local: float = 10000.0
    relative_buckets: int = 0
    relative_max_distance: int = 128
    type_vocab_size: int = 2
    norm: str = "post"                    # or "pre"
    norm_bias: bool = True
    attention_bias: bool = True
    ffn_bias: bool = True
    final_norm: bool = False
    ffn: str = "mlp"                      # or "glu"
    activation: str = "gelu"
    layer_attention: str = ""
    local_window: int = 0
    pooling: str = "mean"                 # one of POOLING_MODES, or several joined by '+'
    include_prompt: bool = True
    dense_activations: tuple[str, ...] = ()
    normalize: bool = False
    # what the model ends with: "none" (the pooled embedding), "classifier" (a reranker's
    # sequence-classification head) or "mlm" (a masked-LM head for SPLADE)
    head: str = "none"
    n_labels: int = 0
    classifier_pooling: str = "cls"        # or "mean" (ModernBERT's classifier_pooling)
    classifier_activation: str = "tanh"    # after classifier.dense
    score_activation: str = "identity"     # a cross-encoder's on the logits (informational)
    mlm_activation: str = "gelu"           # after mlm.transform
    sparse_pooling: str = "max"            # or "sum"
    sparse_activation: str = "relu"        # or "log1p_relu"
    sparse_max_active_dims: int = 0        # the model's max_active_dims (0: every weight)
    attention: str = "fp32"                # "int8": QKᵀ and P·V in int8 (docs/quantization.md);
    attention_min_tokens: int = AUTO_INT8_MIN_TOKENS  # "auto": int8 from this many tokens on
    sparse: str = "int8"                   # a SPLADE model's weights: one of SPARSE_SCHEMES
    extra: dict[str, str] = field(default_factory=dict)  # not written; reserved for callers

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def pooling_modes(self) -> tuple[str, ...]:
        """The pooling modes, concatenated in this order ("cls+mean": two)."""
        return tuple(self.pooling.split("+"))

    @property
    def attention_pattern(self) -> str:
        return self.layer_attention or "g" * self.n_layers

    def check(self) -> None:
        """Refuse what the engine would refuse, with a message naming the field."""
        def bad(msg: str) -> UnsupportedArchitecture:
            return UnsupportedArchitecture(f"{self.name}: {msg}")

        if not _NAME_RE.match(self.name) or '"' in self.name or "\\" in self.name:
            raise ValueError(
                f"bundle name {self.name!r} must be printable ASCII without quotes or backslashes"
            )
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.family):
            raise bad(f"family {self.family!r} is not a plain model_type name")
        for what, v, lo, hi in (("dim", self.dim, 1, 16384), ("n_layers", self.n_layers, 1, 256),
                                ("n_heads", self.n_heads, 1, 256),
                                ("ffn_dim", self.ffn_dim, 1, 65536),
                                ("vocab_size", self.vocab_size, 1, 1 << 24),
                                ("max_length", self.max_length, 2, 1 << 16),
                                ("relative_buckets", self.relative_buckets, 0, 1024),
                                ("type_vocab_size", self.type_vocab_size, 0, 1 << 16)):
            if not lo <= v <= hi:
                raise bad(f"{what} = {v} is outside {lo}..{hi}")
        if self.dim % self.n_heads:
            raise bad(f"hidden size {self.dim} is not a multiple of {self.n_heads} heads")
        if not 0 < self.layer_norm_eps < 1:
            raise bad(f"layer_norm_eps {self.layer_norm_eps} is not in (0, 1)")
        if self.position == "absolute":
            if self.position_offset + self.max_length > self.max_positions:
                raise InvalidModelDir(
                    f"{self.name}: max_length {self.max_length} needs position rows up to "
                    f"{self.position_offset + self.max_length}, but the model has "
                    f"{self.max_positions}; lower max_length"
                )
            pad = self.position_pad_id
            if pad is not None and self.position_offset != pad + 1:
                raise bad("position_offset must be padding_idx + 1 when positions skip padding")
        elif self.position == "rotary":
            if self.head_dim % 2:
                raise bad(f"rotary positions need an even head size, not {self.head_dim}")
        else:
            raise bad(f"position kind {self.position!r} (absolute or rotary)")
        for key, value, choices in (("norm", self.norm, ("post", "pre")),
                                    ("ffn", self.ffn, ("mlp", "glu")),
                                    ("activation", self.activation, ACTIVATIONS),
                                    *(("pooling", m, POOLING_MODES) for m in self.pooling_modes)):
            if value not in choices:
                raise bad(f"{key} {value!r} is not supported (supported: {', '.join(choices)})")
        if len(set(self.pooling_modes)) != len(self.pooling_modes):
            raise bad(f"pooling {self.pooling!r} names a mode twice")
        pattern = self.attention_pattern
        if len(pattern) != self.n_layers or set(pattern) - {"g", "l"}:
            raise bad(f"layer_attention {pattern!r} needs one 'g' or 'l' per layer")
        if ("l" in pattern) != (self.local_window > 0):
            raise bad("local layers need local_window > 0, and local_window needs local layers")
        if len(self.dense_activations) > MAX_DENSE:
            raise bad(f"{len(self.dense_activations)} Dense modules (at most {MAX_DENSE})")
        for a in self.dense_activations:
            if a not in DENSE_ACTIVATIONS:
                raise bad(f"Dense activation {a!r} (supported: {', '.join(DENSE_ACTIVATIONS)})")
        head_choices: list[tuple[str, str, tuple[str, ...]]] = [("head", self.head, HEADS)]
        if self.head == "classifier":
            if not 1 <= self.n_labels <= 65536:
                raise bad(f"n_labels = {self.n_labels} is outside 1..65536")
            if not re.fullmatch(r"[a-z0-9_]{1,32}", self.score_activation):
                raise bad(f"score_activation {self.score_activation!r} is not a plain name")
            head_choices += [("classifier pooling", self.classifier_pooling, ("cls", "mean")),
                             ("classifier activation", self.classifier_activation,
                              CLASSIFIER_ACTIVATIONS)]
        elif self.head == "mlm":
            head_choices += [("masked-LM activation", self.mlm_activation, ACTIVATIONS),
                             ("SPLADE pooling", self.sparse_pooling, SPARSE_POOLINGS),
                             ("SPLADE activation", self.sparse_activation, SPARSE_ACTIVATIONS)]
            if not 0 <= self.sparse_max_active_dims <= self.vocab_size:
                raise bad(f"sparse_max_active_dims = {self.sparse_max_active_dims} is outside "
                          f"0..{self.vocab_size} (0: every weight)")
        for key, value, choices in head_choices:
            if value not in choices:
                raise bad(f"{key} {value!r} is not supported (supported: {', '.join(choices)})")
        if self.attention not in ATTENTION_KINDS:
            raise bad(f"attention {self.attention!r} (supported: {', '.join(ATTENTION_KINDS)})")
        if not 1 <= self.attention_min_tokens <= 65536:
            raise bad(f"attention_min_tokens = {self.attention_min_tokens} is outside "
                      "1..65536")
        if self.sparse not in SPARSE_SCHEMES:
            raise bad(f"sparse {self.sparse!r} (supported: {', '.join(SPARSE_SCHEMES)})")
        if self.sparse != "int8" and self.head != "mlm":
            raise bad(f"sparse {self.sparse!r} is for SPLADE models (a masked-LM head), not "
                      f"head {self.head!r}")

    def metadata(self) -> dict[str, str]:
        """The configuration's metadata strings, in the order edgembed.h lists them."""
        def yes(b: bool) -> str:
            return "true" if b else "false"

        m = {
            "name": self.name, "family": self.family, "dim": str(self.dim),
            "n_layers": str(self.n_layers), "n_heads": str(self.n_heads),
            "ffn_dim": str(self.ffn_dim), "vocab_size": str(self.vocab_size),
            "max_length": str(self.max_length), "layer_norm_eps": repr(float(self.layer_norm_eps)),
            "position": self.position,
        }
        if self.position == "absolute":
            m["max_positions"] = str(self.max_positions)
            m["position_offset"] = str(self.position_offset)
            pad = self.position_pad_id
            m["position_pad_id"] = "none" if pad is None else str(pad)
        else:
            m["rope_theta_global"] = repr(float(self.rope_theta_global))
            m["rope_theta_local"] = repr(float(self.rope_theta_local))
        m.update({
            "relative_buckets": str(self.relative_buckets),
            "type_vocab_size": str(self.type_vocab_size),
            "norm": self.norm, "norm_bias": yes(self.norm_bias),
            "attention_bias": yes(self.attention_bias), "ffn_bias": yes(self.ffn_bias),
            "final_norm": yes(self.final_norm),
            "ffn": self.ffn, "activation": self.activation,
            "layer_attention": self.attention_pattern, "local_window": str(self.local_window),
            "pooling": self.pooling, "include_prompt": yes(self.include_prompt),
            "n_dense": str(len(self.dense_activations)),
        })
        for i, a in enumerate(self.dense_activations):
            m[f"dense.{i}.activation"] = a
        m.update({"normalize": yes(self.normalize), "head": self.head})
        if self.head == "classifier":
            m.update({"n_labels": str(self.n_labels),
                      "classifier.pooling": self.classifier_pooling,
                      "classifier.activation": self.classifier_activation,
                      "classifier.score_activation": self.score_activation})
        elif self.head == "mlm":
            m.update({"mlm.activation": self.mlm_activation,
                      "sparse.pooling": self.sparse_pooling,
                      "sparse.activation": self.sparse_activation})
            if self.sparse_max_active_dims:  # only when set: older engines refuse the key
                m["sparse.max_active_dims"] = str(self.sparse_max_active_dims)
        m.update({"quantization": QUANTIZATION[self.sparse], "weight_layout": "n4k4"})
        if self.attention != "fp32":  # absent: fp32 (and the bytes of fp32 bundles unchanged)
            m["attention"] = self.attention
        if self.attention == "auto":
            m["attention.int8_min_tokens"] = str(self.attention_min_tokens)
        return m


def auto_min_tokens(attention: str, min_tokens: int | None) -> int:
    """The threshold of ``attention="auto"`` a caller asked for: ``min_tokens`` (a whole number
    of tokens, 1 .. 65536, given only with "auto"), or AUTO_INT8_MIN_TOKENS when None."""
    if min_tokens is None:
        return AUTO_INT8_MIN_TOKENS
    if attention != "auto":
        raise InputError(f"attention_min_tokens is for attention='auto', not {attention!r}")
    if isinstance(min_tokens, bool) or not isinstance(min_tokens, int) \
            or not 1 <= min_tokens <= 65536:
        raise InputError(f"attention_min_tokens {min_tokens!r}: a whole number of tokens, "
                         "1 .. 65536")
    return min_tokens


# ── tensors ────────────────────────────────────────────────────────────────────────────────


def pack_linear(
    w: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32] | None = None,
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32], npt.NDArray[np.float32] | None]:
    """Quantize a linear weight W (N, K) and pack it in the engine's "n4k4" layout.

    W is zero-padded to (Np, Kp), the multiples of 32 at or above N and K. Returns
    ``(q, scale, bias)`` with ``q`` int8 (Np/4, Kp/4, 4, 4) where ``q[g, j, r, c] = Q[4g + r,
    4j + c]``, ``scale`` float32 (Np/4, Kp/32, 4) where ``scale[g, b, r] = S[4g + r, b]``
    (``Q, S = quantize_blocks_int8(padded W)``), and the bias zero-padded to Np (or None).
    """
    n, k = w.shape
    np_, kp = _pad32(n), _pad32(k)
    padded = np.zeros((np_, kp), dtype=np.float32)
    padded[:n, :k] = w
    q, s = quantize_blocks_int8(padded)
    qp = q.reshape(np_ // 4, 4, kp // 4, 4).transpose(0, 2, 1, 3)
    sp = s.reshape(np_ // 4, 4, kp // BLOCK).transpose(0, 2, 1)
    b = None
    if bias is not None:
        b = np.zeros(np_, dtype=np.float32)
        b[:n] = bias
    return np.ascontiguousarray(qp), np.ascontiguousarray(sp), b


def relative_bucket_table(
    max_length: int, num_buckets: int, max_distance: int = 128
) -> npt.NDArray[np.int32]:
    """The bucket of every relative position d = j − i in −(max_length−1) .. max_length−1, at
    index d + max_length − 1 (transformers' MPNet ``relative_position_bucket``, as
    ``model_dir.relative_position_bucket`` computes it)."""
    rel = np.arange(-(max_length - 1), max_length, dtype=np.int64)
    return relative_position_bucket(rel, num_buckets, max_distance).astype(np.int32)


def rotary_tables(
    max_length: int, head_dim: int, theta: float
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """cos and sin (max_length, head_dim / 2) of position · inverse frequency, computed as
    transformers' default rotary embedding does in float32: exponents 2i/D in float32, θ to
    that power rounded to float32, its float32 reciprocal, the angle p · f in float32 (then cos
    and sin of that float32 angle, correctly rounded)."""
    e = (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)).astype(np.float32)
    inv = (np.float32(1.0) / (float(theta) ** e.astype(np.float64)).astype(np.float32))
    angles = np.arange(max_length, dtype=np.float32)[:, None] * inv.astype(np.float32)[None, :]
    a64 = angles.astype(np.float64)
    return np.cos(a64).astype(np.float32), np.sin(a64).astype(np.float32)


def _f32(weights: Mapping[str, npt.NDArray[Any]], name: str, shape: tuple[int, ...]
         ) -> npt.NDArray[np.float32]:
    if name not in weights:
        raise InvalidModelDir(f"the model's weights lack the tensor {name}")
    a = np.ascontiguousarray(weights[name], dtype=np.float32)
    if a.shape != shape:
        raise InvalidModelDir(f"tensor {name} has shape {a.shape}, expected {shape}")
    return a


def bundle_tensors(
    cfg: BundleConfig, weights: Mapping[str, npt.NDArray[Any]]
) -> list[tuple[str, npt.NDArray[Any]]]:
    """The bundle's tensors (edgembed.h) from float32 weights under the canonical names of
    docs/architectures.md. Every tensor the configuration needs must be there, in its shape."""
    cfg.check()
    c, f, v = cfg.dim, cfg.ffn_dim, cfg.vocab_size
    out: list[tuple[str, npt.NDArray[Any]]] = []
    f32 = cfg.sparse == "rescored"  # fp32 linears (NAME.weight) and word table, int8 decoder

    def linear(dst: str, w: npt.NDArray[np.float32], b: npt.NDArray[np.float32] | None,
               int8: bool = False) -> None:
        if f32 and not int8:
            n, k = w.shape
            np_, kp = _pad32(n), _pad32(k)
            wp = np.zeros((np_, kp), np.float32)
            wp[:n, :k] = w  # the n4k4 cells of pack_linear, in fp32
            out.append((dst + ".weight", np.ascontiguousarray(
                wp.reshape(np_ // 4, 4, kp // 4, 4).transpose(0, 2, 1, 3))))
            if b is not None:
                bp32 = np.zeros(_pad32(n), np.float32)
                bp32[:n] = b
                out.append((dst + ".bias", bp32))
            return
        q, s, bp = pack_linear(w, b)
        out.extend([(dst + ".q", q), (dst + ".scale", s)])
        if bp is not None:
            out.append((dst + ".bias", bp))

    def bias_of(name: str, n: int, present: bool) -> npt.NDArray[np.float32] | None:
        return _f32(weights, name, (n,)) if present else None

    def norm(src: str, dst: str) -> None:
        out.append((dst + ".weight", _f32(weights, src + ".weight", (c,))))
        if cfg.norm_bias:
            out.append((dst + ".bias", _f32(weights, src + ".bias", (c,))))

    word = _f32(weights, "embeddings.word", (v, c))
    if f32:
        out.append(("embeddings.word", word))
    else:
        word_q, word_s = quantize_blocks_int8(word)
        out += [("embeddings.word.q", word_q), ("embeddings.word.scale", word_s)]
    if cfg.position == "absolute":
        out.append(("embeddings.position",
                    _f32(weights, "embeddings.position", (cfg.max_positions, c))))
    if cfg.type_vocab_size:
        out.append(("embeddings.token_type",
                    _f32(weights, "embeddings.token_type", (cfg.type_vocab_size, c))))
    norm("embeddings.norm", "embeddings.norm")
    if cfg.relative_buckets:
        out.append(("encoder.relative_bias", _f32(
            weights, "encoder.relative_bias", (cfg.relative_buckets, cfg.n_heads))))
        out.append(("encoder.relative_bucket", relative_bucket_table(
            cfg.max_length, cfg.relative_buckets, cfg.relative_max_distance)))
    pattern = cfg.attention_pattern
    if cfg.position == "rotary":
        for kind, theta in (("global", cfg.rope_theta_global), ("local", cfg.rope_theta_local)):
            if kind[0] in pattern:
                cos, sin = rotary_tables(cfg.max_length, cfg.head_dim, theta)
                out += [(f"rotary.{kind}.cos", cos), (f"rotary.{kind}.sin", sin)]
    up_n = 2 * f if cfg.ffn == "glu" else f
    for layer in range(cfg.n_layers):
        src, dst = f"layers.{layer}.", f"layers.{layer}."
        qkv = [_f32(weights, f"{src}attention.{x}.weight", (c, c)) for x in "qkv"]
        ab, fb = cfg.attention_bias, cfg.ffn_bias
        qkv_b = [bias_of(f"{src}attention.{x}.bias", c, ab) for x in "qkv"]
        linear(dst + "attention.qkv", np.concatenate(qkv),
               np.concatenate(qkv_b) if ab else None)  # type: ignore[arg-type]
        linear(dst + "attention.out", _f32(weights, src + "attention.o.weight", (c, c)),
               bias_of(src + "attention.o.bias", c, ab))
        linear(dst + "ffn.up", _f32(weights, src + "ffn.up.weight", (up_n, c)),
               bias_of(src + "ffn.up.bias", up_n, fb))
        linear(dst + "ffn.down", _f32(weights, src + "ffn.down.weight", (c, f)),
               bias_of(src + "ffn.down.bias", c, fb))
        if cfg.norm == "post" or src + "attention.norm.weight" in weights:
            norm(src + "attention.norm", dst + "attention.norm")
        norm(src + "ffn.norm", dst + "ffn.norm")
    if cfg.final_norm:
        norm("final_norm", "final_norm")
    k = c * len(cfg.pooling_modes)
    for i in range(len(cfg.dense_activations)):
        w = weights.get(f"dense.{i}.weight")
        if w is None or w.ndim != 2 or w.shape[1] != k:
            raise InvalidModelDir(
                f"Dense module {i} needs a weight of shape (E, {k}), got "
                f"{None if w is None else w.shape}")
        out.append((f"dense.{i}.weight", np.ascontiguousarray(w, dtype=np.float32)))
        if f"dense.{i}.bias" in weights:
            out.append((f"dense.{i}.bias", _f32(weights, f"dense.{i}.bias", (w.shape[0],))))
        k = int(w.shape[0])
    if cfg.head == "classifier":
        out += _classifier_tensors(cfg, weights)
    elif cfg.head == "mlm":
        linear("mlm.transform", _f32(weights, "mlm.transform.weight", (c, c)),
               bias_of("mlm.transform.bias", c, "mlm.transform.bias" in weights))
        norm("mlm.norm", "mlm.norm")
        # a tied decoder (no mlm.decoder.weight of its own) is the word embeddings again, packed
        dec = weights.get("mlm.decoder.weight", weights.get("embeddings.word"))
        dec32 = _f32({"w": dec} if dec is not None else {}, "w", (v, c))
        linear("mlm.decoder", dec32, bias_of("mlm.decoder.bias", v, "mlm.decoder.bias" in weights),
               int8=True)
        # rescored: the exact rows come from the fp32 word table, or the decoder's own
        if f32 and not np.array_equal(dec32, word):
            out.append(("mlm.decoder.weight", dec32))
    return out


def _classifier_tensors(cfg: BundleConfig, weights: Mapping[str, npt.NDArray[Any]]
                        ) -> list[tuple[str, npt.NDArray[Any]]]:
    """classifier.dense (its own, or BERT's pooler), classifier.norm (ModernBERT's head) and
    classifier.out, in float32 (one small matrix per sequence, not worth int8)."""
    c, n = cfg.dim, cfg.n_labels
    src = next((p for p in ("classifier.dense", "pooler.dense") if p + ".weight" in weights), None)
    if src is None:
        raise InvalidModelDir(
            "the classification head needs a dense layer before its output (classifier.dense "
            "or BERT's pooler.dense); the weights have neither")
    out = [("classifier.dense.weight", _f32(weights, src + ".weight", (c, c)))]
    if src + ".bias" in weights:
        out.append(("classifier.dense.bias", _f32(weights, src + ".bias", (c,))))
    if "classifier.norm.weight" in weights:
        out.append(("classifier.norm.weight", _f32(weights, "classifier.norm.weight", (c,))))
        if cfg.norm_bias:
            out.append(("classifier.norm.bias", _f32(weights, "classifier.norm.bias", (c,))))
    out.append(("classifier.out.weight", _f32(weights, "classifier.out.weight", (n, c))))
    if "classifier.out.bias" in weights:
        out.append(("classifier.out.bias", _f32(weights, "classifier.out.bias", (n,))))
    return out


# ── the file ───────────────────────────────────────────────────────────────────────────────


def bundle_container(meta: Mapping[str, str], tensors: Sequence[tuple[str, npt.NDArray[Any]]]
                     ) -> list[bytes]:
    """The bundle container around metadata strings and tensors (runtime/include/edgembed.h):
    the 8-byte header length, the JSON header (the version first, then ``crc32``, the CRC-32 of
    the whole file with its own 8 digits read as zeros) padded so the data starts 64-aligned,
    and the data region with every tensor 64-aligned. Returns ``[prefix, header, data]``."""
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32", np.dtype(np.int8): "I8",
              np.dtype(np.uint8): "U8", np.dtype(np.float64): "F64"}
    entries: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for tname, arr in tensors:
        pad = -offset % ALIGN
        if pad:
            # safetensors readers want the tensors back to back; an explicit padding tensor
            # keeps the file valid for them while aligning the next tensor for the engine.
            pname = f"__pad.{len(chunks)}"
            entries[pname] = {"dtype": "U8", "shape": [pad], "data_offsets": [offset, offset + pad]}
            chunks.append(b"\0" * pad)
            offset += pad
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        entries[tname] = {
            "dtype": dtypes[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    data_region = b"".join(chunks)

    head = {"edgembed_bundle": str(BUNDLE_VERSION), "crc32": "00000000"}
    head.update((k, v) for k, v in meta.items() if k not in head)
    header = json.dumps({"__metadata__": head, **entries}, separators=(",", ":")).encode("ascii")
    assert header.startswith(MAGIC_PREFIX) and header.count(_CRC_PLACEHOLDER) == 1
    header += b" " * (-(8 + len(header)) % ALIGN)
    prefix = struct.pack("<Q", len(header))
    crc = zlib.crc32(data_region, zlib.crc32(header, zlib.crc32(prefix))) & 0xFFFFFFFF
    header = header.replace(_CRC_PLACEHOLDER, f'"crc32":"{crc:08x}"'.encode("ascii"), 1)
    return [prefix, header, data_region]


def write_bundle_parts(
    out: Path,
    cfg: BundleConfig,
    weights: Mapping[str, npt.NDArray[Any]],
    tokenizer: tuple[dict[str, str], Sequence[tuple[str, npt.NDArray[Any]]]],
) -> dict[str, Any]:
    """Write a bundle from its configuration, canonical weights and tokenizer tables
    (``(metadata, tensors)`` as ``tokenizer_tables`` makes them). Returns the metadata strings
    plus ``path``, ``size`` (bytes), ``sha256`` (of the whole file) and ``format_version``."""
    tensors = bundle_tensors(cfg, weights) + list(tokenizer[1])
    meta = {"edgembed_bundle": str(BUNDLE_VERSION), "crc32": "00000000", **cfg.metadata(),
            **tokenizer[0]}
    parts = bundle_container(meta, tensors)
    meta["crc32"] = parts[1][parts[1].index(b'"crc32":"') + 9:][:8].decode("ascii")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    digest = hashlib.sha256()
    with open(tmp, "wb") as fh:
        for part in parts:
            fh.write(part)
            digest.update(part)
    tmp.replace(out)
    return {
        **meta,
        "path": str(out),
        "size": sum(len(p) for p in parts),
        "sha256": digest.hexdigest(),
        "format_version": BUNDLE_VERSION,
    }


@dataclass(frozen=True)
class BundleHeader:
    """The parsed header of a bundle: format version, metadata strings and tensor table."""

    version: int
    metadata: dict[str, str]
    tensors: dict[str, dict[str, Any]]
    data_offset: int

    @property
    def dim(self) -> int:
        """The embedding length: the last Dense module's output, else the hidden size times
        the pooling modes."""
        n_dense = int(self.metadata.get("n_dense", "0"))
        if n_dense:
            return int(self.tensors[f"dense.{n_dense - 1}.weight"]["shape"][0])
        return int(self.metadata["dim"]) * len(self.metadata.get("pooling", "mean").split("+"))

    @property
    def max_length(self) -> int:
        return int(self.metadata["max_length"])


def _header_bytes(source: Path | bytes | bytearray | memoryview) -> bytes:
    if isinstance(source, Path):
        with open(source, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise BundleError(f"{source}: truncated (no header length)")
            (hlen,) = struct.unpack("<Q", head)
            if hlen > 100_000_000:
                raise BundleError(f"{source}: not an edgembed bundle (header length {hlen})")
            raw = f.read(hlen)
    else:
        buf = bytes(source[: 8 + 100_000_000])
        if len(buf) < 8:
            raise BundleError("truncated bundle (no header length)")
        (hlen,) = struct.unpack("<Q", buf[:8])
        raw = buf[8 : 8 + hlen]
    if len(raw) < hlen:
        raise BundleError("truncated bundle header")
    return raw


def read_bundle_header(source: Path | bytes | bytearray | memoryview) -> BundleHeader:
    """Read and check the header of a bundle file (or of its bytes): magic and version."""
    raw = _header_bytes(source)
    if not raw.startswith(MAGIC_PREFIX):
        raise BundleError(
            "not an edgembed bundle (magic missing); create one with `embed bundle MODEL`"
        )
    end = raw.find(b'"', len(MAGIC_PREFIX))
    digits = raw[len(MAGIC_PREFIX) : end]
    version = int(digits) if digits.isdigit() and len(digits) <= 9 else -1
    if not BUNDLE_VERSION_MIN <= version <= BUNDLE_VERSION_MAX:
        raise BundleError(
            f"bundle format version {version if version >= 0 else '?'} is outside the supported "
            f"range {BUNDLE_VERSION_MIN} through {BUNDLE_VERSION_MAX}; {_REGENERATE}"
        )
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"corrupt bundle header: {e}; {_REGENERATE}") from e
    meta = header.pop("__metadata__")
    return BundleHeader(version, meta, header, 8 + len(raw))


def check_bundle(data: bytes | bytearray | memoryview, *, sha256: str | None = None,
                 name: str = "the bundle") -> None:
    """Check a whole bundle's bytes before an engine loads them: its sha256 when one was
    recorded (the model manifest's), else nothing here (the engine checks the CRC-32 itself).

    A bundle that differs from the one the manifest recorded raises ChecksumMismatch."""
    if sha256 is None:
        return
    digest = hashlib.sha256(memoryview(data).cast("B")).hexdigest()
    if digest != sha256.lower():
        raise ChecksumMismatch(
            f"{name} differs from the one recorded in the model's manifest (sha256 "
            f"{digest[:12]}…, recorded {sha256[:12]}…): it was altered or damaged; "
            "regenerate it with `embed bundle MODEL --force`"
        )


# ── from a model directory ─────────────────────────────────────────────────────────────────

_ACTIVATIONS = {Activation.GELU: "gelu", Activation.GELU_TANH: "gelu_tanh",
                Activation.RELU: "relu", Activation.SILU: "silu"}
_DENSE = {Activation.IDENTITY: "identity", Activation.TANH: "tanh", Activation.SILU: "silu"}
_CLASSIFIER = {**_ACTIVATIONS, **_DENSE}
# transformers' ACT2FN names of the activations the engine has
_HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                   "gelu_fast": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}
# families whose absolute positions skip padding tokens (transformers'
# create_position_ids_from_input_ids with padding_idx = position_offset - 1)
_PAD_AWARE = (Family.MPNET, Family.ROBERTA, Family.XLM_ROBERTA, Family.CAMEMBERT)


def bundle_config(desc: ModelDescription, *, max_length: int | None = None,
                  name: str | None = None) -> BundleConfig:
    """The bundle configuration of a model description: what the engine runs, every feature
    spelled out. A feature the engine does not implement is refused by name, with the way out."""
    enc = desc.encoder
    where = f"{desc.name}: the engine bundle"
    other = "; run this model with backend='onnx'"
    if desc.task is Task.EMBEDDING and desc.pooling is None:
        raise UnsupportedArchitecture(f"{where} needs the model's pooling{other}")
    act = _ACTIVATIONS.get(enc.activation)
    if act is None:
        raise UnsupportedArchitecture(
            f"{where} supports the activations gelu, gelu_tanh, relu and silu, not "
            f"{enc.activation.value}{other}")
    dense = []
    for i, d in enumerate(desc.dense):
        if d.residual or d.activation not in _DENSE:
            raise UnsupportedArchitecture(
                f"{where} supports Dense modules with an identity, tanh or silu activation and no "
                f"residual, not module {i} ({d.activation.value}"
                f"{', residual' if d.residual else ''}){other}")
        dense.append(_DENSE[d.activation])
    length = desc.max_seq_length if max_length is None else max_length
    if not 2 <= length <= enc.max_positions:
        raise InvalidModelDir(
            f"max_length {length} must be within 2..{enc.max_positions} (the model's positions)")
    absolute = enc.position_kind is PositionKind.ABSOLUTE
    pattern = "".join("g" if enc.layer_is_global(i) else "l" for i in range(enc.num_layers))
    head = _head_config(desc, act, where, other)
    pooling = "+".join(m.value for m in desc.pooling.modes) if desc.pooling else (
        head.get("classifier_pooling", "cls"))  # a head's bundle: what EMBEDDING output pools
    return BundleConfig(
        name=name or desc.name, family=enc.family.value, dim=enc.hidden_size,
        n_layers=enc.num_layers, n_heads=enc.num_heads, ffn_dim=enc.intermediate_size,
        vocab_size=enc.vocab_size, max_length=length, layer_norm_eps=enc.layer_norm_eps,
        position=enc.position_kind.value,
        max_positions=enc.position_table_rows if absolute else 0,
        position_offset=enc.position_offset if absolute else 0,
        position_pad_id=enc.position_offset - 1 if enc.family in _PAD_AWARE else None,
        rope_theta_global=enc.rope_theta or 10000.0,
        rope_theta_local=enc.rope_theta_local or 10000.0,
        relative_buckets=enc.relative_buckets,
        relative_max_distance=enc.relative_max_distance or 128,
        type_vocab_size=enc.type_vocab_size, norm=enc.norm_placement.value,
        norm_bias=enc.norm_bias, attention_bias=enc.attention_bias, ffn_bias=enc.ffn_bias,
        final_norm=enc.final_norm, ffn="glu" if enc.ffn_kind is FfnKind.GLU else "mlp",
        activation=act, layer_attention=pattern,
        local_window=enc.local_window // 2 if "l" in pattern else 0,
        pooling=pooling, include_prompt=desc.pooling.include_prompt if desc.pooling else True,
        dense_activations=tuple(dense), normalize=desc.normalize, **head,
    )


def _head_config(desc: ModelDescription, act: str, where: str, other: str) -> dict[str, Any]:
    """BundleConfig's head fields of a reranker (sequence classification) or SPLADE model
    (masked-LM head); none for an embedding model."""
    if desc.task is Task.EMBEDDING:
        return {}
    head = desc.head
    family = desc.encoder.family
    if desc.task is Task.RERANK:
        cls_act = _CLASSIFIER.get(Activation(head.activation))
        if cls_act is None or head.pooling not in ("cls", "mean"):
            raise UnsupportedArchitecture(
                f"{where} supports classification heads with gelu, gelu_tanh, relu, silu, tanh "
                f"or no activation on cls or mean pooling, not {head.activation} on "
                f"{head.pooling!r}{other}")
        return {"head": "classifier", "n_labels": head.num_labels,
                "classifier_pooling": head.pooling, "classifier_activation": cls_act,
                "score_activation": head.score_activation.value}
    if desc.task is Task.SPARSE:
        # the transform's activation: BERT's and DistilBERT's are the encoder's (hidden_act,
        # activation), RoBERTa's, XLM-R's and MPNet's LM heads use exact GELU, ModernBERT's
        # head its classifier_activation
        mlm_act = act
        if family in (Family.ROBERTA, Family.XLM_ROBERTA, Family.CAMEMBERT, Family.MPNET):
            mlm_act = "gelu"
        elif family is Family.MODERNBERT:
            cfg = json.loads((desc.source_dir / "config.json").read_text(encoding="utf-8"))
            name = str(cfg.get("classifier_activation", "gelu"))
            mlm_act = _HF_ACTIVATIONS.get(name, "")
            if not mlm_act:
                raise UnsupportedArchitecture(
                    f"{where} supports the masked-LM head's activations gelu, gelu_tanh, "
                    f"relu and silu, not ModernBERT's classifier_activation {name!r}{other}")
        return {"head": "mlm", "mlm_activation": mlm_act, "sparse_pooling": head.pooling,
                "sparse_activation": str(head.activation),
                # a cap at or past the vocabulary keeps every weight: not written
                "sparse_max_active_dims": (head.max_active_dims or 0)
                if (head.max_active_dims or 0) < desc.encoder.vocab_size else 0}
    raise UnsupportedArchitecture(f"{where} supports embedding, rerank and sparse models, not "
                                  f"{desc.task.value}{other}")


def write_bundle(
    hf_dir: Path,
    out: Path,
    *,
    max_length: int | None = None,
    name: str | None = None,
    task: Task | None = None,
    attention: str = "fp32",
    attention_min_tokens: int | None = None,
    sparse: str = "int8",
) -> dict[str, Any]:
    """Write the engine bundle of a sentence-transformers model directory to ``out``.

    The directory is read by ``model_dir.read_model_dir`` (configuration, modules, pooling,
    Dense, the head of a cross-encoder or SPLADE model) and ``load_weights`` (canonical
    tensors); ``max_length`` defaults to the model's max_seq_length; ``task`` is the catalog's
    word for files that do not say it themselves (a bare ``BertForMaskedLM`` is a SPLADE model
    only when its entry says ``sparse``). ``attention="int8"`` computes the attention's
    products (QKᵀ, P·V) in int8 too (docs/quantization.md, "Attention"), ``attention="auto"``
    does so for each text of at least ``attention_min_tokens`` tokens (default
    AUTO_INT8_MIN_TOKENS; "auto" only) and keeps fp32 for shorter ones; the default is fp32.
    ``sparse`` (SPLADE models only): "int8", or "rescored" (fp32 encoder, int8 decoder with its
    logits rescored exactly; docs/quantization.md, "Rerankers and SPLADE models").
    Returns the bundle's metadata strings plus ``path``, ``size`` (bytes) and ``sha256`` (of
    the whole file), for the model manifest.
    """
    hf_dir, out = Path(hf_dir), Path(out)
    tok_meta, tok_tensors, n_tokens = tokenizer_tables(hf_dir)
    desc = read_model_dir(hf_dir, task=task)
    config = replace(bundle_config(desc, max_length=max_length, name=name or hf_dir.resolve().name),
                     attention=attention, sparse=sparse,
                     attention_min_tokens=auto_min_tokens(attention, attention_min_tokens))
    v = config.vocab_size
    # a streaming WordPiece vocabulary is the embedding's rows; the others may be fewer (padded)
    streaming = tok_meta["tokenizer"] == "wordpiece" and "tokenizer.normalizers" not in tok_meta
    if n_tokens > v or (streaming and n_tokens != v):
        raise InvalidModelDir(f"{hf_dir}: vocabulary has {n_tokens} tokens, config says {v}")
    return write_bundle_parts(out, config, load_weights(desc), (tok_meta, tok_tensors))
