/**
 * Reranker: a cross-encoder in this thread — (query, document) pairs in, relevance scores out.
 *
 *   pairs ─► engine: pair tokenization (the tokenizer's pair template, token types, its
 *         truncation strategy) ─► encoder ─► classification head (EMB_OUTPUT_SCORES: logits)
 *         ─► the model's activation (sigmoid for one label) unless raw ─► scores, in order
 *
 * The same API as Python's edgembed.Reranker, in JavaScript's spelling: `score(pairs)`,
 * `rerank(query, documents, { topN })`. A pair's score never depends on the other pairs of the call.
 */
import { EngineSession, type PairTokens } from "./session.js";
import type { ModelInfo } from "./bindings.js";
import { EmbedderDisposed, InputError } from "./errors.js";
import { loadBytes, type BundleSource, type LoadOptions } from "./loader.js";
import { resolveEngine, type EngineOptions } from "./embedder.js";
import type { Build } from "./modules.js";

export interface RerankerOptions extends LoadOptions, EngineOptions {}

/** A (query, document) pair. */
export type Pair = readonly [string, string];

export interface ScoreOptions {
  /** The logits, without the model's activation (TEI's raw_scores); default false. */
  raw?: boolean;
  /** Cut pairs longer than the model's max length as its tokenizer says (default true); false throws InputTooLong. */
  truncate?: boolean;
}

export interface RerankOptions extends ScoreOptions {
  /** At most this many documents, best first (default: all of them). */
  topN?: number;
  /** Put each document's text in its result (default false). */
  returnDocuments?: boolean;
}

/** One document of `rerank`: its index in the documents given, its score, and its text when asked for. */
export interface RerankResult {
  index: number;
  score: number;
  document?: string;
}

/** The activations a cross-encoder applies to its logits (the bundle's classifier.score_activation). */
const ACTIVATIONS: Readonly<Record<string, (x: number) => number>> = Object.freeze({
  identity: (x: number) => x,
  sigmoid: (x: number) => 1 / (1 + Math.exp(-x)),
  tanh: Math.tanh,
  relu: (x: number) => Math.max(x, 0),
  silu: (x: number) => x / (1 + Math.exp(-x)),
});

/** Pairs from an array of [query, document] arrays, checked. */
function asPairs(pairs: readonly Pair[]): Pair[] {
  if (!Array.isArray(pairs)) throw new InputError("pairs must be an array of [query, document] pairs");
  pairs.forEach((p, i) => {
    if (!Array.isArray(p) || p.length !== 2 || typeof p[0] !== "string" || typeof p[1] !== "string") {
      const hint = typeof p === "string" ? " (for one pair pass [[query, document]]; for one query and many documents use rerank)" : "";
      throw new InputError(`pairs[${i}] should be a [query, document] pair of strings${hint}`);
    }
  });
  return pairs as Pair[];
}

const registry = new FinalizationRegistry<EngineSession>((session) => session.dispose());

/** Cross-encoder scores in this thread. `await Reranker.load(bundle)`, then `rerank(query, documents)`. */
export class Reranker {
  /** Which engine build runs: "simd128" or "relaxed". */
  readonly build: Build;
  private session: EngineSession | null;
  private readonly activate: (x: number) => number;
  /** What turns logits into scores: "sigmoid" for one-label rerankers (the bundle's classifier.score_activation). */
  readonly activation: string;

  private constructor(session: EngineSession, build: Build) {
    this.session = session;
    this.build = build;
    this.activation = session.meta("classifier.score_activation") ?? "identity";
    const f = ACTIVATIONS[this.activation];
    if (f === undefined) {
      throw new InputError(`the bundle's score activation ${JSON.stringify(this.activation)} is not one this package applies (${Object.keys(ACTIVATIONS).join(", ")}); use score(pairs, { raw: true }) for the logits`);
    }
    this.activate = f;
    registry.register(this, session, this);
  }

  /**
   * Loads a cross-encoder's bundle (.emb, written by `embed bundle` of the Python package) from a
   * URL, a local path (Node, Deno, Bun) or bytes; the options are Embedder.load's (integrity,
   * progress, caching, the engine module, maxTokens).
   */
  static async load(bundle: BundleSource, options: RerankerOptions = {}): Promise<Reranker> {
    const [engine, bytes] = await Promise.all([resolveEngine(options), loadBytes(bundle, options)]);
    const session = await EngineSession.open(engine.module, bytes, options.maxTokens);
    if (session.info.head !== "classifier") {
      const name = session.meta("name") ?? "this model";
      const kind = session.info.head === "mlm" ? "a sparse (SPLADE) model: load it with Embedder.load and call embedSparse" : "an embedding model: load it with Embedder.load";
      session.dispose();
      throw new InputError(`${name} is not a cross-encoder (reranker) but ${kind}`);
    }
    try {
      return new Reranker(session, engine.build);
    } catch (e) {
      session.dispose();
      throw e;
    }
  }

