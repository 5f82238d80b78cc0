"""The one reader of model directories: every family, module and option, and every refusal.

Model directories are written here with numpy weights under the tensor names transformers
5.24 gives each family (listed by saving ``AutoModel.from_config`` checkpoints), so each
branch of the reader runs without torch; the real all-MiniLM-L6-v2 directory and the tiny
models made by transformers (tests/fixtures/models/) check the same reader on real files.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from edgembed.errors import InvalidModelDir, ModelNotFound, UnsupportedArchitecture
from edgembed.model_dir import (
    Activation,
    Family,
    FfnKind,
    HeadKind,
    NormPlacement,
    PoolingMode,
    PositionKind,
    Similarity,
    Task,
    TokenizerKind,
    load_weights,
    read_model_dir,
    read_safetensors,
    relative_position_bucket,
)

V, C, F, H, L = 40, 8, 16, 2, 2

BASE_CONFIG: dict[str, dict[str, Any]] = {
    "bert": {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": V,
             "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
             "intermediate_size": F, "max_position_embeddings": 32, "type_vocab_size": 2,
             "pad_token_id": 0, "hidden_act": "gelu", "layer_norm_eps": 1e-12},
    "distilbert": {"model_type": "distilbert", "architectures": ["DistilBertModel"],
                   "vocab_size": V, "dim": C, "n_layers": L, "n_heads": H, "hidden_dim": F,
                   "max_position_embeddings": 32, "activation": "gelu", "pad_token_id": 0},
    "mpnet": {"model_type": "mpnet", "architectures": ["MPNetModel"], "vocab_size": V,
              "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
              "intermediate_size": F, "max_position_embeddings": 34, "pad_token_id": 1,
              "relative_attention_num_buckets": 32, "hidden_act": "gelu",
              "layer_norm_eps": 1e-5},
    "roberta": {"model_type": "roberta", "architectures": ["RobertaModel"], "vocab_size": V,
                "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
                "intermediate_size": F, "max_position_embeddings": 34, "type_vocab_size": 1,
                "pad_token_id": 1, "hidden_act": "gelu", "layer_norm_eps": 1e-5},
    "modernbert": {"model_type": "modernbert", "architectures": ["ModernBertModel"],
                   "vocab_size": V, "hidden_size": C, "num_hidden_layers": 3,
                   "num_attention_heads": H, "intermediate_size": F,
                   "max_position_embeddings": 64, "pad_token_id": 3,
                   "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
                   "local_attention": 16, "norm_eps": 1e-5, "norm_bias": False,
                   "attention_bias": False, "mlp_bias": False, "hidden_activation": "gelu",
                   "rope_parameters": {
                       "full_attention": {"rope_theta": 160000.0, "rope_type": "default"},
                       "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}},
}
BASE_CONFIG["xlm-roberta"] = {**BASE_CONFIG["roberta"], "model_type": "xlm-roberta",
                              "architectures": ["XLMRobertaModel"]}
BASE_CONFIG["camembert"] = {**BASE_CONFIG["roberta"], "model_type": "camembert",
                            "architectures": ["CamembertModel"]}


def checkpoint(cfg: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights under transformers' own tensor names for ``cfg``."""
    mt = cfg["model_type"]

    def t(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    w: dict[str, np.ndarray] = {}
    if mt == "modernbert":
        c, f = cfg["hidden_size"], cfg["intermediate_size"]
        w["embeddings.tok_embeddings.weight"] = t(cfg["vocab_size"], c)
        w["embeddings.norm.weight"] = t(c)
        w["final_norm.weight"] = t(c)
        for i in range(cfg["num_hidden_layers"]):
            p = f"layers.{i}."
            if i:
                w[p + "attn_norm.weight"] = t(c)
            w[p + "attn.Wqkv.weight"] = t(3 * c, c)
            w[p + "attn.Wo.weight"] = t(c, c)
            w[p + "mlp_norm.weight"] = t(c)
            w[p + "mlp.Wi.weight"] = t(2 * f, c)
            w[p + "mlp.Wo.weight"] = t(c, f)
        return w
    if mt == "distilbert":
        c, f = cfg["dim"], cfg["hidden_dim"]
        w["embeddings.word_embeddings.weight"] = t(cfg["vocab_size"], c)
        w["embeddings.position_embeddings.weight"] = t(cfg["max_position_embeddings"], c)
        w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"] = t(c), t(c)
        for i in range(cfg["n_layers"]):
            p = f"transformer.layer.{i}."
            for n in ("attention.q_lin", "attention.k_lin", "attention.v_lin",
                      "attention.out_lin"):
                w[p + n + ".weight"], w[p + n + ".bias"] = t(c, c), t(c)
            w[p + "ffn.lin1.weight"], w[p + "ffn.lin1.bias"] = t(f, c), t(f)
            w[p + "ffn.lin2.weight"], w[p + "ffn.lin2.bias"] = t(c, f), t(c)
            for n in ("sa_layer_norm", "output_layer_norm"):
                w[p + n + ".weight"], w[p + n + ".bias"] = t(c), t(c)
        return w
    c, f = cfg["hidden_size"], cfg["intermediate_size"]
    w["embeddings.word_embeddings.weight"] = t(cfg["vocab_size"], c)
    w["embeddings.position_embeddings.weight"] = t(cfg["max_position_embeddings"], c)
    if mt != "mpnet":
        w["embeddings.token_type_embeddings.weight"] = t(cfg["type_vocab_size"], c)
    w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"] = t(c), t(c)
    w["pooler.dense.weight"], w["pooler.dense.bias"] = t(c, c), t(c)
    if mt == "mpnet":
        w["encoder.relative_attention_bias.weight"] = t(32, cfg["num_attention_heads"])
        attn = {"q": "attention.attn.q", "k": "attention.attn.k", "v": "attention.attn.v",
                "o": "attention.attn.o", "norm": "attention.LayerNorm"}
    else:
        attn = {"q": "attention.self.query", "k": "attention.self.key",
                "v": "attention.self.value", "o": "attention.output.dense",
                "norm": "attention.output.LayerNorm"}
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        for key in "qkvo":
            w[p + attn[key] + ".weight"], w[p + attn[key] + ".bias"] = t(c, c), t(c)
        w[p + attn["norm"] + ".weight"], w[p + attn["norm"] + ".bias"] = t(c), t(c)
        w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"] = t(f, c), t(f)
        w[p + "output.dense.weight"], w[p + "output.dense.bias"] = t(c, f), t(c)
        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"] = t(c), t(c)
    return w


def tokenizer_json(kind: str = "WordPiece", vocab_size: int = V) -> dict[str, Any]:
    vocab: Any = {f"w{i}": i for i in range(vocab_size)}
    if kind == "Unigram":
        vocab = [[f"w{i}", -1.0] for i in range(vocab_size)]
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None, "model": {"type": kind, "vocab": vocab}}


