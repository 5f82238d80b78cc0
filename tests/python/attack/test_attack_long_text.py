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
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgembed import _tokenize
from edgembed._tokenize import encode_truncated, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "corpus.json"
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

    def check(self, text: str) -> None:
        whole = self.truncating.encode(text)
        bounded = encode_truncated(self.full, self.truncating, text, self.max_length)
        assert bounded.ids == whole.ids, repr(text[:200])
        assert bool(bounded.overflowing) == bool(whole.overflowing)


@pytest.fixture(scope="module", params=["wordpiece", "bpe", "unigram"])
def make(request: pytest.FixtureRequest, hf_model_dir: Path) -> Any:
    if request.param == "wordpiece":
        data = load_tokenizer(hf_model_dir, 256, truncate=False).to_str()
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


def test_the_embedder_gives_the_same_ids_and_vectors(exported_model_dir: Path) -> None:
    from edgembed.embedder import Embedder

    embedder = Embedder.load(exported_model_dir, variant="int8", backend="onnx")
    text = " ".join(corpus()) * 3  # ~ 60,000 characters
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_tokenize, "BOUNDED_FROM", 10**9)  # whole-text tokenization
        whole = embedder.tokenize(text)
        vector = embedder.embed(text)
    assert embedder.tokenize(text) == whole
    assert (embedder.embed(text) == vector).all()
