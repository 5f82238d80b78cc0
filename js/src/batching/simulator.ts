/**
 * Deterministic discrete-event replay of a trace through a Scheduler on a virtual clock — the
 * port of python/edgembed/batching/simulator.py, used to check that the JS batcher makes the
 * Python batcher's decisions on the traces in tests/fixtures/batching/.
 *
 * Same-instant events run in a fixed order (completions, cancellations, arrivals, close, then
 * the scheduler's wake-up), and the scheduler is asked to `step` after each one.
 */
import { CostModel, costPrior } from "./cost_model.js";
import { policyConfig, type Lane } from "./policy.js";
import { Scheduler, splitOutputs, type LogEntry, type Outcome } from "./scheduler.js";

const RANK_COMPLETE = 0;
const RANK_CANCEL = 1;
const RANK_ARRIVAL = 2;
const RANK_CLOSE = 3;
const RANK_WAKE = 4;

/** One request of a trace (JSON as written by Python's Trace.to_json). */
export interface TraceRequest {
  rid: number;
  arrival_ms: number;
  tokens: number[];
  lane?: Lane;
  deadline_ms?: number | null;
  cancel_after_ms?: number | null;
}

export interface Trace {
  name?: string;
  meta?: Record<string, unknown>;
  close?: { at_ms: number; drain: boolean } | null;
  requests: TraceRequest[];
}

/** Service time of batch number k: (fixed + a·tokens/1000 + b·padding/1000) · noise[k % n]. */
export interface LinearService {
  fixed_ms: number;
  ms_per_ktoken: number;
  ms_per_kpadding?: number;
  noise?: number[];
}

export function serviceMs(s: LinearService, k: number, tokens: number, padding: number): number {
  const noise = s.noise && s.noise.length ? s.noise : [1.0];
  const base = s.fixed_ms + s.ms_per_ktoken * (tokens / 1000.0) + (s.ms_per_kpadding ?? 0.0) * (padding / 1000.0);
  return base * noise[k % noise.length];
}

export interface SimBatch {
  batchId: number;
  worker: number;
  startMs: number;
  endMs: number;
  rids: number[];
  tokens: number;
  padding: number;
  predictedMs: number;
  serviceMs: number;
}

export interface SimResult {
  outcomes: Map<number, Outcome>;
  batchOf: Map<number, number>;
  endMs: Map<number, number>;
  results: Map<number, [number, number][]>;
  batches: SimBatch[];
  durationMs: number;
}

type Event = { t: number; rank: number; seq: number; kind: string; data: unknown };

function before(a: Event, b: Event): boolean {
  if (a.t !== b.t) return a.t < b.t;
  if (a.rank !== b.rank) return a.rank < b.rank;
  return a.seq < b.seq;
}

class Heap {
  private items: Event[] = [];
  get size(): number {
    return this.items.length;
  }
  push(e: Event): void {
    const a = this.items;
    a.push(e);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!before(a[i], a[p])) break;
      [a[i], a[p]] = [a[p], a[i]];
      i = p;
    }
  }
  pop(): Event {
    const a = this.items;
    const top = a[0];
    const last = a.pop()!;
    if (a.length > 0) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && before(a[l], a[m])) m = l;
        if (r < a.length && before(a[r], a[m])) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m], a[i]];
        i = m;
      }
    }
    return top;
  }
}

