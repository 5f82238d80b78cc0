/**
 * Which engine module to run, and getting it: the variants' files, compiling them once, the
 * probes that choose between them, and the shared memory of the threads build. No export is
 * called here except through EngineInstance (bindings.ts), which runs the relaxed build's probe.
 *
 *   file (dist/wasm/)      kernels, memory                                   Build
 *   edgembed.wasm          SIMD128 kernels, own memory                      "simd128"
 *   edgembed-relaxed.wasm  relaxed-SIMD int8 dot products, own memory        "relaxed"
 *                          (on arm64 by default, and only after emb_relaxed_probe_wasm() == 1)
 *   edgembed-threads.wasm  SIMD128, imports a shared env.memory; exports     "threads"
 *                          __stack_pointer, which every instance after the first must point at a
 *                          stack of its own before its first call
 *
 * Built into build/wasm/ by ./build.sh wasm and copied to dist/wasm/ by js/build.sh.
 */
import { EngineInstance } from "./bindings.js";
import { env } from "./env.js";
import { BackendUnavailable } from "./errors.js";
import { readFileBytes, toPath } from "./host.js";

/** Which engine build runs: an Embedder's, Reranker's or EmbedderPool's `build`. */
export type Build = "simd128" | "relaxed" | "threads";
/** @deprecated the old name of `Build` ("variant" names a model's quantization in Python). */
export type Variant = Build;

/** The file name of each build, under dist/wasm/ (package subpath `edgembed/wasm/<file>`). */
export const WASM_FILES: Readonly<Record<Build, string>> = Object.freeze({
  simd128: "edgembed.wasm",
  relaxed: "edgembed-relaxed.wasm",
  threads: "edgembed-threads.wasm",
});

/** Modules given ahead of time (the Cloudflare Workers entry imports them), by variant. */
const presetModules = new Map<Build, WebAssembly.Module>();
const compiled = new Map<string, Promise<WebAssembly.Module>>();

/** Registers ready modules, e.g. `import m from "edgembed/wasm/edgembed.wasm"` in a Worker. */
export function provideModules(modules: Partial<Record<Build, WebAssembly.Module>>): void {
  for (const [k, m] of Object.entries(modules)) if (m) presetModules.set(k as Build, m);
}

function wasmUrl(variant: Build, base?: string | URL): URL {
  const dir = base === undefined ? new URL("./wasm/", import.meta.url) : new URL(String(base).replace(/\/?$/, "/"), import.meta.url);
  return new URL(WASM_FILES[variant], dir);
}

/** The bytes of a variant's .wasm file (the pool sends them to workers that compile for themselves). */
export async function wasmBytes(variant: Build, base?: string | URL): Promise<Uint8Array> {
  const url = wasmUrl(variant, base);
  if (url.protocol === "file:" && env.fileSystem) return readFileBytes(toPath(url));
  const res = await fetch(url);
  if (!res.ok) throw new BackendUnavailable(`cannot load the engine from ${url.href} (HTTP ${res.status}); serve dist/wasm/ next to the package files or pass wasmBase`);
  return new Uint8Array(await res.arrayBuffer());
}

/** The compiled module of a variant (compiled once per variant and location). */
export function compileVariant(variant: Build, base?: string | URL): Promise<WebAssembly.Module> {
  const preset = presetModules.get(variant);
  if (preset) return Promise.resolve(preset);
  if (!env.compileWasm) {
    return Promise.reject(
      new BackendUnavailable(
        `${env.runtime} cannot compile WebAssembly from bytes: import "edgembed/wasm/${WASM_FILES[variant]}" ` +
          `and pass it as the engineModule option`,
      ),
    );
  }
  const key = `${variant} ${base ?? ""}`;
  let p = compiled.get(key);
  if (!p) {
    p = (async () => {
      const url = wasmUrl(variant, base);
      if (url.protocol !== "file:" && typeof WebAssembly.compileStreaming === "function") {
        const res = await fetch(url);
        if (!res.ok) throw new BackendUnavailable(`cannot load the engine from ${url.href} (HTTP ${res.status}); serve dist/wasm/ next to the package files or pass wasmBase`);
        if ((res.headers.get("content-type") ?? "").startsWith("application/wasm")) return WebAssembly.compileStreaming(res);
        return WebAssembly.compile(await res.arrayBuffer());
      }
      return WebAssembly.compile(await wasmBytes(variant, base) as Uint8Array<ArrayBuffer>);
    })();
    p.catch(() => compiled.delete(key));
    compiled.set(key, p);
  }
  return p;
}

function validates(bytes: Uint8Array): boolean {
  try {
    return WebAssembly.validate(bytes as Uint8Array<ArrayBuffer>);
  } catch {
    return false;
  }
}

