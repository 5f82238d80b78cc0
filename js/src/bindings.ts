/**
 * The only module that touches the engine's wasm exports (their signatures, statuses and struct
 * layouts are in abi.ts). Everything else in the package works with the typed objects defined here.
 *
 *   WebAssembly.Module ─► EngineInstance (one instance: its memory, its stack, typed calls)
 *                              └─► EngineSession (a model + a context + buffers: tokenize, encode)
 *
 * Memory: every export takes and returns i32 (wasm32 pointers and sizes). The host allocates its
 * buffers with emb_alloc_wasm (64-byte aligned) and reads and writes them through views of the
 * memory, re-made after every call that may grow it. Variants (build/wasm/ → dist/wasm/):
 *
 *   edgembed.wasm          SIMD128 kernels, own memory                      "simd128"
 *   edgembed-relaxed.wasm  relaxed-SIMD int8 dot products, own memory        "relaxed"
 *                          (on arm64 by default, and only after emb_relaxed_probe_wasm() == 1)
 *   edgembed-threads.wasm  SIMD128, imports a shared env.memory; exports     "threads"
 *                          __stack_pointer, which every instance after the first must point at a
 *                          stack of its own before its first call
 */
import {
  BUNDLE_STATUSES,
  MODEL_INFO_BYTES,
  missingExports,
  POOLING,
  poolingName,
  Status,
  unpackModelInfo,
  WASM_KERNELS,
  WASM_SIZE_T_BYTES,
  type Exports,
  type Pooling,
} from "./abi.js";
import { env } from "./env.js";
import {
  BackendUnavailable,
  BundleError,
  EngineError,
  InputError,
  InputTooLong,
} from "./errors.js";
import { readFileBytes, toPath } from "./host.js";

export type Variant = "simd128" | "relaxed" | "threads";

/** The file name of each variant, under dist/wasm/ (package subpath `edgembed/wasm/<file>`). */
export const WASM_FILES: Readonly<Record<Variant, string>> = Object.freeze({
  simd128: "edgembed.wasm",
  relaxed: "edgembed-relaxed.wasm",
  threads: "edgembed-threads.wasm",
});

/** Stack of each thread's instance, as linked (-z stack-size=262144 in runtime/tools/build_wasm.py). */
export const THREAD_STACK_BYTES = 262144;

export type { Pooling };

/** emb_model_info, as the package names it. */
export interface ModelInfo {
  readonly dim: number;
  readonly nLayers: number;
  readonly nHeads: number;
  readonly ffnDim: number;
  readonly vocabSize: number;
  readonly maxLength: number;
  readonly pooling: "mean" | "cls";
  readonly normalize: boolean;
  readonly version: number;
}

// ── modules ────────────────────────────────────────────────────────────────────────────────

/** Modules given ahead of time (the Cloudflare Workers entry imports them), by variant. */
const presetModules = new Map<Variant, WebAssembly.Module>();
const compiled = new Map<string, Promise<WebAssembly.Module>>();

/** Registers ready modules, e.g. `import m from "edgembed/wasm/edgembed.wasm"` in a Worker. */
export function provideModules(modules: Partial<Record<Variant, WebAssembly.Module>>): void {
  for (const [k, m] of Object.entries(modules)) if (m) presetModules.set(k as Variant, m);
}

function wasmUrl(variant: Variant, base?: string | URL): URL {
  const dir = base === undefined ? new URL("./wasm/", import.meta.url) : new URL(String(base).replace(/\/?$/, "/"), import.meta.url);
  return new URL(WASM_FILES[variant], dir);
}

/** The bytes of a variant's .wasm file (the pool sends them to workers that compile for themselves). */
export async function wasmBytes(variant: Variant, base?: string | URL): Promise<Uint8Array> {
  const url = wasmUrl(variant, base);
  if (url.protocol === "file:" && env.fileSystem) return readFileBytes(toPath(url));
  const res = await fetch(url);
  if (!res.ok) throw new BackendUnavailable(`cannot load the engine from ${url.href} (HTTP ${res.status}); serve dist/wasm/ next to the package files or pass wasmBase`);
  return new Uint8Array(await res.arrayBuffer());
}

