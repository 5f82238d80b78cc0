"""``embed bundle MODEL [-o FILE]``: write the C engine's bundle for a model."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write the engine bundle (.emb) that the WebAssembly and native engines load: "
        "configuration, tokenizer vocabulary and pre-packed int8 weights in one file (for a SPLADE "
        "model by default an fp32 encoder and an int8 decoder rescored exactly: --sparse). "
        "Its size and sha256 are recorded in the model's edgembed.json."
    )
    parser.epilog = (
        "examples:\n"
        "  embed bundle all-minilm-l6-v2\n"
        "  embed bundle all-minilm-l6-v2 -o public/minilm.emb\n"
        "  embed bundle splade-tiny --sparse int8"
    )
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("model", nargs="?", default="all-minilm-l6-v2",
                        help="catalog name or Hugging Face directory (default: %(default)s)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="where to write the bundle (default: NAME.int8.emb, a SPLADE "
                             "model's NAME.rescored.emb, in the current directory); the "
                             "engine's own copy stays in the model's cache")
    parser.add_argument("--force", action="store_true", help="rewrite an existing bundle")
    parser.add_argument("--attention", choices=("fp32", "int8", "auto"),
                        help="the attention's products (QKᵀ, P·V): fp32, int8 (a little "
                             "faster on long texts, slower on short ones, slightly less "
                             "accurate) or auto (int8 for each text of at least "
                             "--attention-min-tokens tokens, fp32 for shorter ones; "
                             "docs/quantization.md); default: the cached bundle's, else fp32")
    parser.add_argument("--attention-min-tokens", type=int, metavar="N",
                        help="with --attention auto: the shortest text, in tokens, whose "
                             "attention is int8 (1 .. 65536; default: the cached bundle's, "
                             "else 128)")
    parser.add_argument("--sparse", choices=("rescored", "int8"),
                        help="SPLADE models: 'rescored' (fp32 encoder, int8 decoder whose "
                             "possibly positive logits are recomputed in fp32: fp32's vectors) "
                             "or 'int8' (every layer int8: smaller, faster, misses the sparse "
                             "quality bar; docs/quantization.md); default: the cached bundle's, "
                             "else rescored")


def run(args: argparse.Namespace) -> int:
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from . import export_bundle

    record, cached = export_bundle(args.model, force=args.force, attention=args.attention,
                                   attention_min_tokens=args.attention_min_tokens,
                                   sparse=args.sparse)  # the cache's, recorded
    target = Path(args.output) if args.output else Path.cwd() / cached.name
    if target.is_dir():
        target = target / cached.name
    if not (target.exists() and os.path.samefile(target, cached)):
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".bundle-", suffix=".emb", dir=target.parent)
        os.close(fd)
        try:
            shutil.copyfile(cached, tmp)
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    print(f"{target}\t{record['size']} bytes\tsha256 {record['sha256']}")
    return 0


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="embed bundle")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
