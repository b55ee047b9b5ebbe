/**
 * The server's storage: one small interface ({@link ServerStorage}) and one abstract base
 * that owns everything backends would otherwise each get subtly wrong
 * ({@link AbstractStorage}). In the manner of `abstract-level`: a backend implements only
 * reads and one atomic commit; the conformance suite (`testing/storage-conformance.ts`)
 * runs on every backend, the in-memory one of `testing/memory-storage.ts` included.
 *
 * Per-key atomicity: {@link ServerStorage.withKey} runs a handler with exclusive access to
 * one key's record (`lc`, the history entries, the collected mark), buffers the handler's
 * writes, and resolves only once the backend has made them durable in one commit. A
 * handler that throws leaves nothing behind. The server state machine relies on it for the
 * read-compare-write of `lc` (COMPLETE, FILTER) and for write-once history, and
 * acknowledges nothing before `withKey` resolves. Different keys run in parallel.
 *
 * Per-owner accounting: every history entry is charged to an owner, and
 * {@link KeyRecord.putEntry} checks the owner's quota and reserves the bytes in one
 * synchronous step, so concurrent STOREs of different keys cannot overshoot a quota.
 */
import { certificatesEqual, type Candidate } from '../auth/candidate.js';
import type { CrossChecksum } from '../core/cross-checksum.js';
import { detached } from '../core/bytes.js';
import { MAX_LIST_SCAN } from '../wire/list-bounds.js';
import { KeyedMutex } from './key-mutex.js';
import type { HistoryEntry } from '../wire/messages.js';
import type { Quota } from '../auth/policy.js';
import { entriesOf, type EntryMeta, type KeyState, type WriteInfo } from './record.js';
import { MIN_STRIPE_SIZE, type StripeLayout } from '../core/stripes.js';
import { compareTimestamps, timestampKey, timestampsEqual, TS0, type Timestamp } from '../auth/timestamp.js';

/** What one owner has stored on one server. */
export interface Usage {
  /** Bytes charged for history entries (see `historyEntryBytes`). */
  readonly bytes: number;
  /** Keys holding a value: a history entry that is not a delete (a deleted key gives its slot back). */
  readonly keys: number;
}

/** Who pays for a new history entry, how much, and the limit. */
export interface Charge {
  readonly owner: string;
  readonly bytes: number;
  readonly quota: Quota;
  /** The server's time (ms) of the STORE, kept as its write's {@link WriteInfo.touched}. */
  readonly at?: number;
}

/** One key's record, valid only inside the `withKey` callback that received it. */
export interface KeyRecord {
  /** The last completed candidate `lc`; `undefined` is `c0`. */
  getLc(): Promise<Candidate | undefined>;
  setLc(candidate: Candidate): Promise<void>;
  /** `Hist[ts]` by `(num, writerId)` (its stripe `stripe`, default 0), fragment included. */
  getEntry(ts: Timestamp, stripe?: number): Promise<HistoryEntry | undefined>;
  /** `Hist[ts]` (stripe `stripe`, default 0) without its fragment: what STORE retries and validity checks need, without reading the bytes. */
  getEntryMeta(ts: Timestamp, stripe?: number): Promise<EntryMeta | undefined>;
  /**
   * Stores `Hist[entry.ts]`'s stripe `entry.stripe` (the caller has checked it is empty) and charges it to
   * `charge.owner`, plus one key if the key held no value before and this entry is not a
   * delete, unless that would exceed `charge.quota`: then it stores nothing and resolves
   * `false`. The charge counts in {@link ServerStorage.usage} from the moment it is
   * accepted and is undone if the write fails.
   */
  putEntry(entry: HistoryEntry, charge: Charge): Promise<boolean>;
  /** The writes stored, oldest first, one per timestamp, from the key's own record (no entry is read). */
  index(): Promise<readonly WriteInfo[]>;
  /**
   * Writes `entry` again over the stored entry of its timestamp and stripe, which the index
   * lists, changing neither the index nor any charge: a repair of stored bytes found
   * damaged (the caller has checked the entry is the one the index stands for).
   */
  restoreEntry(entry: HistoryEntry): Promise<void>;
  /**
   * Garbage collection: removes `Hist[ts]`, every stripe of it, gives their bytes (and the
   * key's slot, if they held its last value) back to the owner once durable, and raises the
   * collected mark to `ts` (unless `mark` is `false`).
   */
  deleteEntry(ts: Timestamp, options?: { readonly mark?: boolean }): Promise<void>;
  /** The highest timestamp whose entry was collected; `undefined` if none was. */
  getCollected(): Promise<Timestamp | undefined>;
}

