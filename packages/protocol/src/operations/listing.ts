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
 * - **Pages.** A server answers at most `limit` keys and at most `MAX_LIST_REPLY_BYTES`,
 *   having read at most `MAX_LIST_SCAN` key records (`list-bounds.ts`), and says whether
 *   it has more. An answer with more speaks for the keys up to its *horizon*: its last
 *   entry, or the key its reading stopped at (`resumeAfter`), which may lie past many keys
 *   without `lc` (writes never completed) and past every entry, if any. With `m` answers, any
 *   `m − (n − t)` of them may be left out and the rest are still `n − t` servers, so they
 *   still hold a correct server that completed any given write: the page is complete up
 *   to the `(m − (n − t) + 1)`-th smallest horizon (with `n − t` answers, the smallest),
 *   stops there, and its cursor continues from it (from the `limit`-th key when there are
 *   more). Whatever horizons Byzantine servers name, `n − t` answers reach the page's
 *   end, so a lie about a horizon cannot hide a completed write either.
 * - **No stalled paging.** Every horizon lies after the cursor, so each page moves the
 *   cursor forward, and an empty page with a cursor is not the end of the listing. An
 *   answer cut short without `resumeAfter` must carry {@link MIN_LIST_PAGE} keys (or
 *   `limit`); one with it may carry none (a correct server does, after reading past keys
 *   without `lc`), so a Byzantine server could name a horizon just past the cursor, page
 *   after page. A page that would come out *thin* (a cursor and fewer than
 *   `MIN_LIST_PAGE` keys, or `limit`), when one more answer could take it further (the
 *   answers disagree on how far they reach), therefore waits for more answers: until
 *   every server has answered, or the host's timer calls {@link ListOperation.stalled}.
 *   With all `n` answers the `t` smallest horizons are left out, so Byzantine servers
 *   cannot hold pages back while the correct servers answer within the host's wait; only
 *   a correct server slower than that wait, beside a Byzantine one, lets them (each page
 *   still moves forward). Correct servers that agree never make a page wait.
 *
 * A listing is not linearizable with writes in flight: a key whose write completes during
 * the listing may or may not appear, as with S3's listings.
 */
import { sameWrite, type Candidate } from '../auth/candidate.js';
import type { CertificateVerifier } from '../auth/certificate.js';
import { quorum, type ClusterConfig } from '../core/config.js';
import { certificateCovers } from '../core/cross-checksum.js';
import { layoutCovered, stripeCount } from '../core/stripes.js';
import type { CryptoProvider } from '../core/crypto.js';
import { currentEpoch, withEpoch } from '../auth/epochs.js';
import { check } from '../core/errors.js';
import type { ClientOperation, ListAck, ListEntry, ListRequest, Outgoing, Reply, Step } from '../wire/messages.js';
import { Rejections } from './rejections.js';
import { whoDidWhat } from './server-names.js';
import { compareTimestamps } from '../auth/timestamp.js';
import { compareKeys, inListRange } from '../core/keys.js';
import { MAX_LIST_LIMIT, MIN_LIST_PAGE } from '../wire/list-bounds.js';

/** One key of a {@link ListPage}, with the completed write that lists it (the client turns it into its own `ListedKey`). */
export interface ListPageKey {
  readonly key: string;
  /** The completed write listed (the highest valid one any answer named). */
  readonly candidate: Candidate;
  /** Bytes in the value; `undefined` when no answering server sent that write's cross-checksum (it completed during the listing). */
  readonly size: number | undefined;
  /** Stripes the value is stored in (1 for a value written whole), known when `size` is. */
  readonly stripes: number | undefined;
}

/** A page of keys. */
export interface ListPage {
  /** Keys in code point order; deleted keys are left out. */
  readonly keys: readonly ListPageKey[];
  /** Where the next page starts (pass it as `after`); `undefined` once the listing is complete. */
  readonly cursor: string | undefined;
}

