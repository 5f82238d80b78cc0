#!/usr/bin/env python3
r"""Generate runtime/src/unicode_tables.{h,c}: the character data of the engine's tokenizer.

The tables describe every code point exactly as Hugging Face `tokenizers` sees it in BERT
normalization and pre-tokenization, so that the C tokenizer produces the same ids:

    flags   DROP (clean_text removes it), WHITESPACE, PUNCT (BertPreTokenizer isolates it),
            MN (strip_accents removes it), CJK (handle_chinese_chars spaces it), and two hints:
            HAS_LOWER, HAS_DECOMP
    ccc     canonical combining class (NFD's canonical ordering)
    nfd     full canonical decomposition (Hangul syllables are decomposed in code)
    lower   lowercase mapping (Rust's char::to_lowercase: full mapping, no context)

The data comes from Python's `unicodedata`. `tokenizers` does not use one Unicode version, though:
its Rust code takes each property from a different source,

    unicode_categories 0.1           Unicode 8.0   is_other (clean_text), is_mark_nonspacing
                                                   (strip_accents), is_punctuation (pre_tokenizer)
    unicode-normalization-alignments Unicode 9.0   NFD decompositions, combining classes
    Rust core (char)                 Unicode 17.0  is_whitespace, to_lowercase  (tokenizers 0.23.3)

so the tables are `unicodedata` (Unicode 14.0.0 in Python 3.11) plus OVERRIDES: the code points
where those sources disagree with Python's data. The overrides were measured by probing every
code point through the installed `tokenizers` (`--derive` prints them again). `--check` probes
the installed `tokenizers` and fails if any property of any code point differs from the tables.

A second table serves the SentencePiece and byte-level BPE tokenizers:

    gcb       Grapheme_Cluster_Break, Extended_Pictographic, Indic_Conjunct_Break: the extended
              grapheme clusters of the unicode-segmentation crate, which the Precompiled
              (SentencePiece) normalizer works on
    letter, number   \p{L} and \p{N} of Oniguruma, the regex engine of ByteLevel and Split
    comp      NFC's canonical compositions (Unicode 9.0, as NFD above)

Python has no grapheme data, so gcb comes from the Unicode Character Database files of Debian's
`unicode-data` package (15.0.0, /usr/share/unicode: `apt-get install unicode-data`) plus
OVERRIDES2, measured against the installed tokenizers like OVERRIDES. Grapheme boundaries are only
visible through a Precompiled normalizer, so `--check` builds probe charsmaps with
`sentencepiece`'s normalization rules when that package is installed (it is not a dependency:
run the check in the reference environment to include them; OVERRIDES2's grapheme lines are
the differences it reports against the UCD files).

Usage (from the repository root, with the project's virtual environment):
    python runtime/tools/gen_unicode_tables.py            # write the two files into runtime/src
    python runtime/tools/gen_unicode_tables.py --check    # compare with the installed tokenizers
    python runtime/tools/gen_unicode_tables.py --derive   # print OVERRIDES (this Python/tokenizers)
"""

from __future__ import annotations

import argparse
import sys
import unicodedata
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "runtime" / "src"

MAX_CP = 0x110000
SURROGATES = range(0xD800, 0xE000)

# The generated files depend on this exact unicodedata version: OVERRIDES are relative to it.
UNIDATA_VERSION = "14.0.0"

