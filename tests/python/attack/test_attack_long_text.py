"""Attack 10 (a 50 MB line): a long text is tokenized by a bounded prefix, with exactly the ids
full tokenization keeps.

``_tokenize.encode_truncated`` cuts a text where a run of ASCII whitespace begins and grows
the prefix until it holds more tokens than truncation keeps. Its claim — the truncated ids
are those of the whole text — is checked here against ``tokenizers`` itself, tokenizing every
text whole, for three pipelines: all-MiniLM-L6-v2's real tokenizer.json (BERT normalizer,
BertPreTokenizer, WordPiece), and a byte-level BPE and a Metaspace Unigram tokenizer trained
here on the reference corpus with ``tokenizers``' own trainers. The texts are the corpus
joined into long documents and hypothesis-generated ones built from the characters that could
break a cut: whitespace of every kind (NBSP, U+3000, the control "separators" U+001C..U+001F
that Python calls whitespace and BERT deletes), combining marks after a space, CJK, controls,
U+FFFD, emoji, accents, punctuation. The prefix path is forced for every text (the threshold
is lowered), with small and real max lengths.

A text without whitespace to cut at goes, for a BERT WordPiece pipeline, through
``_long_text.WordPieceShrinker`` (a short text with the same ids): checked here on the same
texts and on long runs of letters, punctuation, CJK, emoji, combining marks, deleted
characters and Unicode whitespace, mixed, for all-MiniLM-L6-v2's tokenizer (uncased), the same
tokenizer configured cased (no lowercasing, accent stripping or CJK splitting) and
tests/fixtures/models/mpnet-mean's (MPNet's added tokens), with and without truncation; and the
shrinker's character classes are checked one code point at a time against ``tokenizers``.

Every check also runs left truncation (``encode_left_truncated``: a suffix from a
``_long_text.TextCuts`` cut) against ``tokenizers``' own left truncation of the whole text, and
the exact count in pieces (``count_tokens``, pieces of a few words here) against the whole
text's length; runs of punctuation, emoji (ZWJ sequences, skin tones, flags, variation
selectors), combining marks and mixed scripts are checked for every family, and subprocesses
show the peak memory of a 12-million-character line stays bounded for each path.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgembed import _long_text, _tokenize
from edgembed._long_text import InWordCuts, TextCuts, WordPieceShrinker, _byte_level, _classes
from edgembed._tokenize import count_tokens, encode_left_truncated, encode_truncated, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CORPUS = FIXTURES / "reference" / "corpus.json"
PIECES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\x1c", "\x1f", "\u0301",
          " \u0301", "e\u0301", "\u00e9", "漢字", "中", "\x00", "\x07", "\u200b", "\ufffd",
          "🙂", "👍🏽", "don't", "a.b", "...", "(x)", "—", "Straße", "İ", "ﬁ", "①", "-"]


def corpus() -> list[str]:
    return [str(t) for t in json.loads(CORPUS.read_text(encoding="utf-8"))]


def trained(kind: str) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from tokenizers.processors import TemplateProcessing

    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer: trainers.Trainer = trainers.BpeTrainer(
            vocab_size=600, special_tokens=["<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=3000, unk_token="<unk>",
                                          special_tokens=["<s>", "</s>", "<unk>"])
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = TemplateProcessing(single="<s> $A </s>",
                                            special_tokens=[("<s>", 0), ("</s>", 1)])
    return tok


class Pipeline:
    """A tokenizer twice, as the Embedder holds it: truncating at ``max_length``, and not."""

    def __init__(self, make: Any, max_length: int) -> None:
        self.max_length = max_length
        self.full, self.truncating = make(), make()
        self.full.no_truncation()
        self.truncating.enable_truncation(max_length)
        self.full.no_padding()
        self.truncating.no_padding()
        self.left = make()
        self.left.no_padding()
        self.left.enable_truncation(max_length, direction="left")
        self.shrinker = WordPieceShrinker.of(self.full)
        self.cuts = InWordCuts.of(self.full)
        self.text_cuts = TextCuts.of(self.full)
        assert self.text_cuts is not None  # every pipeline here has cuts at whitespace

    def check(self, text: str) -> None:
        whole = self.truncating.encode(text)
        bounded = encode_truncated(self.full, self.truncating, text, self.max_length,
                                   self.shrinker, self.cuts)
        assert bounded.ids == whole.ids, repr(text[:200])
        assert bool(bounded.overflowing) == bool(whole.overflowing)
        # left truncation (the text's end) by a suffix, and the exact count in pieces
        whole = self.left.encode(text)
        bounded = encode_left_truncated(self.full, self.left, text, self.max_length,
                                        self.shrinker, self.text_cuts, self.cuts)
        assert bounded.ids == whole.ids, repr(text[-200:])
        assert bool(bounded.overflowing) == bool(whole.overflowing)
        assert count_tokens(self.full, text, self.shrinker, self.text_cuts, self.cuts) == len(
            self.full.encode(text).ids), repr(text[:200])
        if self.shrinker is None:
            return
        # truncation off: all of the text, or more than max_length tokens of it; None (the
        # whole text is tokenized) only for a text with thousands of characters the shrinker
        # does not know
        unknown = sum(m.lastgroup == "o" and not self.shrinker.own_word(m.group())
                      for m in self.shrinker.pieces.finditer(text))
        short = self.shrinker.shrink(text, None)
        hazard = _classes(self.shrinker._chinese, self.shrinker.long)[3].search(text)
        assert (short is None) == (unknown > _long_text._OTHER_CAP) or hazard
        if short is not None:
            assert short[1]
            assert self.full.encode(short[0]).ids == self.full.encode(text).ids, repr(text[:200])
        short = self.shrinker.shrink(text, self.max_length)
        if short is not None:
            n = len(self.full.encode(short[0]).ids)
            assert n > self.max_length if not short[1] else n == len(self.full.encode(text).ids)


def wordpiece(kind: str, hf_model_dir: Path) -> str:
    """all-MiniLM-L6-v2's tokenizer as the Embedder loads it (a Lowercase normalizer first,
    from its do_lower_case), configured cased, or mpnet-mean's."""
    if kind == "wordpiece-mpnet":
        return (FIXTURES / "models" / "mpnet-mean" / "tokenizer.json").read_text()
    if kind == "wordpiece":
        return str(load_tokenizer(hf_model_dir, 256, truncate=False, lowercase=True).to_str())
    spec = json.loads(load_tokenizer(hf_model_dir, 256, truncate=False).to_str())
    spec["normalizer"].update(lowercase=False, strip_accents=False, handle_chinese_chars=False)
    return json.dumps(spec)


