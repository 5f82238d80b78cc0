"""The public surface of ``edgembed`` is exactly what ``__all__`` lists, and it all exists."""

from __future__ import annotations

import edgembed

PUBLIC = {
    "AdaptiveBatcher",
    "BackendUnavailable",
    "BatcherClosed",
    "BatcherError",
    "BundleError",
    "ChecksumMismatch",
    "DeadlineExceeded",
    "EdgembedError",
    "Embedder",
    "EngineError",
    "InputError",
    "InputTooLong",
    "InvalidModelDir",
    "ModelError",
    "ModelNotFound",
    "Overloaded",
    "RerankResult",
    "Reranker",
    "SourceUnavailable",
    "SparseEmbedding",
    "UnsupportedArchitecture",
    "__version__",
}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(edgembed.__all__) == PUBLIC
    assert len(edgembed.__all__) == len(PUBLIC)  # no duplicates
    assert edgembed.__all__ == sorted(edgembed.__all__, key=lambda n: (n.startswith("_"), n))


def test_every_exported_member_exists() -> None:
    for name in edgembed.__all__:
        assert hasattr(edgembed, name), name
    assert edgembed.Embedder.__module__ == "edgembed.embedder"
    assert issubclass(edgembed.InputTooLong, edgembed.InputError)
    assert issubclass(edgembed.InputError, ValueError)
    assert issubclass(edgembed.BackendUnavailable, edgembed.EdgembedError)
