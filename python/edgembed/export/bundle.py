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
from ..model_dir import (
    Activation,
    Family,
    ModelDescription,
    PoolingMode,
    Task,
    load_weights,
    read_model_dir,
)
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


def _engine_description(hf_dir: Path) -> ModelDescription:
    """The model's description, refused unless the engine implements all of it."""
    desc = read_model_dir(hf_dir)
    enc = desc.encoder
    where = f"{hf_dir}: the engine bundle"
    if enc.family is not Family.BERT:
        raise UnsupportedArchitecture(
            f"{where} supports BERT encoders, not {enc.family.value}; run this model with "
            "backend='onnx'")
    if enc.activation is not Activation.GELU:
        raise UnsupportedArchitecture(
            f"{where} supports the exact GELU, not {enc.activation.value}; run this model with "
            "backend='onnx'")
    if desc.task is not Task.EMBEDDING or desc.pooling is None:
        raise UnsupportedArchitecture(f"{where} supports embedding models, not {desc.task.value}")
    modes = desc.pooling.modes
    if modes not in ((PoolingMode.MEAN,), (PoolingMode.CLS,)) or not desc.pooling.include_prompt:
        raise UnsupportedArchitecture(
            f"{where} supports mean or CLS pooling over every token, not "
            f"{'+'.join(m.value for m in modes)}"
            f"{'' if desc.pooling.include_prompt else ' without the prompt'}; run this model "
            "with backend='onnx'")
    if desc.dense:
        raise UnsupportedArchitecture(
            f"{where} does not run Dense modules yet; run this model with backend='onnx'")
    return desc


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
    tok_meta, tok_tensors, n_tokens = tokenizer_tables(hf_dir)
    desc = _engine_description(hf_dir)
    enc = desc.encoder
    pooling = desc.pooling.mode if desc.pooling else PoolingMode.MEAN
    w = load_weights(desc)

    c, n_layers, n_heads = enc.hidden_size, enc.num_layers, enc.num_heads
    f, v = enc.intermediate_size, enc.vocab_size
    p, tv = enc.position_table_rows, enc.type_vocab_size
    if c % n_heads or c % BLOCK or f % BLOCK:
        raise UnsupportedArchitecture(
            f"hidden size {c} / FFN size {f} must be multiples of {BLOCK}"
        )
    # a streaming WordPiece vocabulary is the embedding's rows; the others may be fewer (padded)
    streaming = tok_meta["tokenizer"] == "wordpiece" and "tokenizer.normalizers" not in tok_meta
    if n_tokens > v or (streaming and n_tokens != v):
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
        pre = f"layers.{layer}."
        bqkv = np.concatenate([w[pre + f"attention.{x}.bias"] for x in "qkv"])
        linears += [
            (pre + "attention.qkv",
             np.concatenate([w[pre + f"attention.{x}.weight"] for x in "qkv"]), bqkv),
            (pre + "attention.out", w[pre + "attention.o.weight"], w[pre + "attention.o.bias"]),
            (pre + "ffn.up", w[pre + "ffn.up.weight"], w[pre + "ffn.up.bias"]),
            (pre + "ffn.down", w[pre + "ffn.down.weight"], w[pre + "ffn.down.bias"]),
        ]
        tensors += [(pre + n, w[pre + n]) for n in (
            "attention.norm.weight", "attention.norm.bias", "ffn.norm.weight", "ffn.norm.bias")]
    for lname, lw, lb in linears:
        q, s = pack_linear(lw)
        tensors += [(lname + ".q", q), (lname + ".scale", s), (lname + ".bias", lb)]

    word_q, word_s = quantize_blocks_int8(w["embeddings.word"])
    tensors = [
        ("embeddings.position", w["embeddings.position"]),
        ("embeddings.token_type", w["embeddings.token_type"]),
        ("embeddings.norm.weight", w["embeddings.norm.weight"]),
        ("embeddings.norm.bias", w["embeddings.norm.bias"]),
        ("embeddings.word.q", word_q),
        ("embeddings.word.scale", word_s),
        *tensors,
        *tok_tensors,
    ]

    dtypes = {
        np.dtype(np.float32): "F32", np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8",
        np.dtype(np.int32): "I32", np.dtype(np.float64): "F64",
    }
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
        "layer_norm_eps": repr(enc.layer_norm_eps),
        "hidden_act": "gelu",
        "max_length": str(max_length),
        "pooling": pooling.value,
        "normalize": yes(desc.normalize),
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
