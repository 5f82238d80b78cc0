"""A tiny random-weight BERT in sentence-transformers' layout, for tests that move model files
around (pull, the hub, the cache) rather than test the numbers of a real model.

``write_tiny_bert`` writes config.json, model.safetensors, tokenizer.json (WordPiece, or a
SentencePiece-style Unigram with ``tokenizer="unigram"``), modules.json, 1_Pooling/config.json,
sentence_bert_config.json, config_sentence_transformers.json, README.md and LICENSE. The
weights come from ``numpy.random.default_rng(seed)``: the same seed gives the same bytes.
Hidden size 32 with 2 heads, 2 layers, 64 positions.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = ("the", "a", "an", "is", "are", "was", "be", "to", "of", "and", "in", "on", "for",
         "with", "as", "by", "at", "from", "it", "this", "that", "cat", "dog", "fox", "bird",
         "sat", "ran", "quick", "brown", "lazy", "jumps", "over", "under", "model", "vector",
         "text", "search", "query", "passage", "hello", "world", "edge", "embed", "run", "fast",
         "slow")
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _vocab() -> list[str]:
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return list(dict.fromkeys([*SPECIALS, *letters, *(f"##{c}" for c in letters), *WORDS,
                               ".", ",", "!", "?"]))


def _wordpiece_tokenizer(vocab: list[str], max_len: int) -> str:
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    tok = Tokenizer(WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    tok.enable_truncation(max_len)
    return str(tok.to_str())


def _unigram_tokenizer(vocab: list[str], max_len: int) -> str:
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers.models import Unigram

    pieces = [(w, 0.0) for w in SPECIALS]
    pieces += [("▁" + w, -2.0 - i / 100) for i, w in enumerate(dict.fromkeys(WORDS))]
    pieces += [(c, -8.0) for c in "abcdefghijklmnopqrstuvwxyz.,!?▁"]
    tok = Tokenizer(Unigram(pieces, unk_id=1))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.enable_truncation(max_len)
    return str(tok.to_str())


def write_tiny_bert(d: Path, *, seed: int = 0, tokenizer: str = "wordpiece",
                    max_seq_length: int = 32) -> Path:
    from safetensors.numpy import save_file

    d.mkdir(parents=True, exist_ok=True)
    vocab = _vocab()
    if tokenizer == "unigram":
        tj = _unigram_tokenizer(vocab, max_seq_length)
        v = len(json.loads(tj)["model"]["vocab"])
    else:
        tj = _wordpiece_tokenizer(vocab, max_seq_length)
        v = len(vocab)
        (d / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (d / "tokenizer.json").write_text(tj, encoding="utf-8")
    c, f, p, layers = 32, 64, 64, 2
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_size": c,
              "num_hidden_layers": layers, "num_attention_heads": 2, "intermediate_size": f,
              "vocab_size": v, "max_position_embeddings": p, "type_vocab_size": 2,
              "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0}
    (d / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    rng = np.random.default_rng(seed)

    def n(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.2, size=shape).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": n(v, c),
         "embeddings.position_embeddings.weight": n(p, c),
         "embeddings.token_type_embeddings.weight": n(2, c),
         "embeddings.LayerNorm.weight": 1 + n(c), "embeddings.LayerNorm.bias": n(c)}
    for layer in range(layers):
        pre = f"encoder.layer.{layer}."
        for name, shape in (("attention.self.query", (c, c)), ("attention.self.key", (c, c)),
                            ("attention.self.value", (c, c)),
                            ("attention.output.dense", (c, c)),
                            ("intermediate.dense", (f, c)), ("output.dense", (c, f))):
            w[pre + name + ".weight"] = n(*shape)
            w[pre + name + ".bias"] = n(shape[0])
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[pre + name + ".weight"] = 1 + n(c)
            w[pre + name + ".bias"] = n(c)
    save_file(w, str(d / "model.safetensors"))
    modules = [{"idx": 0, "name": "0", "path": "",
                "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    (d / "modules.json").write_text(json.dumps(modules, indent=1), encoding="utf-8")
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": c, "pooling_mode_cls_token": False,
         "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False}), encoding="utf-8")
    (d / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False}), encoding="utf-8")
    (d / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "query: ", "document": "passage: "},
                    "default_prompt_name": None}), encoding="utf-8")
    (d / "README.md").write_text("---\nlicense: apache-2.0\n---\n# tiny test model\n",
                                 encoding="utf-8")
    (d / "LICENSE").write_text("Apache License 2.0 (test model)\n", encoding="utf-8")
    return d


def repo_files(d: Path) -> dict[str, bytes]:
    """Every file of a model directory, by its path relative to it (what a hub repo holds)."""
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file()}
