"""The engine's SentencePiece Unigram and byte-level BPE tokenizers give exactly the ids, type ids
and offsets of Hugging Face `tokenizers`.

Each tokenizer of tests/fixtures/tokenizers/ (XLM-R Unigram, Unigram with byte fallback, RoBERTa,
ModernBERT and Qwen2-style BPE, see its README) is turned into the bundle's tables by the bundle
writer (edgembed.export.tokenizer_tables), written into a tokenizer-only bundle, and read by the C
engine's own bundle reader (emb_tokenizer_from_bundle_bytes), compiled here with gcc (strict
warnings as errors) into a library called through ctypes. The reference is
`Tokenizer.from_file(tokenizer.json)` with padding off and truncation at the same max length.
Compared, for every fixture:

  - random strings (tests/python/tokenizer_texts.py: random Unicode of every block, combining
    marks, emoji, controls, whitespace, added tokens, very long words): ids and character offsets;
    EDGEMBED_TOKENIZER_PARITY_N per fixture (12,000 by default: 24,000 Unigram and 36,000 BPE
    strings; the full pass runs with EDGEMBED_TOKENIZER_PARITY_N=100000);
  - invalid UTF-8: the C side gets the raw bytes, tokenizers gets bytes.decode("utf-8", "replace");
  - real multilingual text: translated strings of the machine's gettext catalogs;
  - long texts at several max lengths, with n_full and truncation off (EMB_STATUS_TOO_LONG);
  - pairs under each truncation strategy, with type ids;
  - a sample under AddressSanitizer and UndefinedBehaviorSanitizer (tests/runtime/
    tokenizer_driver.c);
  - the options the fixtures do not use, on edited copies of their tokenizer.json (ByteLevel's
    add_prefix_space and trim_offsets, Metaspace's prepend schemes, split and old field names,
    Split's regexes, behaviors, invert and literals, BPE's unk_token, fuse_unk, byte_fallback
    and ignore_merges, the Lowercase and Prepend normalizers): each edit first shown to change
    what tokenizers gives on the sample, then ids and offsets compared on 2,000 texts.
Offsets are bytes in C; emb_utf8_offsets_to_chars turns them into the code-point offsets that
tokenizers' Python API reports.
"""

from __future__ import annotations

import ctypes
import gettext
import glob
import importlib.util
import json
import os
import random
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from c_build import CFLAGS, declare, gcc
from c_build import TOKENIZER_SOURCES as SOURCES
from edgembed.backends._abi import Status
from edgembed.errors import UnsupportedArchitecture
from edgembed.export.tokenizer_tables import tokenizer_tables
from tokenizer_texts import random_bytes, random_texts

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "tokenizers"
KINDS = ["xlmr-unigram", "unigram-byte-fallback", "roberta-bpe", "modernbert-bpe", "split-bpe"]
MAX_LENGTH = 512
N_RANDOM = int(os.environ.get("EDGEMBED_TOKENIZER_PARITY_N", "12000"))
SEED = 20261201
EMB_STATUS_OK, EMB_STATUS_TOO_LONG = Status.OK, Status.TOO_LONG

Result = tuple[list[int], list[int], list[tuple[int, int]]]


def _load_bundle_tool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "tokenizer_bundles", REPO / "runtime" / "tools" / "tokenizer_bundles.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# runtime/tools/tokenizer_bundles.py: the tables in a tokenizer-only bundle
bundle_bytes = _load_bundle_tool().bundle_bytes