def make_model(
    root: Path,
    family: str = "bert",
    *,
    config: dict[str, Any] | None = None,
    weights: Callable[[dict[str, np.ndarray]], None] | None = None,
    modules: list[str] | None = ("Transformer", "Pooling", "Normalize"),  # type: ignore[assignment]
    pooling: dict[str, Any] | None = None,
    dense: list[dict[str, Any]] | None = None,
    sentence_bert: dict[str, Any] | bool | None = None,  # False: no sentence_bert_config.json
    st_config: dict[str, Any] | None = None,
    tokenizer: dict[str, Any] | None = None,
    seed: int = 0,
) -> Path:
    """A model directory in sentence-transformers' layout; each argument overrides one file."""
    root.mkdir(parents=True, exist_ok=True)
    cfg = {**BASE_CONFIG[family], **(config or {})}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    (root / "config.json").write_text(json.dumps(cfg))
    w = checkpoint({**BASE_CONFIG[family], **(config or {})}, np.random.default_rng(seed))
    if weights:
        weights(w)
    save_file(w, str(root / "model.safetensors"))
    (root / "tokenizer.json").write_text(json.dumps(tokenizer or tokenizer_json()))
    if modules is not None:
        entries, n_dense = [], 0
        for i, kind in enumerate(modules):
            path = {"Transformer": "", "Pooling": "1_Pooling"}.get(kind, f"{i}_{kind}")
            entries.append({"idx": i, "name": str(i), "path": path,
                            "type": f"sentence_transformers.models.{kind}"})
            if kind == "Dense":
                spec = (dense or [{}])[n_dense]
                n_dense += 1
                d = root / path
                d.mkdir(exist_ok=True)
                conf = {"in_features": C, "out_features": 6, "bias": True,
                        "activation_function": "torch.nn.modules.activation.Tanh",
                        **{k: v for k, v in spec.items() if not k.startswith("_")}}
                (d / "config.json").write_text(json.dumps(conf))
                rng = np.random.default_rng(seed + 7 + i)
                tensors = {"linear.weight": rng.standard_normal(
                    (conf["out_features"], conf["in_features"])).astype(np.float32)}
                if conf["bias"]:
                    tensors["linear.bias"] = np.zeros(conf["out_features"], np.float32)
                tensors.update(spec.get("_extra", {}))
                for drop in spec.get("_drop", ()):
                    tensors.pop(drop)
                if not spec.get("_torch_only"):
                    save_file(tensors, str(d / "model.safetensors"))
                else:
                    (d / "pytorch_model.bin").write_bytes(b"\x80\x02")
        (root / "modules.json").write_text(json.dumps(entries))
        (root / "1_Pooling").mkdir(exist_ok=True)
        pool = pooling if pooling is not None else {
            "word_embedding_dimension": C, "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False}
        (root / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    if sentence_bert is not False:
        sb = sentence_bert if sentence_bert is not None else {"max_seq_length": 16,
                                                              "do_lower_case": False}
        (root / "sentence_bert_config.json").write_text(json.dumps(sb))
    if st_config is not None:
        (root / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    return root


# --- the real model and the families -----------------------------------------------------------


def test_all_minilm_l6_v2(hf_model_dir: Path) -> None:
    d = read_model_dir(hf_model_dir, "All-MiniLM-L6-v2")
    e = d.encoder
    assert d.name == "all-minilm-l6-v2" and d.task is Task.EMBEDDING
    assert (e.family, e.vocab_size, e.hidden_size, e.num_layers, e.num_heads,
            e.intermediate_size, e.max_positions) == (Family.BERT, 30522, 384, 6, 12, 1536, 512)
    assert (e.position_kind, e.position_offset, e.type_vocab_size) == (
        PositionKind.ABSOLUTE, 0, 2)
    assert (e.norm_placement, e.ffn_kind, e.activation, e.layer_norm_eps) == (
        NormPlacement.POST, FfnKind.MLP, Activation.GELU, 1e-12)
    assert e.linear_bias and e.norm_bias and not e.final_norm and e.head_dim == 32
    assert d.pooling is not None and d.pooling.modes == (PoolingMode.MEAN,)
    assert d.pooling.include_prompt and d.normalize and d.dense == ()
    assert (d.output_dim, d.max_seq_length, d.do_lower_case) == (384, 256, False)
    assert d.tokenizer.kind is TokenizerKind.WORDPIECE and d.tokenizer.max_token_id == 30521
    assert d.prompts == {} and d.default_prompt == "" and d.similarity_fn_name is Similarity.COSINE
    assert d.head.kind is HeadKind.NONE
    assert set(d.files) >= {"config.json", "model.safetensors", "tokenizer.json",
                            "modules.json", "1_Pooling/config.json",
                            "sentence_bert_config.json"}
    w = load_weights(d)
    raw = read_safetensors(hf_model_dir / "model.safetensors")
    np.testing.assert_array_equal(w["embeddings.word"], raw["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(w["layers.5.ffn.down.weight"],
                                  raw["encoder.layer.5.output.dense.weight"])
    np.testing.assert_array_equal(w["layers.0.attention.norm.bias"],
                                  raw["encoder.layer.0.attention.output.LayerNorm.bias"])
    assert "pooler.dense.weight" in w and all(a.dtype == np.float32 for a in w.values())
    assert d.summary()["family"] == "bert" and d.summary()["pooling"] == ["mean"]


@pytest.mark.parametrize("family", ["bert", "distilbert", "mpnet", "roberta", "xlm-roberta",
                                    "camembert", "modernbert"])
def test_every_family_reads_and_maps_to_canonical_names(tmp_path: Path, family: str) -> None:
    d = read_model_dir(make_model(tmp_path / family, family))
    e = d.encoder
    assert e.family.value == family and e.hidden_size == C and e.num_heads == H
    w = load_weights(d)
    raw = read_safetensors(tmp_path / family / "model.safetensors")
    expected_layers = BASE_CONFIG[family].get("num_hidden_layers", BASE_CONFIG[family].get(
        "n_layers"))
    assert e.num_layers == expected_layers
    for layer in range(e.num_layers):
        for part in ("attention.q", "attention.k", "attention.v", "attention.o", "ffn.up",
                     "ffn.down"):
            assert f"layers.{layer}.{part}.weight" in w
    if family == "modernbert":
        fused = raw["layers.1.attn.Wqkv.weight"]
        np.testing.assert_array_equal(w["layers.1.attention.q.weight"], fused[:C])
        np.testing.assert_array_equal(w["layers.1.attention.k.weight"], fused[C:2 * C])
        np.testing.assert_array_equal(w["layers.1.attention.v.weight"], fused[2 * C:])
        assert "layers.0.attention.norm.weight" not in w and "final_norm.weight" in w
        assert not any(k.endswith(".bias") for k in w)
        assert w["layers.0.ffn.up.weight"].shape == (2 * F, C)
    elif family == "distilbert":
        np.testing.assert_array_equal(w["layers.1.attention.norm.weight"],
                                      raw["transformer.layer.1.sa_layer_norm.weight"])
    elif family == "mpnet":
        np.testing.assert_array_equal(w["encoder.relative_bias"],
                                      raw["encoder.relative_attention_bias.weight"])
        np.testing.assert_array_equal(w["layers.0.attention.o.bias"],
                                      raw["encoder.layer.0.attention.attn.o.bias"])
    else:
        np.testing.assert_array_equal(w["embeddings.token_type"],
                                      raw["embeddings.token_type_embeddings.weight"])


def test_family_features(tmp_path: Path) -> None:
    bert = read_model_dir(make_model(tmp_path / "b", "bert")).encoder
    assert (bert.position_offset, bert.max_positions, bert.position_table_rows) == (0, 32, 32)
    distil = read_model_dir(make_model(tmp_path / "d", "distilbert")).encoder
    assert (distil.type_vocab_size, distil.layer_norm_eps, distil.max_positions) == (0, 1e-12, 32)
    mpnet = read_model_dir(make_model(tmp_path / "m", "mpnet")).encoder
    assert (mpnet.position_offset, mpnet.max_positions, mpnet.position_table_rows) == (2, 32, 34)
    assert (mpnet.relative_buckets, mpnet.relative_max_distance, mpnet.type_vocab_size) == (
        32, 128, 0)
    rob = read_model_dir(make_model(tmp_path / "r", "roberta")).encoder
    assert (rob.position_offset, rob.max_positions, rob.type_vocab_size, rob.pad_token_id) == (
        2, 32, 1, 1)
    assert rob.relative_buckets == 0
    mb = read_model_dir(make_model(tmp_path / "mb", "modernbert")).encoder
    assert (mb.position_kind, mb.rope_theta, mb.rope_theta_local) == (
        PositionKind.ROTARY, 160000.0, 10000.0)
    assert (mb.local_window, mb.global_every, mb.max_positions, mb.position_table_rows) == (
        16, 3, 64, 0)
    assert [mb.layer_is_global(i) for i in range(3)] == [True, False, False]
    assert (mb.norm_placement, mb.ffn_kind, mb.final_norm, mb.norm_bias, mb.linear_bias) == (
        NormPlacement.PRE, FfnKind.GLU, True, False, False)


def test_modernbert_older_config_keys(tmp_path: Path) -> None:
    """Configs saved by transformers 4 state the pattern as global_attn_every_n_layers and
    the thetas as global_rope_theta / local_rope_theta."""
    old = {"layer_types": None, "rope_parameters": None, "global_attn_every_n_layers": 2,
           "global_rope_theta": 80000.0, "local_rope_theta": 5000.0, "num_hidden_layers": 3}
    e = read_model_dir(make_model(tmp_path / "a", "modernbert", config=old)).encoder
    assert (e.global_every, e.rope_theta, e.rope_theta_local, e.local_window) == (
        2, 80000.0, 5000.0, 16)
    assert [e.layer_is_global(i) for i in range(3)] == [True, False, True]
    every = {**old, "global_attn_every_n_layers": 1}
    e = read_model_dir(make_model(tmp_path / "b", "modernbert", config=every)).encoder
    assert (e.global_every, e.local_window) == (0, 0)
    full = {"layer_types": ["full_attention"] * 3}
    e = read_model_dir(make_model(tmp_path / "c", "modernbert", config=full)).encoder
    assert (e.global_every, e.local_window) == (0, 0)
    biased = {"attention_bias": True, "norm_bias": True}

    def add_biases(w: dict[str, np.ndarray]) -> None:
        for name in list(w):
            if name.endswith(("Wqkv.weight", "Wo.weight")) and "attn" in name:
                w[name[:-6] + "bias"] = np.zeros(w[name].shape[0], np.float32)
            if name.endswith("norm.weight"):
                w[name[:-6] + "bias"] = np.zeros(w[name].shape[0], np.float32)

    d = read_model_dir(make_model(tmp_path / "e", "modernbert", config=biased,
                                  weights=add_biases))
    assert d.encoder.attention_bias and not d.encoder.ffn_bias and not d.encoder.linear_bias
    w = load_weights(d)
    assert w["layers.2.attention.v.bias"].shape == (C,) and "layers.2.ffn.up.bias" not in w
    assert "final_norm.bias" in w and "embeddings.norm.bias" in w


@pytest.mark.parametrize(("name", "expect"), [
    ("gelu", Activation.GELU), ("gelu_python", Activation.GELU),
    ("gelu_new", Activation.GELU_TANH), ("gelu_pytorch_tanh", Activation.GELU_TANH),
    ("relu", Activation.RELU), ("silu", Activation.SILU),
])
def test_hidden_activations(tmp_path: Path, name: str, expect: Activation) -> None:
    d = read_model_dir(make_model(tmp_path, "bert", config={"hidden_act": name}))
    assert d.encoder.activation is expect


# --- modules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("pooling", "modes"), [
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, ("cls",)),
    ({"pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": True}, ("max", "mean")),
    ({"pooling_mode_lasttoken": True, "pooling_mode_weightedmean_tokens": True,
      "pooling_mode_mean_sqrt_len_tokens": True},
     ("mean_sqrt_len_tokens", "weightedmean", "lasttoken")),
    ({"pooling_mode_mean_tokens": False}, ("mean",)),  # sentence-transformers' own default
    ({"embedding_dimension": C, "pooling_mode": "weightedmean"}, ("weightedmean",)),
    ({"pooling_mode": ["lasttoken", "cls"], "include_prompt": False}, ("lasttoken", "cls")),
])
def test_pooling_configs(tmp_path: Path, pooling: dict[str, Any], modes: tuple[str, ...]) -> None:
    d = read_model_dir(make_model(tmp_path, pooling=pooling))
    assert d.pooling is not None
    assert tuple(m.value for m in d.pooling.modes) == modes
    assert d.pooling.include_prompt is pooling.get("include_prompt", True)
    assert d.output_dim == C * len(modes)
    if len(modes) == 1:
        assert d.pooling.mode.value == modes[0]
    else:
        with pytest.raises(UnsupportedArchitecture, match="concatenates"):
            _ = d.pooling.mode


def test_pooling_refusals(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedArchitecture, match=r"'median'.*supported: cls, mean, max"):
        read_model_dir(make_model(tmp_path / "a", pooling={"pooling_mode": "median"}))
    with pytest.raises(UnsupportedArchitecture, match="'pooling_mode_median' is not a Pooling"):
        read_model_dir(make_model(tmp_path / "b", pooling={"pooling_mode_median": True}))
    with pytest.raises(InvalidModelDir, match=r"1_Pooling/config.json: field "
                                              r"'word_embedding_dimension' is 9"):
        read_model_dir(make_model(tmp_path / "c", pooling={"word_embedding_dimension": 9}))
    with pytest.raises(InvalidModelDir, match="'include_prompt' should be true or false"):
        read_model_dir(make_model(tmp_path / "d", pooling={"include_prompt": "no"}))
    with pytest.raises(InvalidModelDir, match="'pooling_mode' should be a mode or a list"):
        read_model_dir(make_model(tmp_path / "e", pooling={"pooling_mode": []}))


def test_no_modules_json_is_mean_pooling_without_normalize(tmp_path: Path) -> None:
    d = read_model_dir(make_model(tmp_path, modules=None))
    assert d.pooling is not None and d.pooling.modes == (PoolingMode.MEAN,)
    assert not d.normalize and d.task is Task.EMBEDDING


def test_normalize_only_with_its_module(tmp_path: Path) -> None:
    assert read_model_dir(make_model(tmp_path / "a")).normalize
    assert not read_model_dir(make_model(tmp_path / "b", modules=["Transformer", "Pooling"])
                              ).normalize


def test_dense_modules(tmp_path: Path) -> None:
    d = read_model_dir(make_model(
        tmp_path, modules=["Transformer", "Pooling", "Dense", "Dense", "Normalize"],
        dense=[{"out_features": 6},
               {"in_features": 6, "out_features": 4, "bias": False,
                "activation_function": "torch.nn.modules.linear.Identity"}]))
    assert [(x.in_features, x.out_features, x.bias, x.activation) for x in d.dense] == [
        (C, 6, True, Activation.TANH), (6, 4, False, Activation.IDENTITY)]
    assert d.output_dim == 4 and d.normalize
    assert "2_Dense/model.safetensors" in d.files and "3_Dense/config.json" in d.files
    w = load_weights(d)
    assert w["dense.0.weight"].shape == (6, C) and w["dense.0.bias"].shape == (6,)
    assert w["dense.1.weight"].shape == (4, 6) and "dense.1.bias" not in w


def test_dense_with_residual(tmp_path: Path) -> None:
    proj = np.ones((6, C), np.float32)
    d = read_model_dir(make_model(tmp_path, modules=["Transformer", "Pooling", "Dense"],
                                  dense=[{"use_residual": True,
                                          "_extra": {"residual.weight": proj}}]))
    assert d.dense[0].residual
    np.testing.assert_array_equal(load_weights(d)["dense.0.residual"], proj)


def test_dense_refusals(tmp_path: Path) -> None:
    mods = ["Transformer", "Pooling", "Dense"]
    with pytest.raises(UnsupportedArchitecture, match=r"pytorch_model.bin, a torch pickle"):
        read_model_dir(make_model(tmp_path / "a", modules=mods, dense=[{"_torch_only": True}]))
    with pytest.raises(InvalidModelDir, match="'in_features' is 5, but the vector reaching"):
        read_model_dir(make_model(tmp_path / "b", modules=mods, dense=[{"in_features": 5}]))
    with pytest.raises(UnsupportedArchitecture, match=r"'activation_function' is 'my.Act'"):
        read_model_dir(make_model(tmp_path / "c", modules=mods,
                                  dense=[{"activation_function": "my.Act"}]))
    with pytest.raises(UnsupportedArchitecture, match="'module_input_name' is 'token_emb"):
        read_model_dir(make_model(tmp_path / "d", modules=mods,
                                  dense=[{"module_input_name": "token_embeddings"}]))
    d = read_model_dir(make_model(tmp_path / "e", modules=mods,
                                  dense=[{"_drop": ["linear.bias"]}]))
    with pytest.raises(InvalidModelDir, match=r"has no tensor 'linear\.bias'"):
        load_weights(d)
    d = read_model_dir(make_model(tmp_path / "f", modules=mods, dense=[
        {"_extra": {"linear.weight": np.ones((6, 3), np.float32)}}]))
    with pytest.raises(InvalidModelDir, match=r"'linear.weight' has shape \(6, 3\)"):
        load_weights(d)
    d = read_model_dir(make_model(tmp_path / "g", modules=mods, dense=[
        {"_extra": {"extra.weight": np.ones(2, np.float32)}}]))
    with pytest.raises(InvalidModelDir, match=r"unexpected tensors \['extra.weight'\]"):
        load_weights(d)


@pytest.mark.parametrize("modules", [
    ["Transformer", "Pooling", "LayerNorm"],
    ["Transformer", "Normalize", "Pooling"],
    ["Transformer", "Pooling", "Normalize", "Dense"],
    ["Pooling", "Transformer"],
])
def test_module_lists_refused(tmp_path: Path, modules: list[str]) -> None:
    with pytest.raises(UnsupportedArchitecture, match="supported: Transformer, Pooling, any Dense"):
        read_model_dir(make_model(tmp_path, modules=modules))


# --- sentence_bert_config.json, prompts, tokenizer ---------------------------------------------


def test_max_seq_length_sources(tmp_path: Path) -> None:
    assert read_model_dir(make_model(tmp_path / "a")).max_seq_length == 16
    # more than the model has positions: capped at the usable positions
    capped = make_model(tmp_path / "b", "roberta", sentence_bert={"max_seq_length": 4096})
    assert read_model_dir(capped).max_seq_length == 32
    # sentence-transformers >= 5 keeps it in tokenizer_config.json
    st5 = make_model(tmp_path / "c", sentence_bert={"transformer_task": "feature-extraction",
                                                    "module_output_name": "token_embeddings"})
    (st5 / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 20}))
    d = read_model_dir(st5)
    assert d.max_seq_length == 20 and "tokenizer_config.json" in d.files
    # "no limit" (1e30) in tokenizer_config.json: the positions
    (st5 / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1e30}))
    assert read_model_dir(st5).max_seq_length == 32
    assert read_model_dir(make_model(tmp_path / "e", sentence_bert=False)).max_seq_length == 32
    lower = make_model(tmp_path / "f", sentence_bert={"max_seq_length": 8, "do_lower_case": True})
    assert read_model_dir(lower).do_lower_case
    with pytest.raises(UnsupportedArchitecture,
                       match="Transformer \\(fill-mask\\) or MLMTransformer, then SpladePooling"):
        read_model_dir(make_model(tmp_path / "g", sentence_bert={"transformer_task": "fill-mask"}))
    with pytest.raises(InvalidModelDir, match="'max_seq_length' should be an integer"):
        read_model_dir(make_model(tmp_path / "h", sentence_bert={"max_seq_length": "long"}))


