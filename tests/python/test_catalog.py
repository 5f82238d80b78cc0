"""The catalog format: every entry well formed and pinned, the older form still read, and a
broken entry refused with the file and the field."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import CATALOG
from edgembed import InvalidModelDir, catalog
from edgembed.catalog import (
    ModelSpec,
    Pooling,
    SourceKind,
    Task,
    find_hub_entry,
)

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def test_every_entry_is_complete_and_pinned() -> None:
    specs = catalog.catalog()
    assert len(specs) == len(list(CATALOG.glob("*.json")))
    for spec in specs.values():
        assert spec.description and spec.license and spec.license_note, spec.name
        assert spec.sources, spec.name
        assert all(HEX64.match(d) for d in spec.files.values()), spec.name
        for source in spec.sources:
            if source.kind is SourceKind.HUB:
                # A commit, and where it comes from; never a branch in the catalog.
                assert source.pinned and source.revision_note, (spec.name, source)
            elif source.kind is SourceKind.WHEEL:
                assert source.package and re.match(r"^\d", source.version), spec.name
            else:
                assert all(HEX64.match(p.sha256) for p in source.parts), spec.name
        if spec.needs_hub:  # nothing pins the files yet: the entry says what is unverified
            assert not spec.files and spec.unverified, spec.name
        else:  # offline sources: the weights and every file the exporter reads are pinned
            assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(spec.files)
        if spec.task is Task.EMBEDDING and spec.family == "bert":
            assert spec.pooling in (Pooling.MEAN, Pooling.CLS), spec.name


def test_specs_are_frozen_and_prefixes_come_from_prompts() -> None:
    spec = catalog.get_spec("e5-small-v2")
    assert (spec.query_prefix, spec.document_prefix) == ("query: ", "passage: ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.dim = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.prompts["query"] = "x"  # type: ignore[index]
    assert find_hub_entry("baai/BGE-SMALL-EN-V1.5") is catalog.get_spec("bge-small-en-v1.5")
    assert find_hub_entry("nobody/nothing") is None


def _entry(**changes: object) -> dict[str, object]:
    entry: dict[str, object] = json.loads((CATALOG / "all-minilm-l6-v2.json").read_text())
    entry.update(changes)
    return entry


def test_the_older_form_is_read() -> None:
    old = _entry(prefixes={"query": "q: ", "document": "d: "}, architecture="bert")
    for key in ("prompts", "family", "task", "tokenizer"):
        old.pop(key)
    spec = ModelSpec.from_json(old)
    assert (spec.family, spec.task, spec.tokenizer) == ("bert", Task.EMBEDDING, "wordpiece")
    assert (spec.query_prefix, spec.document_prefix) == ("q: ", "d: ")


@pytest.mark.parametrize(("change", "message"), [
    ({"dim": "384"}, "field 'dim' should be a int"),
    ({"pooling": "median"}, "pooling 'median' is not one of cls, mean, max"),
    ({"family": "gpt2"}, "family 'gpt2' is not one of bert, distilbert"),
    ({"task": "chat"}, "task 'chat' is not one of embedding, rerank, sparse"),
    ({"prompts": {"query": 1}}, r"prompts\['query'\] should be a string"),
    ({"sources": [{"kind": "ftp"}]}, r"sources\[0\]: kind 'ftp' is not one of wheel"),
    ({"sources": [{"kind": "wheel", "package": "x"}]}, r"sources\[0\]: field 'version' is miss"),
    ({"sources": [{"kind": "wheel-archive", "parts": []}]}, "lists no archive part"),
    ({"sources": [{"kind": "wheel-archive", "parts": [{"package": "p", "version": "1"}]}]},
     r"parts\[0\]: field 'member' is missing"),
])
def test_a_broken_entry_names_the_field(change: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidModelDir, match=message):
        ModelSpec.from_json(_entry(**change), "entry x.json")


def test_a_broken_catalog_file_names_itself(temp_catalog: Path) -> None:
    (temp_catalog / "renamed.json").write_text(json.dumps(_entry()))
    catalog.catalog.cache_clear()
    with pytest.raises(InvalidModelDir, match=r"renamed\.json: name 'all-minilm-l6-v2' differs"):
        catalog.catalog()
    (temp_catalog / "renamed.json").write_text("{")
    catalog.catalog.cache_clear()
    with pytest.raises(InvalidModelDir, match=r"renamed\.json is not valid JSON"):
        catalog.catalog()
