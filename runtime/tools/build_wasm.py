"""Build the wasm variants of the engine into build/wasm/ (called by `wasm/build.sh`).

    edgembed.wasm           SIMD128 kernels, single thread, own growable memory
    edgembed-relaxed.wasm   relaxed-SIMD int8 GEMM (use only after emb_relaxed_probe_wasm() == 1)
    edgembed-threads.wasm   SIMD128, imported shared memory, for a pool of workers on one model
    kernels_test.wasm       reference, SIMD128 and relaxed kernels side by side (tests only)

Toolchain: `python -m ziglang cc --target=wasm32-freestanding` (pip install ziglang) and
wasm-opt from npm `binaryen`. The versions used are written to build/wasm/toolchain.txt.
Each engine variant must stay within 300 KB, and its exports must be those of the ABI module
(python/edgembed/backends/_abi.py, WASM_EXPORTS: names, parameter counts, results; checked
against runtime/include/edgembed.h by tests/python/test_abi.py). The compiler flags every build
shares are read from runtime/cflags.txt (engine_cflags.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine_cflags import shared_cflags  # runtime/cflags.txt, read once

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "wasm"
MAX_BYTES = 300 * 1024


CFLAGS = [*shared_cflags(), "-O3", "-nostdlib", "-ffreestanding"]
LDFLAGS = ["-Wl,--no-entry", "-Wl,-z,stack-size=262144"]

VARIANTS: dict[str, dict[str, list[str]]] = {
    "edgembed": {"cflags": ["-msimd128"], "ldflags": [], "extra": ["kernels_simd128.c"]},
    "edgembed-relaxed": {
        "cflags": ["-msimd128", "-mrelaxed-simd"],
        "ldflags": [],
        "extra": ["kernels_simd128.c", "kernels_relaxed.c"],
    },
    "edgembed-threads": {
        "cflags": ["-msimd128", "-matomics", "-mbulk-memory"],
        "ldflags": [
            "-Wl,--shared-memory",
            "-Wl,--import-memory",
            "-Wl,--max-memory=1073741824",
            "-Wl,--export=__stack_pointer",
        ],
        "extra": ["kernels_simd128.c"],
    },
}
NOT_ENGINE = {
    "platform_wasm.c",
    "platform_native.c",
    "kernels_simd128.c",
    "kernels_relaxed.c",
    "kernels_x86.c",
}


def zig_cc() -> list[str]:
    return [sys.executable, "-m", "ziglang", "cc", "--target=wasm32-freestanding"]


def wasm_opt() -> str:
    env = os.environ.get("WASM_OPT")
    local = ROOT / "build" / "tools" / "node_modules" / ".bin" / "wasm-opt"
    found = env or (str(local) if local.exists() else shutil.which("wasm-opt"))
    if not found:
        sys.exit("wasm-opt not found: run `npm install --prefix build/tools binaryen`")
    return found


def run(cmd: list[str]) -> str:
    env = {
        **os.environ,
        "ZIG_GLOBAL_CACHE_DIR": str(ROOT / "build" / "zig-cache"),
        "ZIG_LOCAL_CACHE_DIR": str(ROOT / "build" / "zig-cache"),
    }
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def engine_sources() -> list[str]:
    return sorted(
        p.name for p in (ROOT / "runtime" / "src").glob("*.c") if p.name not in NOT_ENGINE
    )


def compile_and_link(name: str, sources: list[Path], cflags: list[str], ldflags: list[str]) -> Path:
    objdir = OUT / "obj" / name
    objdir.mkdir(parents=True, exist_ok=True)
    objs = []
    for src in sources:
        obj = objdir / (src.stem + ".o")
        # the libc stand-ins must not be turned back into calls to themselves
        extra = ["-fno-builtin"] if src.name == "platform_wasm.c" else []
        run([*zig_cc(), *CFLAGS, *cflags, *extra, "-c", str(src), "-o", str(obj)])
        objs.append(str(obj))
    raw = OUT / f"{name}.raw.wasm"
    run([*zig_cc(), *CFLAGS, *cflags, *LDFLAGS, *ldflags, *objs, "-o", str(raw)])
    return raw


def optimize(raw: Path, out: Path) -> None:
    run(
        [
            wasm_opt(),
            "-O3",
            "--strip-debug",
            "--strip-producers",
            "--strip-target-features",
            str(raw),
            "-o",
            str(out),
        ]
    )
    raw.unlink()


def abi() -> Any:
    """python/edgembed/backends/_abi.py, loaded by path (it imports nothing from the package)."""
    path = ROOT / "python" / "edgembed" / "backends" / "_abi.py"
    spec = importlib.util.spec_from_file_location("edgembed_abi", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


I32 = 0x7F


def exports_of(path: Path) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]] | None]:
    """Export name -> (parameter types, result types) of each exported function, None for other
    exports (memory, globals), from the module's sections (no dependency beyond the stdlib)."""
    data = path.read_bytes()
    if data[:4] != b"\0asm":
        raise ValueError(f"{path} is not a wasm module")
    pos = 8

    def leb() -> int:
        nonlocal pos
        result = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return result

    def valtypes() -> tuple[int, ...]:
        nonlocal pos
        n = leb()
        pos += n
        return tuple(data[pos - n : pos])

    types: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    funcs: list[int] = []  # type index of each function: imported ones first
    exports: dict[str, tuple[int, int]] = {}
    while pos < len(data):
        sid = data[pos]
        pos += 1
        size = leb()
        end = pos + size
        if sid == 1:  # type
            for _ in range(leb()):
                pos += 1  # 0x60
                params = valtypes()
                types.append((params, valtypes()))
        elif sid == 2:  # import
            for _ in range(leb()):
                for _name in range(2):  # module, field
                    n = leb()
                    pos += n
                kind = data[pos]
                pos += 1
                if kind == 0:  # a function: its type index
                    funcs.append(leb())
                elif kind in (1, 2):  # a table (element type, limits) or a memory (limits)
                    pos += kind == 1
                    flags = data[pos]
                    pos += 1
                    leb()
                    if flags & 1:
                        leb()
                elif kind == 3:  # a global: value type, mutability
                    pos += 2
                else:
                    raise ValueError(f"{path}: an import of kind {kind} this reader does not know")
        elif sid == 3:  # function
            funcs += [leb() for _ in range(leb())]
        elif sid == 7:  # export
            for _ in range(leb()):
                n = leb()
                name = data[pos : pos + n].decode()
                pos += n
                kind = data[pos]
                pos += 1
                exports[name] = (kind, leb())
        pos = end
    return {
        name: types[funcs[index]] if kind == 0 else None
        for name, (kind, index) in exports.items()
    }


