"""Long texts without whitespace to cut at: shortened for WordPiece, cut inside a word for
byte-level BPE and Unigram, with the token ids of the whole text.

``tokenizers`` keeps alignments per byte, so a 50 MB line costs gigabytes to tokenize, even
when truncation then keeps 256 tokens. A text with ASCII whitespace is cut before a run of it
(``_tokenize.safe_prefix``); a text without (one 50 MB "word", a run of punctuation, CJK,
emoji, combining marks) needs more than a cut for a BERT pipeline, where a word of more than
``max_input_chars_per_word`` characters (100) is one ``[UNK]`` whatever its length.

:class:`WordPieceShrinker` rewrites such a text, piece by piece, into a short one whose ids
(``tokenizers`` on the same tokenizer) are the long one's ids, or their first ``need`` content
tokens and more. It applies only to the pipeline it knows exactly (``BertNormalizer`` with
``clean_text``, optionally after ``Lowercase``; ``BertPreTokenizer``; ``WordPiece``) and works
on characters whose treatment it is sure of:

- whitespace (tab, LF, CR and the Unicode space separators, which ``clean_text`` makes a
  space and the pre-tokenizer splits on) and the characters ``clean_text`` deletes (controls
  but tab, LF, CR; U+FFFD; format characters; private use): a run of them becomes one space,
  or nothing when it has no whitespace;
- ASCII punctuation, CJK ideographs (with ``handle_chinese_chars``) and the Unicode
  punctuation assigned since Unicode 3.2: each is a word of its own (one token), kept;
- word characters (letters, marks, digits, symbols whose decomposition and lower case are word
  characters too): a run of them is kept when short; a long one is read by the normalizer in
  chunks, and becomes its first chunk when that alone normalizes to more than
  ``max_input_chars_per_word`` characters (the word is one [UNK] either way), else the run's
  normalized form (the normalizer's output normalizes to itself);
- any other character is kept as it is: as punctuation when ``tokenizers`` makes it a word
  of its own (``WordPieceShrinker.own_word``, asked once per character: the CJK ideographs of
  blocks newer than the table here, punctuation newer than Unicode 3.2), else as a character
  of unknown treatment, of which at most ``_OTHER_CAP`` are read.

The scan stops after a punctuation character or before whitespace once the pieces read hold
more than ``need`` tokens (a lower bound — each punctuation character one, each word with a
letter or digit one — then the tokenizer's own count), so the result is a prefix of the text in
token terms: its tokens are the text's first ones, and truncation keeps the same. A tokenizer
with added tokens that could match across a rewritten piece (one that begins or ends with a
word character, holds whitespace or a mark) is not shortened; nor is a text with more than
``_OTHER_CAP`` unknown characters, or a long word holding a combining character that accent
stripping keeps and NFD could reorder across a chunk (the musical symbols): the caller then
tokenizes the whole text. The character classes are built from ``unicodedata`` once per
process (about a second), on the first long text.
:class:`InWordCuts` finds, for byte-level BPE and Unigram tokenizers, where a long word of
letters can be cut with the tokens before the cut kept (no vocabulary entry spans it).

tests/python/attack/test_attack_long_text.py checks the ids against ``tokenizers`` on the
whole text, and the shrinker's classes one code point at a time.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from typing import Any

__all__ = ["InWordCuts", "TextCuts", "WordPieceShrinker"]


class _Unknown(Exception):
    """The text holds what this module cannot shorten exactly."""

_WHITESPACE = ("\t\n\r\u0020\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
               "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_CJK = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF),
        (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0x2F800, 0x2FA1F))
_CHANGED = {0x111C9}  # punctuation in the Unicode of tokenizers' tables, a mark in Python's
_OTHER_CAP = 4096  # characters of unknown treatment read before giving up
_CHUNK = 16384  # characters per normalizer call on a long word


def _ranges(codes: list[int]) -> str:
    """A regex character class body for the sorted code points."""
    out: list[str] = []
    i = 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        a, b = codes[i], codes[j]
        out.append(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}")
        i = j + 1
    return "".join(out)


@functools.lru_cache(maxsize=4)
def _classes(chinese: bool, long: int) -> tuple[re.Pattern[str], ...]:
    """(the piece pattern; a letter or digit every Unicode since 3.2 knows; a character
    ``clean_text`` deletes; a character whose decomposition holds a combining character that
    is not a nonspacing mark)."""
    old = unicodedata.ucd_3_2_0
    ws = {ord(c) for c in _WHITESPACE}
    cjk = {c for a, b in _CJK for c in range(a, b + 1)} if chinese else set()
    ascii_punct = {c for c in range(0x21, 0x7F) if not chr(c).isalnum()}
    removed: list[int] = []
    punct: list[int] = sorted(ascii_punct)
    word: list[int] = []
    base: list[int] = []
    hazard: list[int] = []  # decomposes to a combining character accent stripping keeps

    def wordlike(s: str) -> bool:
        return all(ord(ch) not in ws and ord(ch) not in ascii_punct and ord(ch) not in cjk
                   and unicodedata.category(ch)[0] in "LMNS" for ch in s)

    for c in (*range(0x30000), *range(0xE0000, 0xE0200)):  # planes 0-2, tags, selectors
        if c in ws or c in ascii_punct or c in _CHANGED or 0xD800 <= c <= 0xDFFF:
            continue
        ch = chr(c)
        cat, cat_old = unicodedata.category(ch), old.category(ch)
        if any(unicodedata.combining(d) and unicodedata.category(d) != "Mn"
               for d in unicodedata.normalize("NFD", ch)):
            hazard.append(c)
        if (cat == "Cc" or c == 0xFFFD or 0xE000 <= c <= 0xF8FF
                or (cat == "Cf" and cat_old != "Cn")):
            removed.append(c)
        elif (cat[0] == "P" or c in cjk) and cat_old == cat and unicodedata.normalize(
                "NFD", ch) == ch:
            punct.append(c)
        elif cat[0] in "LMNS" and cat_old in (cat, "Cn") and c not in cjk and (
                (not unicodedata.decomposition(ch) and ch.lower() == ch) or all(
                    wordlike(s) for s in (ch.lower(), unicodedata.normalize("NFD", ch),
                                          unicodedata.normalize("NFD", ch).lower()))):
            word.append(c)
            if cat[0] in "LN" and cat_old == cat:
                base.append(c)
    punct.sort()
    r, w, p = _ranges(removed), _ranges(word), _ranges(punct)
    z = _ranges(sorted(ws))
    pieces = re.compile(f"(?P<w>[{w}{r}]{{1,{long + 1}}})|(?P<z>[{z}{r}]+)|(?P<p>[{p}])|(?P<o>.)",
                        re.DOTALL)
    return (pieces, re.compile(f"[{_ranges(base)}]"), re.compile(f"[{r}]"),
            re.compile(f"[{_ranges(hazard)}]"))


def _is_bert_normalizer(n: Any) -> bool:
    return isinstance(n, dict) and n.get("type") == "BertNormalizer" and n.get("clean_text") is True


class WordPieceShrinker:
    """Shortens long texts for one BERT WordPiece tokenizer (``of`` says whether it can)."""

    def __init__(self, tokenizer: Any, max_chars: int, chinese: bool) -> None:
        self._tokenizer = tokenizer  # without truncation
        self._normalize = tokenizer.normalizer.normalize_str
        self.max_chars = max_chars
        self.long = 4 * max_chars  # a word longer than this is read by the normalizer
        self._chinese = chinese
        self._added = [(t.content, t.normalized)
                       for t in tokenizer.get_added_tokens_decoder().values()]
        self._wordish_cache: dict[str, bool] = {}
        self._own_cache: dict[str, bool] = {}
        self.pieces = _classes(chinese, self.long)[0]  # names each piece: w, z, p or o
        self._hazard = _classes(chinese, self.long)[3]

    def own_word(self, c: str) -> bool:
        """Whether ``tokenizers`` makes ``c``, a character of no class here (``o``), a word
        of its own, as punctuation or a CJK ideograph: between letters, and between a digit
        and a combining mark, it tokenizes as it does with spaces around it. Asked once per
        character."""
        known = self._own_cache.get(c)
        if known is None:
            encs = self._tokenizer.encode_batch(["ab" + c + "cd", "ab " + c + " cd",
                                                 "1" + c + "\u0301", "1 " + c + " \u0301"])
            known = encs[0].ids == encs[1].ids and encs[2].ids == encs[3].ids
            if len(self._own_cache) < 65536:
                self._own_cache[c] = known
        return known

    def _wordish(self, c: str) -> bool:
        """Whether ``c`` is a word character or one ``clean_text`` deletes."""
        known = self._wordish_cache.get(c)
        if known is None:
            m = _classes(self._chinese, self.long)[0].match(c)
            known = self._wordish_cache[c] = m is not None and m.lastgroup == "w"
        return known

    @classmethod
    def of(cls, tokenizer: Any) -> WordPieceShrinker | None:
        """The shrinker for ``tokenizer`` (a ``tokenizers.Tokenizer``), None when its pipeline
        is not one this module knows exactly."""
        try:
            spec = json.loads(tokenizer.to_str())
        except Exception:
            return None
        model, norm = spec.get("model") or {}, spec.get("normalizer")
        pre = spec.get("pre_tokenizer")
        if model.get("type") != "WordPiece" or (pre or {}).get("type") != "BertPreTokenizer":
            return None
        parts = norm.get("normalizers") if isinstance(norm, dict) and norm.get(
            "type") == "Sequence" else [norm]
        berts = [n for n in parts or [] if _is_bert_normalizer(n)]
        others = [n for n in parts or [] if not _is_bert_normalizer(n)]
        if len(berts) != 1 or any(not isinstance(n, dict) or n.get("type") != "Lowercase"
                                  for n in others):
            return None
        max_chars = model.get("max_input_chars_per_word")
        if not isinstance(max_chars, int) or max_chars < 1:
            return None
        shrinker = cls(tokenizer, max_chars, bool(berts[0].get("handle_chinese_chars")))
        pieces, _, removed, _ = _classes(shrinker._chinese, shrinker.long)
        for content, _normalized in shrinker._added:
            # an added token never overlaps a rewritten piece: it begins and ends with
            # punctuation (or an unknown character) and holds no whitespace, deleted
            # character or mark
            ends = [pieces.match(content, i) for i in (0, len(content) - 1)] if content else []
            if (not ends or len(content) > max_chars
                    or any(m is None or m.lastgroup not in ("p", "o") for m in ends)
                    or any(ch in _WHITESPACE or removed.match(ch)
                           or unicodedata.category(ch)[0] == "M" for ch in content)):
                return None
        return shrinker

    def _spans_added(self, text: str, cut: int) -> bool:
        """Whether an added token could match across ``cut``."""
        for content, normalized in self._added:
            n = len(content)
            window = text[max(0, cut - n + 1): cut + n - 1]
            if content in window or (normalized and content.lower() in window.lower()):
                return True
        return False

    def _long_word(self, text: str, start: int, end: int) -> str:
        """What stands for the word characters ``text[start:end]`` (longer than ``long``)."""
        first = text[start: start + self.long]
        acc: str = self._normalize(first)
        if len(acc) > self.max_chars:
            return first  # one [UNK], as the whole run
        # in chunks: canonical reordering (NFD) could move a combining character that
        # accent stripping keeps across a cut; there is none in most texts
        if self._hazard.search(text, start, end):
            raise _Unknown
        pos = start + self.long
        while pos < end and len(acc) <= self.max_chars:
            stop = min(end, pos + _CHUNK)
            acc += self._normalize(text[pos:stop])
            pos = stop
        return acc[: self.max_chars + 1]

    def _count(self, out: list[str]) -> int:
        """The tokens of the pieces read so far (an added token is one token, not the few its
        punctuation and letters count for in the lower bound)."""
        return len(self._tokenizer.encode("".join(out)).ids)

    def _run_end(self, text: str, pos: int) -> int:
        """The first index from ``pos`` of a character that is neither a word character nor
        a deleted one (``len(text)`` if none), read a block at a time: a long run repeats few
        distinct characters, each classified once."""
        wordish = self._wordish
        while pos < len(text):
            block = text[pos: pos + _CHUNK * 4]
            bad = [c for c in set(block) if not wordish(c)]
            if bad:
                return pos + min(block.find(c) for c in bad)
            pos += len(block)
        return len(text)

    def shrink(self, text: str, need: int | None) -> tuple[str, bool] | None:
        """(a short text, whether it stands for all of ``text``): its ids are ``text``'s, or,
        when not whole, begin with ``text``'s first ids and are more than ``need`` (counted).
        ``need`` None reads the whole text. None when ``text`` holds too much of what this
        module does not know (the whole text must then be tokenized)."""
        try:
            return self._shrink(text, need)
        except _Unknown:
            return None

    def _shrink(self, text: str, need: int | None) -> tuple[str, bool] | None:
        pieces, base, _, _ = _classes(self._chinese, self.long)
        target = need  # the lower bound to pass before counting for real (added tokens)
        out: list[str] = []
        tokens = 0  # a lower bound on the tokens of out
        word_base = False  # the word being read has a letter or digit: one token at least
        other = 0
        size = 0
        pos = 0
        while pos < len(text):
            m = pieces.match(text, pos)
            assert m is not None  # (?P<o>.) matches any character
            kind = m.lastgroup
            pos = m.end()
            if kind == "z" or kind == "p":
                tokens += word_base
                word_base = False
                if kind == "z" and target is not None and tokens > target and (
                        not self._spans_added(text, m.start())):
                    if need is not None and self._count(out) > need:
                        return "".join(out), False
                    target = 2 * tokens
                if kind == "z":
                    piece = " " if any(ch in _WHITESPACE for ch in m.group()) else ""
                else:
                    piece = m.group()
                    tokens += 1
            elif kind == "w":
                if pos - m.start() > self.long:  # the pattern reads at most long + 1
                    pos = self._run_end(text, pos)
                    piece = self._long_word(text, m.start(), pos)
                else:
                    piece = m.group()
                word_base = word_base or base.search(piece) is not None
            elif self.own_word(m.group()):  # as punctuation: a word of its own
                piece = m.group()
                tokens += word_base + 1
                word_base = False
                kind = "p"
            else:
                piece = m.group()
                other += 1
                if other > _OTHER_CAP:
                    return None
            out.append(piece)
            size += len(piece)
            if kind == "p" and target is not None and tokens > target and (
                    not self._spans_added(text, pos)):
                if need is not None and self._count(out) > need:
                    return "".join(out), False
                target = 2 * tokens
            if need is None and size > 64 * _CHUNK:
                return None
        return "".join(out), True


# --- byte-level BPE and Unigram: a cut inside a run of letters --------------------------------

_LETTERS = re.compile(
    "[A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u017f\u0391-\u03a1\u03a3-\u03a9\u03b1-\u03c9"
    "\u0410-\u044f\u05d0-\u05ea\u0620-\u063f\u0641-\u064a\u3041-\u3096\u30a1-\u30fa"
    "\u4e00-\u9fff\uac00-\ud7a3]+")
_SEARCH = 4096  # positions tried for a cut inside a word, from where one is wanted


def _byte_level(s: str) -> str:
    """``s`` in the byte-level alphabet of GPT-2's BPE (one character per UTF-8 byte)."""
    table = _byte_table()
    return "".join(table[b] for b in s.encode("utf-8"))


