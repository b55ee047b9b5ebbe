/**
 * Listing keys under Byzantine servers: one LIST round to every server, `n − t` answers
 * merged. Servers answer with the keys they hold an `lc` for, each with `lc` itself, so
 * the reader checks every key the way it checks a read's candidates (`valid(c)`: the
 * writer's certificate and a proof of `n − t` receipts). Hence:
 *
 * - **No invented keys.** A key is listed only with a valid candidate, which only its
 *   writer can make and only once `n − t` servers stored the write. An answer carrying
 *   anything a correct server would not send (an invalid candidate, a key outside the
 *   range asked, keys out of order, a cross-checksum the certificate does not cover) is
 *   dropped whole, and its server reported.
 * - **No hidden completed writes.** A write that completed set `lc` at `n − t` servers;
 *   any `n − t` answers share at least `t + 1` servers with them, one of them correct, so
 *   the key (or a newer write of it) is in some answer. The highest valid candidate per
 *   key wins, so a completed delete hides a key that a lagging or lying server still
 *   lists.
 * - **Pages.** A server answers at most `limit` keys and at most {@link MAX_LIST_REPLY_BYTES},
 *   saying whether it has more. Merged answers are complete only up to the smallest last
 *   key of an answer that has more (beyond it, that server said nothing): the page stops
 *   there and its cursor continues from it. A server cutting its answer short must still
 *   carry {@link MIN_LIST_PAGE} keys (or `limit`), so a Byzantine one cannot stall paging.
 *
 * A listing is not linearizable with writes in flight: a key whose write completes during
 * the listing may or may not appear, as with S3's listings.
 */
import { candidateId, type Candidate } from './candidate.js';
import type { CertificateVerifier } from './certificate.js';
import { quorum, type ClusterConfig } from './config.js';
import { certificateCovers } from './cross-checksum.js';
import { layoutCovered } from './stripes.js';
import type { CryptoProvider } from './crypto.js';
import { currentEpoch, withEpoch } from './epochs.js';
import { check } from './errors.js';
import type { ClientOperation, ListAck, ListEntry, ListRequest, Outgoing, Reply, Step } from './messages.js';
import { Rejections } from './rejections.js';
import { compareTimestamps } from './timestamp.js';

/** Most keys one LIST asks for (and one answer carries). */
export const MAX_LIST_LIMIT = 1000;
/** The size a server keeps a LIST answer under, cutting it short (with `more`) if needed. */
export const MAX_LIST_REPLY_BYTES = 1 << 20;
/**
 * Fewest keys an answer cut short by its size may carry: the largest entry (a 1 KiB key,
 * a candidate with a grant, a cross-checksum of 255 hashes) is under 16 KiB, so a correct
 * server always fits this many in {@link MAX_LIST_REPLY_BYTES}.
 */
export const MIN_LIST_PAGE = 64;

/** Orders key names by code point, which is also the order of their UTF-8 bytes (LevelDB's). */
export function compareKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // Surrogates (0xd800–0xdfff) stand for code points above 0xffff: they sort after
    // every other UTF-16 unit, though they are numerically below 0xe000–0xffff.
    const sx = x >= 0xd800 && x <= 0xdfff;
    const sy = y >= 0xd800 && y <= 0xdfff;
    if (sx !== sy) return sx ? 1 : -1;
    return x - y;
  }
  return a.length - b.length;
}

/** Whether `key` belongs to the range a LIST asks for. */
export function inListRange(key: string, prefix: string, after: string): boolean {
  return key.startsWith(prefix) && compareKeys(key, after) > 0;
}

/** One listed key. */
export interface ListedKey {
  readonly key: string;
  /** The completed write listed (the highest valid one any answer named). */
  readonly candidate: Candidate;
  /** Bytes in the value; `undefined` when no answering server sent that write's cross-checksum (it completed during the listing). */
  readonly size: number | undefined;
}

/** A page of keys. */
export interface ListPage {
  /** Keys in code point order; deleted keys are left out. */
  readonly keys: readonly ListedKey[];
  /** Where the next page starts (pass it as `after`); `undefined` once the listing is complete. */
  readonly cursor: string | undefined;
}

/** What a listing needs. */
export interface ListOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly verifier: CertificateVerifier;
  /** Called when a server is caught answering what no correct server would. */
  readonly onEvidence?: (server: number, reason: string) => void;
}

/** One page of a listing: LIST to every server, `n − t` acceptable answers, merged. */
export class ListOperation implements ClientOperation<ListPage> {
  protected readonly options: ListOptions;
  readonly #answers = new Map<number, ListAck>();
  readonly #rejections = new Rejections();
  #done = false;
  #started = false;