def check_exports(path: Path, variant: str) -> None:
    """The module's functions are the ABI's WASM_EXPORTS, each with its i32 parameters and result;
    besides them it exports its memory (the threads build: __stack_pointer)."""
    want = abi().WASM_EXPORTS
    found = exports_of(path)
    got = {name: sig for name, sig in found.items() if sig is not None}
    if set(got) != set(want):
        sys.exit(
            f"{path.name}: exports differ from WASM_EXPORTS in python/edgembed/backends/_abi.py: "
            f"missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}"
        )
    for name, spec in want.items():
        expected = ((I32,) * len(spec.params), (I32,) if spec.returns else ())
        if got[name] != expected:
            sys.exit(f"{path.name}: {name} has the wasm type {got[name]}, the ABI says {expected}")
    extras = {name for name, sig in found.items() if sig is None}
    expected_extras = {"__stack_pointer"} if variant == "edgembed-threads" else {"memory"}
    if extras != expected_extras:
        sys.exit(f"{path.name}: expected {expected_extras} besides the functions, found {extras}")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", choices=[*VARIANTS, "kernels_test", "tokenizer_test"], action="append")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    src = ROOT / "runtime" / "src"
    base = [src / n for n in engine_sources()] + [
        src / "platform_wasm.c",
        ROOT / "wasm" / "exports.c",
    ]
    sizes = []
    for name, v in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        raw = compile_and_link(
            name, base + [src / e for e in v["extra"]], v["cflags"], v["ldflags"]
        )
        out = OUT / f"{name}.wasm"
        optimize(raw, out)
        check_exports(out, name)
        size = out.stat().st_size
        if size > MAX_BYTES:
            sys.exit(f"{out.name} is {size} bytes, over the {MAX_BYTES}-byte budget")
        sizes.append(f"{out.name} {size}")
    if not args.only or "kernels_test" in args.only:
        raw = compile_and_link(
            "kernels_test",
            [
                src / "kernels.c",
                src / "kernels_simd128.c",
                src / "kernels_relaxed.c",
                src / "platform_wasm.c",
                ROOT / "tests" / "runtime" / "test_kernels_wasm.c",
            ],
            ["-msimd128", "-mrelaxed-simd", "-DEMB_KERNELS=EMB_KERNELS_RELAXED"],
            [],
        )
        optimize(raw, OUT / "kernels_test.wasm")
    if not args.only or "tokenizer_test" in args.only:
        tokenizer = ["tokenizer", "normalizer", "pre_tokenizer", "wordpiece", "unigram", "bpe",
                     "post_processor", "unicode_tables", "tokenizer_bundle", "bundle"]
        raw = compile_and_link(
            "tokenizer_test",
            [*(src / f"{n}.c" for n in tokenizer), src / "platform_wasm.c",
             ROOT / "tests" / "runtime" / "test_tokenizer_wasm.c"],
            ["-msimd128"],
            [],
        )
        optimize(raw, OUT / "tokenizer_test.wasm")
    versions = [
        "zig " + run([sys.executable, "-m", "ziglang", "version"]).strip(),
        run([*zig_cc(), "--version"]).splitlines()[0],
        run([wasm_opt(), "--version"]).strip(),
    ]
    (OUT / "toolchain.txt").write_text("\n".join(versions + sizes) + "\n")
    print("\n".join(versions + sizes))


if __name__ == "__main__":
    main()
