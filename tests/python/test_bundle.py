"""The bundle writer: layout, metadata, packing and the checks a reader relies on."""

from __future__ import annotations

import itertools
import json
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed.errors import BundleError, ChecksumMismatch, InvalidModelDir, UnsupportedArchitecture
from edgembed.export.bundle import (
    MAGIC_PREFIX,
    BundleConfig,
    check_bundle,
    pack_linear,
    read_bundle_header,
    relative_bucket_table,
    rotary_tables,
    write_bundle,
)
from edgembed.export.quantize import quantize_blocks_int8

TABLES = Path(__file__).resolve().parents[1] / "fixtures" / "reference" / "engine_tables.json"


def test_layout_is_aligned_safetensors(bundle: Path) -> None:
    raw = bundle.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    assert (8 + hlen) % 64 == 0
    assert raw[8:].startswith(MAGIC_PREFIX + b'2"')
    header = json.loads(raw[8 : 8 + hlen])
    meta = header.pop("__metadata__")
    assert all(isinstance(v, str) for v in meta.values())
    data = raw[8 + hlen :]
    # the checksum covers the whole file, its own 8 digits read as zeros
    at = raw.index(b'"crc32":"') + 9
    assert meta["crc32"] == f"{zlib.crc32(raw[:at] + b'00000000' + raw[at + 8:]):08x}"
    ends = sorted((t["data_offsets"][0], t["data_offsets"][1]) for t in header.values())
    assert ends[0][0] == 0 and ends[-1][1] == len(data)
    # back to back, as safetensors wants
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ends))
    for name, t in header.items():
        if not name.startswith("__pad."):
            assert t["data_offsets"][0] % 64 == 0, name

    from safetensors.numpy import load_file  # other tools read it as is

    tensors = load_file(str(bundle))
    assert tensors["layers.0.attention.qkv.q"].shape == (288, 96, 4, 4)
    assert tensors["embeddings.word.q"].dtype == np.int8


def test_metadata(hf_model_dir: Path, tmp_path: Path) -> None:
    info = write_bundle(hf_model_dir, tmp_path / "m.emb", max_length=128, name="mini")
    h = read_bundle_header(tmp_path / "m.emb")
    assert h.version == 2 and h.dim == 384 and h.max_length == 128
    m = h.metadata
    assert (m["name"], m["pooling"], m["normalize"], m["n_layers"], m["n_heads"]) == (
        "mini",
        "mean",
        "true",
        "6",
        "12",
    )
    # every architecture feature is spelled out: BERT's values
    assert {k: m[k] for k in ("family", "position", "position_offset", "position_pad_id",
                              "relative_buckets", "type_vocab_size", "norm", "norm_bias",
                              "attention_bias", "ffn_bias", "final_norm", "ffn", "activation",
                              "layer_attention", "local_window", "include_prompt", "n_dense",
                              "head")} == {
        "family": "bert", "position": "absolute", "position_offset": "0",
        "position_pad_id": "none", "relative_buckets": "0", "type_vocab_size": "2",
        "norm": "post", "norm_bias": "true", "attention_bias": "true", "ffn_bias": "true",
        "final_norm": "false",
        "ffn": "mlp", "activation": "gelu", "layer_attention": "gggggg", "local_window": "0",
        "include_prompt": "true", "n_dense": "0", "head": "none"}
    # tokenizer.json's strip_accents null resolves to the lowercase flag
    assert m["tokenizer.lowercase"] == m["tokenizer.strip_accents"] == "true"
    assert (
        m["tokenizer.cls_id"],
        m["tokenizer.sep_id"],
        m["tokenizer.unk_id"],
        m["tokenizer.pad_id"],
    ) == ("101", "102", "100", "0")
    raw = (tmp_path / "m.emb").read_bytes()
    import hashlib

    assert info["size"] == len(raw) and info["sha256"] == hashlib.sha256(raw).hexdigest()
    assert info["format_version"] == 2


def test_vocab_round_trip(hf_model_dir: Path, bundle: Path) -> None:
    from safetensors.numpy import load_file

    vocab = load_file(str(bundle))["tokenizer.vocab"].tobytes().decode("utf-8").split("\n")
    tj = json.loads((hf_model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert len(vocab) == len(tj) == 30522
    assert all(vocab[i] == tok for tok, i in tj.items())


def test_pack_linear_layout() -> None:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 64)).astype(np.float32)
    q, s, _ = pack_linear(w)
    ref_q, ref_s = quantize_blocks_int8(w)
    assert q.shape == (8, 16, 4, 4) and s.shape == (8, 2, 4)  # N padded to 32 with zero rows
    assert not q[2:].any() and not s[2:].any()
    for g in range(2):
        for j in range(16):
            for r in range(4):
                for c in range(4):
                    assert q[g, j, r, c] == ref_q[4 * g + r, 4 * j + c]
        for b in range(2):
            for r in range(4):
                assert s[g, b, r] == ref_s[4 * g + r, b]


