/**
 * EngineSession: a model and one context on an EngineInstance, with the buffers to tokenize and
 * encode texts — what Embedder and the pool's workers use. It calls the engine only through
 * EngineInstance (bindings.ts).
 */
import { OUTPUT, POOLING, SPARSE_POOLING, Status, type Pooling } from "./abi.js";
import { EngineInstance, type ModelInfo, type Ptr } from "./bindings.js";
import { InputError, InputTooLong } from "./errors.js";

/** Tokens per engine call when a session is not told: this, or the model's max length if longer. */
export const DEFAULT_MAX_TOKENS = 2048;

/**
 * Bytes of results one engine call may write for the heads' outputs (a sparse row holds the
 * whole vocabulary: 122 KB for BERT's); a call holds fewer sequences when their rows would pass it.
 */
export const HEAD_OUTPUT_BYTES = 16 << 20;

/** A pair's tokens: ids and their token types (0 for the first text, 1 for the second in BERT). */
export interface PairTokens {
  ids: Int32Array;
  typeIds: Int32Array;
}

/** One text's sparse vector: vocabulary ids (ascending) and their weights (all positive). */
export interface SparseRow {
  indices: Int32Array;
  values: Float32Array;
}

export interface SparseOptions {
  truncate: boolean;
  /** Keep each vector's `topK` largest weights (ties: the lower id); 0 keeps every one. */
  topK: number;
  /** How the token rows are folded: the model's ("model"), "max" or "sum". */
  pooling?: keyof typeof SPARSE_POOLING;
}

/** One text's tokens: ids, and two UTF-16 offsets per token into the text (specials: 0, 0). */
export interface TokenOffsets {
  ids: Int32Array;
  offsets: Int32Array;
}

export interface EncodeOptions {
  truncate: boolean;
  pooling: Pooling;
  /** <0 the model's choice, 0 raw pooled vectors, >0 L2-normalized (by the engine). */
  normalize: number;
  /**
   * Leading prompt tokens of each text ([CLS] and the prompt's own, as sentence-transformers
   * counts them), left out of the pooling when the model's Pooling module says include_prompt
   * false (ModelInfo.includePrompt). Omitted: no prompts.
   */
  promptLengths?: readonly number[];
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
  private readonly prompts: number; // int32[maxSeqs]
  private readonly out: number; // float32[maxSeqs * dim]
  private readonly maxSeqs: number;
  private text = 0;
  private textCap = 0;
  private typeIds = 0; // int32[maxTokens], for pairs: allocated on first use
  private headOut = 0; // the heads' results (scores, sparse rows and ids): grown on use
  private headOutCap = 0;
  private readonly encoder = new TextEncoder();

  /**
   * A session over `model`; with `ownsModel` the session frees the model (and its bundle copy) on
   * dispose. `maxTokens` (tokens per engine call, all texts together): at least the model's max
   * length; default DEFAULT_MAX_TOKENS, or the max length when that is longer.
   */
  constructor(instance: EngineInstance, model: Ptr, ownsModel: { bundle: number } | null, maxTokens?: number) {
    this.instance = instance;
    this.model = model;
    this.ownsModel = ownsModel;
    this.info = instance.modelInfo(model);
    maxTokens ??= Math.max(DEFAULT_MAX_TOKENS, this.info.maxLength);
    if (!Number.isInteger(maxTokens) || maxTokens < this.info.maxLength) {
      throw new InputError(`maxTokens must be an integer of at least the model's max length (${this.info.maxLength}), got ${maxTokens}`);
    }
    this.maxTokens = maxTokens;
    this.maxSeqs = Math.floor(maxTokens / 2); // every sequence holds at least [CLS] and [SEP]
    this.ctx = instance.contextInit(model, maxTokens);
    this.ids = instance.alloc(4 * maxTokens);
    this.lengths = instance.alloc(4 * this.maxSeqs);
    this.prompts = instance.alloc(4 * this.maxSeqs);
    this.out = instance.alloc(4 * this.maxSeqs * this.info.dim);
  }

  /** Loads `bundle` into a fresh instance of `module` and opens a session on it. */
  static async open(module: WebAssembly.Module, bundle: Uint8Array, maxTokens?: number): Promise<EngineSession> {
    const instance = await EngineInstance.create(module);
    const { model, bundle: at } = instance.loadModel(bundle);
    return new EngineSession(instance, model, { bundle: at }, maxTokens);
  }

