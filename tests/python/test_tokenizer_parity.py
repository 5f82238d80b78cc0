"""The engine's C tokenizer produces exactly the ids of Hugging Face `tokenizers`.

The C sources are compiled here with gcc (the engine's flags, runtime/cflags.txt) into a shared
library called through ctypes, and into a command-line driver (tests/runtime/tokenizer_driver.c)
built once more with AddressSanitizer and UndefinedBehaviorSanitizer. Both are compared with
`Tokenizer.from_file(tokenizer.json)` (no padding, truncation at 256) on:

  - the reference corpus (tests/fixtures/reference/corpus.json), when present;
  - 100,000 strings generated from a fixed seed (random Unicode, combining marks, CJK, emoji and ZWJ
    sequences, controls, whitespace of every kind, punctuation, words longer than 100 characters,
    accented and cased letters, added tokens such as [MASK], vocabulary words);
  - invalid UTF-8: the C side gets the raw bytes, tokenizers gets bytes.decode("utf-8", "replace");
  - every code point, one at a time, through the normalizer and the pre-tokenizer;
  - the normalized words themselves, before WordPiece (whose [UNK] would hide differences).
The sanitizer build runs a smaller sample; a last test checks that runtime/src/unicode_tables.{h,c}
are what runtime/tools/gen_unicode_tables.py writes.
"""

from __future__ import annotations

import ctypes
import json
import re
import struct
import subprocess
import sys
import unicodedata
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, normalizers, pre_tokenizers

from c_build import CFLAGS, declare, gcc
from c_build import TOKENIZER_SOURCES as SOURCES
from c_header import parse as parse_header
from edgembed.backends._abi import Status
from tokenizer_texts import random_bytes, random_texts

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "runtime" / "src"
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"
MAX_LENGTH = 256
N_RANDOM = 100_000
SEED = 20240601

EMB_STATUS_OK = Status.OK
EMB_STATUS_BUFFER_TOO_SMALL = Status.BUFFER_TOO_SMALL

# emb_tokenizer_config, laid out from tokenizer.h (whose EMB_ASSERT_FIELD lines pin the offsets)
Config = parse_header(SRC / "tokenizer.h").ctypes_struct("emb_tokenizer_config")


# --- the two sides --------------------------------------------------------------------------------


