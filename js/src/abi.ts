/**
 * The engine's C ABI (runtime/include/edgembed.h) as the wasm exports show it, written down once
 * for the npm package: statuses, enums, the struct layouts and the exports' signatures.
 *
 *   edgembed.h ─► python/edgembed/backends/_abi.py   (native through ctypes, wasmtime, Pyodide)
 *              └─► here                               (bindings.ts, the only user of the exports)
 *
 * tests/python/test_abi.py parses the header and wasm/exports.c and checks this file and the
 * Python module against them (it reads the tables below as written: keep their one-entry-a-line
 * form). Every export takes and returns i32: wasm32 pointers and size_t are 4 bytes.
 */

/** emb_status. */
export const Status = Object.freeze({
  OK: 0,
  INVALID_ARGUMENT: 1,
  OUT_OF_MEMORY: 2,
  BUFFER_TOO_SMALL: 3,
  BAD_MAGIC: 4,
  BAD_VERSION: 5,
  TRUNCATED: 6,
  CORRUPT: 7,
  UNSUPPORTED: 8,
  TOO_LONG: 9,
} as const);

/** The statuses that say a bundle cannot be read (BundleError). */
export const BUNDLE_STATUSES: ReadonlySet<number> = new Set([
  Status.BAD_MAGIC,
  Status.BAD_VERSION,
  Status.TRUNCATED,
  Status.CORRUPT,
  Status.UNSUPPORTED,
]);

/**
 * emb_pooling, by the names the package uses: "model" (the bundle's own), then each mode as the
 * bundle's "pooling" metadata and sentence-transformers spell it (POOLING_NAMES in _abi.py).
 */
export const POOLING = Object.freeze({
  model: 0,
  mean: 1,
  cls: 2,
  max: 3,
  lasttoken: 4,
  mean_sqrt_len_tokens: 5,
  weightedmean: 6,
} as const);

export type Pooling = keyof typeof POOLING;

/** The pooling a model reports (emb_model_info.pooling): "mean", "cls", "weightedmean", … */
export function poolingName(code: number): Exclude<Pooling, "model"> {
  for (const [name, value] of Object.entries(POOLING)) if (value === code && name !== "model") return name as Exclude<Pooling, "model">;
  throw new RangeError(`unknown pooling code ${code} from the engine; this package is older than its engine module`);
}

/** emb_output_kind: what emb_context_run computes. */
export const OUTPUT = Object.freeze({
  embedding: 0,
  tokens: 1,
  scores: 2,
  sparse: 3,
} as const);

/** emb_head: what a model ends with beyond the encoder (emb_model_config.head). */
export const HEAD = Object.freeze({
  none: 0,
  classifier: 1,
  mlm: 2,
} as const);

/** emb_sparse_pooling: how the sparse output folds a sequence's token rows into one. */
export const SPARSE_POOLING = Object.freeze({
  model: 0,
  max: 1,
  sum: 2,
} as const);

/** What emb_kernels_wasm() returns (EMB_KERNELS_* of runtime/src/kernels.h). */
export const WASM_KERNELS: Readonly<Record<number, string>> = Object.freeze({
  0: "reference",
  1: "simd128",
  2: "relaxed",
});

/**
 * The structs the package reads or writes in wasm memory: their fields, in order. In wasm32 each
 * of these fields is 4 bytes (int32_t, uint32_t, size_t or a pointer; tests/python/test_abi.py
 * checks it), so field i is the i-th int32 and a struct is 4 × its fields bytes. Their offsets are
 * asserted in edgembed.h.
 */
export const STRUCT_FIELDS = Object.freeze({
  emb_model_info: ["dim", "n_layers", "n_heads", "ffn_dim", "vocab_size", "max_length", "pooling", "normalize", "version"],
  emb_model_config: ["version", "dim", "hidden_dim", "n_layers", "n_heads", "ffn_dim", "vocab_size", "max_length", "type_vocab_size", "pooling", "include_prompt", "normalize", "n_dense", "head", "n_labels", "sparse_pooling"],
  emb_request: ["ids", "lengths", "type_ids", "prompt_lengths", "n_seqs", "output", "pooling", "normalize", "include_prompt", "top_k", "per_token"],
  emb_output: ["values", "values_cap", "n_rows", "row_size", "indices"],
} as const);

export type StructName = keyof typeof STRUCT_FIELDS;
export type StructValues<S extends StructName> = Readonly<Record<(typeof STRUCT_FIELDS)[S][number], number>>;

