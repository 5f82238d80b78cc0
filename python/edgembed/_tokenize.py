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

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .errors import BackendUnavailable, InputError, InputTooLong, InvalidModelDir

__all__ = [
    "BOUNDED_FROM",
    "DIRECTIONS",
    "EngineTokenizer",
    "HFPairTokenizer",
    "HFTokenizer",
    "PairEncoding",
    "TokenSpan",
    "Tokenizer",
    "count_tokens",
    "encode_left_truncated",
    "encode_truncated",
    "load_tokenizer",
    "prefixes",
    "prompt_length",
    "safe_prefix",
    "truncation_direction",
    "truncation_strategy",
]


DIRECTIONS = ("right", "left")  # which end truncation keeps: right keeps the start


def truncation_direction(value: str) -> bool:
    """True for left truncation (keep the end of a text), False for right (keep its start)."""
    name = value.lower() if isinstance(value, str) else value
    if name not in DIRECTIONS:
        raise InputError(f"truncation_direction must be 'right' (keep a text's start) or "
                         f"'left' (keep its end), not {value!r}")
    return name == "left"


class TokenSpan(NamedTuple):
    """One token of a text: its id, the characters ``text[start:end]`` it covers, whether the
    tokenizer's template added it (``[CLS]``, ``[SEP]``: then start == end == 0), and its
    vocabulary string."""

    id: int
    start: int
    end: int
    special: bool
    token: str


class Tokenizer(Protocol):
    """What the Embedder asks of a tokenizer."""

    max_length: int

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0,
        left: bool = False,
    ) -> tuple[list[list[int]], int]:
        """Token ids per text and how many texts were truncated.

        With ``truncate=False`` and ``check``, a text over max_length raises InputTooLong
        naming its index (``start`` is the index of ``texts[0]`` in the caller's input).
        ``left``: truncation keeps a text's last tokens (and the template's special tokens).
        """
        ...

    def count(self, texts: list[str], truncate: bool) -> list[int]:
        """Tokens each text costs the encoder (its full length when ``truncate`` is off)."""
        ...

    def spans(self, texts: list[str], *, add_special_tokens: bool) -> list[list[TokenSpan]]:
        """Every token of each text (no truncation) with the characters it covers."""
        ...

    def decode(self, ids: list[list[int]], *, skip_special_tokens: bool) -> list[str]:
        """The text of each id sequence."""
        ...

    def prompt_length(self, prompt: str) -> int:
        """The leading tokens of ``prompt + text`` that belong to the prompt (``prompt_length``
        below), for models that pool without it."""
        ...