def test_prompts(tmp_path: Path) -> None:
    cfg = {"prompts": {"query": "query: ", "passage": "passage: ", "corpus": "c: "},
           "default_prompt_name": "query", "similarity_fn_name": "dot"}
    d = read_model_dir(make_model(tmp_path / "a", st_config=cfg))
    assert dict(d.prompts) == cfg["prompts"] and d.default_prompt == "query: "
    assert d.query_prompt_name == "query" and d.document_prompt_name == "passage"
    assert d.similarity_fn_name is Similarity.DOT and d.prompt("corpus") == "c: "
    with pytest.raises(UnsupportedArchitecture, match=r"no prompt named 'doc' \(its prompts: "
                                                      r"corpus, passage, query\)"):
        d.prompt("doc")
    plain = read_model_dir(make_model(tmp_path / "b", st_config={"prompts": {"document": "d"}}))
    assert plain.query_prompt_name is None and plain.document_prompt_name == "document"
    assert plain.default_prompt == "" and plain.similarity_fn_name is Similarity.COSINE
    with pytest.raises(InvalidModelDir, match="'default_prompt_name' is 'x', which is not one"):
        read_model_dir(make_model(tmp_path / "c", st_config={"default_prompt_name": "x"}))
    with pytest.raises(UnsupportedArchitecture, match="'similarity_fn_name' is 'jaccard'"):
        read_model_dir(make_model(tmp_path / "d", st_config={"similarity_fn_name": "jaccard"}))
    with pytest.raises(InvalidModelDir, match="'prompts' should map names to strings"):
        read_model_dir(make_model(tmp_path / "e", st_config={"prompts": {"q": 1}}))


