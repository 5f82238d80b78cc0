/**
 * Every error edgembed throws on purpose. One tree, as in the Python package
 * (python/edgembed/errors.py), so `catch (e) { if (e instanceof EdgembedError) … }` catches all:
 *
 *     EdgembedError
 *     ├── ModelError                 a bundle cannot be found, fetched or read
 *     │   ├── ModelNotFound          404, or no such file
 *     │   ├── DownloadError          network failure, HTTP error, truncated download
 *     │   └── ChecksumMismatch       the bytes differ from the expected sha256
 *     ├── BackendUnavailable         this host cannot run the engine (no SIMD, no way to compile)
 *     ├── InputError                 bad texts or options from the caller
 *     │   └── InputTooLong           a text exceeds the model's max length with truncate: false
 *     ├── BundleError                an engine bundle is corrupt, truncated or of another version
 *     ├── EngineError                the engine returned an error status
 *     ├── EmbedderDisposed           the Embedder or pool was disposed
 *     ├── WorkerCrashed              a pool worker died twice on the same batch
 *     └── BatcherError               a request could not be served by the adaptive batcher
 *         ├── Overloaded             the queue is full or the latency target is out of reach
 *         ├── DeadlineExceeded       the request could not meet its deadline
 *         └── BatcherClosed          the batcher is shut down
 *
 * Messages say what to do next.
 */

export class EdgembedError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

export class ModelError extends EdgembedError {}

export class ModelNotFound extends ModelError {}

export class DownloadError extends ModelError {
  /** The HTTP status, when the server answered. */
  readonly status?: number;
  /** True when the body ended before its declared Content-Length. */
  readonly truncated: boolean;
  constructor(message: string, options: { status?: number; truncated?: boolean; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.status = options.status;
    this.truncated = options.truncated ?? false;
  }
}

export class ChecksumMismatch extends ModelError {
  readonly expected: string;
  readonly actual: string;
  constructor(message: string, expected: string, actual: string) {
    super(message);
    this.expected = expected;
    this.actual = actual;
  }
}

export class BackendUnavailable extends EdgembedError {}

export class InputError extends EdgembedError {}

export class InputTooLong extends InputError {}

export class BundleError extends EdgembedError {}

export class EngineError extends EdgembedError {
  /** The engine's emb_status value. */
  readonly status: number;
  constructor(message: string, status: number) {
    super(message);
    this.status = status;
  }
}

export class EmbedderDisposed extends EdgembedError {}

export class WorkerCrashed extends EdgembedError {}

export class BatcherError extends EdgembedError {}

export class Overloaded extends BatcherError {
  /** When to try again, in milliseconds. */
  readonly retryAfterMs: number;
  constructor(message: string, retryAfterMs: number) {
    super(message);
    this.retryAfterMs = retryAfterMs;
  }
}

export class DeadlineExceeded extends BatcherError {}

export class BatcherClosed extends BatcherError {}

const BY_NAME: Record<string, new (message: string) => EdgembedError> = {
  EdgembedError, ModelError, ModelNotFound, BackendUnavailable, InputError, InputTooLong, BundleError,
  EmbedderDisposed, WorkerCrashed, BatcherError, DeadlineExceeded, BatcherClosed,
};

/** An error as it crosses a worker boundary. */
export interface ErrorData {
  name: string;
  message: string;
  status?: number;
}

export function errorToData(e: unknown): ErrorData {
  if (e instanceof Error) {
    const status = (e as { status?: unknown }).status;
    return { name: e.name, message: e.message, ...(typeof status === "number" ? { status } : {}) };
  }
  return { name: "Error", message: String(e) };
}

/** The error of the same class (for the package's own errors) from its data. */
export function errorFromData(d: ErrorData): Error {
  if (d.name === "EngineError") return new EngineError(d.message, d.status ?? -1);
  const cls = BY_NAME[d.name];
  if (cls) return new cls(d.message);
  const e = new Error(d.message);
  e.name = d.name;
  return e;
}