WORDPIECES = ["wordpiece", "wordpiece-cased", "wordpiece-mpnet"]


@pytest.fixture(scope="module", params=[*WORDPIECES, "bpe", "unigram"])
def make(request: pytest.FixtureRequest, hf_model_dir: Path) -> Any:
    if request.param.startswith("wordpiece"):
        data = wordpiece(request.param, hf_model_dir)
        assert WordPieceShrinker.of(tokenizers.Tokenizer.from_str(data)) is not None
    else:
        data = trained(request.param).to_str()
    cache: dict[int, Pipeline] = {}

    def pipeline(max_length: int) -> Pipeline:
        if max_length not in cache:
            cache[max_length] = Pipeline(lambda: tokenizers.Tokenizer.from_str(data),
                                         max_length)
        return cache[max_length]

    return pipeline


@pytest.fixture(autouse=True)
def every_text_by_prefix(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_tokenize, "BOUNDED_FROM", 1)  # the prefix path for every text
    monkeypatch.setattr(_tokenize, "_COUNT_CHUNK", 24)  # counts in pieces of a few words
    yield


@pytest.mark.parametrize("max_length", [8, 32, 256])
def test_long_documents_from_the_corpus(make: Any, max_length: int) -> None:
    pipeline = make(max_length)
    texts = corpus()
    for size in (3, 10, 40):
        for i in range(0, len(texts), size):
            pipeline.check(" ".join(texts[i:i + size]))
            pipeline.check("\n\n".join(texts[i:i + size]))
            pipeline.check("\t".join(texts[i:i + size]) + "   ")


words = st.lists(st.one_of(st.sampled_from(PIECES), st.text(min_size=1, max_size=12)),
                 min_size=1, max_size=300).map("".join)