class CTokenizer:
    """The C tokenizer through ctypes, configured from tokenizer.json as the bundle writer does."""

    def __init__(self, lib_path: Path, tokenizer_json: Path) -> None:
        spec = json.loads(tokenizer_json.read_text(encoding="utf-8"))
        norm, model = spec["normalizer"], spec["model"]
        assert norm["type"] == "BertNormalizer" and model["type"] == "WordPiece"
        assert spec["pre_tokenizer"]["type"] == "BertPreTokenizer"
        assert model["continuing_subword_prefix"] == "##"
        vocab = model["vocab"]
        tokens = sorted(vocab, key=vocab.__getitem__)
        assert [vocab[t] for t in tokens] == list(range(len(tokens)))
        # Kept alive as long as the tokenizer: the C side references it.
        self._vocab = ("\n".join(tokens) + "\n").encode("utf-8")
        strip = norm["strip_accents"]
        cfg = Config(
            int(norm["lowercase"]),
            int(norm["lowercase"] if strip is None else strip),
            int(norm["handle_chinese_chars"]),
            int(norm["clean_text"]),
            vocab[model["unk_token"]],
            vocab["[CLS]"],
            vocab["[SEP]"],
            vocab["[PAD]"],
            model["max_input_chars_per_word"],
            MAX_LENGTH,
        )
        added = [t["id"] for t in spec["added_tokens"]]
        assert all(
            not t["normalized"] and not t["lstrip"] and not t["rstrip"] and not t["single_word"]
            for t in spec["added_tokens"]
        )

        self.lib = lib = ctypes.CDLL(str(lib_path))
        lib.emb_tokenizer_init_ex.restype = ctypes.c_int
        lib.emb_tokenizer_init_ex.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(Config),
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_int32),
            ctypes.c_size_t,
        ]
        lib.emb_tokenizer_encode.restype = ctypes.c_int
        lib.emb_tokenizer_encode.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int32),
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        lib.emb_tokenizer_free.argtypes = [ctypes.c_void_p]
        lib.emb_tokenizer_encode_ex.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
            ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t),
        ]
        declare(lib, "emb_utf8_offsets_to_chars")
        self.handle = ctypes.c_void_p()
        ids = (ctypes.c_int32 * len(added))(*added)
        status = lib.emb_tokenizer_init_ex(
            ctypes.byref(self.handle),
            ctypes.byref(cfg),
            self._vocab,
            len(self._vocab),
            ids,
            len(added),
        )
        assert status == EMB_STATUS_OK, status
        self.ids = (ctypes.c_int32 * MAX_LENGTH)()
        self.n_ids, self.n_full = ctypes.c_size_t(), ctypes.c_size_t()
        self._encode = lib.emb_tokenizer_encode

    def encode(self, text: str | bytes) -> list[int]:
        data = text.encode("utf-8") if isinstance(text, str) else text
        status = self._encode(
            self.handle,
            data,
            len(data),
            1,
            self.ids,
            MAX_LENGTH,
            ctypes.byref(self.n_ids),
            ctypes.byref(self.n_full),
        )
        assert status == EMB_STATUS_OK, (status, text)
        return self.ids[: self.n_ids.value]

    def encode_ex(
        self, a: str, b: str | None = None
    ) -> tuple[list[int], list[int], list[tuple[int, int]]]:
        """Ids, type ids and code-point offsets (each text's own) through the general pipeline."""
        lib, cap = self.lib, 2 * MAX_LENGTH
        da, db = a.encode("utf-8"), None if b is None else b.encode("utf-8")
        ids, types = (ctypes.c_int32 * cap)(), (ctypes.c_int32 * cap)()
        offs = (ctypes.c_uint32 * (2 * cap))()
        n, full = ctypes.c_size_t(), ctypes.c_size_t()
        status = lib.emb_tokenizer_encode_ex(
            self.handle, da, len(da), db, 0 if db is None else len(db), 1, ids, types, offs, cap,
            ctypes.byref(n), ctypes.byref(full),
        )
        assert status == EMB_STATUS_OK, (status, a, b)
        k = n.value
        t = list(types[:k])
        sep = next(i for i in range(k) if ids[i] == ids[k - 1]) if b is not None else k
        out = list(offs[: 2 * k])
        for text, lo, hi in ((da, 0, sep + 1), (db, sep + 1, k)):
            if text is None or hi <= lo:
                continue
            part = (ctypes.c_uint32 * (2 * (hi - lo)))(*out[2 * lo : 2 * hi])
            lib.emb_utf8_offsets_to_chars(text, len(text), part, 2 * (hi - lo), 0)
            out[2 * lo : 2 * hi] = list(part)
        return list(ids[:k]), t, [(out[2 * i], out[2 * i + 1]) for i in range(k)]

    def close(self) -> None:
        self.lib.emb_tokenizer_free(self.handle)


@pytest.fixture(scope="module", autouse=True)
def _model_files(hf_model_dir: Path) -> None:
    for name in ("tokenizer.json", "vocab.txt"):
        if not (hf_model_dir / name).exists():
            pytest.skip(f"{hf_model_dir / name} is absent (set EDGEMBED_TEST_HF_DIR)")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tokenizer_build")


@pytest.fixture(scope="module")
def c_tokenizer(build_dir: Path, hf_model_dir: Path) -> Iterator[CTokenizer]:
    lib = build_dir / "libtokenizer.so"
    gcc(["-O2", "-shared", "-fPIC", *CFLAGS, *SOURCES, "-o", lib])
    tok = CTokenizer(lib, hf_model_dir / "tokenizer.json")
    yield tok
    tok.close()