def load_tokenizer(
    source_dir: Path, max_length: int, *, truncate: bool = True, lowercase: bool = False,
    left: bool = False,
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
        tok.enable_truncation(max_length, direction="left" if left else "right")
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
        self._source = (source_dir, lowercase)
        self._truncating = load_tokenizer(source_dir, max_length, truncate=True,
                                          lowercase=lowercase)
        self._full = load_tokenizer(source_dir, max_length, truncate=False, lowercase=lowercase)
        self._left: Any = None  # truncating on the left, loaded on first use
        self._left_lock = threading.Lock()
        self._shrinker: Any = False  # WordPieceShrinker (None: none applies), made on first use
        self._cuts: Any = None  # InWordCuts, made with it
        self._text_cuts: Any = None  # TextCuts, made with it

    def _shrink(self) -> Any:
        """The WordPieceShrinker of this tokenizer, or None (``_long_text``)."""
        if self._shrinker is False:
            from ._long_text import InWordCuts, TextCuts, WordPieceShrinker

            self._cuts = InWordCuts.of(self._full)
            self._text_cuts = TextCuts.of(self._full)
            self._shrinker = WordPieceShrinker.of(self._full)
        return self._shrinker

    def _in_word_cuts(self) -> Any:
        """The InWordCuts of this tokenizer, or None (``_long_text``)."""
        self._shrink()
        return self._cuts

    def _left_truncating(self) -> Any:
        with self._left_lock:
            if self._left is None:
                source_dir, lowercase = self._source
                self._left = load_tokenizer(source_dir, self.max_length, truncate=True,
                                            lowercase=lowercase, left=True)
            return self._left

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0,
        left: bool = False,
    ) -> tuple[list[list[int]], int]:
        if not texts:
            return [], 0
        limit = BOUNDED_FROM * self.max_length
        if truncate and left:  # keeps a text's end: long texts by a bounded suffix
            tok = self._left_truncating()
            if all(len(t) <= limit for t in texts):
                encs = tok.encode_batch(texts)
            else:
                shrinker = self._shrink()
                encs = [encode_left_truncated(self._full, tok, t, self.max_length, shrinker,
                                              self._text_cuts, self._cuts)
                        if len(t) > limit else tok.encode(t) for t in texts]
            return [e.ids for e in encs], sum(1 for e in encs if e.overflowing)
        if truncate:
            if all(len(t) <= limit for t in texts):
                encs = self._truncating.encode_batch(texts)
            else:  # long texts by a bounded prefix (encode_truncated)
                shrinker, cuts = self._shrink(), self._in_word_cuts()
                encs = [e if e is not None else encode_truncated(
                            self._full, self._truncating, t, self.max_length, shrinker, cuts)
                        for t, e in zip(texts, self._short_encodings(texts, limit),
                                        strict=True)]
            return [e.ids for e in encs], sum(1 for e in encs if e.overflowing)
        shrinker = self._shrink() if any(len(t) > limit for t in texts) else None
        texts = list(texts)
        for i, t in enumerate(texts):
            if len(t) <= limit:
                continue
            short = shrinker.shrink(t, self.max_length if check else None) if (
                shrinker is not None) else None
            if short is not None:  # a long text by its short equivalent
                if not short[1]:  # only its first tokens, more than max_length
                    n = len(self._full.encode(short[0]).ids)
                    raise InputTooLong(
                        f"texts[{start + i}] has more than {n} tokens, over the model's max "
                        f"length {self.max_length}; shorten it or embed with truncation on")
                texts[i] = short[0]
            elif check:  # a long text's prefix may already show it is too long
                for prefix in prefixes(t, self.max_length, self._in_word_cuts()):
                    n = len(self._full.encode(prefix).ids)
                    if n > self.max_length:
                        raise InputTooLong(
                            f"texts[{start + i}] has more than {n} tokens, over the model's "
                            f"max length {self.max_length}; shorten it or embed with "
                            "truncation on")
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
        if truncate or all(len(t) <= _COUNT_CHUNK for t in texts):
            return [len(ids) for ids in self.encode(texts, truncate=truncate, check=False)[0]]
        shrinker = self._shrink()
        return [count_tokens(self._full, t, shrinker, self._text_cuts, self._cuts)
                if len(t) > _COUNT_CHUNK else len(self._full.encode(t).ids) for t in texts]

    def _short_encodings(self, texts: list[str], limit: int) -> list[Any]:
        """Truncating encodings of the texts within ``limit`` characters (in one batch), None
        in the places of the others."""
        short = [t for t in texts if len(t) <= limit]
        encs = iter(self._truncating.encode_batch(short) if short else [])
        return [next(encs) if len(t) <= limit else None for t in texts]

    def prompt_length(self, prompt: str) -> int:
        return prompt_length(self._truncating, prompt)

    def spans(self, texts: list[str], *, add_special_tokens: bool) -> list[list[TokenSpan]]:
        out = []
        for enc in self._full.encode_batch(texts, add_special_tokens=add_special_tokens):
            out.append([TokenSpan(i, s, e, bool(m), t) for i, (s, e), m, t in zip(
                enc.ids, enc.offsets, enc.special_tokens_mask, enc.tokens, strict=True)])
        return out

    @property
    def vocab_size(self) -> int:
        size: int = self._full.get_vocab_size(with_added_tokens=True)
        return size

    def decode(self, ids: list[list[int]], *, skip_special_tokens: bool) -> list[str]:
        size = self.vocab_size
        for i, seq in enumerate(ids):
            for j, token in enumerate(seq):
                if not 0 <= token < size:
                    raise InputError(f"ids[{i}][{j}] is {token}, not a token of this model "
                                     f"(ids are 0 to {size - 1})")
        texts: list[str] = self._full.decode_batch(ids, skip_special_tokens=skip_special_tokens)
        return texts


# --- pairs (cross-encoders) -----------------------------------------------------------------

_STRATEGIES = {"LongestFirst": "longest_first", "OnlyFirst": "only_first",
               "OnlySecond": "only_second"}


