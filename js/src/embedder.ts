/**
 * Embedder: one engine instance in this thread.
 *
 *   texts ─► (prompt) ─► engine: tokenize (normalizer, pre_tokenizer, wordpiece, post_processor)
 *         ─► encoder ─► pooling (without the prompt's tokens if the model says so) ─► Dense
 *         ─► L2 norm (as the model does) ─► (dimensions: cut, renormalize) ─► Float32Array per text
 */
import { POOLING, type Pooling } from "./abi.js";
import { EngineInstance, moduleImportsMemory, type ModelInfo } from "./bindings.js";
import { chooseModule, type Build } from "./modules.js";
import { EngineSession, type SparseRow, type TokenOffsets } from "./session.js";
import { EmbedderDisposed, InputError } from "./errors.js";
import { loadBytes, type BundleSource, type LoadOptions } from "./loader.js";

export interface EngineOptions {
  /**
   * A compiled engine module, for hosts that cannot compile WebAssembly from bytes (Cloudflare
   * Workers: `import engine from "edgembed/wasm/edgembed.wasm"`). Default: the best variant of
   * the package's own .wasm files for this host.
   */
  engineModule?: WebAssembly.Module;
  /**
   * Which engine build (.wasm) runs. "auto" (default): relaxed SIMD on arm64 hosts that compute
   * it exactly, else SIMD128 (faster on x86-64 under Node 22 and Bun; under Deno 2.9 on a CPU
   * with AVX-VNNI "relaxed" is faster). Both give the same vectors. ("variant" names a model's
   * quantization, as in the Python package.)
   */
  build?: "auto" | "simd128" | "relaxed";
  /** @deprecated the old name of `build`: it still works, and must agree with `build` if both are given. */
  variant?: "auto" | "simd128" | "relaxed";
  /** Where the package's .wasm files are served, when a bundler moved them (default: dist/wasm/). */
  wasmBase?: string | URL;
  /**
   * Most tokens the engine encodes in one call (all texts together), at least the model's max
   * length; default 2048, or the model's max length when that is longer (ModernBERT: 8192).
   */
  maxTokens?: number;
}

/**
 * The model's prompts (sentence-transformers' `prompts` and `default_prompt_name` of
 * config_sentence_transformers.json; `embed info MODEL --json` shows them). A bundle does not
 * carry them: give them here to use `promptName`, `embedQuery` and `embedDocument`.
 */
export interface PromptOptions {
  /** Prompt texts by name, e.g. `{ query: "query: ", passage: "passage: " }`. */
  prompts?: Readonly<Record<string, string>>;
  /** The prompt an embed call uses when it names none (one of `prompts`). */
  defaultPromptName?: string | null;
}

export interface EmbedderOptions extends LoadOptions, EngineOptions, PromptOptions {}

/** The names embedDocument looks for, in order (sentence-transformers' encode_document). */
const DOCUMENT_PROMPTS = ["document", "passage", "corpus"] as const;

/** Validated prompts of a model. */
export class Prompts {
  readonly byName: Readonly<Record<string, string>>;
  readonly defaultName: string | null;

  constructor(options: PromptOptions) {
    const { prompts = {}, defaultPromptName = null } = options;
    if (typeof prompts !== "object" || prompts === null || Array.isArray(prompts)) {
      throw new InputError("prompts must be an object of prompt texts by name, e.g. { query: \"query: \" }");
    }
    for (const [name, text] of Object.entries(prompts)) {
      if (typeof text !== "string") throw new InputError(`prompts.${name} is ${typeof text}, not a string`);
    }
    if (defaultPromptName !== null && !Object.hasOwn(prompts, defaultPromptName)) {
      throw new InputError(`defaultPromptName ${JSON.stringify(defaultPromptName)} is not one of the prompts (${this.list(prompts)})`);
    }
    this.byName = Object.freeze({ ...prompts });
    this.defaultName = defaultPromptName;
  }

  private list(prompts: Readonly<Record<string, string>>): string {
    return Object.keys(prompts).join(", ") || "none given";
  }

