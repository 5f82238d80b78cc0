"""The native C engine (build/native/libedgembed.so) through ctypes.

The bundle comes from the Python writer and is read by C; vectors are checked against the shared
reference fixture (sentence-transformers fp32), against a numpy model of the int8 scheme (for
all-MiniLM-L6-v2 and for small random models of every encoder feature: _engine_model.py), and
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

from _engine_model import FEATURES, Model, random_model
from edgembed.backends._abi import MODEL_INFO, OUTPUT, REQUEST, Status, declare

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
        self.hidden = int(self.meta("dim"))
        self.ctx = ctypes.c_void_p()
        assert lib.emb_context_init(ctypes.byref(self.ctx), self.model, max_tokens) == OK

    def meta(self, key: str) -> str:
        n = ctypes.c_size_t()
        p = self.lib.emb_model_get_meta(self.model, key.encode(), ctypes.byref(n))
        return ctypes.string_at(p, n.value).decode() if p else ""

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

    def run(self, seqs: list[list[int]], *, types: list[list[int]] | None = None,
            prompts: list[int] | None = None, output: int = 0, pooling: int = 0,
            normalize: int = -1, include_prompt: int = -1) -> npt.NDArray[np.float32]:
        """emb_context_run: EMBEDDING rows (S, dim) or TOKENS rows (T, hidden)."""
        ids = np.ascontiguousarray(np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs]))
        lens = np.asarray([len(s) for s in seqs], dtype=np.int32)
        ty = None if types is None else np.ascontiguousarray(np.concatenate(types), dtype=np.int32)
        pr = None if prompts is None else np.asarray(prompts, dtype=np.int32)
        width = self.info.dim if output == 0 else self.hidden
        out = np.zeros((len(seqs) if output == 0 else ids.size, width), dtype=np.float32)
        req = REQUEST.as_ctypes(ids.ctypes.data, lens.ctypes.data,
                                None if ty is None else ty.ctypes.data,
                                None if pr is None else pr.ctypes.data, len(seqs),
                                output, pooling, normalize, include_prompt)
        res = OUTPUT.as_ctypes(out.ctypes.data, out.size, 0, 0)
        st = self.lib.emb_context_run(self.ctx, ctypes.byref(req), ctypes.byref(res))
        if st != OK:
            raise ValueError(self.lib.emb_status_str(st).decode())
        assert (res.n_rows, res.row_size) == out.shape
        return out

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
    assert (i.pooling, i.normalize, i.version) == (1, 1, 2)
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


def test_matches_numpy_model_of_the_scheme(
    engine: Engine, bundle_bytes: bytes, reference: dict[str, Any]
) -> None:
    model = Model(bundle_bytes)
    seqs = [s for s in reference["token_ids"] if 3 <= len(s) <= 40][:24]
    got = engine.encode(seqs)
    want = np.stack([model.embedding(s) for s in seqs])
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
    v1 = bytearray(b)
    v1[8 + 36] = ord("1")
    assert status(bytes(v1)) == BAD_VERSION
    assert "2 through 2" in lib.emb_status_str(BAD_VERSION).decode()
    # an edited configuration value is caught by the checksum over the whole file
    edited = bytes(b).replace(b'"n_heads":"12"', b'"n_heads":"16"', 1)
    assert edited != bytes(b) and status(edited) == CORRUPT
    flipped = bytearray(b)
    flipped[-5000] ^= 0x10
    assert status(bytes(flipped)) == CORRUPT


# ── every encoder feature, on small random models, against the numpy model of the scheme ──

@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_every_feature_matches_the_numpy_model(
    lib: ctypes.CDLL, tmp_path: Path, feature: str
) -> None:
    cfg, dense = FEATURES[feature]
    bundle = random_model(tmp_path, cfg, seed=7, dense=dense)
    engine, model = Engine(lib, bundle), Model(bundle)
    rng = np.random.default_rng(3)
    seqs = [[2, *rng.integers(1, cfg.vocab_size, size=n - 2).tolist(), 3]
            for n in (2, 3, 5, 9, 17, cfg.max_length, cfg.max_length - 1, 12)]
    types = ([rng.integers(0, 2, size=len(s)).tolist() for s in seqs]
             if cfg.type_vocab_size > 1 else None)
    prompts = [int(rng.integers(0, len(s))) for s in seqs]
    got = engine.run(seqs, types=types, prompts=prompts)
    want = np.stack([model.embedding(s, None if types is None else types[i], prompts[i])
                     for i, s in enumerate(seqs)])
    cos = cosines(got, want)
    tok = engine.run(seqs, types=types, output=1)
    tok_want = np.concatenate([model.tokens(s, None if types is None else types[i])
                               for i, s in enumerate(seqs)])
    tcos = cosines(tok, tok_want)
    # the same arithmetic; differences only where a last-bit difference flips an int8 rounding
    # (measured: every feature ≥ 0.99995 per token, ≥ 0.999993 per embedding)
    assert cos.min() >= 0.9999 and cos.mean() >= 0.99999, (cos.min(), cos.mean())
    assert tcos.min() >= 0.9999 and tcos.mean() >= 0.99999, (tcos.min(), tcos.mean())
    engine.close()
