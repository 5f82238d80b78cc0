"""A numpy model of the C engine's arithmetic, for any bundle: the int8 scheme of
docs/quantization.md and every encoder feature of edgembed.h, written plainly from the bundle's
own tensors and metadata. Tests compare the engine against it (an independent implementation of
the same scheme: the two differ only where a last-bit float difference flips an activation's
int8 rounding), and use ``random_model`` for small random models of any feature combination.
"""

from __future__ import annotations

from dataclasses import replace
from math import erf, sqrt
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from edgembed.export.bundle import BundleConfig, write_bundle_parts
from edgembed.export.tokenizer_tables import tokenizer_tables

F32 = npt.NDArray[np.float32]


def quantize(x: F32) -> tuple[F32, F32]:
    """Rows of x (M, K), K a multiple of 32: codes and scales per block."""
    m, k = x.shape
    b = x.reshape(m, k // 32, 32)
    s = (np.abs(b).max(axis=2) / np.float32(127)).astype(np.float32)
    safe = np.where(s == 0, np.float32(1), s)
    q = np.clip(np.rint(b / safe[:, :, None]), -127, 127)
    return q.astype(np.float32), s


class Model:
    """The bundle's tensors and configuration, and the forward pass of the int8 scheme."""

    def __init__(self, bundle: bytes) -> None:
        import json
        import struct

        from safetensors.numpy import load

        (hlen,) = struct.unpack("<Q", bundle[:8])
        self.m: dict[str, str] = json.loads(bundle[8 : 8 + hlen])["__metadata__"]
        self.t: dict[str, Any] = load(bundle)
        m = self.m
        self.c, self.h, self.f = int(m["dim"]), int(m["n_heads"]), int(m["ffn_dim"])
        self.cp = (self.c + 31) // 32 * 32
        self.eps = np.float32(float(m["layer_norm_eps"]))

    def linear(self, x: F32, name: str, n: int) -> F32:
        """x (M, K) through the packed linear NAME, its real outputs (M, n)."""
        q, s = self.t[name + ".q"], self.t[name + ".scale"]
        n4, k4 = q.shape[:2]
        w = q.transpose(0, 2, 1, 3).reshape(n4 * 4, k4 * 4).astype(np.float32)
        sw = s.transpose(0, 2, 1).reshape(n4 * 4, -1)
        xp = np.zeros((x.shape[0], k4 * 4), dtype=np.float32)
        xp[:, : x.shape[1]] = x
        qx, sx = quantize(xp)
        isum = np.einsum("mbk,nbk->mnb", qx, w.reshape(w.shape[0], -1, 32))  # exact in float32
        y = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
        for b in range(isum.shape[2]):
            y += (sx[:, None, b] * sw[None, :, b]) * isum[:, :, b]
        bias = self.t.get(name + ".bias")
        if bias is not None:
            y = y + bias
        return np.asarray(y[:, :n], dtype=np.float32)

    def norm(self, x: F32, name: str) -> F32:
        mean = x.mean(1, keepdims=True)
        var = ((x - mean) ** 2).mean(1, keepdims=True)
        y = (x - mean) / np.sqrt(var + self.eps) * self.t[name + ".weight"]
        bias = self.t.get(name + ".bias")
        return np.asarray(y + bias if bias is not None else y, dtype=np.float32)

    def act(self, x: F32, kind: str | None = None) -> F32:
        kind = kind or self.m["activation"]
        if kind == "identity":
            return x
        if kind == "tanh":
            return np.asarray(np.tanh(x.astype(np.float64)), dtype=np.float32)
        if kind == "relu":
            return np.asarray(np.maximum(x, 0), dtype=np.float32)
        if kind == "silu":
            x64 = x.astype(np.float64)
            return np.asarray(x64 / (1 + np.exp(-x64)), dtype=np.float32)
        if kind == "gelu_tanh":
            x64 = x.astype(np.float64)
            inner = sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)
            return np.asarray(0.5 * x64 * (1 + np.tanh(inner)), dtype=np.float32)
        gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
        return np.asarray(gelu(x), dtype=np.float32)

    def embed(self, ids: list[int], types: list[int] | None) -> F32:
        m, t, c = self.m, self.t, self.c
        q = t["embeddings.word.q"][ids].astype(np.float32)
        s = np.repeat(t["embeddings.word.scale"][ids], 32, axis=1)[:, :c]
        x = q * s
        if m["position"] == "absolute":
            off = int(m["position_offset"])
            if m["position_pad_id"] == "none":
                rows = off + np.arange(len(ids))
            else:  # transformers' create_position_ids_from_input_ids
                pad = int(m["position_pad_id"])
                mask = (np.asarray(ids) != pad).astype(np.int64)
                rows = np.cumsum(mask) * mask + pad
            x = x + t["embeddings.position"][rows]
        if int(m["type_vocab_size"]):
            x = x + t["embeddings.token_type"][types if types is not None else [0] * len(ids)]
        return self.norm(x.astype(np.float32), "embeddings.norm")

    def attention(self, qkv: F32, layer: int) -> F32:
        m, c, h = self.m, self.c, self.h
        n, d = qkv.shape[0], c // h
        q, k, v = (qkv[:, i * c : (i + 1) * c].reshape(n, h, d).transpose(1, 0, 2)
                   for i in range(3))
        if m["position"] == "rotary":
            kind = "local" if m["layer_attention"][layer] == "l" else "global"
            cos, sin = self.t[f"rotary.{kind}.cos"][:n], self.t[f"rotary.{kind}.sin"][:n]

            def rot(a: F32) -> F32:
                a1, a2 = a[..., : d // 2], a[..., d // 2 :]
                return np.concatenate([a1 * cos - a2 * sin, a2 * cos + a1 * sin], axis=-1)

            q, k = rot(q), rot(k)
        kind = m.get("attention", "fp32")  # attention_q8.c: int8 QKᵀ and P·V
        int8 = kind == "int8" or (kind == "auto" and n >= int(m["attention.int8_min_tokens"]))
        s = (self.scores_int8(q, k) if int8 else q @ k.transpose(0, 2, 1)) * np.float32(1 / sqrt(d))
        if int(m["relative_buckets"]):
            ml = int(m["max_length"])
            rel = np.arange(n)[None, :] - np.arange(n)[:, None]
            bucket = self.t["encoder.relative_bucket"][rel + ml - 1]
            s = s + self.t["encoder.relative_bias"][bucket].transpose(2, 0, 1)
        if m["layer_attention"][layer] == "l":
            w = int(m["local_window"])
            far = np.abs(np.arange(n)[None, :] - np.arange(n)[:, None]) > w
            s = np.where(far[None], -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        p = s / s.sum(-1, keepdims=True)
        a = self.products_int8(p, v) if int8 else p @ v
        return np.asarray(a.transpose(1, 0, 2).reshape(n, c), dtype=np.float32)

    @staticmethod
    def scores_int8(q: F32, k: F32) -> F32:
        """Q·Kᵀ per head (H, n, D) of int8 rows, blocks of 32 along D (zero-padded)."""
        return Model._block_products(q, k)

    @staticmethod
    def products_int8(p: F32, v: F32) -> F32:
        """P·V per head: P (H, n, n) and Vᵀ (H, D, n) as int8 rows, blocks of 32 keys."""
        return Model._block_products(p, v.transpose(0, 2, 1))

    @staticmethod
    def _block_products(a: F32, b: F32) -> F32:
        """Σ over blocks of (s_a·s_b)·(codes·codes), a (H, M, K) by b (H, N, K): the int8 GEMM."""
        h, k = a.shape[0], a.shape[2]
        kp = (k + 31) // 32 * 32
        out = []
        for i in range(h):
            ap = np.zeros((a.shape[1], kp), np.float32)
            bp = np.zeros((b.shape[1], kp), np.float32)
            ap[:, :k], bp[:, :k] = a[i], b[i]
            qa, sa = quantize(ap)
            qb, sb = quantize(bp)
            isum = np.einsum("mbk,nbk->mnb", qa, qb)  # exact in float32
            y = np.zeros((ap.shape[0], bp.shape[0]), np.float32)
            for blk in range(isum.shape[2]):
                y += (sa[:, None, blk] * sb[None, :, blk]) * isum[:, :, blk]
            out.append(y)
        return np.asarray(np.stack(out), dtype=np.float32)

    def tokens(self, ids: list[int], types: list[int] | None = None) -> F32:
        """The last hidden states (n, C) of one sequence."""
        m, c, f = self.m, self.c, self.f
        x = self.embed(ids, types)
        pre = m["norm"] == "pre"
        for layer in range(int(m["n_layers"])):
            p = f"layers.{layer}."
            h = x
            if pre and p + "attention.norm.weight" in self.t:
                h = self.norm(x, p + "attention.norm")
            a = self.attention(self.linear(h, p + "attention.qkv", 3 * c), layer)
            o = self.linear(a, p + "attention.out", c)
            if pre:
                x = (x + o).astype(np.float32)
                h = self.norm(x, p + "ffn.norm")
            else:
                x = h = self.norm(x + o, p + "attention.norm")
            if m["ffn"] == "glu":
                u = self.linear(h, p + "ffn.up", 2 * f)
                g = (self.act(u[:, :f]) * u[:, f:]).astype(np.float32)
            else:
                g = self.act(self.linear(h, p + "ffn.up", f))
            d = self.linear(g, p + "ffn.down", c)
            x = (x + d).astype(np.float32) if pre else self.norm(x + d, p + "ffn.norm")
        if m["final_norm"] == "true":
            x = self.norm(x, "final_norm")
        return x

    def embedding(self, ids: list[int], types: list[int] | None = None, prompt: int = 0,
                  pooling: str | None = None, normalize: bool | None = None) -> F32:
        """One sequence's embedding: pooling (over tokens prompt.. when the model leaves prompts
        out), Dense modules, L2 normalization."""
        m = self.m
        x = self.tokens(ids, types).astype(np.float64)
        skip = prompt if m["include_prompt"] == "false" else 0
        xs, idx = x[skip:], np.arange(skip, len(ids))
        pool = {"cls": lambda: xs[0], "lasttoken": lambda: x[-1], "max": lambda: xs.max(0),
                "mean": lambda: xs.mean(0),
                "mean_sqrt_len_tokens": lambda: xs.sum(0) / sqrt(len(xs)),
                "weightedmean": lambda: (xs * (idx + 1)[:, None]).sum(0) / (idx + 1).sum()}
        v = np.concatenate([pool[mode]() for mode in (pooling or m["pooling"]).split("+")])
        for i in range(int(m["n_dense"])):
            v = self.t[f"dense.{i}.weight"].astype(np.float64) @ v
            if f"dense.{i}.bias" in self.t:
                v = v + self.t[f"dense.{i}.bias"]
            if m[f"dense.{i}.activation"] == "tanh":
                v = np.tanh(v)
            elif m[f"dense.{i}.activation"] == "silu":
                v = v / (1 + np.exp(-v))
        if normalize if normalize is not None else m["normalize"] == "true":
            v = v / np.linalg.norm(v)
        return np.asarray(v, dtype=np.float32)


    def scores(self, ids: list[int], types: list[int] | None = None) -> npt.NDArray[np.float64]:
        """The classification head's logits of one sequence (float64 from the hidden states)."""
        m, t = self.m, self.t
        x = self.tokens(ids, types).astype(np.float64)
        v = x[0] if m["classifier.pooling"] == "cls" else x.mean(0)
        if "classifier.dense.weight" in t:
            v = t["classifier.dense.weight"].astype(np.float64) @ v
            v = v + t.get("classifier.dense.bias", 0)
            v = self.act(v.astype(np.float32), m["classifier.activation"]).astype(np.float64)
        if "classifier.norm.weight" in t:
            v = (v - v.mean()) / np.sqrt(v.var() + float(self.eps)) * t["classifier.norm.weight"]
            v = v + t.get("classifier.norm.bias", 0)
        return np.asarray(t["classifier.out.weight"] @ v + t.get("classifier.out.bias", 0))

    def sparse_rows(self, ids: list[int], types: list[int] | None = None) -> F32:
        """SPLADE weights of every token (n, V): the masked-LM head in int8, then
        log(1 + relu(logit)) (twice log1p for "log1p_relu")."""
        m = self.m
        v = int(m["vocab_size"])
        h = self.linear(self.tokens(ids, types), "mlm.transform", self.c)
        h = self.norm(self.act(h, m["mlm.activation"]), "mlm.norm")
        w = np.log1p(np.maximum(self.linear(h, "mlm.decoder", v), 0).astype(np.float64))
        if m["sparse.activation"] == "log1p_relu":
            w = np.log1p(w)
        return np.asarray(w, dtype=np.float32)

    def sparse(self, ids: list[int], types: list[int] | None = None,
               pooling: str | None = None) -> F32:
        rows = self.sparse_rows(ids, types)
        if (pooling or self.m["sparse.pooling"]) == "sum":
            return np.asarray(rows.astype(np.float64).sum(0), dtype=np.float32)
        return np.asarray(rows.max(0), dtype=np.float32)


# ── small random models ─────────────────────────────────────────────────────────────────────

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "the", "quick", "brown",
         "fox", "##es", "##s", ",", "!", "a", "b", "c", "jumps", "over"]


def random_weights(cfg: BundleConfig, seed: int = 0, dense: tuple[int, ...] = ()
                   ) -> dict[str, F32]:
    """Random float32 weights under the canonical names of docs/architectures.md."""
    rng = np.random.default_rng(seed)
    c, f = cfg.dim, cfg.ffn_dim

    def n(*shape: int, scale: float = 0.3) -> F32:
        return (rng.normal(0, scale, size=shape)).astype(np.float32)

    w: dict[str, F32] = {"embeddings.word": n(cfg.vocab_size, c, scale=1.0),
                         "embeddings.norm.weight": 1 + n(c, scale=0.1),
                         "embeddings.norm.bias": n(c, scale=0.1)}
    if cfg.position == "absolute":
        w["embeddings.position"] = n(cfg.max_positions, c, scale=0.5)
    if cfg.type_vocab_size:
        w["embeddings.token_type"] = n(cfg.type_vocab_size, c, scale=0.5)
    if cfg.relative_buckets:
        w["encoder.relative_bias"] = n(cfg.relative_buckets, cfg.n_heads, scale=1.0)
    up = 2 * f if cfg.ffn == "glu" else f
    for layer in range(cfg.n_layers):
        p = f"layers.{layer}."
        for name, shape in (("attention.q", (c, c)), ("attention.k", (c, c)),
                            ("attention.v", (c, c)),
                            ("attention.o", (c, c)), ("ffn.up", (up, c)), ("ffn.down", (c, f))):
            w[p + name + ".weight"] = n(*shape, scale=1.0 / sqrt(shape[1]))
            w[p + name + ".bias"] = n(shape[0], scale=0.1)
        for name in ("attention.norm", "ffn.norm"):
            if cfg.norm == "pre" and name == "attention.norm" and layer == 0:
                continue  # ModernBERT: no norm before the first attention
            w[p + name + ".weight"] = 1 + n(c, scale=0.1)
            w[p + name + ".bias"] = n(c, scale=0.1)
    if cfg.final_norm:
        w["final_norm.weight"], w["final_norm.bias"] = 1 + n(c, scale=0.1), n(c, scale=0.1)
    k = c * len(cfg.pooling_modes)
    for i, e in enumerate(dense):
        w[f"dense.{i}.weight"], w[f"dense.{i}.bias"] = n(e, k, scale=1 / sqrt(k)), n(e, scale=0.1)
        k = e
    if cfg.head == "classifier":
        w["classifier.dense.weight"] = n(c, c, scale=1 / sqrt(c))
        w["classifier.dense.bias"] = n(c, scale=0.1)
        if cfg.family == "modernbert":
            w["classifier.norm.weight"] = 1 + n(c, scale=0.1)
            w["classifier.norm.bias"] = n(c, scale=0.1)
        w["classifier.out.weight"] = n(cfg.n_labels, c, scale=1 / sqrt(c))
        w["classifier.out.bias"] = n(cfg.n_labels, scale=0.1)
    if cfg.head == "mlm":
        w["mlm.transform.weight"] = n(c, c, scale=1 / sqrt(c))
        w["mlm.transform.bias"] = n(c, scale=0.1)
        w["mlm.norm.weight"], w["mlm.norm.bias"] = 1 + n(c, scale=0.1), n(c, scale=0.1)
        w["mlm.decoder.bias"] = n(cfg.vocab_size, scale=0.5) - 1  # SPLADE: most weights 0
    return w


def random_model(tmp: Path, cfg: BundleConfig, seed: int = 0, dense: tuple[int, ...] = ()
                 ) -> bytes:
    """The bundle of a random model of ``cfg`` with a small WordPiece vocabulary of
    cfg.vocab_size tokens (the WORDS, then fillers)."""
    words = (WORDS + [f"w{i}" for i in range(len(WORDS), cfg.vocab_size)])[: cfg.vocab_size]
    tok_dir = tmp / f"tok-{cfg.vocab_size}"
    tok_dir.mkdir(exist_ok=True)
    (tok_dir / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    meta, tensors, _ = tokenizer_tables(tok_dir)
    out = tmp / f"{cfg.name}.emb"
    write_bundle_parts(out, cfg, random_weights(cfg, seed, dense), (meta, tensors))
    return out.read_bytes()


# one small model per encoder feature: (configuration, Dense module sizes)

def _cfg(name: str, **kw: object) -> BundleConfig:
    base: dict[str, object] = {"name": name, "family": name, "dim": 48, "n_layers": 2,
                               "n_heads": 4, "ffn_dim": 96, "vocab_size": 40, "max_length": 24,
                               "max_positions": 30}
    return BundleConfig(**{**base, **kw})  # type: ignore[arg-type]


FEATURES: dict[str, tuple[BundleConfig, tuple[int, ...]]] = {
    "bert": (_cfg("bert"), ()),
    # sizes no vector divides: C = 45 (head size 9), F = 100: short last blocks everywhere
    "ragged": (_cfg("ragged", dim=45, n_heads=5, ffn_dim=100, pooling="max",
                    activation="gelu_tanh"), ()),
    "distilbert": (_cfg("distilbert", type_vocab_size=0, pooling="cls"), ()),
    "mpnet": (_cfg("mpnet", relative_buckets=32, position_offset=2, position_pad_id=1,
                   type_vocab_size=0, max_positions=26), ()),
    "roberta": (_cfg("roberta", position_offset=2, position_pad_id=1, type_vocab_size=1,
                     max_positions=26, activation="relu", pooling="weightedmean"), ()),
    "modernbert": (_cfg("modernbert", dim=64, n_heads=4, ffn_dim=80, n_layers=4, max_length=32,
                        position="rotary", rope_theta_global=160000.0, rope_theta_local=10000.0,
                        norm="pre", norm_bias=False, attention_bias=False, ffn_bias=False,
                        final_norm=True,
                        ffn="glu", layer_attention="glll", local_window=4,
                        type_vocab_size=0), ()),
    "dense-prompt": (_cfg("dense", include_prompt=False, pooling="mean_sqrt_len_tokens",
                          dense_activations=("tanh", "identity"), normalize=True), (24, 16)),
    "lasttoken": (_cfg("lasttoken", pooling="lasttoken", include_prompt=False), ()),
    # several modes concatenated, in the model's order (sentence-transformers' torch.cat)
    "cls-mean": (_cfg("cls-mean", pooling="cls+mean", include_prompt=False), ()),
    "max-mean-dense": (_cfg("max-mean-dense", pooling="max+mean", dense_activations=("tanh",),
                            normalize=True), (20,)),
    # SiLU in the FFN and in a Dense module; SiLU in a GLU (SwiGLU)
    "silu-dense": (_cfg("silu-dense", dim=36, n_heads=3, ffn_dim=70, activation="silu",
                        dense_activations=("silu",), normalize=True), (28,)),
    "silu-glu": (_cfg("silu-glu", dim=64, n_heads=4, ffn_dim=80, max_length=32,
                      position="rotary", norm="pre", norm_bias=False, attention_bias=False,
                      ffn_bias=False, final_norm=True, ffn="glu", activation="silu",
                      layer_attention="gg", type_vocab_size=0), ()),
}
# int8 attention (attention_q8.c): QKᵀ and P·V as int8 products, with ragged head sizes,
# relative biases and a sliding window
for _name in ("bert", "ragged", "mpnet", "modernbert"):
    _c, _d = FEATURES[_name]
    FEATURES[f"{_name}-int8-attention"] = (replace(_c, attention="int8"), _d)
# "auto" attention: int8 for each text of at least 9 tokens, fp32 for shorter ones, both in one
# batch (the test lengths fall on either side)
for _name in ("bert", "mpnet", "modernbert"):
    _c, _d = FEATURES[_name]
    FEATURES[f"{_name}-auto-attention"] = (replace(_c, attention="auto", attention_min_tokens=9),
                                           _d)

# one small model per head: a reranker's classifier, a SPLADE masked-LM head (tied decoder)
HEADS: dict[str, BundleConfig] = {
    "bert-reranker": _cfg("bert-reranker", head="classifier", n_labels=1, pooling="cls",
                          score_activation="sigmoid"),
    "modernbert-classifier": _cfg(
        "modernbert", dim=64, n_heads=4, ffn_dim=80, n_layers=3, max_length=32,
        position="rotary", norm="pre", norm_bias=False, attention_bias=False, ffn_bias=False,
        final_norm=True, ffn="glu", layer_attention="glg", local_window=4, type_vocab_size=0,
        head="classifier", n_labels=3, classifier_pooling="mean", pooling="mean",
        classifier_activation="gelu"),
    "splade-max": _cfg("splade-max", head="mlm", vocab_size=600, pooling="cls"),
    "splade-sum-ragged": _cfg("splade-sum", dim=45, n_heads=5, ffn_dim=100, vocab_size=77,
                              head="mlm", sparse_pooling="sum", sparse_activation="log1p_relu",
                              mlm_activation="gelu_tanh", pooling="cls"),
}


