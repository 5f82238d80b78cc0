"""Pieces the ``embed`` commands share: model, file and vector options, argument types, notes
on stderr."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..io.formats import INPUT_FORMATS, OUTPUT_FORMATS

if TYPE_CHECKING:
    from ..embedder import Embedder

__all__ = [
    "BACKEND_HELP",
    "Usage",
    "add_backend_option",
    "add_format_options",
    "add_model_options",
    "add_vector_options",
    "backend_arg",
    "load_embedder",
    "positive_int",
    "say",
]


class Usage(Exception):
    """A command-line usage error: exit 2 with the parser's usage line."""


def say(args: argparse.Namespace, message: str) -> None:
    if not getattr(args, "quiet", False):
        print(f"embed: {message}", file=sys.stderr, flush=True)


def add_model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("-m", "--model", default="all-minilm-l6-v2",
                   help="catalog name (embed models), hub id ORG/NAME[@REVISION], Hugging "
                        "Face directory or exported model directory (default: %(default)s)")
    g.add_argument("--variant", choices=("int8", "fp32", "int4", "fp16"),
                   help="weights to run (default: int8 on CPU, fp16 on CUDA)")
    add_backend_option(g)
    g.add_argument("--threads", type=positive_int, metavar="N",
                   help="CPU threads (default: one per core)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress or notes on stderr")


BACKEND_HELP = ("where the model runs: auto (CUDA when a GPU is usable, else the native engine "
                "for int8, else onnxruntime on the CPU), native (the edgembed engine), onnx "
                "(onnxruntime on the CPU), wasm (the engine under wasmtime), cuda "
                "(default: %(default)s)")


def backend_arg(text: str) -> str:
    """A --backend value: one of BACKENDS; the deprecated ``cpu`` says so and means ``onnx``."""
    from ..backends.choice import BACKENDS, DEPRECATED_BACKENDS

    name = text.lower()
    if name in DEPRECATED_BACKENDS:
        print(f"embed: warning: --backend {text} is deprecated; use "
              f"--backend {DEPRECATED_BACKENDS[name]} (or native)", file=sys.stderr)
        return DEPRECATED_BACKENDS[name]
    if name not in BACKENDS:
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from "
                                          f"{', '.join(BACKENDS)})")
    return name


def add_backend_option(group: Any) -> None:
    """``--backend`` with the one set of names (edgembed.backends.choice.BACKENDS)."""
    from ..backends.choice import BACKENDS

    group.add_argument("--backend", default="auto", type=backend_arg, metavar="{" + ",".join(
        BACKENDS) + "}", help=BACKEND_HELP)


def add_format_options(group: Any, input_name: str, output_name: str) -> None:
    """``--input-format``, ``--output-format``, ``--field``, ``--column``, ``--id-column`` on an
    argument group (``embed -i`` and ``embed batch`` read and write the same formats)."""
    group.add_argument("--input-format", choices=INPUT_FORMATS,
                       help=f"override the format {input_name} implies")
    group.add_argument("--output-format", choices=OUTPUT_FORMATS,
                       help=f"override the format {output_name} implies")
    group.add_argument("--field", help="jsonl: the field holding the text (default: text)")
    group.add_argument("--column", help="csv/parquet: the column holding the text "
                                        "(default: text)")
    group.add_argument("--id-column", metavar="NAME",
                       help="jsonl/csv/parquet: a field copied into .jsonl/.parquet output "
                            "beside each vector")


def add_vector_options(p: argparse.ArgumentParser, too_long: str) -> tuple[Any, Any]:
    """The "vectors" group: ``--dimensions``, ``--precision``, ``--query``/``--document``
    (``args.prompt``), ``--no-truncate`` (``too_long``: what a text over the model's max length
    then is). Returns the group and the query/document group (mutually exclusive), for a
    command's own options (normalization, other prompts)."""
    v = p.add_argument_group("vectors")
    v.add_argument("--dimensions", type=positive_int, metavar="N",
                   help="keep the first N dimensions and renormalize (Matryoshka)")
    v.add_argument("--precision", default="float32",
                   choices=("float32", "int8", "uint8", "binary", "ubinary"),
                   help="output precision (default: %(default)s; see docs/python.md)")
    prefix = v.add_mutually_exclusive_group()
    prefix.add_argument("--query", dest="prompt", action="store_const", const="query",
                        help="texts are queries: apply the model's query prefix")
    prefix.add_argument("--document", dest="prompt", action="store_const", const="document",
                        help="texts are documents: apply the model's document prefix")
    v.add_argument("--no-truncate", action="store_true",
                   help=f"a text over the model's max length is {too_long}, not cut")
    return v, prefix


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def load_embedder(args: argparse.Namespace) -> Embedder:
    from ..embedder import Embedder

    return Embedder.load(args.model, variant=args.variant, backend=args.backend,
                         threads=args.threads, progress=lambda m: say(args, m))