def truncation_strategy(tokenizer_json: Path) -> str:
    """How the model truncates a pair past its max length: tokenizer.json's ``truncation``
    strategy when the file sets one (``longest_first``, ``only_first``, ``only_second``), else
    ``longest_first`` (what sentence-transformers' CrossEncoder and TEI do)."""
    import json

    try:
        saved = json.loads(tokenizer_json.read_text(encoding="utf-8")).get("truncation")
    except (OSError, ValueError) as exc:
        raise InvalidModelDir(f"{tokenizer_json} cannot be read ({exc})") from None
    if not isinstance(saved, dict) or saved.get("strategy") is None:
        return "longest_first"
    name = saved["strategy"]
    if name not in _STRATEGIES:
        raise InvalidModelDir(f"{tokenizer_json}: truncation strategy {name!r} is not one of "
                              f"{', '.join(_STRATEGIES)}")
    return _STRATEGIES[name]


class PairEncoding(Protocol):
    ids: list[int]
    type_ids: list[int]


class _SingleTexts:
    """What the pair tokenizers share: single texts through their ``_single`` tokenizer."""

    _single: HFTokenizer | EngineTokenizer

    def encode_texts(self, texts: list[str], *, truncate: bool = True,
                     start: int = 0) -> tuple[list[list[int]], list[list[int]], int]:
        """Single texts, as a sequence classifier reads one (``[CLS] text [SEP]``, types 0)."""
        ids, truncated = self._single.encode(texts, truncate=truncate, start=start)
        return ids, [[0] * len(s) for s in ids], truncated

    def count_texts(self, texts: list[str], truncate: bool = True) -> list[int]:
        return self._single.count(texts, truncate) if texts else []


class HFPairTokenizer(_SingleTexts):
    """(query, document) pairs → token ids and token types, as a cross-encoder reads them:
    ``tokenizers``' pair encoding of the model's tokenizer.json (``[CLS] q [SEP] d [SEP]``
    with types 0 then 1 for BERT, ``<s> q </s></s> d </s>`` for RoBERTa-likes), truncated at
    ``max_length`` with the model's strategy (:func:`truncation_strategy`), no padding.

    A side longer than ``BOUNDED_FROM * max_length`` characters is tokenized by a bounded
    prefix when that gives the same ids (see ``encode_truncated``): truncation keeps at most
    ``max_length`` tokens of each side. When both sides are over ``max_length`` tokens,
    longest-first keeps half of the room for each, the odd token going to the longer side (the
    second on a tie): ``_cut_both`` does that on the prefixes, with the two sides' full lengths
    compared, since ``tokenizers`` computes every overflowing window of such a pair (seconds
    for two 20,000-character texts, quadratic in their lengths).
    """

    def __init__(self, source_dir: Path, max_length: int, *, lowercase: bool = False) -> None:
        self.max_length = max_length
        self.strategy = truncation_strategy(source_dir / "tokenizer.json")
        self._truncating = load_tokenizer(source_dir, max_length, truncate=False,
                                          lowercase=lowercase)
        self._truncating.enable_truncation(max_length, strategy=self.strategy)
        self._full = load_tokenizer(source_dir, max_length, truncate=False, lowercase=lowercase)
        self._single = HFTokenizer(source_dir, max_length, lowercase=lowercase)

    def _side(self, text: str) -> tuple[str, bool]:
        """(the text or a prefix of it with the same first max_length tokens, whether it is
        longer than max_length tokens)."""
        for prefix in prefixes(text, self.max_length):
            if len(self._full.encode(prefix, add_special_tokens=False).ids) > self.max_length:
                return prefix, True
        return text, False

    def encode(
        self, pairs: list[tuple[str, str]], *, truncate: bool = True, start: int = 0
    ) -> tuple[list[list[int]], list[list[int]], int]:
        """(ids, token types, how many pairs were truncated). Without ``truncate`` a pair over
        max_length raises InputTooLong naming its index (``start`` offsets it), as does a pair
        whose query alone passes max_length under ``only_second`` truncation."""
        if not pairs:
            return [], [], 0
        if not truncate:
            encs = self._full.encode_batch(pairs)
            for i, e in enumerate(encs):
                if len(e.ids) > self.max_length:
                    raise InputTooLong(
                        f"pairs[{start + i}] has {len(e.ids)} tokens, over the model's max "
                        f"length {self.max_length}; shorten it or score with truncation on")
            return [e.ids for e in encs], [e.type_ids for e in encs], 0
        items: list[tuple[str, str]] = []
        both_long: dict[int, Any] = {}
        for i, (q, d) in enumerate(pairs):
            (qp, q_long), (dp, d_long) = self._side(q), self._side(d)
            if q_long and d_long and self.strategy == "longest_first":
                both_long[i] = self._cut_both(q, d, qp, dp)
            items.append((qp, dp))
        rest = [i for i in range(len(items)) if i not in both_long]
        try:
            done = self._truncating.encode_batch([items[i] for i in rest])
        except Exception:  # tokenizers says only "Truncation error: ..." for the whole batch
            done = [self._encode_one(items[i], start + i) for i in rest]
        encs = dict(zip(rest, done, strict=True)) | both_long
        ordered = [encs[i] for i in range(len(items))]
        return ([e.ids for e in ordered], [e.type_ids for e in ordered],
                sum(1 for i, e in enumerate(ordered) if i in both_long or e.overflowing))

    def _cut_both(self, q: str, d: str, qp: str, dp: str) -> Any:
        """The longest-first encoding of a pair whose sides are both over max_length tokens,
        from prefixes ``qp`` and ``dp`` that have the sides' first max_length tokens: as
        ``tokenizers`` cuts it, each side to half the room, the odd token to the side with
        more tokens in the whole text (the second when they have as many)."""
        room = self.max_length - self._full.num_special_tokens_to_add(True)
        first_longer = (len(self._full.encode(q, add_special_tokens=False).ids)
                        > len(self._full.encode(d, add_special_tokens=False).ids))
        short, long = room // 2, room // 2 + room % 2
        a = self._full.encode(qp, add_special_tokens=False)
        b = self._full.encode(dp, add_special_tokens=False)
        a.truncate(long if first_longer else short)
        b.truncate(short if first_longer else long)
        return self._full.post_process(a, b)

    def _encode_one(self, pair: tuple[str, str], index: int) -> Any:
        try:
            return self._truncating.encode(*pair)
        except Exception:
            kept = "query" if self.strategy == "only_second" else "document"
            raise InputTooLong(
                f"pairs[{index}]: the {kept} alone leaves no room in the model's "
                f"{self.max_length} tokens, and the model truncates only the other text of a "
                f"pair ({self.strategy}); shorten the {kept}") from None

    def count(self, pairs: list[tuple[str, str]], truncate: bool = True) -> list[int]:
        """Tokens each pair costs the encoder (query and document together, specials
        included; all of them with ``truncate`` off)."""
        if not truncate:
            return [len(e.ids) for e in self._full.encode_batch(pairs)] if pairs else []
        return [len(ids) for ids in self.encode(pairs, truncate=True)[0]]


