/**
 * Everything a simulation run is checked against. Each check names what went wrong in
 * one line; a run passes when there are none.
 *
 * - validity: a read returns only a value an honest writer wrote, at that write's timestamp;
 * - timestamps: no two writes share one, and none skips a number;
 * - rounds: a read takes 2 rounds and a write 3 unless more than δ writes of the key
 *   (or a delete) overlapped it, when garbage collection may move it forward;
 * - bounded history: below `lc` a correct server keeps at most δ entries;
 * - write-once history: no correct server ever replaces a history entry;
 * - hostile requests: correct servers refuse every forgery (or never choose a forged candidate);
 * - quotas: no correct server stores more for an owner than its quota;
 * - wait-freedom: every operation of a correct client finishes, or fails with an allowed code;
 * - linearizability of every key's history (`test/lincheck`);
 * - no mixed value: a striped value read stripe by stripe is, in every stripe, that
 *   stripe of one write (reads that end in `VALUE_CHANGED` are counted, and stay out of
 *   the history like any failed read);
 * - receipts only for whole writes: no correct server stores stripe 0 of a striped write
 *   (and so signs its receipt) without holding every stripe its layout lists.
 */
import {
  compareKeys,
  entriesEqual,
  timestampKey,
  timestampsEqual,
  toHex,
  type HistoryEntry,
  type KeyRecord,
  type ListPage,
  type ProtocolError,
  type ReadResult,
  type Reply,
  type ServerStorage,
  type Timestamp,
  type WriteResult,
} from '@powerstore/protocol';
import { checkLinearizable, type RegisterOp } from '../lincheck/lincheck.js';
import type { Expectation } from './hostile-clients.js';
import { fingerprint, isStripeOf, stripeOrigin } from './stripes.js';

/** Stripes 1 … count − 1 of the write at `ts` that `record` does not hold. */
export async function missingStripes(record: KeyRecord, ts: Timestamp, count: number): Promise<number[]> {
  const missing: number[] = [];
  for (let s = 1; s < count; s++) if (!(await record.getEntryMeta(ts, s))) missing.push(s);
  return missing;
}

/** An operation record the checkers fill in as the run goes. */
export type MutableOp = { -readonly [K in keyof RegisterOp]: RegisterOp[K] };

export class Checker {
  readonly violations: string[] = [];
  readonly history: MutableOp[] = [];
  /** Writes that failed, by error code. */
  readonly failedWrites = new Map<string, number>();
  /** Hostile requests refused by correct servers, by code. */
  readonly refusals = new Map<string, number>();
  #clock = 0;
  readonly #valueIdByHex = new Map<string, string>();
  readonly #writtenByTs = new Map<string, { op: string; id: string | null; bytes: Uint8Array | undefined }>();
  readonly #numsByKey = new Map<string, Set<number>>();
  /** Timestamps each honest write STOREd, by value id: a SUPERSEDED write retries under a new one. */
  readonly #attempts = new Map<string, Set<string>>();
  /** Finished reads and writes by rounds taken. */
  readonly readRounds = new Map<string, number>();
  readonly writeRounds = new Map<string, number>();
  /** Listing pages finished. */
  lists = 0;
  /** Striped values read whole (every stripe pinned to one version). */
  stripedReads = 0;
  /** Pinned stripe reads that failed with VALUE_CHANGED (allowed: the version was collected meanwhile). */
  valueChanged = 0;

  /** `keep` is δ, the entries correct servers keep below `lc`. */
  constructor(readonly keep: number) {}

  /** One tick per call or return, so no two history events tie. */
  tick(): number {
    return ++this.#clock;
  }

  /** Starts recording an operation. */
  call(key: string, client: string, kind: 'read' | 'write', value: string | null): MutableOp {
    const op: MutableOp = { key, client, kind, value, call: this.tick(), ret: undefined };
    this.history.push(op);
    return op;
  }

  /** A value an honest writer is about to write, so reads can be traced back to it. */
  registerValue(id: string, bytes: Uint8Array): void {
    this.#valueIdByHex.set(fingerprint(bytes), id);
  }

  /** An honest writer sent the STORE round of operation `op` (unique per operation) at `ts`. */
  store(client: string, op: string, key: string, ts: Timestamp, id: string | null, bytes: Uint8Array | undefined): void {
    const k = `${key}/${timestampKey(ts)}`;
    if (id !== null) {
      const mine = this.#attempts.get(id) ?? new Set<string>();
      this.#attempts.set(id, mine.add(k));
    }
    const seen = this.#writtenByTs.get(k);
    if (seen) {
      if (seen.op !== op) this.violations.push(`timestamp reused: ${op} and ${seen.op} both wrote ${key} at ${timestampKey(ts)}`);
      return;
    }
    const nums = this.#numsByKey.get(key) ?? new Set<number>();
    this.#numsByKey.set(key, nums);
    if (ts.num !== 1 && !nums.has(ts.num - 1))
      this.violations.push(`timestamp skipped: ${client} wrote ${key} at num ${ts.num}, but num ${ts.num - 1} was never used`);
    nums.add(ts.num);
    this.#writtenByTs.set(k, { op, id, bytes });
  }

