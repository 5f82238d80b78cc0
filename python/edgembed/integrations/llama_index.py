"""edgembed as a LlamaIndex embedding model, in-process::

    from llama_index.core import Settings
    from edgembed.integrations.llama_index import EdgembedEmbedding

    Settings.embed_model = EdgembedEmbedding()           # all-minilm-l6-v2
    Settings.embed_model.get_text_embedding("a text")

``pip install 'edgembed[llama-index]'`` installs llama-index-core.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import load_embedder

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"{exc}; install it with: pip install 'edgembed[llama-index]'") from None

__all__ = ["EdgembedEmbedding"]


class EdgembedEmbedding(BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` on an edgembed :class:`~edgembed.Embedder`.

    ``model_name``: a catalog name, model directory, hub id or engine bundle; or pass a loaded
    Embedder as ``embedder=``. ``variant``, ``backend`` and ``threads`` go to
    ``Embedder.load``, ``dimensions`` (Matryoshka) to every ``embed`` call. Texts get the
    model's document prompt, queries its query prompt.
    """

    variant: str | None = Field(default=None, description="int8, fp32, int4, fp16")
    backend: str = Field(default="auto", description="auto, native, onnx, wasm, cuda")
    dimensions: int | None = Field(default=None, description="Matryoshka dimensions")
    _embedder: Any = PrivateAttr()

    def __init__(
        self,
        model_name: str = "all-minilm-l6-v2",
        *,
        embedder: Any = None,
        threads: int | None = None,
        **kwargs: Any,
    ) -> None:
        if embedder is not None:
            model_name = str(embedder.model_name)
        super().__init__(model_name=model_name, **kwargs)
        if embedder is None:
            options: dict[str, Any] = {"backend": self.backend}
            if self.variant is not None:
                options["variant"] = self.variant
            if threads is not None:
                options["threads"] = threads
            embedder = load_embedder(model_name, **options)
        self._embedder = load_embedder(embedder)

    @classmethod
    def class_name(cls) -> str:
        return "EdgembedEmbedding"

    @property
    def embedder(self) -> Any:
        return self._embedder

    def _rows(self, vectors: Any) -> list[list[float]]:
        return [[float(x) for x in row] for row in vectors]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._rows(self._embedder.embed_query([query], dimensions=self.dimensions))[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._rows(self._embedder.embed_document(list(texts),
                                                        dimensions=self.dimensions))

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
