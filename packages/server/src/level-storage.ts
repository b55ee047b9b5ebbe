/**
 * {@link ServerStorage} on LevelDB (classic-level), durable before acknowledgement.
 *
 * Per-key exclusion: callbacks for one key form a promise chain, and the next one starts
 * only after the previous one's writes are synced, so a callback never reads anything
 * that could still be lost. Different keys run concurrently.
 *
 * Group commit: a callback's writes are buffered in memory while it runs and handed to
 * one {@link GroupCommitter} when it returns. The committer writes everything handed to it
 * during one turn of the event loop, or while the previous batch was syncing, as a single
 * LevelDB batch with `{ sync: true }`, and resolves every contributing callback once that
 * batch is durable. One fsync then covers many concurrent requests, which is what makes
 * synchronous durability affordable.
 *
 * Layout (string keys, binary values):
 *   `m:meta`                     JSON {format, n, identity}
 *   `l:<key>`                    lc, encoded as a COMPLETE frame of the wire codec
 *   `h:<len>:<key>:<num>:<wid>`  Hist[ts], encoded as a STORE frame
 * Reusing the wire codec means stored records get the same bounds checks as frames.
 */
import { ClassicLevel } from 'classic-level';
import {
  decodeMessage,
  encodeMessage,
  timestampKey,
  type Candidate,
  type HistoryEntry,
  type KeyRecord,
  type ServerStorage,
  type Timestamp,
} from '@powerstore/protocol';
import { ServerError } from './errors.js';

/** Version of the on-disk layout above. */
export const STORAGE_FORMAT = 1;

/** How to open a {@link LevelStorage}. */
export interface LevelStorageOptions {
  /** Directory of the LevelDB database; created if missing. */
  readonly path: string;
  /** Servers in the cluster; stored vectors have `n` entries. */
  readonly n: number;
  /**
   * Names the server and key this database belongs to; opening it under another identity
   * fails with `STORAGE_MISMATCH` instead of mixing two servers' data.
   */
  readonly identity?: string;
  /** `false` skips fsync (benchmarks only): acknowledged writes can be lost on power failure. */
  readonly sync?: boolean;
  /** Called after every batch, for metrics. */
  readonly onCommit?: (info: CommitInfo) => void;
}

/** One group commit, as reported to {@link LevelStorageOptions.onCommit}. */
export interface CommitInfo {
  /** Callbacks whose writes the batch carried. */
  readonly callbacks: number;
  /** LevelDB operations in the batch. */
  readonly operations: number;
  /** Bytes of values in the batch. */
  readonly bytes: number;
  /** Wall time of the synced write. */
  readonly seconds: number;
}

/** One write of a {@link GroupCommitter} batch. */
export type Put = { type: 'put'; key: string; value: Uint8Array };

interface Waiter {
  resolve(): void;
  reject(err: unknown): void;
}

/**
 * Accumulates batches from concurrent callbacks and writes them as one synced LevelDB
 * batch; at most one write is outstanding, and whatever arrives meanwhile goes into the
 * next one. Exported so the benchmark baselines store exactly as the server does.
 */
export class GroupCommitter {
  #ops: Put[] = [];
  #bytes = 0;
  #waiters: Waiter[] = [];
  #writing: Promise<void> | undefined;
  #scheduled = false;

  constructor(
    private readonly db: ClassicLevel<string, Uint8Array>,
    private readonly sync: boolean,
    private readonly onCommit: ((info: CommitInfo) => void) | undefined,
  ) {}

  /** Resolves once `ops` are durable (or written, without sync). */
  commit(ops: Put[]): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      for (const op of ops) {
        this.#ops.push(op);
        this.#bytes += op.value.length;
      }
      this.#waiters.push({ resolve, reject });
      this.#schedule();
    });
  }

  /** Resolves when nothing is pending or being written. */
  async idle(): Promise<void> {
    while (this.#writing || this.#waiters.length > 0 || this.#scheduled) {
      await (this.#writing ?? new Promise((r) => setImmediate(r)));
    }
  }

  #schedule(): void {
    if (this.#writing || this.#scheduled) return;
    this.#scheduled = true;
    // One event-loop turn lets every callback that finishes "now" join this batch.
    setImmediate(() => {
      this.#scheduled = false;
      this.#flush();
    });
  }

  #flush(): void {
    if (this.#writing || this.#waiters.length === 0) return;
    const ops = this.#ops;
    const waiters = this.#waiters;
    const bytes = this.#bytes;
    this.#ops = [];
    this.#waiters = [];
    this.#bytes = 0;
    const started = performance.now();
    this.#writing = this.db.batch(ops, { sync: this.sync }).then(
      () => {
        this.onCommit?.({ callbacks: waiters.length, operations: ops.length, bytes, seconds: (performance.now() - started) / 1000 });
        for (const w of waiters) w.resolve();
      },
      (err: unknown) => {
        const wrapped = new ServerError('STORAGE_FAILED', `LevelDB write failed: ${(err as Error).message}`, { cause: err });
        for (const w of waiters) w.reject(wrapped);
      },
    );
    void this.#writing.finally(() => {
      this.#writing = undefined;
      if (this.#waiters.length > 0) this.#flush();
    });
  }
}