  /** @deprecated the old name of `build`. */
  get variant(): Build {
    return this.build;
  }

  private get s(): EngineSession {
    if (this.session === null) throw new EmbedderDisposed("this Reranker was disposed; load another with Reranker.load()");
    return this.session;
  }

  /** The model's name, from its bundle. */
  get name(): string {
    return this.s.meta("name") ?? "";
  }

  /** Logits per pair (1 for rerankers; more for a classifier such as an NLI model). */
  get numLabels(): number {
    return this.s.info.nLabels;
  }

  /** Tokens per pair (query, document and special tokens together). */
  get maxLength(): number {
    return this.s.info.maxLength;
  }

  get info(): ModelInfo {
    return this.s.info;
  }

  /** A string of the bundle's metadata (e.g. "name", "quantization"), or null. */
  meta(key: string): string | null {
    return this.s.meta(key);
  }

  /** Token ids and token types of each pair, as the encoder reads them. */
  tokenize(pairs: readonly Pair[], options: { truncate?: boolean } = {}): PairTokens[] {
    return this.s.tokenizePairs(asPairs(pairs), options.truncate ?? true);
  }

  /** Tokens each pair costs (query + document + special tokens; at most maxLength): the adaptive batcher's cost. */
  countTokens(pairs: readonly Pair[]): number[] {
    return this.s.countPairTokens(asPairs(pairs));
  }

  /**
   * The logits of each pair, `numLabels` floats, in order (what the classification head gives;
   * `score` applies the activation).
   */
  logits(pairs: readonly Pair[], options: { truncate?: boolean } = {}): Float32Array[] {
    return this.s.scores(asPairs(pairs), options.truncate ?? true);
  }

  /**
   * One score per pair, in order: the model's activation (sigmoid for one label) of its logit,
   * or the logit with `raw`. A model of several labels gives each pair's row of them
   * (`Float32Array`, `numLabels` long) instead of a number. As Python's Reranker.score.
   */
  async score(pairs: readonly Pair[], options: ScoreOptions = {}): Promise<number[] | Float32Array[]> {
    return this.scoreSync(pairs, options);
  }

  /** `score` without the promise. */
  scoreSync(pairs: readonly Pair[], options: ScoreOptions = {}): number[] | Float32Array[] {
    const rows = this.logits(pairs, options);
    const f = options.raw ? ACTIVATIONS.identity : this.activate;
    if (this.numLabels === 1) return rows.map((r) => f(r[0]));
    return rows.map((r) => r.map((x) => f(x)));
  }

  /**
   * The documents scored against `query`, best first (equal scores: the earlier document
   * first), at most `topN` of them: `{index, score}` (and `document` with `returnDocuments`).
   * Needs a one-label model. As Python's Reranker.rerank (top_n, return_documents).
   */
  async rerank(query: string, documents: readonly string[], options: RerankOptions = {}): Promise<RerankResult[]> {
    return this.rerankSync(query, documents, options);
  }

  /** `rerank` without the promise. */
  rerankSync(query: string, documents: readonly string[], options: RerankOptions = {}): RerankResult[] {
    if (typeof query !== "string") throw new InputError(`query must be a string, not ${typeof query}`);
    if (!Array.isArray(documents)) throw new InputError("documents must be an array of strings");
    documents.forEach((d, i) => {
      if (typeof d !== "string") throw new InputError(`documents[${i}] is ${typeof d}, not a string`);
    });
    const { topN, returnDocuments = false } = options;
    if (topN !== undefined && topN !== null && !(Number.isInteger(topN) && topN >= 1)) {
      throw new InputError(`topN must be a positive integer, not ${String(topN)}`);
    }
    if (this.numLabels !== 1) {
      throw new InputError(`${this.name} has ${this.numLabels} labels; rerank needs a one-label model: use score() for its logits per label`);
    }
    if (documents.length === 0) return [];
    const scores = this.scoreSync(documents.map((d) => [query, d] as const), options) as number[];
    const order = scores.map((_, i) => i).sort((a, b) => scores[b] - scores[a] || a - b);
    return order.slice(0, topN ?? order.length).map((i) => (returnDocuments ? { index: i, score: scores[i], document: documents[i] } : { index: i, score: scores[i] }));
  }

  /** Frees the engine's memory now; the Reranker cannot be used afterwards. */
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