@pytest.fixture(scope="module")
def hf_tokenizer(hf_model_dir: Path) -> Tokenizer:
    tok = Tokenizer.from_file(str(hf_model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(MAX_LENGTH)
    return tok


def hf_ids(hf: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in hf.encode_batch(list(texts))]


def assert_same(
    texts: Sequence[str | bytes], got: Sequence[list[Any]], want: Sequence[list[Any]]
) -> None:
    """Fails on any difference, showing the first few texts and where their results part."""
    assert len(got) == len(want) == len(texts)
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    if bad:
        lines = [f"{len(bad)} of {len(texts)} texts differ; the first ones:"]
        for i in bad[:5]:
            g, w = got[i], want[i]
            pairs = enumerate(zip(g, w, strict=False))
            at = next((k for k, (a, b) in pairs if a != b), min(len(g), len(w)))
            text = repr(texts[i])
            lo, hi = max(0, at - 2), at + 4
            lines.append(
                f"  {text[:300] + ' ...' if len(text) > 300 else text}\n"
                f"    from item {at} (of {len(g)} / {len(w)}):\n"
                f"    C:          {g[lo:hi]}\n    tokenizers: {w[lo:hi]}"
            )
        pytest.fail("\n".join(lines), pytrace=False)


# --- text generation ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def words(hf_model_dir: Path) -> list[str]:
    vocab = (hf_model_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    return [w.removeprefix("##") for w in vocab if w and not w.startswith("[")]


@pytest.fixture(scope="module")
def texts(words: list[str]) -> list[str]:
    return random_texts(N_RANDOM, SEED, words)


@pytest.fixture(scope="module")
def driver(build_dir: Path) -> Path:
    path = build_dir / "tokenizer_driver"
    gcc(["-O2", *CFLAGS, *SOURCES, REPO / "tests" / "runtime" / "tokenizer_driver.c", "-o", path])
    return path


def records(data: Sequence[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(d)) + d for d in data)


def int32s(out: bytes) -> array[int]:
    values = array("i")
    values.frombytes(out)
    if sys.byteorder != "little":
        values.byteswap()
    return values


# --- tests ----------------------------------------------------------------------------------------


def test_vocab_txt_matches_tokenizer_json(hf_model_dir: Path) -> None:
    spec = json.loads((hf_model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    lines = (hf_model_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    assert {t: i for i, t in enumerate(lines)} == spec["model"]["vocab"]


def test_examples(c_tokenizer: CTokenizer, hf_tokenizer: Tokenizer) -> None:
    texts = [
        "Hello, world!",
        "hello [MASK] world",
        "İstanbul",
        "naïveté",
        "中文字符",
        "한국어",
        "e\u0301\u0316",
        "a" * 100,
        "a" * 101,
        "x " * 300,
        "",
        "\x00\ufffd",
        "Σίσυφος",
        "ǅemal",
        "ﬁne",
        "🏳️‍🌈 👍🏽",
        "$5.00€",
    ]
    assert_same(texts, [c_tokenizer.encode(t) for t in texts], hf_ids(hf_tokenizer, texts))


def test_reference_corpus(c_tokenizer: CTokenizer, hf_tokenizer: Tokenizer) -> None:
    if not CORPUS.exists():
        pytest.skip(f"{CORPUS.relative_to(REPO)} is absent")
    texts = json.loads(CORPUS.read_text(encoding="utf-8"))
    assert isinstance(texts, list) and texts
    assert_same(texts, [c_tokenizer.encode(t) for t in texts], hf_ids(hf_tokenizer, texts))


@pytest.mark.slow
def test_random_strings(c_tokenizer: CTokenizer, hf_tokenizer: Tokenizer, texts: list[str]) -> None:
    want = hf_ids(hf_tokenizer, texts)
    got = [c_tokenizer.encode(t) for t in texts]
    assert_same(texts, got, want)
    assert sum(len(w) == MAX_LENGTH for w in want) > 100  # truncation was exercised
    assert sum(100 in w for w in want) > 1000  # and [UNK]


@pytest.mark.slow
def test_invalid_utf8(c_tokenizer: CTokenizer, hf_tokenizer: Tokenizer, words: list[str]) -> None:
    data = random_bytes(20_000, SEED + 1, random_texts(2_000, SEED + 2, words))
    want = hf_ids(hf_tokenizer, [d.decode("utf-8", "replace") for d in data])
    assert_same(data, [c_tokenizer.encode(d) for d in data], want)


def test_offsets_and_pairs(
    c_tokenizer: CTokenizer, hf_tokenizer: Tokenizer, texts: list[str]
) -> None:
    """The general pipeline's WordPiece (BertNormalizer and BertPreTokenizer as steps that track
    where each character came from): the offsets and pairs of tokenizers, and the same ids as the
    streaming path."""
    sample = texts[:20_000]
    got = [c_tokenizer.encode_ex(t) for t in sample]
    want = [(e.ids, e.type_ids, [tuple(o) for o in e.offsets])
            for e in hf_tokenizer.encode_batch(sample)]
    assert_same(sample, got, want)  # type: ignore[arg-type]
    pairs = list(zip(sample[:3000], sample[-3000:], strict=True))
    got_pairs = [c_tokenizer.encode_ex(a, b)[:2] for a, b in pairs]
    want_pairs = [(e.ids, e.type_ids) for e in hf_tokenizer.encode_batch(pairs)]
    assert_same([f"{a!r} / {b!r}" for a, b in pairs], got_pairs, want_pairs)  # type: ignore[arg-type]


def test_truncation_flags(c_tokenizer: CTokenizer, hf_tokenizer: Tokenizer) -> None:
    lib, text = c_tokenizer.lib, ("word " * 300).encode()
    n, full = ctypes.c_size_t(), ctypes.c_size_t()
    ids = (ctypes.c_int32 * 400)()
    assert (
        lib.emb_tokenizer_encode(
            c_tokenizer.handle, text, len(text), 0, ids, 400, ctypes.byref(n), ctypes.byref(full)
        )
        == 9
    )  # EMB_STATUS_TOO_LONG
    assert full.value == 302 and n.value == 0
    assert len(hf_tokenizer.encode(text.decode()).ids) == MAX_LENGTH
    hf_tokenizer.no_truncation()
    try:
        assert len(hf_tokenizer.encode(text.decode()).ids) == full.value
    finally:
        hf_tokenizer.enable_truncation(MAX_LENGTH)
    assert (
        lib.emb_tokenizer_encode(
            c_tokenizer.handle, text, len(text), 1, ids, 10, ctypes.byref(n), ctypes.byref(full)
        )
        == EMB_STATUS_BUFFER_TOO_SMALL
    )
    assert n.value == MAX_LENGTH and full.value == 302


CONFIGS = [
    (1, 1, 1, 1),
    (0, 0, 1, 1),
    (1, 0, 0, 0),
    (0, 1, 1, 0),
]  # lowercase, strip_accents, cjk, clean_text


def hf_normalizer(lower: int, strip: int, cjk: int, clean: int) -> normalizers.Normalizer:
    return normalizers.BertNormalizer(
        clean_text=bool(clean),
        handle_chinese_chars=bool(cjk),
        strip_accents=bool(strip),
        lowercase=bool(lower),
    )


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_every_code_point_normalizes_alike(driver: Path, config: tuple[int, int, int, int]) -> None:
    out = subprocess.run(
        [driver, "normalize", *map(str, config)], check=True, capture_output=True
    ).stdout
    values = int32s(out)
    normalize = hf_normalizer(*config).normalize_str
    pos, bad = 0, []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        n = values[pos]
        got = "".join(map(chr, values[pos + 1 : pos + 1 + n]))
        pos += 1 + n
        if got != normalize(chr(c)):
            bad.append(c)
    assert pos == len(values)
    assert not bad, f"{len(bad)} code points differ: " + " ".join(f"U+{c:04X}" for c in bad[:20])


@pytest.mark.slow
def test_every_code_point_pre_tokenizes_alike(driver: Path) -> None:
    kinds = subprocess.run([driver, "kinds"], check=True, capture_output=True).stdout
    assert len(kinds) == 0x110000
    pre = pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    bad = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        pieces = len(pre("a" + chr(c) + "a"))  # 1: part of the word, 2: split, 3: isolated
        if kinds[c] != pieces - 1:
            bad.append(c)
    assert not bad, f"{len(bad)} code points differ: " + " ".join(f"U+{c:04X}" for c in bad[:20])


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_words_before_wordpiece(
    driver: Path, hf_model_dir: Path, texts: list[str], config: tuple[int, int, int, int]
) -> None:
    """Normalized words compared directly: WordPiece's [UNK] would hide many differences."""
    sample = texts[:50_000] if config == CONFIGS[0] else texts[:20_000]
    out = subprocess.run(
        [driver, "words", hf_model_dir / "vocab.txt", *map(str, config)],
        input=records([t.encode("utf-8") for t in sample]),
        check=True,
        capture_output=True,
    ).stdout
    values, pos = int32s(out), 0
    got: list[list[object]] = []
    for _ in sample:
        items: list[object] = []
        while (tag := values[pos]) != -3:
            if tag >= 0:
                items.append(tag)
                pos += 1
                continue
            n_chars, stored = values[pos + 1], values[pos + 2]
            chars = "".join(map(chr, values[pos + 3 : pos + 3 + stored]))
            items.append(chars if n_chars <= 100 else ("long word", n_chars))
            pos += 3 + stored
        got.append(items)
        pos += 1
    assert pos == len(values)

    added = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
    split = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True))))
    normalize = hf_normalizer(*config).normalize_str
    pre = pre_tokenizers.BertPreTokenizer().pre_tokenize_str

    def words_of(segment: str, items: list[object]) -> None:
        for w, _ in pre(normalize(segment)) if segment else ():
            items.append(w if len(w) <= 100 else ("long word", len(w)))

    want: list[list[object]] = []
    for text in sample:
        expected: list[object] = []
        start = 0
        for m in split.finditer(text):
            words_of(text[start : m.start()], expected)
            expected.append(added[m.group()])
            start = m.end()
        words_of(text[start:], expected)
        want.append(expected)
    assert_same(sample, got, want)


@pytest.mark.slow
def test_sanitizers(
    build_dir: Path, hf_model_dir: Path, hf_tokenizer: Tokenizer, words: list[str]
) -> None:
    """A smaller run under AddressSanitizer and UndefinedBehaviorSanitizer, through the C driver."""
    asan_driver = build_dir / "tokenizer_driver_asan"
    try:
        gcc(
            [
                "-O1",
                "-g",
                "-fsanitize=address,undefined",
                "-fno-sanitize-recover=all",
                *CFLAGS,
                *SOURCES,
                REPO / "tests" / "runtime" / "tokenizer_driver.c",
                "-o",
                asan_driver,
            ]
        )
    except subprocess.CalledProcessError as e:
        pytest.skip(f"gcc cannot build with sanitizers here: {e.stderr[-300:]}")
    sample = random_texts(3_000, SEED + 3, words)
    data = [t.encode("utf-8") for t in sample] + random_bytes(3_000, SEED + 4, sample)
    data += [
        b"",
        b"\xf0",
        b"\xe2\x82",
        b"[MASK",
        b"a" * 5000,
        ("\u0301" * 3000).encode(),
        b"\x00" * 100,
        ("a" + "\U0001d165\U0001d16d" * 200).encode(),
    ]
    proc = subprocess.run(
        [
            asan_driver,
            "encode",
            hf_model_dir / "vocab.txt",
            "1",
            "1",
            "1",
            "1",
            str(MAX_LENGTH),
            "1",
        ],
        input=records(data),
        capture_output=True,
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    out, pos, got = proc.stdout, 0, []
    for _ in data:
        status, _full, n = struct.unpack_from("<iII", out, pos)
        assert status == EMB_STATUS_OK
        got.append(list(struct.unpack_from(f"<{n}i", out, pos + 12)))
        pos += 12 + 4 * n
    assert pos == len(out)
    assert_same(data, got, hf_ids(hf_tokenizer, [d.decode("utf-8", "replace") for d in data]))


@pytest.mark.slow
def test_unicode_tables_are_generated(tmp_path: Path) -> None:
    """runtime/src/unicode_tables.{h,c} are what the generator writes today."""
    gen = REPO / "runtime" / "tools" / "gen_unicode_tables.py"
    if unicodedata.unidata_version != "14.0.0":
        pytest.skip("the tables are generated with Python 3.11's unicodedata (Unicode 14.0.0)")
    if not (Path("/usr/share/unicode") / "auxiliary" / "GraphemeBreakProperty.txt").is_file():
        pytest.skip("the grapheme tables need the UCD 15.0 files: apt-get install unicode-data")
    subprocess.run([sys.executable, gen, "--out-dir", tmp_path], check=True, capture_output=True)
    for name in ("unicode_tables.h", "unicode_tables.c"):
        assert (tmp_path / name).read_bytes() == (SRC / name).read_bytes(), f"regenerate {name}"