@functools.lru_cache(maxsize=1)
def _byte_table() -> list[str]:
    # GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others from U+0100 on
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]



_SKIN_TONES = range(0x1F3FB, 0x1F400)  # emoji modifiers: they extend the grapheme before them
_FLAGS = range(0x1F1E6, 0x1F200)  # regional indicators: they pair up
_SELECTORS = (*range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0))  # variation selectors
# characters that join the grapheme after them (Grapheme_Cluster_Break=Prepend, Unicode 15)
_PREPEND = {0x600, 0x601, 0x602, 0x603, 0x604, 0x605, 0x6DD, 0x70F, 0x890, 0x891, 0x8E2, 0xD4E,
            0x110BD, 0x110CD, 0x111C2, 0x111C3, 0x1193F, 0x11941, 0x11A3A, 0x11A84, 0x11A85,
            0x11A86, 0x11A87, 0x11A88, 0x11A89, 0x11D46, 0x11F02}


@functools.lru_cache(maxsize=2)
def _other_class(with_marks: bool) -> re.Pattern[str]:
    """A run of characters that are neither whitespace (Python's or Unicode's), letters nor
    digits, assigned and not controls or ``▁`` (what a byte-level regex reads as one word of
    punctuation and Metaspace does not split): punctuation, symbols, emoji, format and private
    use characters, the variation selectors, and the other marks when ``with_marks`` (no
    normalizer to reorder or compose them)."""
    codes = []
    for c in (*range(0x30000), *range(0xE0000, 0xE01F0)):
        ch = chr(c)
        cat = unicodedata.category(ch)
        if (cat[0] in "LNZ" or cat in ("Cn", "Cs", "Cc") or ch.isspace() or c == 0x2581
                or (cat[0] == "M" and not with_marks and c not in _SELECTORS)):
            continue
        codes.append(c)
    return re.compile(f"[{_ranges(codes)}]+")