@given(text=words, max_length=st.sampled_from([4, 8, 16, 64]))
@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_generated_texts(make: Any, text: str, max_length: int) -> None:
    make(max_length).check(text)


RUNS = ["a", "Z", "é", "e\u0301", "\u0301", "\u0301\u0327", "İ", "ß", "ﬁ", "!", ".", "'", "—",
        "¿", "漢", "字", "한", "カ", "🙂", "👍🏽", "🇫🇷", "\u200d", "\u200b", "\x00", "\x07",
        "\x0c", "\ufffd", "\ue000", "\u00a0", "\u3000", " ", "\n", "[MASK]", "<mask>", "[",
        "1", "①", "½", "ǅ", "\u0378", "\U0001fae8", "\U000e0041", "\U00020000", "ﾞ", "ｶ",
        "\u0e33", "\U000111c9", "\u1fef", "\U0001d165", "\U0001d15f", "\U0001d16e"]


long_runs = st.lists(
    st.tuples(st.lists(st.sampled_from(RUNS), min_size=1, max_size=3).map("".join),
              st.sampled_from([1, 2, 50, 99, 100, 101, 399, 400, 401, 1200, 5000])),
    min_size=1, max_size=6).map(lambda runs: "".join(piece * n for piece, n in runs))


@pytest.mark.parametrize("kind", WORDPIECES)
@given(text=long_runs, max_length=st.sampled_from([4, 16, 128]))
@settings(max_examples=120, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_long_runs_without_whitespace(kind: str, hf_model_dir: Path, text: str,
                                      max_length: int) -> None:
    data = wordpiece(kind, hf_model_dir)
    Pipeline(lambda: tokenizers.Tokenizer.from_str(data), max_length).check(text)


@pytest.mark.parametrize("text", [
    "a" * 20_000, "é" * 20_000, "e\u0301" * 10_000, "a" + "\u0301" * 20_000 + "b",
    "İ" + "\u0301" * 5_000, "!" * 20_000, "漢字" * 10_000, "🙂" * 20_000, "👍🏽" * 10_000,
    "\u200b" * 20_000 + "a", "a\u200b" * 10_000, "\u3000" * 20_000 + "x", "\x00" * 20_000,
    ("x" * 300 + "!") * 100, ("y" * 401 + " ") * 100, "a" * 5_000 + "[MASK]" + "b" * 5_000,
    "[MASK]" * 2_000, "a" * 399 + "\u0301" * 3 + "b" * 5_000, ("🙂" * 150 + "é") * 50])
@pytest.mark.parametrize("kind", WORDPIECES)
def test_chosen_long_runs(kind: str, hf_model_dir: Path, text: str) -> None:
    data = wordpiece(kind, hf_model_dir)
    for max_length in (8, 256):
        Pipeline(lambda: tokenizers.Tokenizer.from_str(data), max_length).check(text)


@pytest.mark.parametrize("kind", ["wordpiece", "wordpiece-cased"])
def test_every_character_is_classed_as_tokenizers_treats_it(kind: str,
                                                            hf_model_dir: Path) -> None:
    """Each code point the shrinker classes, in a text, tokenized by ``tokenizers``: one it
    deletes is deleted, whitespace splits, punctuation is a word of its own, and a word
    character joins the two halves of a 121-character word (one [UNK])."""
    tok = tokenizers.Tokenizer.from_str(wordpiece(kind, hf_model_dir))
    tok.no_truncation()
    shrinker = WordPieceShrinker.of(tok)
    assert shrinker is not None
    pieces, _, removed, _ = _classes(shrinker._chinese, shrinker.long)
    classes: dict[str, list[str]] = {"r": [], "z": [], "p": [], "w": []}
    for code in (*range(0xD800), *range(0xE000, 0x30000), *range(0xE0000, 0xE0200)):
        m = pieces.match(chr(code))
        assert m is not None
        kind_ = "r" if m.lastgroup == "w" and removed.match(chr(code)) else m.lastgroup
        if kind_ in classes:
            classes[kind_].append(chr(code))
    assert all(len(v) > 20 for v in classes.values())
    half = "a" * 60
    Form = Callable[[str], str]  # a text made around one character, and what it must equal
    forms: dict[str, tuple[Form, Form]] = {
        "r": (lambda c: "ab" + c + "cd", lambda c: "abcd"),
        "z": (lambda c: "ab" + c + "cd", lambda c: "ab cd"),
        "p": (lambda c: "ab" + c + "cd", lambda c: "ab " + c + " cd"),
        "w": (lambda c: "." + half + c + half + ".", lambda c: ".[UNK]."),
    }
    wrong = {}
    for name, chars in classes.items():
        made, ref = forms[name]
        got = tok.encode_batch([made(c) for c in chars])
        want = tok.encode_batch([ref(c) for c in chars])
        bad = [f"U+{ord(c):04X}" for c, g, w in zip(chars, got, want, strict=True)
               if g.ids != w.ids]
        if bad:
            wrong[name] = bad[:20]
    assert not wrong


def test_the_embedder_gives_the_same_ids_and_vectors(exported_model_dir: Path) -> None:
    from edgembed.embedder import Embedder

    embedder = Embedder.load(exported_model_dir, variant="int8", backend="onnx")
    text = " ".join(corpus()) * 3  # ~ 60,000 characters
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_tokenize, "BOUNDED_FROM", 10**9)  # whole-text tokenization
        mp.setattr(_tokenize, "_COUNT_CHUNK", 10**9)
        whole = embedder.tokenize(text)
        vector = embedder.embed(text)
        left = embedder.tokenize(text, truncation_direction="left")
        left_vector = embedder.embed(text, truncation_direction="left")
        count = embedder.count_tokens([text], truncate=False)
    assert embedder.tokenize(text) == whole
    assert (embedder.embed(text) == vector).all()
    assert embedder.tokenize(text, truncation_direction="left") == left != whole
    assert (embedder.embed(text, truncation_direction="left") == left_vector).all()
    assert embedder.count_tokens([text], truncate=False) == count
    assert count[0] > 10_000