/** LevelDB-backed {@link ServerStorage}; see the module comment for the guarantees. */
export class LevelStorage implements ServerStorage {
  readonly #db: ClassicLevel<string, Uint8Array>;
  readonly #n: number;
  readonly #committer: GroupCommitter;
  readonly #tails = new Map<string, Promise<unknown>>();
  #closing: Promise<void> | undefined;
  #keys = 0;
  #entries = 0;

  private constructor(db: ClassicLevel<string, Uint8Array>, options: LevelStorageOptions) {
    this.#db = db;
    this.#n = options.n;
    this.#committer = new GroupCommitter(db, options.sync ?? true, options.onCommit);
  }

  /**
   * Opens (creating if needed) the database at `options.path`. Fails with
   * `STORAGE_MISMATCH` when it belongs to a cluster of another size or another identity.
   */
  static async open(options: LevelStorageOptions): Promise<LevelStorage> {
    const db = new ClassicLevel<string, Uint8Array>(options.path, { keyEncoding: 'utf8', valueEncoding: 'view' });
    try {
      await db.open();
    } catch (err) {
      throw new ServerError('STORAGE_FAILED', `cannot open LevelDB at ${options.path}: ${(err as Error).message}`, { cause: err });
    }
    try {
      const storage = new LevelStorage(db, options);
      await storage.#checkMeta(options);
      await storage.#count();
      return storage;
    } catch (err) {
      await db.close();
      throw err;
    }
  }