  /**
   * The text put before each text: `prefix` as given, the prompt called `promptName`, or (neither
   * given) the default prompt — "" when there is none. As sentence-transformers' prompt= and
   * prompt_name=, and edgembed's Python Embedder.prompt().
   */
  resolve(prefix: string | undefined, promptName: string | undefined): string {
    if (prefix !== undefined && promptName !== undefined) throw new InputError("give prefix or promptName, not both");
    if (prefix !== undefined) {
      if (typeof prefix !== "string") throw new InputError("prefix must be a string");
      return prefix;
    }
    if (promptName !== undefined) {
      if (!Object.hasOwn(this.byName, promptName)) {
        throw new InputError(`the model has no prompt named ${JSON.stringify(promptName)} (its prompts: ${this.list(this.byName)}); pass prompts to load()`);
      }
      return this.byName[promptName];
    }
    return this.defaultName === null ? "" : this.byName[this.defaultName];
  }

  /** The query prompt's text ("" without one): what embedQuery puts before each text. */
  get query(): string {
    return this.byName.query ?? "";
  }

  /** The first of the document, passage and corpus prompts ("" without one). */
  get document(): string {
    const name = DOCUMENT_PROMPTS.find((n) => Object.hasOwn(this.byName, n));
    return name === undefined ? "" : this.byName[name];
  }
}

export interface EmbedOptions {
  /** L2-normalize each vector; default: as the model does (its Normalize module, `info.normalize`). */
  normalize?: boolean;
  /**
   * The prompt text put before every text (e.g. "query: " for e5 models); "" for none, even when
   * the model has a default prompt. A model whose pooling leaves the prompt out
   * (`info.includePrompt` false) pools only the text's own tokens, as sentence-transformers does.
   */
  prefix?: string;
  /** One of the model's prompts by name (load's `prompts`), instead of `prefix`. */
  promptName?: string;
  /** Keep only the first `dimensions` values (Matryoshka), renormalized when `normalize`. */
  dimensions?: number;
  /** Cut texts longer than the model's max length (default true); false throws InputTooLong. */
  truncate?: boolean;
  /**
   * Pooling: the bundle's own ("model", default), or another mode of sentence-transformers the
   * engine runs ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean").
   */
  pooling?: Pooling;
}

export interface SparseEmbedOptions {
  /**
   * Keep only each vector's `maxActiveDims` largest weights (ties: the lower id), as
   * sentence-transformers' max_active_dims; default: the model's own setting (the bundle's
   * `sparse.max_active_dims`, written when the model sets one), else every positive weight.
   */
  maxActiveDims?: number;
  /** As EmbedOptions: a prompt text, or one of the model's prompts by name; else the default prompt. */
  prefix?: string;
  promptName?: string;
  /** Cut texts longer than the model's max length (default true); false throws InputTooLong. */
  truncate?: boolean;
}

/**
 * A text's sparse vector (SPLADE): `values[i]` is the weight of vocabulary id `indices[i]`, ids
 * ascending, every weight positive; `dim` is the vocabulary's size. The shape of Python's
 * SparseEmbedding, TEI's /embed_sparse and what Qdrant, Elasticsearch and OpenSearch index.
 */
export interface SparseEmbedding {
  readonly indices: Int32Array;
  readonly values: Float32Array;
  readonly dim: number;
}

/** The dot product of two sparse vectors (SPLADE's similarity), summed in float64 over the shared ids. */
export function sparseDot(a: SparseEmbedding, b: SparseEmbedding): number {
  if (a.dim !== b.dim) throw new InputError(`sparse vectors of different sizes (${a.dim} and ${b.dim})`);
  let i = 0;
  let j = 0;
  let total = 0;
  while (i < a.indices.length && j < b.indices.length) {
    const x = a.indices[i];
    const y = b.indices[j];
    if (x === y) total += a.values[i++] * b.values[j++];
    else if (x < y) i++;
    else j++;
  }
  return total;
}

/** The model's head, checked against what a call needs (Python's Embedder refuses the same way). */
export function requireHead(session: EngineSession, want: "none" | "mlm"): void {
  const head = session.info.head;
  if (head === want) return;
  const name = session.meta("name") ?? "this model";
  if (head === "classifier") throw new InputError(`${name} is a cross-encoder (reranker), not an embedding model; load it with Reranker.load`);
  if (head === "mlm") throw new InputError(`${name} is a sparse (SPLADE) model: embedSparse gives its vectors`);
  throw new InputError(`${name} is an embedding model, not a sparse one: embed gives its vectors`);
}

