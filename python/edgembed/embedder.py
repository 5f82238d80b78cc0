"""The Embedder: texts in, vectors out, on whichever backend runs here.

The pipeline of one ``embed`` call::

    texts ─► tokenize (no padding, truncation at max_length)
          ─► sort by length ─► token-budget batches (padded to each batch's longest only)
          ─► backend.encode (pooled vectors)  ─► restore input order
          ─► Matryoshka truncation (dimensions) ─► L2 normalization ─► precision

The Embedder is the core of that pipeline; its parts live beside it::

    backends/choice.py  which backend, variant and token budget run here (and opening it)
    prepare.py          the model pulled and exported into the cache on first use
    _tokenize.py        Hugging Face ``tokenizers``, or the engine's own tokenizer (bundles)
    output/             Matryoshka, normalization and precisions, on numpy arrays or rows
    _bundle.py          the parts of an Embedder over an engine bundle alone (Pyodide)

Every variant edgembed exports is batch-invariant (int8 activations are quantized per token),
so sorting and batching never change a text's vector: a text embedded alone and inside any
batch gives the same result.

Thread safety: one Embedder may be shared by many threads, and each call gets exactly the
vectors it would get alone. Encoder calls are serialized, one batch at a time: a CPU batch
already uses every core, and overlapping runs that fight for the same cores were measured
slower (8 threads: 17 s overlapped, 10.5 s serialized, on 2 cores); the wasm engine is
single-threaded anyway. Tokenization, sorting and post-processing of concurrent calls overlap,
and since the lock is taken per batch, a short call is not stuck behind a long one.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import env
from ._corpus import calibration_texts
from ._tokenize import HFTokenizer, Tokenizer, TokenSpan, truncation_direction
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
from .errors import BackendUnavailable, EdgembedError, InputError
from .manifest import Manifest
from .output import Output, Precision, default_output, precision_of
from .prepare import Progress, prepare_model
from .sparse import SparseEmbedding, from_dense_rows

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["DEFAULT_MODEL", "Embedder", "Precision", "plan_batches", "task_of"]

_log = logging.getLogger("edgembed")

DEFAULT_MODEL = "all-minilm-l6-v2"
ITER_CHUNK = 1024
# A SPLADE model's logits are (tokens, vocabulary) floats per batch: its token budget keeps
# them at about 2^24 values (64 MiB; SPLADE-tiny's 30,522 entries: 549 tokens), never below one
# text of max_length.
SPARSE_BATCH_VALUES = 1 << 24


# --- batching ----------------------------------------------------------------------------------


def plan_batches(
    lengths: Sequence[int], max_batch_tokens: int, max_batch_size: int = 1 << 30
) -> list[list[int]]:
    """Indices of ``lengths`` grouped into batches, longest texts first.

    Each batch is padded to its longest member, so its cost is ``len(batch) * longest``;
    that product stays within ``max_batch_tokens`` (a single text longer than the budget
    forms a batch of its own). Longest first: a batch that does not fit in memory fails at
    once, not at the end of a long run.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        if current and (
            (len(current) + 1) * max(width, lengths[i]) > max_batch_tokens
            or len(current) >= max_batch_size
        ):
            batches.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, lengths[i])
    if current:
        batches.append(current)
    return batches


def task_of(model: Any) -> str | None:
    """The task of the model ``model`` names, when that is known without pulling it (a
    catalog entry, an exported directory, a local model directory); None otherwise."""
    from .catalog import catalog
    from .prepare import exported_dir

    try:
        text = os.fspath(model)
    except TypeError:
        return None
    spec = catalog().get(text.lower())
    if spec is not None:
        return spec.task.value
    path = Path(text).expanduser()
    if not path.is_dir():
        return None
    found = exported_dir(path)
    try:
        if found is not None:
            return Manifest.load(found).task
        from .model_dir import read_model_dir

        return read_model_dir(path).task.value
    except EdgembedError:
        return None  # prepare_model reports what is wrong with it