class EngineTokenizer:
    """The engine's own tokenizer, through a backend that has one (the wasm engine)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.max_length: int = backend.max_length

    def encode(
        self, texts: list[str], *, truncate: bool, check: bool = True, start: int = 0,
        left: bool = False,
    ) -> tuple[list[list[int]], int]:
        if left and truncate:
            raise InputError("the engine's tokenizer truncates on the right only; for "
                             "truncation_direction='left' load the model directory, not a "
                             "bundle")
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

    def prompt_length(self, prompt: str) -> int:
        """``prompt_length`` below with the engine's tokenizer: the prompt alone, less a
        closing special token of the template (the only tokens with the empty span (0, 0))."""
        if not prompt:
            return 0
        tokens = self._backend.tokenize_offsets([prompt])[0]
        last = tokens[-1] if tokens else None
        closing = last is not None and len(tokens) > 1 and (last[1], last[2]) == (0, 0)
        return len(tokens) - (1 if closing else 0)

    def spans(self, texts: list[str], *, add_special_tokens: bool) -> list[list[TokenSpan]]:
        raise BackendUnavailable("token offsets and strings need the model's tokenizer.json; "
                                 "load the model directory, not a bundle")

    def decode(self, ids: list[list[int]], *, skip_special_tokens: bool) -> list[str]:
        raise BackendUnavailable("decoding needs the model's tokenizer.json; load the model "
                                 "directory, not a bundle")


class EnginePairTokenizer(_SingleTexts):
    """:class:`HFPairTokenizer`'s interface over the engine's own tokenizer (a bundle alone, as
    in Pyodide): the pair template and truncation strategy the bundle carries, the same ids,
    token types and errors."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._single = EngineTokenizer(backend)
        self.max_length: int = backend.max_length
        self.strategy: str = backend.meta("tokenizer.truncation") or "longest_first"

    def encode(
        self, pairs: list[tuple[str, str]], *, truncate: bool = True, start: int = 0
    ) -> tuple[list[list[int]], list[list[int]], int]:
        """(ids, token types, how many pairs were truncated), as ``HFPairTokenizer.encode``."""
        ids: list[list[int]] = []
        types: list[list[int]] = []
        truncated = 0
        for i, (q, d) in enumerate(pairs):
            seq, kinds, full, fits = self._backend.tokenize_pair(q, d, truncate)
            if not fits and not truncate:
                raise InputTooLong(
                    f"pairs[{start + i}] has {full} tokens, over the model's max length "
                    f"{self.max_length}; shorten it or score with truncation on")
            if not fits:
                kept = "query" if self.strategy == "only_second" else "document"
                raise InputTooLong(
                    f"pairs[{start + i}]: the {kept} alone leaves no room in the model's "
                    f"{self.max_length} tokens, and the model truncates only the other text of "
                    f"a pair ({self.strategy}); shorten the {kept}")
            truncated += full > len(seq)
            ids.append(seq)
            types.append(kinds)
        return ids, types, truncated

    def count(self, pairs: list[tuple[str, str]], truncate: bool = True) -> list[int]:
        """Tokens each pair costs the encoder (query and document together, specials
        included; all of them with ``truncate`` off)."""
        if not truncate:
            return [self._backend.tokenize_pair(q, d, False)[2] for q, d in pairs]
        return [len(ids) for ids in self.encode(pairs, truncate=True)[0]]


