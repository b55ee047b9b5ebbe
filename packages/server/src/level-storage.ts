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
 * Per-owner accounting: every key record names its owner and the bytes and entries it
 * holds; the totals per owner are summed from the key records at open and kept in a
 * {@link UsageLedger}, which reserves a new entry's bytes before it is written (so
 * concurrent STOREs cannot overshoot a quota) and gives them back if the write fails.
 *
 * Layout (string keys, binary values in the protocol's record format, `record.ts`):
 *   `m:meta`                     JSON {format, n, cluster, identity}
 *   `m:largest:<len, 10 digits>` lengths of fragments longer than any before (the last is
 *                                the longest ever stored): room the server reserves for a
 *                                FILTER reply before reading one. Only ever added, so
 *                                concurrent batches cannot overwrite a larger one.
 *   `k:<key>`                    the key's state: lc, owner, the collected mark, and
 *                                an index of its entries (timestamp, bytes, tombstone)
 *   `h:<len>:<key>:<num>:<wid>`  Hist[ts]
 */
import { ClassicLevel } from 'classic-level';
import {
  decodeEntryRecord,
  decodeKeyRecord,
  encodeEntryRecord,
  encodeKeyRecord,
  timestampKey,
  compareTimestamps,
  KeyedMutex,
  stateBytes,
  UsageLedger,
  type Candidate,
  type Charge,
  type HistoryEntry,
  type KeyRecord,
  type KeyState,
  type Reservation,
  type ServerStorage,
  type Timestamp,
  type Usage,
} from '@powerstore/protocol';
import { ServerError } from './errors.js';

/**
 * Version of the on-disk layout above. Format 1 (PowerStore 0.1, MAC-authenticated writes)
 * and format 2 (signed writes, history kept forever, no entry index) are refused.
 */
export const STORAGE_FORMAT = 3;

/** How to open a {@link LevelStorage}. */
export interface LevelStorageOptions {
  /** Directory of the LevelDB database; created if missing. */
  readonly path: string;
  /** Servers in the cluster; stored cross-checksums have `n` entries. */
  readonly n: number;
  /** The cluster id (base32): a database of another cluster is refused. */
  readonly cluster?: string;
  /**
   * Names the server and key this database belongs to; opening it under another identity
   * fails with `STORAGE_MISMATCH` instead of mixing two servers' data.
   */
  readonly identity?: string;
  /** `false` skips fsync (benchmarks only): acknowledged writes can be lost on power failure. */
  readonly sync?: boolean;
  /** Called after every batch, for metrics. */
  readonly onCommit?: (info: CommitInfo) => void;
  /** Key records kept decoded in memory (most recently used). Default 10 000; 0 disables. */
  readonly stateCacheKeys?: number;
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
/** One operation of a batch: a put, or a delete (garbage collection). */
export type Put = { type: 'put'; key: string; value: Uint8Array } | { type: 'del'; key: string };

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
        if (op.type === 'put') this.#bytes += op.value.length;
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
  readonly #mutex = new KeyedMutex();
  readonly #ledger = new UsageLedger();
  #closing: Promise<void> | undefined;
  #keys = 0;
  #entries = 0;
  #largestFragment = 0;
  /**
   * Decoded key records of recently used keys (`null`: known to have none), so CLOCK,
   * COLLECT and COMPLETE do not read LevelDB for a hot key. Updated only after a commit
   * is durable, under the key's exclusion, so it never disagrees with the disk.
   */
  readonly #states = new Map<string, KeyState | null>();
  readonly #stateCacheKeys: number;

  private constructor(db: ClassicLevel<string, Uint8Array>, options: LevelStorageOptions) {
    this.#db = db;
    this.#n = options.n;
    this.#committer = new GroupCommitter(db, options.sync ?? true, options.onCommit);
    this.#stateCacheKeys = options.stateCacheKeys ?? 10_000;
  }

  /**
   * Opens (creating if needed) the database at `options.path`. Fails with
   * `STORAGE_MISMATCH` when it belongs to another cluster, a cluster of another size,
   * another server, or an older storage format.
   */
  static async open(options: LevelStorageOptions): Promise<LevelStorage> {
    const db = new ClassicLevel<string, Uint8Array>(options.path, { keyEncoding: 'utf8', valueEncoding: 'view' });
    try {
      await db.open();
    } catch (err) {
      const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message;
      const locked = /lock/i.test(cause);
      throw new ServerError(
        'STORAGE_FAILED',
        locked ? `cannot open LevelDB at ${options.path}: another process (a running server?) holds its lock` : `cannot open LevelDB at ${options.path}: ${cause}`,
        { cause: err },
      );
    }
    try {
      const storage = new LevelStorage(db, options);
      await storage.#checkMeta(options);
      await storage.#load();
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
      const meta = JSON.stringify({ format: STORAGE_FORMAT, n: options.n, cluster: options.cluster ?? '', identity });
      await this.#db.put('m:meta', new TextEncoder().encode(meta), { sync: true });
      return;
    }
    let meta: { format?: unknown; n?: unknown; cluster?: unknown; identity?: unknown };
    try {
      meta = JSON.parse(new TextDecoder().decode(raw)) as typeof meta;
    } catch {
      throw new ServerError('STORAGE_CORRUPT', `${options.path}: unreadable metadata record`);
    }
    if (meta.format === 1) {
      throw new ServerError(
        'STORAGE_MISMATCH',
        `${options.path}: written by PowerStore 0.1 (storage format 1, MAC-authenticated writes); this server reads format ${STORAGE_FORMAT} (signed writes). Start it on an empty data directory and write the values again through a client; the old directory can be deleted.`,
      );
    }
    if (meta.format === 2) {
      throw new ServerError(
        'STORAGE_MISMATCH',
        `${options.path}: storage format 2 (history kept forever, no entry index); this server reads format ${STORAGE_FORMAT}. Start it on an empty data directory and write the values again through a client.`,
      );
    }
    if (meta.format !== STORAGE_FORMAT) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: storage format ${String(meta.format)}, this server reads ${STORAGE_FORMAT}`);
    }
    if (meta.n !== options.n) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to a cluster of ${String(meta.n)} servers, not ${options.n}`);
    }
    if (options.cluster !== undefined && meta.cluster !== options.cluster) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to cluster ${String(meta.cluster)}, not ${options.cluster}`);
    }
    if (options.identity !== undefined && meta.identity !== identity) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to another server or key (${String(meta.identity)}), not ${identity}`);
    }
  }

  async #load(): Promise<void> {
    let largest: number | undefined;
    for await (const k of this.#db.keys({ gte: 'm:largest:', lt: 'm:largest;', reverse: true, limit: 1 })) largest = Number(k.slice('m:largest:'.length));
    this.#largestFragment = largest ?? 0;
    // Summed once at open from the per-key records (not from every history entry), then
    // kept up to date as writes commit.
    for await (const [k, raw] of this.#db.iterator({ gte: 'k:', lt: 'k;' })) {
      const key = k.slice(2);
      const { state } = this.#decodeKey(key, raw);
      if (state.index.length > 0) {
        // Entries written before `m:largest` existed: assume the worst.
        if (largest === undefined) this.#largestFragment = Number.POSITIVE_INFINITY;
        this.#keys++;
        this.#entries += state.index.length;
        this.#ledger.add(state.owner, stateBytes(state), 1);
      }
    }
  }

  #decodeKey(key: string, raw: Uint8Array): { state: KeyState } {
    try {
      const r = decodeKeyRecord(new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength), this.#n);
      if (r.key !== key) throw new Error(`record names key ${JSON.stringify(r.key)}`);
      return r;
    } catch (err) {
      throw new ServerError('STORAGE_CORRUPT', `key ${JSON.stringify(key)}: ${(err as Error).message}`);
    }
  }

  /** Keys holding at least one history entry. */
  get keyCount(): number {
    return this.#keys;
  }

  /**
   * The longest fragment stored so far (an upper bound: it never shrinks), so a FILTER's
   * reply can be reserved for before the fragment is read into memory.
   */
  get largestFragmentBytes(): number {
    return this.#largestFragment;
  }

  /** History entries stored, over all keys. */
  get historyEntryCount(): number {
    return this.#entries;
  }

  usage(owner: string): Usage {
    return this.#ledger.usage(owner);
  }

  owners(): ReadonlyMap<string, Usage> {
    return this.#ledger.owners();
  }

  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(new ServerError('STORAGE_CLOSED', 'storage is closing'));
    return this.#mutex.run(key, () => this.#run(key, fn));
  }

  async #run<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    const cached = this.#states.get(key);
    if (cached !== undefined) {
      // Most recently used last.
      this.#states.delete(key);
      this.#states.set(key, cached);
    }
    const txn = new Transaction(this.#db, this.#n, key, this.#ledger, (k, raw) => this.#decodeKey(k, raw).state, () => this.#largestFragment, cached);
    let result: T;
    try {
      result = await fn(txn.record);
    } catch (err) {
      txn.abort();
      this.#states.delete(key);
      throw err;
    } finally {
      txn.close();
    }
    const ops = txn.operations();
    if (ops.length > 0) {
      try {
        await this.#committer.commit(ops);
      } catch (err) {
        txn.abort();
        this.#states.delete(key);
        throw err;
      }
      // Counted only once durable, so a failed batch does not skew the gauges.
      this.#keys += txn.newKeys;
      this.#entries += txn.newEntries;
      txn.committed();
      this.#largestFragment = Math.max(this.#largestFragment, txn.largestFragment);
    }
    const state = txn.state();
    if (state !== undefined && this.#stateCacheKeys > 0) {
      this.#states.delete(key);
      this.#states.set(key, state);
      if (this.#states.size > this.#stateCacheKeys) this.#states.delete(this.#states.keys().next().value!);
    }
    return result;
  }

  /**
   * Stops accepting callbacks, lets running ones finish and their batches sync, then
   * closes the database. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#mutex.idle();
      await this.#committer.idle();
      await this.#db.close();
    })();
    return this.#closing;
  }
}

/** One callback's view: reads see its own buffered writes, writes wait for the commit. */
class Transaction {
  readonly #puts = new Map<string, Put>();
  #state: KeyState | undefined;
  #stateLoaded = false;
  readonly #entries = new Map<string, HistoryEntry | undefined>();
  readonly #reservations: Reservation[] = [];
  /** Usage given back by deleted entries, applied once the deletes are durable. */
  readonly #released: Reservation[] = [];
  #open = true;
  /** Keys and entries this transaction adds (negative when it collects more than it stores). */
  newKeys = 0;
  newEntries = 0;
  /** The longest fragment this transaction stores (0 if none). */
  largestFragment = 0;
  readonly record: KeyRecord;

  constructor(
    private readonly db: ClassicLevel<string, Uint8Array>,
    private readonly n: number,
    private readonly key: string,
    private readonly ledger: UsageLedger,
    private readonly decodeState: (key: string, raw: Uint8Array) => KeyState,
    private readonly largestSoFar: () => number,
    cached: KeyState | null | undefined,
  ) {
    if (cached !== undefined) {
      this.#state = cached ?? undefined;
      this.#stateLoaded = true;
    }
    this.record = {
      getLc: () => this.#guard(async () => (await this.#getState()).lc),
      setLc: (c) => this.#guard(() => this.#setLc(c)),
      getEntry: (ts) => this.#guard(() => this.#getEntry(ts)),
      putEntry: (e, charge) => this.#guard(() => this.#putEntry(e, charge)),
      index: () => this.#guard(async () => (await this.#getState()).index),
      deleteEntry: (ts) => this.#guard(() => this.#deleteEntry(ts)),
      getCollected: () => this.#guard(async () => (await this.#getState()).collected),
    };
  }

  close(): void {
    this.#open = false;
  }

  /** The writes never became durable: give back what was reserved. */
  abort(): void {
    for (const r of this.#reservations.splice(0)) this.ledger.release(r);
    this.#released.length = 0;
  }

  /** The writes are durable: what deleted entries held is no longer used. */
  committed(): void {
    for (const r of this.#released.splice(0)) this.ledger.release(r);
  }

  /** The key's state as this transaction leaves it (`null`: none), if it was read at all. */
  state(): KeyState | null | undefined {
    return this.#stateLoaded ? (this.#state ?? null) : undefined;
  }

  operations(): Put[] {
    return [...this.#puts.values()];
  }

  async #guard<R>(f: () => Promise<R>): Promise<R> {
    // A record used after its callback returned would write outside the exclusion.
    if (!this.#open) throw new ServerError('STORAGE_CLOSED', 'KeyRecord used after its withKey callback settled');
    return f();
  }

  get #stateKey(): string {
    return `k:${this.key}`;
  }

  #entryKey(ts: Timestamp): string {
    return `h:${this.key.length}:${this.key}:${timestampKey(ts)}`;
  }

  async #getState(): Promise<KeyState> {
    if (!this.#stateLoaded) {
      const raw = await this.db.get(this.#stateKey);
      this.#state = raw === undefined ? undefined : this.decodeState(this.key, raw);
      this.#stateLoaded = true;
    }
    return this.#state ?? { lc: undefined, owner: '', index: [], collected: undefined };
  }

  #setState(s: KeyState): void {
    this.#state = s;
    this.#puts.set(this.#stateKey, { type: 'put', key: this.#stateKey, value: encodeKeyRecord(this.key, s) });
  }

  async #setLc(c: Candidate): Promise<void> {
    this.#setState({ ...(await this.#getState()), lc: c });
  }

  async #getEntry(ts: Timestamp): Promise<HistoryEntry | undefined> {
    const k = this.#entryKey(ts);
    if (!this.#entries.has(k)) {
      const raw = await this.db.get(k);
      this.#entries.set(k, raw === undefined ? undefined : this.#decodeEntry(raw));
    }
    return this.#entries.get(k);
  }

  async #putEntry(e: HistoryEntry, charge: Charge): Promise<boolean> {
    const state = await this.#getState();
    // Check and reserve in one synchronous step: no other callback can slip in between.
    const reservation = this.ledger.reserve(charge.owner, charge.bytes, state.index.length === 0, charge.quota);
    if (!reservation) return false;
    this.#reservations.push(reservation);
    const k = this.#entryKey(e.ts);
    if (state.index.length === 0) this.newKeys++;
    this.newEntries++;
    this.#entries.set(k, e);
    this.#puts.set(k, { type: 'put', key: k, value: encodeEntryRecord(this.key, e) });
    if (e.fragment.length > this.largestSoFar() && e.fragment.length > this.largestFragment) {
      this.largestFragment = e.fragment.length;
      const marker = `m:largest:${String(e.fragment.length).padStart(10, '0')}`;
      this.#puts.set(marker, { type: 'put', key: marker, value: new Uint8Array(0) });
    }
    const info = { ts: e.ts, bytes: charge.bytes, tombstone: e.cc.tombstone };
    const index = [...state.index, info].sort((a, b) => compareTimestamps(a.ts, b.ts));
    this.#setState({ ...state, owner: charge.owner, index });
    return true;
  }

  async #deleteEntry(ts: Timestamp): Promise<void> {
    const state = await this.#getState();
    const info = state.index.find((e) => compareTimestamps(e.ts, ts) === 0);
    if (!info) return;
    const k = this.#entryKey(ts);
    this.#entries.set(k, undefined);
    this.#puts.set(k, { type: 'del', key: k });
    const index = state.index.filter((e) => e !== info);
    this.newEntries--;
    if (index.length === 0) this.newKeys--;
    this.#released.push({ owner: state.owner, bytes: info.bytes, keys: index.length === 0 ? 1 : 0 });
    const collected = state.collected && compareTimestamps(state.collected, ts) > 0 ? state.collected : ts;
    this.#setState({ ...state, index, collected });
  }

  #decodeEntry(raw: Uint8Array): HistoryEntry {
    let r;
    try {
      // LevelDB hands back Buffers; a plain view keeps callers' byte comparisons and
      // structural equality independent of Node's Buffer subclass, without copying.
      r = decodeEntryRecord(new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength), this.n);
    } catch (err) {
      throw new ServerError('STORAGE_CORRUPT', `key ${JSON.stringify(this.key)}: ${(err as Error).message}`);
    }
    if (r.key !== this.key) throw new ServerError('STORAGE_CORRUPT', `key ${JSON.stringify(this.key)}: record names key ${JSON.stringify(r.key)}`);
    return r.entry;
  }
}
