"""edgembed inside other libraries, in-process (no server): each module needs its library.

    edgembed.integrations.langchain   EdgembedEmbeddings, a langchain-core ``Embeddings``
                                      (pip install 'edgembed[langchain]')
    edgembed.integrations.llama_index EdgembedEmbedding, a LlamaIndex ``BaseEmbedding``
                                      (pip install 'edgembed[llama-index]')
    edgembed.integrations.chromadb    EdgembedEmbeddingFunction, a Chroma
                                      ``EmbeddingFunction`` (pip install 'edgembed[chromadb]')

Each wraps an :class:`edgembed.Embedder` (given, or loaded by name on construction): documents
are embedded with the model's document prompt, queries with its query prompt (both empty for
all-MiniLM-L6-v2; "passage: " and "query: " for e5 models), vectors as the Embedder returns
them. The modules are not imported by ``import edgembed``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_embedder"]


def load_embedder(model: Any, **options: Any) -> Any:
    """``model`` itself when it is an Embedder, else ``Embedder.load(model, **options)``."""
    from ..embedder import Embedder

    if isinstance(model, Embedder):
        if options:
            raise TypeError(f"options {sorted(options)} apply when loading a model by name, "
                            "not to an Embedder already loaded")
        return model
    return Embedder.load(model, **options)