  constructor(
    options: ListOptions,
    readonly prefix: string,
    readonly after: string,
    readonly limit: number,
    readonly opId: number,
  ) {
    check(Number.isInteger(limit) && limit >= 1 && limit <= MAX_LIST_LIMIT, `limit must be in 1..${MAX_LIST_LIMIT}`);
    this.options = options;
  }

  async start(): Promise<Step<ListPage>> {
    check(!this.#started, 'operation already started');
    this.#started = true;
    const send: Outgoing[] = [];
    for (let to = 0; to < this.options.config.n; to++) {
      const message: ListRequest = { type: 'LIST', key: this.prefix, opId: this.opId, after: this.after, limit: this.limit };
      send.push({ to, message: withEpoch(message, currentEpoch(this.options.verifier.cluster)) });
    }
    return { send };
  }

  async onReply(from: number, reply: Reply): Promise<Step<ListPage>> {
    const { config } = this.options;
    if (this.#done || !this.#started || reply.key !== this.prefix || reply.opId !== this.opId) return {};
    if (from < 0 || from >= config.n || this.#answers.has(from) || this.#rejections.has(from)) return {};
    if (reply.type === 'ERROR') {
      const failure = this.#rejections.add(config, from, reply);
      if (!failure) return {};
      this.#done = true;
      return { error: failure };
    }
    if (reply.type !== 'LIST_ACK') return {};
    const problem = await this.problem(reply);
    if (problem) {
      // Dropped whole: n − t correct servers still answer.
      this.options.onEvidence?.(from, problem);
      return {};
    }
    this.#answers.set(from, reply);
    if (this.#answers.size < this.answersNeeded()) return {};
    this.#done = true;
    return { result: this.#merge() };
  }

  /** `n − t`: any such set shares `t + 1` servers, one of them correct, with the `n − t` that completed a write. */
  protected answersNeeded(): number {
    return quorum(this.options.config);
  }

  /** What makes `reply` an answer no correct server sends, if anything. */
  protected async problem(reply: ListAck): Promise<string | undefined> {
    const { entries } = reply;
    if (entries.length > this.limit) return `listed ${entries.length} keys, more than the ${this.limit} asked for`;
    if (reply.more && entries.length < Math.min(this.limit, MIN_LIST_PAGE)) {
      return `cut its listing short after ${entries.length} keys`;
    }
    let previous = this.after;
    for (const e of entries) {
      if (!inListRange(e.key, this.prefix, this.after)) return `listed ${JSON.stringify(e.key)}, outside the range asked for`;
      if (compareKeys(e.key, previous) <= 0) return 'listed keys out of order';
      previous = e.key;
      if (e.cc && !listedSizeSigned(this.options.crypto, e))
        return `sent a cross-checksum for ${JSON.stringify(e.key)} that its certificate does not cover`;
      if (e.candidate.ts.num === 0 || !(await this.options.verifier.valid(e.key, e.candidate))) {
        return `listed ${JSON.stringify(e.key)} with a candidate that is not valid`;
      }
    }
    return undefined;
  }

  #merge(): ListPage {
    // Complete up to the smallest last key of an answer that has more.
    let horizon: string | undefined;
    for (const a of this.#answers.values()) {
      const last = a.entries.at(-1)?.key;
      if (a.more && last !== undefined && (horizon === undefined || compareKeys(last, horizon) < 0)) horizon = last;
    }
    const best = new Map<string, { candidate: Candidate; sizes: Map<string, number> }>();
    for (const a of this.#answers.values()) {
      for (const e of a.entries) {
        if (horizon !== undefined && compareKeys(e.key, horizon) > 0) continue;
        let b = best.get(e.key);
        if (!b) best.set(e.key, (b = { candidate: e.candidate, sizes: new Map() }));
        else if (compareTimestamps(e.candidate.ts, b.candidate.ts) > 0) b.candidate = e.candidate;
        if (e.cc) b.sizes.set(candidateId(e.candidate), e.layout?.valueLength ?? e.cc.valueLength);
      }
    }
    const names = [...best.keys()].sort(compareKeys);
    const taken = names.slice(0, this.limit);
    const cursor = names.length > this.limit || horizon !== undefined ? taken.at(-1) : undefined;
    const keys: ListedKey[] = [];
    for (const key of taken) {
      const { candidate, sizes } = best.get(key)!;
      if (candidate.cert.tombstone) continue;
      keys.push({ key, candidate, size: sizes.get(candidateId(candidate)) });
    }
    return { keys, cursor };
  }
}

/**
 * Whether the size a LIST entry gives is the one its certificate signs: the cross-checksum's
 * length for a value of one stripe, the layout's for a striped value (whose certificate
 * signs the layout; `cc` is then its stripe 0's).
 */
function listedSizeSigned(crypto: CryptoProvider, e: ListEntry): boolean {
  return e.layout ? layoutCovered(crypto, e.candidate.cert, e.layout) : certificateCovers(crypto, e.candidate.cert, e.cc!);
}
