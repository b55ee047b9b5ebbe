/**
 * The server's storage, abstract so LevelDB and an in-memory map both fit.
 *
 * Per-key atomicity lives here: {@link ServerStorage.withKey} runs a handler with
 * exclusive access to one key's record (`lc` and `Hist`), and resolves only once the
 * handler's writes are durable. The server state machine relies on it for the
 * read-compare-write of `lc` (COMPLETE, FILTER) and for write-once history, and
 * acknowledges nothing before `withKey` resolves. Different keys may run in parallel.
 *
 * Per-owner accounting lives here too: every history entry is charged to an owner, and
 * {@link KeyRecord.putEntry} checks the owner's quota and reserves the bytes in one
 * synchronous step, so concurrent STOREs of different keys cannot overshoot a quota.
 */
import type { Candidate } from './candidate.js';
import { KeyedMutex } from './key-mutex.js';
import type { HistoryEntry } from './messages.js';
import type { Quota } from './policy.js';
import type { EntryInfo } from './record.js';
import { compareTimestamps, timestampKey, type Timestamp } from './timestamp.js';

/** What one owner has stored on one server. */
export interface Usage {
  /** Bytes charged for history entries (see `historyEntryBytes`). */
  readonly bytes: number;
  /** Keys with at least one history entry. */
  readonly keys: number;
}

/** Who pays for a new history entry, how much, and the limit. */
export interface Charge {
  readonly owner: string;
  readonly bytes: number;
  readonly quota: Quota;
}

/** One key's record, valid only inside the `withKey` callback that received it. */
export interface KeyRecord {
  /** The last completed candidate `lc`; `undefined` is `c0`. */
  getLc(): Promise<Candidate | undefined>;
  setLc(candidate: Candidate): Promise<void>;
  /** `Hist[ts]` by `(num, writerId)`. */
  getEntry(ts: Timestamp): Promise<HistoryEntry | undefined>;
  /**
   * Stores `Hist[entry.ts]` (the caller has checked it is empty) and charges it to
   * `charge.owner`, plus one key if it is the key's first entry, unless that would exceed
   * `charge.quota`: then it stores nothing and resolves `false`. The charge counts in
   * {@link ServerStorage.usage} from the moment it is accepted and is undone if the
   * write fails.
   */
  putEntry(entry: HistoryEntry, charge: Charge): Promise<boolean>;
  /** The entries stored, oldest first, from the key's own record (no entry is read). */
  index(): Promise<readonly EntryInfo[]>;
  /**
   * Garbage collection: removes `Hist[ts]`, gives its bytes (and the key, if it was the
   * last entry) back to the owner, and raises the collected mark to `ts`.
   */
  deleteEntry(ts: Timestamp): Promise<void>;
  /** The highest timestamp whose entry was collected; `undefined` if none was. */
  getCollected(): Promise<Timestamp | undefined>;
}

/** Durable per-key records with per-key serialization and per-owner accounting. */
export interface ServerStorage {
  /**
   * Runs `fn` with exclusive access to `key`: no other `withKey(key, …)` callback runs
   * until the promise `fn` returned has settled and its writes are durable. A backend may
   * batch the writes of several keys into one sync (LevelDB) as long as this holds.
   */
  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T>;
  /** What `owner` has stored, counting writes still being made durable. */
  usage(owner: string): Usage;
  /** Every owner with something stored. */
  owners(): ReadonlyMap<string, Usage>;
}

const NOTHING: Usage = Object.freeze({ bytes: 0, keys: 0 });

/** A reservation made by {@link UsageLedger.reserve}. */
export interface Reservation {
  readonly owner: string;
  readonly bytes: number;
  readonly keys: number;
}

/**
 * Per-owner totals with reservations, shared by the storage backends: `reserve` checks
 * the quota against committed plus reserved usage and reserves in one synchronous step;
 * the backend then `commit`s once the write is durable or `release`s if it failed.
 */
export class UsageLedger {
  readonly #totals = new Map<string, { bytes: number; keys: number }>();

  /** Adds to an owner's committed totals (backends loading what is on disk). */
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

  /** Undoes a reservation whose write failed. */
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

interface MemoryRecord {
  lc: Candidate | undefined;
  owner: string;
  collected: Timestamp | undefined;
  readonly hist: Map<string, { readonly entry: HistoryEntry; readonly info: EntryInfo }>;
}

/** In-memory {@link ServerStorage} for tests and the simulator; honours per-key exclusion. */
export class MemoryStorage implements ServerStorage {
  readonly #records = new Map<string, MemoryRecord>();
  readonly #mutex = new KeyedMutex();
  readonly #ledger = new UsageLedger();

  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    return this.#mutex.run(key, () => fn(this.#view(key)));
  }

  usage(owner: string): Usage {
    return this.#ledger.usage(owner);
  }

  owners(): ReadonlyMap<string, Usage> {
    return this.#ledger.owners();
  }

  /** Number of keys stored (for tests). */
  get size(): number {
    return this.#records.size;
  }

  /** Every key with a record, for simulator invariant checks. */
  keys(): string[] {
    return [...this.#records.keys()];
  }

  /** Every history entry of `key`, for simulator invariant checks. */
  entries(key: string): readonly HistoryEntry[] {
    return [...(this.#records.get(key)?.hist.values() ?? [])].map((h) => h.entry);
  }

  #record(key: string): MemoryRecord {
    let r = this.#records.get(key);
    if (!r) {
      r = { lc: undefined, owner: '', collected: undefined, hist: new Map() };
      this.#records.set(key, r);
    }
    return r;
  }

  #view(key: string): KeyRecord {
    return {
      getLc: async () => this.#records.get(key)?.lc,
      setLc: async (c) => {
        this.#record(key).lc = c;
      },
      getEntry: async (ts) => this.#records.get(key)?.hist.get(timestampKey(ts))?.entry,
      putEntry: async (e, charge) => {
        const r = this.#record(key);
        if (!this.#ledger.reserve(charge.owner, charge.bytes, r.hist.size === 0, charge.quota)) return false;
        r.owner = charge.owner;
        r.hist.set(timestampKey(e.ts), { entry: e, info: { ts: e.ts, bytes: charge.bytes, tombstone: e.cc.tombstone } });
        return true;
      },
      index: async () =>
        [...(this.#records.get(key)?.hist.values() ?? [])].map((h) => h.info).sort((a, b) => compareTimestamps(a.ts, b.ts)),
      deleteEntry: async (ts) => {
        const r = this.#records.get(key);
        const h = r?.hist.get(timestampKey(ts));
        if (!r || !h) return;
        r.hist.delete(timestampKey(ts));
        this.#ledger.add(r.owner, -h.info.bytes, r.hist.size === 0 ? -1 : 0);
        if (!r.collected || compareTimestamps(ts, r.collected) > 0) r.collected = ts;
      },
      getCollected: async () => this.#records.get(key)?.collected,
    };
  }
}
