"""``embed TEXT …`` / ``embed -i FILE``: the embedding command itself (files through
``edgembed.io``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import __version__
from .._unicode import argv_text
from ..errors import InputError
from ..io.progress import ProgressBar
from ..io.readers import Row, RowReader
from ..io.storage import same_file
from .options import (
    Usage,
    add_format_options,
    add_model_options,
    add_vector_options,
    load_embedder,
    positive_int,
    say,
)
from .registry import Command

if TYPE_CHECKING:
    from ..io.writers import VectorWriter

__all__ = ["embed_parser", "run_embed"]


_EMBED_EXAMPLES = """\
examples:
  embed "The quick brown fox" "A fast auburn fox"     one JSON array per line
  embed -i notes.txt -o notes.npy                     a text per line → (n, 384) float32
  embed -i docs.jsonl --field body --id-column id -o vectors.parquet
  cat questions.txt | embed -i - --query --precision int8 -o - > vectors.jsonl
  embed --dimensions 128 --model ./my-model "hello"   Matryoshka-truncated, renormalized
  embed --model ./e5-model --prompt-name query "q"    the model's "query" prompt first
  embed similarity "a cat" "a kitten"                 cosine similarity
  embed -m splade-tiny -i notes.txt -o sparse.jsonl   a SPLADE model: indices and values
  embed rerank "a query" -i docs.txt --top-n 5        documents ranked by a cross-encoder
  embed models | pull NAME | export NAME | info NAME  manage models

A text equal to a command's name, or one letter away from one, needs `--` first:
embed -- models (a lone `embed modles` asks whether `embed models` was meant).
`embed similarity` prints a line per other text: the cosine, then the pair (JSON strings).
"""


def embed_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
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
    add_format_options(io_g, "the input's name (stdin: txt)", "the output's name (stdout: jsonl)")
    io_g.add_argument("--errors", choices=("strict", "replace"), default="strict",
                      help="invalid UTF-8 in the input: stop with the line number (strict, "
                           "default) or replace it with U+FFFD")
    v, prompts = add_vector_options(p, "an error")
    prompts.add_argument("--prompt-name", metavar="NAME",
                         help="apply the model's prompt called NAME (`embed info` lists them)")
    norm = v.add_mutually_exclusive_group()
    norm.add_argument("--normalize", action="store_true", default=None,
                      help="L2-normalize the vectors (default: as the model does)")
    norm.add_argument("--no-normalize", action="store_false", dest="normalize",
                      help="do not L2-normalize the vectors")
    v.add_argument("--batch-tokens", type=positive_int, metavar="N",
                   help="padded tokens per encoder call (default: per backend)")
    add_model_options(p)
    return p


def run_embed(args: argparse.Namespace) -> int:
    from ..io.writers import VectorWriter
    from ..jobs.stream import VectorOptions, embed_into
    from ..output.arrays import output_layout

    if args.input is None and not args.texts:
        raise Usage("give texts to embed or -i FILE (see embed --help)")
    if args.input is not None and args.texts:
        raise Usage("give texts as arguments or -i FILE, not both")
    for opt, fmts in (("field", ("jsonl",)), ("column", ("csv", "parquet"))):
        if getattr(args, opt) and args.input is None:
            raise Usage(f"--{opt} applies to -i FILE ({'/'.join(fmts)})")
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
        embedder = load_embedder(args)
        sparse = embedder.task == "sparse"
        if sparse:
            _check_sparse_options(args, output)
        else:
            embedder.embed([], dimensions=args.dimensions, precision=args.precision,
                           max_batch_tokens=args.batch_tokens,
                           prompt_name=args.prompt_name)  # bad options fail before any work
        prefix = None
        if args.prompt == "query":
            prefix = embedder.manifest.query_prefix
        elif args.prompt == "document":
            prefix = embedder.manifest.document_prefix
        rows: Iterable[Row] = (
            source.valid_rows() if source is not None
            else (Row(i, argv_text(t)) for i, t in enumerate(args.texts)))
        if source is not None:
            output.id_type = source.id_type
            reader = source
            bar = ProgressBar(_show_bar(args), total_rows=source.total_rows,
                              position=lambda: reader.position, unit="texts")
        done = embed_into(
            embedder, rows, output,
            VectorOptions(normalize=args.normalize, prefix=prefix, prompt_name=args.prompt_name,
                          truncate=not args.no_truncate, dimensions=args.dimensions,
                          precision=args.precision, max_batch_tokens=args.batch_tokens),
            on_chunk=None if bar is None else bar.update)
        if bar is not None:
            bar.close()
        output.finish(*output_layout(args.dimensions or embedder.dim, args.precision))
        if done.truncated:
            say(args, f"{done.truncated} of {done.rows} texts were longer than "
                       f"{embedder.max_length} tokens and were truncated (--no-truncate makes "
                       "that an error)")
        return 0
    except BaseException:
        if bar is not None:
            bar.close()
        output.abort()
        raise
    finally:
        if source is not None:
            source.close()


def _check_sparse_options(args: argparse.Namespace, output: VectorWriter) -> None:
    """A SPLADE model's vectors are sparse: no Matryoshka, precisions or normalization, and
    they go to .jsonl or .parquet (or stdout)."""
    for flag, given in (("--dimensions", args.dimensions is not None),
                        ("--precision", args.precision != "float32"),
                        ("--normalize/--no-normalize", args.normalize is not None)):
        if given:
            raise InputError(f"{flag} applies to dense vectors; {args.model} is a sparse "
                             "(SPLADE) model, whose vectors are written as they are")
    if output.format == "npy":
        raise InputError(f"-o {args.output}: sparse vectors (a SPLADE model's) are written as "
                         ".jsonl or .parquet, not .npy")
    output.sparse = True


def _show_bar(args: argparse.Namespace) -> bool:
    if args.quiet or not sys.stderr.isatty():
        return False
    to_stdout = args.output in (None, "-")
    return not to_stdout or sys.stdout.isatty()


def _version_text() -> str:
    try:
        import onnxruntime

        ort = f", onnxruntime {onnxruntime.__version__}"
    except ImportError:  # pragma: no cover - a core dependency
        ort = ""
    return f"embed (edgembed) {__version__}{ort}"