@pytest.mark.parametrize(("kind", "expect"), [("WordPiece", TokenizerKind.WORDPIECE),
                                              ("Unigram", TokenizerKind.UNIGRAM),
                                              ("BPE", TokenizerKind.BPE)])
def test_tokenizer_kinds(tmp_path: Path, kind: str, expect: TokenizerKind) -> None:
    d = read_model_dir(make_model(tmp_path, tokenizer=tokenizer_json(kind)))
    assert d.tokenizer.kind is expect and d.tokenizer.max_token_id == V - 1


def test_tokenizer_refusals(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedArchitecture, match=r"'model\.type' is 'WordLevel'"):
        read_model_dir(make_model(tmp_path / "a", tokenizer=tokenizer_json("WordLevel")))
    big = tokenizer_json()
    big["added_tokens"] = [{"id": V + 3, "content": "<x>", "special": True}]
    with pytest.raises(InvalidModelDir, match=f"ids up to {V + 3}, but config.json has "
                                              f"vocab_size {V}"):
        read_model_dir(make_model(tmp_path / "b", tokenizer=big))


# --- config.json refusals ----------------------------------------------------------------------


@pytest.mark.parametrize(("family", "change", "error", "match"), [
    ("bert", {"model_type": None}, InvalidModelDir, "'model_type' is missing"),
    ("bert", {"model_type": "gpt2", "architectures": ["GPT2Model"]}, UnsupportedArchitecture,
     r"'gpt2' \(GPT2Model\) is not supported; supported: bert, distilbert, mpnet"),
    ("bert", {"hidden_size": None}, InvalidModelDir, r"config.json: field 'hidden_size' is "
                                                     r"missing"),
    ("bert", {"num_attention_heads": "2"}, InvalidModelDir, "should be an integer, not '2'"),
    ("bert", {"num_attention_heads": 3}, InvalidModelDir, "not a multiple of the 3 attention"),
    ("bert", {"layer_norm_eps": "x"}, InvalidModelDir, "'layer_norm_eps' should be a number"),
    ("bert", {"position_embedding_type": "relative_key"}, UnsupportedArchitecture,
     "'position_embedding_type' is 'relative_key'; supported: 'absolute'"),
    ("bert", {"hidden_act": "quick_gelu"}, UnsupportedArchitecture,
     r"'hidden_act' is 'quick_gelu'; supported: gelu, gelu_python, gelu_new"),
    ("bert", {"architectures": "BertModel"}, InvalidModelDir, "should be a list of strings"),
    ("roberta", {"max_position_embeddings": 3}, InvalidModelDir, "leaves no positions"),
    ("mpnet", {"relative_attention_num_buckets": 64}, UnsupportedArchitecture,
     "'relative_attention_num_buckets' is 64"),
    ("modernbert", {"layer_types": ["sliding_attention", "full_attention", "full_attention"]},
     UnsupportedArchitecture, "not a pattern of one global layer every n layers"),
    ("modernbert", {"layer_types": ["full_attention"]}, InvalidModelDir,
     "for each of the 3 layers"),
    ("modernbert", {"rope_parameters": {"full_attention": {"rope_type": "yarn",
                                                           "rope_theta": 1.0},
                                        "sliding_attention": {"rope_theta": 1.0}}},
     UnsupportedArchitecture, r"rope_type' is 'yarn'; supported: 'default'"),
    ("modernbert", {"rope_parameters": None, "rope_scaling": {"type": "linear"}},
     UnsupportedArchitecture, "'rope_scaling' is set"),
    ("modernbert", {"head_dim": 3}, UnsupportedArchitecture, "'head_dim' 3 differs"),
])
def test_config_refusals(tmp_path: Path, family: str, change: dict[str, Any],
                         error: type[Exception], match: str) -> None:
    root = make_model(tmp_path, family)
    cfg = {**BASE_CONFIG[family], **change}
    (root / "config.json").write_text(json.dumps({k: v for k, v in cfg.items()
                                                  if v is not None}))
    with pytest.raises(error, match=match):
        read_model_dir(root)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="is not a directory"):
        read_model_dir(tmp_path / "nowhere")
    root = make_model(tmp_path / "a")
    (root / "model.safetensors").rename(root / "pytorch_model.bin")
    with pytest.raises(InvalidModelDir, match=r"missing model.safetensors \(the weights are in "
                                              r"pytorch_model.bin"):
        read_model_dir(root)
    root = make_model(tmp_path / "b")
    (root / "config.json").write_text("{not json")
    with pytest.raises(InvalidModelDir, match=r"config.json is not valid JSON"):
        read_model_dir(root)
    root = make_model(tmp_path / "c")
    (root / "modules.json").write_text(json.dumps({"0": "Transformer"}))
    with pytest.raises(InvalidModelDir, match=r"modules\.json should hold a JSON list"):
        read_model_dir(root)
    (root / "modules.json").write_text(json.dumps([{"idx": 0}]))
    with pytest.raises(InvalidModelDir, match="entry 0 should be an object with a 'type'"):
        read_model_dir(root)
    (root / "modules.json").write_text(json.dumps(
        [{"type": "sentence_transformers.models.Transformer", "path": "../x"}]))
    with pytest.raises(InvalidModelDir, match="entry 0 has a bad 'path'"):
        read_model_dir(root)


