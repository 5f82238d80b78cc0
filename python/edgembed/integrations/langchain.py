"""edgembed as a LangChain embedding model, in-process::

    from edgembed.integrations.langchain import EdgembedEmbeddings

    embeddings = EdgembedEmbeddings()                    # all-minilm-l6-v2
    embeddings.embed_documents(["first text", "second text"])   # list of lists of floats
    embeddings.embed_query("a question")
    await embeddings.aembed_documents([...])             # in a worker thread

``pip install 'edgembed[langchain]'`` installs langchain-core.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import load_embedder

try:
    from langchain_core.embeddings import Embeddings
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"{exc}; install it with: pip install 'edgembed[langchain]'") from None

__all__ = ["EdgembedEmbeddings"]


class EdgembedEmbeddings(Embeddings):
    """A langchain-core ``Embeddings`` on an edgembed :class:`~edgembed.Embedder`.

    ``model``: a catalog name, model directory, hub id or engine bundle, or an Embedder
    already loaded. ``variant``, ``backend`` and ``threads`` go to ``Embedder.load``;
    ``dimensions`` (Matryoshka) and ``normalize`` to every ``embed`` call. Documents get the
    model's document prompt, queries its query prompt.
    """

    def __init__(
        self,
        model: Any = "all-minilm-l6-v2",
        *,
        variant: str | None = None,
        backend: str = "auto",
        threads: int | None = None,
        dimensions: int | None = None,
        normalize: bool | None = None,
    ) -> None:
        options: dict[str, Any] = {}
        if variant is not None:
            options["variant"] = variant
        if backend != "auto":
            options["backend"] = backend
        if threads is not None:
            options["threads"] = threads
        self.embedder = load_embedder(model, **options)
        self._options = {"dimensions": dimensions, "normalize": normalize}

    @property
    def model(self) -> str:
        return str(self.embedder.model_name)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = self.embedder.embed_document(list(texts), **self._options)
        return [[float(x) for x in row] for row in vectors]

    def embed_query(self, text: str) -> list[float]:
        (row,) = self.embedder.embed_query([text], **self._options)
        return [float(x) for x in row]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)