def test_weights_match_the_checkpoint(hf_model_dir: Path, bundle: Path) -> None:
    from safetensors.numpy import load_file

    src = load_file(str(hf_model_dir / "model.safetensors"))
    b = load_file(str(bundle))
    wq = src["encoder.layer.3.attention.self.key.weight"]
    q, s = b["layers.3.attention.qkv.q"], b["layers.3.attention.qkv.scale"]
    unpacked = q.transpose(0, 2, 1, 3).reshape(1152, 384).astype(np.float32)
    scales = s.transpose(0, 2, 1).reshape(1152, 12)
    deq = (unpacked.reshape(1152, 12, 32) * scales[:, :, None]).reshape(1152, 384)
    key = deq[384:768]
    assert np.abs(key - wq).max() <= np.abs(wq).max() / 127 / 2 + 1e-6
    bias = src["encoder.layer.3.attention.self.value.bias"]
    assert np.array_equal(b["layers.3.attention.qkv.bias"][768:], bias)


def test_ragged_shapes_pad_with_zeros_and_keep_a_short_last_block() -> None:
    """K % 32 != 0: the last block of a row is short and its scale is the max over its real
    values / 127, exactly what zero-padding the block gives (docs/quantization.md)."""
    rng = np.random.default_rng(1)
    w = rng.normal(size=(45, 70)).astype(np.float32)
    w[3, 64:] = [0.5, -7.0, 0.25, 1.0, -1.0, 2.0]   # the short block of row 3: max 7
    q, s, b = pack_linear(w, np.arange(45, dtype=np.float32))
    assert q.shape == (16, 24, 4, 4) and s.shape == (16, 3, 4)
    assert b is not None and b.shape == (64,)
    unpacked = q.transpose(0, 2, 1, 3).reshape(64, 96)
    scales = s.transpose(0, 2, 1).reshape(64, 3)
    assert not unpacked[45:].any() and not unpacked[:, 70:].any() and not scales[45:].any()
    assert scales[3, 2] == np.float32(7.0) / np.float32(127)
    assert np.array_equal(b[:45], np.arange(45)) and not b[45:].any()
    deq = (unpacked[:45].reshape(45, 3, 32) * scales[:45, :, None]).reshape(45, 96)[:, :70]
    assert np.abs(deq - w).max() <= np.abs(w).max() / 127 / 2 + 1e-6
    rq, rs = quantize_blocks_int8(w)  # the word embeddings: rows unpadded, scales per block
    assert rq.shape == (45, 70) and rs.shape == (45, 3)
    assert np.array_equal(rq, unpacked[:45, :70]) and np.array_equal(rs, scales[:45])


def test_position_tables_match_transformers() -> None:
    """The writer computes MPNet's relative buckets and ModernBERT's rotary tables itself (the
    engine has no float log or cos); the fixture is transformers' own (make_engine_tables.py)."""
    ref = json.loads(TABLES.read_text(encoding="utf-8"))
    mb = ref["mpnet_buckets"]
    got = relative_bucket_table(mb["max_length"], mb["num_buckets"], mb["max_distance"])
    assert got.tolist() == mb["buckets"]
    rot = ref["rotary"]
    for theta, table in rot["tables"].items():
        cos, sin = rotary_tables(8192, rot["head_dim"], float(theta))
        for ours, theirs in ((cos, table["cos"]), (sin, table["sin"])):
            want = np.asarray(theirs, dtype=np.uint32).view(np.float32)
            ulps = np.abs(ours[rot["positions"]].view(np.int32).astype(np.int64)
                          - want.view(np.int32).astype(np.int64))
            assert ulps.max() <= 1, (theta, int(ulps.max()))  # torch's float32 cos: 1 ulp at most


def test_config_is_checked_before_writing() -> None:
    base = {"name": "m", "family": "bert", "dim": 48, "n_layers": 2, "n_heads": 4, "ffn_dim": 64,
            "vocab_size": 10, "max_length": 16, "max_positions": 16}
    BundleConfig(**base).check()  # type: ignore[arg-type]
    for change, match in (({"n_heads": 5}, "multiple of 5 heads"),
                          ({"pooling": "median"}, "pooling 'median'"),
                          ({"activation": "mish"}, "activation 'mish'"),
                          ({"layer_attention": "gx"}, "layer_attention"),
                          ({"layer_attention": "gl"}, "local_window"),
                          ({"position": "rotary", "n_heads": 16}, "even head size"),
                          ({"dense_activations": ("sigmoid",)}, "Dense activation"),
                          ({"position_offset": 2, "position_pad_id": 0, "max_positions": 20},
                           "padding_idx")):
        with pytest.raises(UnsupportedArchitecture, match=match):
            BundleConfig(**{**base, **change}).check()  # type: ignore[arg-type]
    with pytest.raises(InvalidModelDir, match="lower max_length"):
        BundleConfig(**{**base, "position_offset": 2}).check()  # type: ignore[arg-type]


