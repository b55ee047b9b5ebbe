/**
 * Everything a simulation run is checked against. Each check names what went wrong in
 * one line; a run passes when there are none.
 *
 * - validity: a read returns only a value an honest writer wrote, at that write's timestamp;
 * - timestamps: no two writes share one; a grantee's never skips a number, and an owner's
 *   or the admin's skips only as far as its jump allows: at most `(rank − 1)·W` above the
 *   highest number used before it (`window.ts`; Byzantine servers may lie about pending
 *   writes, and the writer clamps what they say);
 * - the fence: once a grantee lost its authority at every correct server (its grant
 *   expired, or it was revoked), a read invoked after an owner's or the admin's write
 *   (itself invoked after that) returned never returns a value of the grantee's;
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
 *   (and so signs its receipt) without holding every stripe its layout lists;
 * - a key's index: one entry per write, matching the stripes stored, and no write without
 *   its stripe 0 (a headless upload) below `lc` after any request is handled;
 * - every entry a correct server stores (by STORE or by repair) carries a fragment that
 *   matches its hash in a cross-checksum the entry's certificate signs, and a certificate
 *   signed for the entry's own key and timestamp;
 * - repair (`rebuild.ts`): a write its writer encoded inconsistently ends every repair with
 *   `INCONSISTENT_ENCODING` and is never stored by one, and no other write ever does;
 *   once the network healed and rebuilds and catch-ups ran, every correct server holds the
 *   entry of its `lc`, which is at least the latest completed write (see `storage-checks.ts`).
 */
import {
  compareKeys,
  compareTimestamps,
  crossChecksumDigest,
  entryCovered,
  fragmentMatches,
  bytesEqual,
  stripeMatches,
  entriesEqual,
  entriesOf,
  TIMESTAMP_WINDOW,
  timestampKey,
  timestampsEqual,
  toHex,
  type HistoryEntry,
  type Candidate,
  type CertificateVerifier,
  type CryptoProvider,
  type KeyRecord,
  type RepairOutcome,
  type ListPage,
  type ProtocolError,
  type ReadResult,
  type Reply,
  type ServerStorage,
  type Timestamp,
  type WriteResult,
} from '@powerstore/protocol';
import type { MemoryStorage } from '@powerstore/protocol/testing';
import { checkLinearizable, type RegisterOp } from '../lincheck/lincheck.js';
import type { Expectation, FencedIdentity } from './hostile-clients.js';
import { fingerprint, isStripeOf, stripeOrigin } from './stripes.js';

/** Stripes 1 … count − 1 of the write at `ts` that `record` does not hold. */
export async function missingStripes(record: KeyRecord, ts: Timestamp, count: number): Promise<number[]> {
  const missing: number[] = [];
  for (let s = 1; s < count; s++) if (!(await record.getEntryMeta(ts, s))) missing.push(s);
  return missing;
}

/** An operation record the checkers fill in as the run goes. */
export type MutableOp = { -readonly [K in keyof RegisterOp]: RegisterOp[K] };

