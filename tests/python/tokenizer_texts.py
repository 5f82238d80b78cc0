"""Text generators shared by the tokenizer parity tests: random Unicode of every kind.

random_texts mixes vocabulary words (some accented, some upper-cased) with whitespace of every
kind, added tokens, long words, random code points (any block, weighted to the first planes),
piles of combining marks, emoji ZWJ sequences and characters of named pools; random_bytes
breaks UTF-8 on purpose (invalid bytes, cut sequences, surrogates, overlong forms).
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Sequence


def _r(a: int, b: int) -> list[int]:
    return list(range(a, b + 1))


# fmt: off
POOLS: dict[str, list[int]] = {
    "ascii": _r(0x21, 0x7E),
    "whitespace": [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *_r(0x2000, 0x200A),
                   0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0x1C, 0x1D, 0x1E, 0x1F, 0x180E],
    "controls": [*_r(0x00, 0x08), *_r(0x0E, 0x1F), *_r(0x7F, 0x9F), *_r(0x200B, 0x200F), 0xFEFF,
                 0xFFFD, 0xFFFC, 0xE000, 0xF8FF, 0xF0000, 0x0890, 0x08E2, 0x13430, 0x00AD, 0x061C,
                 0x2060, 0xE0001, 0xE0020],
    "marks": [*_r(0x0300, 0x036F), *_r(0x0483, 0x0489), *_r(0x0591, 0x05BD), *_r(0x064B, 0x065F),
              0x0670, *_r(0x093C, 0x094D), *_r(0x1AB0, 0x1ACE), *_r(0x1DC0, 0x1DFF),
              *_r(0x20D0, 0x20F0), *_r(0xFE20, 0xFE2F), 0x07FD, 0x0C3C, 0x1734, 0x1E944, 0x1E130,
              0x16FF0, 0x1D165, 0x1D16D, 0x302A, 0x302E, 0x3099, 0x0F71, 0x0345,
              *_r(0xFE00, 0xFE0F)],
    "cjk": [*_r(0x4E00, 0x4E80), *_r(0x9F00, 0x9FFF), *_r(0x3400, 0x3420), *_r(0xF900, 0xF940),
            *_r(0x20000, 0x20010), *_r(0x2B810, 0x2B830), *_r(0x2B900, 0x2B930),
            *_r(0x2F800, 0x2F810), *_r(0x3000, 0x303F), *_r(0x3040, 0x30FF), *_r(0xFF01, 0xFF5E),
            *_r(0x2E80, 0x2E90)],
    "hangul": [*_r(0xAC00, 0xAC40), *_r(0xD7A0, 0xD7A3), *_r(0x1100, 0x1112), *_r(0x1161, 0x1175),
               *_r(0x3131, 0x3163)],
    "emoji": [*_r(0x1F600, 0x1F64F), *_r(0x1F300, 0x1F3FF), *_r(0x1F1E6, 0x1F1FF),
              *_r(0x1F3FB, 0x1F3FF), 0x200D, 0xFE0F, 0x2764, 0x263A, 0x2603, 0x20E3,
              *_r(0x1F900, 0x1F9FF)],
    "latin": [*_r(0xC0, 0x24F), *_r(0x1E00, 0x1EFF), 0x130, 0x131, 0x1E9E, 0xDF, 0x212A, 0x212B,
              0x2126, *_r(0xFB00, 0xFB06), 0xA7CB, 0xA7DC, 0x10D50, 0x10D65, 0x16EA0, 0x1C89,
              0x0149, 0x01C4, 0x01C5],
    "greek_cyrillic": [*_r(0x370, 0x3FF), *_r(0x1F00, 0x1FFF), *_r(0x400, 0x4FF)],
    "scripts": [*_r(0x5D0, 0x5EA), *_r(0x620, 0x64A), *_r(0x900, 0x97F), *_r(0xE00, 0xE5B),
                *_r(0x10A0, 0x10FF), *_r(0x1200, 0x1250), *_r(0x0F00, 0x0FBC),
                *_r(0x11000, 0x1107F), *_r(0x11900, 0x11959)],
    "punct": [*_r(0x2010, 0x2027), *_r(0x2030, 0x205E), *_r(0x2E00, 0x2E5D), 0x00A1, 0x00BF,
              0x00B7, 0x0387, 0x037E, 0x166D, 0x111C9, 0x1FEF, 0x2329, 0x232A,
              *_r(0x20A0, 0x20C0), *_r(0x2100, 0x214F), 0x00A7, 0x00B6],
}
# fmt: on
POOL_NAMES = list(POOLS)
SPECIALS = [
    "[MASK]",
    "[CLS]",
    "[SEP]",
    "[UNK]",
    "[PAD]",
    "[mask]",
    "[MASK",
    "[[SEP]]",
    "[unused0]",
    "##ing",
]


def random_code_point(rng: random.Random) -> int:
    while True:
        c = rng.randrange(0x110000) if rng.random() < 0.7 else rng.randrange(0x30000)
        if not 0xD800 <= c <= 0xDFFF:
            return c


ACCENTED = {
    "a": "àáâãäåāăą",
    "e": "èéêëēĕėęě",
    "i": "ìíîïĩīĭį",
    "o": "òóôõöōŏő",
    "u": "ùúûüũūŭůűų",
    "c": "çćĉċč",
    "n": "ñńņňŉ",
    "s": "śŝşšſ",
    "y": "ýÿŷ",
    "z": "źżž",
}


def accented(rng: random.Random, word: str) -> str:
    """The word with some letters accented: precomposed, or as a letter and combining marks."""
    out = []
    for ch in word:
        if ch in ACCENTED and rng.random() < 0.4:
            ch = rng.choice(ACCENTED[ch])
            if rng.random() < 0.3:
                ch = unicodedata.normalize("NFD", ch)
        out.append(ch)
    return "".join(out)


def random_piece(rng: random.Random, words: Sequence[str]) -> str:
    r = rng.random()
    if r < 0.45:
        w = rng.choice(words)
        if rng.random() < 0.2:
            w = accented(rng, w)
        case = rng.random()
        return w.upper() if case < 0.15 else w.capitalize() if case < 0.35 else w
    if r < 0.53:
        return (
            " "
            if rng.random() < 0.6
            else rng.choice(["\t", "\n", "  ", "\r\n", "\u3000", "\xa0", "\u2028"])
        )
    if r < 0.56:
        return rng.choice(SPECIALS)
    if (
        r < 0.57
    ):  # a long word: > 100 characters, or close to the limit (accents count until stripped)
        n = rng.choice([99, 100, 101, 102, rng.randrange(50, 250)])
        base = "".join(rng.choice("abcdefghijklmnopqrstuvwxyzé") for _ in range(n))
        return base + ("\u0301" * rng.randrange(0, 3))
    if r < 0.62:
        return "".join(chr(random_code_point(rng)) for _ in range(rng.randrange(1, 4)))
    if r < 0.67:  # a letter followed by a pile of combining marks, in random order
        marks = POOLS["marks"]
        return rng.choice("aeiouAEIOUnNcCzZ") + "".join(
            chr(rng.choice(marks)) for _ in range(rng.randrange(1, 8))
        )
    if r < 0.695:  # any assigned character, each 128-code-point page of Unicode equally likely
        page = rng.choice(_pages())
        return "".join(chr(rng.choice(page)) for _ in range(rng.randrange(1, 4)))
    if r < 0.70:  # emoji ZWJ sequence
        e = POOLS["emoji"]
        return "\u200d".join(chr(rng.choice(e)) for _ in range(rng.randrange(2, 5)))
    pool = POOLS[rng.choice(POOL_NAMES)]
    return "".join(chr(rng.choice(pool)) for _ in range(rng.randrange(1, 4)))


def random_texts(n: int, seed: int, words: Sequence[str]) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        size = (
            rng.choice([1, 2, 3, 5, 8, 13, 21]) if rng.random() < 0.98 else rng.randrange(150, 400)
        )
        glue = "" if rng.random() < 0.15 else " "
        texts.append(glue.join(random_piece(rng, words) for _ in range(size)))
    return texts


def random_bytes(n: int, seed: int, texts: Sequence[str]) -> list[bytes]:
    """Mostly valid UTF-8, with invalid bytes, cut sequences, surrogates and overlong forms."""
    rng = random.Random(seed)
    bad = [
        b"\x80",
        b"\xbf",
        b"\xc0\xaf",
        b"\xc1",
        b"\xe0\x80\x80",
        b"\xed\xa0\x80",
        b"\xed\xbf\xbf",
        b"\xf4\x90\x80\x80",
        b"\xf5",
        b"\xff",
        b"\xfe",
        b"\xf0\x9f\x98",
        b"\xe2\x82",
        b"\xc3",
        b"\xf0\x80\x80\x80",
        b"\xf8\x88\x80\x80\x80",
    ]
    out = []
    for _ in range(n):
        data = bytearray(rng.choice(texts).encode("utf-8"))
        for _ in range(rng.randrange(1, 5)):
            pos = rng.randrange(len(data) + 1)
            r = rng.random()
            if r < 0.4:
                data[pos:pos] = rng.choice(bad)
            elif r < 0.7:
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
            elif data:
                del data[pos : pos + rng.randrange(1, 3)]  # may cut a multi-byte sequence
        if rng.random() < 0.2 and data:
            data = data[: rng.randrange(len(data))]  # may end inside a sequence
        out.append(bytes(data))
    return out




_PAGES: list[list[int]] = []


def _pages() -> list[list[int]]:
    """The assigned code points (Python's Unicode data) of each 128-code-point page with any."""
    if not _PAGES:
        pages: dict[int, list[int]] = {}
        for c in range(0x110000):
            if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) != "Cn":
                pages.setdefault(c >> 7, []).append(c)
        _PAGES.extend(pages.values())
    return _PAGES
