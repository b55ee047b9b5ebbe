/**
 * Clients of the bench-only baselines, over `ws` with the PowerStore client's settings.
 *
 * - {@link AbdClient}: the crash-tolerant multi-writer ABD register (M-ABD) over
 *   `n = 2t + 1` full replicas. write = QUERY_TS → STORE(ts + 1), read = QUERY →
 *   STORE (write-back of the full value); each round waits for `t + 1` replies.
 * - {@link SingleClient}: one unreplicated server, GET/PUT in one round: the limit.
 *
 * Each client owns one connection per server (like one PowerStore `connect`), and runs
 * operations concurrently, matched by opId.
 */
import WebSocket from 'ws';
import { DEFAULT_MAX_FRAME_BYTES } from 'powerstore-server';
import { T, TS0, TS_BYTES, compareTs, decodeFrame, decodeTs, encodeFrame, encodeTs, type Frame, type Ts } from './wire.js';

/** Optional per-stage clocks (ms), for the profile. */
export interface ClientTimings {
  framing: number;
  send: number;
}

interface Round {
  need: number;
  replies: Frame[];
  resolve(replies: Frame[]): void;
  reject(e: Error): void;
  timer: ReturnType<typeof setTimeout>;
}

class Replicas {
  readonly #sockets: WebSocket[] = [];
  readonly #rounds = new Map<number, Round>();
  #nextOpId = 1;
  timings: ClientTimings | undefined;

  constructor(
    readonly urls: readonly string[],
    private readonly timeoutMs: number,
  ) {}

  async open(): Promise<void> {
    await Promise.all(
      this.urls.map(
        (url) =>
          new Promise<void>((resolve, reject) => {
            const ws = new WebSocket(url, { maxPayload: DEFAULT_MAX_FRAME_BYTES, perMessageDeflate: false });
            ws.binaryType = 'nodebuffer';
            ws.once('open', () => resolve());
            ws.once('error', reject);
            ws.on('message', (data: Buffer) => this.#onMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength)));
            this.#sockets.push(ws);
          }),
      ),
    );
  }

  #onMessage(bytes: Uint8Array): void {
    const t0 = performance.now();
    const frame = decodeFrame(bytes);
    if (this.timings) this.timings.framing += performance.now() - t0;
    const round = this.#rounds.get(frame.opId);
    if (!round) return;
    if (frame.type === T.ERROR) {
      this.#finish(frame.opId, round);
      round.reject(new Error('server error'));
      return;
    }
    round.replies.push(frame);
    if (round.replies.length >= round.need) {
      this.#finish(frame.opId, round);
      round.resolve(round.replies);
    }
  }

  #finish(opId: number, round: Round): void {
    clearTimeout(round.timer);
    this.#rounds.delete(opId);
  }

  /** Sends one frame (built per opId) to every server; resolves with the first `need` replies. */
  round(need: number, build: (opId: number) => Uint8Array): Promise<Frame[]> {
    const opId = this.#nextOpId++;
    return new Promise<Frame[]>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#rounds.delete(opId);
        reject(new Error(`round timed out after ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      this.#rounds.set(opId, { need, replies: [], resolve, reject, timer });
      const t0 = performance.now();
      const frame = build(opId);
      const t1 = performance.now();
      for (const ws of this.#sockets) ws.send(frame, { binary: true });
      if (this.timings) {
        this.timings.framing += t1 - t0;
        this.timings.send += performance.now() - t1;
      }
    });
  }

  close(): void {
    for (const ws of this.#sockets) ws.close(1000);
    for (const r of this.#rounds.values()) clearTimeout(r.timer);
    this.#rounds.clear();
  }
}

export interface KvClient {
  put(key: string, value: Uint8Array): Promise<void>;
  get(key: string): Promise<Uint8Array | undefined>;
  close(): void;
  timings: ClientTimings | undefined;
}

export class AbdClient implements KvClient {
  readonly #replicas: Replicas;
  readonly #need: number;
  readonly #writerId = 1 + Math.floor(Math.random() * 0xfffffffe);

  private constructor(replicas: Replicas) {
    this.#replicas = replicas;
    this.#need = Math.floor(replicas.urls.length / 2) + 1;
  }

  static async connect(urls: readonly string[], timeoutMs = 30_000): Promise<AbdClient> {
    const r = new Replicas(urls, timeoutMs);
    await r.open();
    return new AbdClient(r);
  }

  get timings(): ClientTimings | undefined {
    return this.#replicas.timings;
  }

  set timings(t: ClientTimings | undefined) {
    this.#replicas.timings = t;
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    const acks = await this.#replicas.round(this.#need, (opId) => encodeFrame(T.QUERY_TS, opId, key, undefined));
    let max = TS0;
    for (const a of acks) {
      const ts = decodeTs(a.body);
      if (compareTs(ts, max) > 0) max = ts;
    }
    await this.#store(key, { num: max.num + 1, writerId: this.#writerId }, value);
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    const replies = await this.#replicas.round(this.#need, (opId) => encodeFrame(T.QUERY, opId, key, undefined));
    let best: Frame | undefined;
    let bestTs = TS0;
    for (const r of replies) {
      const ts = decodeTs(r.body);
      if (!best || compareTs(ts, bestTs) > 0) {
        best = r;
        bestTs = ts;
      }
    }
    if (!best || best.body[TS_BYTES] !== 1) return undefined;
    const value = best.body.subarray(TS_BYTES + 1);
    // Write-back of the full value: what makes ABD reads atomic, and what PoWerStore avoids.
    await this.#store(key, bestTs, value);
    return value;
  }

  async #store(key: string, ts: Ts, value: Uint8Array): Promise<void> {
    await this.#replicas.round(this.#need, (opId) => encodeFrame(T.STORE, opId, key, encodeTs(ts), value));
  }

  close(): void {
    this.#replicas.close();
  }
}

export class SingleClient implements KvClient {
  readonly #replicas: Replicas;

  private constructor(replicas: Replicas) {
    this.#replicas = replicas;
  }

  static async connect(url: string, timeoutMs = 30_000): Promise<SingleClient> {
    const r = new Replicas([url], timeoutMs);
    await r.open();
    return new SingleClient(r);
  }

  get timings(): ClientTimings | undefined {
    return this.#replicas.timings;
  }

  set timings(t: ClientTimings | undefined) {
    this.#replicas.timings = t;
  }

  async put(key: string, value: Uint8Array): Promise<void> {
    await this.#replicas.round(1, (opId) => encodeFrame(T.PUT, opId, key, undefined, value));
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    const [r] = await this.#replicas.round(1, (opId) => encodeFrame(T.QUERY, opId, key, undefined));
    return r && r.body[TS_BYTES] === 1 ? r.body.subarray(TS_BYTES + 1) : undefined;
  }

  close(): void {
    this.#replicas.close();
  }
}

/** Server-side stage timings of a baseline server (its STATS request). */
export async function baselineServerStats(url: string): Promise<Record<string, number>> {
  const r = new Replicas([url], 5000);
  await r.open();
  try {
    const [f] = await r.round(1, (opId) => encodeFrame(T.STATS, opId, '', undefined));
    return JSON.parse(new TextDecoder().decode(f!.body)) as Record<string, number>;
  } finally {
    r.close();
  }
}
