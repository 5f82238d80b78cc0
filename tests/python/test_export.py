"""The torch-free export against the sentence-transformers reference, and broken model files.

The fp32 graph must reproduce sentence-transformers (cosine >= 0.99999 on every text, alone and
batched); the int8 graph must stay close to fp32 and give a text the same vector whatever batch
it is in. Damaged files must fail with an EdgembedError that names the file and the fix.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import link_model
from edgembed import (
    ChecksumMismatch,
    InvalidModelDir,
    ModelError,
    UnsupportedArchitecture,
    catalog,
)
from edgembed.backends.onnx import OnnxBackend
from edgembed.cli import main
from edgembed.embedder import Embedder
from edgembed.export import export_model
from edgembed.export.validate import embed_alone, embed_batched
from edgembed.manifest import Manifest
from edgembed.sources import pull, sha256_file

CATALOG = Path(__file__).resolve().parents[2] / "models" / "catalog"


@pytest.fixture(scope="module")
def ids(reference: dict[str, Any]) -> list[list[int]]:
    return [list(map(int, x)) for x in reference["token_ids"]]


@pytest.fixture(scope="module")
def fp32_alone(exported_model_dir: Path, ids: list[list[int]]) -> np.ndarray:
    return embed_alone(OnnxBackend(exported_model_dir / "model.fp32.onnx"), ids)


@pytest.fixture(scope="module")
def int8_backend(exported_model_dir: Path) -> OnnxBackend:
    return OnnxBackend(exported_model_dir / "model.int8.onnx")


@pytest.fixture(scope="module")
def int8_alone(int8_backend: OnnxBackend, ids: list[list[int]]) -> np.ndarray:
    return embed_alone(int8_backend, ids)


def normalized(v: np.ndarray) -> np.ndarray:
    return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True))


# --- fp32 parity and int8 quality ---


def test_fp32_matches_reference_alone(fp32_alone: np.ndarray, reference: dict[str, Any]) -> None:
    ref = np.asarray(reference["embeddings"], dtype=np.float32)
    cos = np.sum(fp32_alone * ref, axis=1)
    assert cos.min() >= 0.99999, reference["texts"][int(cos.argmin())]


def test_fp32_matches_reference_batched(exported_model_dir: Path, ids: list[list[int]],
                                        reference: dict[str, Any]) -> None:
    ref = np.asarray(reference["embeddings"], dtype=np.float32)
    batched = embed_batched(OnnxBackend(exported_model_dir / "model.fp32.onnx"), ids, batch=32)
    cos = np.sum(batched * ref, axis=1)
    assert cos.min() >= 0.99999, reference["texts"][int(cos.argmin())]


def test_int8_close_to_fp32(int8_alone: np.ndarray, fp32_alone: np.ndarray) -> None:
    cos = np.sum(int8_alone * fp32_alone, axis=1)
    assert cos.min() >= 0.995 and cos.mean() >= 0.999


def test_int8_alone_vs_sorted_batches(int8_backend: OnnxBackend, int8_alone: np.ndarray,
                                      ids: list[list[int]]) -> None:
    batched = embed_batched(int8_backend, ids, batch=16)
    assert np.sum(batched * int8_alone, axis=1).min() >= 0.99999


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_int8_batch_invariance_property(data: st.DataObject, int8_backend: OnnxBackend,
                                        int8_alone: np.ndarray, ids: list[list[int]]) -> None:
    """Any mix of texts, in any order, with repeats: each row equals the text embedded alone."""
    picks = data.draw(st.lists(st.integers(0, len(ids) - 1), min_size=1, max_size=12))
    out = normalized(int8_backend.encode([ids[i] for i in picks]))
    assert np.sum(out * int8_alone[picks], axis=1).min() >= 0.99999


# --- the manifest ---


def test_manifest_contents(exported_model_dir: Path) -> None:
    m = Manifest.load(exported_model_dir)
    spec = catalog.get_spec("all-minilm-l6-v2")
    assert (m.name, m.dim, m.max_length, m.pooling, m.normalize) == (
        "all-minilm-l6-v2", 384, 256, "mean", True)
    assert (m.query_prefix, m.document_prefix, m.license) == ("", "", "Apache-2.0")
    assert m.default_variant == "int8"
    assert set(m.variants) == {"fp32", "int8"}
    for name, entry in m.variants.items():
        f = exported_model_dir / entry.file
        assert entry.file == f"model.{name}.onnx"
        assert entry.size == f.stat().st_size and entry.sha256 == sha256_file(f)
        assert entry.quality is not None and entry.quality.n_texts >= 200
        assert entry.quality.alone_vs_batch_min_cosine >= 0.99999
    fp32_q, int8_q = m.variants["fp32"].quality, m.variants["int8"].quality
    assert fp32_q is not None and int8_q is not None
    assert fp32_q.min_cosine >= 0.99999
    assert int8_q.min_cosine >= 0.995 and int8_q.mean_cosine >= 0.999
    assert m.variants["int8"].size < m.variants["fp32"].size / 3
    for rel, digest in spec.files.items():
        assert m.source_files[rel] == digest
    # the conftest pulled from a local directory, then exported in a second call
    assert m.source.startswith("local directory "), m.source


# --- broken files ---


@pytest.fixture()
def sourceless_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A catalog entry like all-minilm-l6-v2 with no source to fetch again from."""
    d = tmp_path / "catalog"
    shutil.copytree(CATALOG, d)
    entry = json.loads((CATALOG / "all-minilm-l6-v2.json").read_text(encoding="utf-8"))
    entry.update(name="minilm-nosource", sources=[])
    (d / "minilm-nosource.json").write_text(json.dumps(entry), encoding="utf-8")
    monkeypatch.setattr("edgembed.catalog._catalog_dir", lambda: d)
    catalog.catalog.cache_clear()
    yield "minilm-nosource"
    catalog.catalog.cache_clear()


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.unlink()  # break a hard link before writing
    path.write_bytes(bytes(data))


