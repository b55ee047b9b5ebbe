/**
 * The writes under way at one server, page by page: what a server rebuilding after a lost
 * disk asks each peer (PENDING), because before the loss it may have signed receipts for
 * writes that had not completed. Once such a write completes, its store proof counts the
 * rebuilt server among the `n − t` that hold it, so the rebuild repairs it too
 * (`repair.ts`, {@link pendingCandidate}).
 *
 * Nothing in an answer is proven complete, so each write it lists is checked as far as it
 * can be: the writer's certificate (signatures and authority) and the cross-checksum (and
 * layout) it signs. Keys must lie in the range asked, in order, so paging always moves
 * forward. An answer that breaks a rule is refused whole and its server reported.
 *
 * Which writes must be repaired ({@link mustRepair}): a write this server signed a receipt
 * for can complete only with `n − t − 1` peers' receipts too, and while this server
 * rebuilds it counts as one of the `t` faults, so at least `t + 1` of those peers are
 * correct, and every correct server lists what it holds. Hence, once `m` peers have
 * listed everything, a write listed by fewer than `m − 2t + 1` of them cannot complete
 * with this server's old receipt (and a write nobody lists was never stored at a correct
 * peer): a rebuild skips those, so a writer that crashed after one STORE does not keep a
 * server rebuilding for ever.
 */
import { certificateId, type Candidate } from '../auth/candidate.js';
import type { CertificateVerifier } from '../auth/certificate.js';
import type { ClusterConfig } from '../core/config.js';
import type { CryptoProvider } from '../core/crypto.js';
import { withEpoch, currentEpoch } from '../auth/epochs.js';
import { check, ProtocolError } from '../core/errors.js';
import { compareKeys, inListRange } from '../core/keys.js';
import { MAX_LIST_LIMIT } from '../wire/list-bounds.js';
import type { ClientOperation, PendingEntry, PendingRequest, Reply, Step } from '../wire/messages.js';
import { pendingCandidate } from './repair.js';
import { entryCovered } from '../core/stripes.js';
import { compareTimestamps, timestampKey } from '../auth/timestamp.js';

/** What listing a server's pending writes needs. */
export interface PendingListOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly verifier: CertificateVerifier;
  readonly onEvidence?: (server: number, reason: string) => void;
}

/** One page of a server's pending writes: the writes, checked, and where the next page starts (`undefined` at the end). */
export interface PendingPage {
  readonly entries: readonly PendingEntry[];
  readonly cursor: string | undefined;
}

/** One PENDING to server `server`, its answer checked; ends with the page or the server's ERROR. */
export class PendingListOperation implements ClientOperation<PendingPage> {
  readonly key: string;
  readonly opId: number;
  readonly #options: PendingListOptions;
  readonly #server: number;
  readonly #after: string;
  readonly #limit: number;
  #done = false;

  constructor(options: PendingListOptions, server: number, after: string, opId: number, limit = MAX_LIST_LIMIT) {
    check(Number.isInteger(server) && server >= 0 && server < options.config.n, 'server must be a server of the cluster');
    check(Number.isInteger(limit) && limit >= 1 && limit <= MAX_LIST_LIMIT, `limit must be in 1..${MAX_LIST_LIMIT}`);
    this.key = '';
    this.opId = opId;
    this.#options = options;
    this.#server = server;
    this.#after = after;
    this.#limit = limit;
  }

