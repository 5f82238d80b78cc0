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

import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "tokenizers"
KINDS = ["xlmr-unigram", "unigram-byte-fallback", "roberta-bpe", "modernbert-bpe", "split-bpe"]
_DTYPES = {np.dtype(np.uint8): "U8", np.dtype(np.int32): "I32", np.dtype(np.float64): "F64"}


def bundle_bytes(meta: dict[str, str], tensors: list[tuple[str, Any]]) -> bytes:
    """The bundle container (64-byte aligned tensors, CRC-32 of the data) around the tables."""
    entries: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, arr in tensors:
        pad = -offset % 64
        if pad:
            entries[f"__pad.{len(chunks)}"] = {"dtype": "U8", "shape": [pad],
                                               "data_offsets": [offset, offset + pad]}
            chunks.append(b"\0" * pad)
            offset += pad
        data = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        entries[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape),
                         "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    region = b"".join(chunks)
    meta = {"edgembed_bundle": "1", **meta, "data_crc32": f"{zlib.crc32(region):08x}"}
    header = json.dumps({"__metadata__": meta, **entries}, separators=(",", ":")).encode("ascii")
    header += b" " * (-(8 + len(header)) % 64)
    return struct.pack("<Q", len(header)) + header + region


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