# --- long texts: tokenize a bounded prefix -----------------------------------------------------
#
# Truncation keeps a text's first max_length tokens, so tokenizing all of a 50 MB line only to
# drop nearly everything costs gigabytes (``tokenizers`` keeps alignments per byte) for nothing.
# A text longer than BOUNDED_FROM characters per token of max_length is tokenized by a prefix
# instead: the prefix ends where a run of ASCII whitespace (space, tab, CR, LF) begins, a
# boundary every supported pipeline keeps (BERT's normalizer and pre-tokenizer split there and
# change characters one at a time; Metaspace and byte-level pre-tokenizers start a new word at
# a space; NFD/NFKC never compose across a space). Tokens before such a cut are the full
# text's tokens, so once the prefix has more tokens than truncation keeps, its truncated
# encoding *is* the full text's. Otherwise the prefix grows four times, up to the whole text.
# A BERT WordPiece tokenizer shortens the text instead (``_long_text.WordPieceShrinker``, which
# needs no whitespace: a word of more than 100 characters is one [UNK] however long); byte-level
# BPE and Unigram tokenizers also cut inside a long word of letters where no vocabulary entry
# spans the cut (``_long_text.InWordCuts``). Left truncation tokenizes a suffix from a cut whose
# two sides both keep their tokens (``_long_text.TextCuts``; ``encode_left_truncated``), and an
# exact count with truncation off adds up pieces between such cuts (``count_tokens``).
# tests/python/attack/test_attack_long_text.py checks the ids against full tokenization.

BOUNDED_FROM = 16  # characters per token of max_length before a text is tokenized by prefix
_CUT = re.compile(r"(?<![ \t\r\n])[ \t\r\n]")  # where a run of ASCII whitespace begins


def safe_prefix(text: str, at_least: int) -> str | None:
    """The shortest prefix of ``text`` of at least ``at_least`` characters that ends before a
    run of ASCII whitespace; None when there is none (the whole text is then needed)."""
    m = _CUT.search(text, max(at_least, 1))
    return text[: m.start()] if m else None


def prefixes(text: str, max_length: int, cuts: Any = None) -> Iterator[str]:
    """The prefixes to try, shortest first, for truncating ``text`` at ``max_length`` tokens:
    nothing for a text short enough to tokenize whole. ``cuts`` (``_long_text.InWordCuts``)
    adds cuts inside long words of letters, tried first when no whitespace comes soon."""
    size = BOUNDED_FROM * max_length
    while size < len(text):
        prefix = safe_prefix(text, size)
        if cuts is not None and (prefix is None or len(prefix) > 2 * size):
            inside = cuts.cut(text, size)
            if inside is not None:
                prefix = text[:inside]
        if prefix is None:
            return
        yield prefix
        size = 4 * max(size, len(prefix))