  meta(key: string): string | null {
    return this.instance.modelMeta(this.model, key);
  }

  private writeText(text: string): number {
    return this.writeTexts(text, "")[0];
  }

  /** Writes `a` then `b` (UTF-8) at this.text; their byte lengths. */
  private writeTexts(a: string, b: string): [number, number] {
    const x = this.encoder.encode(a);
    const y = this.encoder.encode(b);
    const need = x.length + y.length + 1;
    if (need > this.textCap) {
      this.instance.free(this.text);
      this.textCap = Math.max(1024, 2 ** Math.ceil(Math.log2(need)));
      this.text = this.instance.alloc(this.textCap);
    }
    this.instance.bytes(this.text, x.length).set(x);
    this.instance.bytes(this.text + x.length, y.length).set(y);
    return [x.length, y.length];
  }

  /** The heads' output buffer, at least `bytes` long. */
  private headBuffer(bytes: number): number {
    if (bytes > this.headOutCap) {
      this.instance.free(this.headOut);
      this.headOut = 0;
      this.headOutCap = Math.max(bytes, 1024);
      this.headOut = this.instance.alloc(this.headOutCap);
    }
    return this.headOut;
  }

  private tooLong(index: number, nFull: number, what = "text"): never {
    throw new InputTooLong(
      `${what} ${index} has ${nFull} tokens, over the model's max length of ${this.info.maxLength}; ` +
        `shorten it or pass truncate: true`,
    );
  }

  /** Tokenizes `text` into the id buffer at `offset`; returns the ids' count, or -1 if they do not fit. */
  private tokenizeAt(text: string, index: number, truncate: boolean, offset: number): number {
    const len = this.writeText(text);
    const [status, nIds, nFull] = this.instance.tokenizeRaw(
      this.model, this.text, len, truncate, this.ids + 4 * offset, this.maxTokens - offset,
    );
    if (status === Status.BUFFER_TOO_SMALL && offset > 0) return -1;
    if (status === Status.TOO_LONG) this.tooLong(index, nFull);
    if (status !== Status.OK) this.instance.fail(status, `cannot tokenize text ${index}`);
    return nIds;
  }

  /** Tokenizes a pair into the id and type buffers at `offset`; the ids' count, or -1 if they do not fit. */
  private tokenizePairAt(pair: readonly [string, string], index: number, truncate: boolean, offset: number): number {
    if (this.typeIds === 0) this.typeIds = this.instance.alloc(4 * this.maxTokens);
    const [a, b] = this.writeTexts(pair[0], pair[1]);
    const [status, nIds, nFull] = this.instance.tokenizePairRaw(
      this.model, this.text, a, this.text + a, b, truncate, this.ids + 4 * offset, this.typeIds + 4 * offset, this.maxTokens - offset,
    );
    if (status === Status.BUFFER_TOO_SMALL && offset > 0) return -1;
    if (status === Status.TOO_LONG && truncate) {
      // the tokenizer's strategy cuts one side only (only_second: the document) and the other
      // side alone does not fit, as Hugging Face tokenizers refuses it too
      throw new InputTooLong(
        `pair ${index} (${nFull} tokens) cannot be cut to the model's max length of ${this.info.maxLength}: ` +
          `its tokenizer truncates only one text of a pair and the other alone is too long; shorten the query`,
      );
    }
    if (status === Status.TOO_LONG) this.tooLong(index, nFull, "pair");
    if (status !== Status.OK) this.instance.fail(status, `cannot tokenize pair ${index}`);
    return nIds;
  }

  /**
   * Packs `n` sequences back to back into engine calls: `tokenize(i, offset)` writes sequence i's
   * ids at `offset` of the id buffer (-1: they do not fit there), `run(indexes)` makes one call of
   * the sequences packed so far (their lengths are in the lengths buffer), at most `maxRows` of them.
   */
  private pack(n: number, tokenize: (i: number, offset: number) => number, run: (indexes: number[]) => void, maxRows = this.maxSeqs): void {
    let filled = 0;
    const pending: number[] = [];
    const flush = (): void => {
      if (pending.length === 0) return;
      run(pending);
      pending.length = 0;
      filled = 0;
    };
    for (let i = 0; i < n; i++) {
      let len = tokenize(i, filled);
      if (len < 0) {
        flush();
        len = tokenize(i, 0);
      }
      this.instance.i32s(this.lengths, this.maxSeqs)[pending.length] = len;
      pending.push(i);
      filled += len;
      if (pending.length >= Math.min(maxRows, this.maxSeqs) || this.maxTokens - filled < 3) flush();
    }
    flush();
  }