def test_corrupted_int8_onnx(exported_model_dir: Path, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "all-minilm-l6-v2"
    link_model(exported_model_dir, copy)
    flip_byte(copy / "model.int8.onnx", 1_000_000)
    with pytest.raises(ChecksumMismatch) as err:
        Embedder.load(copy, variant="int8", backend="onnx")
    message = str(err.value)
    assert str(copy / "model.int8.onnx") in message
    assert "embed export --force all-minilm-l6-v2" in message
    assert main(["info", str(copy)]) == 0  # the manifest itself is fine
    capsys.readouterr()
    assert main(["-m", str(copy), "--backend", "onnx", "hello"]) == 1
    err_text = capsys.readouterr().err
    assert err_text.startswith("ChecksumMismatch: ") and "Traceback" not in err_text


def test_altered_safetensors_in_the_cache(fresh_home: Path, hf_model_dir: Path,
                                          sourceless_catalog: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    pulled = pull(sourceless_catalog, from_dir=hf_model_dir)
    flip_byte(pulled.source_dir / "model.safetensors", 5_000_000)
    with pytest.raises(ChecksumMismatch) as err:
        export_model(sourceless_catalog, variants="fp32")
    message = str(err.value)
    assert str(pulled.source_dir / "model.safetensors") in message
    assert f"embed pull --force {sourceless_catalog}" in message
    assert main(["export", sourceless_catalog, "--variants", "fp32"]) == 1
    assert capsys.readouterr().err.startswith(
        f"ChecksumMismatch: {pulled.source_dir / 'model.safetensors'} is damaged or altered")


def test_truncated_safetensors(fresh_home: Path, hf_model_dir: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    local = link_model(hf_model_dir, tmp_path / "cut-model", skip=("model.safetensors",))
    with (hf_model_dir / "model.safetensors").open("rb") as f:
        (local / "model.safetensors").write_bytes(f.read(1 << 20))
    with pytest.raises(InvalidModelDir) as err:
        export_model(str(local), variants="fp32")
    message = str(err.value)
    assert "model.safetensors is not a readable safetensors file" in message
    assert "truncated" in message and "embed pull --force cut-model" in message
    assert main(["export", str(local)]) == 1
    assert capsys.readouterr().err.startswith("InvalidModelDir: ")


def test_missing_weights_in_the_cache(fresh_home: Path, hf_model_dir: Path,
                                      sourceless_catalog: str) -> None:
    pulled = pull(sourceless_catalog, from_dir=hf_model_dir)
    (pulled.source_dir / "model.safetensors").unlink()
    with pytest.raises(InvalidModelDir) as err:
        pull(sourceless_catalog)
    assert "model.safetensors is missing" in str(err.value)
    assert f"embed pull --force {sourceless_catalog}" in str(err.value)


def test_not_a_model(fresh_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "holiday-photos"
    d.mkdir()
    (d / "config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(InvalidModelDir, match=r"not a model directory: missing model\.safetensors"):
        Embedder.load(d)
    assert main(["pull", str(d)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"InvalidModelDir: {d} is not a model directory")
    assert "Traceback" not in err


def test_unsupported_architecture(fresh_home: Path, hf_model_dir: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    local = link_model(hf_model_dir, tmp_path / "gpt", skip=("config.json",))
    config = json.loads((hf_model_dir / "config.json").read_text(encoding="utf-8"))
    config.update(architectures=["GPT2LMHeadModel"], model_type="gpt2")
    (local / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(UnsupportedArchitecture) as err:
        export_model(str(local))
    message = str(err.value)
    assert str(local / "config.json") in message and "GPT2LMHeadModel" in message
    assert "supported: bert, distilbert, mpnet, roberta, xlm-roberta" in message
    assert isinstance(err.value, ModelError)
    assert main(["export", str(local)]) == 1
    assert capsys.readouterr().err.startswith("UnsupportedArchitecture: ")
