"""Write the tiny random-weight cross-encoders and SPLADE models (models with a head).

The companion of ``make_tiny_models.py`` (same tokenizers, same wide random weights) for the two
tasks past embeddings: **rerank** — sequence-classification checkpoints saved by
sentence-transformers' ``CrossEncoder`` — and **sparse** — masked-LM checkpoints saved by its
``SparseEncoder`` (a fill-mask Transformer and ``SpladePooling``). No cross-encoder weights and
no random-size SPLADE weights can be downloaded where edgembed is built, so these are made here
with ``transformers`` and committed under ``tests/fixtures/models/<name>/``, each with an
``edgembed_fixture.json`` whose ``task`` says which kind it is. ``make_head_references.py``
(beside this script) writes their sentence-transformers references;
``tests/fixtures/models/README.md`` lists them.

The layouts cover what users bring: sentence-transformers 6 (``modules.json`` with one
Transformer whose ``transformer_task`` is ``sequence-classification`` or ``fill-mask``), the
older cross-encoder layout (a bare Hugging Face checkpoint whose ``config.json`` carries the
activation, here under the oldest key ``sbert_ce_default_activation_function``), the legacy
``MLMTransformer`` module, a bare ``*ForMaskedLM`` checkpoint (as SPLADE-tiny ships), and a
tokenizer.json whose truncation strategy is ``OnlySecond``.

The masked-LM decoders get a negative bias (2.5 standard deviations of the logits) so that, as
in a trained SPLADE model, most vocabulary entries stay at zero and the vectors are sparse.

Run from the repository root in the throwaway reference environment (torch 2.13 CPU,
transformers 5.24, sentence-transformers 6.2, tokenizers 0.23; nothing is downloaded):

    /work/refvenv/bin/python models/tiny/make_tiny_heads.py [NAME ...]   # default: all
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
import transformers
from make_tiny_models import (
    BERT_SPECIALS,
    BERT_TOKENS,
    CORPUS,
    OUT,
    SEED,
    TOKENIZERS,
    english_strings,
    randomize,
    wordpiece,
)
from sentence_transformers import CrossEncoder, SparseEncoder
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase


@dataclass
class HeadSpec:
    name: str
    task: str  # "rerank" or "sparse"
    config: transformers.PretrainedConfig
    tokenizer: Callable[[], PreTrainedTokenizerBase]
    max_seq_length: int
    layout: str = "st"  # "st": saved by sentence-transformers 6; "bare": save_pretrained only
    config_extra: dict[str, Any] = field(default_factory=dict)  # written into config.json
    splade: dict[str, str] = field(default_factory=dict)  # SpladePooling options
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # same weights
    seed: int = 0
    about: str = ""


def bert_tokenizer(tok: Tokenizer, max_len: int) -> Callable[[], PreTrainedTokenizerBase]:
    """A BertTokenizer around ``tok``: transformers then returns token_type_ids (0 for the
    query, 1 for the document), as it does for real BERT cross-encoders."""
    def load() -> PreTrainedTokenizerBase:
        return transformers.BertTokenizerFast(tokenizer_object=tok, model_max_length=max_len,
                                              **BERT_TOKENS)
    return load


def fixture_tokenizer(name: str) -> Callable[[], PreTrainedTokenizerBase]:
    def load() -> PreTrainedTokenizerBase:
        tok = AutoTokenizer.from_pretrained(str(TOKENIZERS / name))
        tok.fixture_dir = TOKENIZERS / name  # its tokenizer.json is copied in as is
        return tok
    return load


def specs(texts: list[str]) -> list[HeadSpec]:
    uncased = wordpiece(texts, lowercase=True, specials=BERT_SPECIALS, template="[CLS] $A [SEP]")
    v_un = uncased.get_vocab_size()
    xlmr = Tokenizer.from_file(str(TOKENIZERS / "xlmr-unigram" / "tokenizer.json"))
    mb = Tokenizer.from_file(str(TOKENIZERS / "modernbert-bpe" / "tokenizer.json"))
    rob = Tokenizer.from_file(str(TOKENIZERS / "roberta-bpe" / "tokenizer.json"))
    mb_ids = {t: mb.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]")}
    drop = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    return [
        HeadSpec("rerank-bert", "rerank", transformers.BertConfig(
            vocab_size=v_un, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=128, num_labels=1, **drop),
            bert_tokenizer(uncased, 128), 128, seed=21,
            variants={"rerank-bert-only-second": {"truncation": "OnlySecond"}},
            about="BertForSequenceClassification, one label (sigmoid), token types 0/1 for "
                  "query/document, 128 positions: pairs past them are truncated longest-first; "
                  "saved by CrossEncoder (sentence-transformers 6 layout)"),
        HeadSpec("rerank-bert-3labels-legacy", "rerank", transformers.BertConfig(
            vocab_size=v_un, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
            intermediate_size=40, max_position_embeddings=64, num_labels=3,
            id2label={0: "contradiction", 1: "entailment", 2: "neutral"},
            label2id={"contradiction": 0, "entailment": 1, "neutral": 2},
            hidden_act="gelu_new", **drop),
            bert_tokenizer(uncased, 64), 64, layout="bare",
            config_extra={"sbert_ce_default_activation_function":
                          "torch.nn.modules.linear.Identity"},
            seed=22,
            about="three labels (NLI-style names), gelu_new, 64 positions; the oldest "
                  "cross-encoder layout: a bare checkpoint whose config.json names the "
                  "activation under sbert_ce_default_activation_function"),
        HeadSpec("rerank-xlm-roberta", "rerank", transformers.XLMRobertaConfig(
            vocab_size=xlmr.get_vocab_size(), hidden_size=24, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=48, max_position_embeddings=514,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1, num_labels=1,
            **drop),
            fixture_tokenizer("xlmr-unigram"), 512, seed=23,
            about="XLMRobertaForSequenceClassification (dense + tanh + out_proj on <s>), "
                  "SentencePiece Unigram, pairs as <s> q </s></s> d </s>, 512 positions"),
        HeadSpec("rerank-modernbert-mean", "rerank", transformers.ModernBertConfig(
            vocab_size=4096, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
            intermediate_size=48, max_position_embeddings=1024, local_attention=8,
            global_attn_every_n_layers=3, classifier_pooling="mean", classifier_bias=True,
            classifier_activation="gelu", num_labels=1, pad_token_id=mb_ids["[PAD]"],
            cls_token_id=mb_ids["[CLS]"], sep_token_id=mb_ids["[SEP]"],
            bos_token_id=mb_ids["[CLS]"], eos_token_id=mb_ids["[SEP]"], attention_dropout=0.0,
            embedding_dropout=0.0, mlp_dropout=0.0, classifier_dropout=0.0),
            fixture_tokenizer("modernbert-bpe"), 1024, seed=24,
            about="ModernBertForSequenceClassification: mean pooling over the pair, head dense "
                  "(with bias) + GELU + norm, then the classifier; rotary, local window 8, "
                  "1024 positions"),
        HeadSpec("splade-bert", "sparse", transformers.BertConfig(
            vocab_size=v_un, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=256, **drop),
            bert_tokenizer(uncased, 256), 256, splade={"pooling_strategy": "max",
                                                        "activation_function": "relu"},
            seed=25,
            variants={
                "splade-bert-sum-log1p": {"splade": {"pooling_strategy": "sum",
                                                     "activation_function": "log1p_relu"}},
                "splade-bert-legacy": {"legacy": True},
                "splade-bert-bare": {"bare": True},
            },
            about="BertForMaskedLM (decoder tied to the word embeddings) + SpladePooling max of "
                  "log(1 + relu); saved by SparseEncoder; variants: sum pooling with "
                  "log1p_relu, the legacy MLMTransformer module, and a bare checkpoint (no "
                  "sentence-transformers files, as SPLADE-tiny)"),
        HeadSpec("splade-bert-untied", "sparse", transformers.BertConfig(
            vocab_size=v_un, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=128, tie_word_embeddings=False,
            **drop),
            bert_tokenizer(uncased, 128), 128, splade={"pooling_strategy": "max",
                                                        "activation_function": "relu"},
            seed=27,
            about="BertForMaskedLM whose decoder is NOT tied to the word embeddings "
                  "(tie_word_embeddings false: cls.predictions.decoder.weight is its own "
                  "random matrix) + SpladePooling max of log(1 + relu), 128 positions; saved "
                  "by SparseEncoder"),
        HeadSpec("splade-roberta-untied", "sparse", transformers.RobertaConfig(
            vocab_size=rob.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64, max_position_embeddings=130,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
            tie_word_embeddings=False, **drop),
            fixture_tokenizer("roberta-bpe"), 128, splade={"pooling_strategy": "max",
                                                            "activation_function": "relu"},
            seed=28,
            about="RobertaForMaskedLM whose decoder is NOT tied to the word embeddings "
                  "(lm_head.decoder.weight its own random matrix; lm_head.dense, "
                  "lm_head.layer_norm and the decoder's bias), byte-level BPE, positions "
                  "offset by 2, 128 usable; SpladePooling max of log(1 + relu), saved by "
                  "SparseEncoder"),
        HeadSpec("splade-distilbert", "sparse", transformers.DistilBertConfig(
            vocab_size=v_un, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
            max_position_embeddings=128, activation="gelu", dropout=0.0,
            attention_dropout=0.0),
            bert_tokenizer(uncased, 128), 128, splade={"pooling_strategy": "max",
                                                        "activation_function": "relu"},
            seed=26,
            about="DistilBertForMaskedLM (vocab_transform, vocab_layer_norm, vocab_projector) + "
                  "SpladePooling max, as naver's DistilBERT SPLADE models"),
    ]


def _sparsify(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, texts: list[str],
              seed: int) -> None:
    """A negative decoder bias, so most vocabulary logits stay below zero (sparse vectors, as
    a trained SPLADE model's): about 2.5 standard deviations of the logits on the corpus."""
    # the decoder's own bias first: an untied decoder (transformers 5) adds it, not the head's
    # "cls.predictions.bias", which then stays unused (tied, the two are one tensor)
    names = ("cls.predictions.decoder.bias", "lm_head.decoder.bias", "decoder.bias",
             "vocab_projector.bias", "cls.predictions.bias", "lm_head.bias")
    params = dict(model.named_parameters())
    bias = next(params[n] for n in names if n in params)
    with torch.no_grad():
        bias.zero_()
        enc = tokenizer(texts[:64], padding=True, truncation=True, return_tensors="pt")
        enc.pop("token_type_ids", None)
        logits = model(**enc).logits[enc["attention_mask"].bool()]
        std = float(logits.std())
        gen = torch.Generator().manual_seed(seed)
        bias.copy_(torch.randn(bias.shape, generator=gen) * 0.3 * std - 2.5 * std)


def _write_tokenizer_json(out: Path, tok: PreTrainedTokenizerBase) -> None:
    fixture_dir = getattr(tok, "fixture_dir", None)
    if fixture_dir is not None:
        shutil.copyfile(fixture_dir / "tokenizer.json", out / "tokenizer.json")


def build(spec: HeadSpec, out: Path, texts: list[str]) -> None:
    torch.manual_seed(spec.seed)
    if spec.task == "rerank":
        model = transformers.AutoModelForSequenceClassification.from_config(spec.config)
    else:
        model = transformers.AutoModelForMaskedLM.from_config(spec.config)
    randomize(model, SEED + spec.seed)
    model.eval()
    tok = spec.tokenizer()
    tok.model_max_length = spec.max_seq_length
    if spec.task == "sparse":
        _sparsify(model, tok, texts, SEED + 200 + spec.seed)
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        _write_tokenizer_json(Path(tmp), tok)
        if spec.config_extra:
            cfg_path = Path(tmp) / "config.json"
            cfg = json.loads(cfg_path.read_text())
            cfg.update(spec.config_extra)
            cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
        if spec.layout == "bare":
            shutil.copytree(tmp, out)
        elif spec.task == "rerank":
            CrossEncoder(tmp, device="cpu", local_files_only=True,
                         max_length=spec.max_seq_length).save(str(out))
        else:
            st = SparseEncoder(tmp, device="cpu", local_files_only=True)
            st[1].pooling_strategy = spec.splade["pooling_strategy"]
            st[1].activation_function = spec.splade["activation_function"]
            st.save(str(out))
    _write_tokenizer_json(out, tok)
    (out / "README.md").unlink(missing_ok=True)  # a generated model card: noise here
    about = {"about": spec.about, "family": spec.config.model_type, "task": spec.task,
             "seed": spec.seed}
    (out / "edgembed_fixture.json").write_text(json.dumps(about, indent=2) + "\n")


def variant(base: Path, out: Path, spec: HeadSpec, change: dict[str, Any]) -> None:
    """A copy of ``base`` (identical weight files: git stores them once) with another tokenizer
    truncation, SPLADE pooling or layout."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(base, out)
    if "truncation" in change:
        path = out / "tokenizer.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        data["truncation"] = {"direction": "Right", "max_length": spec.max_seq_length,
                              "strategy": change["truncation"], "stride": 0}
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    if "splade" in change:
        path = out / "1_SpladePooling" / "config.json"
        cfg = json.loads(path.read_text())
        cfg.update(change["splade"])
        path.write_text(json.dumps(cfg, indent=4) + "\n")
    if change.get("legacy"):
        # sentence-transformers 5's files: the MLMTransformer module, its old config
        mods = json.loads((out / "modules.json").read_text())
        mods[0]["type"] = "sentence_transformers.sparse_encoder.models.MLMTransformer"
        mods[1]["type"] = "sentence_transformers.sparse_encoder.models.SpladePooling"
        (out / "modules.json").write_text(json.dumps(mods, indent=2) + "\n")
        sb = {"max_seq_length": spec.max_seq_length, "do_lower_case": False}
        (out / "sentence_bert_config.json").write_text(json.dumps(sb, indent=2) + "\n")
    if change.get("bare"):
        for name in ("modules.json", "sentence_bert_config.json",
                     "config_sentence_transformers.json"):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "1_SpladePooling", ignore_errors=True)
    about = json.loads((base / "edgembed_fixture.json").read_text())
    about["about"] = f"{base.name}'s weights with {json.dumps(change)}"
    (out / "edgembed_fixture.json").write_text(json.dumps(about, indent=2) + "\n")


def main() -> int:
    """Every model, or those named on the command line (with their variants)."""
    only = set(sys.argv[1:])
    texts = [str(t) for t in json.loads(CORPUS.read_text(encoding="utf-8"))] + english_strings()
    OUT.mkdir(parents=True, exist_ok=True)
    for spec in specs(texts):
        if only and spec.name not in only:
            continue
        out = OUT / spec.name
        build(spec, out, texts)
        print(f"{spec.name}: {sum(f.stat().st_size for f in out.rglob('*') if f.is_file())} bytes")
        for name, change in spec.variants.items():
            variant(out, OUT / name, spec, change)
            print(f"  {name}: same weights, {change}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
