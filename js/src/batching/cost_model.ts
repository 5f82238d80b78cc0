/**
 * Online model of a batch's service time — the port of python/edgembed/batching/cost_model.py.
 *
 * A batch of `T` real tokens whose texts, padded to the longest one, would hold `T + P` tokens
 * is predicted to take
 *
 *     predict(T, P) = fixedMs + msPerKtoken * (T / 1000) + msPerKpadding * (P / 1000)
 *
 * fitted by exponentially weighted least squares pulled towards a prior that never decays;
 * observations are clipped to a band that follows the mean absolute relative error; the margin
 * is the `percentile` quantile of observed / predicted over the last MARGIN_WINDOW batches.
 *
 * Every step is IEEE-754 double arithmetic in the same order as the Python code, so the two
 * produce the same values bit for bit (docs/batching.md gives the algorithm as pseudo-code).
 */

// Fitting constants: part of the decision algorithm, identical to the Python values.
export const DECAY = 0.98;
export const CLIP_WIDTH = 3.0;
export const DEVIATION_RATE = 0.1;
export const DEVIATION_CAP = 1.0;
export const DEVIATION_FLOOR = 0.05;
export const MARGIN_WINDOW = 128;
export const MARGIN_MIN_SAMPLES = 16;
export const MARGIN_CAP = 10.0;
export const MIN_PREDICTION_MS = 0.001;
export const PRIOR_SCALE_KTOKENS = 0.1;

/** Warm start of the cost model (fields as in Python's `CostPrior`, in camelCase). */
export interface CostPrior {
  fixedMs: number;
  msPerKtoken: number;
  msPerKpadding: number;
  /** Counts as that many observed batches (of 100 tokens, for the slopes); never decays. */
  weight: number;
  /** Latency margin used until MARGIN_MIN_SAMPLES batches are seen. */
  margin: number;
  deviation: number;
}

export const DEFAULT_COST_PRIOR: Readonly<CostPrior> = Object.freeze({
  fixedMs: 2.0,
  msPerKtoken: 100.0,
  msPerKpadding: 20.0,
  weight: 1.0,
  margin: 1.5,
  deviation: 0.25,
});

/** What `CostModel.snapshot()` returns; the snake_case names match Python's `snapshot()`. */
export interface CostSnapshot {
  fixed_ms: number;
  ms_per_ktoken: number;
  ms_per_kpadding: number;
  margin: number;
  deviation: number;
  observations: number;
}

/** A prior from a partial prior, or from a snapshot (`stats().costModel` of an earlier run). */
export function costPrior(data?: Partial<CostPrior> | Partial<CostSnapshot> | null): CostPrior {
  const out: CostPrior = { ...DEFAULT_COST_PRIOR };
  if (!data) return out;
  const d = data as Record<string, unknown>;
  const pick = (camel: keyof CostPrior, snake: string): void => {
    const v = d[camel] ?? d[snake];
    if (v !== undefined) out[camel] = Number(v);
  };
  pick("fixedMs", "fixed_ms");
  pick("msPerKtoken", "ms_per_ktoken");
  pick("msPerKpadding", "ms_per_kpadding");
  pick("weight", "weight");
  pick("margin", "margin");
  pick("deviation", "deviation");
  return out;
}

/** Solves the 3×3 system `a x = b` by Gaussian elimination without pivoting (same loop order). */
function solve3(a: number[][], b: number[]): number[] {
  const m = a.map((row) => row.slice());
  const v = b.slice();
  for (let k = 0; k < 3; k++) {
    for (let i = k + 1; i < 3; i++) {
      const f = m[i][k] / m[k][k];
      for (let j = k; j < 3; j++) m[i][j] = m[i][j] - f * m[k][j];
      v[i] = v[i] - f * v[k];
    }
  }
  const x = [0.0, 0.0, 0.0];
  for (let i = 2; i >= 0; i--) {
    let acc = v[i];
    for (let j = i + 1; j < 3; j++) acc = acc - m[i][j] * x[j];
    x[i] = acc / m[i][i];
  }
  return x;
}