# --- Where tokenizers 0.23.3 differs from Python's unicodedata 14.0.0 ---------------------------
# Regenerate with --derive when either side changes, then check with --check.
# fmt: off
OVERRIDES = {
    # Format characters (Cf) added after Unicode 8.0: not is_other(), so clean_text keeps them.
    "not_drop": [(0x0890, 0x0891), (0x08E2, 0x08E2), (0x110CD, 0x110CD), (0x13430, 0x13438)],
    # Nonspacing marks (Mn) added after Unicode 8.0: strip_accents keeps them.
    "not_mn": [
        (0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08E1), (0x09FE, 0x09FE), (0x0AFA, 0x0AFF),
        (0x0B55, 0x0B55), (0x0C04, 0x0C04), (0x0C3C, 0x0C3C), (0x0D00, 0x0D00), (0x0D3B, 0x0D3C),
        (0x0D81, 0x0D81), (0x0EBA, 0x0EBA), (0x180F, 0x180F), (0x1885, 0x1886), (0x1ABF, 0x1ACE),
        (0x1DF6, 0x1DFB), (0xA82C, 0xA82C), (0xA8C5, 0xA8C5), (0xA8FF, 0xA8FF), (0xA9BD, 0xA9BD),
        (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50), (0x10F82, 0x10F85),
        (0x11070, 0x11070), (0x11073, 0x11074), (0x110C2, 0x110C2), (0x111C9, 0x111C9),
        (0x111CF, 0x111CF), (0x1123E, 0x1123E), (0x1133B, 0x1133B), (0x11438, 0x1143F),
        (0x11442, 0x11444), (0x11446, 0x11446), (0x1145E, 0x1145E), (0x1182F, 0x11837),
        (0x11839, 0x1183A), (0x1193B, 0x1193C), (0x1193E, 0x1193E), (0x11943, 0x11943),
        (0x119D4, 0x119D7), (0x119DA, 0x119DB), (0x119E0, 0x119E0), (0x11A01, 0x11A0A),
        (0x11A33, 0x11A38), (0x11A3B, 0x11A3E), (0x11A47, 0x11A47), (0x11A51, 0x11A56),
        (0x11A59, 0x11A5B), (0x11A8A, 0x11A96), (0x11A98, 0x11A99), (0x11C30, 0x11C36),
        (0x11C38, 0x11C3D), (0x11C3F, 0x11C3F), (0x11C92, 0x11CA7), (0x11CAA, 0x11CB0),
        (0x11CB2, 0x11CB3), (0x11CB5, 0x11CB6), (0x11D31, 0x11D36), (0x11D3A, 0x11D3A),
        (0x11D3C, 0x11D3D), (0x11D3F, 0x11D45), (0x11D47, 0x11D47), (0x11D90, 0x11D91),
        (0x11D95, 0x11D95), (0x11D97, 0x11D97), (0x11EF3, 0x11EF4), (0x16F4F, 0x16F4F),
        (0x16FE4, 0x16FE4), (0x1CF00, 0x1CF2D), (0x1CF30, 0x1CF46), (0x1E000, 0x1E006),
        (0x1E008, 0x1E018), (0x1E01B, 0x1E021), (0x1E023, 0x1E024), (0x1E026, 0x1E02A),
        (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF), (0x1E944, 0x1E94A),
    ],
    # U+1734 HANUNOO SIGN PAMUDPOD was Mn until Unicode 14.0 made it Mc.
    "mn": [(0x1734, 0x1734)],
    # Punctuation (P*) added after Unicode 8.0: not isolated by the pre-tokenizer.
    "not_punct": [
        (0x061D, 0x061D), (0x09FD, 0x09FD), (0x0A76, 0x0A76), (0x0C77, 0x0C77), (0x0C84, 0x0C84),
        (0x1B7D, 0x1B7E), (0x2E43, 0x2E4F), (0x2E52, 0x2E5D), (0x10EAD, 0x10EAD),
        (0x10F55, 0x10F59), (0x10F86, 0x10F89), (0x1144B, 0x1144F), (0x1145A, 0x1145B),
        (0x1145D, 0x1145D), (0x11660, 0x1166C), (0x116B9, 0x116B9), (0x1183B, 0x1183B),
        (0x11944, 0x11946), (0x119E2, 0x119E2), (0x11A3F, 0x11A46), (0x11A9A, 0x11A9C),
        (0x11A9E, 0x11AA2), (0x11C41, 0x11C45), (0x11C70, 0x11C71), (0x11EF7, 0x11EF8),
        (0x11FFF, 0x11FFF), (0x12FF1, 0x12FF2), (0x16E97, 0x16E9A), (0x16FE2, 0x16FE2),
        (0x1E95E, 0x1E95F),
    ],
    # Punctuation in Unicode 8.0 that later changed category (So in 12.0, Mn in 11.0).
    "punct": [(0x166D, 0x166D), (0x111C9, 0x111C9)],
    # Marks added after Unicode 9.0 have combining class 0 for the NFD of tokenizers.
    "ccc_zero": [
        (0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08D3), (0x09FE, 0x09FE), (0x0C3C, 0x0C3C),
        (0x0D3B, 0x0D3C), (0x0EBA, 0x0EBA), (0x1715, 0x1715), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFA),
        (0xA82C, 0xA82C), (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50),
        (0x10F82, 0x10F85), (0x11070, 0x11070), (0x1133B, 0x1133B), (0x1145E, 0x1145E),
        (0x11839, 0x1183A), (0x1193D, 0x1193E), (0x11943, 0x11943), (0x119E0, 0x119E0),
        (0x11A34, 0x11A34), (0x11A47, 0x11A47), (0x11A99, 0x11A99), (0x11D42, 0x11D42),
        (0x11D44, 0x11D45), (0x11D97, 0x11D97), (0x16FF0, 0x16FF1), (0x1E130, 0x1E136),
        (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF),
    ],
    # Canonical decompositions added after Unicode 9.0: tokenizers leaves these characters alone.
    "no_decomp": [(0x11938, 0x11938)],
    # Lowercase mappings of Unicode 16.0 and 17.0 characters (unassigned in Python's 14.0 data).
    "lower": [
        (0x1C89, 0x1C8A), (0xA7CB, 0x0264), (0xA7CC, 0xA7CD), (0xA7CE, 0xA7CF), (0xA7D2, 0xA7D3),
        (0xA7D4, 0xA7D5), (0xA7DA, 0xA7DB), (0xA7DC, 0x019B),
    ]
    + [(c, c + 0x20) for c in range(0x10D50, 0x10D66)]
    + [(c, c + 0x1B) for c in range(0x16EA0, 0x16EB9)],
}
# fmt: on