def _sparse_default(choice: BackendChoice, asked: str) -> BackendChoice:
    """SPLADE models run where their quality bar holds (docs/quantization.md): on the engine
    (native or wasm), whose SPLADE bundle is the "rescored" one (fp32 encoder, int8 decoder
    made exact), and in fp32 on onnxruntime, whose int8 misses the bar. So ``auto`` keeps the
    engine when it chose it, and takes fp32 where it would have run onnxruntime's int8."""
    if choice.variant != "int8" or asked not in ("auto", "onnx", "cpu"):
        return choice
    if choice.backend in ("native", "wasm"):
        why = ("sparse models run the engine's rescored SPLADE bundle (fp32 encoder, int8 "
               "decoder made exact: it meets their quality bar, see docs/quantization.md)")
        return BackendChoice(choice.backend, choice.variant, choice.max_batch_tokens,
                             f"{choice.reason}; {why}" if choice.reason else why)
    why = ("sparse models default to fp32 on onnxruntime (its int8 misses their quality bar, "
           "see docs/quantization.md)")
    return BackendChoice("onnx", "fp32", choice.max_batch_tokens,
                         f"auto: {why}" if asked == "auto" else why)


# normalize, dimensions, precision, token budget, left truncation
_Options = tuple[bool, "int | None", Precision, int, bool]


def _left(direction: str) -> bool:
    return truncation_direction(direction)


