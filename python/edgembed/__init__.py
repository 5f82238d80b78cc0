"""edgembed: portable, quantized, batch-invariant text embeddings.

    from edgembed import Embedder
    embedder = Embedder.load()                 # all-minilm-l6-v2, int8, CPU or CUDA
    vectors = embedder.embed(["a sentence", "another"])   # (2, 384) float32, unit length

    from edgembed import Reranker
    reranker = Reranker.load("ms-marco-minilm-l6-v2")     # a cross-encoder
    reranker.rerank("a query", ["a document", "another"], top_n=1)
"""

from __future__ import annotations

from .batching import AdaptiveBatcher
from .embedder import Embedder
from .errors import (
    BackendUnavailable,
    BatcherClosed,
    BatcherError,
    BundleError,
    ChecksumMismatch,
    DeadlineExceeded,
    EdgembedError,
    EngineError,
    InputError,
    InputTooLong,
    InvalidModelDir,
    ModelError,
    ModelNotFound,
    Overloaded,
    SourceUnavailable,
    UnsupportedArchitecture,
)
from .reranker import Reranker, RerankResult
from .sparse import SparseEmbedding

__version__ = "0.1.0"

__all__ = [
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
]
