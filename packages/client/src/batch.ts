/**
 * Multi-key operations (`putMany`, `getMany`, `deleteMany`): a call's keys checked once
 * (pairs of a string key and a value, each key once), then run as single-key operations, a
 * bounded number at once, each key's outcome recorded on its own. Not a transaction: no key
 * waits for another, and a key that fails leaves the others as they came out.
 *
 * What runs one key is the store's business (today `put`, `get` or `delete`); the runner
 * only bounds how many are in flight and how many bytes they hold, relays an abort, and
 * counts. A protocol that carries many keys per frame can take the place of the per-key
 * operation without changing what callers see.
 */
import { invalid, PowerStoreError } from './errors.js';
import { DEFAULT_BATCH_CONCURRENCY, MAX_BATCH_CONCURRENCY, type BatchProgress, type PutManyEntries, type PutManyValue } from './types.js';

/**
 * Bytes of values `putMany` holds in flight at once (their plaintext; a `Blob`'s counted as
 * the stripes it holds). A value larger than this still goes, alone. With every server's
 * send queue bounded (the host drops frames for a server with 64 MiB unsent, taking it for
 * slow), a batch of large values must not queue them all at once.
 */
export const BATCH_BYTES_IN_FLIGHT = 32 * 1024 * 1024;

/** One key of a call: its value (for `putMany`), and the bytes it holds while in flight. */
export interface BatchItem<V> {
  readonly key: string;
  readonly value: V;
  /** Bytes held while in flight, against the runner's byte budget (0 for reads and deletes). */
  readonly cost: number;
}

/** A key's outcome as the runner records it. */
export type Settled<R> = { readonly ok: true; readonly value: R } | { readonly ok: false; readonly error: Error };

/** How a call is run. */
export interface RunBatchOptions {
  readonly concurrency: number;
  /** Bytes the keys in flight may hold together (their `cost`); a key over it alone still runs, alone. */
  readonly maxBytes: number;
  readonly signal: AbortSignal | undefined;
  /** The operation's name, for messages ("putMany"). */
  readonly name: string;
  /** Called as each key is done, with the counts so far. */
  readonly onSettled?: (progress: BatchProgress, index: number, outcome: Settled<unknown>) => void;
}

/** `options.concurrency`, checked: an integer from 1 to {@link MAX_BATCH_CONCURRENCY}, default {@link DEFAULT_BATCH_CONCURRENCY}. */
export function batchConcurrency(name: string, concurrency: unknown): number {
  if (concurrency === undefined) return DEFAULT_BATCH_CONCURRENCY;
  if (typeof concurrency !== 'number' || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_BATCH_CONCURRENCY) {
    throw invalid(
      `${name}: concurrency must be an integer from 1 to ${MAX_BATCH_CONCURRENCY}, got ${typeof concurrency === 'number' ? concurrency : describe(concurrency)}`,
    );
  }
  return concurrency;
}

/**
 * The keys of `getMany` or `deleteMany`: an iterable of strings (not a string itself, whose
 * characters would be taken for keys), each at most once. Whether each key is a well-formed
 * key is that key's own outcome, not the call's.
 */
export function batchKeys(name: string, keys: unknown): BatchItem<undefined>[] {
  // A string is iterable too, but its characters are not the keys meant.
  if (!isIterable(keys)) throw invalid(`${name}: keys must be an iterable of strings (an array, a Set…), not ${describe(keys)}`);
  const items: BatchItem<undefined>[] = [];
  const seen = new Map<string, number>();
  for (const key of keys) {
    if (typeof key !== 'string') throw invalid(`${name}: key ${items.length} is not a string (${typeof key})`);
    once(name, seen, key, items.length);
    items.push({ key, value: undefined, cost: 0 });
  }
  return items;
}

/**
 * The entries of `putMany`: `[key, value]` pairs from an iterable, or a plain object's own
 * enumerable properties; each key at most once. Whether each value is one `put` takes is
 * that key's own outcome. `cost` is the bytes a key holds in flight: the value's, or for a
 * `Blob` (read stripe by stripe) at most `blobCost`.
 */
