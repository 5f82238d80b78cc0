"""What this build of edgembed can run, asked in one place.

A catalog entry can name a model this build cannot run yet: a task whose API is not there,
an architecture family the exporter does not build, or — on the engine backends (native,
wasm) only — a family, pooling or tokenizer the C engine does not implement. ``embed models``
shows what each entry waits for, ``export`` refuses a model it cannot build with the reason,
and the engine backends refuse what the engine cannot run; the onnx backend runs every family
the exporter builds and tokenizes with Hugging Face ``tokenizers`` (any tokenizer kind).

The sets below grow with the code that implements them; ``tests/python/test_capabilities.py``
checks each against the code itself (the directory reader, the graph builder, the bundle
writer and its tokenizer tables).
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Family, ModelSpec, Pooling, Task

__all__ = [
    "ENGINE_FAMILIES",
    "ENGINE_POOLINGS",
    "ENGINE_TASKS",
    "ENGINE_TOKENIZERS",
    "EXPORT_FAMILIES",
    "EXPORT_POOLINGS",
    "TASKS",
    "Gap",
    "export_gaps",
    "gaps",
]

EXPORT_FAMILIES = frozenset(f.value for f in Family)  # the ONNX graph builder (export/graph.py)
EXPORT_POOLINGS = frozenset(Pooling)  # every sentence-transformers mode, inside that graph
ENGINE_FAMILIES = frozenset(f.value for f in Family)  # the C engine (export/bundle.py writes it)
ENGINE_POOLINGS = frozenset(Pooling)  # every sentence-transformers mode (runtime/src/pooling.c)
ENGINE_TOKENIZERS = frozenset({"wordpiece", "unigram", "bpe"})  # the engine's tokenizer stages
TASKS = frozenset({Task.EMBEDDING, Task.RERANK, Task.SPARSE})  # Embedder, Reranker, embed_sparse
ENGINE_TASKS = frozenset(TASKS)  # pooling, the classification head, the MLM head (heads.c)

_TASK_API = {Task.RERANK: "the rerank API (score query-document pairs)",
             Task.SPARSE: "the sparse-embedding API (SPLADE vectors)"}


@dataclass(frozen=True)
class Gap:
    """One thing a model needs that this build lacks. ``engine_only``: the onnx backend can
    still run the model; only the engine backends (native, wasm) cannot."""

    what: str
    engine_only: bool = False

    def __str__(self) -> str:
        return self.what


def gaps(spec: ModelSpec) -> tuple[Gap, ...]:
    """Everything ``spec`` waits for in this build, most blocking first (empty: runs everywhere)."""
    out: list[Gap] = []
    if spec.task not in TASKS:
        out.append(Gap(_TASK_API.get(spec.task, f"the {spec.task.value} API")))
    onnx_runs_it = "backend 'onnx' runs it now"
    if spec.family and spec.family not in EXPORT_FAMILIES:
        out.append(Gap(f"{spec.family} models in the exporter "
                       f"(this build exports {', '.join(sorted(EXPORT_FAMILIES))})"))
    elif spec.family and spec.family not in ENGINE_FAMILIES:
        out.append(Gap(f"{spec.family} models in the engine ({onnx_runs_it})", engine_only=True))
    if spec.task is Task.EMBEDDING:
        if spec.pooling not in EXPORT_POOLINGS:
            out.append(Gap(f"{spec.pooling.value} pooling in the exporter"))
        elif spec.pooling not in ENGINE_POOLINGS:
            out.append(Gap(f"{spec.pooling.value} pooling in the engine ({onnx_runs_it})",
                           engine_only=True))
    if spec.task in TASKS and spec.task not in ENGINE_TASKS:
        out.append(Gap(f"the {spec.task.value} head in the engine ({onnx_runs_it})",
                       engine_only=True))
    if spec.tokenizer and spec.tokenizer not in ENGINE_TOKENIZERS:
        out.append(Gap(f"the {spec.tokenizer} tokenizer in the engine ({onnx_runs_it})",
                       engine_only=True))
    return tuple(out)


def export_gaps(spec: ModelSpec) -> tuple[Gap, ...]:
    """What stops ``spec`` from being exported (and so from running on any backend)."""
    return tuple(g for g in gaps(spec) if not g.engine_only)
