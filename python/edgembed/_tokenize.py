"""Tokenization on the Python host: Hugging Face ``tokenizers`` configured the edgembed way.

No padding (batches are padded to their own longest text later) and truncation at the
model's ``max_seq_length`` — not at the value tokenizer.json may carry (MiniLM's says 128).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InvalidModelDir

__all__ = ["load_tokenizer"]


def load_tokenizer(source_dir: Path, max_length: int, *, truncate: bool = True) -> Any:
    from tokenizers import Tokenizer

    path = source_dir / "tokenizer.json"
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on parse errors
        raise InvalidModelDir(
            f"{path} cannot be loaded ({exc}); run `embed pull --force MODEL`"
        ) from None
    tok.no_padding()
    if truncate:
        tok.enable_truncation(max_length)
    else:
        tok.no_truncation()
    return tok
