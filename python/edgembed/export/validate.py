"""Quality of an exported variant, measured against the fp32 export.

For every text of the calibration corpus (``edgembed/data/corpus.json``, texts written for
this project, shipped with the package): the variant's vector computed alone vs the fp32
vector (min and mean cosine), and alone vs inside length-sorted batches of 16
(batch invariance).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .._corpus import calibration_texts
from ..backends import Backend
from ..manifest import Quality

__all__ = ["calibration_texts", "embed_alone", "embed_batched", "measure_quality"]


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
