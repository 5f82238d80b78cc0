"""Write the tiny random-weight test models: one per family and feature edgembed supports.

No real XLM-RoBERTa, RoBERTa, ModernBERT, DistilBERT or odd-sized BERT weights can be downloaded
where edgembed is built, and the tests run without torch, so these models are made here with
``transformers`` (random weights drawn from a seed) and saved with ``sentence-transformers`` in
its directory layout (Pooling configs of every mode, Dense, Normalize, prompts), then committed
under ``tests/fixtures/models/<name>/``. ``make_tiny_references.py`` (beside this script) writes
their reference vectors with sentence-transformers. ``tests/fixtures/models/README.md`` lists
the models and what each one exercises.

Weights are drawn wider than transformers' initialization (which leaves attention almost
uniform and LayerNorms at identity), so that every feature — positions, relative buckets,
rotary angles, the sliding window, norm biases — changes the vectors: a test that got one of
them wrong would fail. Sizes stay tiny (hidden ≤ 64, ≤ 3 layers) to keep the fixtures small.

Tokenizers: WordPiece vocabularies are trained here with ``tokenizers``' WordPieceTrainer on the
reference corpus and the machine's gettext catalogs (English originals); the SentencePiece
Unigram (XLM-R) and byte-level BPE (RoBERTa, ModernBERT) tokenizers are the committed fixtures of
``tests/fixtures/tokenizers/``.

Run from the repository root in the throwaway reference environment (torch 2.13 CPU,
transformers 5.24, sentence-transformers 6.2, tokenizers 0.23; nothing is downloaded):

    /work/refvenv/bin/python models/tiny/make_tiny_models.py [NAME ...]   # default: every model

The script is deterministic up to the WordPiece trainer's thread scheduling; the committed files
are the reference, not this script's next output.
"""

from __future__ import annotations

import gettext
import glob
import json
import math
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import torch
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Normalize, Transformer
from sentence_transformers.sentence_transformer.modules import Pooling
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)
from transformers import AutoTokenizer, PreTrainedTokenizerFast

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "models"
TOKENIZERS = REPO / "tests" / "fixtures" / "tokenizers"
CORPUS = REPO / "tests" / "fixtures" / "reference" / "corpus.json"
SEED = 20261201


# --- WordPiece tokenizers ----------------------------------------------------------------------


def english_strings(limit: int = 30_000) -> list[str]:
    """English originals (msgids) of the gettext catalogs, sorted, seeded sample."""
    seen: set[str] = set()
    for path in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError):
            continue
        for key in catalog:
            msgid = key[0] if isinstance(key, tuple) else key
            if isinstance(msgid, str) and msgid.strip():
                seen.add(msgid.replace("\n", " "))
    strings = sorted(seen)
    return random.Random(SEED).sample(strings, min(limit, len(strings)))


def wordpiece(texts: list[str], *, lowercase: bool, specials: list[str], template: str,
              vocab_size: int = 1000) -> Tokenizer:
    unk = next(s for s in specials if "UNK" in s.upper())
    tok = Tokenizer(models.WordPiece(unk_token=unk, max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase, strip_accents=None,
                                                clean_text=True, handle_chinese_chars=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials,
                                        limit_alphabet=250, min_frequency=2)
    tok.train_from_iterator(texts, trainer)
    cls, sep = template.split(" $A ")
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
    return tok


def fast(tok: Tokenizer, max_len: int, **special: str) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_len, **special)


BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BERT_TOKENS = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]",
               "sep_token": "[SEP]", "mask_token": "[MASK]"}
MPNET_SPECIALS = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]
MPNET_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]",
                "pad_token": "<pad>", "cls_token": "<s>", "sep_token": "</s>",
                "mask_token": "<mask>"}


