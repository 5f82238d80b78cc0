"""The native C engine (build/native/libedgembed.so) through ctypes.

The bundle comes from the Python writer and is read by C; vectors are checked against the shared
reference fixture (sentence-transformers fp32), against a numpy model of the int8 scheme, and
for batch invariance. The engine's tokenizer is checked against the fixture's token ids.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from edgembed.backends._abi import MODEL_INFO, Status, declare

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "build" / "native" / "libedgembed.so"

OK, BAD_MAGIC, BAD_VERSION, TRUNCATED, CORRUPT, TOO_LONG = (
    Status.OK, Status.BAD_MAGIC, Status.BAD_VERSION, Status.TRUNCATED, Status.CORRUPT,
    Status.TOO_LONG,
)
ModelInfo = MODEL_INFO.as_ctypes  # the bindings' view of emb_model_info


class Engine:
    """A thin ctypes view of edgembed.h, enough for the tests."""

    def __init__(self, lib: ctypes.CDLL, bundle: bytes, max_tokens: int = 2048) -> None:
        self.lib = lib
        # keep the bytes alive and 64-byte aligned: the model references them
        self._buf = np.zeros(len(bundle) + 64, dtype=np.uint8)
        off = -self._buf.ctypes.data % 64
        self._view = self._buf[off : off + len(bundle)]
        self._view[:] = np.frombuffer(bundle, dtype=np.uint8)
        self.model = ctypes.c_void_p()
        st = lib.emb_model_init(
            ctypes.byref(self.model), self._view.ctypes.data_as(ctypes.c_void_p), len(bundle)
        )
        if st != OK:
            raise RuntimeError(lib.emb_status_str(st).decode())
        self.info = ModelInfo()
        lib.emb_model_get_info(self.model, ctypes.byref(self.info))
        self.ctx = ctypes.c_void_p()
        assert lib.emb_context_init(ctypes.byref(self.ctx), self.model, max_tokens) == OK

    def close(self) -> None:
        self.lib.emb_context_free(self.ctx)
        self.lib.emb_model_free(self.model)

    def tokenize(self, text: str, truncate: bool = True) -> list[int]:
        data = text.encode("utf-8")
        ids = (ctypes.c_int32 * 1024)()
        n, full = ctypes.c_size_t(), ctypes.c_size_t()
        st = self.lib.emb_model_tokenize(
            self.model,
            data,
            len(data),
            int(truncate),
            ids,
            1024,
            ctypes.byref(n),
            ctypes.byref(full),
        )
        if st != OK:
            raise ValueError(self.lib.emb_status_str(st).decode())
        return list(ids[: n.value])

    def encode(
        self, seqs: list[list[int]], pooling: int = 0, normalize: int = -1
    ) -> npt.NDArray[np.float32]:
        ids = np.ascontiguousarray(np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs]))
        lens = np.asarray([len(s) for s in seqs], dtype=np.int32)
        out = np.zeros((len(seqs), self.info.dim), dtype=np.float32)
        st = self.lib.emb_context_encode(
            self.ctx,
            ids.ctypes.data_as(ctypes.c_void_p),
            lens.ctypes.data_as(ctypes.c_void_p),
            len(seqs),
            pooling,
            normalize,
            out.ctypes.data_as(ctypes.c_void_p),
            out.size,
        )
        if st != OK:
            raise ValueError(self.lib.emb_status_str(st).decode())
        return out


def load_lib(path: Path = LIB) -> ctypes.CDLL:
    """The native library with every function of edgembed.h typed, as the backend types them."""
    lib = ctypes.CDLL(str(path))
    declare(lib)
    return lib


@pytest.fixture(scope="session")
def lib() -> ctypes.CDLL:
    if not LIB.exists():
        if shutil.which("cc") is None:
            pytest.fail("no C compiler: install gcc or clang, then run runtime/build.sh native")
        subprocess.run(["bash", str(REPO / "runtime" / "build.sh"), "native"], check=True, cwd=REPO)
    return load_lib()


@pytest.fixture(scope="session")
def bundle_bytes(bundle: Path) -> bytes:
    return bundle.read_bytes()


@pytest.fixture(scope="session")
def engine(lib: ctypes.CDLL, bundle_bytes: bytes) -> Engine:
    return Engine(lib, bundle_bytes)


def cosines(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cos: npt.NDArray[np.float64] = (a64 * b64).sum(1) / np.linalg.norm(a64, axis=1) \
        / np.linalg.norm(b64, axis=1)
    return cos


def encode_all(
    engine: Engine, seqs: list[list[int]], budget: int = 2048
) -> npt.NDArray[np.float32]:
    out: list[npt.NDArray[np.float32]] = []
    batch: list[list[int]] = []
    used = 0
    for s in seqs:
        if batch and used + len(s) > budget:
            out.append(engine.encode(batch))
            batch, used = [], 0
        batch.append(s)
        used += len(s)
    out.append(engine.encode(batch))
    return np.concatenate(out)


def test_info(engine: Engine, lib: ctypes.CDLL) -> None:
    i = engine.info
    assert (i.dim, i.n_layers, i.n_heads, i.ffn_dim, i.vocab_size, i.max_length) == (
        384,
        6,
        12,
        1536,
        30522,
        256,
    )
    assert (i.pooling, i.normalize, i.version) == (1, 1, 1)
    n = ctypes.c_size_t()
    p = lib.emb_model_get_meta(engine.model, b"name", ctypes.byref(n))
    assert ctypes.string_at(p, n.value) == b"all-minilm-l6-v2"


def test_tokenizer_matches_fixture(engine: Engine, reference: dict[str, Any]) -> None:
    for text, want in zip(reference["texts"], reference["token_ids"], strict=True):
        assert engine.tokenize(text) == want, text[:60]


def test_int8_bar_against_sentence_transformers(engine: Engine, reference: dict[str, Any]) -> None:
    got = encode_all(engine, reference["token_ids"])
    want = np.asarray(reference["embeddings"], dtype=np.float32)
    cos = cosines(got, want)
    assert cos.min() >= 0.995, f"min cosine {cos.min():.5f}"
    assert cos.mean() >= 0.999, f"mean cosine {cos.mean():.5f}"
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batch_invariance(engine: Engine, reference: dict[str, Any]) -> None:
    rng = np.random.default_rng(20240611)
    seqs = reference["token_ids"]
    short = [i for i, s in enumerate(seqs) if len(s) <= 64]
    picks = rng.choice(short, size=24, replace=False)
    alone = {int(i): engine.encode([seqs[i]])[0] for i in picks}
    worst = 1.0
    for _ in range(3):
        order = rng.permutation(picks)
        cut = sorted(rng.choice(np.arange(1, len(order)), size=4, replace=False))
        for part in np.split(order, cut):
            group = [int(i) for i in part]
            if sum(len(seqs[i]) for i in group) > 2048:
                continue
            got = engine.encode([seqs[i] for i in group])
            worst = min(worst, cosines(got, np.stack([alone[i] for i in group])).min())
            # in fact bit-identical: every row is computed the same way in any batch
            assert all(np.array_equal(got[k], alone[i]) for k, i in enumerate(group))
    assert worst >= 0.99999


# ── a numpy model of the int8 scheme (docs/quantization.md), to check the C arithmetic ──


def _quantize(
    x: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    m, k = x.shape
    b = x.reshape(m, k // 32, 32)
    s = (np.abs(b).max(axis=2) / np.float32(127)).astype(np.float32)
    safe = np.where(s == 0, np.float32(1), s)
    q = np.clip(np.rint(b / safe[:, :, None]), -127, 127)
    return q.astype(np.float32), s


def _linear(x: npt.NDArray[np.float32], t: dict[str, Any], name: str) -> npt.NDArray[np.float32]:
    q, s, bias = t[name + ".q"], t[name + ".scale"], t[name + ".bias"]
    n4, k4 = q.shape[:2]
    w = q.transpose(0, 2, 1, 3).reshape(n4 * 4, k4 * 4).astype(np.float32)
    sw = s.transpose(0, 2, 1).reshape(n4 * 4, -1)
    qx, sx = _quantize(x)
    isum = np.einsum("mbk,nbk->mnb", qx, w.reshape(w.shape[0], -1, 32))  # exact in float32
    y = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
    for b in range(isum.shape[2]):
        y += (sx[:, None, b] * sw[None, :, b]) * isum[:, :, b]
    return np.asarray(y + bias, dtype=np.float32)


def _layernorm(
    x: npt.NDArray[np.float32], w: npt.NDArray[np.float32], b: npt.NDArray[np.float32]
) -> npt.NDArray[np.float32]:
    mean = x.mean(1, keepdims=True)
    var = ((x - mean) ** 2).mean(1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + 1e-12) * w + b, dtype=np.float32)


def _numpy_forward(t: dict[str, Any], ids: list[int]) -> npt.NDArray[np.float32]:
    from math import erf, sqrt

    c, h = 384, 12
    word = t["embeddings.word.q"][ids].astype(np.float32)
    word = (word.reshape(len(ids), -1, 32) * t["embeddings.word.scale"][ids][:, :, None]).reshape(
        len(ids), c
    )
    x = word + t["embeddings.position"][: len(ids)] + t["embeddings.token_type"][0]
    x = _layernorm(x, t["embeddings.norm.weight"], t["embeddings.norm.bias"])
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
    for layer in range(6):
        p = f"layers.{layer}."
        qkv = _linear(x, t, p + "attention.qkv")
        q, k, v = (
            qkv[:, i * c : (i + 1) * c].reshape(len(ids), h, -1).transpose(1, 0, 2)
            for i in range(3)
        )
        s = q @ k.transpose(0, 2, 1) / np.sqrt(np.float32(c // h))
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (
            ((s / s.sum(-1, keepdims=True)) @ v)
            .transpose(1, 0, 2)
            .reshape(len(ids), c)
            .astype(np.float32)
        )
        x = _layernorm(
            x + _linear(a, t, p + "attention.out"),
            t[p + "attention.norm.weight"],
            t[p + "attention.norm.bias"],
        )
        f = gelu(_linear(x, t, p + "ffn.up")).astype(np.float32)
        x = _layernorm(
            x + _linear(f, t, p + "ffn.down"), t[p + "ffn.norm.weight"], t[p + "ffn.norm.bias"]
        )
    v = x.mean(0)
    return np.asarray(v / np.linalg.norm(v), dtype=np.float32)


def test_matches_numpy_model_of_the_scheme(
    engine: Engine, bundle_bytes: bytes, reference: dict[str, Any]
) -> None:
    from safetensors.numpy import load

    t = load(bundle_bytes)
    seqs = [s for s in reference["token_ids"] if 3 <= len(s) <= 40][:24]
    got = engine.encode(seqs)
    want = np.stack([_numpy_forward(t, s) for s in seqs])
    cos = cosines(got, want)
    # Two implementations of the same int8 scheme differ only where a float difference in the
    # last bits (here numpy's float64 GELU and pairwise sums) flips an activation's rounding.
    assert cos.min() >= 0.9995 and cos.mean() >= 0.9999, (cos.min(), cos.mean())


def test_pooling_options(engine: Engine, reference: dict[str, Any]) -> None:
    seq = reference["token_ids"][40]
    raw = engine.encode([seq], pooling=1, normalize=0)[0]
    normed = engine.encode([seq])[0]
    assert np.allclose(raw / np.linalg.norm(raw), normed, atol=1e-6)
    cls = engine.encode([seq], pooling=2, normalize=1)[0]
    assert abs(np.linalg.norm(cls) - 1) < 1e-5 and not np.allclose(cls, normed)


def test_errors(engine: Engine, lib: ctypes.CDLL, bundle_bytes: bytes) -> None:
    with pytest.raises(ValueError, match="max length"):
        engine.tokenize("word " * 400, truncate=False)
    assert len(engine.tokenize("word " * 400)) == 256
    with pytest.raises(ValueError, match="max length"):
        engine.encode([[101] * 257])
    with pytest.raises(ValueError, match="invalid argument"):
        engine.encode([[101, 40000, 102]])

    def status(data: bytes) -> int:
        buf = np.zeros(len(data) + 64, dtype=np.uint8)
        off = -buf.ctypes.data % 64
        view = buf[off : off + len(data)]
        view[:] = np.frombuffer(data, dtype=np.uint8)
        m = ctypes.c_void_p()
        st = lib.emb_model_init(ctypes.byref(m), view.ctypes.data_as(ctypes.c_void_p), len(data))
        if st == OK:
            lib.emb_model_free(m)
        return int(st)

    b = bytearray(bundle_bytes)
    assert status(bytes(b[:1000])) == TRUNCATED
    assert status(b"GGUF" + bytes(100)) == BAD_MAGIC
    v2 = bytearray(b)
    v2[8 + 36] = ord("2")
    assert status(bytes(v2)) == BAD_VERSION
    assert "1 through 1" in lib.emb_status_str(BAD_VERSION).decode()
    flipped = bytearray(b)
    flipped[-5000] ^= 0x10
    assert status(bytes(flipped)) == CORRUPT
