"""Write tokenizer-only bundles: a bundle holding just a tokenizer's tables (no model).

    python runtime/tools/tokenizer_bundles.py OUT_DIR [HF_DIR ...]

For each Hugging Face directory (default: every tokenizer of tests/fixtures/tokenizers/), the
tables of ``edgembed.export.tokenizer_tables`` in the bundle container (runtime/include/
edgembed.h), as OUT_DIR/<directory name>.emb. The engine reads them with
``emb_tokenizer_from_bundle_bytes`` (runtime/src/tokenizer.h): the fuzz targets
(tests/runtime/fuzz/fuzz_tokenizer_general.c, fuzz_tokenizer_tables.c) and the parity tests use
them. Build outputs, never committed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "tokenizers"
KINDS = ["xlmr-unigram", "unigram-byte-fallback", "roberta-bpe", "modernbert-bpe", "split-bpe"]


def bundle_bytes(meta: dict[str, str], tensors: list[tuple[str, Any]]) -> bytes:
    """The bundle container (edgembed.export.bundle.bundle_container: 64-byte aligned tensors,
    the CRC-32 of the whole file) around the tables."""
    from edgembed.export.bundle import bundle_container

    return b"".join(bundle_container(meta, tensors))


def tokenizer_bundle(hf_dir: Path) -> tuple[bytes, int]:
    """(bundle bytes, vocabulary size) of a directory's tokenizer."""
    from edgembed.export.tokenizer_tables import tokenizer_tables

    meta, tensors, n_vocab = tokenizer_tables(hf_dir)
    return bundle_bytes(meta, tensors), n_vocab


def main() -> None:
    out = Path(sys.argv[1])
    dirs = [Path(d) for d in sys.argv[2:]] or [FIXTURES / k for k in KINDS]
    out.mkdir(parents=True, exist_ok=True)
    for d in dirs:
        data, n_vocab = tokenizer_bundle(d)
        (out / f"{d.name}.emb").write_bytes(data)
        print(f"{out / (d.name + '.emb')} {n_vocab}")


if __name__ == "__main__":
    main()