  /** Token ids and token types of each pair, as the classifier reads them. */
  tokenizePairs(pairs: readonly (readonly [string, string])[], truncate = true): PairTokens[] {
    this.check();
    return pairs.map((p, i) => {
      const n = this.tokenizePairAt(p, i, truncate, 0);
      return { ids: this.instance.i32s(this.ids, n).slice(), typeIds: this.instance.i32s(this.typeIds, n).slice() };
    });
  }

  /** Token counts of pairs after truncation (special tokens included). */
  countPairTokens(pairs: readonly (readonly [string, string])[]): number[] {
    this.check();
    return pairs.map((p, i) => this.tokenizePairAt(p, i, true, 0));
  }

  /** The classification head's logits (nLabels floats) of each pair, in order (EMB_OUTPUT_SCORES). */
  scores(pairs: readonly (readonly [string, string])[], truncate: boolean): Float32Array[] {
    this.check();
    const width = this.info.nLabels;
    const results = new Array<Float32Array>(pairs.length);
    const types = this.info.typeVocabSize > 0;
    this.pack(
      pairs.length,
      (i, offset) => this.tokenizePairAt(pairs[i], i, truncate, offset),
      (indexes) => {
        const out = this.headBuffer(4 * indexes.length * width);
        const [status, , rowSize] = this.instance.runRaw(this.ctx, {
          ids: this.ids,
          lengths: this.lengths,
          nSeqs: indexes.length,
          typeIds: types ? this.typeIds : 0,
          output: OUTPUT.scores,
          pooling: 0,
          normalize: 0,
          includePrompt: -1,
          values: out,
          valuesCap: indexes.length * width,
        });
        if (status !== Status.OK) this.instance.fail(status, "the engine could not score the pairs");
        const f32 = this.instance.f32s(out, indexes.length * rowSize);
        indexes.forEach((k, j) => {
          results[k] = f32.slice(j * rowSize, (j + 1) * rowSize);
        });
      },
    );
    return results;
  }

  /** SPLADE vectors of the masked-LM head (EMB_OUTPUT_SPARSE), one per text, in order. */
  sparse(texts: readonly string[], options: SparseOptions): SparseRow[] {
    this.check();
    const vocab = this.info.vocabSize;
    const k = options.topK;
    const width = k > 0 ? k : vocab;
    const rowBytes = 4 * width * (k > 0 ? 2 : 1);
    const results = new Array<SparseRow>(texts.length);
    this.pack(
      texts.length,
      (i, offset) => this.tokenizeAt(texts[i], i, options.truncate, offset),
      (indexes) => {
        const n = indexes.length;
        const out = this.headBuffer(n * rowBytes);
        const idx = k > 0 ? out + 4 * n * width : 0;
        const [status] = this.instance.runRaw(this.ctx, {
          ids: this.ids,
          lengths: this.lengths,
          nSeqs: n,
          output: OUTPUT.sparse,
          pooling: SPARSE_POOLING[options.pooling ?? "model"],
          normalize: 0,
          includePrompt: -1,
          topK: k,
          perToken: 0,
          values: out,
          valuesCap: n * width,
          indices: idx,
        });
        if (status !== Status.OK) this.instance.fail(status, "the engine could not compute the sparse vectors");
        const values = this.instance.f32s(out, n * width);
        const ids = k > 0 ? this.instance.i32s(idx, n * width) : null;
        indexes.forEach((t, j) => {
          results[t] = ids === null ? nonzeros(values.subarray(j * width, (j + 1) * width)) : ascending(ids.subarray(j * width, (j + 1) * width), values.subarray(j * width, (j + 1) * width));
        });
      },
      Math.max(1, Math.floor(HEAD_OUTPUT_BYTES / rowBytes)),
    );
    return results;
  }

  /** Token ids of each text ([CLS] … [SEP]). */
  tokenize(texts: readonly string[], truncate = true): Int32Array[] {
    this.check();
    return texts.map((t, i) => {
      const n = this.tokenizeAt(t, i, truncate, 0);
      return this.instance.i32s(this.ids, n).slice();
    });
  }