  async start(): Promise<Step<PendingPage>> {
    const message: PendingRequest = { type: 'PENDING', key: '', opId: this.opId, after: this.#after, limit: this.#limit };
    return { send: [{ to: this.#server, message: withEpoch(message, currentEpoch(this.#options.verifier.cluster)) }] };
  }

  async onReply(from: number, reply: Reply): Promise<Step<PendingPage>> {
    if (this.#done || from !== this.#server || reply.opId !== this.opId) return {};
    if (reply.type === 'ERROR') {
      this.#done = true;
      return { error: new ProtocolError(reply.code, `server ${from}: ${reply.message}`, { origin: 'servers' }) };
    }
    if (reply.type !== 'PENDING_ACK') return {};
    this.#done = true;
    const problem = await this.#problem(reply);
    if (problem) {
      this.#options.onEvidence?.(from, problem);
      return { error: new ProtocolError('INVALID_ARGUMENT', `server ${from}'s list of writes under way: ${problem}`) };
    }
    const last = reply.entries.at(-1)?.key;
    const horizon = reply.resumeAfter ?? last;
    return { result: { entries: reply.entries, cursor: reply.more ? horizon : undefined } };
  }

  async #problem(reply: Extract<Reply, { type: 'PENDING_ACK' }>): Promise<string | undefined> {
    const { crypto, verifier } = this.#options;
    const seen = new Set<string>();
    let previous: PendingEntry | undefined;
    for (const e of reply.entries) {
      if (!inListRange(e.key, '', this.#after)) return `key ${JSON.stringify(e.key)} is outside the range asked`;
      if (previous) {
        const order = compareKeys(previous.key, e.key);
        if (order > 0 || (order === 0 && compareTimestamps(previous.ts, e.ts) >= 0)) return 'writes out of order';
      }
      previous = e;
      const id = `${e.key}\u0000${timestampKey(e.ts)}`;
      if (seen.has(id)) return 'a write listed twice';
      seen.add(id);
      if (e.ts.num === 0) return 'a write at timestamp 0';
      if (e.cc.hashes.length !== this.#options.config.n) return 'a cross-checksum of the wrong size';
      if (e.cert.tombstone !== e.cc.tombstone) return 'a certificate and cross-checksum that disagree on delete';
      if (!entryCovered(crypto, e.cert, 0, e.cc, e.layout)) return 'a certificate that does not sign its cross-checksum';
      const checked = await verifier.check(e.key, e.ts, e.cert);
      if (!checked.ok) return `a certificate that does not check out (${checked.reason})`;
    }
    if (reply.more) {
      const horizon = reply.resumeAfter ?? reply.entries.at(-1)?.key;
      if (horizon === undefined || compareKeys(horizon, this.#after) <= 0) return 'more keys, but no way forward';
      if (previous && compareKeys(horizon, previous.key) < 0) return 'a resume key before its last write';
    } else if (reply.resumeAfter !== undefined) return 'a resume key without more';
    return undefined;
  }
}

/** A write under way, as the peers list it. */
export interface PendingWrite {
  readonly key: string;
  /** The write named as a candidate for `RepairOperation` (`pending`). */
  readonly candidate: Candidate;
  /** Bytes of the value (stripe 0's length, or the layout's whole value). */
  readonly size: number;
  /** The peers whose answers listed it. */
  readonly listedBy: ReadonlySet<number>;
}

/** Merges the peers' lists: one {@link PendingWrite} per write (key, timestamp and certificate), with the peers that listed it. */
export class PendingWrites {
  readonly #writes = new Map<string, { key: string; candidate: Candidate; size: number; listedBy: Set<number> }>();

  add(server: number, entries: readonly PendingEntry[]): void {
    for (const e of entries) {
      const id = `${e.key}\u0000${timestampKey(e.ts)}\u0000${certificateId(e.cert)}`;
      let w = this.#writes.get(id);
      if (!w) {
        const size = e.layout?.valueLength ?? e.cc.valueLength;
        this.#writes.set(id, (w = { key: e.key, candidate: pendingCandidate(e.ts, e.cert), size, listedBy: new Set() }));
      }
      w.listedBy.add(server);
    }
  }

  /** Every write listed, in key order, oldest first within a key. */
  all(): PendingWrite[] {
    return [...this.#writes.values()].sort((a, b) => compareKeys(a.key, b.key) || compareTimestamps(a.candidate.ts, b.candidate.ts));
  }
}

/**
 * Whether a rebuilding server must repair a write under way that `listedBy` of its peers
 * listed, once `complete` peers have listed everything they hold: see the module comment.
 * `complete` below `2t` peers decides nothing (`undefined`): a write could hide among the
 * peers that did not answer.
 */
export function mustRepair(config: ClusterConfig, listedBy: number, complete: number): boolean | undefined {
  if (complete < 2 * config.t) return undefined;
  return listedBy >= complete - 2 * config.t + 1;
}
