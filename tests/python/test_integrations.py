"""edgembed inside LangChain, LlamaIndex and Chroma, in-process, with the real libraries.

Each integration's vectors are compared with ``Embedder.embed_document`` / ``embed_query`` of
the same texts on the same Embedder (the int8 model on onnxruntime), and each is driven through
its library's own machinery: a LangChain ``InMemoryVectorStore`` search, a LlamaIndex
``VectorStoreIndex`` retrieval, a Chroma collection query (and reopening a persistent
collection by its stored embedding-function configuration).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgembed.embedder import Embedder

DOCS = ["A cat sleeps on the warm windowsill.",
        "Stock markets fell sharply after the announcement.",
        "The recipe needs two eggs and a cup of flour."]
QUERY = "Where is the kitten napping?"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load("all-minilm-l6-v2", variant="int8", backend="onnx")


def assert_close(got: Any, want: Any) -> None:
    got, want = np.asarray(got, dtype=np.float32), np.asarray(want, dtype=np.float32)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-6


def test_langchain_embeddings(embedder: Embedder) -> None:
    core = pytest.importorskip("langchain_core")
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    from edgembed.integrations.langchain import EdgembedEmbeddings

    emb = EdgembedEmbeddings(embedder)
    assert isinstance(emb, Embeddings) and emb.model == "all-minilm-l6-v2"
    docs = emb.embed_documents(DOCS)
    assert isinstance(docs, list) and all(isinstance(x, float) for x in docs[0])
    assert_close(docs, embedder.embed_document(DOCS))
    assert_close([emb.embed_query(QUERY)], embedder.embed_query([QUERY]))
    assert_close(asyncio.run(emb.aembed_documents(DOCS)), docs)
    assert_close([asyncio.run(emb.aembed_query(QUERY))], [emb.embed_query(QUERY)])
    store = InMemoryVectorStore.from_texts(DOCS, emb)
    (hit,) = store.similarity_search(QUERY, k=1)
    assert hit.page_content == DOCS[0]
    short = EdgembedEmbeddings(embedder).embed_documents  # options are the Embedder's
    assert len(short(["x"])[0]) == 384
    assert core.__version__


def test_langchain_loads_by_name_with_options(model_home: Path) -> None:
    pytest.importorskip("langchain_core")
    from edgembed.integrations.langchain import EdgembedEmbeddings

    emb = EdgembedEmbeddings("all-minilm-l6-v2", backend="onnx", dimensions=64)
    (row,) = emb.embed_documents(["a text"])
    assert len(row) == 64 and abs(float(np.linalg.norm(row)) - 1.0) < 1e-5
    with pytest.raises(TypeError, match="apply when loading a model by name"):
        from edgembed.integrations import load_embedder

        load_embedder(emb.embedder, backend="onnx")


def test_llama_index_embedding(embedder: Embedder) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from edgembed.integrations.llama_index import EdgembedEmbedding

    emb = EdgembedEmbedding(embedder=embedder, embed_batch_size=2)
    assert isinstance(emb, BaseEmbedding) and emb.model_name == "all-minilm-l6-v2"
    assert_close([emb.get_text_embedding(DOCS[0])], embedder.embed_document([DOCS[0]]))
    assert_close(emb.get_text_embedding_batch(DOCS), embedder.embed_document(DOCS))
    assert_close([emb.get_query_embedding(QUERY)], embedder.embed_query([QUERY]))
    assert_close([asyncio.run(emb.aget_query_embedding(QUERY))], embedder.embed_query([QUERY]))
    assert_close(asyncio.run(emb.aget_text_embedding_batch(DOCS)),
                 embedder.embed_document(DOCS))
    index = VectorStoreIndex.from_documents([Document(text=d) for d in DOCS], embed_model=emb)
    (hit,) = index.as_retriever(similarity_top_k=1).retrieve(QUERY)
    assert hit.node.get_content() == DOCS[0]


def test_chromadb_embedding_function(embedder: Embedder, tmp_path: Path,
                                     model_home: Path) -> None:
    chromadb = pytest.importorskip("chromadb")
    from chromadb.api.types import EmbeddingFunction
    from chromadb.config import Settings

    from edgembed.integrations.chromadb import EdgembedEmbeddingFunction

    fn = EdgembedEmbeddingFunction(embedder)
    assert isinstance(fn, EmbeddingFunction) and fn.name() == "edgembed"
    assert_close(fn(DOCS), embedder.embed_document(DOCS))
    assert_close(fn.embed_query([QUERY]), embedder.embed_query([QUERY]))
    settings = Settings(anonymized_telemetry=False, allow_reset=True)
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=settings)
    docs = client.create_collection("docs", embedding_function=fn,
                                    configuration={"hnsw": {"space": "cosine"}})
    docs.add(ids=["cat", "stocks", "recipe"], documents=DOCS)
    got = docs.get(ids=["cat"], include=["embeddings"])
    assert_close(got["embeddings"], embedder.embed_document(DOCS[:1]))
    assert docs.query(query_texts=[QUERY], n_results=1)["ids"] == [["cat"]]
    # reopened by name: Chroma rebuilds the function from its stored configuration
    again = chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=settings)
    reopened = again.get_collection("docs")
    assert reopened.query(query_texts=["falling share prices"], n_results=1)["ids"] == [
        ["stocks"]]
