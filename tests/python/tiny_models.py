"""The tiny random-weight models of ``tests/fixtures/models/`` and their reference vectors.

The models are made by ``models/tiny/make_tiny_models.py`` (embedding models) and
``make_tiny_heads.py`` (cross-encoders and SPLADE models) with transformers and saved by
sentence-transformers; ``models/tiny/make_tiny_references.py`` and ``make_head_references.py``
wrote what sentence-transformers computes for them into
``tests/fixtures/reference/tiny/<name>.json`` (see ``tests/fixtures/models/README.md``). Tests
of any part of edgembed can use them.
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


def task_of(name: str) -> str:
    """The model's task, as its ``edgembed_fixture.json`` records it (embedding, rerank or
    sparse; the models of ``make_tiny_models.py`` are all embedding models)."""
    about = json.loads((MODELS_DIR / name / "edgembed_fixture.json").read_text(encoding="utf-8"))
    return str(about.get("task", "embedding"))


def names(task: str = "embedding") -> list[str]:
    """Every tiny model of ``task``, by name."""
    return sorted(p.name for p in MODELS_DIR.iterdir()
                  if (p / "config.json").is_file() and task_of(p.name) == task)


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


@dataclass(frozen=True)
class HeadReference:
    """sentence-transformers' outputs for a model with a head (``make_head_references.py``).

    Rerank: ``pairs`` (query, document) indices into :func:`texts`, their ``logits`` and
    ``scores`` (pairs, num_labels), and ``truncation``. Sparse: ``vectors`` (texts, V), dense
    (zeros where sentence-transformers' sparse vector has no entry)."""

    name: str
    task: str
    max_seq_length: int
    token_counts: list[int]
    raw: dict[str, Any]
    pairs: list[tuple[int, int]]
    logits: npt.NDArray[np.float32] | None
    scores: npt.NDArray[np.float32] | None
    vectors: npt.NDArray[np.float32] | None


@cache
def head_reference(name: str, root: Path = REFERENCE_DIR) -> HeadReference:
    data = json.loads((root / f"{name}.json").read_text(encoding="utf-8"))
    pairs = [(int(q), int(d)) for q, d in data.get("pairs", [])]
    logits = scores = vectors = None
    if data["task"] == "rerank":
        shape = (len(pairs), int(data["num_labels"]))
        logits = np.frombuffer(base64.b64decode(data["logits"]), "<f4").reshape(shape)
        scores = np.frombuffer(base64.b64decode(data["scores"]), "<f4").reshape(shape)
    else:
        counts = [int(n) for n in data["nonzeros"]]
        idx = np.frombuffer(base64.b64decode(data["indices"]), "<i4")
        val = np.frombuffer(base64.b64decode(data["values"]), "<f4")
        vectors = np.zeros((len(counts), int(data["dim"])), np.float32)
        at = 0
        for i, n in enumerate(counts):
            vectors[i, idx[at:at + n]] = val[at:at + n]
            at += n
    return HeadReference(name=name, task=data["task"],
                         max_seq_length=int(data["max_seq_length"]),
                         token_counts=list(data["token_counts"]), raw=data, pairs=pairs,
                         logits=logits, scores=scores, vectors=vectors)
