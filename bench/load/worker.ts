/**
 * A load-generating process, forked by bench/run.ts with an IPC channel (with --net,
 * started in its own network namespace through `ip netns exec`, which keeps the
 * channel). It keeps a pool of connected clients per system (each client = one
 * PowerStore `connect`, or one baseline client, with its own connection to every
 * server) and on `run` drives the requested clients as closed loops: one operation at a
 * time, back to back, for the warm-up and then the measured window; every loop stops by
 * itself at the window's end.
 */
import * as ws from 'ws';
import { connect, type Store } from '@powerstore/client';
import { AbdClient, SingleClient, type KvClient } from '../baselines/client.js';
import type { SystemName } from '../lib/clusters.js';

export type Op = 'read' | 'write' | 'mixed';
export type KeyPattern = 'one' | 'distinct';

export interface RunRequest {
  readonly type: 'run';
  readonly id: number;
  readonly system: SystemName;
  readonly urls: readonly string[];
  readonly writer?: { readonly cluster: object; readonly identity: object };
  /**
   * PowerStore only: keys in the writer's namespace, so values are encrypted by the client
   * (run.ts --encrypt). Without it keys are outside every namespace and stored as given,
   * as before the client encrypted.
   */
  readonly encrypt?: boolean;
  readonly op: Op;
  readonly valueBytes: number;
  readonly keys: KeyPattern;
  /** Global client indices this worker runs. */
  readonly clients: readonly number[];
  readonly warmupMs: number;
  readonly measureMs: number;
}

export interface RunResult {
  readonly type: 'result';
  readonly id: number;
  readonly reads: number[];
  readonly writes: number[];
  readonly errors: number;
  readonly firstError?: string;
}

type ParentMessage = RunRequest | { type: 'go'; id: number } | { type: 'drop'; pool: string } | { type: 'exit' };

const OP_TIMEOUT_MS = 60_000;

/**
 * What-if experiment (`run.ts --ws-zero-mask`), never the default: every client→server
 * frame of this process — PowerStore client and baselines alike, since they share the
 * one `ws` module — goes out with an all-zero mask, which ws does not apply. It stands in
 * for fast masking (the `bufferutil` addon); see bench/profile/ws-mask.ts.
 */
if (process.env['BENCH_WS_ZERO_MASK'] === '1') {
  type FrameFn = (data: Buffer, options: Record<string, unknown>) => Buffer[];
  // ws's ESM entry re-exports the Sender class the sockets use.
  const sender = (ws as unknown as { Sender: { frame: FrameFn } }).Sender;
  const frame = sender.frame.bind(sender);
  sender.frame = (data, options) => frame(data, options['mask'] ? { ...options, generateMask: (m: Buffer) => void m.fill(0) } : options);
}
const READ_FRACTION = 0.8;