export interface TokenizeOptions {
  truncate?: boolean;
  /** As EmbedOptions: a prompt text, or one of the model's prompts by name; else the default prompt. */
  prefix?: string;
  promptName?: string;
}


/** Texts from a string or an array of strings, checked. */
export function asTexts(texts: string | readonly string[]): string[] {
  if (typeof texts === "string") return [texts];
  if (!Array.isArray(texts)) throw new InputError("texts must be a string or an array of strings");
  texts.forEach((t, i) => {
    if (typeof t !== "string") throw new InputError(`texts[${i}] is ${typeof t}, not a string`);
  });
  return texts as string[];
}

/** Validated embed options, as the engine and finishVectors need them. */
export interface ResolvedEmbedOptions {
  /** null: as the model does. */
  normalize: boolean | null;
  /** The prompt text (prefix, named or default prompt), "" for none. */
  prefix: string;
  dimensions: number | null;
  truncate: boolean;
  pooling: Pooling;
}

export function resolveEmbedOptions(options: EmbedOptions, dim: number, prompts: Prompts): ResolvedEmbedOptions {
  const { normalize, dimensions, truncate = true, pooling = "model" } = options;
  if (dimensions !== undefined && dimensions !== null && !(Number.isInteger(dimensions) && dimensions >= 1 && dimensions <= dim)) {
    throw new InputError(`dimensions must be an integer from 1 to ${dim}, not ${String(dimensions)}`);
  }
  if (!Object.hasOwn(POOLING, pooling)) {
    throw new InputError(`pooling must be one of ${Object.keys(POOLING).map((k) => JSON.stringify(k)).join(", ")}, not ${JSON.stringify(pooling)}`);
  }
  const prefix = prompts.resolve(options.prefix, options.promptName);
  return {
    normalize: normalize === undefined || normalize === null ? null : Boolean(normalize),
    prefix,
    dimensions: dimensions ?? null,
    truncate: Boolean(truncate),
    pooling,
  };
}

/**
 * How many leading tokens of `prompt + text` are the prompt's, as sentence-transformers counts
 * them for pooling without the prompt: the prompt tokenized alone (its leading special token
 * included), less the template's closing special token.
 */
export function promptLength(session: EngineSession, prompt: string): number {
  if (!prompt) return 0;
  const [ids, template] = session.tokenize([prompt, ""], true);
  const closes = template.length > 0 && ids.length > 0 && ids[ids.length - 1] === template[template.length - 1];
  return ids.length - (closes ? 1 : 0);
}

/**
 * Runs one session with resolved options: the engine normalizes full vectors itself; a cut
 * (`dimensions`) is taken from the raw pooled vector and renormalized here.
 */
export function embedWith(session: EngineSession, texts: readonly string[], o: ResolvedEmbedOptions): Float32Array[] {
  requireHead(session, "none");
  const input = o.prefix ? texts.map((t) => o.prefix + t) : texts;
  const skip = o.prefix && !session.info.includePrompt ? promptLength(session, o.prefix) : 0;
  const base = { truncate: o.truncate, pooling: o.pooling, ...(skip ? { promptLengths: texts.map(() => skip) } : {}) };
  const normalize = o.normalize ?? session.info.normalize;
  if (o.dimensions === null || o.dimensions === session.info.dim) {
    return session.encode(input, { ...base, normalize: o.normalize === null ? -1 : o.normalize ? 1 : 0 });
  }
  const raw = session.encode(input, { ...base, normalize: 0 });
  const d = o.dimensions;
  if (raw.length > 0 && raw[0].length < d) {
    throw new InputError(`dimensions ${d} is more than the ${raw[0].length} values pooling "${o.pooling}" gives`);
  }
  return raw.map((v) => {
    const cut = v.slice(0, d);
    if (!normalize) return cut;
    let ss = 0;
    for (let i = 0; i < d; i++) ss += cut[i] * cut[i];
    const norm = Math.max(Math.sqrt(ss), 1e-12);
    for (let i = 0; i < d; i++) cut[i] = cut[i] / norm;
    return cut;
  });
}

/** `options` with `prompt` as its prefix, unless it names a prefix or a prompt itself. */
export function withPrompt(options: EmbedOptions, prompt: string): EmbedOptions {
  return options.prefix !== undefined || options.promptName !== undefined ? options : { ...options, prefix: prompt };
}