# --- weights ---------------------------------------------------------------------------------


def test_weights_that_contradict_the_config(tmp_path: Path) -> None:
    def drop(w: dict[str, np.ndarray]) -> None:
        del w["encoder.layer.1.output.dense.weight"]

    d = read_model_dir(make_model(tmp_path / "a", weights=drop))
    with pytest.raises(InvalidModelDir, match=r"no tensor for layers.1.ffn.down.weight "
                                              r"\(shape \(8, 16\)\)"):
        load_weights(d)

    def fewer_rows(w: dict[str, np.ndarray]) -> None:
        w["embeddings.word_embeddings.weight"] = w["embeddings.word_embeddings.weight"][:30]

    d = read_model_dir(make_model(tmp_path / "b", weights=fewer_rows))
    with pytest.raises(InvalidModelDir, match=r"embeddings.word has shape \(30, 8\), but "
                                              r"vocab_size implies \(40, 8\)"):
        load_weights(d)

    def wide(w: dict[str, np.ndarray]) -> None:
        w["encoder.layer.0.intermediate.dense.weight"] = np.zeros((32, C), np.float32)

    d = read_model_dir(make_model(tmp_path / "c", weights=wide))
    with pytest.raises(InvalidModelDir, match=r"layers.0.ffn.up.weight has shape \(32, 8\), "
                                              r"but config.json implies \(16, 8\)"):
        load_weights(d)

    def stranger(w: dict[str, np.ndarray]) -> None:
        w["encoder.layer.0.adapter.weight"] = np.zeros(2, np.float32)

    d = read_model_dir(make_model(tmp_path / "d", weights=stranger))
    with pytest.raises(UnsupportedArchitecture,
                       match=r"'encoder\.layer\.0\.adapter\.weight' is not part of a bert"):
        load_weights(d)

    def bias(w: dict[str, np.ndarray]) -> None:
        w["layers.0.mlp.Wi.bias"] = np.zeros(2 * F, np.float32)

    d = read_model_dir(make_model(tmp_path / "e", "modernbert", weights=bias))
    with pytest.raises(InvalidModelDir, match=r"a bias layers\.0\.ffn\.up\.bias but config\.json "
                                              r"says this layer has none"):
        load_weights(d)

    def ints(w: dict[str, np.ndarray]) -> None:
        w["embeddings.LayerNorm.weight"] = np.ones(C, np.int32)

    d = read_model_dir(make_model(tmp_path / "f", weights=ints))
    with pytest.raises(InvalidModelDir, match="has dtype int32, not float"):
        load_weights(d)

    def gamma_beta(w: dict[str, np.ndarray]) -> None:  # old TensorFlow-era LayerNorm names
        w["bert.embeddings.LayerNorm.gamma"] = w.pop("embeddings.LayerNorm.weight")
        w["bert.embeddings.LayerNorm.beta"] = w.pop("embeddings.LayerNorm.bias")
        w["embeddings.position_ids"] = np.arange(32, dtype=np.int64)[None]

    d = read_model_dir(make_model(tmp_path / "g", weights=gamma_beta))
    assert load_weights(d)["embeddings.norm.bias"].shape == (C,)


