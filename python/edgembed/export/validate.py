"""Quality of an exported variant, measured against the fp32 export.

For every text of the calibration corpus (``edgembed/data/corpus.json``, texts written for
this project, shipped with the package): the variant's vector computed alone vs the fp32
vector (min and mean cosine), and alone vs inside length-sorted batches of 16
(batch invariance).

Models with a head (:class:`Probe`): a cross-encoder is measured on the calibration pairs
(:func:`calibration_pairs`; those it can take, for a model that truncates one side only) by
its logits — the largest difference to fp32 and the Spearman
correlation of the scores — and a SPLADE model on the corpus by the cosines of its sparse
vectors, the overlap of each text's 32 largest entries with fp32's, and the Spearman
correlation of the query-document dot products (the first half of the corpus as queries, the
second as documents): the quality bar for int8 sparse models is a top-32 overlap of at least
0.9 for every text and a Spearman correlation of at least 0.999.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._corpus import calibration_texts
from ..backends import Backend
from ..errors import InputTooLong
from ..manifest import Quality
from ..model_dir import ModelDescription, Task

__all__ = ["Probe", "calibration_pairs", "calibration_texts", "embed_alone", "embed_batched",
           "measure_quality", "query_document_dots", "spearman", "top_k_overlap"]


def _normalize(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    n = np.linalg.norm(v, axis=1, keepdims=True)
    out: npt.NDArray[np.float32] = (v / np.maximum(n, 1e-12)).astype(np.float32)
    return out


def embed_alone(backend: Backend, ids: Sequence[Sequence[int]]) -> npt.NDArray[np.float32]:
    return _normalize(np.concatenate([backend.encode([s]) for s in ids]))


def embed_batched(
    backend: Backend, ids: Sequence[Sequence[int]], batch: int = 16
) -> npt.NDArray[np.float32]:
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out = np.zeros((len(ids), backend.dim), dtype=np.float32)
    for j in range(0, len(order), batch):
        idx = order[j: j + batch]
        out[idx] = backend.encode([ids[i] for i in idx])
    return _normalize(out)


def measure_quality(
    backend: Backend, ids: Sequence[Sequence[int]], reference: npt.NDArray[np.float32]
) -> Quality:
    alone = embed_alone(backend, ids)
    batched = embed_batched(backend, ids)
    cos = np.sum(alone * reference, axis=1)
    inv = np.sum(alone * batched, axis=1)
    return Quality(
        n_texts=len(ids),
        min_cosine=round(float(cos.min()), 6),
        mean_cosine=round(float(cos.mean()), 6),
        alone_vs_batch_min_cosine=round(float(inv.min()), 7),
    )


# --- models with a head -----------------------------------------------------------------------

TOP_K = 32


def calibration_pairs() -> list[tuple[str, str]]:
    """(query, document) pairs of calibration texts: every text once as the query, with a
    document of another kind and length (index ``37 i + 11`` modulo the corpus size)."""
    texts = calibration_texts()
    n = len(texts)
    return [(texts[i], texts[(37 * i + 11) % n]) for i in range(n)]


def spearman(a: npt.NDArray[np.floating], b: npt.NDArray[np.floating]) -> float:
    """Spearman's rank correlation of two equally long vectors (ties take their mean rank)."""
    def ranks(x: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
        x = np.asarray(x, np.float64).ravel()
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x), np.float64)
        r[order] = np.arange(len(x), dtype=np.float64)
        _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
        sums = np.zeros(len(counts), np.float64)
        np.add.at(sums, inverse, r)
        return np.asarray(sums[inverse] / counts[inverse], np.float64)

    ra, rb = ranks(a), ranks(b)
    ra -= ra.mean()
    rb -= rb.mean()
    denom = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denom) if denom else 1.0


def top_k_overlap(reference: npt.NDArray[np.float32], other: npt.NDArray[np.float32],
                  k: int = TOP_K) -> npt.NDArray[np.float64]:
    """Per row, the share of ``reference``'s top-k terms that are among ``other``'s top-k
    terms, a row's top-k terms being its k largest positive entries (all of them when it has
    fewer than k; a reference row with none counts 1)."""
    out = np.ones(len(reference), np.float64)
    for i, (r, o) in enumerate(zip(reference, other, strict=True)):
        want = _top_terms(r, k)
        if want:
            out[i] = len(want & _top_terms(o, k)) / len(want)
    return out


def _top_terms(row: npt.NDArray[np.float32], k: int) -> set[int]:
    m = min(k, int(np.count_nonzero(row > 0)))
    return set(np.argsort(-row, kind="stable")[:m].tolist())