const registry = new FinalizationRegistry<EngineSession>((session) => session.dispose());

/** Sentence embeddings in this thread. `await Embedder.load(bundle)`, then `embed(texts)`. */
export class Embedder {
  /** Which engine build runs: "simd128" or "relaxed". */
  readonly build: Build;
  private session: EngineSession | null;
  private readonly promptSet: Prompts;

  private constructor(session: EngineSession, build: Build, prompts: Prompts) {
    this.session = session;
    this.build = build;
    this.promptSet = prompts;
    registry.register(this, session, this);
  }

  /**
   * Loads a bundle (.emb) from a URL, a local path (Node, Deno, Bun) or bytes, and starts the
   * engine. See EmbedderOptions for integrity, progress, caching and the engine module.
   */
  static async load(bundle: BundleSource, options: EmbedderOptions = {}): Promise<Embedder> {
    const prompts = new Prompts(options);
    const [engine, bytes] = await Promise.all([resolveEngine(options), loadBytes(bundle, options)]);
    const session = await EngineSession.open(engine.module, bytes, options.maxTokens);
    if (session.info.head === "classifier") {
      const name = session.meta("name") ?? "this model";
      session.dispose();
      throw new InputError(`${name} is a cross-encoder (reranker), not an embedding model; load it with Reranker.load`);
    }
    return new Embedder(session, engine.build, prompts);
  }

  /** @deprecated the old name of `build`. */
  get variant(): Build {
    return this.build;
  }

  private get s(): EngineSession {
    if (this.session === null) throw new EmbedderDisposed("this Embedder was disposed; load another with Embedder.load()");
    return this.session;
  }

  /** Length of one embedding. */
  get dim(): number {
    return this.s.info.dim;
  }

  /** Tokens per text, [CLS] and [SEP] included, after truncation. */
  get maxLength(): number {
    return this.s.info.maxLength;
  }

  /** The model's name, from its bundle. */
  get name(): string {
    return this.s.meta("name") ?? "";
  }

  get info(): ModelInfo {
    return this.s.info;
  }

  /** A string of the bundle's metadata (e.g. "name", "quantization"), or null. */
  meta(key: string): string | null {
    return this.s.meta(key);
  }

  /** The model's prompts by name, as given to load. */
  get prompts(): Readonly<Record<string, string>> {
    return this.promptSet.byName;
  }

  /** The prompt used when a call names none, or null. */
  get defaultPromptName(): string | null {
    return this.promptSet.defaultName;
  }

  /** The text an embed call puts before each text, for these options ("" for none). */
  prompt(options: { prefix?: string; promptName?: string } = {}): string {
    return this.promptSet.resolve(options.prefix, options.promptName);
  }

  /** One Float32Array per text, in order. A string counts as one text. */
  async embed(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    return this.embedSync(texts, options);
  }

  /** `embed` without the promise: blocks this thread while the engine runs. */
  embedSync(texts: string | readonly string[], options: EmbedOptions = {}): Float32Array[] {
    const list = asTexts(texts);
    return embedWith(this.s, list, resolveEmbedOptions(options, this.s.info.dim, this.promptSet));
  }

  /**
   * Sparse vectors of a SPLADE model (a masked-LM head): one SparseEmbedding per text, in
   * order — its vocabulary ids (ascending) and their positive weights. As Python's
   * Embedder.embed_sparse; `maxActiveDims` is its max_active_dims.
   */
  async embedSparse(texts: string | readonly string[], options: SparseEmbedOptions = {}): Promise<SparseEmbedding[]> {
    return this.embedSparseSync(texts, options);
  }

  /** `embedSparse` without the promise. */
  embedSparseSync(texts: string | readonly string[], options: SparseEmbedOptions = {}): SparseEmbedding[] {
    const s = this.s;
    requireHead(s, "mlm");
    const { maxActiveDims, truncate = true } = options;
    if (maxActiveDims !== undefined && maxActiveDims !== null && !(Number.isInteger(maxActiveDims) && maxActiveDims >= 1)) {
      throw new InputError(`maxActiveDims must be a positive integer, not ${String(maxActiveDims)}`);
    }
    const prompt = this.promptSet.resolve(options.prefix, options.promptName);
    const list = asTexts(texts);
    const input = prompt ? list.map((t) => prompt + t) : list;
    const dim = s.info.vocabSize;
    // the caller's cap, else the model's own (the bundle's sparse.max_active_dims), else none
    const top = maxActiveDims || Number(s.meta("sparse.max_active_dims") ?? 0);
    const topK = top ? Math.min(top, dim) : 0;
    return s.sparse(input, { truncate: Boolean(truncate), topK }).map((r: SparseRow) => Object.freeze({ ...r, dim }));
  }