def test_safetensors_reader(tmp_path: Path) -> None:
    """F16 and BF16 tensors come back as exact float32; damaged files name themselves."""
    values = np.array([1.0, -2.5, 3.140625, 65280.0], np.float32)  # exact in F16 and BF16
    path = tmp_path / "x.safetensors"
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)
    header = {"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]},
              "b": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [8, 16]},
              "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + values.astype(np.float16).tobytes()
                     + bf16.tobytes())
    t = read_safetensors(path)
    np.testing.assert_array_equal(t["a"].astype(np.float32), values)
    np.testing.assert_array_equal(t["b"], values.reshape(2, 2))
    assert t["b"].dtype == np.float32
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(InvalidModelDir, match=r"x.safetensors is not a readable safetensors "
                                              r"file \(tensor 'b' lies outside"):
        read_safetensors(path)
    path.write_bytes(b"\x01\x00")
    with pytest.raises(InvalidModelDir, match="truncated: no header"):
        read_safetensors(path)
    path.write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(InvalidModelDir, match="exceeds the file"):
        read_safetensors(path)
    path.write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(InvalidModelDir, match="header"):
        read_safetensors(path)
    with pytest.raises(InvalidModelDir, match="is missing"):
        read_safetensors(tmp_path / "none.safetensors")


