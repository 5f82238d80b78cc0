"""``embed bundle MODEL [-o FILE]``: write the C engine's bundle for a model."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write the int8 engine bundle (.emb) that the WebAssembly and native engines load: "
        "configuration, tokenizer vocabulary and pre-packed int8 weights in one file. "
        "Its size and sha256 are recorded in the model's edgembed.json."
    )
    parser.epilog = (
        "examples:\n"
        "  embed bundle all-minilm-l6-v2\n"
        "  embed bundle all-minilm-l6-v2 -o public/minilm.emb"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", nargs="?", default="all-minilm-l6-v2",
                        help="catalog name or Hugging Face directory (default: %(default)s)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="where to write the bundle (default: the model's cache directory)")
    parser.add_argument("--force", action="store_true", help="rewrite an existing bundle")


def run(args: argparse.Namespace) -> int:
    from . import export_bundle

    record, path = export_bundle(args.model, out=args.output, force=args.force)
    print(f"{path}\t{record['size']} bytes\tsha256 {record['sha256']}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="embed bundle")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