  /**
   * `embed` with the model's query prompt (e5-style "query: "; none for most models), unless
   * `prefix` or `promptName` is given. As sentence-transformers' encode_query.
   */
  async embedQuery(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    return this.embedSync(texts, withPrompt(options, this.promptSet.query));
  }

  /** `embed` with the model's document prompt (the first of document, passage, corpus), unless `prefix` or `promptName` is given. */
  async embedDocument(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    return this.embedSync(texts, withPrompt(options, this.promptSet.document));
  }

  private withPromptText(texts: string | readonly string[], options: TokenizeOptions): string[] {
    const list = asTexts(texts);
    const prompt = this.promptSet.resolve(options.prefix, options.promptName);
    return prompt ? list.map((t) => prompt + t) : list;
  }

  /** Token ids of each text, [CLS] … [SEP], its prompt included (as EmbedOptions: prefix, promptName, else the default prompt). */
  tokenize(texts: string | readonly string[], options: TokenizeOptions = {}): Int32Array[] {
    return this.s.tokenize(this.withPromptText(texts, options), options.truncate ?? true);
  }

  /**
   * Token ids of each text with each token's place in it: `offsets` holds two UTF-16 offsets per
   * token, `text.slice(offsets[2i], offsets[2i + 1])` (Hugging Face tokenizers' offsets; the
   * special tokens have 0, 0). With a prompt (a prefix, a named or the default prompt) the
   * offsets are into prompt + text.
   */
  tokenizeWithOffsets(texts: string | readonly string[], options: TokenizeOptions = {}): TokenOffsets[] {
    return this.s.tokenizeWithOffsets(this.withPromptText(texts, options), options.truncate ?? true);
  }

  /** Tokens per text after truncation, its prompt included (what the adaptive batcher budgets). */
  countTokens(texts: readonly string[], options: Omit<TokenizeOptions, "truncate"> = {}): number[] {
    return this.s.countTokens(this.withPromptText(texts, options));
  }

  /** Frees the engine's memory now; the Embedder cannot be used afterwards. */
  dispose(): void {
    if (this.session === null) return;
    registry.unregister(this);
    this.session.dispose();
    this.session = null;
  }

  get disposed(): boolean {
    return this.session === null;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

/** The engine module to run single-threaded, from the options or chosen for this host. */
export async function resolveEngine(options: EngineOptions): Promise<{ module: WebAssembly.Module; build: Build }> {
  const m = options.engineModule;
  if (m !== undefined) {
    if (!(m instanceof WebAssembly.Module)) throw new InputError("engineModule must be a WebAssembly.Module");
    if (moduleImportsMemory(m)) {
      throw new InputError("engineModule is the threads build; Embedder needs edgembed.wasm or edgembed-relaxed.wasm");
    }
    const probe = await EngineInstance.create(m);
    if (probe.kernels === "relaxed" && !probe.relaxedExact) {
      throw new InputError(
        "this host computes relaxed-SIMD dot products inexactly: pass edgembed/wasm/edgembed.wasm as engineModule instead",
      );
    }
    return { module: m, build: probe.kernels === "relaxed" ? "relaxed" : "simd128" };
  }
  const chosen = await chooseModule(engineBuild(options), options.wasmBase);
  return { module: chosen.module, build: chosen.variant };
}

/** The `build` option, or its deprecated name `variant`; both given must agree. */
export function engineBuild(options: EngineOptions): "auto" | "simd128" | "relaxed" {
  const { build, variant } = options;
  if (build !== undefined && variant !== undefined && build !== variant) {
    throw new InputError(`build ${JSON.stringify(build)} and variant ${JSON.stringify(variant)} disagree; variant is the old name of build: give build alone`);
  }
  return build ?? variant ?? "auto";
}
