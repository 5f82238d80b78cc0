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


def _check_added_tokens(
    tj: Path, added: list[dict[str, Any]], vocab_map: dict[str, int], flags: dict[str, int]
) -> None:
    """The engine matches exactly these added tokens in raw text: the PAD, UNK, CLS and SEP of
    the flags and ``[MASK]``, each special, matched as written (no normalization, stripping or
    word boundary). Any other added token would be split like ordinary text and give other ids
    than Hugging Face ``tokenizers``, so such a tokenizer is refused rather than mis-tokenized."""
    known = {flags["pad_id"], flags["unk_id"], flags["cls_id"], flags["sep_id"]}
    if "[MASK]" in vocab_map:
        known.add(vocab_map["[MASK]"])
    for a in added:
        content, ident = a.get("content"), a.get("id")
        plain = a.get("special", False) and not any(
            a.get(k, False) for k in ("normalized", "lstrip", "rstrip", "single_word"))
        if ident not in known or vocab_map.get(str(content)) != ident or not plain:
            raise UnsupportedArchitecture(
                f"{tj}: added token {content!r} (id {ident}) is not one the engine's tokenizer "
                "handles (only [PAD], [UNK], [CLS], [SEP] and [MASK], special and matched as "
                "written); this model cannot be bundled: run it with backend='onnx'"
            )


def _read_tokenizer(hf_dir: Path) -> tuple[list[str], dict[str, int]]:
    """Vocabulary (by id) and the engine tokenizer's flags, from tokenizer.json or vocab.txt."""
    tj = hf_dir / "tokenizer.json"
    flags: dict[str, int] = {}
    if tj.is_file():
        t = json.loads(tj.read_text(encoding="utf-8"))
        model = t.get("model") or {}
        if model.get("type") != "WordPiece":
            raise UnsupportedArchitecture(
                f"{tj}: tokenizer model {model.get('type')!r} (WordPiece only)"
            )
        if model.get("continuing_subword_prefix", "##") != "##":
            raise UnsupportedArchitecture(f"{tj}: continuing_subword_prefix must be '##'")
        norm = t.get("normalizer") or {}
        if norm.get("type") != "BertNormalizer":
            raise UnsupportedArchitecture(
                f"{tj}: normalizer {norm.get('type')!r} (BertNormalizer only)"
            )
        pre = t.get("pre_tokenizer") or {}
        if pre.get("type") != "BertPreTokenizer":
            raise UnsupportedArchitecture(
                f"{tj}: pre_tokenizer {pre.get('type')!r} (BertPreTokenizer only)"
            )
        vocab_map: dict[str, int] = model["vocab"]
        lowercase = bool(norm.get("lowercase", True))
        strip = norm.get("strip_accents")
        flags["lowercase"] = int(lowercase)
        flags["strip_accents"] = int(lowercase if strip is None else bool(strip))
        flags["handle_chinese_chars"] = int(bool(norm.get("handle_chinese_chars", True)))
        flags["clean_text"] = int(bool(norm.get("clean_text", True)))
        flags["max_input_chars_per_word"] = int(model.get("max_input_chars_per_word", 100))
        unk_token = model.get("unk_token", "[UNK]")
        post = t.get("post_processor") or {}
        specials = post.get("special_tokens") or {}
        cls_ids = specials.get("[CLS]", {}).get("ids") or [vocab_map.get("[CLS]", -1)]
        sep_ids = specials.get("[SEP]", {}).get("ids") or [vocab_map.get("[SEP]", -1)]
        pad = t.get("padding") or {}
        flags["pad_id"] = int(pad.get("pad_id", vocab_map.get("[PAD]", 0)))
        flags["cls_id"], flags["sep_id"] = int(cls_ids[0]), int(sep_ids[0])
        flags["unk_id"] = int(vocab_map.get(unk_token, -1))
        _check_added_tokens(tj, t.get("added_tokens") or [], vocab_map, flags)
        n = len(vocab_map)
        vocab: list[str | None] = [None] * n
        for tok, i in vocab_map.items():
            if not 0 <= i < n or vocab[i] is not None:
                raise InvalidModelDir(f"{tj}: vocabulary ids are not 0..{n - 1} without gaps")
            vocab[i] = tok
        words = [v for v in vocab if v is not None]
    else:
        vt = hf_dir / "vocab.txt"
        if not vt.is_file():
            raise InvalidModelDir(f"{hf_dir}: neither tokenizer.json nor vocab.txt")
        words = vt.read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words.pop()
        lower = True
        tc = hf_dir / "tokenizer_config.json"
        if tc.is_file():
            lower = bool(json.loads(tc.read_text()).get("do_lower_case", True))
        index = {w: i for i, w in enumerate(words)}
        flags.update(
            lowercase=int(lower),
            strip_accents=int(lower),
            handle_chinese_chars=1,
            clean_text=1,
            max_input_chars_per_word=100,
            pad_id=index.get("[PAD]", 0),
            cls_id=index.get("[CLS]", -1),
            sep_id=index.get("[SEP]", -1),
            unk_id=index.get("[UNK]", -1),
        )
    for key in ("unk_id", "cls_id", "sep_id", "pad_id"):
        if not 0 <= flags[key] < len(words):
            raise InvalidModelDir(f"{hf_dir}: the tokenizer has no {key[:-3].upper()} token")
    for w in words:
        if "\n" in w:
            raise UnsupportedArchitecture(f"{hf_dir}: a vocabulary token contains a newline")
    return words, flags


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
    words, tok_flags = _read_tokenizer(hf_dir)
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
    if len(words) != v:
        raise InvalidModelDir(f"{hf_dir}: vocabulary has {len(words)} tokens, config says {v}")
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
        ("tokenizer.vocab", np.frombuffer("\n".join(words).encode("utf-8"), dtype=np.uint8)),
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
        "tokenizer": "wordpiece",
        "tokenizer.lowercase": yes(tok_flags["lowercase"]),
        "tokenizer.strip_accents": yes(tok_flags["strip_accents"]),
        "tokenizer.handle_chinese_chars": yes(tok_flags["handle_chinese_chars"]),
        "tokenizer.clean_text": yes(tok_flags["clean_text"]),
        "tokenizer.unk_id": str(tok_flags["unk_id"]),
        "tokenizer.cls_id": str(tok_flags["cls_id"]),
        "tokenizer.sep_id": str(tok_flags["sep_id"]),
        "tokenizer.pad_id": str(tok_flags["pad_id"]),
        "tokenizer.max_input_chars_per_word": str(tok_flags["max_input_chars_per_word"]),
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
