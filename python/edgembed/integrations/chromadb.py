"""edgembed as a Chroma embedding function, in-process::

    import chromadb
    from edgembed.integrations.chromadb import EdgembedEmbeddingFunction

    client = chromadb.EphemeralClient()
    docs = client.create_collection("docs", embedding_function=EdgembedEmbeddingFunction(),
                                    configuration={"hnsw": {"space": "cosine"}})
    docs.add(ids=["1", "2"], documents=["a cat sat", "stocks fell"])
    docs.query(query_texts=["a kitten"], n_results=1)

``pip install 'edgembed[chromadb]'`` installs chromadb. The function is registered under the
name ``edgembed``, so a persistent collection reopens with it from its stored configuration.
"""

from __future__ import annotations

from typing import Any

from . import load_embedder

try:
    from chromadb.api.types import EmbeddingFunction
    from chromadb.utils.embedding_functions import register_embedding_function
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise ImportError(f"{exc}; install it with: pip install 'edgembed[chromadb]'") from None

__all__ = ["EdgembedEmbeddingFunction"]


class EdgembedEmbeddingFunction(EmbeddingFunction):  # type: ignore[type-arg]
    """A Chroma ``EmbeddingFunction`` on an edgembed :class:`~edgembed.Embedder`.

    ``model``: a catalog name, model directory, hub id or engine bundle, or an Embedder already
    loaded; ``variant`` and ``backend`` go to ``Embedder.load``, ``dimensions`` to every call.
    Documents (``__call__``) get the model's document prompt, queries (``embed_query``) its
    query prompt. Vectors are unit length, so Chroma's ``cosine`` and ``ip`` spaces rank alike.
    """

    def __init__(
        self,
        model: Any = "all-minilm-l6-v2",
        *,
        variant: str | None = None,
        backend: str = "auto",
        dimensions: int | None = None,
    ) -> None:
        options: dict[str, Any] = {}
        if variant is not None:
            options["variant"] = variant
        if backend != "auto":
            options["backend"] = backend
        self.embedder = load_embedder(model, **options)
        self._config = {"model": str(model) if isinstance(model, str) else
                        str(self.embedder.model_name), "variant": variant,
                        "backend": backend, "dimensions": dimensions}
        self._dimensions = dimensions

    def __call__(self, input: Any) -> Any:
        texts = [input] if isinstance(input, str) else list(input)
        return list(self.embedder.embed_document(texts, dimensions=self._dimensions))

    def embed_query(self, input: Any) -> Any:
        texts = [input] if isinstance(input, str) else list(input)
        return list(self.embedder.embed_query(texts, dimensions=self._dimensions))

    @staticmethod
    def name() -> str:
        return "edgembed"

    def default_space(self) -> Any:
        return "cosine"

    def supported_spaces(self) -> list[Any]:
        return ["cosine", "ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        return dict(self._config)

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> EdgembedEmbeddingFunction:
        return EdgembedEmbeddingFunction(
            config.get("model", "all-minilm-l6-v2"), variant=config.get("variant"),
            backend=config.get("backend", "auto"), dimensions=config.get("dimensions"))


register_embedding_function(EdgembedEmbeddingFunction)  # type: ignore[no-untyped-call]