def query_document_dots(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Dot products of the first half of the rows (queries) with the second (documents)."""
    v = np.asarray(vectors, np.float64)
    half = len(v) // 2
    return np.asarray(v[:half] @ v[half:].T, np.float64).ravel()


def _fitting(tok: Any, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pairs a model truncating only one side can take (the other side fits)."""
    if tok.strategy == "longest_first":
        return pairs
    out = []
    for p in pairs:
        try:
            tok.encode([p])
        except InputTooLong:
            continue
        out.append(p)
    return out


class Probe:
    """The calibration inputs of one model, tokenized, and how a variant is measured on
    them: the corpus for embedding and sparse models, :func:`calibration_pairs` for
    cross-encoders (with their token types)."""

    def __init__(self, desc: ModelDescription, source_dir: Path) -> None:
        from .._tokenize import HFPairTokenizer, load_tokenizer

        self.task = desc.task
        self.types: list[list[int]] | None = None
        if desc.task is Task.RERANK:
            pairs = HFPairTokenizer(source_dir, desc.max_seq_length,
                                    lowercase=desc.do_lower_case)
            self.ids, self.types, _ = pairs.encode(_fitting(pairs, calibration_pairs()))
        else:
            tok = load_tokenizer(source_dir, desc.max_seq_length, lowercase=desc.do_lower_case)
            self.ids = [e.ids for e in tok.encode_batch(calibration_texts())]

    def _run(self, backend: Backend, idx: Sequence[int]) -> npt.NDArray[np.float32]:
        batch = [self.ids[i] for i in idx]
        if self.types is None:
            return np.asarray(backend.encode(batch), np.float32)
        types = [self.types[i] for i in idx]
        return np.asarray(backend.encode(batch, token_types=types),  # type: ignore[call-arg]
                          np.float32)

    def alone(self, backend: Backend) -> npt.NDArray[np.float32]:
        """Raw outputs (pooled vectors, logits or sparse vectors), each input alone."""
        return np.concatenate([self._run(backend, [i]) for i in range(len(self.ids))])

    def batched(self, backend: Backend, batch: int = 16) -> npt.NDArray[np.float32]:
        order = sorted(range(len(self.ids)), key=lambda i: len(self.ids[i]))
        out = np.zeros((len(self.ids), backend.dim), dtype=np.float32)
        for j in range(0, len(order), batch):
            idx = order[j: j + batch]
            out[idx] = self._run(backend, idx)
        return out

    def reference(self, backend: Backend) -> npt.NDArray[np.float32]:
        """What other variants are measured against: the fp32 export's outputs alone."""
        if self.task is Task.EMBEDDING:
            return embed_alone(backend, self.ids)
        return self.alone(backend)

    def measure(self, backend: Backend, reference: npt.NDArray[np.float32]) -> Quality:
        if self.task is Task.EMBEDDING:
            return measure_quality(backend, self.ids, reference)
        alone = self.alone(backend)
        batched = self.batched(backend)
        if self.task is Task.RERANK:
            cos = float(_cos_rows(alone.reshape(1, -1), reference.reshape(1, -1))[0])
            inv = float(_cos_rows(alone.reshape(1, -1), batched.reshape(1, -1))[0])
            return Quality(
                n_texts=len(self.ids), min_cosine=round(cos, 6), mean_cosine=round(cos, 6),
                alone_vs_batch_min_cosine=round(inv, 7),
                max_abs_error=round(float(np.max(np.abs(alone - reference))), 6),
                spearman=round(spearman(alone.ravel(), reference.ravel()), 6))
        cos_all = _cos_rows(alone, reference)
        inv_all = _cos_rows(alone, batched)
        overlap = top_k_overlap(reference, alone)
        return Quality(
            n_texts=len(self.ids), min_cosine=round(float(cos_all.min()), 6),
            mean_cosine=round(float(cos_all.mean()), 6),
            alone_vs_batch_min_cosine=round(float(inv_all.min()), 7),
            max_abs_error=round(float(np.max(np.abs(alone - reference))), 6),
            spearman=round(spearman(query_document_dots(alone),
                                    query_document_dots(reference)), 6),
            min_top32_overlap=round(float(overlap.min()), 4),
            mean_top32_overlap=round(float(overlap.mean()), 4))


def _cos_rows(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    """Row-wise cosine; two zero rows count as identical (an empty sparse vector)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    na, nb = np.linalg.norm(a64, axis=1), np.linalg.norm(b64, axis=1)
    dot = np.sum(a64 * b64, axis=1)
    both_zero = (na == 0) & (nb == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(both_zero, 1.0, dot / np.maximum(na * nb, 1e-300))
    return np.asarray(cos, np.float64)
