"""Shared fixtures: the real all-MiniLM-L6-v2 files, pulled once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def hf_model_dir() -> Path:
    """The Hugging Face directory of all-minilm-l6-v2 (config.json, model.safetensors, …)."""
    override = os.environ.get("EDGEMBED_TEST_HF_DIR")
    if override:
        return Path(override)
    from edgembed.sources import pull

    return pull("all-minilm-l6-v2").source_dir
