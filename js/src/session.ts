/**
 * EngineSession: a model and one context on an EngineInstance, with the buffers to tokenize and
 * encode texts — what Embedder and the pool's workers use. It calls the engine only through
 * EngineInstance (bindings.ts).
 */
import { OUTPUT, POOLING, Status, type Pooling } from "./abi.js";
import { EngineInstance, type ModelInfo, type Ptr } from "./bindings.js";
import { InputError, InputTooLong } from "./errors.js";

/** Tokens per engine call when a session is not told: this, or the model's max length if longer. */
export const DEFAULT_MAX_TOKENS = 2048;

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
    if (this.ownsModel) i.freeModel(this.model, this.ownsModel.bundle);
    this.ctx = 0 as Ptr;
    this.model = 0 as Ptr;
  }
}
