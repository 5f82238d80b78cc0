"""The tiny models of ``tiny_models.py`` built for a test module: exported to ONNX variants or
written as engine bundles, each once per module and only when a test asks for it.

``by_name(make, folder)`` makes the module-scoped fixture (a test module writes
``bundled = by_name(Bundled, "tiny-emb")``): the fixture is a function of a model's name that
builds ``make(name, folder)`` on first use and keeps it. ``ExportedModel`` is the part every
ONNX-export test shares (the description, the weights, one onnxruntime session per variant);
``task_hint``, ``head_inputs`` and ``prompt_of`` are what the tests of heads and prompts share.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from edgembed._tokenize import HFPairTokenizer, load_tokenizer
from edgembed.backends.native import native_available
from edgembed.backends.onnx import OnnxBackend
from edgembed.export.variants import Variant, build_variant
from edgembed.model_dir import ModelDescription, Task, load_weights, read_model_dir
from tiny_models import HeadReference, model_dir, texts

T = TypeVar("T")


def by_name(make: Callable[[str, Path], T], folder: str) -> Any:
    """A module-scoped fixture: ``fixture(name)`` is ``make(name, <a temporary folder>)``,
    built on first use and kept for the module's other tests."""

    @pytest.fixture(scope="module")
    def built(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], T]:
        root = tmp_path_factory.mktemp(folder)
        cache: dict[str, T] = {}

        def get(name: str) -> T:
            if name not in cache:
                cache[name] = make(name, root)
            return cache[name]

        return get

    return built


def need_native() -> None:
    """Skip the test where the native engine cannot load (the reason is pytest's message)."""
    ok, why = native_available()
    if not ok:
        pytest.skip(why)


def task_hint(name: str) -> Task | None:
    """The task a model's catalog entry would name: the bare SPLADE model's directory does not
    say it is one."""
    return Task.SPARSE if name.endswith("-bare") else None


def head_inputs(desc: ModelDescription, ref: HeadReference) -> tuple[list[list[int]],
                                                                      list[list[int]]]:
    """The ids and token types the reference fed the model: its query-document pairs for a
    cross-encoder, every reference text for a SPLADE model (types all 0)."""
    t = texts()
    if desc.task is Task.RERANK:
        tok = HFPairTokenizer(desc.source_dir, desc.max_seq_length)
        ids, types, _ = tok.encode([(t[q], t[d]) for q, d in ref.pairs])
        return ids, types
    single = load_tokenizer(desc.source_dir, desc.max_seq_length)
    ids = [e.ids for e in single.encode_batch(t)]
    return ids, [[0] * len(s) for s in ids]


def prompt_of(desc: ModelDescription, set_name: str) -> str:
    """The prompt of a reference set (default, query, document); "" when the model names none
    for it (embed_query / embed_document never fall back to the default)."""
    prompt_name = {"default": desc.default_prompt_name, "query": desc.query_prompt_name,
                   "document": desc.document_prompt_name}[set_name]
    if prompt_name is None:
        return ""
    return desc.prompts[prompt_name]


class ExportedModel:
    """One model's description and weights, and its variants exported as they are asked for."""

    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.desc: ModelDescription = read_model_dir(model_dir(name), task=task_hint(name))
        self.weights = load_weights(self.desc)
        self.root = root
        self._backends: dict[Variant, OnnxBackend] = {}

    def backend(self, variant: Variant) -> OnnxBackend:
        if variant not in self._backends:
            import onnx

            model = build_variant(variant, self.desc, self.weights)
            onnx.checker.check_model(model)
            path = self.root / f"{self.name}.{variant.value}.onnx"
            onnx.save(model, str(path))
            self._backends[variant] = OnnxBackend(path, threads=1)
        return self._backends[variant]
