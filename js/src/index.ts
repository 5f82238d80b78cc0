/**
 * edgembed — sentence embeddings from one small WebAssembly engine, in Node, Deno, Bun,
 * browsers and Cloudflare Workers. The public API, by name:
 *
 *   Embedder          one engine in this thread: load(bundle, options), embed, embedSparse, tokenize, dim, dispose
 *   Reranker          a cross-encoder in this thread: load(bundle, options), score(pairs), rerank(query, documents)
 *   sparseDot         the dot product of two sparse (SPLADE) vectors
 *   EmbedderPool      N engines in worker threads, weights shared where SharedArrayBuffer allows
 *   AdaptiveBatcher   groups concurrent requests into batches that keep a latency target
 *   env               the host, detected once
 *   loadBytes, sha256Hex   a bundle's bytes with integrity check, progress and cache
 *   provideModules    hand the package ready WebAssembly.Modules (hosts that cannot compile)
 *   errors            EdgembedError and its subclasses
 */
export { Embedder, sparseDot } from "./embedder.js";
export type { EmbedOptions, EmbedderOptions, EngineOptions, PromptOptions, SparseEmbedding, SparseEmbedOptions, TokenizeOptions } from "./embedder.js";
export { Reranker } from "./reranker.js";
export type { Pair, RerankOptions, RerankResult, RerankerOptions, ScoreOptions } from "./reranker.js";
export type { PairTokens, TokenOffsets } from "./session.js";
export { EmbedderPool } from "./pool.js";
export type { PoolMode, PoolOptions } from "./pool.js";
export { AdaptiveBatcher, estimateTokens } from "./batcher.js";
export type { BatchTarget, BatcherOptions, SubmitOptions } from "./batcher.js";
export type { BatcherStats, Histogram } from "./batching/scheduler.js";
export type { CostPrior, CostSnapshot } from "./batching/cost_model.js";
export type { Lane } from "./batching/policy.js";
export { env } from "./env.js";
export type { Env, Runtime } from "./env.js";
export { loadBytes, sha256Hex } from "./loader.js";
export type { BundleSource, LoadOptions, LoadProgress } from "./loader.js";
export { provideModules, WASM_FILES } from "./modules.js";
export type { Build, Variant } from "./modules.js";
export type { ModelInfo } from "./bindings.js";
export type { Pooling } from "./abi.js";
export {
  BackendUnavailable,
  BatcherClosed,
  BatcherError,
  BundleError,
  ChecksumMismatch,
  DeadlineExceeded,
  DownloadError,
  EdgembedError,
  EmbedderDisposed,
  EngineError,
  InputError,
  InputTooLong,
  ModelError,
  ModelNotFound,
  Overloaded,
  WorkerCrashed,
} from "./errors.js";
