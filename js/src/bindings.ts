/**
 * The only module that touches the engine's wasm exports: EngineInstance, one instance of an
 * engine module with typed calls (the exports' signatures, statuses and struct layouts are in
 * abi.ts). Everything else in the package works with the objects it returns.
 *
 *   modules.ts: WebAssembly.Module ─► EngineInstance (here: its memory, its stack, typed calls)
 *                                          └─► EngineSession (session.ts: model + context + buffers)
 *
 * Memory: every export takes and returns i32 (wasm32 pointers and sizes). The host allocates its
 * buffers with emb_alloc_wasm (64-byte aligned) and reads and writes them through views of the
 * memory, re-made after every call that may grow it. The threads build imports a shared
 * env.memory and exports __stack_pointer, which every instance after the first must point at a
 * stack of its own (allocStack) before its first call.
 */
import {
  BUNDLE_STATUSES,
  HEAD,
  MODEL_CONFIG_BYTES,
  MODEL_INFO_BYTES,
  missingExports,
  OUTPUT_BYTES,
  packStruct,
  poolingName,
  REQUEST_BYTES,
  SPARSE_POOLING,
  Status,
  unpackStruct,
  WASM_KERNELS,
  WASM_SIZE_T_BYTES,
  type Exports,
} from "./abi.js";
import { BackendUnavailable, BundleError, EngineError, InputError, InputTooLong } from "./errors.js";

/** Stack of each thread's instance, as linked (-z stack-size=262144 in runtime/tools/build_wasm.py). */
export const THREAD_STACK_BYTES = 262144;

/** emb_model_info, as the package names it. */
export interface ModelInfo {
  readonly dim: number;
  readonly nLayers: number;
  readonly nHeads: number;
  readonly ffnDim: number;
  readonly vocabSize: number;
  readonly maxLength: number;
  readonly pooling: ReturnType<typeof poolingName>;
  readonly normalize: boolean;
  readonly version: number;
  /** emb_model_config: the length of a token's hidden state (dim is the embedding's). */
  readonly hiddenDim: number;
  /** Token types a request may give (0: none). */
  readonly typeVocabSize: number;
  /** false: leading prompt tokens are left out of the pooling (EncodeOptions.promptLengths). */
  readonly includePrompt: boolean;
  readonly nDense: number;
  /**
   * What the model ends with: "none" (an embedding model), "classifier" (a cross-encoder's
   * sequence-classification head: Reranker) or "mlm" (a masked-LM head: SPLADE, embedSparse).
   */
  readonly head: keyof typeof HEAD;
  /** Logits per sequence of a classifier head (0 otherwise). */
  readonly nLabels: number;
  /** How an mlm head folds a text's token rows into one sparse vector ("max", "sum"); null otherwise. */
  readonly sparsePooling: "max" | "sum" | null;
}

function nameOf<T extends Readonly<Record<string, number>>>(table: T, code: number, what: string): keyof T {
  for (const [name, value] of Object.entries(table)) if (value === code) return name as keyof T;
  throw new RangeError(`unknown ${what} code ${code} from the engine; this package is older than its engine module`);
}

/** One emb_context_run request on buffers in the instance's memory (0: NULL, the default). */
export interface RunRequest {
  ids: number;
  lengths: number;
  nSeqs: number;
  typeIds?: number;
  promptLengths?: number;
  output: number;
  pooling: number;
  normalize: number;
  includePrompt: number;
  /** SPARSE: the k largest weights of each row (0: every weight); needs `indices`. */
  topK?: number;
  /** SPARSE: one row per token instead of per sequence. */
  perToken?: number;
  values: number;
  valuesCap: number;
  /** SPARSE with topK: int32[valuesCap] for the rows' vocabulary ids. */
  indices?: number;
}

/** True for the threads build: it imports its (shared) memory. */
export function moduleImportsMemory(module: WebAssembly.Module): boolean {
  return WebAssembly.Module.imports(module).some((i) => i.kind === "memory");
}

/** Pointer into an engine's memory (opaque to the rest of the package). */
export type Ptr = number & { readonly __ptr: unique symbol };

// scratch for out-parameters: an out pointer or n_ids + n_full (size_t each), a length, model
// info or config, and one request with its output
const OUT_BYTES = Math.max(64, MODEL_INFO_BYTES, MODEL_CONFIG_BYTES);
const RUN_BYTES = REQUEST_BYTES + OUTPUT_BYTES;

