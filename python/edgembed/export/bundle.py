"""The engine bundle (.emb): one file with everything the C engine needs.

The byte layout is documented where it is read, at the top of ``runtime/include/edgembed.h``
(also ``docs/bundle-format.md``). In short: a valid safetensors file whose JSON header starts
with the magic ``{"__metadata__":{"edgembed_bundle":"1"``, holding the model configuration and
tokenizer flags as metadata strings, the WordPiece vocabulary as a byte tensor, and int8 weights
already packed in the kernels' "n4k4" layout, every tensor 64-byte aligned, the data region
covered by a CRC-32.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import BundleError, InvalidModelDir, UnsupportedArchitecture
from .quantize import BLOCK, quantize_blocks_int8
from .tokenizer_tables import tokenizer_tables

__all__ = [
    "BUNDLE_VERSION",
    "BUNDLE_VERSION_MAX",
    "BUNDLE_VERSION_MIN",
    "BundleHeader",
    "pack_linear",
    "read_bundle_header",
    "write_bundle",
]

BUNDLE_VERSION = 1
BUNDLE_VERSION_MIN = 1
BUNDLE_VERSION_MAX = 1
ALIGN = 64
MAGIC_PREFIX = b'{"__metadata__":{"edgembed_bundle":"'
_NAME_RE = re.compile(r"^[\x20-\x7e]{1,128}$")


def pack_linear(
    w: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Quantize a linear weight W (N, K) and pack it in the engine's "n4k4" layout.

    Returns ``(q, scale)`` with ``q`` int8 of shape (N/4, K/4, 4, 4) where
    ``q[g, j, r, c] = Q[4g + r, 4j + c]`` and ``scale`` float32 (N/4, K/32, 4) where
    ``scale[g, b, r] = S[4g + r, b]``; ``Q, S = quantize_blocks_int8(W)``.
    """
    n, k = w.shape
    if n % 4 or k % BLOCK:
        raise UnsupportedArchitecture(
            f"a linear layer of shape ({n}, {k}) needs N % 4 == 0 and K % {BLOCK} == 0"
        )
    q, s = quantize_blocks_int8(w)
    qp = q.reshape(n // 4, 4, k // 4, 4).transpose(0, 2, 1, 3)
    sp = s.reshape(n // 4, 4, k // BLOCK).transpose(0, 2, 1)
    return np.ascontiguousarray(qp), np.ascontiguousarray(sp)


@dataclass(frozen=True)
class BundleHeader:
    """The parsed header of a bundle: format version, metadata strings and tensor table."""

    version: int
    metadata: dict[str, str]
    tensors: dict[str, dict[str, Any]]
    data_offset: int

    @property
    def dim(self) -> int:
        return int(self.metadata["dim"])

    @property
    def max_length(self) -> int:
        return int(self.metadata["max_length"])


def read_bundle_header(source: Path | bytes | bytearray | memoryview) -> BundleHeader:
    """Read and check the header of a bundle file (or of its bytes)."""
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
            f"range {BUNDLE_VERSION_MIN} through {BUNDLE_VERSION_MAX}; regenerate it with "
            "`embed bundle MODEL`"
        )
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BundleError(f"corrupt bundle header: {e}") from e
    meta = header.pop("__metadata__")
    return BundleHeader(version, meta, header, 8 + hlen)


def _read_config(hf_dir: Path) -> dict[str, Any]:
    path = hf_dir / "config.json"
    if not path.is_file():
        raise InvalidModelDir(f"{hf_dir}: config.json is missing")
    cfg: dict[str, Any] = json.loads(path.read_text())
    mt = cfg.get("model_type")
    if mt != "bert":
        raise UnsupportedArchitecture(f"{hf_dir}: model_type {mt!r} is not supported (bert only)")
    if cfg.get("hidden_act", "gelu") != "gelu":
        raise UnsupportedArchitecture(
            f"{hf_dir}: hidden_act {cfg.get('hidden_act')!r} is not supported (gelu only)"
        )
    if cfg.get("position_embedding_type", "absolute") != "absolute":
        raise UnsupportedArchitecture(f"{hf_dir}: only absolute position embeddings are supported")
    return cfg


def _read_pooling(hf_dir: Path) -> tuple[str, bool]:
    pooling = "mean"
    pool_cfg = hf_dir / "1_Pooling" / "config.json"
    if pool_cfg.is_file():
        p = json.loads(pool_cfg.read_text())
        if p.get("pooling_mode_cls_token"):
            pooling = "cls"
        elif not p.get("pooling_mode_mean_tokens", True):
            raise UnsupportedArchitecture(f"{pool_cfg}: only mean or CLS pooling is supported")
    normalize = False
    modules = hf_dir / "modules.json"
    if modules.is_file():
        normalize = any(
            str(m.get("type", "")).endswith("Normalize") for m in json.loads(modules.read_text())
        )
    return pooling, normalize


def _load_weights(hf_dir: Path) -> dict[str, npt.NDArray[Any]]:
    path = hf_dir / "model.safetensors"
    if not path.is_file():
        raise InvalidModelDir(f"{hf_dir}: model.safetensors is missing")
    from safetensors.numpy import load_file

    raw = load_file(str(path))
    # Some checkpoints prefix every name with "bert."; the engine needs the bare names.
    return {k[5:] if k.startswith("bert.") else k: v for k, v in raw.items()}


def _f32(
    weights: dict[str, npt.NDArray[Any]], name: str, shape: tuple[int, ...]
) -> npt.NDArray[np.float32]:
    if name not in weights:
        raise InvalidModelDir(f"model.safetensors lacks the tensor {name}")
    a = np.ascontiguousarray(weights[name], dtype=np.float32)
    if a.shape != shape:
        raise InvalidModelDir(f"tensor {name} has shape {a.shape}, expected {shape}")
    return a


def write_bundle(
    hf_dir: Path,
    out: Path,
    *,
    max_length: int = 256,
    name: str | None = None,
) -> dict[str, Any]:
    """Write the engine bundle of a sentence-transformers (BERT) directory to ``out``.

    Reads config.json, model.safetensors, tokenizer.json (or vocab.txt), 1_Pooling/config.json,
    sentence_bert_config.json and modules.json. Returns the bundle's metadata strings plus
    ``path``, ``size`` (bytes) and ``sha256`` (of the whole file), for the model manifest.
    """
    hf_dir, out = Path(hf_dir), Path(out)
    cfg = _read_config(hf_dir)
    pooling, normalize = _read_pooling(hf_dir)
    tok_meta, tok_tensors, n_tokens = tokenizer_tables(hf_dir)
    w = _load_weights(hf_dir)

    c, n_layers, n_heads = (
        int(cfg["hidden_size"]),
        int(cfg["num_hidden_layers"]),
        int(cfg["num_attention_heads"]),
    )
    f, v = int(cfg["intermediate_size"]), int(cfg["vocab_size"])
    p, tv = int(cfg["max_position_embeddings"]), int(cfg.get("type_vocab_size", 2))
    if c % n_heads or c % BLOCK or f % BLOCK:
        raise UnsupportedArchitecture(
            f"hidden size {c} / FFN size {f} must be multiples of {BLOCK}"
        )
    if n_tokens != v:
        raise InvalidModelDir(f"{hf_dir}: vocabulary has {n_tokens} tokens, config says {v}")
    if not 2 <= max_length <= p:
        raise InvalidModelDir(
            f"max_length {max_length} must be within 2..{p} (max_position_embeddings)"
        )
    if name is None:
        name = hf_dir.resolve().name
    if not _NAME_RE.match(name) or '"' in name or "\\" in name:
        raise ValueError(
            f"bundle name {name!r} must be printable ASCII without quotes or backslashes"
        )

    tensors: list[tuple[str, npt.NDArray[Any]]] = []
    linears: list[tuple[str, npt.NDArray[np.float32], npt.NDArray[np.float32]]] = []
    for layer in range(n_layers):
        pre = f"encoder.layer.{layer}."
        wq = _f32(w, pre + "attention.self.query.weight", (c, c))
        wk = _f32(w, pre + "attention.self.key.weight", (c, c))
        wv = _f32(w, pre + "attention.self.value.weight", (c, c))
        bqkv = np.concatenate(
            [_f32(w, pre + f"attention.self.{x}.bias", (c,)) for x in ("query", "key", "value")]
        )
        dst = f"layers.{layer}."
        linears += [
            (dst + "attention.qkv", np.concatenate([wq, wk, wv]), bqkv),
            (
                dst + "attention.out",
                _f32(w, pre + "attention.output.dense.weight", (c, c)),
                _f32(w, pre + "attention.output.dense.bias", (c,)),
            ),
            (
                dst + "ffn.up",
                _f32(w, pre + "intermediate.dense.weight", (f, c)),
                _f32(w, pre + "intermediate.dense.bias", (f,)),
            ),
            (
                dst + "ffn.down",
                _f32(w, pre + "output.dense.weight", (c, f)),
                _f32(w, pre + "output.dense.bias", (c,)),
            ),
        ]
        tensors += [
            (
                dst + "attention.norm.weight",
                _f32(w, pre + "attention.output.LayerNorm.weight", (c,)),
            ),
            (dst + "attention.norm.bias", _f32(w, pre + "attention.output.LayerNorm.bias", (c,))),
            (dst + "ffn.norm.weight", _f32(w, pre + "output.LayerNorm.weight", (c,))),
            (dst + "ffn.norm.bias", _f32(w, pre + "output.LayerNorm.bias", (c,))),
        ]
    for lname, lw, lb in linears:
        q, s = pack_linear(lw)
        tensors += [(lname + ".q", q), (lname + ".scale", s), (lname + ".bias", lb)]

    word_q, word_s = quantize_blocks_int8(_f32(w, "embeddings.word_embeddings.weight", (v, c)))
    tensors = [
        ("embeddings.position", _f32(w, "embeddings.position_embeddings.weight", (p, c))),
        ("embeddings.token_type", _f32(w, "embeddings.token_type_embeddings.weight", (tv, c))),
        ("embeddings.norm.weight", _f32(w, "embeddings.LayerNorm.weight", (c,))),
        ("embeddings.norm.bias", _f32(w, "embeddings.LayerNorm.bias", (c,))),
        ("embeddings.word.q", word_q),
        ("embeddings.word.scale", word_s),
        *tensors,
        *tok_tensors,
    ]

    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8"}
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

    def yes(b: int | bool) -> str:
        return "true" if b else "false"

    meta: dict[str, str] = {
        "edgembed_bundle": str(BUNDLE_VERSION),
        "name": name,
        "arch": "bert",
        "dim": str(c),
        "n_layers": str(n_layers),
        "n_heads": str(n_heads),
        "ffn_dim": str(f),
        "vocab_size": str(v),
        "max_positions": str(p),
        "type_vocab_size": str(tv),
        "layer_norm_eps": repr(float(cfg.get("layer_norm_eps", 1e-12))),
        "hidden_act": "gelu",
        "max_length": str(max_length),
        "pooling": pooling,
        "normalize": yes(normalize),
        "quantization": "int8-block32",
        "weight_layout": "n4k4",
        **tok_meta,
        "data_crc32": f"{zlib.crc32(data_region) & 0xFFFFFFFF:08x}",
    }
    header = json.dumps({"__metadata__": meta, **entries}, separators=(",", ":")).encode("ascii")
    assert header.startswith(MAGIC_PREFIX)
    header += b" " * (-(8 + len(header)) % ALIGN)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        fh.write(data_region)
    tmp.replace(out)
    blob = out.read_bytes()
    return {
        **meta,
        "path": str(out),
        "size": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
        "format_version": BUNDLE_VERSION,
    }