/** Durable per-key records with per-key serialization and per-owner accounting. */
export interface ServerStorage {
  /**
   * Runs `fn` with exclusive access to `key`: no other `withKey(key, …)` callback runs
   * until the promise `fn` returned has settled and its writes are durable.
   */
  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T>;
  /** What `owner` has stored, counting writes still being made durable. */
  usage(owner: string): Usage;
  /** Every owner with something stored. */
  owners(): ReadonlyMap<string, Usage>;
  /**
   * Keys with a completed write (`lc`) that start with `prefix` and sort after `after` (in
   * code point order, `compareKeys`), with `lc` and, when stored, `lc`'s cross-checksum:
   * at most `limit` of them, in order, and whether there are more. Reads at most `maxScan`
   * key records (default `MAX_LIST_SCAN`), those without `lc` included; stopped by that,
   * it says which key it read last (`resumeAfter`, with `more`). Reads what is committed,
   * key by key (not a snapshot of the whole store).
   */
  list(prefix: string, after: string, limit: number, maxScan?: number): Promise<StoredKeys>;
  /**
   * Like {@link list}, for the writes with their stripe 0 stored above each key's `lc` (under
   * way, or never finished): the keys that hold one, each with those writes' entry metadata,
   * oldest first. The same bounds (`limit` keys, `maxScan` records read, `resumeAfter`).
   */
  listPending(prefix: string, after: string, limit: number, maxScan?: number): Promise<StoredPending>;
  /**
   * Keys holding an upload without its stripe 0 (see `HistoryLimits.uploadIdleMs`), as
   * committed, in no particular order: what a host sweeps so an abandoned upload is deleted
   * even if its key is never written again.
   */
  unfinishedKeys(): AsyncIterable<string>;
}

/** What {@link ServerStorage.list} found. */
export interface StoredKeys {
  readonly keys: readonly StoredKey[];
  readonly more: boolean;
  /** Set when the bound on records read stopped the listing: the last key read, at or after the last of `keys`. */
  readonly resumeAfter?: string;
}

/** What {@link ServerStorage.listPending} found. */
export interface StoredPending {
  readonly keys: readonly { readonly key: string; readonly writes: readonly EntryMeta[] }[];
  readonly more: boolean;
  readonly resumeAfter?: string;
}

/** One key as {@link ServerStorage.list} finds it. */
export interface StoredKey {
  readonly key: string;
  readonly lc: Candidate;
  readonly cc: CrossChecksum | undefined;
  /** The layout of `lc`'s entry, when it is a striped value's. */
  readonly layout?: StripeLayout;
}

