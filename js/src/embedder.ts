/**
 * Embedder: one engine instance in this thread.
 *
 *   texts ─► (prefix) ─► engine: tokenize (normalizer, pre_tokenizer, wordpiece, post_processor)
 *         ─► encoder ─► pooling ─► L2 norm ─► (dimensions: cut, renormalize) ─► Float32Array per text
 */
import { POOLING, type Pooling } from "./abi.js";
import { EngineInstance, moduleImportsMemory, type ModelInfo } from "./bindings.js";
import { chooseModule, type Variant } from "./modules.js";
import { EngineSession, type TokenOffsets } from "./session.js";
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
   * "auto" (default): relaxed SIMD on arm64 hosts that compute it exactly, else SIMD128 (faster
   * on x86-64). Both give the same vectors.
   */
  variant?: "auto" | "simd128" | "relaxed";
  /** Where the package's .wasm files are served, when a bundler moved them (default: dist/wasm/). */
  wasmBase?: string | URL;
  /** Most tokens the engine encodes in one call (all texts together); default 2048. */
  maxTokens?: number;
}

export interface EmbedderOptions extends LoadOptions, EngineOptions {}

export interface EmbedOptions {
  /** L2-normalize each vector (default true). */
  normalize?: boolean;
  /** Prepended to every text (e.g. "query: " for e5 models). */
  prefix?: string;
  /** Keep only the first `dimensions` values (Matryoshka), renormalized when `normalize`. */
  dimensions?: number;
  /** Cut texts longer than the model's max length (default true); false throws InputTooLong. */
  truncate?: boolean;
  /** Pooling: the bundle's own ("model", default), or a mode of sentence-transformers the engine runs ("mean", "cls"). */
  pooling?: Pooling;
}

export interface TokenizeOptions {
  truncate?: boolean;
  prefix?: string;
}

export const DEFAULT_MAX_TOKENS = 2048;

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
  normalize: boolean;
  prefix: string;
  dimensions: number | null;
  truncate: boolean;
  pooling: Pooling;
}

export function resolveEmbedOptions(options: EmbedOptions, dim: number): ResolvedEmbedOptions {
  const { normalize = true, prefix = "", dimensions, truncate = true, pooling = "model" } = options;
  if (dimensions !== undefined && dimensions !== null && !(Number.isInteger(dimensions) && dimensions >= 1 && dimensions <= dim)) {
    throw new InputError(`dimensions must be an integer from 1 to ${dim}, not ${String(dimensions)}`);
  }
  if (!Object.hasOwn(POOLING, pooling)) {
    throw new InputError(`pooling must be one of ${Object.keys(POOLING).map((k) => JSON.stringify(k)).join(", ")}, not ${JSON.stringify(pooling)}`);
  }
  if (typeof prefix !== "string") throw new InputError("prefix must be a string");
  return { normalize: Boolean(normalize), prefix, dimensions: dimensions ?? null, truncate: Boolean(truncate), pooling };
}

/**
 * Runs one session with resolved options: the engine normalizes full vectors itself; a cut
 * (`dimensions`) is taken from the raw pooled vector and renormalized here.
 */
export function embedWith(session: EngineSession, texts: readonly string[], o: ResolvedEmbedOptions): Float32Array[] {
  const input = o.prefix ? texts.map((t) => o.prefix + t) : texts;
  if (o.dimensions === null || o.dimensions === session.info.dim) {
    return session.encode(input, { truncate: o.truncate, pooling: o.pooling, normalize: o.normalize ? 1 : 0 });
  }
  const raw = session.encode(input, { truncate: o.truncate, pooling: o.pooling, normalize: 0 });
  const d = o.dimensions;
  return raw.map((v) => {
    const cut = v.slice(0, d);
    if (!o.normalize) return cut;
    let ss = 0;
    for (let i = 0; i < d; i++) ss += cut[i] * cut[i];
    const norm = Math.max(Math.sqrt(ss), 1e-12);
    for (let i = 0; i < d; i++) cut[i] = cut[i] / norm;
    return cut;
  });
}

const registry = new FinalizationRegistry<EngineSession>((session) => session.dispose());

/** Sentence embeddings in this thread. `await Embedder.load(bundle)`, then `embed(texts)`. */
export class Embedder {
  /** Which engine build runs: "simd128" or "relaxed". */
  readonly variant: Variant;
  private session: EngineSession | null;

  private constructor(session: EngineSession, variant: Variant) {
    this.session = session;
    this.variant = variant;
    registry.register(this, session, this);
  }

  /**
   * Loads a bundle (.emb) from a URL, a local path (Node, Deno, Bun) or bytes, and starts the
   * engine. See EmbedderOptions for integrity, progress, caching and the engine module.
   */
  static async load(bundle: BundleSource, options: EmbedderOptions = {}): Promise<Embedder> {
    const [engine, bytes] = await Promise.all([resolveEngine(options), loadBytes(bundle, options)]);
    const session = await EngineSession.open(engine.module, bytes, options.maxTokens ?? DEFAULT_MAX_TOKENS);
    return new Embedder(session, engine.variant);
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

  /** One Float32Array per text, in order. A string counts as one text. */
  async embed(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    return this.embedSync(texts, options);
  }

  /** `embed` without the promise: blocks this thread while the engine runs. */
  embedSync(texts: string | readonly string[], options: EmbedOptions = {}): Float32Array[] {
    const list = asTexts(texts);
    return embedWith(this.s, list, resolveEmbedOptions(options, this.s.info.dim));
  }

  /** Token ids of each text, [CLS] … [SEP]. */
  tokenize(texts: string | readonly string[], options: TokenizeOptions = {}): Int32Array[] {
    const list = asTexts(texts);
    const input = options.prefix ? list.map((t) => options.prefix + t) : list;
    return this.s.tokenize(input, options.truncate ?? true);
  }

  /**
   * Token ids of each text with each token's place in it: `offsets` holds two UTF-16 offsets per
   * token, `text.slice(offsets[2i], offsets[2i + 1])` (Hugging Face tokenizers' offsets; the
   * special tokens have 0, 0). With a prefix the offsets are into prefix + text.
   */
  tokenizeWithOffsets(texts: string | readonly string[], options: TokenizeOptions = {}): TokenOffsets[] {
    const list = asTexts(texts);
    const input = options.prefix ? list.map((t) => options.prefix + t) : list;
    return this.s.tokenizeWithOffsets(input, options.truncate ?? true);
  }

  /** Tokens per text after truncation (what the adaptive batcher budgets). */
  countTokens(texts: readonly string[]): number[] {
    return this.s.countTokens(asTexts(texts));
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
export async function resolveEngine(options: EngineOptions): Promise<{ module: WebAssembly.Module; variant: Variant }> {
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
    return { module: m, variant: probe.kernels === "relaxed" ? "relaxed" : "simd128" };
  }
  return chooseModule(options.variant ?? "auto", options.wasmBase);
}
