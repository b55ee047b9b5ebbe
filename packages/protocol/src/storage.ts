/**
 * The server's storage, abstract so LevelDB and an in-memory map both fit.
 *
 * Per-key atomicity lives here: {@link ServerStorage.withKey} runs a handler with
 * exclusive access to one key's record (`lc` and `Hist`), and resolves only once the
 * handler's writes are durable. The server state machine relies on it for the
 * read-compare-write of `lc` (COMPLETE, FILTER, REPAIR) and acknowledges nothing before
 * `withKey` resolves. Different keys may run in parallel.
 */
import type { Candidate } from './candidate.js';
import type { HistoryEntry } from './messages.js';
import { timestampKey, type Timestamp } from './timestamp.js';

/** One key's record, valid only inside the `withKey` callback that received it. */
export interface KeyRecord {
  /** The last completed candidate `lc`; `undefined` is `c0`. */
  getLc(): Promise<Candidate | undefined>;
  setLc(candidate: Candidate): Promise<void>;
  /** `Hist[ts]` by `(num, writerId)`. */
  getEntry(ts: Timestamp): Promise<HistoryEntry | undefined>;
  putEntry(entry: HistoryEntry): Promise<void>;
}

/** Durable per-key records with per-key serialization. */
export interface ServerStorage {
  /**
   * Runs `fn` with exclusive access to `key`: no other `withKey(key, …)` callback runs
   * until the promise `fn` returned has settled and its writes are durable. A backend may
   * batch the writes of several keys into one sync (LevelDB) as long as this holds.
   */
  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T>;
}

interface MemoryRecord {
  lc: Candidate | undefined;
  readonly hist: Map<string, HistoryEntry>;
}

/** In-memory {@link ServerStorage} for tests and the simulator; honours per-key exclusion. */
export class MemoryStorage implements ServerStorage {
  readonly #records = new Map<string, MemoryRecord>();
  readonly #tails = new Map<string, Promise<unknown>>();

  withKey<T>(key: string, fn: (record: KeyRecord) => Promise<T>): Promise<T> {
    const prev = this.#tails.get(key) ?? Promise.resolve();
    const run = prev.then(
      () => fn(this.#view(key)),
      () => fn(this.#view(key)),
    );
    const tail = run.catch(() => undefined);
    this.#tails.set(key, tail);
    // Forget the chain once idle so the map does not grow with every key ever touched.
    void tail.then(() => {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    });
    return run;
  }

  /** Number of keys stored (for tests). */
  get size(): number {
    return this.#records.size;
  }

  #record(key: string): MemoryRecord {
    let r = this.#records.get(key);
    if (!r) {
      r = { lc: undefined, hist: new Map() };
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
      getEntry: async (ts) => this.#records.get(key)?.hist.get(timestampKey(ts)),
      putEntry: async (e) => {
        this.#record(key).hist.set(timestampKey(e.ts), e);
      },
    };
  }
}