class CTokenizer:
    """The C tokenizer of one fixture, from its bundle tables, through ctypes."""

    def __init__(self, lib: ctypes.CDLL, fixture: Path, max_length: int = MAX_LENGTH) -> None:
        meta, tensors, self.n_vocab = tokenizer_tables(fixture)
        self.bundle = bundle_bytes(meta, tensors)
        self._buf = ctypes.create_string_buffer(self.bundle, len(self.bundle))  # referenced by C
        self.lib = lib
        self.handle = ctypes.c_void_p()
        status = lib.emb_tokenizer_from_bundle_bytes(
            ctypes.byref(self.handle), self._buf, len(self.bundle), self.n_vocab, max_length
        )
        assert status == EMB_STATUS_OK, status
        self.cap = 1 << 15
        self.ids = (ctypes.c_int32 * self.cap)()
        self.types = (ctypes.c_int32 * self.cap)()
        self.offsets = (ctypes.c_uint32 * (2 * self.cap))()

    def encode(self, a: str | bytes, b: str | bytes | None = None,
               truncate: bool = True) -> tuple[int, int, Result]:
        """(status, n_full, (ids, type ids, character offsets))."""
        da = a.encode("utf-8") if isinstance(a, str) else a
        db = b.encode("utf-8") if isinstance(b, str) else b
        n, full = ctypes.c_size_t(), ctypes.c_size_t()
        status = self.lib.emb_tokenizer_encode_ex(
            self.handle, da, len(da), db, 0 if db is None else len(db), int(truncate),
            self.ids, self.types, self.offsets, self.cap, ctypes.byref(n), ctypes.byref(full),
        )
        if status != EMB_STATUS_OK:
            return status, full.value, ([], [], [])
        k = n.value
        ids, types = self.ids[:k], self.types[:k]
        # each text's offsets in characters of that text (the second text's tokens come after
        # the first's in every template, and only the template's specials have (0, 0))
        raw = list(self.offsets[: 2 * k])
        conv = (ctypes.c_uint32 * (2 * k))(*raw)
        if db is None:
            self.lib.emb_utf8_offsets_to_chars(da, len(da), conv, 2 * k, 0)
            chars = list(conv)
        else:
            chars = self._pair_chars(da, db, raw, ids, types)
        pairs = [(chars[2 * i], chars[2 * i + 1]) for i in range(k)]
        return status, full.value, (ids, types, pairs)

    def _pair_chars(self, da: bytes, db: bytes, raw: list[int], ids: list[int],
                    types: list[int]) -> list[int]:
        # which tokens belong to the second text: the template is known to the test
        out = list(raw)
        for text, sel in ((da, self.first_of_pair), (db, self.second_of_pair)):
            idx = sel(len(ids))
            picked = [raw[2 * i + j] for i in idx for j in (0, 1)]
            vals = (ctypes.c_uint32 * len(picked))(*picked)
            self.lib.emb_utf8_offsets_to_chars(text, len(text), vals, 2 * len(idx), 0)
            for k, i in enumerate(idx):
                out[2 * i], out[2 * i + 1] = vals[2 * k], vals[2 * k + 1]
        return out

    def encode_raw(self, a: bytes) -> tuple[int, list[int], list[int], list[int]]:
        """(status, ids, type ids, byte offsets) of one text, as the engine returns them."""
        n, full = ctypes.c_size_t(), ctypes.c_size_t()
        status = self.lib.emb_tokenizer_encode_ex(
            self.handle, a, len(a), None, 0, 1, self.ids, self.types, self.offsets, self.cap,
            ctypes.byref(n), ctypes.byref(full),
        )
        k = n.value if status == EMB_STATUS_OK else 0
        return status, self.ids[:k], self.types[:k], self.offsets[: 2 * k]

    # set by the pair test: the positions of each text's tokens in a pair's result
    first_of_pair: Any = None
    second_of_pair: Any = None

    def close(self) -> None:
        self.lib.emb_tokenizer_free(self.handle)


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    path = tmp_path_factory.mktemp("tokenizer_build") / "libtokenizer.so"
    gcc(["-O2", "-shared", "-fPIC", *CFLAGS, *SOURCES, "-o", path])
    lib = ctypes.CDLL(str(path))
    lib.emb_tokenizer_from_bundle_bytes.argtypes = [
        ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32,
        ctypes.c_int32,
    ]
    lib.emb_tokenizer_encode_ex.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t,
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t),
    ]
    declare(lib, "emb_utf8_offsets_to_chars")
    lib.emb_tokenizer_free.argtypes = [ctypes.c_void_p]
    return lib