// A module with one v128 instruction: (func (result i32) v128.const i32x4 0 0 0 0 i32x4.extract_lane 0).
const SIMD128_PROBE = new Uint8Array([
  0, 97, 115, 109, 1, 0, 0, 0, 1, 5, 1, 96, 0, 1, 127, 3, 2, 1, 0, 10, 25, 1, 23, 0, 253, 12, 0, 0, 0, 0, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0, 0, 0, 253, 27, 0, 11,
]);

/** True when the host's WebAssembly has SIMD128. */
export function hasSimd128(): boolean {
  return validates(SIMD128_PROBE);
}

const relaxedVerdicts = new Map<string, Promise<WebAssembly.Module | null>>();

/** The relaxed build if this host compiles it and computes it exactly, else null (once per location). */
function exactRelaxed(base?: string | URL): Promise<WebAssembly.Module | null> {
  const key = String(base ?? "");
  let verdict = relaxedVerdicts.get(key);
  if (!verdict) {
    verdict = (async () => {
      try {
        const module = await compileVariant("relaxed", base);
        return (await EngineInstance.create(module)).relaxedExact ? module : null;
      } catch {
        return null; // no relaxed SIMD here (Node 20 without its flag), or the file is missing
      }
    })();
    relaxedVerdicts.set(key, verdict);
  }
  return verdict;
}

/**
 * The module to run single-threaded. Both builds give the same vectors, so the choice is by speed
 * and correctness: the relaxed build only where its dot product lowers to one instruction (Arm's
 * sdot) — on x86-64, V8 lowers it to three and SIMD128 is faster (docs/engine.md, "Speed") — and
 * only after its own emb_relaxed_probe_wasm finds it exact (Node 20 computes it wrongly).
 * `prefer` forces a build; "relaxed" fails where the probe does.
 */
export async function chooseModule(
  prefer: "auto" | "simd128" | "relaxed" = "auto",
  base?: string | URL,
): Promise<{ module: WebAssembly.Module; variant: Build }> {
  if (env.compileWasm && !presetModules.has("simd128") && !hasSimd128()) {
    throw new BackendUnavailable(
      "this JavaScript engine has no WebAssembly SIMD; edgembed needs it (Chrome/Edge 91+, Firefox 89+, Safari 16.4+, Node 16.4+, Deno, Bun)",
    );
  }
  const tryRelaxed = prefer === "relaxed" || (prefer === "auto" && env.arch === "arm64");
  if (tryRelaxed && (presetModules.has("relaxed") || env.compileWasm)) {
    const module = await exactRelaxed(base);
    if (module) return { module, variant: "relaxed" };
  }
  if (prefer === "relaxed") {
    throw new BackendUnavailable(
      "this host cannot run the relaxed-SIMD engine exactly (Node 20 computes its dot product wrongly); use build \"simd128\"",
    );
  }
  return { module: await compileVariant("simd128", base), variant: "simd128" };
}

/**
 * The memory limits (64 KiB pages) a module's imported memory needs, read from its import
 * section; the threads variant is instantiated with a shared memory of at least these.
 */
export function importedMemoryLimits(bytes: Uint8Array): { initial: number; maximum: number } {
  let pos = 8;
  const leb = (): number => {
    let result = 0;
    let shift = 0;
    for (;;) {
      const b = bytes[pos++];
      result += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if (b < 0x80) return result;
    }
  };
  const skipName = (): void => {
    const n = leb();
    pos += n;
  };
  const limits = (): { initial: number; maximum: number } => {
    const flags = bytes[pos++];
    const initial = leb();
    const maximum = flags & 1 ? leb() : 65536;
    return { initial, maximum };
  };
  while (pos < bytes.length) {
    const id = bytes[pos++];
    const size = leb();
    const end = pos + size;
    if (id === 2) {
      const count = leb();
      for (let i = 0; i < count; i++) {
        skipName();
        skipName();
        const kind = bytes[pos++];
        if (kind === 0) leb();
        else if (kind === 1) {
          pos++;
          limits();
        } else if (kind === 2) return limits();
        else if (kind === 3) pos += 2;
        else if (kind === 4) {
          pos++;
          leb();
        }
      }
    }
    pos = end;
  }
  throw new BackendUnavailable("the threads engine module imports no memory; rebuild it with `./build.sh wasm`");
}

/** A new shared memory for the threads variant. */
export function sharedMemory(limits: { initial: number; maximum: number }): WebAssembly.Memory {
  return new WebAssembly.Memory({ initial: limits.initial, maximum: limits.maximum, shared: true });
}
