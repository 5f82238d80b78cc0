"""Through the batcher, the real int8 model gives every text the vector it gets alone.

The int8 scheme is batch-invariant by construction (activation scales per token block), so
sharing a batch with other texts — of other lengths, in any order — must not change a vector
beyond float32 rounding (the onnxruntime backend differs by ~1e-8 in the fp32 parts, e.g. the
order of sums over padded positions). A batch-variant quantization shows differences around
1e-2, so the 1e-6 bound below separates the two by four orders of magnitude.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from edgembed import Embedder
from edgembed.batching import AdaptiveBatcher

TEXTS = [
    "Hi.",
    "The cat sat on the mat.",
    "A man is playing a guitar on a street corner while people walk past.",
    "Quantum entanglement links the states of two particles across a distance.",
    "naïve café résumé — unicode survives tokenization",
    "Stock markets rallied after the central bank held interest rates steady on Tuesday.",
    "1234567890",
    "How do I reset my password if I no longer have access to the recovery email address "
    "that I registered with when I first created the account several years ago?",
    "short",
    "Embeddings map sentences to vectors so that similar meanings lie close together.",
    " ".join(["long passage"] * 120),  # truncated at the model's maximum length
    "¿Dónde está la biblioteca?",
]


@pytest.mark.slow
def test_vectors_through_the_batcher_equal_vectors_computed_alone(
    exported_model_dir: Path,
) -> None:
    e = Embedder.load(exported_model_dir, variant="int8", backend="onnx")
    alone = {t: np.asarray(e.embed([t]))[0] for t in TEXTS}
    requests: list[str | list[str]] = [*TEXTS, TEXTS[::-1], TEXTS[2:7], [TEXTS[0], TEXTS[10]]]
    with AdaptiveBatcher(e, latency_target_ms=60_000, max_batch_tokens=8192) as b:
        futures = []
        lock = threading.Lock()

        def client(part: list[str | list[str]]) -> None:
            for r in part:
                f = b.submit(r)
                with lock:
                    futures.append((r, f))

        threads = [threading.Thread(target=client, args=(requests[i::3],)) for i in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        results = [(r, f.result(timeout=300)) for r, f in futures]
        stats = b.stats()
    assert stats.batches < len(requests), "the requests were never batched together"
    for r, got in results:
        texts = [r] if isinstance(r, str) else r
        got_rows = [np.asarray(got)] if isinstance(r, str) else list(np.asarray(got))
        for text, row in zip(texts, got_rows, strict=True):
            want = alone[text]
            assert row.shape == want.shape
            diff = float(np.max(np.abs(row.astype(np.float64) - want)))
            assert diff <= 1e-6, f"{text[:30]!r}: max |diff| {diff}"