@pytest.fixture(scope="module", params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def c_tok(lib: ctypes.CDLL, kind: str) -> Iterator[CTokenizer]:
    tok = CTokenizer(lib, FIXTURES / kind)
    yield tok
    tok.close()


def hf_tokenizer(kind: str, max_length: int = MAX_LENGTH) -> Tokenizer:
    tok = Tokenizer.from_file(str(FIXTURES / kind / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok


@pytest.fixture(scope="module")
def hf_tok(kind: str) -> Tokenizer:
    return hf_tokenizer(kind)


@pytest.fixture(scope="module")
def words(kind: str) -> list[str]:
    return fixture_words(kind)


def fixture_words(kind: str) -> list[str]:
    """The fixture's vocabulary as text (Unigram's ▁ and byte-level's Ġ alphabet undone)."""
    spec = json.loads((FIXTURES / kind / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec["model"]
    if model["type"] == "Unigram":
        return [p.replace("\u2581", "") for p, _ in model["vocab"] if p.strip("\u2581")]
    chars = {c: b for b, c in enumerate(_byte_alphabet())}
    out = []
    for t in model["vocab"]:
        try:
            out.append(bytes(chars[c] for c in t).decode("utf-8"))
        except (KeyError, UnicodeDecodeError):
            continue
    return [w for w in out if w.strip()]


def _byte_alphabet() -> list[str]:
    bs = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs, strict=True))]


def hf_results(hf: Tokenizer, texts: Sequence[str]) -> list[Result]:
    return [(e.ids, e.type_ids, [tuple(o) for o in e.offsets])  # type: ignore[misc]
            for e in hf.encode_batch(list(texts))]


def assert_same(texts: Sequence[str | bytes], got: Sequence[Any], want: Sequence[Any]) -> None:
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    if bad:
        lines = [f"{len(bad)} of {len(texts)} texts differ; the first ones:"]
        for i in bad[:5]:
            text = repr(texts[i])
            lines.append(f"  {text[:300]}\n    C:          {str(got[i])[:400]}\n"
                         f"    tokenizers: {str(want[i])[:400]}")
        pytest.fail("\n".join(lines), pytrace=False)


def c_results(c: CTokenizer, texts: Sequence[str | bytes]) -> list[Result]:
    out = []
    for t in texts:
        status, _, r = c.encode(t)
        assert status == EMB_STATUS_OK, (status, t)
        out.append(r)
    return out


# --- the tests ------------------------------------------------------------------------------------

EXAMPLES = [
    "", " ", "  ", "a", "Hello world!", "  leading and trailing  ", "tab\there\nnew\r\nline",
    "Ça va? Gruß, ÅNGSTRÖM, İstanbul, ǅ, ß", "日本語のテキストと中文", "한국어 텍스트 각 ㄱ",
    "ﬀ\u0301 ™ ① ＡＢＣ ㍿ ½", "e\u0301 e\u0316\u0301 \u0340\u0301 \u1e0b\u0323", "a\r\nb\rc\nd",
    "\u0600a \u0958\u0301 क्\u0958\u0301", "👩\u200d💻 🇫🇷🇩🇪 ✌🏽 #\ufe0f\u20e3",
    "don't I'LL we've 'S 'ſ", "12 345 6789012", "<s> <mask> </s> [MASK] [CLS]x[SEP]",
    " <mask>y", "x   <mask>", "|||IP_ADDRESS||| |||EMAIL_ADDRESS|||", "a" * 300,
    "word " * 200, "\x00\x01\x7f\u200b\ufeff\u00ad", "mixed\u3000space\u00a0nbsp\u2028ls",
]


def test_examples(c_tok: CTokenizer, hf_tok: Tokenizer) -> None:
    assert_same(EXAMPLES, c_results(c_tok, EXAMPLES), hf_results(hf_tok, EXAMPLES))


def test_random_strings(c_tok: CTokenizer, hf_tok: Tokenizer, words: list[str], kind: str) -> None:
    texts = random_texts(N_RANDOM, SEED + KINDS.index(kind), words)
    assert_same(texts, c_results(c_tok, texts), hf_results(hf_tok, texts))


def test_invalid_utf8(c_tok: CTokenizer, hf_tok: Tokenizer, words: list[str], kind: str) -> None:
    data = random_bytes(max(2000, N_RANDOM // 5), SEED + 7, random_texts(500, SEED + 1, words))
    got = c_results(c_tok, data)
    want = hf_results(hf_tok, [d.decode("utf-8", "replace") for d in data])
    assert_same(data, got, want)


def catalog_texts(limit: int, seed: int) -> list[str]:
    files = sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo"))
    if not files:
        pytest.skip("no gettext catalogs under /usr/share/locale")
    rng = random.Random(seed)
    texts: list[str] = []
    for path in rng.sample(files, min(len(files), 400)):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError):
            continue
        values = sorted(v for v in catalog.values() if isinstance(v, str) and v)
        texts += rng.sample(values, min(len(values), 60))
    rng.shuffle(texts)
    return texts[:limit]


def test_gettext_catalogs(c_tok: CTokenizer, hf_tok: Tokenizer) -> None:
    """Translated sentences of the machine's gettext catalogs (dozens of languages and scripts)."""
    texts = catalog_texts(max(3000, N_RANDOM // 3), SEED)
    joined = ["\n".join(texts[i : i + 40]) for i in range(0, 2000, 40)]  # long multilingual texts
    all_texts = texts + joined
    assert_same(all_texts, c_results(c_tok, all_texts), hf_results(hf_tok, all_texts))


@pytest.mark.parametrize("max_length", [3, 8, 64, 257])
def test_long_texts_and_truncation(lib: ctypes.CDLL, kind: str, words: list[str],
                                   max_length: int) -> None:
    c = CTokenizer(lib, FIXTURES / kind, max_length)
    hf = hf_tokenizer(kind, max_length)
    full_hf = Tokenizer.from_file(str(FIXTURES / kind / "tokenizer.json"))
    full_hf.no_truncation()
    rng = random.Random(max_length)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 400))) for _ in range(150)]
    texts += random_texts(150, max_length, words)
    try:
        assert_same(texts, c_results(c, texts), hf_results(hf, texts))
        for t in texts[:100]:
            n_full = len(full_hf.encode(t).ids)
            status, full, _ = c.encode(t, truncate=False)
            assert full == n_full, t
            assert status == (EMB_STATUS_TOO_LONG if n_full > max_length else EMB_STATUS_OK), t
    finally:
        c.close()


@pytest.mark.parametrize("strategy", ["longest_first", "only_first", "only_second"])
def test_pairs(lib: ctypes.CDLL, kind: str, words: list[str], strategy: str) -> None:
    """Pairs with the fixture's pair template, type ids and offsets, truncated at 48."""
    spec = json.loads((FIXTURES / kind / "tokenizer.json").read_text(encoding="utf-8"))
    if strategy != "longest_first":
        spec["truncation"] = {"direction": "Right", "max_length": 48, "strategy":
                              {"only_first": "OnlyFirst", "only_second": "OnlySecond"}[strategy],
                              "stride": 0}
    with tempfile.TemporaryDirectory() as d:  # tokenizer_tables reads a directory
        (Path(d) / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
        c = CTokenizer(lib, Path(d), 48)
        hf = Tokenizer.from_file(str(Path(d) / "tokenizer.json"))
    hf.no_padding()
    hf.enable_truncation(48, strategy=strategy)
    rng = random.Random(strategy)
    pairs = [(" ".join(rng.choice(words) for _ in range(rng.randrange(0, 40))),
              " ".join(rng.choice(words) for _ in range(rng.randrange(0, 40)))) for _ in range(400)]
    try:
        for a, b in pairs:
            try:
                e = hf.encode(a, b)
            except Exception:  # tokenizers: "sequence to truncate too short"
                status, _, _ = c.encode(a, b)
                assert status == EMB_STATUS_TOO_LONG, (a, b)
                continue
            seq = e.sequence_ids
            c.first_of_pair = lambda n, s=seq: [i for i in range(n) if s[i] == 0]
            c.second_of_pair = lambda n, s=seq: [i for i in range(n) if s[i] == 1]
            status, _, got = c.encode(a, b)
            assert status == EMB_STATUS_OK, (a, b)
            want = (e.ids, e.type_ids, [tuple(o) for o in e.offsets])
            assert got == want, (a, b)
    finally:
        c.close()


@pytest.fixture(scope="module")
def asan_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    driver = tmp_path_factory.mktemp("asan") / "tokenizer_driver_asan"
    try:
        gcc(["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", *CFLAGS,
             REPO / "tests" / "runtime" / "tokenizer_driver.c", *SOURCES, "-o", driver])
    except subprocess.CalledProcessError as e:
        pytest.skip(f"gcc cannot build with sanitizers here: {e.stderr[-300:]}")
    return driver


def test_sanitizers(tmp_path: Path, kind: str, words: list[str], asan_driver: Path) -> None:
    """A sample through the tokenizer_driver built with ASan + UBSan: same results as tokenizers."""
    driver = asan_driver
    meta, tensors, n_vocab = tokenizer_tables(FIXTURES / kind)
    bundle = tmp_path / "tokenizer.emb"
    bundle.write_bytes(bundle_bytes(meta, tensors))
    texts: list[str | bytes] = [*EXAMPLES, *random_texts(800, SEED + 3, words)]
    texts += random_bytes(200, SEED + 4, random_texts(100, SEED + 5, words))
    data = [t.encode("utf-8") if isinstance(t, str) else t for t in texts]
    stdin = b"".join(struct.pack("<I", len(d)) + d for d in data)
    run = subprocess.run([driver, "bundle", bundle, str(n_vocab), str(MAX_LENGTH), "0"],
                         input=stdin, capture_output=True, check=True)
    out, pos, got = run.stdout, 0, []
    for d in data:
        status, _, n = struct.unpack_from("<3i", out, pos)
        pos += 12
        assert status == EMB_STATUS_OK, d
        vals = struct.unpack_from(f"<{4 * n}I", out, pos)
        pos += 16 * n
        ids, types, offs = list(vals[:n]), list(vals[n : 2 * n]), vals[2 * n :]

        def chars(p: int, d: bytes = d) -> int:  # a character boundary: decoding the prefix agrees
            return len(d[:p].decode("utf-8", "replace"))

        got.append((ids, types, [(chars(offs[2 * i]), chars(offs[2 * i + 1])) for i in range(n)]))
    assert pos == len(out)
    want = hf_results(hf_tokenizer(kind), [d.decode("utf-8", "replace") for d in data])
    assert_same(data, got, want)


MODELS = REPO / "tests" / "fixtures" / "models"


@pytest.mark.parametrize(
    "model", sorted(p.parent.name for p in MODELS.glob("*/tokenizer.json")) or ["(none)"]
)
def test_tiny_models_tokenizers(lib: ctypes.CDLL, model: str) -> None:
    """Every tokenizer of tests/fixtures/models/ (one per encoder family, WordPiece variants the
    streaming WordPiece cannot run among them: MPNet's added tokens, a Lowercase before
    BertNormalizer) bundles and gives tokenizers' ids, type ids and offsets, one text or a pair."""
    if model == "(none)":
        pytest.skip("no tests/fixtures/models/*/tokenizer.json")
    c = CTokenizer(lib, MODELS / model, 128)
    spec = json.loads((MODELS / model / "tokenizer.json").read_text(encoding="utf-8"))
    # the model's own truncation strategy (a cross-encoder's only_second), as the bundle keeps it
    strategy = {"LongestFirst": "longest_first", "OnlyFirst": "only_first",
                "OnlySecond": "only_second"}[(spec.get("truncation") or {}).get("strategy",
                                                                                "LongestFirst")]
    hf = Tokenizer.from_file(str(MODELS / model / "tokenizer.json"))
    hf.no_padding()
    hf.enable_truncation(128, strategy=strategy)
    vocab = list(spec["model"]["vocab"])[:3000]
    words = [(w[0] if isinstance(w, list) else w).removeprefix("##").replace("\u2581", "")
             for w in vocab]
    texts = random_texts(400, SEED + 13, [w for w in words if w.strip()])
    try:
        if strategy == "longest_first":
            assert_same(texts, c_results(c, texts), hf_results(hf, texts))
        else:  # a single text over the max length has no second text to cut: both refuse it
            plain = Tokenizer.from_file(str(MODELS / model / "tokenizer.json"))
            plain.no_padding()
            plain.no_truncation()
            fits = [t for t in texts if len(plain.encode(t).ids) <= 128]
            assert 0 < len(fits) < len(texts)
            assert_same(fits, c_results(c, fits), hf_results(plain, fits))
            for t in texts[:50]:
                if t not in fits:
                    assert c.encode(t)[0] == EMB_STATUS_TOO_LONG, t
        for a, b in zip(texts[:100], texts[100:200], strict=True):
            try:
                e = hf.encode(a, b)
            except Exception:  # tokenizers: "sequence to truncate too short"
                assert strategy != "longest_first" and c.encode(a, b)[0] == EMB_STATUS_TOO_LONG
                continue
            seq = e.sequence_ids
            c.first_of_pair = lambda n, s=seq: [i for i in range(n) if s[i] == 0]
            c.second_of_pair = lambda n, s=seq: [i for i in range(n) if s[i] == 1]
            status, _, got = c.encode(a, b)
            assert status == EMB_STATUS_OK and got == (
                e.ids, e.type_ids, [tuple(o) for o in e.offsets]), (a, b)
    finally:
        c.close()


def test_wasm_tokenizes_as_native(c_tok: CTokenizer, words: list[str], kind: str) -> None:
    """build/wasm/tokenizer_test.wasm (the same sources for wasm32) under wasmtime: the same ids,
    type ids and offsets as the native build, text for text."""
    wasmtime = pytest.importorskip("wasmtime", reason="pip install wasmtime")
    path = REPO / "build" / "wasm" / "tokenizer_test.wasm"
    if not path.is_file():
        pytest.skip("build/wasm/tokenizer_test.wasm not built (./build.sh wasm)")
    store = wasmtime.Store(wasmtime.Engine())
    ex = wasmtime.Instance(store, wasmtime.Module.from_file(store.engine, str(path)), []).exports(
        store)
    memory, alloc = ex["memory"], ex["emb_test_alloc"]

    def put(data: bytes) -> int:
        ptr = alloc(store, max(len(data), 1))
        memory.write(store, data, ptr)
        return int(ptr)

    tok = ex["emb_test_tokenizer"](store, put(c_tok.bundle), len(c_tok.bundle), c_tok.n_vocab,
                                   MAX_LENGTH)
    assert tok != 0
    cap = 4096
    ids, types, offs, counts = (alloc(store, 4 * cap), alloc(store, 4 * cap),
                                alloc(store, 8 * cap), alloc(store, 8))
    texts = [t.encode("utf-8") for t in EXAMPLES + random_texts(1500, SEED + 9, words)]
    texts += random_bytes(300, SEED + 10, random_texts(200, SEED + 11, words))
    buf = alloc(store, max(len(t) for t in texts) + 1)
    for t in texts:
        memory.write(store, t, buf)
        status = ex["emb_test_encode"](store, tok, buf, len(t), 0, 0, ids, types, offs, cap, counts)
        n = struct.unpack("<I", memory.read(store, counts, counts + 4))[0] if status == 0 else 0
        got = (status, list(struct.unpack(f"<{n}i", memory.read(store, ids, ids + 4 * n))),
               list(struct.unpack(f"<{n}i", memory.read(store, types, types + 4 * n))),
               list(struct.unpack(f"<{2 * n}I", memory.read(store, offs, offs + 8 * n))))
        assert got == c_tok.encode_raw(t), t


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("driver") / "tokenizer_driver"
    gcc(["-O2", *CFLAGS, REPO / "tests" / "runtime" / "tokenizer_driver.c", *SOURCES, "-o", exe])
    return exe


@pytest.mark.parametrize("kind", ["xlmr-unigram", "unigram-byte-fallback", "modernbert-bpe"])
def test_every_code_point_normalizes_alike(driver: Path, tmp_path: Path, kind: str) -> None:
    """The normalizer steps alone (Precompiled with Strip and Replace; NFC) on every code point,
    alone, after an "a" and before U+0301 (grapheme clusters: Precompiled looks them up whole):
    the text of tokenizers' normalizer.normalize_str."""
    bundle = tmp_path / "t.emb"
    meta, tensors, n_vocab = tokenizer_tables(FIXTURES / kind)
    bundle.write_bytes(bundle_bytes(meta, tensors))
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = [chr(c) for c in cps] + ["a" + chr(c) for c in cps[::3]]
    texts += [chr(c) + "\u0301" for c in cps[1::3]] + ["\r\n", "\u0340\u0301", "\ufb00\u0301x"]
    data = [t.encode("utf-8") for t in texts]
    out = subprocess.run([driver, "gnormalize", bundle, str(n_vocab)], capture_output=True,
                         check=True, input=b"".join(struct.pack("<I", len(d)) + d for d in data)
                         ).stdout
    norm = Tokenizer.from_file(str(FIXTURES / kind / "tokenizer.json")).normalizer
    assert norm is not None
    got, pos = [], 0
    for _ in texts:
        (n,) = struct.unpack_from("<I", out, pos)
        got.append("".join(map(chr, struct.unpack_from(f"<{n}I", out, pos + 4))))
        pos += 4 + 4 * n
    assert pos == len(out)
    assert_same(texts, got, [norm.normalize_str(t) for t in texts])


# --- the bundle writer refuses what the engine does not implement ------------------------------

def _with(kind: str, tmp_path: Path, edit: Any) -> Path:
    spec = json.loads((FIXTURES / kind / "tokenizer.json").read_text(encoding="utf-8"))
    edit(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("base", "edit", "name"),
    [
        ("xlmr-unigram", lambda s: s.update(normalizer={"type": "NFKC"}), "the normalizer NFKC"),
        ("roberta-bpe", lambda s: s.update(pre_tokenizer={
            "type": "Split", "pattern": {"Regex": r"\w+"}, "behavior": "Isolated",
            "invert": False}), "the pre-tokenizer Split with the regex"),
        ("roberta-bpe", lambda s: s.update(pre_tokenizer={"type": "Digits",
                                                          "individual_digits": True}),
         "the pre-tokenizer Digits"),
        ("roberta-bpe", lambda s: s["model"].update(dropout=0.1), "BPE dropout 0.1"),
        ("roberta-bpe", lambda s: s["model"].update(continuing_subword_prefix="##"),
         "continuing_subword_prefix"),
        ("modernbert-bpe", lambda s: s["added_tokens"][-1].update(single_word=True),
         "single_word"),
        ("xlmr-unigram", lambda s: s.update(post_processor={"type": "Weird"}),
         "the post-processor Weird"),
        ("xlmr-unigram", lambda s: s["model"].update(unk_id=None), "without unk_id"),
    ],
)
def test_refused_components(tmp_path: Path, base: str, edit: Any, name: str) -> None:
    with pytest.raises(UnsupportedArchitecture, match=name) as info:
        tokenizer_tables(_with(base, tmp_path, edit))
    assert "backend='onnx'" in str(info.value)


# --- options the fixtures do not use: edited copies of their tokenizer.json ----------------------

Edit = Any  # a function that edits a tokenizer.json in place

_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_CL100K = _QWEN2.replace(r"\p{N}|", r"\p{N}{1,3}|")
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _new_tokens(s: dict[str, Any], tokens: Sequence[str]) -> None:
    """Tokens added to a BPE vocabulary, and the added tokens outside it renumbered after them as
    tokenizers numbers them (the file stays consistent)."""
    vocab = s["model"]["vocab"]
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    outside = sorted((a for a in s["added_tokens"] if a["content"] not in vocab),
                     key=lambda a: int(a["id"]))
    for k, a in enumerate(outside):
        a["id"] = len(vocab) + k
    assert sorted(vocab.values()) == list(range(len(vocab)))


def _split(pattern: dict[str, str], behavior: str = "Isolated", invert: bool = False) -> Edit:
    def edit(s: dict[str, Any]) -> None:
        s["pre_tokenizer"]["pretokenizers"][0].update(pattern=pattern, behavior=behavior,
                                                       invert=invert)
    return edit


def _split_cl100k(s: dict[str, Any]) -> None:
    """cl100k's regex (digits in threes), with merges of digit pairs so that it shows."""
    _split({"Regex": _CL100K})(s)
    pairs = [f"{a}{b}" for a in "0123456789" for b in "0123456789"]
    _new_tokens(s, pairs)
    s["model"]["merges"] += [[p[0], p[1]] for p in pairs]


def _metaspace(**fields: Any) -> Edit:
    """xlmr-unigram's Metaspace (after WhitespaceSplit) with fields set, or removed when None."""
    def edit(s: dict[str, Any]) -> None:
        m = s["pre_tokenizer"]["pretokenizers"][1]
        m.update(fields)
        for k in [k for k, v in m.items() if v is None]:
            del m[k]
    return edit


def _metaspace_alone(split: bool) -> Edit:
    """Metaspace without the WhitespaceSplit before it, and pieces that span a space, which only
    split false lets the segmentation use."""
    def edit(s: dict[str, Any]) -> None:
        s["pre_tokenizer"] = {**s["pre_tokenizer"]["pretokenizers"][1], "split": split}
        have = {p for p, _ in s["model"]["vocab"]}
        for w in fixture_words("xlmr-unigram")[:400]:
            for piece in (f"\u2581{w}\u2581", f"{w}\u2581\u2581"):
                if piece not in have:
                    have.add(piece)
                    s["model"]["vocab"].append([piece, -2.0])
    return edit


def _prefix_space(trim_offsets: bool) -> Edit:
    def edit(s: dict[str, Any]) -> None:
        s["pre_tokenizer"]["add_prefix_space"] = True
        s["post_processor"].update(add_prefix_space=True, trim_offsets=trim_offsets)
    return edit


def _metaspace_bpe(byte_fallback: bool, fuse_unk: bool) -> Edit:
    """roberta-bpe as a Llama-style BPE: Metaspace instead of ByteLevel, so that a character
    outside the vocabulary is unknown (and fused, or spelled as <0xXX> byte tokens)."""
    def edit(s: dict[str, Any]) -> None:
        if byte_fallback:
            _new_tokens(s, [f"<0x{b:02X}>" for b in range(256)])
        s["model"].update(unk_token="<unk>", byte_fallback=byte_fallback, fuse_unk=fuse_unk)
        s["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                              "prepend_scheme": "always", "split": True}
        s["decoder"] = None
    return edit


def _ignore_merges(s: dict[str, Any]) -> None:
    """ignore_merges, and whole words in the vocabulary that no merge builds (the option looks a
    word up whole before merging)."""
    words = {w.strip() for w in fixture_words("roberta-bpe") if w.strip().isascii()}
    _new_tokens(s, [f"{space}{case(w)}" for w in sorted(words) if w.isalpha()
                    for case in (str.upper, str.capitalize) for space in ("", "\u0120")])
    s["model"]["ignore_merges"] = True


def _normalizer(*steps: dict[str, Any]) -> Edit:
    def edit(s: dict[str, Any]) -> None:
        old = s.get("normalizer")
        old = [] if old is None else old.get("normalizers", [old])
        s["normalizer"] = {"type": "Sequence", "normalizers": [*old, *steps]}
    return edit


def _never(s: dict[str, Any]) -> None:
    _metaspace(prepend_scheme="never")(s)


def _prepend_never(s: dict[str, Any]) -> None:
    _never(s)
    _normalizer({"type": "Prepend", "prepend": "\u2581"})(s)


_BEHAVIOR_NAMES = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")

# (fixture, case, edit, the edit it must differ from (None: the fixture as it is))
OPTION_CASES: list[tuple[str, str, Edit, Edit | None]] = [
    ("roberta-bpe", "ByteLevel add_prefix_space, trim_offsets", _prefix_space(True), None),
    ("roberta-bpe", "ByteLevel add_prefix_space, no trim_offsets", _prefix_space(False),
     _prefix_space(True)),
    ("xlmr-unigram", "Metaspace prepend_scheme first", _metaspace(prepend_scheme="first"), None),
    ("xlmr-unigram", "Metaspace prepend_scheme never", _never, None),
    ("xlmr-unigram", "Metaspace alone, split false", _metaspace_alone(False),
     _metaspace_alone(True)),
    # tokenizers < 0.14 wrote add_prefix_space and no prepend_scheme (true: 'always')
    ("xlmr-unigram", "Metaspace old field add_prefix_space true",
     _metaspace(prepend_scheme=None, split=None, add_prefix_space=True), _never),
    # tokenizers 0.14-0.18: add_prefix_space beside prepend_scheme, no split
    ("xlmr-unigram", "Metaspace old field add_prefix_space false",
     _metaspace(prepend_scheme="never", split=None, add_prefix_space=False), None),
    ("split-bpe", "Split cl100k regex", _split_cl100k, None),
    ("split-bpe", "Split GPT-2 regex", _split({"Regex": _GPT2}), None),
    ("split-bpe", "Split qwen2 regex Removed", _split({"Regex": _QWEN2}, "Removed"), None),
    ("split-bpe", "Split GPT-2 regex Removed invert", _split({"Regex": _GPT2}, "Removed", True),
     None),
    *[("split-bpe", f"Split literal ' ' {b}", _split({"String": " "}, b), None)
      for b in _BEHAVIOR_NAMES],
    # invert changes nothing with Isolated and Contiguous (the same pieces either way)
    *[("split-bpe", f"Split literal 'e' {b} invert", _split({"String": "e"}, b, True),
       None if b in ("Isolated", "Contiguous") else _split({"String": "e"}, b))
      for b in _BEHAVIOR_NAMES],
    ("split-bpe", "Split literal 'er' Removed", _split({"String": "er"}, "Removed"), None),
    ("split-bpe", "Split literal ', ' Contiguous", _split({"String": ", "}, "Contiguous"), None),
    ("roberta-bpe", "BPE unk_token without fuse_unk", _metaspace_bpe(False, False), None),
    ("roberta-bpe", "BPE fuse_unk", _metaspace_bpe(False, True), _metaspace_bpe(False, False)),
    ("roberta-bpe", "BPE byte_fallback", _metaspace_bpe(True, False),
     _metaspace_bpe(False, False)),
    ("roberta-bpe", "BPE ignore_merges", _ignore_merges, None),
    ("roberta-bpe", "Lowercase normalizer", _normalizer({"type": "Lowercase"}), None),
    ("modernbert-bpe", "Prepend normalizer", _normalizer({"type": "Prepend", "prepend": "x "}),
     None),
    ("xlmr-unigram", "Prepend normalizer with Metaspace never", _prepend_never, _never),
]
OPTION_TEXTS = 2000


def _edited(kind: str, edit: Edit | None, root: Path) -> Path:
    spec = json.loads((FIXTURES / kind / "tokenizer.json").read_text(encoding="utf-8"))
    if edit is not None:
        edit(spec)
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    shutil.copy(FIXTURES / kind / "tokenizer_config.json", root / "tokenizer_config.json")
    return root


@pytest.mark.parametrize(("kind", "case", "edit", "than"), OPTION_CASES,
                         ids=[c[1] for c in OPTION_CASES])
def test_options_the_fixtures_do_not_use(lib: ctypes.CDLL, tmp_path: Path, kind: str, case: str,
                                         edit: Edit, than: Edit | None) -> None:
    """Each option on an edited copy of a fixture's tokenizer.json: the edit changes what
    tokenizers gives on the sample (so the comparison can fail), and the engine gives tokenizers'
    ids and offsets on it."""
    texts = EXAMPLES + random_texts(OPTION_TEXTS, SEED + 17, fixture_words(kind))
    d = _edited(kind, edit, tmp_path / "edited")
    hf = hf_tokenizer_at(d)
    want = hf_results(hf, texts)
    base = hf_results(hf_tokenizer_at(_edited(kind, than, tmp_path / "base")), texts)
    if want == base:
        pytest.fail(f"{case}: the edit changes nothing tokenizers outputs on the sample")
    c = CTokenizer(lib, d)
    try:
        assert_same(texts, c_results(c, texts), want)
    finally:
        c.close()


def hf_tokenizer_at(d: Path, max_length: int = MAX_LENGTH) -> Tokenizer:
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length)
    return tok