/** Who made a write: its identity (an honest role, or a fenced identity) and its rank over the key (`window.ts`). */
export interface Author {
  readonly identity: string;
  readonly rank: 1 | 2 | 3;
}

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
  /** The highest number used on each key so far, and by honest writers. */
  readonly #topByKey = new Map<string, number>();
  readonly #honestTopByKey = new Map<string, number>();
  /** Who made each write. */
  readonly #authors = new Map<MutableOp, Author>();
  /** The fence attacks' writes, by value id, and when each was STOREd (a history tick). */
  readonly #hostile = new Map<string, MutableOp>();
  readonly #storedAt = new Map<string, number>();
  /** When each fenced identity lost its authority at every correct server (a history tick). */
  readonly #lost = new Map<FencedIdentity, number>();
  /** Timestamps each honest write STOREd, by value id: a SUPERSEDED write retries under a new one. */
  readonly #attempts = new Map<string, Set<string>>();
  /** Finished reads and writes by rounds taken. */
  readonly readRounds = new Map<string, number>();
  readonly writeRounds = new Map<string, number>();
  /** Listing pages finished. */
  lists = 0;
  /**
   * Owner's and admin's writes that jumped: took a number more than 1 above every honest
   * writer's before it (over a fence attack's planted write, or a Byzantine server's lie).
   */
  jumps = 0;
  /** Reads the fence applied to: of a key a write of rank ≥ 2 wrote after some grantee lost its authority, invoked after it returned. */
  fencedReads = 0;
  /** Striped values read whole (every stripe pinned to one version). */
  stripedReads = 0;
  /** Receipts correct servers signed under a batch root shared with others (`receipt-batch.ts`). */
  batchedReceipts = 0;
  /** Pinned stripe reads that failed with VALUE_CHANGED (allowed: the version was collected meanwhile). */
  valueChanged = 0;

  /** Writes encoded inconsistently on purpose (`--rebuild`'s hostile writer), by key and timestamp. */
  readonly #uneven = new Set<string>();
  /** Every entry a correct server stored, checked at the end ({@link verifyStoredEntries}). */
  readonly #stored: { server: string; index: number; key: string; entry: HistoryEntry }[] = [];
  /** The highest timestamp of a completed honest write, per key. */
  readonly #completed = new Map<string, Timestamp>();
  /** Repairs that ended with an entry, with INCONSISTENT_ENCODING, given up; repaired entries stored. */
  readonly repairs = { ended: 0, inconsistent: 0, 'timed out': 0, stored: 0 };

  /** `keep` is δ, the entries correct servers keep below `lc`. */
  constructor(readonly keep: number) {}

  /** A write whose fragments match their hashes but do not re-encode alike: no repair may store it. */
  unevenWrite(key: string, ts: Timestamp): void {
    this.#uneven.add(`${key}/${timestampKey(ts)}`);
  }

  isUneven(key: string, ts: Timestamp): boolean {
    return this.#uneven.has(`${key}/${timestampKey(ts)}`);
  }

  /** A repair of one stripe of `candidate` ended: an inconsistent write must end it with INCONSISTENT_ENCODING, and only such a write. */
  repairEnded(server: string, key: string, candidate: Candidate, error: ProtocolError | undefined): void {
    const uneven = this.isUneven(key, candidate.ts);
    if (error?.code === 'INCONSISTENT_ENCODING') {
      this.repairs.inconsistent++;
      if (!uneven)
        this.violations.push(
          `repair: ${server} found ${key} at ${timestampKey(candidate.ts)} inconsistently encoded, which its writer did not`,
        );
    } else if (!error) {
      this.repairs.ended++;
      if (uneven)
        this.violations.push(
          `repair: ${server} rebuilt its fragment of ${key} at ${timestampKey(candidate.ts)}, which its writer encoded inconsistently`,
        );
    }
  }

  /**
   * A host gave a repair up after waiting far longer than any delay between correct
   * processes: only a write encoded inconsistently may come to that (with faults within t,
   * every other completed write has t + 1 correct servers to answer for it).
   */
  repairTimedOut(server: string, key: string, candidate: Candidate): void {
    this.repairs['timed out']++;
    if (!this.isUneven(key, candidate.ts))
      this.violations.push(`repair: ${server}'s repair of ${key} at ${timestampKey(candidate.ts)} never finished`);
  }

  /** `Server.storeRepaired` stored (or kept) a repaired entry. */
  repairStored(server: string, key: string, candidate: Candidate, stripe: number, outcome: RepairOutcome): void {
    if (outcome === 'stored' || outcome === 'rewritten') this.repairs.stored++;
    if ((outcome === 'stored' || outcome === 'rewritten') && this.isUneven(key, candidate.ts))
      this.violations.push(
        `repair: ${server} stored stripe ${stripe} of ${key} at ${timestampKey(candidate.ts)}, which its writer encoded inconsistently`,
      );
  }

  /** Keys an honest write completed on. */
  completedKeys(): string[] {
    return [...this.#completed.keys()];
  }

  /** The highest timestamp of an honest write of `key` that completed, if any. */
  completedTop(key: string): Timestamp | undefined {
    return this.#completed.get(key);
  }

  /** One tick per call or return, so no two history events tie. */
  tick(): number {
    return ++this.#clock;
  }

  /** Starts recording an operation (a write with its author). */
  call(key: string, client: string, kind: 'read' | 'write', value: string | null, author?: Author): MutableOp {
    const op: MutableOp = { key, client, kind, value, call: this.tick(), ret: undefined };
    this.history.push(op);
    if (author) this.#authors.set(op, author);
    return op;
  }

  /**
   * A fence attack's write, about to be STOREd: it is invoked now (though it enters the
   * history only with its store proof, {@link hostileWrite}), its number is used, and reads
   * may trace its value back to it.
   */
  hostileStore(key: string, ts: Timestamp, id: string, bytes: Uint8Array): void {
    this.registerValue(id, bytes);
    this.#writtenByTs.set(`${key}/${timestampKey(ts)}`, { op: id, id, bytes });
    this.#use(key, ts.num);
    this.#storedAt.set(id, this.tick());
    this.#planted.set(key, [...(this.#planted.get(key) ?? []), id]);
  }

  /** The fence attacks' writes STOREd, by key: versions at the servers before they enter the history. */
  readonly #planted = new Map<string, string[]>();

  /**
   * A fence attack's write got its store proof: it may take effect from now on, so it
   * enters the history, a write of `identity` (a grantee) invoked when it was STOREd (its
   * timestamp may be below writes that returned since). One that never gets its proof
   * never takes effect (a candidate needs it), and stays out: every write that never
   * returns multiplies the linearizability check's work. Reads may return it, until the
   * fence (see {@link authorityLost}).
   */
  hostileWrite(key: string, id: string, identity: FencedIdentity): void {
    const op: MutableOp = { key, client: 'mallory', kind: 'write', value: id, call: this.#storedAt.get(id)!, ret: undefined };
    this.history.push(op);
    this.#authors.set(op, { identity, rank: 1 });
    this.#hostile.set(id, op);
  }

  /** `n − t` servers acknowledged a COMPLETE of fence attack write `id`: it returns, as an honest write would. */
  hostileWriteDone(id: string): void {
    const op = this.#hostile.get(id);
    if (op && op.ret === undefined) op.ret = this.tick();
  }

  /** `identity` has just lost its authority at every correct server. */
  authorityLost(identity: FencedIdentity): void {
    if (!this.#lost.has(identity)) this.#lost.set(identity, this.tick());
  }

  #use(key: string, num: number): void {
    const nums = this.#numsByKey.get(key) ?? new Set<number>();
    this.#numsByKey.set(key, nums.add(num));
    this.#topByKey.set(key, Math.max(num, this.#topByKey.get(key) ?? 0));
  }

  /** A value an honest writer is about to write, so reads can be traced back to it. */
  registerValue(id: string, bytes: Uint8Array): void {
    this.#valueIdByHex.set(fingerprint(bytes), id);
  }

  /** An honest writer of `rank` sent the STORE round of operation `op` (unique per operation) at `ts`. */
  store(
    client: string,
    op: string,
    key: string,
    ts: Timestamp,
    id: string | null,
    bytes: Uint8Array | undefined,
    rank: Author['rank'],
  ): void {
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
    const top = this.#topByKey.get(key) ?? 0;
    // A grantee takes the number after one it saw; an owner or the admin may jump over
    // pending writes, at most (rank − 1)·W above the highest valid lc its CLOCK saw, which
    // no number used before exceeds (its session's own numbers among them).
    const jump = (rank - 1) * TIMESTAMP_WINDOW;
    const honestTop = this.#honestTopByKey.get(key) ?? 0;
    if (rank > 1 && ts.num > honestTop + 1) this.jumps++;
    this.#honestTopByKey.set(key, Math.max(honestTop, ts.num));
    if (ts.num !== 1 && !nums.has(ts.num - 1)) {
      if (rank === 1)
        this.violations.push(`timestamp skipped: ${client} wrote ${key} at num ${ts.num}, but num ${ts.num - 1} was never used`);
      else if (ts.num > top + jump + 1)
        this.violations.push(
          `timestamp jumped too far: ${client} (rank ${rank}) wrote ${key} at num ${ts.num}, more than ${jump} + 1 above the highest number used before it (${top})`,
        );
    }
    this.#use(key, ts.num);
    this.#writtenByTs.set(k, { op, id, bytes });
  }

  /** A write finished. */
  writeDone(op: MutableOp, client: string, result: WriteResult): void {
    op.ret = this.tick();
    const top = this.#completed.get(op.key);
    if (!top || compareTimestamps(result.ts, top) > 0) this.#completed.set(op.key, result.ts);
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
    // A fence attack's write is a version at the servers from its STORE on, though it
    // enters the history only with its store proof (and never returns until completed).
    const seen = new Set(overlapping.map((w) => w.value));
    const plants = (this.#planted.get(op.key) ?? []).filter((id) => !seen.has(id) && this.#storedAt.get(id)! < op.ret!).length;
    const versions = plants + overlapping.reduce((sum, w) => sum + Math.max(1, this.#attempts.get(w.value!)?.size ?? 0), 0);
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
      // With `rotate`, a server of another key epoch refuses before looking at the request.
      const epochRefusal = reply.code === 'CLUSTER_OUTDATED' || reply.code === 'SERVER_OUTDATED';
      if (
        expect?.kind === 'refuse' &&
        !epochRefusal &&
        ((expect.code && reply.code !== expect.code) || (expect.because && !reply.message.includes(expect.because)))
      )
        this.violations.push(
          `correct server s${server} refused a forgery (${expect.attack}) for another reason: ${reply.code}: ${reply.message} (expected ${expect.code ?? 'a refusal'}${expect.because ? ` mentioning "${expect.because}"` : ''})`,
        );
      return;
    }
    if (!expect) return;
    if (expect.kind === 'refuse') {
      this.violations.push(
        `correct server s${server} accepted a forgery (${expect.attack}): answered ${reply.type}${reply.type === 'STORE_ACK' ? ` stripe ${reply.stripe} ts ${reply.ts.num}` : ''}`,
      );
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
    const stored = this.#stored;
    const index = Number(server.slice(1));
    const watched = (key: string, record: KeyRecord): KeyRecord => ({
      ...record,
      async putEntry(entry: HistoryEntry, charge) {
        // Checked at the end: verifying here would add awaits, and so change the order in
        // which concurrent requests finish (and every seed's schedule).
        stored.push({ server, index, key, entry });
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
      withKey: (key, fn) =>
        storage.withKey(key, async (record) => {
          const result = await fn(watched(key, record));
          await this.#checkIndex(server, key, record);
          return result;
        }),
      usage: (owner) => storage.usage(owner),
      owners: () => storage.owners(),
      list: (prefix, after, limit) => storage.list(prefix, after, limit),
      listPending: (prefix, after, limit) => storage.listPending(prefix, after, limit),
      unfinishedKeys: () => storage.unfinishedKeys(),
    };
  }

  /**
   * After every request a correct server handled: a key's index has one entry per write
   * (not per stripe). Uploads without their stripe 0 are deleted only once idle (the server's
   * `uploadIdleMs`), so {@link unfinishedKept} checks them at the end, after a sweep.
   */
  async #checkIndex(server: string, key: string, record: KeyRecord): Promise<void> {
    const index = await record.index();
    const seen = new Set(index.map((w) => timestampKey(w.ts)));
    if (seen.size !== index.length && !this.#indexReported.has(`${server}/${key}`)) {
      this.#indexReported.add(`${server}/${key}`);
      this.violations.push(`index: ${server} lists a write of ${key} more than once`);
    }
  }

  /**
   * At the end, once every correct server swept its unfinished keys after `uploadIdleMs` of
   * quiet: no write without its stripe 0 is left (it could never complete, and it is charged).
   */
  async unfinishedKept(server: string, key: string, record: KeyRecord): Promise<void> {
    const headless = (await record.index()).filter((w) => !w.head);
    if (headless.length > 0)
      this.violations.push(
        `unfinished upload kept: ${server} still holds ${headless.map((w) => `${w.stripes} stripes at ${w.ts.num}:${toHex(w.ts.writerId.subarray(0, 4))}…`).join(', ')} of ${key} without stripe 0, idle past uploadIdleMs`,
      );
  }

  /**
   * At the end: every entry a correct server stored has a fragment matching its hash in the
   * entry's cross-checksum, a cross-checksum its certificate signs (a stripe ≥ 1 stored by
   * repair carries its write's certificate, which signs it through the layout of the write's
   * stripe 0), and a certificate signed for its key and timestamp (a stripe certificate for
   * a stripe ≥ 1 STOREd by its writer).
   */
  async verifyStoredEntries(crypto: CryptoProvider, verifier: CertificateVerifier): Promise<void> {
    const heads = new Map<string, HistoryEntry>();
    for (const { server, key, entry } of this.#stored)
      if (entry.stripe === 0 && entry.layout) heads.set(`${server}/${key}/${timestampKey(entry.ts)}`, entry);
    const reported = new Set<string>();
    for (const { server, index, key, entry } of this.#stored) {
      const { ts, stripe, cc, cert, fragment } = entry;
      const where = `${server} stored stripe ${stripe} of ${key} at ${timestampKey(ts)}`;
      const fail = (why: string) => {
        if (reported.has(where)) return;
        reported.add(where);
        this.violations.push(`signed hashes: ${where} ${why}`);
      };
      if (!(await fragmentMatches(crypto, cc, index, fragment))) fail('with a fragment that does not match its hash');
      const stripeCert = stripe > 0 && bytesEqual(crossChecksumDigest(crypto, cc), cert.ccDigest);
      const signed = stripeCert ? await verifier.checkStripe(key, ts, stripe, cert) : await verifier.check(key, ts, cert);
      if (!signed.ok) fail(`under a certificate not signed for it: ${signed.reason}`);
      if (stripe === 0 && !entryCovered(crypto, cert, 0, cc, entry.layout)) fail('with a cross-checksum its certificate does not sign');
      if (stripe > 0 && !stripeCert) {
        const head = heads.get(`${server}/${key}/${timestampKey(ts)}`);
        if (head && (!head.layout || !stripeMatches(crypto, head.layout, stripe, cc)))
          fail("with a cross-checksum its write's layout does not list");
      }
    }
  }

  /** Index violations reported already (one line each, not one per request). */
  readonly #indexReported = new Set<string>();

  /** At the end: quotas held. */
  quota(server: string, owner: string, bytes: number, limit: number): void {
    if (bytes > limit)
      this.violations.push(`quota: ${server} stores ${bytes} bytes for owner ${owner.slice(0, 8)}…, over its quota of ${limit}`);
  }

  /** At the end: an operation of a correct client that never finished. */
  stuck(client: string, kind: string, key: string, phase: string): void {
    this.violations.push(`wait-freedom: ${client}'s ${kind} of ${key} never finished (stuck in ${phase})`);
  }

  /**
   * At the end: the fence. For every identity that lost its authority at every correct
   * server, and every write of an owner or the admin (rank ≥ 2) invoked after that, no read
   * of the key invoked after the write returned returns a value of that identity's: its
   * writes still pending (STOREd with receipts, never completed) lie below the owner's, and
   * completing them late changes nothing. (Linearizability alone allows it: a write that
   * never returns may take effect at any time.)
   */
  fence(): void {
    const guarded = new Set<MutableOp>();
    for (const [identity, lostAt] of this.#lost) {
      const theirs = new Set<string>();
      for (const [op, a] of this.#authors) if (a.identity === identity && op.value !== null) theirs.add(op.value);
      const fences = this.history.filter(
        (o) => o.kind === 'write' && o.call > lostAt && o.ret !== undefined && (this.#authors.get(o)?.rank ?? 1) >= 2,
      );
      for (const r of this.history) {
        if (r.kind !== 'read' || r.ret === undefined) continue;
        const o = fences.find((f) => f.key === r.key && f.ret! < r.call);
        if (!o) continue;
        guarded.add(r);
        if (r.value !== null && theirs.has(r.value))
          this.violations.push(
            `fence: ${r.client} read ${r.key} = ${r.value} (by the ${identity} grantee, which lost its authority at tick ${lostAt}) after ${o.client}'s write ${o.value ?? '(delete)'} (invoked at tick ${o.call}, after that) returned`,
          );
      }
    }
    this.fencedReads = guarded.size;
  }

  /** At the end: linearizability per key, over reads that returned and every write. */
  linearizability(): RegisterOp[] {
    const checked = this.history.filter((op) => op.kind === 'write' || op.ret !== undefined);
    for (const k of checkLinearizable(checked).keys)
      if (!k.ok) this.violations.push(`not linearizable: key ${k.key} (${k.ops} operations)`);
    return checked;
  }
}

/**
 * At the end, on a correct server's storage: every stored entry belongs to a write its key's
 * index lists, and each listed write has exactly the entries (stripe 0, stripes) it says.
 */
export async function checkIndexMatchesEntries(checker: Checker, server: string, storage: MemoryStorage): Promise<void> {
  for (const key of storage.keys()) {
    const index = await storage.withKey(key, (r) => r.index());
    const stored = new Map<string, number>();
    for (const e of storage.entries(key)) stored.set(timestampKey(e.ts), (stored.get(timestampKey(e.ts)) ?? 0) + 1);
    for (const w of index) {
      const have = stored.get(timestampKey(w.ts)) ?? 0;
      if (have !== entriesOf(w))
        checker.violations.push(`index: ${server} lists ${entriesOf(w)} entries of ${key} at ${w.ts.num}, and stores ${have}`);
      stored.delete(timestampKey(w.ts));
    }
    for (const ts of stored.keys()) checker.violations.push(`index: ${server} stores entries of ${key} at ${ts} its index does not list`);
  }
}
