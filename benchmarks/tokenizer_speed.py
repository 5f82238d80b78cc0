"""Tokenizers: the engine's against Hugging Face ``tokenizers``, one thread, the same texts.

For each tokenizer kind the engine implements, the same tokenizer.json through both:

- the engine: the tables the bundle writer makes (``edgembed.export.tokenizer_tables``) in a
  tokenizer-only bundle, read and run by ``tests/runtime/tokenizer_driver.c bench`` (built here
  with gcc -O3 and the flags of runtime/cflags.txt): load time (fastest of 5, bundle already in
  memory), the tables' memory, and encode time per round (ids with truncation at 512, one text
  per call, as the engine's hosts call it);
- tokenizers: ``Tokenizer.from_file`` time, and ``encode_batch`` time with
  ``TOKENIZERS_PARALLELISM=false`` (one thread, one call per round, so no per-text Python cost).

Both must give the same ids (checked; a mismatch fails the run). Cases: all-minilm-l6-v2's
WordPiece (the pulled model), the fixtures of tests/fixtures/tokenizers/ (4,000 tokens), and two
at real models' sizes, made here: a 250,002-piece Unigram (the XLM-R fixture with 246,000 more
pieces, words of the gettext catalogs with seeded random scores: XLM-R's size) and a 50,000-token
byte-level BPE trained with ``tokenizers``' BpeTrainer in ModernBERT's configuration. Texts: the
machine's gettext catalogs (``--texts`` translated strings, a seeded sample, plus 200 texts of 40
strings each; the big models' words and training text come from another 390,000). Rounds:
median of ``--rounds``.

    .venv/bin/python benchmarks/tokenizer_speed.py [--texts 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gettext
import glob
import json
import os
import platform
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "runtime" / "tools"))
from engine_cflags import shared_cflags  # type: ignore[import-not-found]  # noqa: E402
from tokenizer_bundles import tokenizer_bundle  # type: ignore[import-not-found]  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "tokenizers"
SRC = ROOT / "runtime" / "src"
SOURCES = ["tokenizer", "normalizer", "pre_tokenizer", "wordpiece", "unigram", "bpe",
           "post_processor", "unicode_tables", "tokenizer_bundle", "bundle", "platform_native"]
MAX_LENGTH = 512


def catalog_strings(n: int, seed: int) -> list[str]:
    seen: set[str] = set()
    for path in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")):
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog  # type: ignore[attr-defined]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, IndexError):
            continue
        seen.update(v for v in catalog.values() if isinstance(v, str) and v.strip())
    if not seen:
        sys.exit("no gettext catalogs under /usr/share/locale")
    rng = random.Random(seed)
    return rng.sample(sorted(seen), min(n, len(seen)))


def build_driver(out: Path) -> Path:
    exe = out / "tokenizer_driver"
    flags = ["-O3", *shared_cflags(absolute=True)]  # runtime/cflags.txt, as runtime/build.sh
    subprocess.run(["gcc", *flags, *(str(SRC / f"{s}.c") for s in SOURCES),
                    str(ROOT / "tests" / "runtime" / "tokenizer_driver.c"), "-o", str(exe)],
                   check=True)
    return exe


def big_unigram(out: Path, words: list[str]) -> Path:
    """XLM-R's size: the fixture's 4,002 pieces and 246,000 more (seeded)."""
    spec = json.loads((FIXTURES / "xlmr-unigram" / "tokenizer.json").read_text(encoding="utf-8"))
    have = {p for p, _ in spec["model"]["vocab"]}
    rng = random.Random(250002)
    extra: list[list[object]] = []
    for w in words:
        for piece in (w, "\u2581" + w):
            if piece not in have and len(extra) < 246_000:
                have.add(piece)
                extra.append([piece, -8.0 - 10.0 * rng.random()])
    spec["model"]["vocab"] += extra
    d = out / "unigram-250k"
    d.mkdir(exist_ok=True)
    (d / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    return d


def big_bpe(out: Path, texts: list[str]) -> Path:
    """ModernBERT's configuration at a real size: 50,000 tokens trained on the catalogs."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=50_000, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken("<|padding|>", special=True, normalized=False)],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("[UNK]", "[CLS]", "[SEP]", "[PAD]")])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True, normalized=False)])
    v = tok.get_vocab()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", v["[CLS]"]), ("[SEP]", v["[SEP]"])])
    d = out / "bpe-50k"
    d.mkdir(exist_ok=True)
    tok.save(str(d / "tokenizer.json"))
    return d