  /**
   * Each text's tokens with where they are in it: `ids`, and `offsets` with two UTF-16 offsets
   * per token, `text.slice(offsets[2i], offsets[2i + 1])` (the offsets of Hugging Face
   * tokenizers; the special tokens the template adds have 0, 0).
   */
  tokenizeWithOffsets(texts: readonly string[], truncate = true): TokenOffsets[] {
    this.check();
    const cap = Math.max(4 * this.info.maxLength, 1024);
    const ids = this.instance.alloc(4 * cap);
    const offsets = this.instance.alloc(8 * cap);
    try {
      return texts.map((t, i) => {
        const len = this.writeText(t);
        const [status, n, nFull] = this.instance.tokenizeOffsetsRaw(this.model, this.text, len, truncate, ids, offsets, cap);
        if (status === Status.TOO_LONG) {
          throw new InputTooLong(
            `text ${i} has ${nFull} tokens, over the model's max length of ${this.info.maxLength}; ` +
              `shorten it or pass truncate: true`,
          );
        }
        if (status !== Status.OK) this.instance.fail(status, `cannot tokenize text ${i}`);
        return { ids: this.instance.i32s(ids, n).slice(), offsets: new Int32Array(this.instance.i32s(offsets, 2 * n)) };
      });
    } finally {
      this.instance.free(ids);
      this.instance.free(offsets);
    }
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
    const prompts = options.promptLengths;
    if (prompts !== undefined && prompts.length !== texts.length) {
      throw new InputError(`promptLengths has ${prompts.length} counts for ${texts.length} texts`);
    }
    const results = new Array<Float32Array>(texts.length);
    let filled = 0;
    const pending: number[] = [];
    const flush = (): void => {
      if (pending.length === 0) return;
      if (prompts !== undefined) {
        const p = this.instance.i32s(this.prompts, pending.length);
        pending.forEach((textIndex, j) => {
          p[j] = prompts[textIndex];
        });
      }
      const [status, , rowSize] = this.instance.runRaw(this.ctx, {
        ids: this.ids,
        lengths: this.lengths,
        nSeqs: pending.length,
        promptLengths: prompts === undefined ? 0 : this.prompts,
        output: OUTPUT.embedding,
        pooling,
        normalize: options.normalize,
        includePrompt: -1,
        values: this.out,
        valuesCap: pending.length * dim,
      });
      if (status !== Status.OK) this.instance.fail(status, "the engine could not encode the batch");
      // rows are `dim` floats with the model's pooling; another pooling asked for gives its own
      // width (a model that concatenates CLS and mean pools to C with "mean" alone)
      const f32 = this.instance.f32s(this.out, pending.length * rowSize);
      pending.forEach((textIndex, j) => {
        results[textIndex] = f32.slice(j * rowSize, (j + 1) * rowSize);
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
    i.free(this.prompts);
    i.free(this.out);
    i.free(this.text);
    i.free(this.typeIds);
    i.free(this.headOut);
    if (this.ownsModel) i.freeModel(this.model, this.ownsModel.bundle);
    this.ctx = 0 as Ptr;
    this.model = 0 as Ptr;
  }
}

/** The positive entries of a dense row of the vocabulary, ids ascending. */
function nonzeros(row: Float32Array): SparseRow {
  let n = 0;
  for (let i = 0; i < row.length; i++) if (row[i] > 0) n++;
  const indices = new Int32Array(n);
  const values = new Float32Array(n);
  for (let i = 0, j = 0; i < row.length; i++) {
    if (row[i] > 0) {
      indices[j] = i;
      values[j++] = row[i];
    }
  }
  return { indices, values };
}

/** The engine's top-k entries (by weight; index -1 past a row's nonzeros) as ids ascending. */
function ascending(ids: Int32Array, weights: Float32Array): SparseRow {
  const keep: number[] = [];
  for (let i = 0; i < ids.length; i++) if (ids[i] >= 0 && weights[i] > 0) keep.push(i);
  keep.sort((a, b) => ids[a] - ids[b]);
  return { indices: Int32Array.from(keep, (i) => ids[i]), values: Float32Array.from(keep, (i) => weights[i]) };
}
