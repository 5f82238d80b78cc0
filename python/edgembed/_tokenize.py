"""The Embedder's tokenizers: Hugging Face ``tokenizers`` on the Python host, or the engine's own.

Both give the ids ``tokenizers`` gives for the model's tokenizer.json, with no padding
(batches are padded to their own longest text later) and truncation at the model's
``max_seq_length`` — not at the value tokenizer.json may carry (MiniLM's says 128)::

    HFTokenizer      tokenizers.Tokenizer (CPython; onnxruntime and the native engine)
    EngineTokenizer  the engine's own tokenizer through its backend (bundles, Pyodide)

A model with ``do_lower_case`` (sentence_bert_config.json) gets a Lowercase normalizer before
the tokenizer's own unless it already has one, exactly as sentence-transformers does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from .errors import InputTooLong, InvalidModelDir

__all__ = ["EngineTokenizer", "HFTokenizer", "Tokenizer", "load_tokenizer"]


class Tokenizer(Protocol):
    """What the Embedder asks of a tokenizer."""

    max_length: int

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0
    ) -> tuple[list[list[int]], int]:
        """Token ids per text and how many texts were truncated.

        With ``truncate=False`` and ``check``, a text over max_length raises InputTooLong
        naming its index (``start`` is the index of ``texts[0]`` in the caller's input).
        """
        ...

    def count(self, texts: list[str], truncate: bool) -> list[int]:
        """Tokens each text costs the encoder (its full length when ``truncate`` is off)."""
        ...


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


class HFTokenizer:
    """Two configured HF tokenizers (truncating and not), never reconfigured after load.

    ``tokenizers.Tokenizer`` keeps truncation as mutable state; switching it per call would
    race between threads, so each mode has its own instance.
    """

    def __init__(self, source_dir: Path, max_length: int, *, lowercase: bool = False) -> None:
        self.max_length = max_length
        self._truncating = load_tokenizer(source_dir, max_length, truncate=True,
                                          lowercase=lowercase)
        self._full = load_tokenizer(source_dir, max_length, truncate=False, lowercase=lowercase)

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0
    ) -> tuple[list[list[int]], int]:
        if not texts:
            return [], 0
        if truncate:
            encs = self._truncating.encode_batch(texts)
            return [e.ids for e in encs], sum(1 for e in encs if e.overflowing)
        encs = self._full.encode_batch(texts)
        ids = [e.ids for e in encs]
        for i, seq in enumerate(ids if check else ()):
            if len(seq) > self.max_length:
                raise InputTooLong(
                    f"texts[{start + i}] has {len(seq)} tokens, over the model's max length "
                    f"{self.max_length}; shorten it or embed with truncation on"
                )
        return ids, 0

    def count(self, texts: list[str], truncate: bool) -> list[int]:
        return [len(ids) for ids in self.encode(texts, truncate=truncate, check=False)[0]]


class EngineTokenizer:
    """The engine's own tokenizer, through a backend that has one (the wasm engine)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.max_length: int = backend.max_length

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0
    ) -> tuple[list[list[int]], int]:
        ids: list[list[int]] = []
        truncated = 0
        for i, text in enumerate(texts):
            seq, full = self._backend.tokenize_counted(text, truncate)
            if not seq:
                # the engine keeps at most max_length ids of a text: it cannot return more
                what = "shorten it or embed with truncation on" if check else (
                    "the engine tokenizer returns at most max_length ids; count_tokens gives "
                    "the full count"
                )
                raise InputTooLong(
                    f"texts[{start + i}] has {full} tokens, over the model's max length "
                    f"{self.max_length}; {what}"
                )
            truncated += full > len(seq)
            ids.append(seq)
        return ids, truncated

    def count(self, texts: list[str], truncate: bool) -> list[int]:
        counts: list[int] = self._backend.count_tokens(texts, truncate)
        return counts