export class EngineInstance {
  readonly kernels: string;
  readonly memory: WebAssembly.Memory;
  readonly shared: boolean;
  private readonly x: Exports;
  private readonly scratch: number;
  private readonly run: number;
  private readonly ownStack: number;

  private constructor(x: Exports, memory: WebAssembly.Memory, ownStack: number) {
    this.x = x;
    this.memory = memory;
    this.shared = typeof SharedArrayBuffer === "function" && memory.buffer instanceof SharedArrayBuffer;
    this.ownStack = ownStack;
    this.kernels = WASM_KERNELS[x.emb_kernels_wasm()] ?? "unknown";
    this.scratch = this.alloc(OUT_BYTES);
    this.run = this.alloc(RUN_BYTES);
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
    const v = unpackStruct("emb_model_info", this.i32s(this.scratch, MODEL_INFO_BYTES / 4));
    this.x.emb_model_get_config_wasm(model, this.scratch);
    const c = unpackStruct("emb_model_config", this.i32s(this.scratch, MODEL_CONFIG_BYTES / 4));
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
      hiddenDim: c.hidden_dim,
      typeVocabSize: c.type_vocab_size,
      includePrompt: c.include_prompt !== 0,
      nDense: c.n_dense,
      head: nameOf(HEAD, c.head, "head"),
      nLabels: c.n_labels,
      sparsePooling: c.head === HEAD.mlm ? (nameOf(SPARSE_POOLING, c.sparse_pooling, "sparse pooling") as "max" | "sum") : null,
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

  /** emb_model_tokenize_ex for one text, then its byte offsets as UTF-16 offsets (in place). */
  tokenizeOffsetsRaw(model: Ptr, text: number, len: number, truncate: boolean, ids: number, offsets: number, cap: number): [number, number, number] {
    const nIds = this.scratch + 8;
    const nFull = nIds + WASM_SIZE_T_BYTES;
    let status = this.x.emb_model_tokenize_ex_wasm(model, text, len, 0, 0, truncate ? 1 : 0, ids, 0, offsets, cap, nIds, nFull);
    const n = this.u32At(nIds);
    if (status === Status.OK) status = this.x.emb_utf8_offsets_to_chars_wasm(text, len, offsets, 2 * n, 1);
    return [status, n, this.u32At(nFull)];
  }

  /**
   * emb_model_tokenize_ex for a pair of texts (`text`, then `pair`, both in this memory): ids and
   * their token types, the tokenizer's pair template and truncation strategy.
   */
  tokenizePairRaw(model: Ptr, text: number, len: number, pair: number, pairLen: number, truncate: boolean, ids: number, typeIds: number, cap: number): [number, number, number] {
    const nIds = this.scratch + 8;
    const nFull = nIds + WASM_SIZE_T_BYTES;
    const status = this.x.emb_model_tokenize_ex_wasm(model, text, len, pair, pairLen, truncate ? 1 : 0, ids, typeIds, 0, cap, nIds, nFull);
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

  /** emb_context_run: writes the request and its output struct, calls the engine; [status, n_rows, row_size]. */
  runRaw(ctx: Ptr, r: RunRequest): [number, number, number] {
    const request = packStruct("emb_request", {
      ids: r.ids,
      lengths: r.lengths,
      type_ids: r.typeIds ?? 0,
      prompt_lengths: r.promptLengths ?? 0,
      n_seqs: r.nSeqs,
      output: r.output,
      pooling: r.pooling,
      normalize: r.normalize,
      include_prompt: r.includePrompt,
      top_k: r.topK ?? 0,
      per_token: r.perToken ?? 0,
    });
    const output = packStruct("emb_output", { values: r.values, values_cap: r.valuesCap, indices: r.indices ?? 0 });
    this.i32s(this.run, request.length).set(request);
    this.i32s(this.run + REQUEST_BYTES, output.length).set(output);
    const status = this.x.emb_context_run_wasm(ctx, this.run, this.run + REQUEST_BYTES);
    const back = unpackStruct("emb_output", this.i32s(this.run + REQUEST_BYTES, OUTPUT_BYTES / 4));
    return [status, back.n_rows, back.row_size];
  }

  /** The top of this instance's own stack (threads variant), 0 for the module's default stack. */
  get stackTop(): number {
    return this.ownStack;
  }
}