class PowerStoreKv implements KvClient {
  timings = undefined;
  readonly #prefix: string;
  constructor(
    private readonly store: Store,
    encrypt: boolean,
  ) {
    this.#prefix = encrypt ? store.namespace! : '';
  }
  static async connect(writer: { readonly cluster: object; readonly identity: object }, encrypt: boolean): Promise<PowerStoreKv> {
    // allowInsecure: the bench's servers speak plaintext ws:// like the baselines'; on an
    // emulated network (run.ts --net) they sit at 10.x addresses, which connect() would
    // otherwise refuse as "not loopback". No effect on loopback.
    return new PowerStoreKv(
      await connect({ cluster: writer.cluster, identity: writer.identity, timeoutMs: OP_TIMEOUT_MS, allowInsecure: true }),
      encrypt,
    );
  }
  put(key: string, value: Uint8Array): Promise<void> {
    return this.store.put(this.#prefix + key, value);
  }
  get(key: string): Promise<Uint8Array | undefined> {
    return this.store.get(this.#prefix + key);
  }
  close(): void {
    this.store.close();
  }
}

interface Pool {
  clients: Map<number, KvClient>;
  written: Set<string>;
}

const pools = new Map<string, Pool>();
const values = new Map<number, Uint8Array>();
const goWaiters = new Map<number, () => void>();

function valueOf(bytes: number): Uint8Array {
  let v = values.get(bytes);
  if (!v) {
    v = new Uint8Array(bytes);
    for (let off = 0; off < bytes; off += 65536) crypto.getRandomValues(v.subarray(off, Math.min(bytes, off + 65536)));
    values.set(bytes, v);
  }
  return v;
}

async function client(req: RunRequest, pool: Pool, index: number): Promise<KvClient> {
  let c = pool.clients.get(index);
  if (!c) {
    if (req.system === 'powerstore') c = await PowerStoreKv.connect(req.writer!, req.encrypt === true);
    else if (req.system === 'm-abd') c = await AbdClient.connect(req.urls, OP_TIMEOUT_MS);
    else c = await SingleClient.connect(req.urls[0]!, OP_TIMEOUT_MS);
    pool.clients.set(index, c);
  }
  return c;
}

export function keyOf(keys: KeyPattern, valueBytes: number, index: number): string {
  return keys === 'one' ? `bench/${valueBytes}` : `bench/${valueBytes}/c${index}`;
}

async function run(req: RunRequest): Promise<RunResult> {
  const poolKey = req.urls[0]!;
  let pool = pools.get(poolKey);
  if (!pool) pools.set(poolKey, (pool = { clients: new Map(), written: new Set() }));
  const value = valueOf(req.valueBytes);
  const clients = await Promise.all(req.clients.map((i) => client(req, pool, i)));
  // Reads need something to read: write each key once, before the clock starts.
  if (req.op !== 'write') {
    await Promise.all(
      req.clients.map(async (i, j) => {
        const key = keyOf(req.keys, req.valueBytes, i);
        if (pool.written.has(key)) return;
        await clients[j]!.put(key, value);
        pool.written.add(key);
      }),
    );
  }
  process.send!({ type: 'ready', id: req.id });
  await new Promise<void>((resolve) => goWaiters.set(req.id, resolve));

  const start = performance.now();
  const measureFrom = start + req.warmupMs;
  const end = measureFrom + req.measureMs;
  const reads: number[] = [];
  const writes: number[] = [];
  let errors = 0;
  let firstError: string | undefined;
  await Promise.all(
    req.clients.map(async (i, j) => {
      const c = clients[j]!;
      const key = keyOf(req.keys, req.valueBytes, i);
      // Bounded in time (the window) and in count (no loop runs more than 10^6 ops).
      for (let n = 0; n < 1_000_000 && performance.now() < end; n++) {
        const isRead = req.op === 'read' || (req.op === 'mixed' && Math.random() < READ_FRACTION);
        const t0 = performance.now();
        try {
          if (isRead) {
            const got = await c.get(key);
            if (!got || got.length !== req.valueBytes)
              throw new Error(`read ${got?.length ?? 'nothing'} bytes, expected ${req.valueBytes}`);
          } else {
            await c.put(key, value);
          }
        } catch (e) {
          errors++;
          firstError ??= (e as Error).message;
          await new Promise((r) => setTimeout(r, 20));
          continue;
        }
        const t1 = performance.now();
        if (t1 >= measureFrom && t1 <= end) (isRead ? reads : writes).push(t1 - t0);
      }
    }),
  );
  return { type: 'result', id: req.id, reads, writes, errors, ...(firstError ? { firstError } : {}) };
}

process.on('message', (m: ParentMessage) => {
  if (m.type === 'run') {
    run(m).then(
      (r) => process.send!(r),
      (e: unknown) =>
        process.send!({
          type: 'result',
          id: m.id,
          reads: [],
          writes: [],
          errors: 1,
          firstError: String((e as Error).stack ?? e),
        } satisfies RunResult),
    );
  } else if (m.type === 'go') {
    goWaiters.get(m.id)?.();
    goWaiters.delete(m.id);
  } else if (m.type === 'drop') {
    const pool = pools.get(m.pool);
    pool?.clients.forEach((c) => c.close());
    pools.delete(m.pool);
  } else if (m.type === 'exit') {
    for (const p of pools.values()) p.clients.forEach((c) => c.close());
    process.exit(0);
  }
});
process.on('disconnect', () => process.exit(0));