/** Predicts batch service times (ms) and learns from each completed batch. */
export class CostModel {
  readonly prior: CostPrior;
  readonly percentile: number;
  theta: number[];
  deviation: number;
  margin: number;
  observations = 0;
  private readonly thetaPrior: number[];
  private readonly lambda: number[];
  private readonly sxx: number[][] = [[0, 0, 0], [0, 0, 0], [0, 0, 0]];
  private readonly sxy: number[] = [0, 0, 0];
  private readonly ratios: number[] = [];

  constructor(prior?: Partial<CostPrior> | null, percentile = 0.99) {
    if (!(percentile > 0.0 && percentile < 1.0)) {
      throw new RangeError(`percentile must be in (0, 1), got ${percentile}`);
    }
    this.prior = costPrior(prior);
    this.percentile = percentile;
    const p = this.prior;
    this.thetaPrior = [p.fixedMs, p.msPerKtoken, p.msPerKpadding];
    const slope = p.weight * (PRIOR_SCALE_KTOKENS * PRIOR_SCALE_KTOKENS);
    this.lambda = [p.weight, slope, slope];
    this.theta = this.thetaPrior.slice();
    this.deviation = p.deviation;
    this.margin = p.margin;
  }

  get fixedMs(): number {
    return this.theta[0];
  }

  /** Mean predicted service time (ms) of a batch. */
  predict(tokens: number, padding = 0.0): number {
    const t = this.theta;
    return t[0] + t[1] * (tokens / 1000.0) + t[2] * (padding / 1000.0);
  }

  /** Service time (ms) the batch stays under with probability `percentile`. */
  predictMargin(tokens: number, padding = 0.0): number {
    return this.predict(tokens, padding) * this.margin;
  }

  /** Folds one completed batch into the fit and the margin. */
  observe(tokens: number, padding: number, serviceMs: number): void {
    let predicted = this.predict(tokens, padding);
    if (predicted < MIN_PREDICTION_MS) predicted = MIN_PREDICTION_MS;
    const ratio = serviceMs / predicted;
    this.ratios.push(ratio);
    if (this.ratios.length > MARGIN_WINDOW) this.ratios.shift();

    const deviation = this.deviation > DEVIATION_FLOOR ? this.deviation : DEVIATION_FLOOR;
    const band = CLIP_WIDTH * deviation;
    const low = predicted * (1.0 - band);
    const high = predicted * (1.0 + band);
    let clipped = Math.min(Math.max(serviceMs, low), high);
    if (clipped < 0.0) clipped = 0.0;
    let error = Math.abs(ratio - 1.0);
    if (error > DEVIATION_CAP) error = DEVIATION_CAP;
    this.deviation = this.deviation + DEVIATION_RATE * (error - this.deviation);

    const x = [1.0, tokens / 1000.0, padding / 1000.0];
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < 3; j++) this.sxx[i][j] = DECAY * this.sxx[i][j] + x[i] * x[j];
      this.sxy[i] = DECAY * this.sxy[i] + x[i] * clipped;
    }
    const a = this.sxx.map((row) => row.slice());
    const b = this.sxy.slice();
    for (let i = 0; i < 3; i++) {
      a[i][i] = a[i][i] + this.lambda[i];
      b[i] = b[i] + this.lambda[i] * this.thetaPrior[i];
    }
    this.theta = solve3(a, b).map((t) => (t > 0.0 ? t : 0.0));
    this.observations += 1;
    this.margin = this.computeMargin();
  }

  private computeMargin(): number {
    const n = this.ratios.length;
    if (n < MARGIN_MIN_SAMPLES) return this.prior.margin;
    const ordered = this.ratios.slice().sort((p, q) => p - q);
    let index = Math.ceil(this.percentile * n) - 1;
    index = Math.min(Math.max(index, 0), n - 1);
    const q = ordered[index];
    return Math.min(Math.max(q, 1.0), MARGIN_CAP);
  }

  /** Current parameters; `new CostModel(costPrior(snapshot))` warm-starts from them. */
  snapshot(): CostSnapshot {
    return {
      fixed_ms: this.theta[0],
      ms_per_ktoken: this.theta[1],
      ms_per_kpadding: this.theta[2],
      margin: this.margin,
      deviation: this.deviation,
      observations: this.observations,
    };
  }
}