def _id_sequences(ids: Sequence[int] | Sequence[Sequence[int]]) -> list[list[int]]:
    """Token ids as a list of sequences: one sequence of ints, or a list of them."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise InputError("ids must be a list of token ids or a list of such lists")
    items = list(ids)
    if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        return [list(items)] if items else []  # type: ignore[arg-type]
    seqs: list[list[int]] = []
    for n, seq in enumerate(items):
        if isinstance(seq, (str, bytes)) or not isinstance(seq, Sequence) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in seq):
            raise InputError(f"ids[{n}] is not a list of token ids (integers)")
        seqs.append(list(seq))
    return seqs


def _as_texts(texts: str | Iterable[str], start: int = 0) -> list[str]:
    """A list of well-formed texts; a single string is one text. Non-strings raise TypeError
    by index."""
    if isinstance(texts, str):
        return [well_formed(texts)]
    if isinstance(texts, (bytes, bytearray)):
        raise TypeError("texts must be a str or an iterable of str, not bytes; decode it first")
    try:
        items = list(texts)
    except TypeError:
        raise TypeError(
            f"texts must be a str or an iterable of str, not {type(texts).__name__}"
        ) from None
    for i, t in enumerate(items):
        if not isinstance(t, str):
            raise TypeError(f"texts[{start + i}] is {type(t).__name__}, not str")
        items[i] = well_formed(t)  # lone surrogates read as U+FFFD on every host (_unicode)
    return items


# --- Embedder ----------------------------------------------------------------------------------


class Embedder(LoadedModel):
    """Embeds texts with one exported model on one backend. Create it with ``Embedder.load``."""

    def __init__(
        self,
        *,
        backend: Backend,
        tokenizer: Tokenizer,
        manifest: Manifest,
        model_dir: Path,
        choice: BackendChoice,
        output: Output | None = None,
    ) -> None:
        """The parts, as ``load`` and ``from_bundle`` assemble them; ``output`` defaults to
        numpy arrays where numpy is installed, else ``array`` rows."""
        self._backend = backend
        self._tokenizer = tokenizer
        self._manifest = manifest
        self._model_dir = model_dir
        self._choice = choice
        self._max_batch_size = MAX_BATCH_SIZE.get(choice.backend, 128)
        self._encode_lock = threading.Lock()
        self._calibration_lock = threading.Lock()
        self._output = output if output is not None else default_output()
        self._calibration: Any = None
        self._states: Any = None  # an onnxruntime session for token_embeddings, on first use

    # ── construction ──

    @classmethod
    def load(
        cls,
        model: str | os.PathLike[str] | bytes = DEFAULT_MODEL,
        *,
        variant: str | None = None,
        backend: str = "auto",
        threads: int | None = None,
        progress: Progress | None = None,
    ) -> Embedder:
        """Load ``model``, pulling and exporting it first if this machine has not yet.

        ``model``: a catalog name (``embed models`` lists them), a Hugging Face model
        directory, or an exported model directory (one with ``edgembed.json``); or an engine
        bundle — a path to a .emb file, or its bytes — which runs on backend ``wasm`` (in
        Pyodide everything does: see docs/pyodide.md).
        ``variant``: ``int8`` (default on CPU), ``fp32``, ``int4`` or ``fp16`` (default on
        CUDA). ``backend``: ``auto`` (CUDA when a GPU and onnxruntime-gpu are present, else
        CPU), ``onnx`` (onnxruntime on the CPU), ``cuda`` or ``wasm``. ``threads``: the
        onnxruntime intra-op threads (default: one per core). ``progress`` receives one line
        per step of a first-time pull and export (default: the ``edgembed`` logger).
        """
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise InputError(f"threads must be a positive integer, not {threads!r}")
        from ._bundle import loads_as_bundle

        # bundles (bytes always are one: the isinstance narrows the type) run on the wasm engine
        if loads_as_bundle(model, backend, variant) or isinstance(
                model, (bytes, bytearray, memoryview)):
            return cls.from_bundle(model)
        choice = choose_backend(backend, variant, cuda=cuda_state(backend),
                                native=native_state(backend))
        sparse_known = variant is None and task_of(model) == "sparse"
        if sparse_known:
            choice = _sparse_default(choice, str(backend).lower())
        model_dir, manifest = prepare_model(model, choice.variant, progress)
        if variant is None and not sparse_known and manifest.task == "sparse":
            again = _sparse_default(choice, str(backend).lower())  # a hub model, now pulled
            if again.variant != choice.variant:
                model_dir, manifest = prepare_model(model, again.variant, progress)
            choice = again
        try:
            engine = open_backend(choice, model_dir, manifest, threads)
        except BackendUnavailable as exc:
            if str(backend).lower() != "auto" or choice.backend not in ("cuda", "native"):
                raise
            choice = choose_backend("onnx", variant, cuda=(False, str(exc)))
            choice = BackendChoice(choice.backend, choice.variant, choice.max_batch_tokens,
                                   f"auto: CPU because {exc}")
            if variant is None and manifest.task == "sparse":  # not onnxruntime's int8
                fp32 = _sparse_default(choice, "onnx")
                choice = BackendChoice(fp32.backend, fp32.variant, fp32.max_batch_tokens,
                                       f"{choice.reason}; {fp32.reason}")
            model_dir, manifest = prepare_model(model, choice.variant, progress)
            engine = open_backend(choice, model_dir, manifest, threads)
        if manifest.task == "rerank":
            raise InputError(f"{manifest.name} is a cross-encoder (reranker), not an embedding "
                             "model; load it with Reranker.load")
        if not manifest.include_prompt and not getattr(engine, "takes_prompt_length", False):
            raise BackendUnavailable(
                f"{manifest.name} pools without its prompt (include_prompt: false), which "
                f"backend {choice.backend!r} does not do; use backend='onnx'")
        source = model_dir / "source"
        if source.is_dir() and manifest.source_files:
            from .sources import verify_source

            verify_source(source, manifest.source_files, manifest.name)
        tokenizer = HFTokenizer(source if source.is_dir() else model_dir, manifest.max_length,
                                lowercase=manifest.do_lower_case)
        return cls(backend=engine, tokenizer=tokenizer, manifest=manifest,
                   model_dir=model_dir, choice=choice)

    @classmethod
    def from_bundle(
        cls,
        model: BundleSource,
        *,
        wasm_build: str | None = None,
        max_tokens: int = 2048,
        host: Any = None,
        wasm_variant: str | None = None,
    ) -> Embedder:
        """An Embedder on the wasm engine for ``model``: bundle bytes, a path to a .emb file,
        or an exported model directory with a bundle. The engine tokenizes too, so neither
        onnxruntime nor ``tokenizers`` is needed (how edgembed runs in Pyodide).
        ``wasm_build``: the engine build ("simd128", "relaxed" or None: the host's best;
        ``wasm_variant`` is its deprecated old name);
        ``host``: a ready ``WasmHost`` (e.g. a module compiled asynchronously by
        ``edgembed.web.load``)."""
        from ._bundle import open_bundle, wasm_build_of

        p = open_bundle(model, wasm_build=wasm_build_of(wasm_build, wasm_variant),
                        max_tokens=max_tokens, host=host)
        if p.manifest.task == "rerank":
            p.backend.close()
            raise InputError(f"{p.manifest.name} is a cross-encoder (reranker), not an "
                             "embedding model: load it with Reranker.load (or "
                             "Reranker.from_bundle)")
        return cls(backend=p.backend, tokenizer=p.tokenizer, manifest=p.manifest,
                   model_dir=p.model_dir, choice=p.choice)

    # ── properties ──

    @property
    def dim(self) -> int:
        return self._manifest.dim

    @property
    def max_length(self) -> int:
        return self._manifest.max_length

    @property
    def model_name(self) -> str:
        return self._manifest.name

    @property
    def vocab_size(self) -> int | None:
        """The number of token ids the tokenizer knows (None where only the engine tokenizes)."""
        size = getattr(self._tokenizer, "vocab_size", None)
        return int(size) if size is not None else None

    @property
    def max_batch_tokens(self) -> int:
        if self.task == "sparse":
            return min(self._choice.max_batch_tokens,
                       max(self.max_length, SPARSE_BATCH_VALUES // max(self.dim, 1)))
        return self._choice.max_batch_tokens

    @property
    def task(self) -> str:
        """``embedding`` (``embed``) or ``sparse`` (a SPLADE model: ``embed_sparse``)."""
        return self._manifest.task

    def __repr__(self) -> str:
        extra = f", reason={self._choice.reason!r}" if self._choice.reason else ""
        return (f"Embedder(model={self.model_name!r}, variant={self.variant!r}, "
                f"backend={self.backend!r}, dim={self.dim}{extra})")

    # ── tokens ──

    def tokenize(
        self, texts: str | Iterable[str], *, prefix: str | None = None, truncate: bool = True,
        prompt_name: str | None = None, truncation_direction: str = "right",
    ) -> list[list[int]]:
        """Token ids (with [CLS]/[SEP], no padding) of each text, as the encoder sees them
        (the prompt included, as for ``embed``); with ``truncate=False``, all of each text's
        tokens."""
        left = _left(truncation_direction)
        items = self._with_prefix(_as_texts(texts), self.prompt(prefix, prompt_name))
        return self._tokenizer.encode(items, truncate=truncate, check=False, left=left)[0]

    def tokenize_offsets(
        self, texts: str | Iterable[str], *, prefix: str | None = None,
        prompt_name: str | None = None, add_special_tokens: bool = True,
    ) -> list[list[TokenSpan]]:
        """Every token of each text, not truncated, as ``TokenSpan(id, start, end, special,
        token)``: the token covers ``(prompt + text)[start:end]`` (code points; the prompt is
        ``prompt(prefix, prompt_name)``). Special tokens the template adds (``[CLS]``,
        ``[SEP]``) have ``special`` set and start == end == 0; ``add_special_tokens=False``
        leaves them out. Needs the model's tokenizer.json (not an engine bundle alone)."""
        items = self._with_prefix(_as_texts(texts), self.prompt(prefix, prompt_name))
        return self._tokenizer.spans(items, add_special_tokens=bool(add_special_tokens))

    def decode(
        self, ids: Sequence[int] | Sequence[Sequence[int]], *, skip_special_tokens: bool = True
    ) -> list[str]:
        """The text of token ids: one sequence gives a list of one text, a list of sequences
        one text each. ``skip_special_tokens`` leaves out ``[CLS]``, ``[SEP]`` and the like."""
        seqs = _id_sequences(ids)
        if not seqs:
            return []
        return self._tokenizer.decode(seqs, skip_special_tokens=bool(skip_special_tokens))

    def count_tokens(
        self, texts: str | Iterable[str], *, prefix: str | None = None, truncate: bool = True,
        prompt_name: str | None = None, truncation_direction: str = "right",
    ) -> list[int]:
        """How many tokens each text costs the encoder (special tokens and prompt included; at
        most ``max_length`` unless ``truncate=False``). The adaptive batcher's cost model uses
        it. Both truncation directions keep the same number of tokens."""
        _left(truncation_direction)
        items = self._with_prefix(_as_texts(texts), self.prompt(prefix, prompt_name))
        return self._tokenizer.count(items, truncate)

    # ── prompts ──

    @property
    def prompts(self) -> dict[str, str]:
        """The model's prompts by name (``config_sentence_transformers.json``, and the
        catalog's query/document prefixes), for ``prompt_name=``."""
        return dict(self._manifest.prompts)

    def prompt(self, prefix: str | None = None, prompt_name: str | None = None) -> str:
        """The text ``embed`` puts before each text: ``prefix`` as given, the prompt called
        ``prompt_name``, or (neither given) the model's default prompt — "" for most models.
        As sentence-transformers' ``prompt=`` / ``prompt_name=``."""
        if prefix is not None and prompt_name is not None:
            raise InputError("give prefix or prompt_name, not both")
        if prefix is not None:
            if not isinstance(prefix, str):
                raise InputError(f"prefix must be a string, not {type(prefix).__name__}")
            return prefix
        prompts = self._manifest.prompts
        if prompt_name is not None:
            if prompt_name not in prompts:
                known = ", ".join(sorted(prompts)) or "none"
                raise InputError(f"model {self.model_name!r} has no prompt named "
                                 f"{prompt_name!r} (its prompts: {known})")
            return prompts[prompt_name]
        default = self._manifest.default_prompt_name
        return prompts.get(default, "") if default else ""

    # ── embeddings ──

    def embed(
        self,
        texts: str | Iterable[str],
        *,
        normalize: bool | None = None,
        prefix: str | None = None,
        truncate: bool = True,
        dimensions: int | None = None,
        precision: str | Precision = "float32",
        max_batch_tokens: int | None = None,
        prompt_name: str | None = None,
        truncation_direction: str = "right",
    ) -> npt.NDArray[Any]:
        """Embed ``texts`` (a string counts as one text): an array of shape (n, dims), rows in
        input order. Without numpy (Pyodide), a list of n rows instead: ``array('f')``, or
        ``array('b')`` for int8/binary and ``array('B')`` for uint8/ubinary precisions.

        ``normalize``: L2-normalize the vectors; by default as the model does (a
        sentence-transformers model with a Normalize module: all-MiniLM-L6-v2 does).
        ``prompt_name`` prepends the model's prompt of that name (``prompts``), ``prefix`` any
        text; with neither, the model's default prompt applies (usually none). A model whose
        pooling leaves the prompt out (``include_prompt: false``) pools only the text's own
        tokens. ``truncate=False`` raises InputTooLong for a text over ``max_length`` tokens
        instead of cutting it; ``truncation_direction="left"`` keeps the end of a long text
        instead of its start (the template's [CLS]/[SEP] stay). ``dimensions`` keeps the first
        dimensions (Matryoshka), then normalizes. ``precision``: see :class:`Precision` and
        ``docs/python.md``; binary precisions return ``ceil(dims / 8)`` bytes per row.
        ``max_batch_tokens`` overrides the backend's token budget per encoder call.
        """
        vectors, truncated = self.embed_counted(
            texts, normalize=normalize, prefix=prefix, truncate=truncate,
            dimensions=dimensions, precision=precision, max_batch_tokens=max_batch_tokens,
            prompt_name=prompt_name, truncation_direction=truncation_direction)
        if truncated:
            _log.info("%d of %d texts were longer than %d tokens and were truncated",
                      truncated, len(vectors), self.max_length)
        return vectors

    def embed_query(self, texts: str | Iterable[str], **options: Any) -> npt.NDArray[Any]:
        """``embed`` with the model's query prompt (e5-style "query: "; none for MiniLM),
        unless ``prefix`` or ``prompt_name`` is given."""
        if "prefix" not in options and "prompt_name" not in options:
            options["prefix"] = self._manifest.query_prefix
        return self.embed(texts, **options)

    def embed_document(self, texts: str | Iterable[str], **options: Any) -> npt.NDArray[Any]:
        """``embed`` with the model's document prompt (e5-style "passage: "), unless
        ``prefix`` or ``prompt_name`` is given."""
        if "prefix" not in options and "prompt_name" not in options:
            options["prefix"] = self._manifest.document_prefix
        return self.embed(texts, **options)

    def embed_iter(
        self,
        texts: Iterable[str],
        *,
        chunk_size: int = ITER_CHUNK,
        normalize: bool | None = None,
        prefix: str | None = None,
        truncate: bool = True,
        dimensions: int | None = None,
        precision: str | Precision = "float32",
        max_batch_tokens: int | None = None,
        prompt_name: str | None = None,
        truncation_direction: str = "right",
    ) -> Iterator[npt.NDArray[Any]]:
        """Embed a stream of texts with bounded memory: one array per ``chunk_size`` texts.

        Reads ``chunk_size`` texts at a time, so any iterable (a file, a generator) works;
        the arrays, concatenated, equal ``embed(list(texts))``.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise InputError(f"chunk_size must be a positive integer, not {chunk_size!r}")
        opts = self._options(normalize, dimensions, precision, max_batch_tokens,
                             truncation_direction)
        prefix = self.prompt(prefix, prompt_name)
        chunk: list[str] = []
        start = 0
        for text in texts:
            chunk.append(text)
            if len(chunk) >= chunk_size:
                yield self._embed_list(_as_texts(chunk, start), prefix, truncate, opts, start)[0]
                start += len(chunk)
                chunk = []
        if chunk:
            yield self._embed_list(_as_texts(chunk, start), prefix, truncate, opts, start)[0]

    def embed_counted(
        self,
        texts: str | Iterable[str],
        *,
        start: int = 0,
        normalize: bool | None = None,
        prefix: str | None = None,
        truncate: bool = True,
        dimensions: int | None = None,
        precision: str | Precision = "float32",
        max_batch_tokens: int | None = None,
        prompt_name: str | None = None,
        truncation_direction: str = "right",
    ) -> tuple[npt.NDArray[Any], int]:
        """``embed``, and how many of the texts were longer than ``max_length`` and were cut
        (``embed`` logs that count; a caller that reports it itself takes it here): a tuple
        ``(vectors, truncated)``. ``start`` is added to the text indices of errors (the
        position of ``texts`` in a longer stream, as ``embed_iter`` and ``embed -i`` feed it)."""
        opts = self._options(normalize, dimensions, precision, max_batch_tokens,
                             truncation_direction)
        prompt = self.prompt(prefix, prompt_name)
        return self._embed_list(_as_texts(texts, start), prompt, truncate, opts, start)

    def embed_sparse(
        self,
        texts: str | Iterable[str],
        *,
        max_active_dims: int | None = None,
        prefix: str | None = None,
        prompt_name: str | None = None,
        truncate: bool = True,
        max_batch_tokens: int | None = None,
    ) -> list[SparseEmbedding]:
        """Sparse vectors of ``texts`` (a SPLADE model): one :class:`SparseEmbedding` per
        text, in input order — its vocabulary ids (ascending) and their positive weights,
        numpy arrays where numpy is installed, ``array`` rows otherwise. ``max_active_dims``
        keeps each vector's largest entries only (default: the model's own setting, usually
        all). ``prefix``, ``prompt_name``, ``truncate`` and ``max_batch_tokens`` are
        ``embed``'s. Batches are converted as they come, so memory stays bounded by the token
        budget, not by the number of texts."""
        self._require_task("sparse")
        if max_active_dims is not None and (isinstance(max_active_dims, bool) or not isinstance(
                max_active_dims, int) or max_active_dims < 1):
            raise InputError(f"max_active_dims must be a positive integer, "
                             f"not {max_active_dims!r}")
        if max_batch_tokens is not None and (
                not isinstance(max_batch_tokens, int) or max_batch_tokens < 1):
            raise InputError(f"max_batch_tokens must be a positive integer, "
                             f"not {max_batch_tokens!r}")
        top = max_active_dims or self._manifest.head.get("max_active_dims") or None
        items = self._with_prefix(_as_texts(texts), self.prompt(prefix, prompt_name))
        if not items:
            return []
        ids, truncated = self._tokenizer.encode(items, truncate=truncate)
        if truncated:
            _log.info("%d of %d texts were longer than %d tokens and were truncated",
                      truncated, len(items), self.max_length)
        out: list[SparseEmbedding | None] = [None] * len(ids)
        budget = max_batch_tokens or self.max_batch_tokens
        for batch in plan_batches([len(s) for s in ids], budget, self._max_batch_size):
            with self._encode_lock:
                block = self._sparse_rows([ids[i] for i in batch])
            for i, vector in zip(batch, from_dense_rows(block, top), strict=True):
                out[i] = vector
        return [v for v in out if v is not None]

    def _sparse_rows(self, ids: list[list[int]]) -> Any:
        """SPLADE weights (B, V) of one batch: the engine backends' masked-LM head
        (``sparse``, pooled as the model says), or the ONNX graph's ``sparse_embedding``."""
        sparse = getattr(self._backend, "sparse", None)
        if sparse is not None:
            if not env.HOST.numpy and hasattr(self._backend, "sparse_rows"):
                return self._backend.sparse_rows(ids)  # array rows (Pyodide without numpy)
            return sparse(ids)[0]
        return self._output.encode(self._backend, ids, None)

    def decode_sparse(self, vector: SparseEmbedding,
                      top_k: int | None = None) -> list[tuple[str, float]]:
        """The vocabulary entries of ``vector`` as (token, weight), largest first (at most
        ``top_k``): what a SPLADE vector means. Needs Hugging Face ``tokenizers``."""
        tok = getattr(self._tokenizer, "_truncating", None)
        if tok is None:
            raise InputError("decode_sparse needs the model's tokenizer.json (the onnx "
                             "backend's tokenizer)")
        pairs = sorted(zip(vector.indices, vector.values, strict=True),
                       key=lambda p: (-float(p[1]), int(p[0])))[:top_k]
        return [(str(tok.id_to_token(int(i))), float(v)) for i, v in pairs]

    def token_embeddings(
        self,
        texts: str | Iterable[str],
        *,
        prefix: str | None = None,
        prompt_name: str | None = None,
        truncate: bool = True,
        truncation_direction: str = "right",
    ) -> list[npt.NDArray[np.float32]]:
        """The encoder's last hidden states of each text, before pooling: one float32 array
        of shape (tokens, hidden size) per text, special tokens included (as
        sentence-transformers' ``output_value="token_embeddings"``).

        The engine returns pooled vectors only, so these come from onnxruntime running the
        same variant's ONNX model (the native and wasm backends open it on first use). Needs
        numpy and an exported model directory.
        """
        left = _left(truncation_direction)
        items = self._with_prefix(_as_texts(texts), self.prompt(prefix, prompt_name))
        if not items:
            return []
        ids, _ = self._tokenizer.encode(items, truncate=truncate, left=left)
        session = self._token_states()
        out: list[Any] = [None] * len(ids)
        for batch in plan_batches([len(s) for s in ids], self._choice.max_batch_tokens,
                                  self._max_batch_size):
            for i, states in zip(batch, session.token_embeddings([ids[i] for i in batch]),
                                 strict=True):
                out[i] = states
        return out

    def _token_states(self) -> Any:
        with self._calibration_lock:
            if self._states is None:
                if hasattr(self._backend, "token_embeddings"):
                    self._states = self._backend
                else:
                    if not (self._model_dir / "edgembed.json").is_file():
                        raise BackendUnavailable(
                            "token embeddings need the exported model's ONNX file; load the "
                            "model directory, not a bundle")
                    from .backends.onnx import OnnxBackend

                    path = self._manifest.variant_path(self._model_dir, self.variant)
                    self._states = OnnxBackend(path, device="cpu")
            return self._states

    def quantization_ranges(
        self, *, normalize: bool | None = None, dimensions: int | None = None
    ) -> Any:
        """The per-dimension [lo, hi] used by the int8 and uint8 precisions: an array of shape
        (2, dims), or without numpy two ``array('f')``.

        Measured once per Embedder: the minimum and maximum of each dimension over the
        embeddings of the calibration corpus (the 262 varied texts shipped with the package),
        after the same ``normalize``/``dimensions`` processing as the output.
        """
        with self._calibration_lock:
            if self._calibration is None:
                self._calibration = self._calibration_vectors()
        norm = self._manifest.normalize if normalize is None else bool(normalize)
        return self._output.ranges(self._output.finish(self._calibration, norm, dimensions))

    # ── internals ──

    def _require_task(self, task: str) -> None:
        if self.task == task:
            return
        if self.task == "sparse":
            raise InputError(f"{self.model_name} is a sparse (SPLADE) model: embed_sparse gives "
                             "its vectors")
        raise InputError(f"{self.model_name} is an embedding model, not a sparse one: embed "
                         "gives its vectors")

    def _calibration_vectors(self) -> Any:
        """Pooled vectors of the calibration corpus, cached beside the model once computed.

        The cache file is named after the variant file's sha256, so a re-export invalidates
        it; a model directory that cannot be written to just keeps them in memory.
        """
        texts = calibration_texts()
        entry = self._manifest.variants.get(self.variant)
        cache = (self._model_dir / f"calibration.{self.variant}.{entry.sha256[:16]}.npy"
                 if entry is not None and self.backend not in ("wasm", "native") else None)
        if cache is not None:
            cached = self._output.load(cache, len(texts), self.dim)
            if cached is not None:
                return cached
        ids, _ = self._tokenizer.encode(texts, truncate=True)
        vectors = self._pooled(ids, self._choice.max_batch_tokens)
        if cache is not None:
            self._output.save(cache, vectors)
        return vectors

    def _options(
        self,
        normalize: bool | None,
        dimensions: int | None,
        precision: str | Precision,
        max_batch_tokens: int | None,
        direction: str = "right",
    ) -> _Options:
        if dimensions is not None and (
            isinstance(dimensions, bool) or not isinstance(dimensions, int)
            or not 1 <= dimensions <= self.dim
        ):
            raise InputError(f"dimensions must be an integer from 1 to {self.dim}, "
                             f"not {dimensions!r}")
        if max_batch_tokens is not None and (
            not isinstance(max_batch_tokens, int) or max_batch_tokens < 1
        ):
            raise InputError(f"max_batch_tokens must be a positive integer, "
                             f"not {max_batch_tokens!r}")
        norm = self._manifest.normalize if normalize is None else bool(normalize)
        return (norm, dimensions, precision_of(precision),
                max_batch_tokens or self._choice.max_batch_tokens, _left(direction))

    def _with_prefix(self, texts: list[str], prefix: str | None) -> list[str]:
        if not prefix:
            return texts
        return [prefix + t for t in texts]

    def _embed_list(
        self,
        items: list[str],
        prefix: str | None,
        truncate: bool,
        opts: _Options,
        start: int = 0,
    ) -> tuple[Any, int]:
        normalize, dimensions, precision, budget, left = opts
        self._require_task("embedding")
        output = self._output
        if not items:
            return output.empty(dimensions or self.dim, precision), 0
        ids, truncated = self._tokenizer.encode(self._with_prefix(items, prefix),
                                                truncate=truncate, start=start, left=left)
        skip = 0  # the prompt's tokens, left out of pooling by include_prompt: false models
        if prefix and not self._manifest.include_prompt:
            skip = self._tokenizer.prompt_length(prefix)
        vectors = output.finish(self._pooled(ids, budget, skip), normalize, dimensions)
        if precision is Precision.FLOAT32:
            return vectors, truncated
        ranges = None
        if precision in (Precision.INT8, Precision.UINT8):
            ranges = self.quantization_ranges(normalize=normalize, dimensions=dimensions)
        return output.quantize(vectors, precision, ranges), truncated

    def _pooled(self, ids: list[list[int]], budget: int, prompt_tokens: int = 0) -> Any:
        """Pooled vectors of ``ids`` in input order, computed in length-sorted batches;
        ``prompt_tokens``: how many leading tokens of each text pooling leaves out."""
        output = self._output
        out = output.alloc(len(ids), self.dim)
        for batch in plan_batches([len(s) for s in ids], budget, self._max_batch_size):
            lengths = [prompt_tokens] * len(batch) if prompt_tokens else None
            with self._encode_lock:
                block = output.encode(self._backend, [ids[i] for i in batch], lengths)
            output.put(out, batch, block)
        return out