/** Runs `trace` to the end; every request gets exactly one outcome. */
export function simulate(trace: Trace, scheduler: Scheduler, service: LinearService, maxEvents = 10_000_000): SimResult {
  const res: SimResult = { outcomes: new Map(), batchOf: new Map(), endMs: new Map(), results: new Map(), batches: [], durationMs: 0 };
  const byRid = new Map<number, TraceRequest>();
  for (const r of trace.requests) byRid.set(r.rid, r);
  const heap = new Heap();
  let seq = 0;
  const push = (t: number, rank: number, kind: string, data: unknown): void => heap.push({ t, rank, seq: seq++, kind, data });

  for (const r of trace.requests) push(r.arrival_ms, RANK_ARRIVAL, "arrival", r.rid);
  if (trace.close) push(trace.close.at_ms, RANK_CLOSE, "close", trace.close.drain);

  const queued = new Set<number>();
  let wakeGen = 0;
  let pendingWake: number | null = null;
  let dispatched = 0;
  let now = 0.0;
  let events = 0;

  const resolve = (rid: number, outcome: Outcome, t: number): void => {
    if (res.outcomes.has(rid)) throw new Error(`request ${rid} resolved twice`);
    res.outcomes.set(rid, outcome);
    res.endMs.set(rid, t);
    queued.delete(rid);
  };

  while (heap.size > 0) {
    if (++events > maxEvents) throw new Error("simulation did not finish (a scheduler that never dispatches?)");
    const ev = heap.pop();
    now = ev.t;
    if (ev.kind === "wake") {
      if (ev.data !== wakeGen || pendingWake === null) continue;
      pendingWake = null;
    } else if (ev.kind === "arrival") {
      const req = byRid.get(ev.data as number)!;
      const adm = scheduler.admit(now, req.rid, req.tokens, { lane: req.lane ?? "interactive", deadlineMs: req.deadline_ms ?? null });
      if (adm.kind === "accept") {
        queued.add(req.rid);
        if (req.cancel_after_ms !== null && req.cancel_after_ms !== undefined) push(now + req.cancel_after_ms, RANK_CANCEL, "cancel", req.rid);
      } else {
        resolve(req.rid, adm.kind, now);
      }
    } else if (ev.kind === "cancel") {
      if (scheduler.cancel(now, ev.data as number)) resolve(ev.data as number, "cancelled", now);
    } else if (ev.kind === "close") {
      for (const rid of scheduler.close(now, ev.data as boolean)) resolve(rid, "closed", now);
    } else if (ev.kind === "complete") {
      const rec = ev.data as SimBatch;
      scheduler.complete(now, rec.batchId, rec.serviceMs);
      const outputs: [number, number][] = [];
      const counts: number[] = [];
      for (const rid of rec.rids) {
        const n = byRid.get(rid)!.tokens.length;
        counts.push(n);
        for (let i = 0; i < n; i++) outputs.push([rid, i]);
      }
      const parts = splitOutputs(counts, outputs);
      rec.rids.forEach((rid, i) => {
        res.results.set(rid, parts[i]);
        resolve(rid, "ok", now);
      });
    }

    const step = scheduler.step(now);
    for (const rid of step.expired) resolve(rid, "deadline", now);
    for (const d of step.dispatches) {
      for (const rid of d.rids) {
        if (!queued.has(rid)) throw new Error(`request ${rid} dispatched but not queued`);
        queued.delete(rid);
        res.batchOf.set(rid, d.batchId);
      }
      const s = serviceMs(service, dispatched, d.tokens, d.padding);
      dispatched += 1;
      const rec: SimBatch = {
        batchId: d.batchId, worker: d.worker, startMs: now, endMs: now + s, rids: d.rids.slice(),
        tokens: d.tokens, padding: d.padding, predictedMs: d.predictedMs, serviceMs: s,
      };
      res.batches.push(rec);
      push(now + s, RANK_COMPLETE, "complete", rec);
    }
    if (step.wakeAt === null) {
      pendingWake = null;
    } else if (step.wakeAt !== pendingWake) {
      wakeGen += 1;
      pendingWake = step.wakeAt;
      push(step.wakeAt, RANK_WAKE, "wake", wakeGen);
    }
  }
  if (!scheduler.idle || queued.size > 0) throw new Error(`simulation ended with requests still queued: ${[...queued]}`);
  res.durationMs = now;
  return res;
}

export const FIXTURE_FORMAT = "edgembed-batching-trace";
export const FIXTURE_VERSION = 1;

/** A trace fixture (tests/fixtures/batching/trace_*.json; docs/batching.md, "Trace fixtures"). */
export interface FixtureDoc {
  format: string;
  version: number;
  config: {
    latency_target_ms: number;
    bulk_latency_target_ms: number;
    max_batch_tokens: number;
    max_queue: number;
    workers: number;
    shed: boolean;
    percentile: number;
  };
  cost_prior: Record<string, number>;
  service: LinearService;
  trace: Trace;
}

export interface FixtureResult {
  log: LogEntry[];
  outcomes: { rid: number; outcome: Outcome; end_ms: number; batch: number | null }[];
  final: Record<string, unknown>;
}

/** Replays a trace fixture through the Scheduler: what Python's replay_fixture returns. */
export function replayFixture(doc: FixtureDoc): FixtureResult {
  if (doc.format !== FIXTURE_FORMAT || doc.version !== FIXTURE_VERSION) {
    throw new Error(
      `not a ${FIXTURE_FORMAT} version ${FIXTURE_VERSION} document; regenerate it with python tests/fixtures/batching/make_traces.py`,
    );
  }
  const c = doc.config;
  const cfg = policyConfig({
    latencyTargetMs: c.latency_target_ms,
    bulkLatencyTargetMs: c.bulk_latency_target_ms,
    maxBatchTokens: c.max_batch_tokens,
    maxQueue: c.max_queue,
    workers: c.workers,
    shed: c.shed,
  });
  const model = new CostModel(costPrior(doc.cost_prior), c.percentile);
  const sched = new Scheduler(cfg, model, { record: true });
  const res = simulate(doc.trace, sched, doc.service);
  return {
    log: sched.log,
    outcomes: doc.trace.requests.map((r) => ({
      rid: r.rid,
      outcome: res.outcomes.get(r.rid)!,
      end_ms: res.endMs.get(r.rid)!,
      batch: res.batchOf.get(r.rid) ?? null,
    })),
    final: {
      cost_model: model.snapshot(),
      miss_budget: sched.missBudget,
      calibration: sched.calibration,
      pad_ratio: sched.dispatches.padRatio,
      arrival_gap_ms: sched.arrivals.gapMs,
      arrival_tokens: sched.arrivals.tokens,
    },
  };
}