/** Bytes of a struct in wasm32 memory. */
export function structBytes(name: StructName): number {
  return 4 * STRUCT_FIELDS[name].length;
}

/** A struct's fields from its int32 words in wasm memory (a view of structBytes(name) / 4 int32). */
export function unpackStruct<S extends StructName>(name: S, words: Int32Array): StructValues<S> {
  const out: Record<string, number> = {};
  STRUCT_FIELDS[name].forEach((field, i) => {
    out[field] = words[i];
  });
  return out as StructValues<S>;
}

/** A struct's int32 words for wasm memory; a field not given is 0 (NULL). */
export function packStruct<S extends StructName>(name: S, values: Partial<StructValues<S>>): Int32Array {
  const fields: readonly string[] = STRUCT_FIELDS[name];
  for (const key of Object.keys(values)) {
    if (!fields.includes(key)) throw new RangeError(`${name} has no field ${key}`);
  }
  return Int32Array.from(fields, (field) => (values as Record<string, number>)[field] ?? 0);
}

export const MODEL_INFO_BYTES = structBytes("emb_model_info");
export const MODEL_CONFIG_BYTES = structBytes("emb_model_config");
export const REQUEST_BYTES = structBytes("emb_request");
export const OUTPUT_BYTES = structBytes("emb_output");

/** Bytes of a size_t out-parameter in wasm32 memory. */
export const WASM_SIZE_T_BYTES = 4;

/**
 * The exports of every edgembed*.wasm (wasm/exports.c): their parameters, every one an i32, and
 * whether they return an i32. emb_X_wasm wraps emb_X of edgembed.h with the same parameters.
 */
export const EXPORTS = Object.freeze({
  emb_alloc_wasm: { params: ["size"], returns: "i32" },
  emb_free_wasm: { params: ["ptr"], returns: "void" },
  emb_bundle_versions_wasm: { params: [], returns: "i32" },
  emb_kernels_wasm: { params: [], returns: "i32" },
  emb_relaxed_probe_wasm: { params: [], returns: "i32" },
  emb_status_str_wasm: { params: ["status"], returns: "i32" },
  emb_model_init_wasm: { params: ["out", "bundle", "size"], returns: "i32" },
  emb_model_free_wasm: { params: ["model"], returns: "void" },
  emb_model_get_info_wasm: { params: ["model", "info"], returns: "void" },
  emb_model_get_config_wasm: { params: ["model", "config"], returns: "void" },
  emb_model_get_meta_wasm: { params: ["model", "key", "len"], returns: "i32" },
  emb_model_tokenize_wasm: { params: ["model", "utf8", "len", "truncate", "ids", "cap", "n_ids", "n_full"], returns: "i32" },
  emb_model_tokenize_ex_wasm: { params: ["model", "utf8", "len", "pair", "pair_len", "truncate", "ids", "type_ids", "offsets", "cap", "n_ids", "n_full"], returns: "i32" },
  emb_utf8_offsets_to_chars_wasm: { params: ["utf8", "len", "offsets", "n", "utf16"], returns: "i32" },
  emb_context_init_wasm: { params: ["out", "model", "max_tokens"], returns: "i32" },
  emb_context_free_wasm: { params: ["ctx"], returns: "void" },
  emb_context_max_tokens_wasm: { params: ["ctx"], returns: "i32" },
  emb_context_encode_wasm: { params: ["ctx", "ids", "lengths", "n_seqs", "pooling", "normalize", "out", "out_cap"], returns: "i32" },
  emb_context_run_wasm: { params: ["ctx", "request", "output"], returns: "i32" },
} as const);

type ExportSpec = { readonly params: readonly string[]; readonly returns: "i32" | "void" };
type Numbers<P extends readonly string[]> = { -readonly [I in keyof P]: number };
type ExportFn<S extends ExportSpec> = (...args: Numbers<S["params"]>) => S["returns"] extends "i32" ? number : void;

/** The typed exports of an instance: the functions above, plus memory (or __stack_pointer for the threads build). */
export type Exports = { readonly [K in keyof typeof EXPORTS]: ExportFn<(typeof EXPORTS)[K]> } & {
  readonly memory?: WebAssembly.Memory;
  readonly __stack_pointer?: WebAssembly.Global;
};

/** The names in EXPORTS that `exports` lacks or has as something other than a function. */
export function missingExports(exports: WebAssembly.Exports): string[] {
  return Object.keys(EXPORTS).filter((name) => typeof exports[name] !== "function");
}