def test_truncated_checkpoint_names_the_remedy(tmp_path: Path) -> None:
    root = make_model(tmp_path / "m")
    data = (root / "model.safetensors").read_bytes()
    (root / "model.safetensors").write_bytes(data[: len(data) // 2])
    d = read_model_dir(root)
    with pytest.raises(InvalidModelDir, match=r"run `embed pull --force m`"):
        load_weights(d)


# --- heads: rerank and sparse are described (exported later) -----------------------------------


def test_sequence_classification_head(tmp_path: Path) -> None:
    def head(w: dict[str, np.ndarray]) -> None:
        for k in list(w):
            w["roberta." + k] = w.pop(k)
        w["classifier.dense.weight"] = np.zeros((C, C), np.float32)
        w["classifier.dense.bias"] = np.zeros(C, np.float32)
        w["classifier.out_proj.weight"] = np.zeros((1, C), np.float32)
        w["classifier.out_proj.bias"] = np.zeros(1, np.float32)

    root = make_model(tmp_path, "roberta", modules=None, weights=head, config={
        "architectures": ["XLMRobertaForSequenceClassification"], "id2label": {"0": "LABEL_0"},
        "num_labels": 1})
    d = read_model_dir(root)
    assert d.task is Task.RERANK and d.pooling is None
    assert (d.head.kind, d.head.num_labels, d.head.labels, d.head.pooling) == (
        HeadKind.CLASSIFICATION, 1, ("LABEL_0",), "cls")
    assert d.head.activation is Activation.TANH and d.head.score_activation is Activation.SIGMOID
    w = load_weights(d)
    assert w["classifier.out.weight"].shape == (1, C) and "classifier.dense.bias" in w


def test_splade_head(tmp_path: Path) -> None:
    def mlm(w: dict[str, np.ndarray]) -> None:
        for k in list(w):
            w["bert." + k] = w.pop(k)
        w["cls.predictions.transform.dense.weight"] = np.zeros((C, C), np.float32)
        w["cls.predictions.transform.dense.bias"] = np.zeros(C, np.float32)
        w["cls.predictions.transform.LayerNorm.weight"] = np.zeros(C, np.float32)
        w["cls.predictions.transform.LayerNorm.bias"] = np.zeros(C, np.float32)
        w["cls.predictions.bias"] = np.zeros(V, np.float32)

    root = make_model(tmp_path, modules=None, weights=mlm,
                      config={"architectures": ["BertForMaskedLM"]})
    (root / "2_SpladePooling").mkdir()
    (root / "2_SpladePooling" / "config.json").write_text(json.dumps(
        {"pooling_strategy": "max", "activation_function": "relu", "word_embedding_dimension": V}))
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder."
                                                    "models.MLMTransformer"},
        {"idx": 1, "name": "1", "path": "2_SpladePooling",
         "type": "sentence_transformers.sparse_encoder.models.SpladePooling"}]))
    d = read_model_dir(root)
    assert d.task is Task.SPARSE and d.head.kind is HeadKind.MLM and d.head.pooling == "max"
    w = load_weights(d)
    assert w["mlm.decoder.bias"].shape == (V,)
    assert w["mlm.decoder.weight"] is w["embeddings.word"]  # tied


def test_relative_position_buckets_match_transformers() -> None:
    """(relative position, bucket) pairs printed by transformers 5.24's
    ``MPNetEncoder.relative_position_bucket`` (torch 2.13), including the float32 boundary
    cases at distances 16, 32, 64 and 128; the full table up to the longest position is
    compared with torch's in tests/fixtures/models/ (see its README)."""
    pairs = [(-2000, 15), (-600, 15), (-128, 15), (-127, 15), (-100, 15), (-64, 14), (-63, 13),
             (-33, 12), (-32, 12), (-31, 11), (-17, 10), (-16, 10), (-15, 9), (-9, 8), (-8, 8),
             (-7, 7), (-1, 1), (0, 0), (1, 17), (7, 23), (8, 24), (9, 24), (15, 25), (16, 26),
             (17, 26), (31, 27), (32, 28), (33, 28), (63, 29), (64, 30), (100, 31), (127, 31),
             (128, 31), (129, 31), (600, 31), (2000, 31)]
    rel = np.array([p for p, _ in pairs])
    assert relative_position_bucket(rel).tolist() == [b for _, b in pairs]


def test_source_copy_keeps_every_described_file(tmp_path: Path, fresh_home: Path) -> None:
    """Pulling a local directory copies the Dense modules and prompts the reader names."""
    from edgembed.sources import pull

    root = make_model(tmp_path / "dense-model",
                      modules=["Transformer", "Pooling", "Dense", "Normalize"],
                      st_config={"prompts": {"query": "q: "}})
    pulled = pull(str(root))
    for rel in ("2_Dense/config.json", "2_Dense/model.safetensors",
                "config_sentence_transformers.json"):
        assert (pulled.source_dir / rel).is_file(), rel
    assert pulled.spec.dim == 6 and pulled.spec.query_prefix == "q: "
    shutil.rmtree(root)
    assert read_model_dir(pulled.source_dir).dense[0].out_features == 6


# --- the remaining refusals, one branch each ---------------------------------------------------


@pytest.mark.parametrize(("family", "change", "match"), [
    ("bert", {"vocab_size": 0}, "'vocab_size' should be at least 1, not 0"),
    ("bert", {"hidden_act": 3}, "'hidden_act' should be a string, not 3"),
    ("modernbert", {"rope_parameters": [1]}, "'rope_parameters' should be an object"),
    ("modernbert", {"rope_parameters": {"full_attention": 1}},
     r"'rope_parameters\.full_attention' should be an object"),
    ("modernbert", {"rope_parameters": {"full_attention": {"rope_theta": -1},
                                        "sliding_attention": {"rope_theta": 1.0}}},
     r"'rope_parameters\.full_attention\.rope_theta' is -1"),
])
def test_more_config_refusals(tmp_path: Path, family: str, change: dict[str, Any],
                              match: str) -> None:
    root = make_model(tmp_path, family)
    (root / "config.json").write_text(json.dumps({**BASE_CONFIG[family], **change}))
    with pytest.raises(InvalidModelDir, match=match):
        read_model_dir(root)


def test_sentence_transformers_files_refused(tmp_path: Path) -> None:
    odd = {"modality_config": {"image": {"method": "forward"}}}
    with pytest.raises(UnsupportedArchitecture, match="'modality_config' is"):
        read_model_dir(make_model(tmp_path / "a", sentence_bert=odd))
    with pytest.raises(UnsupportedArchitecture, match="'model_type' is 'MultiVectorEncoder'"):
        read_model_dir(make_model(tmp_path / "b", st_config={"model_type": "MultiVectorEncoder"}))
    root = make_model(tmp_path / "c")
    entries = json.loads((root / "modules.json").read_text())
    entries[0]["path"] = "0_Transformer"
    (root / "modules.json").write_text(json.dumps(entries))
    with pytest.raises(UnsupportedArchitecture, match="the Transformer module lives in "
                                                      "'0_Transformer'"):
        read_model_dir(root)
    root = make_model(tmp_path / "d")
    (root / "2_Normalize").mkdir()
    (root / "2_Normalize" / "config.json").write_text(json.dumps(
        {"module_input_name": "token_embeddings"}))
    with pytest.raises(UnsupportedArchitecture, match="'module_input_name' is 'token_emb"):
        read_model_dir(root)
    (root / "2_Normalize" / "config.json").write_text(json.dumps({}))
    assert "2_Normalize/config.json" in read_model_dir(root).files
    root = make_model(tmp_path / "e", modules=["Transformer", "Pooling", "Dense"],
                      dense=[{"_torch_only": True}])
    (root / "2_Dense" / "pytorch_model.bin").unlink()
    with pytest.raises(InvalidModelDir, match=r"2_Dense/model\.safetensors is missing"):
        read_model_dir(root)
    lengthless = make_model(tmp_path / "f", sentence_bert={"max_seq_length": 1})
    with pytest.raises(InvalidModelDir, match="should be at least 2"):
        read_model_dir(lengthless)