def _boundary(before: str, after: str) -> bool:
    """Whether a text splits between ``before`` and ``after`` (characters of ``_other_class``)
    for graphemes (UAX #29: ``after`` extends nothing, ``before`` is no ZWJ, prepend or
    regional indicator) and for NFC/NFKC (``after`` is a starter that composes with nothing
    before it): punctuation or a symbol after anything but a joiner."""
    a, b = ord(before), ord(after)
    return (unicodedata.category(after)[0] in "PS" and unicodedata.combining(after) == 0
            and b not in _SKIN_TONES and b not in _FLAGS and a not in _FLAGS
            and a not in _PREPEND and (unicodedata.category(before) != "Cf"
                                       or 0xE0020 <= a <= 0xE007F))


_NORMALIZERS = {"NFC", "NFKC", "Precompiled"}


class InWordCuts:
    """Where a long word of letters can be cut for a byte-level BPE or a Unigram tokenizer
    with the tokens before the cut kept.

    The pipelines (checked by ``of``): NFC, NFKC or SentencePiece's Precompiled normalizer
    (optionally Strip and a Replace of spaces), then byte-level BPE behind a ByteLevel (or
    Split + ByteLevel) pre-tokenizer, or Unigram behind Metaspace (optionally after
    WhitespaceSplit). At a position whose ``reach`` characters on each side are letters of
    common scripts (Latin, Greek, Cyrillic, Hebrew, Arabic, kana, CJK, Hangul syllables, each
    its own grapheme and normalized alone), or are all neither whitespace, letters nor digits
    (punctuation, symbols, emoji, format characters; marks too when there is no normalizer:
    ``_other_class``) with the position a grapheme and normalization boundary (``_boundary``),
    the normalizer and the pre-tokenizer keep the run's start as the prefix's last word; and
    when no vocabulary entry (in the model's alphabet) spans the position, BPE never merges
    across it (every merge makes a vocabulary entry) and every Unigram segmentation passes
    through it (Viterbi's best path to it is the prefix's), so the prefix's tokens are the
    text's first tokens. For byte-level BPE without a prefix space (``two_sided``) the tokens
    after the cut are also the text's last ones: BPE merges the two sides independently, and
    the pre-tokenizer's regex starts a word at the cut as it does inside the text.
    """

    def __init__(self, tokenizer: Any, vocab: set[str], byte_level: bool,
                 two_sided: bool = False) -> None:
        self._plain = tokenizer.normalizer is None
        self._normalize = (tokenizer.normalizer.normalize_str if tokenizer.normalizer
                           is not None else (lambda s: s))
        self._vocab = vocab
        self._byte_level = byte_level
        self.two_sided = two_sided  # the tokens after a cut are the text's too (see TextCuts)
        self.reach = max(len(v) for v in vocab) + 1
        self._added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        self._other = _other_class(self._plain)

    @classmethod
    def of(cls, tokenizer: Any) -> InWordCuts | None:
        try:
            spec = json.loads(tokenizer.to_str())
        except Exception:
            return None
        model, norm, pre = spec.get("model") or {}, spec.get("normalizer"), spec.get(
            "pre_tokenizer") or {}
        norms = norm.get("normalizers") if isinstance(norm, dict) and norm.get(
            "type") == "Sequence" else ([] if norm is None else [norm])
        for n in norms or []:
            kind = n.get("type") if isinstance(n, dict) else None
            if kind == "Replace":
                pattern = n.get("pattern") or {}
                if pattern not in ({"String": " "}, {"Regex": " {2,}"}):
                    return None
            elif kind not in _NORMALIZERS and kind != "Strip":
                return None
        pres = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
        kinds = [p.get("type") for p in pres or []]
        if model.get("type") == "BPE":
            if (model.get("dropout") or model.get("continuing_subword_prefix")
                    or model.get("end_of_word_suffix") or model.get("ignore_merges")):
                return None
            byte_levels = [p for p in pres or [] if p.get("type") == "ByteLevel"]
            if kinds not in (["ByteLevel"], ["Split", "ByteLevel"]) or len(byte_levels) != 1:
                return None
            vocab = set(model.get("vocab") or {})
            two_sided = not byte_levels[0].get("add_prefix_space") and not any(
                isinstance(n, dict) and n.get("type") == "Strip" for n in norms or [])
            return cls(tokenizer, vocab, True, two_sided) if vocab else None
        if model.get("type") == "Unigram":
            if kinds not in (["Metaspace"], ["WhitespaceSplit", "Metaspace"]):
                return None
            vocab = {str(piece) for piece, _score in model.get("vocab") or []}
            return cls(tokenizer, vocab, False) if vocab else None
        return None

    def _safe(self, text: str, p: int) -> bool:
        r = self.reach
        if p < r or p + r > len(text):
            return False
        letters = _LETTERS.fullmatch(text, p - r, p + r) is not None
        if not letters and not (self._other.fullmatch(text, p - r, p + r) and (
                self._plain or _boundary(text[p - 1], text[p]))):
            return False
        left, right = self._normalize(text[p - r: p]), self._normalize(text[p: p + r])
        if not left or not right or not ((left + right).isalpha() if letters else
                                         self._other.fullmatch(left + right)):
            return False
        if self._byte_level:
            left, right = _byte_level(left), _byte_level(right)
        window, c = left[-r:] + right[:r], len(left[-r:])
        for i in range(max(0, c - r), c):
            for j in range(c + 1, min(len(window), i + r) + 1):
                if window[i:j] in self._vocab:
                    return False
        raw = text[p - r: p + r]
        return not any(len(t) > 1 and t in raw for t in self._added)

    def cut(self, text: str, at_least: int) -> int | None:
        """The first position from ``at_least`` (within ``_SEARCH`` of it) where ``text`` can
        be cut inside a word, None if there is none."""
        for p in range(max(at_least, 1), min(len(text), at_least + _SEARCH)):
            if self._safe(text, p):
                return p
        return None


