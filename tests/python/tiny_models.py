"""The tiny random-weight models of ``tests/fixtures/models/`` and their reference vectors.

The models are made by ``models/tiny/make_tiny_models.py`` with transformers and saved by
sentence-transformers; ``models/tiny/make_tiny_references.py`` wrote what sentence-transformers
computes for them into ``tests/fixtures/reference/tiny/<name>.json`` (see
``tests/fixtures/models/README.md``). Tests of any part of edgembed can use them.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODELS_DIR = FIXTURES / "models"
REFERENCE_DIR = FIXTURES / "reference" / "tiny"


def names() -> list[str]:
    """Every tiny model, by name."""
    return sorted(p.name for p in MODELS_DIR.iterdir() if (p / "config.json").is_file())


def model_dir(name: str) -> Path:
    return MODELS_DIR / name


@lru_cache(maxsize=1)
def texts() -> list[str]:
    """The texts the references were computed for: the corpus, then the long texts."""
    corpus = json.loads((FIXTURES / "reference" / "corpus.json").read_text(encoding="utf-8"))
    long = json.loads((FIXTURES / "reference" / "long_texts.json").read_text(encoding="utf-8"))
    return [str(t) for t in corpus + long]


@dataclass(frozen=True)
class Reference:
    """sentence-transformers' vectors for one model. ``sets``: ``default`` (``encode`` of
    every text) and, for models with prompts, ``query`` / ``document`` (``encode_query`` /
    ``encode_document`` of the first texts); each (n_texts, dim) float32."""

    name: str
    dim: int
    max_seq_length: int
    sets: dict[str, npt.NDArray[np.float32]]
    token_counts: list[int]
    raw: dict[str, Any]


@cache
def reference(name: str) -> Reference:
    data = json.loads((REFERENCE_DIR / f"{name}.json").read_text(encoding="utf-8"))
    sets = {}
    for key, entry in data["sets"].items():
        flat = np.frombuffer(base64.b64decode(entry["vectors"]), dtype="<f4")
        sets[key] = flat.reshape(int(entry["texts"]), int(data["dim"])).astype(np.float32)
    return Reference(name=name, dim=int(data["dim"]), max_seq_length=int(data["max_seq_length"]),
                     sets=sets, token_counts=list(data["token_counts"]), raw=data)


def cosines(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.asarray(np.sum(a64 * b64, axis=1)
                      / (np.linalg.norm(a64, axis=1) * np.linalg.norm(b64, axis=1)))
