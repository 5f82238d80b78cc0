"""The Reranker: (query, document) pairs in, relevance scores out — a cross-encoder.

The pipeline of one ``score`` call::

    pairs ─► pair tokenization (tokenizers' pair encoding, the model's truncation strategy)
          ─► sort by length ─► token-budget batches (a pair costs its query + document tokens)
          ─► backend.encode (logits, with the pairs' token types; the engine backends'
             scores)  ─► restore input order
          ─► the model's activation (sigmoid for one label) unless ``raw``

``rerank(query, documents, top_n=)`` scores every (query, document) pair and returns the
documents best first. Models are sentence-transformers cross-encoders (BERT, XLM-RoBERTa,
ModernBERT, ... ``*ForSequenceClassification``; see docs/architectures.md), pulled and exported
like embedding models (``embed pull``), run by onnxruntime on the CPU or CUDA, or by the C
engine (``backend="native"`` or ``"wasm"``: the same bits on both). Every variant is
batch-invariant: a pair's score never depends on the other pairs of its batch.

Thread safety is the Embedder's: one Reranker may be shared by threads; encoder calls are
serialized one batch at a time.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import env
from ._tokenize import EnginePairTokenizer, HFPairTokenizer
from ._unicode import well_formed
from .backends import Backend
from .backends._engine import BundleSource
from .backends.choice import (
    MAX_BATCH_SIZE,
    BackendChoice,
    LoadedModel,
    choose_backend,
    cuda_state,
    native_state,
    open_backend,
)
from .embedder import plan_batches
from .errors import BackendUnavailable, InputError
from .manifest import Manifest
from .prepare import Progress, prepare_model

__all__ = ["DEFAULT_RERANKER", "RerankResult", "Reranker", "score_activation"]

DEFAULT_RERANKER = "ms-marco-minilm-l6-v2"

Pair = tuple[str, str]


@dataclass(frozen=True)
class RerankResult:
    """One document of ``rerank``: its ``index`` in the documents given, its ``score``, and
    the ``document`` itself when ``return_documents`` asked for it."""

    index: int
    score: float
    document: str | None = None


def score_activation(name: str, logits: Any) -> Any:
    """The cross-encoder's activation (``manifest.head["score_activation"]``) on a float32
    array of logits, as torch computes it in float32."""
    import numpy as np

    x = np.asarray(logits, np.float32)
    if name == "sigmoid":
        return (np.float32(1.0) / (np.float32(1.0) + np.exp(-x))).astype(np.float32)
    if name == "identity":
        return x
    if name == "tanh":
        return np.tanh(x).astype(np.float32)
    if name == "relu":
        return np.maximum(x, np.float32(0.0))
    if name == "silu":
        return (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32)
    if name == "gelu":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(np.float32)
    raise InputError(f"unknown score activation {name!r}")


def row_activation(name: str, x: float) -> float:
    """``score_activation`` of one logit without numpy, in float64 (rounded to float32 by
    the caller's ``array('f')``)."""
    if name == "sigmoid":
        return 1.0 / (1.0 + math.exp(-x)) if x >= -700.0 else 0.0
    if name == "identity":
        return x
    if name == "tanh":
        return math.tanh(x)
    if name == "relu":
        return max(x, 0.0)
    if name == "silu":
        return x / (1.0 + math.exp(-x)) if x >= -700.0 else -0.0
    if name == "gelu":
        return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
    raise InputError(f"unknown score activation {name!r}")


def _as_pairs(pairs: Any, start: int = 0) -> tuple[list[Pair], bool]:
    """(the pairs, whether one pair was given on its own): sentence-transformers' convention —
    two strings are one pair, a sequence of two-string sequences is many."""
    if isinstance(pairs, (str, bytes)):
        raise TypeError("pairs must be (query, document) pairs, not one string; for one query "
                        "and many documents use rerank(query, documents)")
    items = list(pairs)
    if len(items) == 2 and all(isinstance(t, str) for t in items):
        return [(well_formed(items[0]), well_formed(items[1]))], True
    out: list[Pair] = []
    for i, p in enumerate(items):
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or len(p) != 2 or not all(
                isinstance(t, str) for t in p):
            raise TypeError(f"pairs[{start + i}] should be a (query, document) pair of strings, "
                            f"not {type(p).__name__}")
        out.append((well_formed(p[0]), well_formed(p[1])))
    return out, False


class Reranker(LoadedModel):
    """Scores (query, document) pairs with one exported cross-encoder. Create it with
    ``Reranker.load``."""

    def __init__(self, *, backend: Backend, tokenizer: HFPairTokenizer | EnginePairTokenizer,
                 manifest: Manifest,
                 model_dir: Path, choice: BackendChoice) -> None:
        self._backend = backend
        self._tokenizer = tokenizer
        self._manifest = manifest
        self._model_dir = model_dir
        self._choice = choice
        self._max_batch_size = MAX_BATCH_SIZE.get(choice.backend, 128)
        self._encode_lock = threading.Lock()
        self._activation = str(manifest.head.get("score_activation", "identity"))

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | BundleSource = DEFAULT_RERANKER,
        *,
        variant: str | None = None,
        backend: str = "auto",
        threads: int | None = None,
        progress: Progress | None = None,
    ) -> Reranker:
        """Load the cross-encoder ``model`` (a catalog name such as ``ms-marco-minilm-l6-v2``
        or ``bge-reranker-base``, a hub id ``ORG/NAME`` with the ``[hub]`` extra, or a model
        directory), pulling and exporting it first if this machine has not yet. ``variant``,
        ``backend`` (``auto``, ``onnx``, ``cuda``, ``native``, ``wasm``), ``threads`` and
        ``progress`` are :meth:`Embedder.load`'s. ``native`` and ``wasm`` run the C engine's
        classification head on the int8 engine bundle (written on first use; the pairs are
        tokenized by ``tokenizers``); ``auto`` takes onnxruntime (CUDA or the CPU). An engine
        bundle (a .emb path or its bytes), and everything in Pyodide, loads by
        :meth:`from_bundle`.
        """
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(f"threads must be a positive integer, not {threads!r}")
        from ._bundle import loads_as_bundle

        # bundles (bytes always are one: the isinstance narrows the type) run on the wasm engine
        if loads_as_bundle(model, backend, variant) or isinstance(
                model, (bytes, bytearray, memoryview)):
            return cls.from_bundle(model)
        asked = str(backend).lower()
        native = native_state(backend) if asked == "native" else (False, "not requested")
        choice = choose_backend(backend, variant, cuda=cuda_state(backend), native=native)
        model_dir, manifest = prepare_model(model, choice.variant, progress)
        if manifest.task != "rerank":
            other = ("Embedder.load(...).embed_sparse" if manifest.task == "sparse"
                     else "Embedder.load")
            kind = "an embedding" if manifest.task == "embedding" else f"a {manifest.task}"
            raise InputError(f"{manifest.name} is {kind} model, not a cross-encoder "
                             f"(reranker); load it with {other}")
        try:
            engine = open_backend(choice, model_dir, manifest, threads)
        except BackendUnavailable as exc:
            if asked != "auto" or choice.backend != "cuda":
                raise
            choice = choose_backend("onnx", variant, cuda=(False, str(exc)))
            choice = BackendChoice(choice.backend, choice.variant, choice.max_batch_tokens,
                                   f"auto: CPU because {exc}")
            model_dir, manifest = prepare_model(model, choice.variant, progress)
            engine = open_backend(choice, model_dir, manifest, threads)
        source = model_dir / "source"
        if source.is_dir() and manifest.source_files:
            from .sources import verify_source

            verify_source(source, manifest.source_files, manifest.name)
        tokenizer = HFPairTokenizer(source if source.is_dir() else model_dir,
                                    manifest.max_length, lowercase=manifest.do_lower_case)
        return cls(backend=engine, tokenizer=tokenizer, manifest=manifest, model_dir=model_dir,
                   choice=choice)

    @classmethod
    def from_bundle(cls, model: BundleSource, *, wasm_build: str | None = None,
                    max_tokens: int = 2048, host: Any = None) -> Reranker:
        """A Reranker on the wasm engine for ``model``: bundle bytes, a path to a .emb file, or
        an exported model directory with a bundle. The engine tokenizes the pairs too (the
        bundle's pair template and truncation strategy), so neither onnxruntime nor
        ``tokenizers`` is needed: how a reranker runs in Pyodide. ``wasm_build`` and ``host``
        are :meth:`Embedder.from_bundle`'s."""
        from ._bundle import open_bundle

        p = open_bundle(model, wasm_build=wasm_build, max_tokens=max_tokens, host=host)
        if p.manifest.task != "rerank":
            p.backend.close()
            kind = "a SPLADE" if p.manifest.task == "sparse" else "an embedding"
            raise InputError(f"{p.manifest.name} is {kind} model, not a cross-encoder "
                             "(reranker); load it with Embedder.load")
        return cls(backend=p.backend, tokenizer=EnginePairTokenizer(p.backend),
                   manifest=p.manifest, model_dir=p.model_dir, choice=p.choice)

    # ── properties ──

    @property
    def model_name(self) -> str:
        return self._manifest.name

    @property
    def num_labels(self) -> int:
        return self._manifest.dim

    @property
    def labels(self) -> list[str]:
        """The model's label names (``id2label``), one per logit."""
        return [str(x) for x in self._manifest.head.get("labels", [])]

    @property
    def activation(self) -> str:
        """What turns logits into scores: ``sigmoid`` for one-label rerankers."""
        return self._activation

    @property
    def max_length(self) -> int:
        """Tokens per pair (query, document and special tokens together)."""
        return self._manifest.max_length

    @property
    def truncation(self) -> str:
        """How a pair past ``max_length`` is cut: ``longest_first``, ``only_second``, ..."""
        return self._tokenizer.strategy

    @property
    def max_batch_tokens(self) -> int:
        return self._choice.max_batch_tokens

    def __repr__(self) -> str:
        return (f"Reranker(model={self.model_name!r}, variant={self.variant!r}, "
                f"backend={self.backend!r}, labels={self.num_labels})")

    # ── tokens ──

    def tokenize(self, pairs: Any, *, truncate: bool = True) -> tuple[list[list[int]],
                                                                      list[list[int]]]:
        """Token ids and token types of each pair, as the encoder sees them."""
        items, _ = _as_pairs(pairs)
        ids, types, _ = self._tokenizer.encode(items, truncate=truncate)
        return ids, types

    def count_tokens(self, pairs: Any, *, truncate: bool = True) -> list[int]:
        """Tokens each pair costs the encoder (query + document + special tokens; at most
        ``max_length`` unless ``truncate=False``): the adaptive batcher's cost."""
        items, _ = _as_pairs(pairs)
        return self._tokenizer.count(items, truncate)

    # ── scores ──

    def score(self, pairs: Any, *, raw: bool = False, truncate: bool = True,
              max_batch_tokens: int | None = None) -> Any:
        """Scores of ``pairs`` ((query, document) tuples), in input order: shape (n,) for a
        one-label model, (n, labels) otherwise; a single pair gives a float (or a (labels,)
        array). ``raw``: the logits, without the model's activation (TEI's ``raw_scores``).
        ``truncate=False`` raises InputTooLong for a pair over ``max_length`` instead of
        cutting it."""
        items, single = _as_pairs(pairs)
        if not env.HOST.numpy:
            return self._score_rows(items, single, raw, truncate, max_batch_tokens)
        out = self.logits(items, truncate=truncate, max_batch_tokens=max_batch_tokens)
        if not raw:
            out = score_activation(self._activation, out)
        if self.num_labels == 1:
            out = out[:, 0]
        if single:
            return float(out[0]) if self.num_labels == 1 else out[0]
        return out

    def _score_rows(self, items: list[Pair], single: bool, raw: bool, truncate: bool,
                    max_batch_tokens: int | None) -> Any:
        """``score`` without numpy (Pyodide): ``array('f')`` of n scores for a one-label
        model, else one ``array('f')`` of logits per pair. The activation runs in float64 and
        rounds to float32, within one float32 step of numpy's float32 arithmetic; the logits
        (``raw``) are the engine's bits."""
        from array import array

        rows = self.logit_rows(items, truncate=truncate, max_batch_tokens=max_batch_tokens)
        if not raw:
            rows = [array("f", (row_activation(self._activation, float(v)) for v in row))
                    for row in rows]
        if self.num_labels == 1:
            flat = array("f", (row[0] for row in rows))
            return flat[0] if single else flat
        return rows[0] if single else rows

    def rerank(self, query: str, documents: Iterable[str], *, top_n: int | None = None,
               return_documents: bool = False, raw: bool = False, truncate: bool = True,
               max_batch_tokens: int | None = None) -> list[RerankResult]:
        """The documents scored against ``query``, best first (equal scores: the earlier
        document first), at most ``top_n`` of them. Needs a one-label model; the other
        options are ``score``'s."""
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, not {type(query).__name__}")
        if isinstance(documents, str):
            raise TypeError("documents must be a list of strings, not one string")
        docs = list(documents)
        for i, d in enumerate(docs):
            if not isinstance(d, str):
                raise TypeError(f"documents[{i}] is {type(d).__name__}, not str")
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int)
                                  or top_n < 1):
            raise InputError(f"top_n must be a positive integer, not {top_n!r}")
        if self.num_labels != 1:
            raise InputError(f"{self.model_name} has {self.num_labels} labels "
                             f"({', '.join(self.labels)}); rerank needs a one-label model: use "
                             "score() for its logits per label")
        if not docs:
            return []
        scores = self.score([(query, d) for d in docs], raw=raw, truncate=truncate,
                            max_batch_tokens=max_batch_tokens)
        order = sorted(range(len(docs)), key=lambda i: (-float(scores[i]), i))[:top_n]
        return [RerankResult(i, float(scores[i]), docs[i] if return_documents else None)
                for i in order]

    def logits(self, items: Sequence[Pair | str], *, truncate: bool = True,
               max_batch_tokens: int | None = None) -> Any:
        """Raw logits (n, labels) float32 of ``items`` — (query, document) pairs, or single
        texts (read as ``[CLS] text [SEP]``, as TEI's ``/predict`` takes them) — in
        length-sorted token-budget batches, input order kept."""
        import numpy as np

        budget = self._budget(max_batch_tokens)
        ids, types = self._encode(list(items), truncate)
        out = np.zeros((len(ids), self.num_labels), np.float32)
        for batch in plan_batches([len(s) for s in ids], budget, self._max_batch_size):
            with self._encode_lock:
                block = self._run([ids[i] for i in batch], [types[i] for i in batch])
            out[batch] = np.asarray(block, np.float32)
        return out

    def logit_rows(self, items: Sequence[Pair | str], *, truncate: bool = True,
                   max_batch_tokens: int | None = None) -> list[Any]:
        """``logits`` without numpy: one ``array('f')`` per item, in input order (the wasm
        engine's backend, as in Pyodide)."""
        rows_of = getattr(self._backend, "scores_rows", None)
        if rows_of is None:
            raise BackendUnavailable(f"backend {self.backend!r} needs numpy; install it, or "
                                     "load an engine bundle (backend='wasm')")
        budget = self._budget(max_batch_tokens)
        ids, types = self._encode(list(items), truncate)
        with_types = int(getattr(self._backend, "type_vocab_size", 0)) > 1
        out: list[Any] = [None] * len(ids)
        for batch in plan_batches([len(s) for s in ids], budget, self._max_batch_size):
            with self._encode_lock:
                block = rows_of([ids[i] for i in batch],
                                type_ids=[types[i] for i in batch] if with_types else None)
            for i, row in zip(batch, block, strict=True):
                out[i] = row
        return out

    def _budget(self, max_batch_tokens: int | None) -> int:
        if max_batch_tokens is not None and (
                not isinstance(max_batch_tokens, int) or max_batch_tokens < 1):
            raise InputError(f"max_batch_tokens must be a positive integer, "
                             f"not {max_batch_tokens!r}")
        return max_batch_tokens or self._choice.max_batch_tokens

    def _run(self, ids: list[list[int]], types: list[list[int]]) -> Any:
        """Logits of one batch: the engine backends' classification head (``scores``; token
        types only for a model that has them), or the ONNX graph's ``logits`` output."""
        scores = getattr(self._backend, "scores", None)
        if scores is not None:
            with_types = int(getattr(self._backend, "type_vocab_size", 0)) > 1
            return scores(ids, type_ids=types if with_types else None)
        return self._backend.encode(ids, token_types=types)  # type: ignore[call-arg]

    def _encode(self, items: list[Pair | str], truncate: bool) -> tuple[list[list[int]],
                                                                        list[list[int]]]:
        """Ids and token types of pairs and single texts, in input order."""
        single_at = [i for i, x in enumerate(items) if isinstance(x, str)]
        pair_at = [i for i, x in enumerate(items) if not isinstance(x, str)]
        singles = [x for x in items if isinstance(x, str)]
        pairs = [x for x in items if not isinstance(x, str)]
        ids: list[list[int]] = [[] for _ in items]
        kinds: list[list[int]] = [[] for _ in items]
        if singles:
            s_ids, s_types, _ = self._tokenizer.encode_texts(singles, truncate=truncate)
            for j, i in enumerate(single_at):
                ids[i], kinds[i] = s_ids[j], s_types[j]
        if pairs:
            p_ids, p_types, _ = self._tokenizer.encode(pairs, truncate=truncate)
            for j, i in enumerate(pair_at):
                ids[i], kinds[i] = p_ids[j], p_types[j]
        return ids, kinds

    def count_items(self, items: Sequence[Pair | str], *, truncate: bool = True) -> list[int]:
        """Tokens of each item (a pair or a single text) as the encoder sees it."""
        if truncate:
            return [len(s) for s in self._encode(list(items), True)[0]]
        full = iter(self._tokenizer.count([x for x in items if not isinstance(x, str)], False))
        singles = iter(self._tokenizer.count_texts([x for x in items if isinstance(x, str)],
                                                   False))
        return [next(singles) if isinstance(x, str) else next(full) for x in items]