/** What a {@link ListOperation} needs. */
export interface ListOperationOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly verifier: CertificateVerifier;
  /** Called when a server is caught answering what no correct server would. */
  readonly onEvidence?: (server: number, reason: string) => void;
}

/** One page of a listing: LIST to every server, `n − t` acceptable answers (more when they disagree), merged. */
export class ListOperation implements ClientOperation<ListPage> {
  protected readonly options: ListOperationOptions;
  readonly #answers = new Map<number, ListAck>();
  readonly #rejections = new Rejections();
  /** Servers that answered, whether their answer was accepted, dropped or an ERROR. */
  readonly #heard = new Set<number>();
  /** Servers whose answer was dropped, with what was wrong with it. */
  readonly #dropped = new Map<number, string>();
  #done = false;
  #started = false;
  #waiting = false;

  constructor(
    options: ListOperationOptions,
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
    if (from < 0 || from >= config.n || this.#heard.has(from)) return {};
    if (reply.type === 'ERROR') {
      this.#heard.add(from);
      const failure = this.#rejections.add(config, from, reply);
      if (!failure) return this.#settle();
      this.#done = true;
      return { error: failure };
    }
    if (reply.type !== 'LIST_ACK') return {};
    this.#heard.add(from);
    const problem = await this.problem(reply);
    if (problem) {
      // Dropped whole: n − t correct servers still answer.
      this.#dropped.set(from, problem);
      this.options.onEvidence?.(from, problem);
      return this.#settle();
    }
    this.#answers.set(from, reply);
    return this.#settle();
  }

  /**
   * The host's timer fired while the page waited for more answers (see
   * {@link awaitingAnswers}): the page as the answers in so far make it.
   */
  stalled(): Step<ListPage> {
    if (this.#done || !this.#waiting) return {};
    this.#done = true;
    return { result: this.#merge().page };
  }

  /**
   * Whether the page has the answers it needs but waits for more, because it would come out
   * thin and the answers disagree on how far they reach (a server may be holding it back):
   * when the host should arm the timer that calls {@link stalled}.
   */
  get awaitingAnswers(): boolean {
    return !this.#done && this.#waiting;
  }

  /**
   * Why the page has not finished, server by server (1-based), for the error of a listing
   * that cannot complete although servers answered: "the LIST needs 3 answers that verify:
   * s2, s3 sent one; s1 sent one that fails verification (listed "a" with a candidate that
   * is not valid)". Who refused or did not answer at all the host says itself; `undefined`
   * once finished, or when no answer failed verification.
   */
  waiting(): string | undefined {
    if (this.#done || this.#dropped.size === 0) return undefined;
    const did = [
      ...[...this.#answers.keys()].map((i) => [i, 'sent one'] as const),
      ...[...this.#dropped].sort(([a], [b]) => a - b).map(([i, why]) => [i, `sent one that fails verification (${why})`] as const),
    ];
    return `the LIST needs ${this.answersNeeded()} answers that verify: ${whoDidWhat(did)}`;
  }

  /**
   * Servers that answered this page and cannot count towards it: their answer failed
   * verification, or was an ERROR (a second answer from either is not taken). Once all but
   * fewer than `n − t` servers are among them, or cannot be reached, the page cannot finish,
   * and the host fails it at once.
   */
  unusable(): ReadonlySet<number> {
    return new Set([...this.#heard].filter((i) => !this.#answers.has(i)));
  }

  /** `n − t`: any such set shares `t + 1` servers, one of them correct, with the `n − t` that completed a write. */
  protected answersNeeded(): number {
    return quorum(this.options.config);
  }

  /**
   * How many of `answers` answers the page may leave out when it finds where it is complete
   * up to: `answers − (n − t)`, so the rest still share a correct server with any `n − t`
   * that completed a write.
   */
  protected answersSpared(answers: number): number {
    return Math.max(0, answers - this.answersNeeded());
  }

  /** What makes `reply` an answer no correct server sends, if anything. */
  protected async problem(reply: ListAck): Promise<string | undefined> {
    const { entries } = reply;
    if (entries.length > this.limit) return `listed ${entries.length} keys, more than the ${this.limit} asked for`;
    const resume = reply.resumeAfter;
    if (resume !== undefined) {
      if (!reply.more) return 'named a key to resume after without having more';
      if (!inListRange(resume, this.prefix, this.after)) return `resumes after ${JSON.stringify(resume)}, outside the range asked for`;
      const last = entries.at(-1)?.key;
      if (last !== undefined && compareKeys(resume, last) < 0) return `resumes after ${JSON.stringify(resume)}, before its last key`;
    } else if (reply.more && entries.length < Math.min(this.limit, MIN_LIST_PAGE)) {
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

  /** Finishes once the answers make a page worth returning, or no more answers can come. */
  #settle(): Step<ListPage> {
    if (this.#answers.size < this.answersNeeded()) return {};
    const { page, thin, reachable } = this.#merge();
    if (thin && reachable && this.#heard.size < this.options.config.n) {
      this.#waiting = true;
      return {};
    }
    this.#done = true;
    return { result: page };
  }

  /**
   * The page the answers make. `thin`: it has a cursor and fewer than `MIN_LIST_PAGE` (or
   * `limit`) keys; `reachable`: one more answer could take it further.
   */
  #merge(): { page: ListPage; thin: boolean; reachable: boolean } {
    // Each answer speaks for the keys up to its horizon (`undefined`: to the end). Any
    // `spare` of them may be left out and n − t remain, so the page is complete up to the
    // (spare + 1)-th smallest horizon.
    const horizons = [...this.#answers.values()]
      .map((a) => (a.more ? (a.resumeAfter ?? a.entries.at(-1)?.key ?? this.after) : undefined))
      .sort((a, b) => (a === undefined ? (b === undefined ? 0 : 1) : b === undefined ? -1 : compareKeys(a, b)));
    const spare = this.answersSpared(this.#answers.size);
    const horizon = horizons[spare];
    const next = horizons[spare + 1];
    // Each key's highest candidate, and its size as the first answer with the write's cross-checksum gave it.
    const best = new Map<string, { candidate: Candidate; sized: { size: number; stripes: number } | undefined }>();
    for (const a of this.#answers.values()) {
      for (const e of a.entries) {
        if (horizon !== undefined && compareKeys(e.key, horizon) > 0) continue;
        const sized = e.cc
          ? e.layout
            ? { size: e.layout.valueLength, stripes: stripeCount(e.layout.valueLength, e.layout.stripeSize) }
            : { size: e.cc.valueLength, stripes: 1 }
          : undefined;
        const b = best.get(e.key);
        if (!b) best.set(e.key, { candidate: e.candidate, sized });
        else if (compareTimestamps(e.candidate.ts, b.candidate.ts) > 0) {
          b.candidate = e.candidate;
          b.sized = sized;
        } else if (b.sized === undefined && sized !== undefined && sameWrite(e.candidate, b.candidate)) b.sized = sized;
      }
    }
    const names = [...best.keys()].sort(compareKeys);
    const taken = names.slice(0, this.limit);
    // Past the limit, the next page starts after the last key taken; otherwise after the
    // horizon, which may lie beyond every key listed (servers read past keys without lc).
    const cursor = names.length > this.limit ? taken.at(-1) : horizon;
    const keys: ListPageKey[] = [];
    for (const key of taken) {
      const { candidate, sized } = best.get(key)!;
      if (candidate.cert.tombstone) continue;
      keys.push({ key, candidate, size: sized?.size, stripes: sized?.stripes });
    }
    const thin = cursor !== undefined && taken.length < Math.min(this.limit, MIN_LIST_PAGE);
    const reachable = horizon !== undefined && (next === undefined || compareKeys(next, horizon) > 0);
    return { page: { keys, cursor }, thin, reachable };
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