def encode_truncated(full: Any, truncating: Any, text: str, max_length: int,
                     shrinker: Any = None, cuts: Any = None) -> Any:
    """``truncating.encode(text)``, computed on a prefix of ``text`` when one suffices.

    ``full`` is the same tokenizer without truncation: a prefix suffices when it has more
    tokens than ``max_length`` (so truncation cuts inside it, before the cut). A
    ``_long_text.WordPieceShrinker`` of the tokenizer, when given, shortens the text instead
    (the ids are the same; offsets are not kept); ``_long_text.InWordCuts`` adds cuts inside
    long words of letters for byte-level BPE and Unigram tokenizers.
    """
    short = shrinker.shrink(text, max_length) if shrinker is not None else None
    if short is not None:
        return truncating.encode(short[0])
    for prefix in prefixes(text, max_length, cuts):
        if len(full.encode(prefix).ids) > max_length:
            return truncating.encode(prefix)
    return truncating.encode(text)


def encode_left_truncated(full: Any, truncating: Any, text: str, max_length: int,
                          shrinker: Any = None, cuts: Any = None, in_word: Any = None) -> Any:
    """``truncating.encode(text)`` for a tokenizer that truncates on the left (keeps the
    text's end), computed on a suffix of ``text`` when one suffices.

    The suffix begins at a cut (``_long_text.TextCuts``: where a run of ASCII whitespace
    begins; for byte-level BPE also ``_long_text.InWordCuts`` inside a long word) at least
    ``BOUNDED_FROM * max_length`` characters before the end, so its tokens are the text's
    last ones; it suffices when it has more than ``max_length`` tokens (truncation keeps fewer,
    all inside it), else it grows four times. Where no cut comes within three times that
    length, a BERT WordPiece text is shortened whole (``_long_text.WordPieceShrinker``) and
    any other is tokenized whole.
    """
    size = BOUNDED_FROM * max_length
    while cuts is not None and size < len(text):
        end = len(text) - size
        p = cuts.before(text, end, end - 3 * size)
        if p is None and in_word is not None and in_word.two_sided:
            p = in_word.cut(text, max(end - _IN_WORD_SEARCH, 1))
            p = p if p is not None and p < len(text) - max_length else None
        if p is None:
            break
        suffix = text[p:]
        if len(full.encode(suffix).ids) > max_length:
            return truncating.encode(suffix)
        size = 4 * max(size, len(suffix))
    short = shrinker.shrink(text, None) if shrinker is not None else None
    return truncating.encode(short[0] if short is not None and short[1] else text)


_COUNT_CHUNK = 1 << 16  # characters per piece of an exact count (count_tokens)
_IN_WORD_SEARCH = 4096  # _long_text._SEARCH: how far InWordCuts.cut looks


def count_tokens(full: Any, text: str, shrinker: Any = None, cuts: Any = None,
                 in_word: Any = None) -> int:
    """``len(full.encode(text).ids)`` (``full`` does not truncate), counted in pieces of about
    ``_COUNT_CHUNK`` characters cut where ``_long_text.TextCuts`` (or, for byte-level BPE,
    ``InWordCuts``) says the tokens of the two sides are the text's: the template's special
    tokens plus each piece's tokens. A piece without a cut for four times that length runs to
    the next cut, or to the end: a BERT WordPiece piece is shortened first
    (``WordPieceShrinker``), another is tokenized whole."""
    if cuts is None and (in_word is None or not in_word.two_sided):
        short = shrinker.shrink(text, None) if shrinker is not None else None
        return len(full.encode(short[0] if short is not None else text).ids)

    def piece(chunk: str) -> int:
        short = shrinker.shrink(chunk, None) if (
            shrinker is not None and len(chunk) > 2 * _COUNT_CHUNK) else None
        return len(full.encode(short[0] if short is not None else chunk,
                               add_special_tokens=False).ids)

    total: int = full.num_special_tokens_to_add(False)
    pos = 0
    while len(text) - pos > 2 * _COUNT_CHUNK:
        at = pos + _COUNT_CHUNK
        p = cuts.after(text, at, at + 4 * _COUNT_CHUNK) if cuts is not None else None
        if p is None and in_word is not None and in_word.two_sided:
            p = in_word.cut(text, at)
        if p is None and cuts is not None:
            p = cuts.after(text, at + 4 * _COUNT_CHUNK, len(text))
        if p is None:
            break
        total += piece(text[pos:p])
        pos = p
    return total + piece(text[pos:])


def prompt_length(tokenizer: Any, prompt: str) -> int:
    """How many leading tokens of ``prompt + text`` belong to the prompt, as
    sentence-transformers counts them for pooling without the prompt: the prompt encoded
    alone (its leading special token included), less a trailing special token."""
    if not prompt:
        return 0
    ids = tokenizer.encode(prompt).ids
    special = {i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}
    return len(ids) - (1 if ids and ids[-1] in special else 0)