# --- random weights ----------------------------------------------------------------------------


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Weights wide enough that every feature matters (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape: torch.Size, std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            low = name.lower()
            if "norm" in low and name.endswith("weight"):
                p.copy_(1.0 + normal(p.shape, 0.2))
            elif name.endswith("bias"):
                p.copy_(normal(p.shape, 0.1))
            elif "relative_attention_bias" in name:
                p.copy_(normal(p.shape, 1.5))
            elif "embeddings" in low:
                p.copy_(normal(p.shape, 0.5))
            elif p.ndim == 2:
                std = 1.0 / math.sqrt(p.shape[1])
                if any(k in name for k in ("query", "key", ".q.", ".k.", "q_lin", "k_lin",
                                            "Wqkv")):
                    std *= 2.0  # peaky attention, so positions and masks show
                p.copy_(normal(p.shape, std))
            else:
                p.copy_(normal(p.shape, 0.1))


# --- the models --------------------------------------------------------------------------------


@dataclass
class Spec:
    name: str
    config: transformers.PretrainedConfig
    tokenizer: Callable[[], PreTrainedTokenizerFast]
    max_seq_length: int
    pooling: str | tuple[str, ...] = "mean"
    include_prompt: bool = True
    dense: list[dict[str, Any]] = field(default_factory=list)
    normalize: bool = True
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    do_lower_case: bool = False
    legacy_files: bool = False  # write sentence_bert_config.json / 1_Pooling in the old style
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)  # same weights, other heads
    seed: int = 0
    about: str = ""


def bert(**kw: Any) -> transformers.BertConfig:
    return transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                   **kw)