/** A failure of the storage itself (as opposed to a refused request). */
export class StorageError extends Error {
  override readonly name = 'StorageError';
  constructor(
    /** `STORAGE_CLOSED`: used after `close()` or outside its callback; the others are backends'. */
    readonly code: 'STORAGE_CLOSED' | 'STORAGE_FAILED' | 'STORAGE_CORRUPT' | 'STORAGE_MISMATCH',
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

const NOTHING: Usage = Object.freeze({ bytes: 0, keys: 0 });

/** A usage change for one owner: a reservation made by {@link UsageLedger.reserve}, or a release (negative). */
export interface Reservation {
  readonly owner: string;
  readonly bytes: number;
  readonly keys: number;
}

/**
 * Per-owner totals with reservations: `reserve` checks the quota against committed plus
 * reserved usage and reserves in one synchronous step; the storage then keeps it once the
 * write is durable or `release`s it if the write failed.
 */
export class UsageLedger {
  readonly #totals = new Map<string, { bytes: number; keys: number }>();

  /** Adds to an owner's totals (what is on disk, at open; or a change). */
  add(owner: string, bytes: number, keys: number): void {
    const t = this.#totals.get(owner) ?? { bytes: 0, keys: 0 };
    t.bytes += bytes;
    t.keys += keys;
    if (t.bytes === 0 && t.keys === 0) this.#totals.delete(owner);
    else this.#totals.set(owner, t);
  }

  /** Reserves `bytes` (and a key if `newKey`) for `owner`, or returns `undefined` if that would exceed `quota`. */
  reserve(owner: string, bytes: number, newKey: boolean, quota: Quota): Reservation | undefined {
    const now = this.usage(owner);
    const keys = newKey ? 1 : 0;
    if (quota.bytes !== undefined && now.bytes + bytes > quota.bytes) return undefined;
    if (quota.keys !== undefined && now.keys + keys > quota.keys) return undefined;
    this.add(owner, bytes, keys);
    return { owner, bytes, keys };
  }

  /** Undoes a reservation (its write failed), or applies a release (its delete is durable). */
  release(r: Reservation): void {
    this.add(r.owner, -r.bytes, -r.keys);
  }

  usage(owner: string): Usage {
    return this.#totals.get(owner) ?? NOTHING;
  }

  owners(): ReadonlyMap<string, Usage> {
    return this.#totals;
  }
}

/** What one `withKey` callback changed, handed to {@link AbstractStorage.commit} in one piece. */
export interface KeyChanges {
  readonly key: string;
  /** The key's new state, or `undefined` if the callback did not change it. */
  readonly state: KeyState | undefined;
  /** New history entries. */
  readonly puts: readonly HistoryEntry[];
  /**
   * The puts that replace an entry already stored ({@link KeyRecord.restoreEntry}): a
   * backend that keeps fragments elsewhere frees the old copy. Absent: none.
   */
  readonly restored?: readonly HistoryEntry[];
  /**
   * Collected writes (each one was stored): stripe 0 and, when `stripes` is set, every
   * stripe ≥ 1 the backend holds for `ts` (the index counts them but does not list them).
   */
  readonly deletes: readonly {
    readonly ts: Timestamp;
    readonly stripes: boolean;
    /** Bytes the write was charged (its fragments and metadata): no fragment of it is longer. */
    readonly bytes?: number;
  }[];
  /** Per-owner usage changes (bytes and keys; negative for collected entries), to persist with the rest. */
  readonly usage: readonly Reservation[];
  /** Change in the number of keys holding entries, and of entries (stripes). */
  readonly keys: number;
  readonly entries: number;
}

/** Totals a durable backend restores at open (see {@link AbstractStorage.restore}). */
export interface StorageTotals {
  readonly keys: number;
  readonly entries: number;
  /** An upper bound of every fragment's length. */
  readonly largestFragment: number;
  readonly owners: Iterable<readonly [string, Usage]>;
}

/** Options every backend takes. */
export interface AbstractStorageOptions {
  /** Key states kept decoded in memory (most recently used first to stay). Default 0: none. */
  readonly stateCacheKeys?: number;
}

const EMPTY_STATE: KeyState = Object.freeze({ lc: undefined, owner: '', index: Object.freeze([]), collected: undefined });

/**
 * The base of every {@link ServerStorage} backend. It owns per-key exclusion, buffering a
 * callback's writes into one atomic {@link commit}, the guard against a record used after
 * its callback, closing, per-owner usage and the store's totals, and an optional cache of
 * decoded key states. A backend implements reads of what is committed and the commit.
 */
export abstract class AbstractStorage implements ServerStorage {
  readonly #mutex = new KeyedMutex();
  readonly #ledger = new UsageLedger();
  #closing: Promise<void> | undefined;
  #keys = 0;
  #entries = 0;
  #largestFragment = 0;
  /** Decoded states of recently used keys (`null`: known to have none); updated only once a commit is durable. */
  readonly #states = new Map<string, KeyState | null>();
  readonly #stateCacheKeys: number;
  readonly #reads: CommittedReads = {
    state: (key) => this.readState(key),
    meta: (key, ts, stripe) => this.readEntryMeta(key, ts, stripe),
    entry: (key, ts, stripe) => this.readEntry(key, ts, stripe),
  };

  constructor(options: AbstractStorageOptions = {}) {
    this.#stateCacheKeys = options.stateCacheKeys ?? 0;
  }

  /** The committed state of `key`, or `undefined` if it has none. */
  protected abstract readState(key: string): Promise<KeyState | undefined>;
  /** The committed metadata of `Hist[key][ts]`'s stripe `stripe`, or `undefined`. */
  protected abstract readEntryMeta(key: string, ts: Timestamp, stripe: number): Promise<EntryMeta | undefined>;
  /** The committed fragment of `Hist[key][ts]`'s stripe `stripe`, or `undefined`. */
  protected abstract readFragment(key: string, ts: Timestamp, stripe: number): Promise<Uint8Array | undefined>;
  /**
   * Makes `changes` durable, all or nothing; resolves once they are. Commits of different
   * keys may be concurrent; commits of one key never are.
   */
  protected abstract commit(changes: KeyChanges): Promise<void>;
  /** Releases the backend; called once, after every callback and commit has finished. */
  protected abstract closeBackend(): Promise<void>;
  /** Keys whose committed state lists a write without its head (see {@link ServerStorage.unfinishedKeys}). */
  abstract unfinishedKeys(): AsyncIterable<string>;
  /**
   * Committed states of up to `limit` keys that start with `prefix` and sort after `after`
   * (code point order, which is UTF-8 byte order), in that order.
   */
  protected abstract readStates(prefix: string, after: string, limit: number): Promise<readonly (readonly [string, KeyState])[]>;

  /**
   * The committed metadata of stripe 0 of each write in `reads`, in order. Backends may
   * read them at once (a LIST reads one per key listed: one hop to the database each cost
   * more than the rest of the page).
   */
  protected readEntryMetas(reads: readonly { readonly key: string; readonly ts: Timestamp }[]): Promise<(EntryMeta | undefined)[]> {
    return Promise.all(reads.map((r) => this.readEntryMeta(r.key, r.ts, 0)));
  }

  async list(prefix: string, after: string, limit: number, maxScan = MAX_LIST_SCAN): Promise<StoredKeys> {
    return this.#scan(prefix, after, limit, maxScan, async (batch, room) => {
      // Keys with lc past the first `room` are never looked at: their entries are not read.
      let completed = 0;
      const held = batch.map(([key, { lc, index }]) =>
        lc && completed++ < room && index.some((e) => e.head && timestampsEqual(e.ts, lc.ts)) ? { key, ts: lc.ts } : undefined,
      );
      const metas = await this.readEntryMetas(held.filter((r) => r !== undefined));
      let m = 0;
      return batch.map(([key, state], i) => {
        if (!state.lc) return undefined;
        const read = held[i] ? metas[m++] : undefined;
        // The entry at lc's timestamp may be another value its writer signed for it (only one
        // got a store proof): its cross-checksum is then not lc's, and is left out.
        const meta = read && certificatesEqual(read.cert, state.lc.cert) ? read : undefined;
        return meta?.layout ? { key, lc: state.lc, cc: meta.cc, layout: meta.layout } : { key, lc: state.lc, cc: meta?.cc };
      });
    });
  }

  async listPending(prefix: string, after: string, limit: number, maxScan = MAX_LIST_SCAN): Promise<StoredPending> {
    return this.#scan(prefix, after, limit, maxScan, async (batch) => {
      const picked: ({ key: string; writes: EntryMeta[] } | undefined)[] = [];
      for (const [key, state] of batch) {
        const lcTs = state.lc?.ts ?? TS0;
        const writes: EntryMeta[] = [];
        for (const w of state.index) {
          if (!w.head || compareTimestamps(w.ts, lcTs) <= 0) continue;
          const meta = await this.readEntryMeta(key, w.ts, 0);
          if (meta) writes.push(meta);
        }
        picked.push(writes.length > 0 ? { key, writes } : undefined);
      }
      return picked;
    });
  }

  /**
   * The keys `pick` returns something for, in order, at most `limit`, reading at most
   * `maxScan` key records: keys it skips (no `lc`, no pending write) are read in batches,
   * growing, so a long run of them takes few reads. `pick` takes a batch of key records and
   * returns what it makes of each (`undefined`: skipped); past the first `room` it does not
   * skip, nothing it returns is looked at (`limit` keys and one that says there are more).
   */
  async #scan<T>(
    prefix: string,
    after: string,
    limit: number,
    maxScan: number,
    pick: (batch: readonly (readonly [string, KeyState])[], room: number) => Promise<readonly (T | undefined)[]>,
  ): Promise<{ keys: T[]; more: boolean; resumeAfter?: string }> {
    if (this.#closing) throw new StorageError('STORAGE_CLOSED', 'storage is closing');
    if (!Number.isSafeInteger(maxScan) || maxScan < 1) throw new RangeError(`maxScan must be a positive integer, got ${maxScan}`);
    const keys: T[] = [];
    let from = after;
    let read = 0;
    let want = 0;
    for (;;) {
      want = Math.min(maxScan - read, Math.max(limit + 1 - keys.length, 2 * want));
      const batch = await this.readStates(prefix, from, want);
      read += batch.length;
      for (const picked of await pick(batch, limit + 1 - keys.length)) {
        if (picked === undefined) continue;
        if (keys.length === limit) return { keys, more: true };
        keys.push(picked);
      }
      if (batch.length < want) return { keys, more: false };
      from = batch.at(-1)![0];
      if (read >= maxScan) return { keys, more: true, resumeAfter: from };
    }
  }

  /** The whole committed `Hist[key][ts]` stripe; backends may read both parts at once. */
  protected async readEntry(key: string, ts: Timestamp, stripe: number): Promise<HistoryEntry | undefined> {
    const [meta, fragment] = await Promise.all([this.readEntryMeta(key, ts, stripe), this.readFragment(key, ts, stripe)]);
    return meta && fragment ? { ...meta, fragment } : undefined;
  }

  /** For backends opening what is on disk: the totals as they were committed. */
  protected restore(totals: StorageTotals): void {
    this.#keys = totals.keys;
    this.#entries = totals.entries;
    this.#largestFragment = totals.largestFragment;
    for (const [owner, u] of totals.owners) this.#ledger.add(owner, u.bytes, u.keys);
  }

  /** Keys holding at least one history entry. */
  get keyCount(): number {
    return this.#keys;
  }

  /** History entries stored, over all keys. */
  get historyEntryCount(): number {
    return this.#entries;
  }

  /**
   * The longest fragment stored so far (an upper bound: it never shrinks), so a FILTER's
   * reply can be reserved for before the fragment is read into memory.
   */
  get largestFragmentBytes(): number {
    return this.#largestFragment;
  }

  usage(owner: string): Usage {
    return this.#ledger.usage(owner);
  }

  owners(): ReadonlyMap<string, Usage> {
    return this.#ledger.owners();
  }

  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    if (this.#closing) return Promise.reject(new StorageError('STORAGE_CLOSED', 'storage is closing'));
    return this.#mutex.run(key, () => this.#run(key, fn));
  }

  /**
   * Stops accepting callbacks, lets running ones finish and their commits complete, then
   * closes the backend. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.#mutex.idle();
      await this.closeBackend();
    })();
    return this.#closing;
  }

  async #run<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    const cached = this.#states.get(key);
    if (cached !== undefined) {
      // Most recently used last.
      this.#states.delete(key);
      this.#states.set(key, cached);
    }
    const txn = new Transaction(this.#reads, key, this.#ledger, cached);
    let result: T;
    try {
      result = await fn(txn.record);
    } catch (err) {
      txn.abort();
      throw err;
    } finally {
      txn.close();
    }
    const changes = txn.changes();
    if (changes) {
      try {
        await this.commit(changes);
      } catch (err) {
        txn.abort();
        this.#states.delete(key);
        throw err;
      }
      txn.committed();
      // Counted only once durable, so a failed commit does not skew the totals.
      this.#keys += changes.keys;
      this.#entries += changes.entries;
      for (const e of changes.puts) this.#largestFragment = Math.max(this.#largestFragment, e.fragment.length);
    }
    const state = txn.state();
    if (state !== undefined && this.#stateCacheKeys > 0) {
      this.#states.delete(key);
      this.#states.set(key, state);
      if (this.#states.size > this.#stateCacheKeys) this.#states.delete(this.#states.keys().next().value!);
    }
    return result;
  }
}

/** The reads a {@link Transaction} makes of committed data. */
interface CommittedReads {
  state(key: string): Promise<KeyState | undefined>;
  meta(key: string, ts: Timestamp, stripe: number): Promise<EntryMeta | undefined>;
  entry(key: string, ts: Timestamp, stripe: number): Promise<HistoryEntry | undefined>;
}

/** One callback's view: reads see its own buffered writes; writes reach the backend in one commit. */
class Transaction {
  #state: KeyState | undefined;
  #stateLoaded = false;
  #stateChanged = false;
  /** Entries put by this callback, by {@link entryId}. */
  readonly #written = new Map<string, HistoryEntry>();
  /** Ids of written entries that replace stored ones (restoreEntry). */
  readonly #restored = new Set<string>();
  /** Writes collected by this callback, by `timestampKey`; whether stored stripes ≥ 1 must go too. */
  readonly #collected = new Map<string, { ts: Timestamp; stripes: boolean; bytes: number }>();
  readonly #reservations: Reservation[] = [];
  readonly #released: Reservation[] = [];
  #newKeys = 0;
  #newEntries = 0;
  #open = true;
  readonly record: KeyRecord;

  constructor(
    private readonly reads: CommittedReads,
    private readonly key: string,
    private readonly ledger: UsageLedger,
    cached: KeyState | null | undefined,
  ) {
    if (cached !== undefined) {
      this.#state = cached ?? undefined;
      this.#stateLoaded = true;
    }
    this.record = {
      getLc: () => this.#guard(async () => (await this.#getState()).lc),
      setLc: (c) => this.#guard(async () => this.#setState({ ...(await this.#getState()), lc: detached(c) })),
      getEntry: (ts, stripe = 0) => this.#guard(() => this.#getEntry(ts, stripe, true)),
      getEntryMeta: (ts, stripe = 0) => this.#guard(() => this.#getEntry(ts, stripe, false)),
      putEntry: (e, charge) => this.#guard(() => this.#putEntry(e, charge)),
      index: () => this.#guard(async () => (await this.#getState()).index),
      restoreEntry: (e) => this.#guard(() => this.#restoreEntry(e)),
      deleteEntry: (ts, options) => this.#guard(() => this.#deleteEntry(ts, options?.mark ?? true)),
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

  /** The writes are durable: what collected entries held is no longer used. */
  committed(): void {
    for (const r of this.#released.splice(0)) this.ledger.release(r);
    this.#reservations.length = 0;
  }

  /** The key's state as this callback leaves it (`null`: none), if it was read at all. */
  state(): KeyState | null | undefined {
    return this.#stateLoaded ? (this.#state ?? null) : undefined;
  }

  /** Everything to commit, or `undefined` when the callback only read. */
  changes(): KeyChanges | undefined {
    if (!this.#stateChanged && this.#written.size === 0 && this.#collected.size === 0) return undefined;
    const usage = [...this.#reservations, ...this.#released.map((r) => ({ owner: r.owner, bytes: -r.bytes, keys: -r.keys }))];
    return {
      key: this.key,
      state: this.#stateChanged ? this.#state : undefined,
      puts: [...this.#written.values()],
      restored: [...this.#written].filter(([id]) => this.#restored.has(id)).map(([, e]) => e),
      deletes: [...this.#collected.values()],
      usage,
      keys: this.#newKeys,
      entries: this.#newEntries,
    };
  }

  async #guard<R>(f: () => Promise<R>): Promise<R> {
    // A record used after its callback returned would write outside the exclusion.
    if (!this.#open) throw new StorageError('STORAGE_CLOSED', 'KeyRecord used after its withKey callback settled');
    return f();
  }

  async #getState(): Promise<KeyState> {
    if (!this.#stateLoaded) {
      this.#state = await this.reads.state(this.key);
      this.#stateLoaded = true;
    }
    return this.#state ?? EMPTY_STATE;
  }

  #setState(s: KeyState): void {
    this.#state = s;
    this.#stateChanged = true;
  }

  async #getEntry(ts: Timestamp, stripe: number, withFragment: true): Promise<HistoryEntry | undefined>;
  async #getEntry(ts: Timestamp, stripe: number, withFragment: false): Promise<EntryMeta | undefined>;
  async #getEntry(ts: Timestamp, stripe: number, withFragment: boolean): Promise<EntryMeta | undefined> {
    const mine = this.#written.get(entryId(ts, stripe));
    if (mine) return mine;
    // The index says what is stored: nothing to read for a write it does not list (a
    // collected one included), or for a stripe the write cannot have.
    const write = (await this.#getState()).index.find((e) => timestampsEqual(e.ts, ts));
    if (!write || (stripe === 0 ? !write.head : stripe > write.top)) return undefined;
    return withFragment ? this.reads.entry(this.key, ts, stripe) : this.reads.meta(this.key, ts, stripe);
  }

  async #putEntry(e: HistoryEntry, charge: Charge): Promise<boolean> {
    const state = await this.#getState();
    const tombstone = e.stripe === 0 && e.cc.tombstone;
    // A key takes a quota slot while it holds a value; a delete's own entry does not hold one.
    const newKey = !tombstone && !state.index.some((w) => !w.tombstone);
    // Check and reserve in one synchronous step: no other callback can slip in between.
    const reservation = this.ledger.reserve(charge.owner, charge.bytes, newKey, charge.quota);
    if (!reservation) return false;
    this.#reservations.push(reservation);
    if (state.index.length === 0) this.#newKeys++;
    this.#newEntries++;
    this.#written.set(entryId(e.ts, e.stripe), e);
    const at = state.index.findIndex((w) => compareTimestamps(w.ts, e.ts) >= 0);
    const same = at >= 0 && timestampsEqual(state.index[at]!.ts, e.ts) ? state.index[at]! : undefined;
    // The key's state stays in the state cache while the key is used: it must not hold
    // views into the request's frame (see `detached`).
    const fresh: WriteInfo = { ts: detached(e.ts), head: false, tombstone: false, stripes: 0, top: 0, short: 0, bytes: 0, touched: 0 };
    const before = { ...(same ?? fresh), bytes: (same ?? fresh).bytes + charge.bytes, touched: charge.at ?? 0 };
    const info: WriteInfo =
      e.stripe === 0
        ? { ...before, head: true, tombstone }
        : {
            ...before,
            stripes: before.stripes + 1,
            top: Math.max(before.top, e.stripe),
            short: e.cc.valueLength < MIN_STRIPE_SIZE ? e.stripe : before.short,
          };
    const index = [...state.index];
    if (same) index[at] = info;
    else index.splice(at < 0 ? index.length : at, 0, info);
    this.#setState({ ...state, owner: charge.owner, index });
    return true;
  }

  async #restoreEntry(e: HistoryEntry): Promise<void> {
    const write = (await this.#getState()).index.find((w) => timestampsEqual(w.ts, e.ts));
    if (!write || (e.stripe === 0 ? !write.head : e.stripe > write.top)) {
      throw new StorageError('STORAGE_CORRUPT', `restoreEntry: the index lists no stripe ${e.stripe} of ${timestampKey(e.ts)}`);
    }
    this.#written.set(entryId(e.ts, e.stripe), e);
    this.#restored.add(entryId(e.ts, e.stripe));
  }

  async #deleteEntry(ts: Timestamp, mark: boolean): Promise<void> {
    const state = await this.#getState();
    const doomed = state.index.find((w) => timestampsEqual(w.ts, ts));
    if (!doomed) return;
    // Entries put by this very callback are simply not written; the backend deletes the rest.
    for (const id of [...this.#written.keys()]) if (timestampsEqual(this.#written.get(id)!.ts, ts)) this.#written.delete(id);
    this.#collected.set(timestampKey(ts), { ts: doomed.ts, stripes: doomed.stripes > 0, bytes: doomed.bytes });
    const index = state.index.filter((w) => w !== doomed);
    this.#newEntries -= entriesOf(doomed);
    if (index.length === 0) this.#newKeys--;
    const lastValue = !doomed.tombstone && !index.some((w) => !w.tombstone);
    this.#released.push({ owner: state.owner, bytes: doomed.bytes, keys: lastValue ? 1 : 0 });
    const raise = mark && !(state.collected && compareTimestamps(state.collected, ts) > 0);
    this.#setState({ ...state, index, collected: raise ? detached(ts) : state.collected });
  }
}

/** A map key for stripe `stripe` of `Hist[ts]`: the timestamp's own key for stripe 0, so values of one stripe are stored as before stripes. */
export function entryId(ts: Timestamp, stripe: number): string {
  return stripe === 0 ? timestampKey(ts) : `${timestampKey(ts)}#${stripe}`;
}