  async #checkMeta(options: LevelStorageOptions): Promise<void> {
    const raw = await this.#db.get('m:meta');
    const identity = options.identity ?? '';
    if (raw === undefined) {
      const meta = JSON.stringify({ format: STORAGE_FORMAT, n: options.n, identity });
      await this.#db.put('m:meta', new TextEncoder().encode(meta), { sync: true });
      return;
    }
    let meta: { format?: unknown; n?: unknown; identity?: unknown };
    try {
      meta = JSON.parse(new TextDecoder().decode(raw)) as typeof meta;
    } catch {
      throw new ServerError('STORAGE_CORRUPT', `${options.path}: unreadable metadata record`);
    }
    if (meta.format !== STORAGE_FORMAT) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: storage format ${String(meta.format)}, this server reads ${STORAGE_FORMAT}`);
    }
    if (meta.n !== options.n) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to a cluster of ${String(meta.n)} servers, not ${options.n}`);
    }
    if (options.identity !== undefined && meta.identity !== identity) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to another server or key (${String(meta.identity)}), not ${identity}`);
    }
  }

  async #count(): Promise<void> {
    // Counted once at open so the gauges are right after a restart; kept up to date after.
    for await (const _ of this.#db.keys({ gte: 'l:', lt: 'l;' })) this.#keys++;
    for await (const _ of this.#db.keys({ gte: 'h:', lt: 'h;' })) this.#entries++;
  }

  /** Keys with a completed write (`lc` set). */
  get keyCount(): number {
    return this.#keys;
  }

  /** History entries stored, over all keys. */
  get historyEntryCount(): number {
    return this.#entries;
  }

  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(new ServerError('STORAGE_CLOSED', 'storage is closing'));
    const prev = this.#tails.get(key) ?? Promise.resolve();
    const run = prev.then(
      () => this.#run(key, fn),
      () => this.#run(key, fn),
    );
    const tail = run.catch(() => undefined);
    this.#tails.set(key, tail);
    // Forget idle chains so the map does not grow with every key ever touched.
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return run;
  }

  async #run<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    const txn = new Transaction(this.#db, this.#n, key);
    let result: T;
    try {
      result = await fn(txn.record);
    } finally {
      txn.close();
    }
    const ops = txn.operations();
    if (ops.length > 0) {
      await this.#committer.commit(ops);
      // Counted only once durable, so a failed batch does not skew the gauges.
      this.#keys += txn.newKeys;
      this.#entries += txn.newEntries;
    }
    return result;
  }

  /**
   * Stops accepting callbacks, lets running ones finish and their batches sync, then
   * closes the database. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      while (this.#tails.size > 0) await Promise.all([...this.#tails.values()]);
      await this.#committer.idle();
      await this.#db.close();
    })();
    return this.#closing;
  }
}

/** One callback's view: reads see its own buffered writes, writes wait for the commit. */
class Transaction {
  readonly #puts = new Map<string, Put>();
  #lc: { value: Candidate | undefined } | undefined;
  readonly #entries = new Map<string, HistoryEntry | undefined>();
  #open = true;
  newKeys = 0;
  newEntries = 0;
  readonly record: KeyRecord;

  constructor(
    private readonly db: ClassicLevel<string, Uint8Array>,
    private readonly n: number,
    private readonly key: string,
  ) {
    this.record = {
      getLc: () => this.#guard(() => this.#getLc()),
      setLc: (c) => this.#guard(() => this.#setLc(c)),
      getEntry: (ts) => this.#guard(() => this.#getEntry(ts)),
      putEntry: (e) => this.#guard(() => this.#putEntry(e)),
    };
  }

  close(): void {
    this.#open = false;
  }

  operations(): Put[] {
    return [...this.#puts.values()];
  }

  async #guard<R>(f: () => Promise<R>): Promise<R> {
    // A record used after its callback returned would write outside the exclusion.
    if (!this.#open) throw new ServerError('STORAGE_CLOSED', 'KeyRecord used after its withKey callback settled');
    return f();
  }

  get #lcKey(): string {
    return `l:${this.key}`;
  }

  #entryKey(ts: Timestamp): string {
    return `h:${this.key.length}:${this.key}:${timestampKey(ts)}`;
  }

  async #getLc(): Promise<Candidate | undefined> {
    if (!this.#lc) {
      const raw = await this.db.get(this.#lcKey);
      this.#lc = { value: raw === undefined ? undefined : this.#decodeLc(raw) };
    }
    return this.#lc.value;
  }

  async #setLc(c: Candidate): Promise<void> {
    const before = await this.#getLc();
    const value = encodeMessage({ type: 'COMPLETE', key: this.key, opId: 0, candidate: c });
    if (before === undefined && !this.#puts.has(this.#lcKey)) this.newKeys++;
    this.#lc = { value: c };
    this.#puts.set(this.#lcKey, { type: 'put', key: this.#lcKey, value });
  }

  async #getEntry(ts: Timestamp): Promise<HistoryEntry | undefined> {
    const k = this.#entryKey(ts);
    if (!this.#entries.has(k)) {
      const raw = await this.db.get(k);
      this.#entries.set(k, raw === undefined ? undefined : this.#decodeEntry(raw));
    }
    return this.#entries.get(k);
  }

  async #putEntry(e: HistoryEntry): Promise<void> {
    const k = this.#entryKey(e.ts);
    const before = await this.#getEntry(e.ts);
    const { ts, stripe, fragment, cc, nonceHash, vec } = e;
    const value = encodeMessage({ type: 'STORE', key: this.key, opId: 0, ts, stripe, fragment, cc, nonceHash, vec });
    if (before === undefined && !this.#puts.has(k)) this.newEntries++;
    this.#entries.set(k, e);
    this.#puts.set(k, { type: 'put', key: k, value });
  }

  #decodeLc(raw: Uint8Array): Candidate {
    const m = this.#decode(raw);
    if (m.type !== 'COMPLETE') throw this.#corrupt(`lc record is a ${m.type}`);
    return m.candidate;
  }

  #decodeEntry(raw: Uint8Array): HistoryEntry {
    const m = this.#decode(raw);
    if (m.type !== 'STORE') throw this.#corrupt(`history record is a ${m.type}`);
    const { ts, stripe, fragment, cc, nonceHash, vec } = m;
    return { ts, stripe, fragment, cc, nonceHash, vec };
  }

  #decode(raw: Uint8Array) {
    let m;
    try {
      // LevelDB hands back Buffers; a plain view keeps callers' byte comparisons and
      // structural equality independent of Node's Buffer subclass, without copying.
      m = decodeMessage(new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength), { n: this.n });
    } catch (err) {
      throw this.#corrupt((err as Error).message);
    }
    if (m.key !== this.key) throw this.#corrupt(`record names key ${JSON.stringify(m.key)}`);
    return m;
  }

  #corrupt(detail: string): ServerError {
    return new ServerError('STORAGE_CORRUPT', `key ${JSON.stringify(this.key)}: ${detail}`);
  }
}
