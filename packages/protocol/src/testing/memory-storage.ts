/**
 * The in-memory storage backend: every guarantee of {@link AbstractStorage} but
 * durability. Tests and the simulator run servers on it; it is also the smallest example
 * of a backend (reads and one commit per callback).
 */
import type { HistoryEntry } from '../wire/messages.js';
import type { Timestamp } from '../auth/timestamp.js';
import { compareKeys, inListRange } from '../core/keys.js';
import type { EntryMeta, KeyState } from '../storage/record.js';
import { AbstractStorage, entryId, type KeyChanges } from '../storage/abstract-storage.js';

/** In-memory {@link ServerStorage} for tests and the simulator: every guarantee but durability. */
export class MemoryStorage extends AbstractStorage {
  readonly #states = new Map<string, KeyState>();
  readonly #entries = new Map<string, Map<string, HistoryEntry>>();

  /** Number of keys with a record (for tests). */
  get size(): number {
    return this.#states.size;
  }

  /** Every key with a record, for simulator invariant checks. */
  keys(): string[] {
    return [...this.#states.keys()];
  }

  /** Every history entry of `key`, for simulator invariant checks. */
  entries(key: string): readonly HistoryEntry[] {
    return [...(this.#entries.get(key)?.values() ?? [])];
  }

  protected async readState(key: string): Promise<KeyState | undefined> {
    return this.#states.get(key);
  }

  protected async readEntryMeta(key: string, ts: Timestamp, stripe: number): Promise<EntryMeta | undefined> {
    return this.#entries.get(key)?.get(entryId(ts, stripe));
  }

  protected async readFragment(key: string, ts: Timestamp, stripe: number): Promise<Uint8Array | undefined> {
    return this.#entries.get(key)?.get(entryId(ts, stripe))?.fragment;
  }

  async *unfinishedKeys(): AsyncIterable<string> {
    for (const [key, state] of [...this.#states]) if (state.index.some((w) => !w.head)) yield key;
  }

  protected async readStates(prefix: string, after: string, limit: number): Promise<readonly (readonly [string, KeyState])[]> {
    const keys = [...this.#states.keys()].filter((k) => inListRange(k, prefix, after)).sort(compareKeys);
    return keys.slice(0, limit).map((k) => [k, this.#states.get(k)!] as const);
  }

  protected async commit(c: KeyChanges): Promise<void> {
    if (c.state) this.#states.set(c.key, c.state);
    let hist = this.#entries.get(c.key);
    if (!hist) this.#entries.set(c.key, (hist = new Map<string, HistoryEntry>()));
    for (const d of c.deletes) {
      hist.delete(entryId(d.ts, 0));
      if (d.stripes) for (const id of [...hist.keys()]) if (id.startsWith(`${entryId(d.ts, 0)}#`)) hist.delete(id);
    }
    for (const e of c.puts) hist.set(entryId(e.ts, e.stripe), e);
    if (hist.size === 0) this.#entries.delete(c.key);
  }

  protected async closeBackend(): Promise<void> {}
}
