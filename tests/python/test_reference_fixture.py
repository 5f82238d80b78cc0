"""The reference fixture every other test compares against: well-formed, and in step with the model.

`tests/fixtures/reference/all-minilm-l6-v2.json` is written by `tests/fixtures/make_reference.py`.
These checks keep it honest: it covers the corpus, its vectors are unit length, and its token ids
are exactly what Hugging Face `tokenizers` gives for the model's own `tokenizer.json` today.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "reference" / "corpus.json"

MAX_SEQ_LENGTH = 256
DIM = 384
VOCAB_SIZE = 30522
CLS, SEP, UNK = 101, 102, 100


@pytest.fixture(scope="module")
def model_dir(hf_model_dir: Path) -> Path:
    if not (hf_model_dir / "tokenizer.json").is_file():
        pytest.skip(f"no all-MiniLM-L6-v2 files in {hf_model_dir} (set EDGEMBED_TEST_HF_DIR)")
    return hf_model_dir


def _has(text: str, lo: int, hi: int) -> bool:
    return any(lo <= ord(ch) <= hi for ch in text)


def test_header(reference: dict[str, Any]) -> None:
    assert reference["model"] == "all-minilm-l6-v2"
    assert reference["max_seq_length"] == MAX_SEQ_LENGTH
    assert len(reference["model_sha256"]) == 64
    produced_by = reference["produced_by"]
    for key in ("command", "torch", "sentence_transformers", "tokenizers"):
        assert produced_by[key], key
    assert "make_reference.py" in produced_by["command"]
    assert produced_by["alone_vs_batched_min_cosine"] >= 0.99999


def test_texts_are_the_corpus(reference: dict[str, Any]) -> None:
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    assert reference["texts"] == corpus
    assert len(corpus) >= 200
    assert len(set(corpus)) == len(corpus)
    n = len(corpus)
    assert len(reference["token_ids"]) == n
    assert len(reference["embeddings"]) == n
    assert len(reference["st_tokenization_matches"]) == n


def test_sentence_transformers_tokenized_identically(reference: dict[str, Any]) -> None:
    assert all(m is True for m in reference["st_tokenization_matches"])


@pytest.mark.parametrize(
    ("kind", "predicate"),
    [
        ("empty", lambda t: t == ""),
        ("whitespace only", lambda t: t != "" and t.strip() == ""),
        ("tab and newline", lambda t: t == "\t\n"),
        ("accented Latin", lambda t: "Ł" in t or "Å" in t),
        ("Greek", lambda t: _has(t, 0x0370, 0x03FF)),
        ("Cyrillic", lambda t: _has(t, 0x0400, 0x04FF)),
        ("Arabic", lambda t: _has(t, 0x0600, 0x06FF)),
        ("Hebrew", lambda t: _has(t, 0x0590, 0x05FF)),
        ("Devanagari", lambda t: _has(t, 0x0900, 0x097F)),
        ("Thai", lambda t: _has(t, 0x0E00, 0x0E7F)),
        ("CJK ideographs", lambda t: _has(t, 0x4E00, 0x9FFF)),
        ("hiragana", lambda t: _has(t, 0x3040, 0x309F)),
        ("katakana", lambda t: _has(t, 0x30A0, 0x30FF)),
        ("Hangul", lambda t: _has(t, 0xAC00, 0xD7AF)),
        ("emoji", lambda t: _has(t, 0x1F300, 0x1FAFF)),
        ("emoji ZWJ sequence", lambda t: "\u200d" in t and _has(t, 0x1F300, 0x1FAFF)),
        ("flag", lambda t: _has(t, 0x1F1E6, 0x1F1FF)),
        ("skin tone", lambda t: _has(t, 0x1F3FB, 0x1F3FF)),
        ("NUL", lambda t: "\u0000" in t),
        ("zero-width space", lambda t: "\u200b" in t),
        ("soft hyphen", lambda t: "\u00ad" in t),
        ("combining mark", lambda t: "e\u0301" in t),
        ("URL", lambda t: "https://" in t),
        ("e-mail", lambda t: "@example.com" in t),
        ("SQL", lambda t: t.startswith("SELECT ")),
        ("word over 100 characters", lambda t: max(map(len, t.split()), default=0) > 100),
        ("math symbols", lambda t: "∀" in t or "∫" in t),
        ("all caps", lambda t: len(t) > 10 and t.isupper()),
    ],
)
def test_corpus_covers(reference: dict[str, Any], kind: str, predicate: Any) -> None:
    assert any(predicate(t) for t in reference["texts"]), f"no {kind} text in the corpus"


def test_some_texts_are_truncated(reference: dict[str, Any]) -> None:
    truncated = [ids for ids in reference["token_ids"] if len(ids) == MAX_SEQ_LENGTH]
    assert len(truncated) >= 3
    assert all(ids[-1] == SEP for ids in truncated)


def test_token_ids_are_well_formed(reference: dict[str, Any]) -> None:
    for text, ids in zip(reference["texts"], reference["token_ids"], strict=True):
        assert 2 <= len(ids) <= MAX_SEQ_LENGTH, text
        assert ids[0] == CLS and ids[-1] == SEP, text
        assert all(isinstance(i, int) and 0 <= i < VOCAB_SIZE for i in ids), text
    texts = reference["texts"]
    by_text = dict(zip(texts, reference["token_ids"], strict=True))
    assert by_text[""] == [CLS, SEP]
    assert by_text["\t\n"] == [CLS, SEP]
    assert by_text["hello"] == [CLS, 7592, SEP]
    # Over 100 characters, WordPiece gives up on a word.
    assert by_text["a" * 128] == [CLS, UNK, SEP]


def test_embeddings_are_unit_vectors(reference: dict[str, Any]) -> None:
    for text, vec in zip(reference["texts"], reference["embeddings"], strict=True):
        assert len(vec) == DIM, text
        assert all(math.isfinite(x) for x in vec), text
        norm = math.sqrt(sum(x * x for x in vec))
        assert abs(norm - 1.0) < 1e-4, (text, norm)


def test_same_tokens_same_embedding(reference: dict[str, Any]) -> None:
    """Texts that tokenize alike ("", "   ", "\\t\\n"; emoji that become [UNK]) embed alike."""
    groups: dict[tuple[int, ...], list[list[float]]] = {}
    for ids, vec in zip(reference["token_ids"], reference["embeddings"], strict=True):
        groups.setdefault(tuple(ids), []).append(vec)
    shared = [vecs for vecs in groups.values() if len(vecs) > 1]
    assert len(shared) >= 2
    for vecs in shared:
        for vec in vecs[1:]:
            assert max(abs(a - b) for a, b in zip(vecs[0], vec, strict=True)) < 2e-6


def test_embeddings_separate_meanings(reference: dict[str, Any]) -> None:
    by_text = dict(zip(reference["texts"], reference["embeddings"], strict=True))

    def cos(a: str, b: str) -> float:
        return float(sum(x * y for x, y in zip(by_text[a], by_text[b], strict=True)))

    fox = "The quick brown fox jumps over the lazy dog."
    assert cos(fox, "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG") > 0.95
    assert cos(fox, "Please submit your expense reports before the end of the month.") < 0.3


def test_model_file_matches(reference: dict[str, Any], model_dir: Path) -> None:
    h = hashlib.sha256()
    with (model_dir / "model.safetensors").open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    assert h.hexdigest() == reference["model_sha256"]


def test_token_ids_match_tokenizers(reference: dict[str, Any], model_dir: Path) -> None:
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()  # the file pads to 128
    tok.enable_truncation(max_length=MAX_SEQ_LENGTH)  # the file truncates at 128
    for i, (text, ids) in enumerate(zip(reference["texts"], reference["token_ids"], strict=True)):
        got = tok.encode(text).ids
        assert got == ids, f"text {i}: {text[:40]!r}"

    tok.no_truncation()
    for text, ids in zip(reference["texts"], reference["token_ids"], strict=True):
        full = tok.encode(text).ids
        if len(full) > MAX_SEQ_LENGTH:
            assert ids == [*full[: MAX_SEQ_LENGTH - 1], SEP]
        else:
            assert ids == full