export function batchEntries(entries: unknown, blobCost: number): BatchItem<PutManyValue>[] {
  if (typeof entries !== 'object' || entries === null) {
    throw invalid(
      `putMany: entries must be [key, value] pairs (an array of pairs, a Map) or an object of key → value, not ${describe(entries)}`,
    );
  }
  const pairs: Iterable<unknown> = isIterable(entries) ? entries : Object.entries(entries as PutManyEntries);
  const items: BatchItem<PutManyValue>[] = [];
  const seen = new Map<string, number>();
  for (const pair of pairs) {
    const index = items.length;
    if (!Array.isArray(pair) || pair.length !== 2) throw invalid(`putMany: entry ${index} is not a [key, value] pair`);
    const [key, value] = pair as [unknown, PutManyValue];
    if (typeof key !== 'string') throw invalid(`putMany: the key of entry ${index} is not a string (${typeof key})`);
    once('putMany', seen, key, index);
    items.push({ key, value, cost: isBlob(value) ? Math.min(value.size, blobCost) : valueBytes(value) });
  }
  return items;
}

/** Bytes of plaintext `value` stores: a string's UTF-8, a `Blob`'s size; 0 for what is not a value (that key fails). */
export function valueBytes(value: unknown): number {
  if (typeof value === 'string') return utf8Length(value);
  if (value instanceof Uint8Array) return value.length;
  if (isBlob(value)) return value.size;
  return 0;
}

export function isBlob(value: unknown): value is Blob {
  return typeof Blob !== 'undefined' && value instanceof Blob;
}

/**
 * Runs `run` for every item, at most `concurrency` at once and, past the first, within
 * `maxBytes` of `cost` in flight, in the order given. Resolves with every item's outcome
 * in that order; never rejects. Each key gets a signal of its own, aborted with the call's:
 * keys in flight fail as their operation does (`ABORTED`), keys not yet started fail with
 * `ABORTED` at once, and nothing more starts.
 */
export function runBatch<V, R>(
  items: readonly BatchItem<V>[],
  run: (item: BatchItem<V>, signal: AbortSignal) => Promise<R>,
  options: RunBatchOptions,
): Promise<Settled<R>[]> {
  const outcomes: Settled<R>[] = new Array<Settled<R>>(items.length);
  const total = items.length;
  const inFlight = new Set<AbortController>();
  let next = 0;
  let bytes = 0;
  let done = 0;
  let failed = 0;
  return new Promise((resolve) => {
    const { signal } = options;
    const settle = (index: number, outcome: Settled<R>) => {
      outcomes[index] = outcome;
      done++;
      if (!outcome.ok) failed++;
      try {
        options.onSettled?.({ done, failed, total }, index, outcome);
      } catch {
        // A caller's progress callback: what it throws is ignored, as documented.
      }
    };
    const finish = () => {
      signal?.removeEventListener('abort', onAbort);
      resolve(outcomes);
    };
    const pump = () => {
      while (next < total) {
        if (signal?.aborted) {
          const message = `${options.name} was aborted before this key was started: nothing was sent for it`;
          while (next < total) settle(next++, { ok: false, error: new PowerStoreError('ABORTED', message, { cause: signal.reason }) });
          break;
        }
        const index = next;
        const item = items[index]!;
        if (inFlight.size >= options.concurrency || (inFlight.size > 0 && bytes + item.cost > options.maxBytes)) break;
        next++;
        bytes += item.cost;
        const controller = new AbortController();
        inFlight.add(controller);
        void Promise.resolve()
          .then(() => run(item, controller.signal))
          .then(
            (value): Settled<R> => ({ ok: true, value }),
            (e: unknown): Settled<R> => ({ ok: false, error: e instanceof Error ? e : new Error(String(e)) }),
          )
          .then((outcome) => {
            inFlight.delete(controller);
            bytes -= item.cost;
            settle(index, outcome);
            pump();
          });
      }
      if (done === total) finish();
    };
    const onAbort = () => {
      for (const c of inFlight) c.abort(signal?.reason);
      pump();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    pump();
  });
}

/** Calls a caller's progress callback; what it throws is ignored, as documented. */
export function report<P>(onProgress: ((progress: P) => void) | undefined, progress: P): void {
  try {
    onProgress?.(progress);
  } catch {
    // ignored
  }
}

/** What a value is, for a message that must not quote it. */
function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

function once(name: string, seen: Map<string, number>, key: string, index: number): void {
  const first = seen.get(key);
  if (first !== undefined) {
    throw invalid(
      `${name}: the key ${JSON.stringify(key.length > 64 ? `${key.slice(0, 64)}…` : key)} is given twice (entries ${first} and ${index}): each key may appear once`,
    );
  }
  seen.set(key, index);
}

function isIterable(value: unknown): value is Iterable<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as { [Symbol.iterator]?: unknown })[Symbol.iterator] === 'function';
}

/** UTF-8 bytes of `s` as `TextEncoder` encodes it (a lone surrogate as U+FFFD, three bytes), without encoding it. */
function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}