  /** A write finished. */
  writeDone(op: MutableOp, client: string, result: WriteResult): void {
    op.ret = this.tick();
    this.writeRounds.set(String(result.rounds), (this.writeRounds.get(String(result.rounds)) ?? 0) + 1);
    if (result.rounds < 3 || result.rounds % 2 === 0) this.violations.push(`${client} write took ${result.rounds} rounds, expected 3 + 2k`);
    else if (result.rounds > 3) this.#checkMoreRounds(op, client, 'write', result.rounds, 3);
  }

  /**
   * The liveness bound of garbage collection: an operation needs more rounds only when its
   * version was collected somewhere, which takes more than δ newer versions of the key, all
   * written by writes overlapping it (a write finished before it started would have been
   * seen) — or a delete. Versions, not writes: a write overtaken (SUPERSEDED) retries under
   * a fresh timestamp, and the version it abandoned counts towards δ like any other.
   */
  #checkMoreRounds(op: MutableOp, client: string, kind: string, rounds: number, usual: number): void {
    const overlapping = this.history.filter(
      (w) => w !== op && w.kind === 'write' && w.key === op.key && w.call < op.ret! && (w.ret === undefined || w.ret > op.call),
    );
    if (overlapping.some((w) => w.value === null)) return;
    const versions = overlapping.reduce((sum, w) => sum + Math.max(1, this.#attempts.get(w.value!)?.size ?? 0), 0);
    if (versions > this.keep) return;
    this.violations.push(
      `${client} ${kind} of ${op.key} took ${rounds} rounds (not ${usual}) with only ${versions} versions written by ${overlapping.length} writes overlapping it (δ = ${this.keep})`,
    );
  }

  /** A write failed with `error`; it may or may not have taken effect, so it stays pending in the history. */
  writeFailed(client: string, key: string, error: ProtocolError, allowed: boolean): void {
    this.failedWrites.set(error.code, (this.failedWrites.get(error.code) ?? 0) + 1);
    if (!allowed) this.violations.push(`${client}'s write of ${key} was refused: ${error.code}: ${error.message}`);
  }

  /** A read finished: check rounds and validity. */
  readDone(op: MutableOp, client: string, r: ReadResult): void {
    op.ret = this.tick();
    this.readRounds.set(String(r.rounds), (this.readRounds.get(String(r.rounds)) ?? 0) + 1);
    if (r.rounds < 2) this.violations.push(`${client} read took ${r.rounds} rounds, expected at least 2`);
    else if (r.rounds > 2) this.#checkMoreRounds(op, client, 'read', r.rounds, 2);
    op.value = r.value === undefined ? null : (this.#valueIdByHex.get(fingerprint(r.value)) ?? `unknown:${toHex(r.value.subarray(0, 8))}`);
    if (r.ts.num === 0) {
      if (r.value !== undefined) this.violations.push(`${client} read a value at ts0`);
      return;
    }
    const w = this.#writtenByTs.get(`${op.key}/${timestampKey(r.ts)}`);
    if (!w) this.violations.push(`validity: ${client} read ${op.key} at ts ${timestampKey(r.ts)}, which no honest writer used`);
    else if ((w.bytes === undefined) !== (r.value === undefined) || (w.bytes && r.value && fingerprint(w.bytes) !== fingerprint(r.value))) {
      this.violations.push(`validity: ${client} read ${op.key} = ${op.value}, but ts ${timestampKey(r.ts)} wrote ${w.id}`);
    }
  }

  /**
   * A striped value a reader assembled from stripes it read one by one (the first by
   * COLLECT and FILTER, the rest pinned to that version): every stripe must be that
   * stripe of one and the same write, whatever version the read as a whole returns.
   */
  stripesRead(client: string, key: string, stripes: readonly Uint8Array[]): void {
    this.stripedReads++;
    const first = stripeOrigin(stripes[0]!);
    for (const [i, bytes] of stripes.entries()) {
      const origin = stripeOrigin(bytes);
      if (!first || !origin || origin.id !== first.id || origin.index !== i || !isStripeOf(bytes, origin.id, i)) {
        this.violations.push(
          `mixed value: ${client} read ${key} whose stripe ${i} is ${origin ? `stripe ${origin.index} of ${origin.id}` : 'no honest stripe'}, stripe 0 ${first ? `of ${first.id}` : 'of no honest write'}`,
        );
        return;
      }
    }
  }

  /** Starts recording a listing (kept out of the register history: a listing is not a read of one key). */
  listCall(client: string): MutableOp {
    return { key: '(list)', client, kind: 'read', value: null, call: this.tick(), ret: undefined };
  }

  /**
   * A listing page finished. No invented keys: every key listed carries a timestamp an
   * honest writer stored a value under, and its size. No hidden completed writes: every
   * key in the page's range whose value write completed before the listing began, and
   * that no delete could have touched (none invoked before the listing ended), is listed.
   */
  listDone(op: MutableOp, client: string, page: ListPage, keys: readonly string[]): void {
    const ret = (op.ret = this.tick());
    const listed = new Set<string>();
    for (const k of page.keys) {
      listed.add(k.key);
      const w = this.#writtenByTs.get(`${k.key}/${timestampKey(k.candidate.ts)}`);
      if (!w?.bytes)
        this.violations.push(
          `list validity: ${client} listed ${k.key} at ${timestampKey(k.candidate.ts)}, which no honest writer wrote a value at`,
        );
      else if (k.size !== undefined && k.size !== w.bytes.length)
        this.violations.push(`list validity: ${client} listed ${k.key} with size ${k.size}, but ${w.id} wrote ${w.bytes.length} bytes`);
    }
    for (const key of keys) {
      if (page.cursor !== undefined && compareKeys(key, page.cursor) > 0) continue;
      const writes = this.history.filter((w) => w.key === key && w.kind === 'write');
      const completed = writes.some((w) => w.value !== null && w.ret !== undefined && w.ret < op.call);
      const deleteMayCount = writes.some((w) => w.value === null && w.call < ret);
      if (completed && !deleteMayCount && !listed.has(key))
        this.violations.push(`list hid a key: ${client}'s listing left out ${key}, whose write completed before it began`);
    }
    this.lists++;
  }

  /** A correct server answered a hostile request; `expect` says what it must have done, if anything. */
  hostileReply(server: number, reply: Reply, expect: Expectation | undefined): void {
    if (reply.type === 'ERROR') {
      this.refusals.set(reply.code, (this.refusals.get(reply.code) ?? 0) + 1);
      return;
    }
    if (!expect) return;
    if (expect.kind === 'refuse') {
      this.violations.push(`correct server s${server} accepted a forgery (${expect.attack}): answered ${reply.type}`);
    } else if (reply.type === 'FILTER_ACK' && timestampsEqual(reply.ts, expect.ts)) {
      this.violations.push(`correct server s${server} chose a forged candidate (${expect.attack}) in FILTER`);
    } else {
      this.refusals.set('IGNORED', (this.refusals.get('IGNORED') ?? 0) + 1);
    }
  }

  /**
   * `storage` with every history write watched: a correct server replacing an entry it
   * holds by a different one breaks write-once history.
   */
  watch(server: string, storage: ServerStorage): ServerStorage {
    const violations = this.violations;
    const watched = (key: string, record: KeyRecord): KeyRecord => ({
      ...record,
      async putEntry(entry: HistoryEntry, charge) {
        const before = await record.getEntry(entry.ts, entry.stripe);
        if (before && !entriesEqual(before, entry))
          violations.push(`write-once: ${server} replaced its history entry of ${key} at ${timestampKey(entry.ts)}`);
        // Stripe 0 with a layout is stored just before its receipt is signed: every stripe must be here.
        if (entry.stripe === 0 && entry.layout) {
          const missing = await missingStripes(record, entry.ts, entry.layout.digests.length);
          if (missing.length > 0)
            violations.push(
              `receipt without stripes: ${server} stored stripe 0 of ${key} at ${timestampKey(entry.ts)} without stripes ${missing.join(', ')}`,
            );
        }
        return record.putEntry(entry, charge);
      },
    });
    return {
      withKey: (key, fn) => storage.withKey(key, (record) => fn(watched(key, record))),
      usage: (owner) => storage.usage(owner),
      owners: () => storage.owners(),
      list: (prefix, after, limit) => storage.list(prefix, after, limit),
      unfinishedKeys: () => storage.unfinishedKeys(),
    };
  }

  /** At the end: quotas held. */
  quota(server: string, owner: string, bytes: number, limit: number): void {
    if (bytes > limit)
      this.violations.push(`quota: ${server} stores ${bytes} bytes for owner ${owner.slice(0, 8)}…, over its quota of ${limit}`);
  }

  /** At the end: an operation of a correct client that never finished. */
  stuck(client: string, kind: string, key: string, phase: string): void {
    this.violations.push(`wait-freedom: ${client}'s ${kind} of ${key} never finished (stuck in ${phase})`);
  }

  /** At the end: linearizability per key, over reads that returned and every write. */
  linearizability(): RegisterOp[] {
    const checked = this.history.filter((op) => op.kind === 'write' || op.ret !== undefined);
    for (const k of checkLinearizable(checked).keys)
      if (!k.ok) this.violations.push(`not linearizable: key ${k.key} (${k.ops} operations)`);
    return checked;
  }
}
