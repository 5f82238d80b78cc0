"""An engine bundle that was edited is refused, whoever loads it (attack: change ``n_heads``
12 → 16 in the header of all-MiniLM-L6-v2's bundle, which moves no tensor and so would still
load and give other vectors if only the shapes were checked).

Without the model's manifest the engine itself refuses it: the bundle's CRC-32 covers the whole
file, header included (runtime/include/edgembed.h). With the manifest at hand the bundle's
sha256 recorded there is checked on the bytes the engine loads, so an edit that also fixes the
CRC is caught too. A bundle of the previous format (1, whose checksum left the header out) is
refused with the command that regenerates it, and a model's own cached bundle of that format
is rewritten from the model.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from edgembed.errors import BundleError, ChecksumMismatch

wasmtime = pytest.importorskip("wasmtime", reason="pip install wasmtime")

NAME = "all-minilm-l6-v2"


@pytest.fixture()
def model_dir(fresh_home: Path, hf_model_dir: Path) -> Path:
    """A private home with the model pulled and its engine bundle written (no ONNX export)."""
    from edgembed.export import export_bundle
    from edgembed.sources import pull

    pull(NAME, from_dir=hf_model_dir)
    _, bundle = export_bundle(NAME)
    return bundle.parent


def _fix_crc(raw: bytes) -> bytes:
    """The bundle with its crc32 value recomputed (what a careful attacker would do)."""
    at = raw.index(b'"crc32":"') + 9
    zeroed = raw[:at] + b"00000000" + raw[at + 8 :]
    return raw[:at] + f"{zlib.crc32(zeroed):08x}".encode() + raw[at + 8 :]


def _backends() -> list[type]:
    from edgembed.backends.native import NativeBackend
    from edgembed.backends.wasm import WasmBackend

    return [NativeBackend, WasmBackend]


def test_an_edited_header_is_refused_without_the_manifest(model_dir: Path, tmp_path: Path) -> None:
    raw = (model_dir / f"{NAME}.int8.emb").read_bytes()
    edited = raw.replace(b'"n_heads":"12"', b'"n_heads":"16"', 1)
    assert edited != raw and len(edited) == len(raw)
    path = tmp_path / "edited.emb"
    path.write_bytes(edited)
    for backend in _backends():
        with pytest.raises(BundleError, match=r"corrupt or was altered.*embed bundle MODEL"):
            backend(path)
    # the same file with an intact header still loads: the refusal is the edit's
    (tmp_path / "intact.emb").write_bytes(raw)
    for backend in _backends():
        backend(tmp_path / "intact.emb").close()


def test_an_edit_with_a_fixed_crc_is_caught_by_the_manifest(model_dir: Path) -> None:
    from edgembed import Embedder

    bundle = model_dir / f"{NAME}.int8.emb"
    raw = bundle.read_bytes()
    fixed = _fix_crc(raw.replace(b'"n_heads":"12"', b'"n_heads":"16"', 1))
    for backend in _backends():  # the engine alone would run it: nothing else is wrong
        bundle.write_bytes(fixed)
        backend(bundle).close()
    for kind in ("native", "wasm"):
        with pytest.raises(ChecksumMismatch, match=r"altered or damaged.*bundle MODEL --force"):
            Embedder.load(NAME, backend=kind)
    bundle.write_bytes(raw)
    Embedder.load(NAME, backend="native").embed(["intact again"])


def test_a_version_1_bundle_is_refused_or_rewritten(model_dir: Path, tmp_path: Path) -> None:
    from edgembed import Embedder

    bundle = model_dir / f"{NAME}.int8.emb"
    raw = bundle.read_bytes()
    old = raw.replace(b'"edgembed_bundle":"2"', b'"edgembed_bundle":"1"', 1)
    (tmp_path / "old.emb").write_bytes(old)
    for backend in _backends():  # given by path: refused, with the way out
        with pytest.raises(BundleError, match=r"2 through 2; regenerate the bundle with `embed"):
            backend(tmp_path / "old.emb")
    # the model's own cache, as a version-1 export left it: rewritten on the next load
    bundle.write_bytes(old)
    manifest_path = model_dir / "edgembed.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest["bundles"]["int8"]["format_version"]
    manifest["bundles"]["int8"]["sha256"] = "0" * 64
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    vectors = Embedder.load(NAME, backend="native").embed(["a version-1 cache"])
    assert vectors.shape == (1, 384)
    assert bundle.read_bytes() == raw
    record = json.loads(manifest_path.read_text(encoding="utf-8"))["bundles"]["int8"]
    assert record["format_version"] == 2 and record["size"] == len(raw)


def test_the_attention_kind_is_recorded_and_kept(model_dir: Path) -> None:
    """``export_bundle(attention="int8")`` rewrites the cached bundle with int8 attention and
    records it; a later call without a kind (``Embedder.load``'s) keeps it; asking for fp32
    again gives back the default bundle, byte for byte."""
    from safetensors import safe_open

    from edgembed.export import export_bundle

    bundle = model_dir / f"{NAME}.int8.emb"
    fp32 = bundle.read_bytes()
    record, path = export_bundle(NAME, attention="int8")
    assert path == bundle and record["attention"] == "int8" and bundle.read_bytes() != fp32
    with safe_open(str(bundle), "np") as f:
        assert f.metadata()["attention"] == "int8"
    assert export_bundle(NAME)[0]["sha256"] == record["sha256"]
    record, _ = export_bundle(NAME, attention="fp32")
    assert record["attention"] == "fp32" and bundle.read_bytes() == fp32