# --- byte-level BPE and Unigram: cuts inside long words of letters ------------------------------

TOKENIZER_FIXTURES = ["xlmr-unigram", "unigram-byte-fallback", "roberta-bpe", "modernbert-bpe",
                      "split-bpe"]
LETTER_RUNS = ["a", "ab", "abc", "é", "ß", "Ω", "я", "ש", "ب", "漢字", "中", "か", "カ", "한",
               "xyz", "Straße", "'", "'re", "'s", "1", " ", "\u0301", "🙂", "!", "\u3000", "▁"]


def fixture_pipeline(name: str, max_length: int) -> Pipeline:
    path = FIXTURES / "tokenizers" / name / "tokenizer.json"
    return Pipeline(lambda: tokenizers.Tokenizer.from_file(str(path)), max_length)


letter_runs = st.lists(
    st.tuples(st.lists(st.sampled_from(LETTER_RUNS), min_size=1, max_size=3).map("".join),
              st.sampled_from([1, 3, 40, 100, 700, 3000])),
    min_size=1, max_size=5).map(lambda runs: "".join(piece * n for piece, n in runs))


@pytest.mark.parametrize("name", TOKENIZER_FIXTURES)
@given(text=letter_runs, max_length=st.sampled_from([4, 16, 128]))
@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_long_words_for_bpe_and_unigram(name: str, text: str, max_length: int) -> None:
    fixture_pipeline(name, max_length).check(text)


@pytest.mark.parametrize("name", TOKENIZER_FIXTURES)
def test_random_letters_are_cut_inside_the_word(name: str) -> None:
    """Random words of 30,000 letters, Latin, CJK and kana: a cut inside the word is found (the
    prefix path is taken, not the whole text) and gives the whole text's ids."""
    import random

    rnd = random.Random(20261201)
    texts = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyzéàß") for _ in range(30_000)),
             "".join(chr(rnd.randrange(0x4E00, 0xA000)) for _ in range(30_000)),
             "".join(chr(rnd.randrange(0x3041, 0x3097)) for _ in range(30_000))]
    for max_length in (8, 512):
        pipeline = fixture_pipeline(name, max_length)
        assert pipeline.cuts is not None
        for text in texts:
            assert pipeline.cuts.cut(text, 4096) is not None
            pipeline.check(text)