/** The compiled module of a variant (compiled once per variant and location). */
export function compileVariant(variant: Variant, base?: string | URL): Promise<WebAssembly.Module> {
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
): Promise<{ module: WebAssembly.Module; variant: Variant }> {
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
      "this host cannot run the relaxed-SIMD engine exactly (Node 20 computes its dot product wrongly); use variant \"simd128\"",
    );
  }
  return { module: await compileVariant("simd128", base), variant: "simd128" };
}

/** True for the threads build: it imports its (shared) memory. */
export function moduleImportsMemory(module: WebAssembly.Module): boolean {
  return WebAssembly.Module.imports(module).some((i) => i.kind === "memory");
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

// ── one instance ───────────────────────────────────────────────────────────────────────────

/** Pointer into an engine's memory (opaque to the rest of the package). */
export type Ptr = number & { readonly __ptr: unique symbol };

// scratch for out-parameters: an out pointer or n_ids + n_full (size_t each), a length, model info
const OUT_BYTES = Math.max(64, MODEL_INFO_BYTES);

export class EngineInstance {
  readonly kernels: string;
  readonly memory: WebAssembly.Memory;
  readonly shared: boolean;
  private readonly x: Exports;
  private readonly scratch: number;
  private readonly ownStack: number;

  private constructor(x: Exports, memory: WebAssembly.Memory, ownStack: number) {
    this.x = x;
    this.memory = memory;
    this.shared = typeof SharedArrayBuffer === "function" && memory.buffer instanceof SharedArrayBuffer;
    this.ownStack = ownStack;
    this.kernels = WASM_KERNELS[x.emb_kernels_wasm()] ?? "unknown";
    this.scratch = this.alloc(OUT_BYTES);
  }

  /**
   * Instantiates `module`. For the threads variant pass its shared `memory`; every instance but
   * the first also needs `stackTop`, the top of a THREAD_STACK_BYTES stack allocated for it by
   * the first instance (see allocStack).
   */
  static async create(
    module: WebAssembly.Module,
    options: { memory?: WebAssembly.Memory; stackTop?: number } = {},
  ): Promise<EngineInstance> {
    const imports: WebAssembly.Imports = {};
    if (moduleImportsMemory(module)) {
      if (!options.memory) throw new BackendUnavailable("the threads engine needs a shared memory");
      imports.env = { memory: options.memory };
    }
    const instance = await WebAssembly.instantiate(module, imports);
    const missing = missingExports(instance.exports);
    if (missing.length > 0) {
      throw new BackendUnavailable(`this engine module lacks the exports ${missing.join(", ")}: it is older or newer than the package; rebuild it with \`./build.sh wasm\``);
    }
    const x = instance.exports as unknown as Exports;
    if (options.stackTop !== undefined) {
      if (!x.__stack_pointer) throw new BackendUnavailable("this engine module has no __stack_pointer to set");
      x.__stack_pointer.value = options.stackTop;
    }
    const memory = x.memory ?? options.memory!;
    const versions = x.emb_bundle_versions_wasm();
    if (versions >>> 16 < 1) throw new BackendUnavailable("this engine module reports no bundle versions; rebuild it");
    return new EngineInstance(x, memory, options.stackTop ?? 0);
  }

  /** Bundle format versions this engine reads: [min, max]. */
  get bundleVersions(): [number, number] {
    const v = this.x.emb_bundle_versions_wasm();
    return [v >>> 16, v & 0xffff];
  }

  /** The relaxed build's own check that this host computes its dot product exactly. */
  get relaxedExact(): boolean {
    return this.x.emb_relaxed_probe_wasm() === 1;
  }

  /**
   * The memory's buffer, at least `end` bytes long. A shared memory grown by another thread's
   * instance can leave this thread's buffer object short (seen in Deno): grow(0) refreshes it.
   */
  private buf(end: number): ArrayBufferLike {
    let b = this.memory.buffer;
    if (b.byteLength < end) {
      this.memory.grow(0);
      b = this.memory.buffer;
    }
    return b;
  }

  /** A view of `n` bytes at `ptr` (valid until the next call into the engine). */
  bytes(ptr: number, n: number): Uint8Array {
    return new Uint8Array(this.buf(ptr + n), ptr, n);
  }

  /** A view of `n` int32 at `ptr` (valid until the next call into the engine). */
  i32s(ptr: number, n: number): Int32Array {
    return new Int32Array(this.buf(ptr + 4 * n), ptr, n);
  }

  /** A view of `n` float32 at `ptr` (valid until the next call into the engine). */
  f32s(ptr: number, n: number): Float32Array {
    return new Float32Array(this.buf(ptr + 4 * n), ptr, n);
  }

  private u32At(ptr: number): number {
    return new Uint32Array(this.buf(ptr + 4), ptr, 1)[0];
  }

  alloc(size: number): number {
    const p = this.x.emb_alloc_wasm(size) >>> 0;
    if (p === 0) throw new EngineError(`the engine could not allocate ${size} bytes (wasm memory is limited to 4 GiB, 1 GiB for threads)`, Status.OUT_OF_MEMORY);
    return p;
  }

  free(ptr: number): void {
    if (ptr) this.x.emb_free_wasm(ptr);
  }

  /** A stack for another instance of the threads variant on this memory; returns its top. */
  allocStack(): { base: number; top: number } {
    const base = this.alloc(THREAD_STACK_BYTES);
    return { base, top: base + THREAD_STACK_BYTES };
  }

  statusText(status: number): string {
    const p = this.x.emb_status_str_wasm(status) >>> 0;
    const u8 = new Uint8Array(this.buf(p + 1));
    let end = p;
    while (end < u8.length && u8[end] !== 0) end++;
    return new TextDecoder().decode(u8.slice(p, end));
  }

  fail(status: number, what: string): never {
    const text = this.statusText(status);
    if (BUNDLE_STATUSES.has(status)) {
      const [lo, hi] = this.bundleVersions;
      throw new BundleError(`${what}: ${text} (this engine reads bundle versions ${lo} through ${hi})`);
    }
    if (status === Status.TOO_LONG) throw new InputTooLong(`${what}: ${text}`);
    if (status === Status.INVALID_ARGUMENT) throw new InputError(`${what}: ${text}`);
    throw new EngineError(`${what}: ${text}`, status);
  }

  /** Copies a bundle into this instance's memory and reads it. The copy lives as long as the model. */
  loadModel(bundle: Uint8Array): { model: Ptr; bundle: number } {
    if (bundle.length === 0) throw new BundleError("the bundle is empty (0 bytes); check its URL or path");
    const at = this.alloc(bundle.length);
    this.bytes(at, bundle.length).set(bundle);
    const status = this.x.emb_model_init_wasm(this.scratch, at, bundle.length);
    if (status !== Status.OK) {
      this.free(at);
      this.fail(status, "cannot read the bundle");
    }
    return { model: this.u32At(this.scratch) as Ptr, bundle: at };
  }

  freeModel(model: Ptr, bundle: number): void {
    this.x.emb_model_free_wasm(model);
    this.free(bundle);
  }

  modelInfo(model: Ptr): ModelInfo {
    this.x.emb_model_get_info_wasm(model, this.scratch);
    const v = unpackModelInfo(this.i32s(this.scratch, MODEL_INFO_BYTES / 4));
    return Object.freeze({
      dim: v.dim,
      nLayers: v.n_layers,
      nHeads: v.n_heads,
      ffnDim: v.ffn_dim,
      vocabSize: v.vocab_size,
      maxLength: v.max_length,
      pooling: poolingName(v.pooling),
      normalize: v.normalize !== 0,
      version: v.version,
    });
  }

  /** A string of the bundle's metadata, or null. */
  modelMeta(model: Ptr, key: string): string | null {
    const k = new TextEncoder().encode(key + "\0");
    const kp = this.alloc(k.length);
    try {
      this.bytes(kp, k.length).set(k);
      const p = this.x.emb_model_get_meta_wasm(model, kp, this.scratch) >>> 0;
      if (p === 0) return null;
      const len = this.u32At(this.scratch);
      return new TextDecoder().decode(this.bytes(p, len).slice());
    } finally {
      this.free(kp);
    }
  }

  // Calls for EngineSession.
  tokenizeRaw(model: Ptr, text: number, len: number, truncate: boolean, ids: number, cap: number): [number, number, number] {
    const nIds = this.scratch + 8;
    const nFull = nIds + WASM_SIZE_T_BYTES;
    const status = this.x.emb_model_tokenize_wasm(model, text, len, truncate ? 1 : 0, ids, cap, nIds, nFull);
    return [status, this.u32At(nIds), this.u32At(nFull)];
  }

  contextInit(model: Ptr, maxTokens: number): Ptr {
    const status = this.x.emb_context_init_wasm(this.scratch, model, maxTokens);
    if (status !== Status.OK) this.fail(status, `cannot plan a context for ${maxTokens} tokens`);
    return this.u32At(this.scratch) as Ptr;
  }

  contextFree(ctx: Ptr): void {
    this.x.emb_context_free_wasm(ctx);
  }

  encodeRaw(ctx: Ptr, ids: number, lengths: number, nSeqs: number, pooling: number, normalize: number, out: number, outCap: number): number {
    return this.x.emb_context_encode_wasm(ctx, ids, lengths, nSeqs, pooling, normalize, out, outCap);
  }

  /** The top of this instance's own stack (threads variant), 0 for the module's default stack. */
  get stackTop(): number {
    return this.ownStack;
  }
}

// ── model + context: what Embedder and the pool workers use ─────────────────────────────────

export interface EncodeOptions {
  truncate: boolean;
  pooling: Pooling;
  /** <0 the model's choice, 0 raw pooled vectors, >0 L2-normalized (by the engine). */
  normalize: number;
}

/**
 * A model and one context on an EngineInstance. Texts are tokenized straight into the context's
 * id buffer and encoded in packs of at most maxTokens tokens (no padding: the engine packs
 * sequences back to back), so a call allocates nothing in wasm memory except for texts longer
 * than any seen before.
 */
export class EngineSession {
  readonly instance: EngineInstance;
  readonly info: ModelInfo;
  readonly maxTokens: number;
  private model: Ptr;
  private readonly ownsModel: { bundle: number } | null;
  private ctx: Ptr;
  private readonly ids: number; // int32[maxTokens]
  private readonly lengths: number; // int32[maxSeqs]
  private readonly out: number; // float32[maxSeqs * dim]
  private readonly maxSeqs: number;
  private text = 0;
  private textCap = 0;
  private readonly encoder = new TextEncoder();

  /** A session over `model`; with `ownsModel` the session frees the model (and its bundle copy) on dispose. */
  constructor(instance: EngineInstance, model: Ptr, ownsModel: { bundle: number } | null, maxTokens: number) {
    this.instance = instance;
    this.model = model;
    this.ownsModel = ownsModel;
    this.info = instance.modelInfo(model);
    if (!Number.isInteger(maxTokens) || maxTokens < this.info.maxLength) {
      throw new InputError(`maxTokens must be an integer of at least the model's max length (${this.info.maxLength}), got ${maxTokens}`);
    }
    this.maxTokens = maxTokens;
    this.maxSeqs = Math.floor(maxTokens / 2); // every sequence holds at least [CLS] and [SEP]
    this.ctx = instance.contextInit(model, maxTokens);
    this.ids = instance.alloc(4 * maxTokens);
    this.lengths = instance.alloc(4 * this.maxSeqs);
    this.out = instance.alloc(4 * this.maxSeqs * this.info.dim);
  }

  /** Loads `bundle` into a fresh instance of `module` and opens a session on it. */
  static async open(module: WebAssembly.Module, bundle: Uint8Array, maxTokens: number): Promise<EngineSession> {
    const instance = await EngineInstance.create(module);
    const { model, bundle: at } = instance.loadModel(bundle);
    return new EngineSession(instance, model, { bundle: at }, maxTokens);
  }

  meta(key: string): string | null {
    return this.instance.modelMeta(this.model, key);
  }

  private writeText(text: string): number {
    const bytes = this.encoder.encode(text);
    if (bytes.length + 1 > this.textCap) {
      this.instance.free(this.text);
      this.textCap = Math.max(1024, 2 ** Math.ceil(Math.log2(bytes.length + 1)));
      this.text = this.instance.alloc(this.textCap);
    }
    this.instance.bytes(this.text, bytes.length).set(bytes);
    return bytes.length;
  }

  /** Tokenizes `text` into the id buffer at `offset`; returns the ids' count, or -1 if they do not fit. */
  private tokenizeAt(text: string, index: number, truncate: boolean, offset: number): number {
    const len = this.writeText(text);
    const [status, nIds, nFull] = this.instance.tokenizeRaw(
      this.model, this.text, len, truncate, this.ids + 4 * offset, this.maxTokens - offset,
    );
    if (status === Status.BUFFER_TOO_SMALL && offset > 0) return -1;
    if (status === Status.TOO_LONG) {
      throw new InputTooLong(
        `text ${index} has ${nFull} tokens, over the model's max length of ${this.info.maxLength}; ` +
          `shorten it or pass truncate: true`,
      );
    }
    if (status !== Status.OK) this.instance.fail(status, `cannot tokenize text ${index}`);
    return nIds;
  }

  /** Token ids of each text ([CLS] … [SEP]). */
  tokenize(texts: readonly string[], truncate = true): Int32Array[] {
    this.check();
    return texts.map((t, i) => {
      const n = this.tokenizeAt(t, i, truncate, 0);
      return this.instance.i32s(this.ids, n).slice();
    });
  }

  /** Token counts ([CLS] and [SEP] included) after truncation to the model's max length. */
  countTokens(texts: readonly string[]): number[] {
    this.check();
    return texts.map((t, i) => this.tokenizeAt(t, i, true, 0));
  }

  /** One vector per text, in order. */
  encode(texts: readonly string[], options: EncodeOptions): Float32Array[] {
    this.check();
    const dim = this.info.dim;
    const pooling = POOLING[options.pooling];
    const results = new Array<Float32Array>(texts.length);
    let filled = 0;
    const pending: number[] = [];
    const flush = (): void => {
      if (pending.length === 0) return;
      const status = this.instance.encodeRaw(
        this.ctx, this.ids, this.lengths, pending.length, pooling, options.normalize, this.out, pending.length * dim,
      );
      if (status !== Status.OK) this.instance.fail(status, "the engine could not encode the batch");
      const f32 = this.instance.f32s(this.out, pending.length * dim);
      pending.forEach((textIndex, j) => {
        results[textIndex] = f32.slice(j * dim, (j + 1) * dim);
      });
      pending.length = 0;
      filled = 0;
    };
    for (let i = 0; i < texts.length; i++) {
      let n = this.tokenizeAt(texts[i], i, options.truncate, filled);
      if (n < 0) {
        flush();
        n = this.tokenizeAt(texts[i], i, options.truncate, 0);
      }
      this.instance.i32s(this.lengths, this.maxSeqs)[pending.length] = n;
      pending.push(i);
      filled += n;
      if (pending.length === this.maxSeqs || this.maxTokens - filled < 2) flush();
    }
    flush();
    return results;
  }

  get disposed(): boolean {
    return this.ctx === 0;
  }

  private check(): void {
    if (this.ctx === 0) throw new InputError("this engine session was disposed");
  }

  /** Frees the context, the buffers and (when owned) the model. Safe to call twice. */
  dispose(): void {
    if (this.ctx === 0) return;
    const i = this.instance;
    i.contextFree(this.ctx);
    i.free(this.ids);
    i.free(this.lengths);
    i.free(this.out);
    i.free(this.text);
    if (this.ownsModel) i.freeModel(this.model, this.ownsModel.bundle);
    this.ctx = 0 as Ptr;
    this.model = 0 as Ptr;
  }
}