# The CJK ranges of tokenizers' BertNormalizer (bert.rs, is_chinese_char). 0x2B920 (not the
# 0x2B820 of the original BERT code) is what tokenizers uses, so it is what we use.
# fmt: off
CJK_RANGES = [
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
]
# Rust's char::is_whitespace (the White_Space property, unchanged since Unicode 6.3).
WHITE_SPACE = {*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
               0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
ASCII_PUNCT = set(map(ord, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"))
# fmt: on

F_DROP, F_WHITESPACE, F_PUNCT, F_MN, F_CJK, F_HAS_LOWER, F_HAS_DECOMP = (1 << i for i in range(7))

# --- Where tokenizers 0.23.3 differs from Unicode 15.0.0 (graphemes) and 14.0.0 (letters) ------
UCD_DIR = Path("/usr/share/unicode")
UCD_VERSION = "15.0.0"
# fmt: off
OVERRIDES2 = {
    # Grapheme extenders (Extend, SpacingMark) of Unicode 16.0 and 17.0 (unicode-segmentation).
    "gcb_extend": [
        (0x0897, 0x0897), (0x1ACF, 0x1ADD), (0x1AE0, 0x1AEB), (0x10D69, 0x10D6D),
        (0x10EFA, 0x10EFC), (0x113B8, 0x113C0), (0x113C2, 0x113C2), (0x113C5, 0x113C5),
        (0x113C7, 0x113CA), (0x113CC, 0x113D0), (0x113D2, 0x113D2), (0x113E1, 0x113E2),
        (0x11B60, 0x11B67), (0x11F5A, 0x11F5A), (0x1611E, 0x1612F), (0x1E5EE, 0x1E5EF),
        (0x1E6E3, 0x1E6E3), (0x1E6E6, 0x1E6E6), (0x1E6EE, 0x1E6EF), (0x1E6F5, 0x1E6F5),
    ],
    # U+113D1 TULU-TIGALARI REPHA (16.0) is Prepend; U+11A3A is no longer Prepend since 16.0.
    "gcb_prepend": [(0x113D1, 0x113D1)],
    "gcb_not_prepend": [(0x11A3A, 0x11A3A)],
    # Letters and numbers Oniguruma knows (Unicode 16.0) and Python 3.11 does not (14.0).
    "letter": [
        (0x1C89, 0x1C8A), (0xA7CB, 0xA7CD), (0xA7DA, 0xA7DC), (0x105C0, 0x105F3),
        (0x10D4A, 0x10D65), (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x1123F, 0x11240),
        (0x11380, 0x11389), (0x1138B, 0x1138B), (0x1138E, 0x1138E), (0x11390, 0x113B5),
        (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3), (0x11BC0, 0x11BE0),
        (0x11F02, 0x11F02), (0x11F04, 0x11F10), (0x11F12, 0x11F33), (0x1342F, 0x1342F),
        (0x13441, 0x13446), (0x13460, 0x143FA), (0x16100, 0x1611D), (0x16D40, 0x16D6C),
        (0x18CFF, 0x18CFF), (0x1B132, 0x1B132), (0x1B155, 0x1B155), (0x1DF25, 0x1DF2A),
        (0x1E030, 0x1E06D), (0x1E4D0, 0x1E4EB), (0x1E5D0, 0x1E5ED), (0x1E5F0, 0x1E5F0),
        (0x2B739, 0x2B739), (0x2EBF0, 0x2EE5D), (0x31350, 0x323AF),
    ],
    "number": [
        (0x10D40, 0x10D49), (0x116D0, 0x116E3), (0x11BF0, 0x11BF9), (0x11F50, 0x11F59),
        (0x16130, 0x16139), (0x16D70, 0x16D79), (0x1CCF0, 0x1CCF9), (0x1D2C0, 0x1D2D3),
        (0x1E4F0, 0x1E4F9), (0x1E5F1, 0x1E5FA),
    ],
}
# fmt: on
# Grapheme_Cluster_Break values as the C code numbers them (unicode_tables.h, emb_uc_gcb).
GCB_VALUES = ["Other", "CR", "LF", "Control", "Extend", "ZWJ", "Regional_Indicator", "Prepend",
              "SpacingMark", "L", "V", "T", "LV", "LVT"]
INCB_SCRIPTS = {"Bengali", "Devanagari", "Gujarati", "Malayalam", "Oriya", "Telugu"}
P2_EXTPICT, P2_INCB_SHIFT, P2_LETTER, P2_NUMBER, P2_COMP2 = 1 << 4, 5, 1 << 7, 1 << 8, 1 << 9
INCB_NONE, INCB_LINKER, INCB_CONSONANT, INCB_EXTEND = 0, 1, 2, 3


def ucd_property(name: str) -> dict[int, str]:
    """A property file of the Unicode Character Database: code point -> value."""
    path = UCD_DIR / name
    if not path.is_file():
        sys.exit(f"{path} is missing: apt-get install unicode-data (the UCD {UCD_VERSION} files)")
    out: dict[int, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        rng, value = (x.strip() for x in line.split(";")[:2])
        a, _, b = rng.partition("..")
        for c in range(int(a, 16), int(b or a, 16) + 1):
            out[c] = value
    return out


class Target2:
    """Grapheme, regex-class and composition data as tokenizers computes it."""

    def __init__(self, t: Target) -> None:
        readme = (UCD_DIR / "ReadMe.txt").read_text(encoding="utf-8", errors="replace")
        if f"Version {UCD_VERSION}" not in readme and UCD_VERSION not in readme:
            sys.exit(f"{UCD_DIR} is not the UCD {UCD_VERSION}: OVERRIDES2 are relative to it")
        o = OVERRIDES2
        self.gcb = ucd_property("auxiliary/GraphemeBreakProperty.txt")
        for c in (c for a, b in o["gcb_extend"] for c in range(a, b + 1)):
            self.gcb[c] = "Extend"
        for c in (c for a, b in o["gcb_prepend"] for c in range(a, b + 1)):
            self.gcb[c] = "Prepend"
        for c in (c for a, b in o["gcb_not_prepend"] for c in range(a, b + 1)):
            self.gcb.pop(c, None)
        self.extpict: set[int] = set()
        for line in (UCD_DIR / "emoji" / "emoji-data.txt").read_text(encoding="utf-8").splitlines():
            line = line.split("#")[0].strip()
            if line and line.split(";")[1].strip() == "Extended_Pictographic":
                a, _, b = line.split(";")[0].strip().partition("..")
                self.extpict.update(range(int(a, 16), int(b or a, 16) + 1))
        isc = ucd_property("IndicSyllabicCategory.txt")
        scripts = ucd_property("Scripts.txt")
        self.incb: dict[int, int] = {}
        for c, v in isc.items():
            if scripts.get(c) in INCB_SCRIPTS:
                if v == "Virama":
                    self.incb[c] = INCB_LINKER
                elif v == "Consonant":
                    self.incb[c] = INCB_CONSONANT
        for c, v in self.gcb.items():
            if v in ("Extend", "ZWJ") and c not in self.incb:
                self.incb[c] = INCB_EXTEND
        self.letter_extra = in_ranges(o["letter"])
        self.number_extra = in_ranges(o["number"])
        # NFC's compositions: a pair (a, b) composes to c when c decomposes canonically to it (in
        # tokenizers' data, i.e. t.nfd) and is not a composition exclusion.
        self.comp: dict[tuple[int, int], int] = {}
        for c in code_points():
            one = unicodedata.decomposition(chr(c)).split()
            if len(one) != 2 or one[0].startswith("<") or t.nfd(c) == [c]:
                continue
            a, b = int(one[0], 16), int(one[1], 16)
            if unicodedata.normalize("NFC", chr(a) + chr(b)) == chr(c):
                self.comp[(a, b)] = c
        self.second = {b for _, b in self.comp}

    def letter(self, c: int) -> bool:
        return unicodedata.category(chr(c)).startswith("L") or self.letter_extra(c)

    def number(self, c: int) -> bool:
        return unicodedata.category(chr(c)).startswith("N") or self.number_extra(c)

    def props(self, c: int) -> int:
        p = GCB_VALUES.index(self.gcb.get(c, "Other"))
        p |= P2_EXTPICT if c in self.extpict else 0
        p |= self.incb.get(c, INCB_NONE) << P2_INCB_SHIFT
        p |= P2_LETTER if self.letter(c) else 0
        p |= P2_NUMBER if self.number(c) else 0
        p |= P2_COMP2 if c in self.second or 0x1161 <= c <= 0x1175 or 0x11A8 <= c <= 0x11C2 else 0
        return p
HANGUL_S_BASE, HANGUL_S_COUNT = 0xAC00, 11172


def code_points() -> Iterable[int]:
    return (c for c in range(MAX_CP) if c not in SURROGATES)


def in_ranges(ranges: list[tuple[int, int]]) -> Callable[[int], bool]:
    s = {c for a, b in ranges for c in range(a, b + 1)}
    return s.__contains__


class Target:
    """Each property of each code point as tokenizers computes it: unicodedata + OVERRIDES."""

    def __init__(self) -> None:
        o = OVERRIDES
        self.not_drop, self.not_mn, self.mn_extra = (
            in_ranges(o["not_drop"]),
            in_ranges(o["not_mn"]),
            in_ranges(o["mn"]),
        )
        self.not_punct, self.punct_extra = in_ranges(o["not_punct"]), in_ranges(o["punct"])
        self.ccc_zero, self.no_decomp = in_ranges(o["ccc_zero"]), in_ranges(o["no_decomp"])
        self.lower_extra = dict(o["lower"])

    def is_control(self, c: int) -> bool:  # bert.rs is_control: is_other() except \t \n \r
        if c in (0x09, 0x0A, 0x0D) or self.not_drop(c):
            return False
        return unicodedata.category(chr(c)) in ("Cc", "Cf", "Co", "Cs")

    def drop(self, c: int) -> bool:  # the clean_text filter
        return c == 0 or c == 0xFFFD or self.is_control(c)

    def whitespace(self, c: int) -> bool:
        return c in WHITE_SPACE

    def punct(self, c: int) -> bool:
        if c in ASCII_PUNCT or self.punct_extra(c):
            return True
        return unicodedata.category(chr(c)).startswith("P") and not self.not_punct(c)

    def mn(self, c: int) -> bool:
        if self.mn_extra(c):
            return True
        return unicodedata.category(chr(c)) == "Mn" and not self.not_mn(c)

    def cjk(self, c: int) -> bool:
        return any(a <= c <= b for a, b in CJK_RANGES)

    def ccc(self, c: int) -> int:
        return 0 if self.ccc_zero(c) else unicodedata.combining(chr(c))

    def nfd(self, c: int) -> list[int]:
        ch = chr(c)
        if self.no_decomp(c) or unicodedata.is_normalized("NFD", ch):
            return [c]
        return [ord(x) for x in unicodedata.normalize("NFD", ch)]

    def lower(self, c: int) -> list[int]:
        if c in self.lower_extra:
            return [self.lower_extra[c]]
        lo = chr(c).lower()
        return [c] if len(lo) == 1 and ord(lo) == c else [ord(x) for x in lo]

    def flags(self, c: int) -> int:
        f = 0
        f |= F_DROP if self.drop(c) else 0
        f |= F_WHITESPACE if self.whitespace(c) else 0
        f |= F_PUNCT if self.punct(c) else 0
        f |= F_MN if self.mn(c) else 0
        f |= F_CJK if self.cjk(c) else 0
        f |= F_HAS_LOWER if self.lower(c) != [c] else 0
        f |= F_HAS_DECOMP if self.nfd(c) != [c] else 0
        return f


# --- Probing the installed tokenizers ------------------------------------------------------------


def probe_tokenizers() -> dict[str, dict[int, object]]:
    """Every property of every code point, measured through tokenizers' Python API (~10 s)."""
    from tokenizers import normalizers, pre_tokenizers

    def bert(clean: bool = False, cjk: bool = False, strip: bool = False) -> normalizers.Normalizer:
        return normalizers.BertNormalizer(
            clean_text=clean, handle_chinese_chars=cjk, strip_accents=strip, lowercase=False
        )

    clean, cjk, strip = bert(clean=True), bert(cjk=True), bert(strip=True)
    nfd, low, pre = normalizers.NFD(), normalizers.Lowercase(), pre_tokenizers.BertPreTokenizer()
    out: dict[str, dict[int, object]] = {
        k: {} for k in ("drop", "whitespace", "punct", "mn", "cjk", "ccc", "nfd", "lower")
    }
    for c in code_points():
        ch = chr(c)
        cleaned = clean.normalize_str(ch)
        out["drop"][c] = cleaned == ""
        pieces = pre.pre_tokenize_str("a" + ch + "a")
        out["whitespace"][c] = len(pieces) == 2
        out["punct"][c] = len(pieces) == 3
        out["cjk"][c] = cjk.normalize_str(ch) == " " + ch + " "
        d = [ord(x) for x in nfd.normalize_str(ch)]
        out["nfd"][c] = d
        if d == [c]:  # only NFD-stable characters reach the Mn filter, so only they matter
            out["mn"][c] = strip.normalize_str(ch) == ""
        out["lower"][c] = [ord(x) for x in low.normalize_str(ch)]
        py_ccc = unicodedata.combining(ch)
        if d != [c]:
            pass  # decomposed before ordering: its own class never matters
        elif py_ccc:
            # A mark tokenizers knows keeps its class (classes are stable); one it does not know has
            # class 0. Tell them apart with a neighbour that must be reordered around a known mark.
            if py_ccc < 230:
                s = "a\u0301" + ch  # U+0301 has class 230
                moved = nfd.normalize_str(s) == "a" + ch + "\u0301"
            else:
                s = "a" + ch + "\u0334"  # U+0334 has class 1
                moved = nfd.normalize_str(s) == "a\u0334" + ch
            out["ccc"][c] = py_ccc if moved else 0
        else:
            out["ccc"][c] = 0
    return out


def compare(t: Target, probed: dict[str, dict[int, object]]) -> dict[str, list[int]]:
    diffs: dict[str, list[int]] = {}
    for prop, values in probed.items():
        fn = getattr(t, prop)
        diffs[prop] = [c for c, v in values.items() if fn(c) != v]
    return diffs


def ranges_of(cs: Iterable[int]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for c in sorted(cs):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return [(a, b) for a, b in out]


def derive() -> None:
    """Print OVERRIDES as measured against plain unicodedata (no overrides applied)."""
    saved = {k: v for k, v in OVERRIDES.items()}
    for k in OVERRIDES:
        OVERRIDES[k] = []
    base = Target()
    OVERRIDES.update(saved)
    p = probe_tokenizers()

    def fmt(rs: list[tuple[int, int]]) -> str:
        return "[" + ", ".join(f"(0x{a:04X}, 0x{b:04X})" for a, b in rs) + "]"

    drop = [c for c, v in p["drop"].items() if v != base.drop(c)]
    print("not_drop:", fmt(ranges_of(c for c in drop if base.drop(c))))
    print("drop (no override kind; must be empty):", [hex(c) for c in drop if not base.drop(c)])
    mn = [c for c, v in p["mn"].items() if v != base.mn(c)]
    print("not_mn:", fmt(ranges_of(c for c in mn if base.mn(c))))
    print("mn:", fmt(ranges_of(c for c in mn if not base.mn(c))))
    pu = [c for c, v in p["punct"].items() if v != base.punct(c)]
    print("not_punct:", fmt(ranges_of(c for c in pu if base.punct(c))))
    print("punct:", fmt(ranges_of(c for c in pu if not base.punct(c))))
    cc = [c for c, v in p["ccc"].items() if v != base.ccc(c)]
    print("ccc_zero:", fmt(ranges_of(cc)), "(all probed 0:", all(p["ccc"][c] == 0 for c in cc), ")")
    nd = [c for c, v in p["nfd"].items() if v != base.nfd(c)]
    print(
        "no_decomp:",
        fmt(ranges_of(nd)),
        "(all probed identity:",
        all(p["nfd"][c] == [c] for c in nd),
        ")",
    )
    lo = [c for c, v in p["lower"].items() if v != base.lower(c)]
    print("lower:", [(hex(c), [hex(x) for x in cast(list[int], p["lower"][c])]) for c in lo])
    for prop in ("whitespace", "cjk"):
        bad = [c for c, v in p[prop].items() if v != getattr(base, prop)(c)]
        print(prop, "differences (must be empty):", [hex(c) for c in bad])


def _probe_classes() -> dict[str, set[int]]:
    r"""\p{L}, \p{N} of the regex engine of tokenizers' Split (Oniguruma), every code point."""
    from tokenizers import Regex, pre_tokenizers

    cps = list(code_points())
    out: dict[str, set[int]] = {}
    for name, cls in (("letter", r"\p{L}"), ("number", r"\p{N}")):
        split = pre_tokenizers.Split(Regex(cls + "+"), behavior="removed", invert=True)
        got: set[int] = set()
        for i in range(0, len(cps), 50_000):
            s = "".join(chr(c) for c in cps[i : i + 50_000])
            for piece, _ in split.pre_tokenize_str(s):
                got.update(map(ord, piece))
        out[name] = got
    return out


def _nfc_model(t: Target, t2: Target2, s: str) -> str:
    d = [x for ch in s for x in t.nfd(ord(ch))]
    for i in range(1, len(d)):  # canonical ordering (insertion sort: stable)
        j = i
        while j > 0 and t.ccc(d[j]) and t.ccc(d[j - 1]) > t.ccc(d[j]):
            d[j - 1], d[j] = d[j], d[j - 1]
            j -= 1
    out: list[int] = []
    starter, last = -1, -1
    for c in d:
        k = t.ccc(c)
        if starter >= 0 and (last == -1 or last < k):
            a = out[starter]
            if 0x1100 <= a < 0x1113 and 0x1161 <= c < 0x1176:
                out[starter] = 0xAC00 + ((a - 0x1100) * 21 + c - 0x1161) * 28
                continue
            if 0xAC00 <= a < 0xAC00 + 11172 and (a - 0xAC00) % 28 == 0 and 0x11A7 < c < 0x11C3:
                out[starter] += c - 0x11A7
                continue
            if (a, c) in t2.comp:
                out[starter] = t2.comp[(a, c)]
                continue
        if k == 0:
            starter, last = len(out), -1
        else:
            last = k
        out.append(c)
    return "".join(map(chr, out))


def _probe_graphemes(t2: Target2) -> dict[str, list[int]] | None:
    """Grapheme boundaries as tokenizers' Precompiled normalizer sees them, through charsmaps
    built with sentencepiece's normalization rules (None without sentencepiece): the characters
    that join a preceding "a" (Extend, ZWJ, SpacingMark), those a following "b" joins (Prepend),
    and those a following U+0301 does not join (Control, CR, LF; up to 3 bytes)."""
    try:
        import sentencepiece as spm
        from tokenizers import normalizers
        from transformers.convert_slow_tokenizer import import_protobuf
    except ImportError:
        return None
    import tempfile

    def charsmap(rules: list[tuple[str, str]], tmp: Path) -> object:
        (tmp / "rules.tsv").write_text("".join(
            " ".join(f"{ord(c):X}" for c in a) + "\t" + " ".join(f"{ord(c):X}" for c in b) + "\n"
            for a, b in rules), encoding="utf-8")
        (tmp / "text.txt").write_text("abc def ghi\n" * 50, encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(tmp / "text.txt"), model_prefix=str(tmp / "m"), vocab_size=20,
            normalization_rule_tsv=str(tmp / "rules.tsv"), hard_vocab_limit=False, minloglevel=2)
        proto = import_protobuf().ModelProto()
        proto.ParseFromString((tmp / "m.model").read_bytes())
        return normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap)

    cps = [c for c in code_points() if c not in (0, 0x50, 0x61, 0x62)]
    ext, pre, ctl = [], [], []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        n = charsmap([("a", "X")], tmp)
        ext = [c for c in cps if n.normalize_str("a" + chr(c)) == "X"]  # type: ignore[attr-defined]
        for i in range(0, len(cps), 60_000):
            chunk = cps[i : i + 60_000]
            n = charsmap([(chr(c), "P") for c in chunk], tmp)
            for c in chunk:
                ch = chr(c)
                if n.normalize_str(ch + "b") == "P":  # type: ignore[attr-defined]
                    pre.append(c)
                if len(ch.encode()) <= 3 and n.normalize_str(ch + "\u0301") != "P":  # type: ignore[attr-defined]
                    ctl.append(c)
    want_ext = [c for c in cps if t2.gcb.get(c) in ("Extend", "ZWJ", "SpacingMark")]
    want_pre = [c for c in cps if t2.gcb.get(c) == "Prepend"]
    want_ctl = [c for c in cps if len(chr(c).encode()) <= 3 and t2.gcb.get(c) in
                ("Control", "CR", "LF")]
    return {"gcb extenders": sorted(set(ext) ^ set(want_ext)),
            "gcb prepend": sorted(set(pre) ^ set(want_pre)),
            "gcb control": sorted(set(ctl) ^ set(want_ctl))}


def check2(t: Target) -> int:
    """The second table against the installed tokenizers: regex classes, NFC, graphemes."""
    from tokenizers import normalizers

    t2 = Target2(t)
    diffs: dict[str, list[int]] = {}
    probed = _probe_classes()
    diffs["letter"] = sorted(probed["letter"] ^ {c for c in code_points() if t2.letter(c)})
    diffs["number"] = sorted(probed["number"] ^ {c for c in code_points() if t2.number(c)})
    nfc = normalizers.NFC()
    diffs["nfc"] = [c for c in code_points()
                    if nfc.normalize_str(chr(c)) != _nfc_model(t, t2, chr(c))]
    pairs = []
    for c in code_points():
        parts = unicodedata.decomposition(chr(c)).split()
        if len(parts) == 2 and not parts[0].startswith("<"):
            pairs.append(chr(int(parts[0], 16)) + chr(int(parts[1], 16)))
    diffs["nfc pairs"] = [ord(p[0]) for p in pairs
                          if nfc.normalize_str(p) != _nfc_model(t, t2, p)]
    g = _probe_graphemes(t2)
    if g is None:
        print("  graphemes  not probed: sentencepiece is not installed (run in the reference env)")
    else:
        diffs.update(g)
    failed = 0
    for prop, bad in diffs.items():
        print(f"  {prop:14s} {len(bad)} differences" + (": " + " ".join(hex(c) for c in bad[:20])
                                                         if bad else ""))
        failed += len(bad)
    return failed


def check() -> int:
    t = Target()
    diffs = compare(t, probe_tokenizers())
    import tokenizers

    print(f"tokenizers {tokenizers.__version__}, unicodedata {unicodedata.unidata_version}")
    failed = 0
    for prop, bad in diffs.items():
        print(
            f"  {prop:10s} {len(bad)} differences"
            + (": " + " ".join(hex(c) for c in bad[:20]) if bad else "")
        )
        failed += len(bad)
    failed += check2(t)
    return 1 if failed else 0


# --- Emitting the C tables ------------------------------------------------------------------------


def two_stage(values: list[int], shift: int) -> tuple[list[int], list[int]]:
    size = 1 << shift
    blocks: dict[tuple[int, ...], int] = {}
    stage1: list[int] = []
    stage2: list[int] = []
    for start in range(0, len(values), size):
        block = tuple(values[start : start + size])
        if block not in blocks:
            blocks[block] = len(blocks)
            stage2.extend(block)
        stage1.append(blocks[block])
    return stage1, stage2


def width(values: list[int]) -> int:
    return 1 if max(values) < 256 else 2


def ctype_of(values: list[int]) -> str:
    return "uint8_t" if width(values) == 1 else "uint16_t"


def c_array(ctype: str, name: str, values: list[int], per_line: int = 16, fmt: str = "{}") -> str:
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join(fmt.format(v) for v in values[i : i + per_line]) + ",")
    return f"const {ctype} {name}[{len(values)}] = {{\n" + "\n".join(lines) + "\n};\n"


def lower_ranges(pairs: list[tuple[int, int]]) -> list[tuple[int, int, int, int]]:
    """Runs (first, last, step, delta) covering single-character lowercase mappings."""
    runs: list[list[int]] = []
    for c, low in pairs:
        d = low - c
        if runs:
            _, last, step, delta = runs[-1]
            if delta == d and (c - last) in (1, 2) and (step == 0 or c - last == step):
                runs[-1][1], runs[-1][2] = c, c - last
                continue
        runs.append([c, c, 0, d])
    return [(a, b, s or 1, d) for a, b, s, d in runs]


def generate(out_dir: Path) -> None:
    if unicodedata.unidata_version != UNIDATA_VERSION:
        sys.exit(
            f"unicodedata is {unicodedata.unidata_version}, OVERRIDES are for {UNIDATA_VERSION}: "
            "run with the project's Python 3.11, or re-derive them with --derive and --check"
        )
    t = Target()
    flags = [0] * MAX_CP
    cccs = [0] * MAX_CP
    decomps: list[tuple[int, list[int]]] = []
    lower1: list[tuple[int, int]] = []
    lower_multi: list[tuple[int, list[int]]] = []
    stable = [False] * MAX_CP  # NFD leaves it alone: every character NFD can output is one
    lowers: dict[int, list[int]] = {}
    for c in code_points():
        flags[c] = t.flags(c)
        cccs[c] = t.ccc(c)
        d = t.nfd(c)
        stable[c] = d == [c]
        if not stable[c] and not (HANGUL_S_BASE <= c < HANGUL_S_BASE + HANGUL_S_COUNT):
            decomps.append((c, d))
        lo = t.lower(c)
        if lo != [c]:
            lowers[c] = lo
            (lower1.append((c, lo[0])) if len(lo) == 1 else lower_multi.append((c, lo)))

    # Facts the C normalizer relies on (see normalizer.c): fail here rather than tokenize wrongly.
    for c in code_points():
        if cccs[c]:
            assert not flags[c] & (F_WHITESPACE | F_PUNCT | F_CJK), hex(c)
        if stable[c] and c in lowers:
            lo = lowers[c]
            assert len(lo) == 1 and t.ccc(lo[0]) == cccs[c], hex(c)
            assert cccs[c] == 0, hex(c)
    for c, d in decomps:
        assert all(stable[x] for x in d), hex(c)
        if flags[c] & F_CJK:
            assert len(d) == 1 and flags[d[0]] & F_CJK, hex(c)
    nfd_max = max(len(d) for _, d in decomps)
    lower_max = max([1] + [len(lo) for _, lo in lower_multi])

    records: dict[tuple[int, int], int] = {}
    rec_of = [records.setdefault((flags[c], cccs[c]), len(records)) for c in range(MAX_CP)]
    assert len(records) <= 256
    # Three-level lookup: cp >> shift1 -> level-2 block; with the next bits -> level-3 block;
    # with the low shift2 bits -> record.
    best: tuple[int, int, int, list[int], list[int], list[int]] | None = None
    for shift2 in range(4, 9):
        mid, stage3 = two_stage(rec_of, shift2)
        for shift1 in range(shift2 + 2, 17):
            stage1, stage2 = two_stage(mid, shift1 - shift2)
            size = len(stage1) * width(stage1) + len(stage2) * width(stage2) + len(stage3)
            if best is None or size < best[0]:
                best = (size, shift1, shift2, stage1, stage2, stage3)
    assert best is not None
    _, shift1, shift2, stage1, stage2, stage3 = best
    recs = sorted(records, key=records.__getitem__)

    # Decompositions, one step each (cp -> a [b]), packed as cp << 42 | a << 21 | b so that the
    # sorted uint64 array is sorted by cp; the normalizer expands them recursively.
    decomp64 = []
    for c, _ in decomps:
        one = unicodedata.decomposition(chr(c)).split()
        assert one and not one[0].startswith("<"), hex(c)
        parts = [int(x, 16) for x in one]
        assert len(parts) in (1, 2), hex(c)
        decomp64.append(c << 42 | parts[0] << 21 | (parts[1] if len(parts) == 2 else 0))
    assert decomp64 == sorted(decomp64)
    lruns = lower_ranges(lower1)
    assert all(b - a < 1 << 16 and s in (1, 2) and (b - a) % s == 0 for a, b, s, _ in lruns)

    py = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    banner = (
        "/* GENERATED by runtime/tools/gen_unicode_tables.py — do not edit; regenerate instead.\n"
        f" * Source: {py} unicodedata, Unicode {unicodedata.unidata_version}, adjusted to what\n"
        " * Hugging Face tokenizers 0.23.3 computes: Unicode 8.0 general categories\n"
        " * (unicode_categories crate), Unicode 9.0 NFD and combining classes\n"
        " * (unicode-normalization-alignments crate), Unicode 17.0 White_Space and lowercase\n"
        " * (Rust core). See docs/tokenizer.md. */\n"
    )
    total = (
        len(stage1) * width(stage1)
        + len(stage2) * width(stage2)
        + len(stage3)
        + 2 * len(recs)
        + 8 * len(decomp64)
        + 12 * len(lruns)
        + 4 * 3 * len(lower_multi)
    )
    flag_docs = [
        ("DROP", F_DROP, "clean_text drops it: NUL, U+FFFD, Cc/Cf/Co (not \\t\\n\\r)"),
        ("WHITESPACE", F_WHITESPACE, "White_Space: clean_text makes it ' ', splits words"),
        ("PUNCT", F_PUNCT, "ASCII punctuation or P*: a word of its own"),
        ("MN", F_MN, "Mn: strip_accents drops it after NFD"),
        ("CJK", F_CJK, "handle_chinese_chars puts spaces around it"),
        ("HAS_LOWER", F_HAS_LOWER, "has a lowercase mapping other than itself"),
        ("HAS_DECOMP", F_HAS_DECOMP, "has a canonical decomposition (Hangul included)"),
    ]
    flag_lines = "\n".join(
        f"    {f'EMB_UC_{name} = 0x{value:02x},':27s}/* {doc} */" for name, value, doc in flag_docs
    )
    h_text = (
        banner
        + f"""
#ifndef EMB_UNICODE_TABLES_H
#define EMB_UNICODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

#define EMB_UC_UNICODE_VERSION "{unicodedata.unidata_version}"
/* About {total} bytes of tables in all. */

enum emb_uc_flag {{
{flag_lines}
}};

#define EMB_UC_SHIFT1 {shift1}
#define EMB_UC_SHIFT2 {shift2}
#define EMB_UC_NFD_MAX_LEN {nfd_max}      /* longest full canonical decomposition */
#define EMB_UC_LOWER_MAX_LEN {lower_max}    /* longest lowercase mapping */
#define EMB_UC_N_DECOMP {len(decomp64)}
#define EMB_UC_N_LOWER_RUNS {len(lruns)}
#define EMB_UC_N_LOWER_MULTI {len(lower_multi)}

/* cp >> SHIFT1 -> level-2 block; with the next bits -> level-3 block; with the low SHIFT2 bits
   -> record */
extern const {ctype_of(stage1)} emb_uc_stage1[{len(stage1)}];
extern const {ctype_of(stage2)} emb_uc_stage2[{len(stage2)}];
extern const uint8_t emb_uc_stage3[{len(stage3)}];
extern const uint8_t emb_uc_records[{len(recs)}][2];  /* record -> (flags, combining class) */
/* One-step canonical decompositions, sorted: cp << 42 | first << 21 | second (0: none). Hangul
   syllables are not listed; they decompose arithmetically. */
extern const uint64_t emb_uc_decomp[EMB_UC_N_DECOMP];
/* Single-character lowercase mappings as runs: cp = first + k * step (0 <= k < len) maps to
   cp + delta. Sorted by first; runs do not overlap. */
typedef struct emb_uc_lower_run {{
    uint32_t first;
    uint16_t len;
    uint16_t step;
    int32_t delta;
}} emb_uc_lower_run;
extern const emb_uc_lower_run emb_uc_lower_runs[EMB_UC_N_LOWER_RUNS];
/* Lowercase mappings to more than one character: cp, then its mapping padded with 0. */
extern const uint32_t emb_uc_lower_multi[EMB_UC_N_LOWER_MULTI][1 + EMB_UC_LOWER_MAX_LEN];

static inline const uint8_t *emb_uc_record(uint32_t cp) {{
    if (cp >= 0x110000u) cp = 0xFFFEu; /* a noncharacter: no flags, class 0 */
    uint32_t b2 = emb_uc_stage1[cp >> EMB_UC_SHIFT1];
    uint32_t mid = (cp >> EMB_UC_SHIFT2) & ((1u << (EMB_UC_SHIFT1 - EMB_UC_SHIFT2)) - 1u);
    uint32_t b3 = emb_uc_stage2[(b2 << (EMB_UC_SHIFT1 - EMB_UC_SHIFT2)) | mid];
    uint32_t low = cp & ((1u << EMB_UC_SHIFT2) - 1u);
    return emb_uc_records[emb_uc_stage3[(b3 << EMB_UC_SHIFT2) | low]];
}}
static inline unsigned emb_uc_flags(uint32_t cp) {{ return emb_uc_record(cp)[0]; }}
static inline unsigned emb_uc_ccc(uint32_t cp) {{ return emb_uc_record(cp)[1]; }}

#endif /* EMB_UNICODE_TABLES_H */
"""
    )
    c_text = banner + '\n#include "unicode_tables.h"\n\n'
    c_text += c_array(ctype_of(stage1), "emb_uc_stage1", stage1, 24) + "\n"
    c_text += c_array(ctype_of(stage2), "emb_uc_stage2", stage2, 24) + "\n"
    c_text += c_array("uint8_t", "emb_uc_stage3", stage3, 32) + "\n"
    c_text += f"const uint8_t emb_uc_records[{len(recs)}][2] = {{\n"
    c_text += "\n".join(f"    {{0x{f:02x}, {k}}}," for f, k in recs) + "\n};\n\n"
    c_text += c_array("uint64_t", "emb_uc_decomp", decomp64, 4, "0x{:016X}u") + "\n"
    c_text += "const emb_uc_lower_run emb_uc_lower_runs[EMB_UC_N_LOWER_RUNS] = {\n"
    c_text += (
        "\n".join(f"    {{0x{a:05X}, {(b - a) // s + 1}, {s}, {d}}}," for a, b, s, d in lruns)
        + "\n};\n\n"
    )
    c_text += (
        "const uint32_t emb_uc_lower_multi[EMB_UC_N_LOWER_MULTI][1 + EMB_UC_LOWER_MAX_LEN] = {\n"
    )
    c_text += (
        "\n".join(
            "    {"
            + ", ".join(f"0x{x:04X}" for x in [cp] + lo + [0] * (lower_max - len(lo)))
            + "},"
            for cp, lo in lower_multi
        )
        + "\n};\n"
    )
    # The second table: grapheme break, regex classes, composition (Target2).
    t2 = Target2(t)
    props2 = [t2.props(c) if not 0xD800 <= c < 0xE000 else 0 for c in range(MAX_CP)]
    recs2_of: dict[int, int] = {}
    rec2 = [recs2_of.setdefault(v, len(recs2_of)) for v in props2]
    assert len(recs2_of) <= 256
    best2: tuple[int, int, int, list[int], list[int], list[int]] | None = None
    for sh2 in range(4, 9):
        mid2, st3 = two_stage(rec2, sh2)
        for sh1 in range(sh2 + 2, 17):
            st1, st2 = two_stage(mid2, sh1 - sh2)
            size = len(st1) * width(st1) + len(st2) * width(st2) + len(st3)
            if best2 is None or size < best2[0]:
                best2 = (size, sh1, sh2, st1, st2, st3)
    assert best2 is not None
    _, p_shift1, p_shift2, p_stage1, p_stage2, p_stage3 = best2
    p_recs = sorted(recs2_of, key=recs2_of.__getitem__)
    comp64 = sorted(a << 42 | b << 21 | c for (a, b), c in t2.comp.items())
    assert all(max(a, b, c) < 1 << 21 for (a, b), c in t2.comp.items())
    total2 = (len(p_stage1) * width(p_stage1) + len(p_stage2) * width(p_stage2) + len(p_stage3)
              + 2 * len(p_recs) + 8 * len(comp64))
    gcb_enum = "\n".join(f"    EMB_UC_GCB_{v.upper()} = {i}," for i, v in enumerate(GCB_VALUES))
    h_text = h_text.replace(
        "\n#endif /* EMB_UNICODE_TABLES_H */\n",
        f"""
/* ---- The second table: graphemes (UAX #29), regex classes (Oniguruma), NFC -------------------
   About {total2} bytes. Source: the UCD {UCD_VERSION} files (graphemes), Python's unicodedata
   (letters, numbers, compositions), adjusted to what tokenizers 0.23.3 computes
   (gen_unicode_tables.py). */
typedef enum emb_uc_gcb {{
{gcb_enum}
}} emb_uc_gcb;
enum emb_uc_prop2 {{
    EMB_UC_P2_GCB_MASK = 0x0f,    /* emb_uc_gcb */
    EMB_UC_P2_EXTPICT = 0x{P2_EXTPICT:03x},    /* Extended_Pictographic */
    EMB_UC_P2_INCB_SHIFT = {P2_INCB_SHIFT},    /* Indic_Conjunct_Break, 2 bits: emb_uc_incb */
    EMB_UC_P2_LETTER = 0x{P2_LETTER:03x},     /* \\p{{L}} */
    EMB_UC_P2_NUMBER = 0x{P2_NUMBER:03x},     /* \\p{{N}} */
    EMB_UC_P2_COMP2 = 0x{P2_COMP2:03x},      /* second character of a canonical composition */
}};
typedef enum emb_uc_incb {{
    EMB_UC_INCB_NONE = {INCB_NONE}, EMB_UC_INCB_LINKER = {INCB_LINKER},
    EMB_UC_INCB_CONSONANT = {INCB_CONSONANT}, EMB_UC_INCB_EXTEND = {INCB_EXTEND},
}} emb_uc_incb;
#define EMB_UC_P2_SHIFT1 {p_shift1}
#define EMB_UC_P2_SHIFT2 {p_shift2}
#define EMB_UC_N_COMP {len(comp64)}
extern const {ctype_of(p_stage1)} emb_uc_p2_stage1[{len(p_stage1)}];
extern const {ctype_of(p_stage2)} emb_uc_p2_stage2[{len(p_stage2)}];
extern const uint8_t emb_uc_p2_stage3[{len(p_stage3)}];
extern const uint16_t emb_uc_p2_records[{len(p_recs)}];
/* Canonical compositions, sorted: first << 42 | second << 21 | composite (Hangul: arithmetic). */
extern const uint64_t emb_uc_comp[EMB_UC_N_COMP];

static inline unsigned emb_uc_props2(uint32_t cp) {{
    if (cp >= 0x110000u) cp = 0xFFFEu;
    uint32_t b2 = emb_uc_p2_stage1[cp >> EMB_UC_P2_SHIFT1];
    uint32_t mid = (cp >> EMB_UC_P2_SHIFT2) & ((1u << (EMB_UC_P2_SHIFT1 - EMB_UC_P2_SHIFT2)) - 1u);
    uint32_t b3 = emb_uc_p2_stage2[(b2 << (EMB_UC_P2_SHIFT1 - EMB_UC_P2_SHIFT2)) | mid];
    uint32_t low = cp & ((1u << EMB_UC_P2_SHIFT2) - 1u);
    return emb_uc_p2_records[emb_uc_p2_stage3[(b3 << EMB_UC_P2_SHIFT2) | low]];
}}

#endif /* EMB_UNICODE_TABLES_H */
""",
    )
    c_text += "\n" + c_array(ctype_of(p_stage1), "emb_uc_p2_stage1", p_stage1, 24) + "\n"
    c_text += c_array(ctype_of(p_stage2), "emb_uc_p2_stage2", p_stage2, 24) + "\n"
    c_text += c_array("uint8_t", "emb_uc_p2_stage3", p_stage3, 32) + "\n"
    c_text += c_array("uint16_t", "emb_uc_p2_records", p_recs, 12, "0x{:04x}") + "\n"
    c_text += c_array("uint64_t", "emb_uc_comp", comp64, 4, "0x{:016X}u")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "unicode_tables.h").write_text(h_text, encoding="utf-8")
    (out_dir / "unicode_tables.c").write_text(c_text, encoding="utf-8")
    print(
        f"wrote unicode_tables.h and unicode_tables.c in {out_dir}: ~{total} bytes of tables, "
        f"shifts {shift1}/{shift2}, {len(recs)} records, {len(decomp64)} decompositions, "
        f"{len(lruns)} lowercase runs; second table ~{total2} bytes, {len(p_recs)} records, "
        f"{len(comp64)} compositions"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument(
        "--check",
        action="store_true",
        help="compare the tables' data with the installed tokenizers",
    )
    g.add_argument(
        "--derive",
        action="store_true",
        help="print OVERRIDES measured against the installed tokenizers",
    )
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=OUT_DIR,
        help="where to write the files (default: runtime/src)",
    )
    args = ap.parse_args()
    if args.check:
        return check()
    if args.derive:
        derive()
        return 0
    generate(args.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