def test_reader_refuses_other_versions(bundle: Path) -> None:
    raw = bytearray(bundle.read_bytes())
    at = 8 + len(MAGIC_PREFIX)
    for other in (b"1", b"3"):  # version 1 did not check its header
        raw[at : at + 1] = other
        with pytest.raises(BundleError, match=r"2 through 2.*embed bundle MODEL"):
            read_bundle_header(bytes(raw))
    with pytest.raises(BundleError, match="not an edgembed bundle"):
        read_bundle_header(b"\x08\0\0\0\0\0\0\0{}      ")


def test_writer_errors(hf_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidModelDir):
        write_bundle(tmp_path, tmp_path / "x.emb")
    d = tmp_path / "m"
    d.mkdir()
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(hf_model_dir / f, d / f)
    (d / "model.safetensors").symlink_to(hf_model_dir / "model.safetensors")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedArchitecture):
        write_bundle(d, tmp_path / "x.emb")
    cfg["model_type"] = "bert"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InvalidModelDir, match="max_length"):
        write_bundle(d, tmp_path / "x.emb", max_length=1000)
    info = write_bundle(d, tmp_path / "x.emb")  # no pooling config, no modules.json
    assert info["pooling"] == "mean" and info["normalize"] == "false"


def test_recorded_sha256_catches_an_edited_bundle(bundle: Path) -> None:
    raw = bundle.read_bytes()
    import hashlib

    digest = hashlib.sha256(raw).hexdigest()
    check_bundle(raw, sha256=digest)
    edited = raw.replace(b'"n_heads":"12"', b'"n_heads":"16"', 1)
    assert edited != raw
    with pytest.raises(ChecksumMismatch, match=r"altered or damaged.*embed bundle MODEL"):
        check_bundle(edited, sha256=digest, name=str(bundle))


@pytest.mark.parametrize(
    "change",
    [
        {"id": 1037, "content": "a", "special": False},  # an ordinary word made an added token
        {"id": 103, "content": "[MASK]", "special": True, "lstrip": True},  # matched differently
        {"id": 30522, "content": "<url>", "special": True},  # beyond the embedding's rows
    ],
)
def test_added_tokens_beyond_bert_s_own(
    hf_model_dir: Path, tmp_path: Path, change: dict[str, Any]
) -> None:
    """Added tokens other than BERT's standard ones take the engine's general pipeline (not its
    streaming WordPiece) and give the ids of Hugging Face tokenizers; an id the embedding has no
    row for is refused."""
    d = tmp_path / "m"
    d.mkdir()
    shutil.copy(hf_model_dir / "config.json", d / "config.json")
    (d / "model.safetensors").symlink_to(hf_model_dir / "model.safetensors")
    tok = json.loads((hf_model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    base = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
    added = [a for a in tok["added_tokens"] if a["id"] != change["id"]]
    tok["added_tokens"] = [*added, {**base, **change}]
    (d / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    if change["id"] >= 30522:
        with pytest.raises(InvalidModelDir, match="ids up to 30522"):
            write_bundle(d, tmp_path / "x.emb")
        return
    info = write_bundle(d, tmp_path / "x.emb")
    assert info["tokenizer"] == "wordpiece" and "tokenizer.normalizers" in info
    from tokenizers import Tokenizer

    from edgembed.backends.native import NativeBackend, native_available

    if not native_available()[0]:
        pytest.skip("the native engine is not built (./build.sh native)")
    hf = Tokenizer.from_file(str(d / "tokenizer.json"))
    hf.no_padding()
    hf.enable_truncation(256)
    texts = ["a cat and a dog", "x [MASK] y", "x[MASK]y  [MASK]", "banana a-a", "", "Ünï 日本"]
    want = [e.ids for e in hf.encode_batch(texts)]
    offsets = [[(i, a, b) for i, (a, b) in zip(e.ids, e.offsets, strict=True)]
               for e in hf.encode_batch(texts)]
    engine = NativeBackend(tmp_path / "x.emb")
    assert engine.tokenize(texts) == want
    assert engine.tokenize_offsets(texts) == offsets
    engine.close()
    pytest.importorskip("wasmtime", reason="pip install wasmtime")
    if not (Path(__file__).resolve().parents[2] / "build" / "wasm" / "edgembed.wasm").is_file():
        pytest.skip("build/wasm not built (./build.sh wasm)")
    from edgembed.backends.wasm import WasmBackend

    wasm = WasmBackend(tmp_path / "x.emb", variant="simd128")
    assert wasm.tokenize(texts) == want and wasm.tokenize_offsets(texts) == offsets