def run_case(name: str, hf_dir: Path, texts: list[str], driver: Path, rounds: int,
             tmp: Path) -> dict[str, object]:
    from tokenizers import Tokenizer

    t0 = time.perf_counter()
    data, n_vocab = tokenizer_bundle(hf_dir)
    write_s = time.perf_counter() - t0
    bundle = tmp / f"{name}.emb"
    bundle.write_bytes(data)
    records = b"".join(struct.pack("<I", len(b)) + b for b in (t.encode() for t in texts))
    res = subprocess.run([str(driver), "bench", str(bundle), str(n_vocab), str(MAX_LENGTH),
                          str(rounds)], input=records, capture_output=True, check=True)
    engine = json.loads(res.stdout)

    loads = []
    for _ in range(5):
        t0 = time.perf_counter()
        hf = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
        loads.append(time.perf_counter() - t0)
    hf.no_padding()
    hf.enable_truncation(MAX_LENGTH)
    times, n_full = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        enc = hf.encode_batch(texts)
        times.append(time.perf_counter() - t0)
    hf.no_truncation()
    n_full = sum(len(e.ids) for e in hf.encode_batch(texts))
    assert all(r[1] == n_full for r in engine["rounds"]), (name, engine["rounds"][0][1], n_full)
    # the same ids: the engine's bundle driver against tokenizers (a sample, every text's ids)
    check = subprocess.run([str(driver), "bundle", str(bundle), str(n_vocab), str(MAX_LENGTH), "0"],
                           input=records, capture_output=True, check=True).stdout
    pos, bad = 0, 0
    for e in enc:
        _, _, n = struct.unpack_from("<3i", check, pos)
        ids = list(struct.unpack_from(f"<{n}i", check, pos + 12))
        pos += 12 + 16 * n
        bad += ids != e.ids
    if bad:
        sys.exit(f"{name}: {bad} texts tokenize differently")
    eng_s = statistics.median(r[0] for r in engine["rounds"])
    hf_s = statistics.median(times)
    return {
        "case": name, "vocab": n_vocab, "bundle_mb": len(data) / 1e6, "write_s": write_s,
        "engine_load_ms": 1e3 * engine["load_s"], "engine_mem_mb": engine["memory"] / 1e6,
        "hf_load_ms": 1e3 * min(loads), "engine_mb_s": engine["bytes"] / eng_s / 1e6,
        "engine_tok_s": n_full / eng_s, "hf_mb_s": engine["bytes"] / hf_s / 1e6,
        "hf_tok_s": n_full / hf_s, "ratio": hf_s / eng_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--texts", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import tokenizers

    pool = catalog_strings(400_000, 7)  # the benchmark's texts, the big models' words and data
    texts = pool[: args.texts + 8_000]
    docs = ["\n".join(texts[args.texts + 40 * i : args.texts + 40 * (i + 1)]) for i in range(200)]
    bench = texts[: args.texts] + docs
    words = sorted({w.strip(".,:;!?()[]\"'") for t in pool for w in t.split()} - {""})
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        driver = build_driver(tmp)
        cases: list[tuple[str, Path]] = []
        try:
            from edgembed.sources import pull

            cases.append(("wordpiece (all-minilm-l6-v2)", pull("all-minilm-l6-v2").source_dir))
        except Exception as e:  # the model is not pulled here: skip its row
            print(f"skipping WordPiece: {e}", file=sys.stderr)
        cases += [(k, FIXTURES / k) for k in
                  ("xlmr-unigram", "unigram-byte-fallback", "roberta-bpe", "modernbert-bpe",
                   "split-bpe")]
        cases.append(("unigram 250k (XLM-R size)", big_unigram(tmp, words)))
        cases.append(("bpe 50k (ModernBERT config)", big_bpe(tmp, pool[args.texts + 8_000 :])))
        rows = [run_case(n.split(" ")[0], d, bench, driver, args.rounds, tmp) | {"case": n}
                for n, d in cases]
    n_bytes = sum(len(x.encode()) for x in bench)
    print(f"{time.strftime('%Y-%m-%d')}, {platform.machine()} {os.cpu_count()} cores, "
          f"tokenizers {tokenizers.__version__}, {len(bench)} texts ({n_bytes / 1e6:.1f} MB), "
          f"median of {args.rounds}; load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| tokenizer | vocabulary | engine MB/s | tokenizers MB/s | engine / tokenizers | "
          "engine tokens/s | bundle load (engine) | tokenizer.json load (tokenizers) | "
          "engine tables | bundle tables | bundle writer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['vocab']:,} | {r['engine_mb_s']:.1f} | {r['hf_mb_s']:.1f} | "
              f"**{r['ratio']:.2f}×** | {r['engine_tok_s']:,.0f} | {r['engine_load_ms']:.1f} ms | "
              f"{r['hf_load_ms']:.1f} ms | {r['engine_mem_mb']:.1f} MB | {r['bundle_mb']:.1f} MB"
              f" | {r['write_s']:.2f} s |")


if __name__ == "__main__":
    main()
