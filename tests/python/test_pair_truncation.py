"""Pairs past max length on both sides, as ``HFPairTokenizer`` cuts them from bounded prefixes.

``tokenizers`` computes every overflowing window of a truncated pair, which for two long texts is
quadratic in their lengths (a pair of two 20,000-character texts took ~3 s at max length 512,
two 80,000-character ones ~35 s, on this 2-core machine). ``HFPairTokenizer`` gives a pair whose
sides both pass max length to longest-first truncation itself, from each side's bounded prefix.
The reference is ``tokenizers`` itself on the whole pair, for every tiny cross-encoder at its
own max length and at 37 (an odd room for the four special tokens of XLM-RoBERTa, an even one
for BERT's three), on pairs of equal, nearly equal and very different lengths.
"""

from __future__ import annotations

from typing import Any

import pytest

from edgembed._tokenize import HFPairTokenizer, load_tokenizer
from edgembed.model_dir import read_model_dir
from tiny_models import model_dir, names, texts

WORDS = "market farmers bread cheese village seven saturday "


def text(n: int, salt: str = "") -> str:
    return (salt + WORDS * (n // len(WORDS) + 1))[:n]


class Recording:
    """The truncating tokenizer, recording the longest text it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.longest = inner, 0

    def encode_batch(self, items: list[tuple[str, str]]) -> Any:
        self.longest = max([self.longest, *(len(t) for p in items for t in p)])
        return self.inner.encode_batch(items)

    def encode(self, *pair: str) -> Any:
        self.longest = max([self.longest, *(len(t) for t in pair)])
        return self.inner.encode(*pair)


@pytest.mark.parametrize("name", names("rerank"))
@pytest.mark.parametrize("own_length", [True, False])
def test_both_sides_long_are_cut_as_tokenizers_cuts_them(name: str, own_length: bool) -> None:
    desc = read_model_dir(model_dir(name))
    m = desc.max_seq_length if own_length else 37
    hf = HFPairTokenizer(desc.source_dir, m)
    ref = load_tokenizer(desc.source_dir, m, truncate=False)
    ref.enable_truncation(m, strategy=hf.strategy)
    long = 20 * m  # characters: past the bounded-prefix threshold (16 per token) on both sides
    t = texts()
    pairs = [(text(long), text(long)), (text(long), text(long + 1)), (text(long + 90), text(long)),
             (text(long, "x "), text(2 * long)), (text(2 * long), text(long, "y ")),
             (" ".join(t[:40])[:long], " ".join(t[40:90])[:long + 7])]
    spy = Recording(hf._truncating)
    hf._truncating = spy
    for q, d in pairs:
        try:
            want = ref.encode(q, d)
        except Exception:  # only_second: the query alone leaves no room
            assert hf.strategy == "only_second"
            with pytest.raises(Exception, match="alone leaves no room"):
                hf.encode([(q, d)])
            continue
        ids, types, truncated = hf.encode([(q, d)])
        assert (ids, types) == ([want.ids], [want.type_ids]), (len(q), len(d))
        assert truncated == 1 and len(ids[0]) == m
    # only bounded prefixes reached tokenizers' truncation
    assert spy.longest < 2 * long
