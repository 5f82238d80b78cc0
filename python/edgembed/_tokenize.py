"""Tokenization on the Python host: Hugging Face ``tokenizers`` configured the edgembed way.

No padding (batches are padded to their own longest text later) and truncation at the
model's ``max_seq_length`` — not at the value tokenizer.json may carry (MiniLM's says 128).
A model with ``do_lower_case`` (sentence_bert_config.json) gets a Lowercase normalizer before
the tokenizer's own unless it already has one, exactly as sentence-transformers does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import InvalidModelDir

__all__ = ["load_tokenizer"]


def load_tokenizer(
    source_dir: Path, max_length: int, *, truncate: bool = True, lowercase: bool = False
) -> Any:
    from tokenizers import Tokenizer, normalizers

    path = source_dir / "tokenizer.json"
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on parse errors
        raise InvalidModelDir(
            f"{path} cannot be loaded ({exc}); run `embed pull --force MODEL`"
        ) from None
    tok.no_padding()
    if lowercase:
        current = tok.normalizer
        if isinstance(current, normalizers.Sequence):
            parts = list(current)  # type: ignore[call-overload]
        else:
            parts = [] if current is None else [current]
        if not any(isinstance(n, normalizers.Lowercase) for n in parts):
            tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), *parts])
    if truncate:
        tok.enable_truncation(max_length)
    else:
        tok.no_truncation()
    return tok