def test_the_byte_level_alphabet_is_tokenizers() -> None:
    byte_level = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    text = "".join(chr(c) for c in range(0x20, 0x800)) + "漢字🙂\x00\x7f"
    assert _byte_level(text) == "".join(w for w, _ in byte_level.pre_tokenize_str(text))


IN_WORD = """
import re, sys
from pathlib import Path
from edgembed._tokenize import HFTokenizer

def hwm():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1))

tok = HFTokenizer(Path(sys.argv[1]), 512)
tok.encode(["warm " * 100], truncate=True)
line = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(4096)) * 3000
before = hwm()
ids, truncated = tok.encode([line], truncate=True)
print(before, hwm(), len(ids[0]), truncated)
"""


@pytest.mark.parametrize("name", ["xlmr-unigram", "roberta-bpe"])
def test_a_50_mb_word_for_bpe_and_unigram(name: str) -> None:
    """A 12-million-character word of CJK (36 MB of UTF-8), tokenized by HFTokenizer in a
    subprocess: the peak RSS grows by tens of MB (gigabytes when tokenized whole)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak memory is read from /proc/self/status (Linux)")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", IN_WORD, str(FIXTURES / "tokenizers" / name)],
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    before, after, n, truncated = (int(v) for v in done.stdout.decode().split())
    assert (n, truncated) == (512, 1)
    assert (after - before) / 1024 < 96, f"peak RSS {before // 1024} -> {after // 1024} MiB"


# --- punctuation, emoji and marks without whitespace; left truncation; exact counts ------------

ADVERSARIAL = [
    "!" * 6_000, "?!." * 2_000, "—" * 6_000, "«»" * 3_000, "🙂" * 6_000,
    "👨\u200d👩\u200d👧" * 900, "👍🏽" * 3_000, "❤\ufe0f" * 3_000, "🇫🇷" * 3_000,
    "e" + "\u0301" * 6_000, "\u0301\u0327" * 3_000, "a\u0301" * 3_000, "★☆#%&" * 1_200,
    "".join(chr(0x2010 + (i * 7919) % 0x50) for i in range(6_000)),
    "".join("!?.,;:🙂👍🏽❤\ufe0f—«»#*"[(i * 31) % 15] for i in range(6_000)),
    "Straße漢字Ωяשب🙂!\u0301한カ" * 500, ("!" * 1_000 + " ") * 8, " 🙂" * 2_400,
    "word, " * 1_200, "\n".join(["👨\u200d👩\u200d👧!"] * 1_200), "漢字 \u3000" * 1_200,
]


@pytest.mark.parametrize("name", [*WORDPIECES, *TOKENIZER_FIXTURES])
def test_adversarial_runs_left_right_and_counted(name: str, hf_model_dir: Path) -> None:
    """Runs of punctuation, emoji (ZWJ sequences, skin tones, flags, variation selectors),
    combining marks and mixed scripts, with and without whitespace, for every tokenizer
    family: right and left truncation and the exact count equal ``tokenizers`` on the whole
    text."""
    data = wordpiece(name, hf_model_dir) if name in WORDPIECES else None
    for max_length in (8, 256):
        if data is not None:
            pipeline = Pipeline(lambda: tokenizers.Tokenizer.from_str(data), max_length)
        else:
            pipeline = fixture_pipeline(name, max_length)
        for text in ADVERSARIAL:
            pipeline.check(text)


@pytest.mark.parametrize("name", TOKENIZER_FIXTURES)
def test_punctuation_and_emoji_runs_are_cut_inside(name: str) -> None:
    """A long run of mixed punctuation and emoji has a cut inside it for every byte-level BPE
    and Unigram fixture (the bounded path is taken, not the whole text), and so has a run of
    combining marks where no normalizer composes them (RoBERTa's)."""
    pipeline = fixture_pipeline(name, 512)
    assert pipeline.cuts is not None
    mixed = ADVERSARIAL[14]
    assert pipeline.cuts.cut(mixed, 4096) is not None
    marks = "".join("\u0300\u0301\u0302\u0327\u0308"[(i * 7) % 5] for i in range(8_000))
    assert (pipeline.cuts.cut(marks, 4096) is not None) == (name == "roberta-bpe")
    pipeline.check(marks)
    assert pipeline.cuts.two_sided == name.endswith("bpe")


def test_characters_of_no_class_that_are_words_of_their_own(hf_model_dir: Path) -> None:
    """A WordPiece text of 20,000 characters the shrinker's tables do not class (punctuation
    and CJK ideographs newer than its Unicode, chosen here because ``tokenizers`` splits them
    off) is shortened, not tokenized whole, with the same ids."""
    data = wordpiece("wordpiece", hf_model_dir)
    pipeline = Pipeline(lambda: tokenizers.Tokenizer.from_str(data), 64)
    shrinker = pipeline.shrinker
    assert shrinker is not None
    own = [chr(c) for c in (*range(0x2E00, 0x2E50), *range(0x2B820, 0x2B900))
           if shrinker.pieces.match(chr(c)).lastgroup == "o"  # type: ignore[union-attr]
           and shrinker.own_word(chr(c))]
    assert len(own) > 50
    text = "".join(own[(i * 7919) % len(own)] for i in range(20_000))
    assert shrinker.shrink(text, 64) is not None
    assert shrinker.shrink(text, None) is not None
    pipeline.check(text)
    pipeline.check(text.replace(own[0], "a "))


BOUNDED = """
import re, sys
from pathlib import Path
from edgembed._tokenize import HFTokenizer

def hwm():
    return int(re.search(r"VmHWM:\\s*(\\d+) kB", open("/proc/self/status").read()).group(1))

directory, mode, kind = sys.argv[1:]
tok = HFTokenizer(Path(directory), 512)
tok.encode(["warm " * 100], truncate=True)
tok.count(["warm " * 100], truncate=False)
units = {"punct": "".join("!?.,;:🙂👍🏽❤\\ufe0f—«»#*"[(i * 31) % 15] for i in range(4096)),
         "words": "Straße, 漢字! word 🙂 ", "long": "word " * 600 + "x" * 4096}
unit = units[kind]
line = unit * ((6 if mode == "count" else 12) * 10**6 // len(unit))
before = hwm()
if mode == "count":
    n = tok.count([line], truncate=False)[0]
    small = tok.count([unit * 8, unit * 4], truncate=False)
    k = len(line) // len(unit)
    print(before, hwm(), int(n == small[1] + (k - 4) * (small[0] - small[1]) // 4), 1)
else:
    ids, truncated = tok.encode([line], truncate=True, left=mode == "left")
    print(before, hwm(), len(ids[0]), truncated)
"""


@pytest.mark.parametrize(("name", "mode", "kind"), [
    ("roberta-bpe", "right", "punct"), ("xlmr-unigram", "right", "punct"),
    ("roberta-bpe", "left", "punct"), ("xlmr-unigram", "left", "words"),
    ("split-bpe", "left", "words"), ("minilm", "left", "long"),
    ("xlmr-unigram", "count", "words"), ("modernbert-bpe", "count", "words"),
    ("minilm", "count", "words"),
])
def test_millions_of_characters_in_bounded_memory(name: str, mode: str, kind: str,
                                                 hf_model_dir: Path) -> None:
    """A 12-million-character line through HFTokenizer in a subprocess — right truncation of
    a run of punctuation and emoji, left truncation — or a 6-million-character one counted
    exactly with truncation off (equal to ``tokenizers``' count of the repeated piece, times
    the repetitions) grows the peak RSS by tens of MB (hundreds of MB to gigabytes when
    tokenized whole)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("peak memory is read from /proc/self/status (Linux)")
    import subprocess
    import sys

    directory = hf_model_dir if name == "minilm" else FIXTURES / "tokenizers" / name
    done = subprocess.run([sys.executable, "-c", BOUNDED, str(directory), mode, kind],
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    before, after, n, flag = (int(v) for v in done.stdout.decode().split())
    assert (n, flag) == ((1, 1) if mode == "count" else (512, 1))
    assert (after - before) / 1024 < 96, f"peak RSS {before // 1024} -> {after // 1024} MiB"
