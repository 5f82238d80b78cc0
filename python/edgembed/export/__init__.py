"""Model export: Hugging Face files → ONNX variants with a measured quality report.

``export_model`` is what ``embed export`` runs: pull the source files, build each variant's
graph (``graph.py`` + ``variants.py``), check it with ``onnx.checker``, write it atomically,
measure it against fp32 (``validate.py``) and record everything in the manifest.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

import onnx

from ..backends.onnx import OnnxBackend
from ..catalog import ModelSpec
from ..errors import InputError, UnsupportedArchitecture
from ..manifest import Manifest, VariantEntry
from ..model_dir import ModelDescription, load_weights, read_model_dir
from ..sources import PulledModel, pull, sha256_file
from .validate import Probe
from .variants import VARIANTS, Variant, build_variant

__all__ = ["DEFAULT_VARIANTS", "describe_pulled", "export_bundle", "export_model",
           "parse_variants"]

DEFAULT_VARIANTS = ("fp32", "int8")


def parse_variants(text: str | Iterable[str]) -> list[Variant]:
    items = [v.strip() for v in text.split(",")] if isinstance(text, str) else list(text)
    out: list[Variant] = []
    for item in items:
        if not item:
            continue
        try:
            v = Variant(item.lower())
        except ValueError:
            known = ", ".join(v.value for v in Variant)
            raise InputError(f"unknown variant {item!r}; choose from {known}") from None
        if v not in out:
            out.append(v)
    if not out:
        raise InputError("no variant given; e.g. --variants fp32,int8")
    return out


def _write_model(model: onnx.ModelProto, path: Path) -> None:
    onnx.checker.check_model(model)
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def describe_pulled(pulled: PulledModel) -> ModelDescription:
    """The description of a pulled model's source files, checked against its catalog entry."""
    from ..sources import check_catalog_entry

    desc = read_model_dir(pulled.source_dir, pulled.spec.name, task=pulled.spec.task)
    check_catalog_entry(pulled.spec, desc)
    return desc


def _require_exportable(spec: ModelSpec) -> None:
    from ..capabilities import export_gaps

    missing = export_gaps(spec)
    if missing:
        raise UnsupportedArchitecture(
            f"{spec.name} cannot be exported by this build: it waits for "
            + "; ".join(str(g) for g in missing) + " (`embed models` shows what each "
            "catalog model waits for)")


def _require_engine_task(pulled: PulledModel) -> None:
    """The engine bundle holds what the engine runs: a model of a task the engine has no head
    for is refused, not bundled as an embedding model (SPLADE-tiny's files alone read as a
    plain encoder: the catalog's task goes to the bundle writer too)."""
    from ..capabilities import ENGINE_TASKS

    task = describe_pulled(pulled).task
    if task not in ENGINE_TASKS:
        raise UnsupportedArchitecture(
            f"{pulled.spec.name}: the engine bundle holds embedding models; this is a "
            f"{task.value} model, which the engine cannot run yet (its head is not in the "
            "engine); run it with backend='onnx'")


def _manifest_for(pulled: PulledModel, desc: ModelDescription) -> Manifest:
    spec: ModelSpec = pulled.spec
    from ..sources import FILES_RECORD  # the digests recorded at pull time

    record = pulled.source_dir / FILES_RECORD
    import json

    files = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    pooling = "+".join(m.value for m in desc.pooling.modes) if desc.pooling else ""
    # embed_query / embed_document: a catalog entry's query / document prompts, else the
    # model's own; prompt_name= knows the model's prompts and the catalog entry's
    from ..catalog import catalog

    prompts = dict(desc.prompts)
    query = prompts.get(desc.query_prompt_name or "", "")
    document = prompts.get(desc.document_prompt_name or "", "")
    if spec.name in catalog():
        query, document = spec.query_prefix or query, spec.document_prefix or document
        for key, text in spec.prompts.items():
            prompts.setdefault(key, text)
    return Manifest(
        name=spec.name, dim=desc.output_dim, max_length=desc.max_seq_length,
        pooling=pooling, normalize=desc.normalize,
        query_prefix=query, document_prefix=document,
        license=spec.license, source=pulled.source, source_files=files,
        family=desc.encoder.family.value, prompts=prompts,
        default_prompt_name=desc.default_prompt_name,
        include_prompt=desc.pooling.include_prompt if desc.pooling else True,
        do_lower_case=desc.do_lower_case, similarity_fn_name=desc.similarity_fn_name.value,
        task=desc.task.value, head=dict(desc.summary().get("head", {})),
    )