def test_tokenizer_json_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(InvalidModelDir, match="field 'model' is missing"):
        read_model_dir(make_model(tmp_path / "a", tokenizer={"version": "1.0"}))
    broken = tokenizer_json()
    broken["model"]["vocab"] = None
    with pytest.raises(InvalidModelDir, match=r"field 'model\.vocab' is missing"):
        read_model_dir(make_model(tmp_path / "b", tokenizer=broken))


def _splade(root: Path, pooling: dict[str, Any],
            kinds: tuple[str, ...] = ("MLMTransformer", "SpladePooling")) -> Path:
    (root / "2_SpladePooling").mkdir(exist_ok=True)
    (root / "2_SpladePooling" / "config.json").write_text(json.dumps(pooling))
    (root / "modules.json").write_text(json.dumps([
        {"idx": i, "name": str(i), "path": "" if k != "SpladePooling" else "2_SpladePooling",
         "type": f"sentence_transformers.sparse_encoder.models.{k}"} for i, k in enumerate(kinds)]))
    return root


def test_sparse_and_rerank_refusals(tmp_path: Path) -> None:
    root = _splade(make_model(tmp_path / "a", modules=None), {"pooling_strategy": "mean"})
    with pytest.raises(UnsupportedArchitecture, match="SPLADE pooling 'mean'"):
        read_model_dir(root)
    root = _splade(make_model(tmp_path / "b", modules=None), {},
                   kinds=("MLMTransformer", "SpladePooling", "Normalize"))
    with pytest.raises(UnsupportedArchitecture, match="sparse encoder modules"):
        read_model_dir(root)
    cls = {"architectures": ["BertForSequenceClassification"]}
    changes: list[tuple[dict[str, Any], str]] = [
        ({"id2label": [1]}, "'id2label' should be an object"),
        ({"id2label": {"a": "x"}}, "'id2label' keys should be integers"),
        ({"sentence_transformers": {"activation_fn": "my.Fn"}},
         "'sentence_transformers.activation_fn' is 'my.Fn'")]
    for change, match in changes:
        root = make_model(tmp_path / f"c{len(match)}", modules=None, config={**cls, **change})
        with pytest.raises(InvalidModelDir if "id2label" in match else UnsupportedArchitecture,
                           match=match):
            read_model_dir(root)
    root = make_model(tmp_path / "d", "modernbert", modules=None, config={
        "architectures": ["ModernBertForSequenceClassification"], "classifier_pooling": "max"})
    with pytest.raises(UnsupportedArchitecture, match="'classifier_pooling' is 'max'"):
        read_model_dir(root)


@pytest.mark.parametrize(("family", "arch", "pooling", "act", "score"), [
    ("modernbert", "ModernBertForSequenceClassification", "mean", Activation.GELU,
     Activation.IDENTITY),
    ("distilbert", "DistilBertForSequenceClassification", "cls", Activation.RELU,
     Activation.SIGMOID),
])
def test_rerank_heads_by_family(tmp_path: Path, family: str, arch: str, pooling: str,
                                act: Activation, score: Activation) -> None:
    extra: dict[str, Any] = {"architectures": [arch], "classifier_pooling": "mean"}
    if score is Activation.SIGMOID:
        extra |= {"num_labels": 1, "sentence_transformers": {
            "activation_fn": "torch.nn.modules.activation.Sigmoid"}}
    d = read_model_dir(make_model(tmp_path, family, modules=None, config=extra))
    assert (d.task, d.head.pooling, d.head.activation, d.head.score_activation) == (
        Task.RERANK, pooling, act, score)


def test_checkpoint_contradictions(tmp_path: Path) -> None:
    def twice(w: dict[str, np.ndarray]) -> None:
        w["bert.embeddings.word_embeddings.weight"] = w["embeddings.word_embeddings.weight"]

    with pytest.raises(InvalidModelDir, match=r"both map to embeddings\.word"):
        load_weights(read_model_dir(make_model(tmp_path / "a", weights=twice)))

    def narrow(w: dict[str, np.ndarray]) -> None:
        w["layers.1.attn.Wqkv.weight"] = w["layers.1.attn.Wqkv.weight"][:2 * C]

    with pytest.raises(InvalidModelDir, match=r"layer 1's Wqkv\.weight has shape \(16, 8\)"):
        load_weights(read_model_dir(make_model(tmp_path / "b", "modernbert", weights=narrow)))


def test_safetensors_header_errors(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    for header, match in [([1, 2], "header is not an object"),
                          ({"a": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}},
                           "tensor 'a' has a bad or unsupported entry")]:
        raw = json.dumps(header).encode()
        path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0")
        with pytest.raises(InvalidModelDir, match=match):
            read_safetensors(path)


@pytest.mark.parametrize("family", ["bert", "distilbert", "modernbert"])
def test_unplaceable_tensor_in_every_family(tmp_path: Path, family: str) -> None:
    def extra(w: dict[str, np.ndarray]) -> None:
        w["adapter.weight"] = np.zeros(2, np.float32)

    with pytest.raises(UnsupportedArchitecture, match=f"'adapter.weight' is not part of a "
                                                      f"{family} encoder"):
        load_weights(read_model_dir(make_model(tmp_path, family, weights=extra)))


def test_missing_module_config_and_a_one_token_limit(tmp_path: Path) -> None:
    root = make_model(tmp_path / "a")
    (root / "1_Pooling" / "config.json").unlink()
    with pytest.raises(InvalidModelDir, match=r"1_Pooling/config\.json is missing"):
        read_model_dir(root)
    root = make_model(tmp_path / "b", sentence_bert=False)
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1}))
    with pytest.raises(InvalidModelDir, match="max_seq_length 1 leaves no room for text"):
        read_model_dir(root)