def specs(texts: list[str]) -> list[Spec]:
    uncased = wordpiece(texts, lowercase=True, specials=BERT_SPECIALS, template="[CLS] $A [SEP]")
    cased = wordpiece(texts, lowercase=False, specials=BERT_SPECIALS, template="[CLS] $A [SEP]")
    mpnet = wordpiece(texts, lowercase=True, specials=MPNET_SPECIALS, template="<s> $A </s>")
    v_un, v_ca, v_mp = uncased.get_vocab_size(), cased.get_vocab_size(), mpnet.get_vocab_size()

    def from_dir(name: str) -> Callable[[], PreTrainedTokenizerFast]:
        def load() -> PreTrainedTokenizerFast:
            tok = AutoTokenizer.from_pretrained(str(TOKENIZERS / name))
            tok.fixture_dir = TOKENIZERS / name  # its tokenizer.json is copied in as is
            return tok
        return load

    mb_tok = Tokenizer.from_file(str(TOKENIZERS / "modernbert-bpe" / "tokenizer.json"))
    xlmr_tok = Tokenizer.from_file(str(TOKENIZERS / "xlmr-unigram" / "tokenizer.json"))
    rob_tok = Tokenizer.from_file(str(TOKENIZERS / "roberta-bpe" / "tokenizer.json"))
    mb_ids = {t: mb_tok.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]")}
    prompts = {"query": "query: ", "document": "passage: "}
    no_drop = {"attention_dropout": 0.0, "embedding_dropout": 0.0, "mlp_dropout": 0.0}
    return [
        Spec("bert-h48-mean", bert(
            vocab_size=v_un, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
            intermediate_size=80, max_position_embeddings=512, hidden_act="gelu"),
            lambda: fast(uncased, 512, **BERT_TOKENS), 512, legacy_files=True, seed=1,
            about="hidden 48 (not a multiple of 32), 3 heads, FFN 80, 512 positions used in "
                  "full; mean + Normalize; the old-style sentence_bert_config.json and pooling "
                  "config"),
        Spec("bert-h40-cls-gelu-new", bert(
            vocab_size=v_un, hidden_size=40, num_hidden_layers=3, num_attention_heads=5,
            intermediate_size=72, max_position_embeddings=64, hidden_act="gelu_new"),
            lambda: fast(uncased, 64, **BERT_TOKENS), 64, pooling="cls", normalize=False,
            seed=2, about="5 heads of 8, 3 layers, gelu_new (tanh GELU), CLS pooling, no "
                          "Normalize, max_seq_length 64 = all positions (kept in "
                          "tokenizer_config.json, sentence-transformers 5+ style)"),
        Spec("bert-h30-max-relu-dense", bert(
            vocab_size=v_un, hidden_size=30, num_hidden_layers=2, num_attention_heads=5,
            intermediate_size=50, max_position_embeddings=128, hidden_act="relu",
            type_vocab_size=1),
            lambda: fast(uncased, 128, **BERT_TOKENS), 128, pooling="max",
            dense=[{"out_features": 24, "activation": torch.nn.Tanh()},
                   {"out_features": 20, "bias": False, "activation": torch.nn.Identity()}],
            seed=3, about="head size 6 (5 heads of hidden 30), relu, max pooling, two Dense "
                          "modules (tanh; identity without bias), Normalize"),
        Spec("bert-h36-silu-dense", bert(
            vocab_size=v_un, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
            intermediate_size=70, max_position_embeddings=128, hidden_act="silu"),
            lambda: fast(uncased, 128, **BERT_TOKENS), 128,
            dense=[{"out_features": 28, "activation": torch.nn.SiLU()}],
            seed=12, about="SiLU in the FFN (hidden_act silu) and in a Dense module (torch's "
                           "SiLU), hidden 36, 3 heads of 12, FFN 70, mean pooling, Normalize"),
        Spec("bert-prompts-mean-noprompt", bert(
            vocab_size=v_ca, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=256, hidden_act="gelu_pytorch_tanh"),
            lambda: fast(cased, 256, **BERT_TOKENS), 200, include_prompt=False,
            prompts=prompts, do_lower_case=True, legacy_files=True, seed=4,
            variants={
                "bert-prompts-cls-noprompt": {"pooling": "cls", "include_prompt": False},
                "bert-prompts-max-noprompt": {"pooling": "max", "include_prompt": False},
                "bert-prompts-lasttoken": {"pooling": "lasttoken"},
                "bert-prompts-lasttoken-noprompt": {"pooling": "lasttoken",
                                                    "include_prompt": False},
                "bert-prompts-weightedmean": {"pooling": "weightedmean"},
                "bert-prompts-weightedmean-noprompt": {"pooling": "weightedmean",
                                                       "include_prompt": False},
                "bert-prompts-sqrt-len": {"pooling": "mean_sqrt_len_tokens"},
                "bert-prompts-cls-mean-default": {"pooling": ("cls", "mean"),
                                                  "default_prompt_name": "query"},
            },
            about="cased WordPiece with do_lower_case (sentence-transformers adds Lowercase), "
                  "gelu_pytorch_tanh, prompts query/document; the variants share these weights "
                  "and differ in pooling (every mode, include_prompt false, cls+mean "
                  "concatenated) and a default prompt"),
        Spec("distilbert-mean", transformers.DistilBertConfig(
            vocab_size=v_un, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
            max_position_embeddings=512, activation="gelu", dropout=0.0, attention_dropout=0.0),
            lambda: fast(uncased, 512, **BERT_TOKENS), 512, seed=5,
            about="DistilBERT: its own tensor names, no token types"),
        Spec("mpnet-mean", transformers.MPNetConfig(
            vocab_size=v_mp, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=96, max_position_embeddings=514, pad_token_id=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
            lambda: fast(mpnet, 512, **MPNET_TOKENS), 512, legacy_files=True, seed=6,
            about="MPNet: relative position buckets (32, distance 128) over 512 tokens, "
                  "positions offset by padding_idx + 1 = 2; mean + Normalize, as "
                  "all-mpnet-base-v2"),
        Spec("roberta-mean", transformers.RobertaConfig(
            vocab_size=rob_tok.get_vocab_size(), hidden_size=24, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=48, max_position_embeddings=130,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
            from_dir("roberta-bpe"), 128, seed=7,
            about="RoBERTa with the byte-level BPE fixture: positions offset by 2, 128 usable"),
        Spec("xlm-roberta-mean-prompts", transformers.XLMRobertaConfig(
            vocab_size=xlmr_tok.get_vocab_size(), hidden_size=24, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=48, max_position_embeddings=514,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
            from_dir("xlmr-unigram"), 512, prompts={"query": "query: ", "passage": "passage: "},
            seed=8, about="XLM-RoBERTa with the SentencePiece Unigram fixture, 512 positions, "
                          "e5-style query/passage prompts"),
        Spec("camembert-cls", transformers.CamembertConfig(
            vocab_size=xlmr_tok.get_vocab_size(), hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=32, max_position_embeddings=66,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
            from_dir("xlmr-unigram"), 64, pooling="cls", seed=9,
            about="CamemBERT (RoBERTa-like): CLS pooling, 64 positions"),
        Spec("modernbert-mean", transformers.ModernBertConfig(
            vocab_size=4096, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
            intermediate_size=48, max_position_embeddings=8192, local_attention=8,
            global_attn_every_n_layers=3, pad_token_id=mb_ids["[PAD]"],
            cls_token_id=mb_ids["[CLS]"], sep_token_id=mb_ids["[SEP]"],
            bos_token_id=mb_ids["[CLS]"], eos_token_id=mb_ids["[SEP]"], **no_drop),
            from_dir("modernbert-bpe"), 8192, seed=10,
            about="ModernBERT: rotary (global 160000, local 10000), GeGLU, pre-norm, no "
                  "biases, layer 0 global and layers 1-2 sliding-window (8), final norm, 8192 "
                  "positions, vocabulary padded to 4096 past the tokenizer's 4035"),
        Spec("modernbert-bias-cls", transformers.ModernBertConfig(
            vocab_size=4096, hidden_size=24, num_hidden_layers=3, num_attention_heads=2,
            intermediate_size=40, max_position_embeddings=1024, local_attention=16,
            global_attn_every_n_layers=2, norm_bias=True, attention_bias=True, mlp_bias=True,
            hidden_activation="gelu_pytorch_tanh", global_rope_theta=50000.0,
            local_rope_theta=500.0, pad_token_id=mb_ids["[PAD]"],
            cls_token_id=mb_ids["[CLS]"], sep_token_id=mb_ids["[SEP]"],
            bos_token_id=mb_ids["[CLS]"], eos_token_id=mb_ids["[SEP]"], **no_drop),
            from_dir("modernbert-bpe"), 1024, pooling="cls", normalize=False, seed=11,
            about="ModernBERT with biases everywhere, tanh GELU in the GLU, layers 0 and 2 "
                  "global, window 16, other thetas; CLS pooling without Normalize"),
    ]


def build(spec: Spec, out: Path) -> None:
    torch.manual_seed(spec.seed)
    model = transformers.AutoModel.from_config(spec.config)
    randomize(model, SEED + spec.seed)
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tok = spec.tokenizer()
        tok.model_max_length = spec.max_seq_length
        tok.save_pretrained(tmp)
        transformer = Transformer(tmp, max_seq_length=spec.max_seq_length,
                                  do_lower_case=spec.do_lower_case)
        hidden = transformer.get_embedding_dimension()
        modules: list[torch.nn.Module] = [transformer, Pooling(
            hidden, pooling_mode=spec.pooling, include_prompt=spec.include_prompt)]
        width = modules[1].get_embedding_dimension()
        gen = torch.Generator().manual_seed(SEED + 100 + spec.seed)
        for d in spec.dense:
            dense = Dense(width, d["out_features"], bias=d.get("bias", True),
                          activation_function=d["activation"])
            with torch.no_grad():
                dense.linear.weight.copy_(torch.randn(dense.linear.weight.shape, generator=gen)
                                          / math.sqrt(width))
                if dense.linear.bias is not None:
                    dense.linear.bias.copy_(torch.randn(d["out_features"], generator=gen) * 0.1)
            modules.append(dense)
            width = d["out_features"]
        if spec.normalize:
            modules.append(Normalize())
        st = SentenceTransformer(modules=modules, prompts=spec.prompts or None,
                                 default_prompt_name=spec.default_prompt_name, device="cpu")
        if out.exists():
            shutil.rmtree(out)
        st.save(str(out))
    (out / "README.md").unlink(missing_ok=True)  # a generated model card: noise here
    if spec.prompts:
        # sentence-transformers adds empty "query" / "document" prompts of its own; keep the
        # model's as written (so "passage" is the document prompt where there is no "document")
        path = out / "config_sentence_transformers.json"
        st_cfg = json.loads(path.read_text())
        st_cfg["prompts"] = spec.prompts
        path.write_text(json.dumps(st_cfg, indent=2) + "\n")
    fixture_dir = getattr(tok, "fixture_dir", None)
    if fixture_dir is not None:
        # transformers re-serializes tokenizer.json with equivalent spellings (null → ""); the
        # committed fixture is the same tokenizer, and identical files are stored once by git
        check = Tokenizer.from_file(str(out / "tokenizer.json"))
        original = Tokenizer.from_file(str(fixture_dir / "tokenizer.json"))
        probe = json.loads(CORPUS.read_text(encoding="utf-8"))
        assert [e.ids for e in check.encode_batch(probe)] == [
            e.ids for e in original.encode_batch(probe)], spec.name
        shutil.copyfile(fixture_dir / "tokenizer.json", out / "tokenizer.json")
    if spec.legacy_files:
        sb = {"max_seq_length": spec.max_seq_length, "do_lower_case": spec.do_lower_case}
        (out / "sentence_bert_config.json").write_text(json.dumps(sb, indent=2) + "\n")
        modes = (spec.pooling,) if isinstance(spec.pooling, str) else spec.pooling
        legacy = {"word_embedding_dimension": hidden}
        for key, mode in [("pooling_mode_cls_token", "cls"), ("pooling_mode_mean_tokens", "mean"),
                          ("pooling_mode_max_tokens", "max"),
                          ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len_tokens"),
                          ("pooling_mode_weightedmean_tokens", "weightedmean"),
                          ("pooling_mode_lasttoken", "lasttoken")]:
            legacy[key] = mode in modes
        legacy["include_prompt"] = spec.include_prompt
        (out / "1_Pooling" / "config.json").write_text(json.dumps(legacy, indent=2) + "\n")
    about = {"about": spec.about, "family": spec.config.model_type, "seed": spec.seed}
    (out / "edgembed_fixture.json").write_text(json.dumps(about, indent=2) + "\n")


def variant(base: Path, out: Path, spec: Spec, change: dict[str, Any]) -> None:
    """A copy of ``base`` (identical weight files: git stores them once) with another pooling
    config or default prompt."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(base, out)
    if "pooling" in change or "include_prompt" in change:
        mode = change.get("pooling", spec.pooling)
        cfg = {"embedding_dimension": spec.config.hidden_size,
               "pooling_mode": list(mode) if isinstance(mode, tuple) else mode,
               "include_prompt": change.get("include_prompt", True)}
        (out / "1_Pooling" / "config.json").write_text(json.dumps(cfg, indent=4))
    if "default_prompt_name" in change:
        path = out / "config_sentence_transformers.json"
        st = json.loads(path.read_text())
        st["default_prompt_name"] = change["default_prompt_name"]
        path.write_text(json.dumps(st, indent=2) + "\n")
    about = json.loads((base / "edgembed_fixture.json").read_text())
    about["about"] = f"{base.name}'s weights with {json.dumps(change)}"
    (out / "edgembed_fixture.json").write_text(json.dumps(about, indent=2) + "\n")


def main() -> int:
    only = set(sys.argv[1:])  # model names to (re)write; none: all of them
    texts = [str(t) for t in json.loads(CORPUS.read_text(encoding="utf-8"))] + english_strings()
    OUT.mkdir(parents=True, exist_ok=True)
    for spec in specs(texts):
        if only and spec.name not in only:
            continue
        out = OUT / spec.name
        build(spec, out)
        print(f"{spec.name}: {sum(f.stat().st_size for f in out.rglob('*') if f.is_file())} bytes")
        for name, change in spec.variants.items():
            variant(out, OUT / name, spec, change)
            print(f"  {name}: same weights, {change}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