def export_model(
    model: str | os.PathLike[str],
    *,
    variants: Iterable[str] | str = DEFAULT_VARIANTS,
    force: bool = False,
    threads: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Manifest, Path]:
    """Export ``variants`` of ``model`` (catalog name or local directory) into its cache dir.

    Variants already exported and intact are kept unless ``force``. Returns the manifest and
    the model directory.
    """
    wanted = parse_variants(variants)
    say = progress or (lambda _msg: None)
    pulled = pull(model, progress=say)
    _require_exportable(pulled.spec)
    model_dir = pulled.dir
    desc = describe_pulled(pulled)
    try:
        manifest = Manifest.load(model_dir)
    except Exception:
        manifest = _manifest_for(pulled, desc)
    todo = [v for v in wanted if force or v.value not in manifest.variants
            or not (model_dir / manifest.variants[v.value].file).is_file()]
    if not todo:
        return manifest, model_dir

    weights = load_weights(desc)
    probe = Probe(desc, pulled.source_dir)

    fp32_path = model_dir / "model.fp32.onnx"
    if Variant.FP32 in todo or not fp32_path.is_file():
        say("building fp32 graph")
        _write_model(build_variant(Variant.FP32, desc, weights), fp32_path)
    reference = probe.reference(OnnxBackend(fp32_path, threads=threads))

    for v in [Variant.FP32, *[t for t in todo if t is not Variant.FP32]]:
        path = model_dir / f"model.{v.value}.onnx"
        if v is not Variant.FP32:
            if v not in todo:
                continue
            say(f"building {v.value} graph")
            _write_model(build_variant(v, desc, weights), path)
        elif Variant.FP32 not in wanted and "fp32" not in manifest.variants:
            continue
        say(f"measuring {v.value}")
        quality = probe.measure(OnnxBackend(path, threads=threads), reference)
        manifest.variants[v.value] = VariantEntry(
            file=path.name, size=path.stat().st_size, sha256=sha256_file(path),
            description=VARIANTS[v].description, quality=quality,
        )
    manifest.variants = dict(sorted(manifest.variants.items()))
    manifest.save(model_dir)
    return manifest, model_dir


# a SPLADE model's engine bundle unless asked otherwise (or recorded): fp32 encoder, int8
# decoder rescored exactly — it meets the sparse quality bar and runs faster than onnxruntime's
# fp32 (docs/quantization.md, "Rerankers and SPLADE models"); "int8" is smaller and faster
DEFAULT_SPARSE = "rescored"