# --- both sides of a cut: where a run of ASCII whitespace begins ------------------------------

# Split regexes whose words never end with a space or tab: GPT-2's, and the GPT-4-era ones
# (cl100k, Llama 3, Qwen2), whose punctuation words may take the line breaks that follow them
_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_GPT4_SPLITS = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFKC", "NFD", "NFKD", "StripAccents",
                      "Precompiled"}
_RUN = re.compile(r"(?<![ \t\r\n])[ \t\r\n]")  # where a run of ASCII whitespace begins


class TextCuts:
    """Where a text can be cut into two whose tokens, without the template's special tokens,
    are the text's: ``tokens(text) == tokens(text[:p]) + tokens(text[p:])``. Left truncation
    tokenizes a suffix from such a cut, and an exact count adds up the pieces between cuts.

    A cut is where a run of ASCII whitespace begins (``text[p]`` space, tab, CR or LF, the
    character before it no whitespace of any kind) for the pipelines ``of`` accepts:

    - normalizers that change a text at most within a grapheme or a combining sequence
      (BertNormalizer, Lowercase, NFC, NFKC, NFD, NFKD, StripAccents, SentencePiece's
      Precompiled), a right Strip, a Replace of a space or of runs of spaces; a space is a
      starter that composes with nothing, so the normalized text splits there too;
    - pre-tokenizers that start a word at the run and read on from it as from a text's start:
      BertPreTokenizer, Whitespace(Split); a ByteLevel with GPT-2's regex, or a Split with
      GPT-2's or a GPT-4-era regex before a ByteLevel (whose punctuation words take the line
      breaks after them: there only a space or a tab begins a cut); a Metaspace (the cut's
      character must normalize to a space), optionally after WhitespaceSplit. A prefix space
      (ByteLevel's ``add_prefix_space``) is added to the second text too, so then only a space
      begins a cut;
    - any model but a BPE with dropout: each word is tokenized alone.

    No added token may lie within its length of the cut (it could match across it, or strip
    the whitespace), and, with Precompiled, the character before the cut must not be a
    prepended concatenation mark (it joins the space's grapheme). Checked against
    ``tokenizers`` on every tokenizer family of the test fixtures
    (tests/python/attack/test_attack_long_text.py).
    """

    def __init__(self, tokenizer: Any, at: str, precompiled: bool) -> None:
        self._normalize = (tokenizer.normalizer.normalize_str if tokenizer.normalizer
                           is not None else (lambda s: s))
        self._at = at  # what the cut's character may normalize to
        self._precompiled = precompiled
        self._added = [(t.content, t.normalized)
                       for t in tokenizer.get_added_tokens_decoder().values() if t.content]

    @classmethod
    def of(cls, tokenizer: Any) -> TextCuts | None:
        try:
            spec = json.loads(tokenizer.to_str())
        except Exception:
            return None
        model, norm, pre = (spec.get("model") or {}, spec.get("normalizer"),
                            spec.get("pre_tokenizer") or {})
        if model.get("dropout"):
            return None
        norms = norm.get("normalizers") if isinstance(norm, dict) and norm.get(
            "type") == "Sequence" else ([] if norm is None else [norm])
        for n in norms or []:
            kind = n.get("type") if isinstance(n, dict) else None
            if kind == "Replace":
                if (n.get("pattern") or {}) not in ({"String": " "}, {"Regex": " {2,}"}):
                    return None
            elif kind == "Strip":
                if n.get("strip_left", n.get("left")):
                    return None
            elif kind == "BertNormalizer":
                if n.get("clean_text") is not True:
                    return None
            elif kind not in _LOCAL_NORMALIZERS:
                return None
        precompiled = any(isinstance(n, dict) and n.get("type") == "Precompiled"
                          for n in norms or [])
        pres = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
        pres = [p for p in pres or [] if isinstance(p, dict)]
        kinds = [p.get("type") for p in pres]
        ws = " \t\r\n"
        if kinds in (["BertPreTokenizer"], ["Whitespace"], ["WhitespaceSplit"]):
            at = ws
        elif kinds == ["ByteLevel"] and pres[0].get("use_regex", True):
            at = " " if pres[0].get("add_prefix_space") else ws
        elif kinds == ["Split", "ByteLevel"] and not pres[1].get("use_regex", True):
            split = pres[0]
            regex = (split.get("pattern") or {}).get("Regex")
            if split.get("behavior") != "Isolated" or split.get("invert"):
                return None
            if regex == _GPT2_SPLIT:
                at = ws
            elif regex in _GPT4_SPLITS:
                at = " \t"
            else:
                return None
            if pres[1].get("add_prefix_space"):
                at = " "
        elif kinds == ["Metaspace"] and pres[0].get("split", True):
            at = " " + str(pres[0].get("replacement", "\u2581"))
        elif kinds == ["WhitespaceSplit", "Metaspace"] and pres[1].get(
                "prepend_scheme", "always") in ("always", "never"):
            at = ws
        else:
            return None
        return cls(tokenizer, at, precompiled)

    def ok(self, text: str, p: int) -> bool:
        """Whether ``text`` can be cut at ``p`` (before a run of ASCII whitespace)."""
        if not 0 < p < len(text) or text[p] not in " \t\r\n" or text[p - 1].isspace():
            return False
        if self._precompiled and ord(text[p - 1]) in _PREPEND:
            return False
        left, right = self._normalize(text[max(0, p - 8): p]), self._normalize(text[p: p + 8])
        if not left or left[-1].isspace() or left[-1] == "\u2581" or not right or (
                right[0] not in self._at):
            return False
        for content, normalized in self._added:
            n = len(content) + 1
            window = text[max(0, p - n): p + n]
            if content in window or (normalized and content.lower() in window.lower()):
                return False
        return True

    def after(self, text: str, start: int, stop: int) -> int | None:
        """The first cut from ``start`` before ``stop``, None if there is none."""
        for m in _RUN.finditer(text, max(start, 1), min(stop, len(text))):
            if self.ok(text, m.start()):
                return m.start()
        return None

    def before(self, text: str, end: int, start: int) -> int | None:
        """The last cut at or before ``end`` and from ``start``, None if there is none."""
        hi = min(end, len(text) - 1) + 1
        while hi > max(start, 1):
            lo = max(start, 1, hi - 4096)
            found = [m.start() for m in _RUN.finditer(text, lo, hi)]
            for p in reversed(found):
                if self.ok(text, p):
                    return p
            hi = lo
        return None