def export_bundle(
    model: str | os.PathLike[str],
    *,
    out: str | os.PathLike[str] | None = None,
    force: bool = False,
    attention: str | None = None,
    attention_min_tokens: int | None = None,
    sparse: str | None = None,
) -> tuple[dict[str, object], Path]:
    """Write the C engine's bundle (``<name>.int8.emb``; a SPLADE model's "rescored" one
    ``<name>.rescored.emb``) and record it in the manifest.

    The bundle goes into the model's cache directory unless ``out`` names a file; its size,
    sha256, format version, attention kind and (SPLADE models) sparse scheme are recorded in
    ``edgembed.json`` under ``bundles.int8`` either way. A recorded bundle of another format
    version, attention kind or sparse scheme than asked for is rewritten. ``attention``: "fp32",
    "int8" or "auto" (int8 for each text of at least ``attention_min_tokens`` tokens, default
    AUTO_INT8_MIN_TOKENS, fp32 for shorter ones: the attention's products, docs/quantization.md,
    "Attention"); None keeps the recorded bundle's kind (fp32 for a new one), and a recorded
    "auto" bundle's threshold. ``sparse`` (SPLADE models only): "rescored"
    (fp32 encoder, int8 decoder rescored exactly: fp32's vectors) or "int8" (every layer int8);
    None keeps the recorded bundle's scheme (DEFAULT_SPARSE, rescored, for a new one and for
    one recorded before the option).
    """
    from ..errors import InputError
    from ..model_dir import Task
    from .bundle import (
        ATTENTION_KINDS,
        AUTO_INT8_MIN_TOKENS,
        BUNDLE_VERSION,
        SPARSE_SCHEMES,
        auto_min_tokens,
        write_bundle,
    )

    pulled = pull(model)
    _require_exportable(pulled.spec)
    _require_engine_task(pulled)
    model_dir = pulled.dir
    try:
        manifest = Manifest.load(model_dir)
    except Exception:
        manifest = _manifest_for(pulled, describe_pulled(pulled))
    stem = pulled.spec.name.replace("/", "--")  # a hub id ORG/NAME names one file
    entry = manifest.bundles.get("int8")
    is_sparse = pulled.spec.task is Task.SPARSE or manifest.task == "sparse"
    if attention is not None and attention not in ATTENTION_KINDS:
        raise InputError(f"attention {attention!r}: choose one of {', '.join(ATTENTION_KINDS)}")
    if sparse is not None and sparse not in SPARSE_SCHEMES:
        raise InputError(f"sparse {sparse!r}: choose one of {', '.join(SPARSE_SCHEMES)}")
    if sparse is not None and sparse != "int8" and not is_sparse:
        raise InputError(f"{pulled.spec.name} is not a SPLADE model: sparse={sparse!r} is for "
                         "sparse models only")
    if sparse is None:
        sparse = (str(entry.get("sparse", DEFAULT_SPARSE)) if entry else DEFAULT_SPARSE
                  ) if is_sparse else "int8"
    target = Path(out) if out is not None else model_dir / (
        f"{stem}.rescored.emb" if sparse == "rescored" else f"{stem}.int8.emb")
    if attention is None:
        attention = str(entry.get("attention", "fp32")) if entry else "fp32"
    if attention == "auto" and attention_min_tokens is None and entry \
            and entry.get("attention") == "auto":  # the recorded threshold
        attention_min_tokens = int(str(entry.get("attention_min_tokens", AUTO_INT8_MIN_TOKENS)))
    threshold = auto_min_tokens(attention, attention_min_tokens)
    attention_min_tokens = threshold if attention == "auto" else None
    if (not force and entry and Path(str(entry.get("path", ""))) == target.resolve()
            and entry.get("format_version") == BUNDLE_VERSION
            and entry.get("attention", "fp32") == attention
            and entry.get("attention_min_tokens") == attention_min_tokens
            and entry.get("sparse", "int8") == sparse
            and target.is_file() and target.stat().st_size == entry.get("size")):
        return entry, target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".bundle-", suffix=".emb", dir=target.parent)
    os.close(fd)
    try:
        info = write_bundle(pulled.source_dir, Path(tmp), max_length=pulled.spec.max_seq_length,
                            name=pulled.spec.name, task=pulled.spec.task,
                            attention=attention, attention_min_tokens=attention_min_tokens,
                            sparse=sparse)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    record: dict[str, object] = {
        "file": target.name if target.parent == model_dir else str(target.resolve()),
        "path": str(target.resolve()),
        "size": int(info["size"]),
        "sha256": str(info["sha256"]),
        "scheme": "fp32-rescored" if sparse == "rescored" else "int8-b32",
        "format_version": BUNDLE_VERSION,
        "attention": attention,
    }
    if attention_min_tokens is not None:
        record["attention_min_tokens"] = attention_min_tokens
    if is_sparse:
        record["sparse"] = sparse
    manifest.bundles["int8"] = record
    manifest.save(model_dir)
    return record, target
