/**
 * The cluster's catalog of completed writes, as catch-up (`heal.ts`) reads it: every key
 * with its latest completed write, **deletes included**, page by page. It is the protocol's
 * `ListOperation` (LIST to all `n` servers, `n − t` answers merged, every key's candidate
 * verified), so a Byzantine server can neither invent a key (a candidate needs its writer's
 * certificate and `n − t` receipts) nor hide a completed one (any `n − t` answers share a
 * correct server with the `n − t` that completed it).
 *
 * Everything this server knows of LIST and its paging is in this module, through
 * `ListOperation`'s public API and its `problem` hook, so a change of LIST changes only this
 * file:
 *
 * - `ListOperation` leaves deleted keys out of its pages (a user listing wants only
 *   values), but a server catching up needs them (a delete erases the value it deletes,
 *   and a server that missed it must erase too). The answers the operation accepted are
 *   kept (its `problem` hook sees each one it accepts), and the page's keys are taken from
 *   them up to the page's cursor, the highest candidate of each key winning, exactly as
 *   the operation merges them.
 * - Verifying every key's candidate (Ed25519 signatures of the certificate and `n − t`
 *   receipts) would cost a full pass seconds of CPU per thousand keys. This server's own
 *   `lc`s were each verified when they were set, so a peer's candidate byte-identical to
 *   this server's `lc` of the same key is taken as valid without verifying it again
 *   ({@link KnownVerifier}); only candidates this server does not hold are verified. In a
 *   caught-up cluster that is none of them.
 */
import {
  candidateId,
  candidatesEqual,
  CertificateVerifier,
  compareKeys,
  compareTimestamps,
  ListOperation,
  PendingListOperation,
  type Candidate,
  type ClusterConfig,
  type CryptoProvider,
  type ListAck,
  type ListPage,
  type PendingPage,
  type Reply,
  type Request,
} from '@powerstore/protocol';
import type { PeerSet, RunOptions } from './peers.js';

/** One key of the catalog: its latest completed write (a delete's too). */
export interface CatalogEntry {
  readonly key: string;
  readonly candidate: Candidate;
  /** Bytes of the value, when an answer carried the write's cross-checksum. */
  readonly size: number | undefined;
}

/** A page of the catalog. */
export interface CatalogPage {
  readonly entries: readonly CatalogEntry[];
  /** Where the next page starts; `undefined` once the catalog is complete. */
  readonly cursor: string | undefined;
}

/**
 * A {@link CertificateVerifier} that takes a candidate byte-identical to one it was told
 * is this server's own `lc` of the key as valid (this server verified it when it set it).
 */
export class KnownVerifier extends CertificateVerifier {
  readonly #known = new Map<string, Candidate>();

  /** `candidate` is this server's `lc` of `key`. */
  know(key: string, candidate: Candidate): void {
    this.#known.set(key, candidate);
  }

  forget(key?: string): void {
    if (key === undefined) this.#known.clear();
    else this.#known.delete(key);
  }

  override async valid(key: string, c: Candidate, checks?: Parameters<CertificateVerifier['valid']>[2]): Promise<boolean> {
    const known = this.#known.get(key);
    if (known && candidatesEqual(known, c)) return true;
    return super.valid(key, c, checks);
  }
}

/** A `ListOperation` that keeps the answers it accepts. */
class CatalogListOperation extends ListOperation {
  readonly accepted: ListAck[] = [];

  protected override async problem(reply: ListAck): Promise<string | undefined> {
    const problem = await super.problem(reply);
    if (problem === undefined) this.accepted.push(reply);
    return problem;
  }
}

/** What a {@link Catalog} needs. */
export interface CatalogOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly peers: PeerSet;
  /** The verifier pages are checked with (shared with the repairs, so a key verified here is not verified again there). */
  readonly verifier: KnownVerifier;
  /** This server's own `Server.handle`. */
  readonly handleSelf: (request: Request) => Promise<Reply>;
  readonly opId: () => number;
  readonly timeoutMs: number;
  readonly onEvidence?: (server: number, reason: string) => void;
}

/** Keys per LIST page (the protocol's most). */
export const CATALOG_PAGE_KEYS = 1000;

/** Pages of the cluster's completed writes, deletes included; see the module comment. */
export class Catalog {
  readonly #options: CatalogOptions;

  constructor(options: CatalogOptions) {
    this.#options = options;
  }

  /**
   * The page of keys after `after` (`''` for the first). With `peersFirst`, this server's
   * own answer counts only if `n − t` peers have not answered after `peersFirst` ms: a
   * server whose disk was lost knows nothing, and `n − t` answers from the others alone
   * find every completed write even with `t` of them Byzantine.
   */
  async page(
    after: string,
    options: { readonly signal?: AbortSignal; readonly peersFirst?: number; readonly limit?: number } = {},
  ): Promise<CatalogPage> {
    const { handleSelf, verifier } = this.#options;
    const limit = options.limit ?? CATALOG_PAGE_KEYS;
    verifier.forget();
    const opId = this.#options.opId();
    // This server's own answer first: its lcs seed the verifier before any peer's answer is checked.
    const own = await handleSelf({ type: 'LIST', key: '', opId, after, limit });
    if (own.type === 'LIST_ACK') for (const e of own.entries) verifier.know(e.key, e.candidate);
    return this.#run(new CatalogListOperation(this.#listOptions(verifier), '', after, limit, opId), {
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.peersFirst ? { deferSelfMs: options.peersFirst } : {}),
      handleSelf: (request) => (request.type === 'LIST' && request.opId === opId ? Promise.resolve(own) : handleSelf(request)),
    });
  }

  /**
   * The latest completed write of `key` (a delete's too), or `undefined` if no answer
   * lists one: what catch-up looks up again when the version it was repairing was
   * overwritten meanwhile.
   */
  async lookup(key: string, options: { readonly signal?: AbortSignal } = {}): Promise<CatalogEntry | undefined> {
    // Keys under the prefix `key` start with `key` itself.
    const op = new CatalogListOperation(this.#listOptions(this.#options.verifier), key, '', 1, this.#options.opId());
    const page = await this.#run(op, options.signal ? { signal: options.signal } : {});
    return page.entries.find((e) => e.key === key);
  }

  /**
   * A page of the writes under way at peer `server` (PENDING), each one's certificate and
   * cross-checksum checked (`PendingListOperation`): what a rebuilding server repairs
   * besides the completed writes (`heal.ts`).
   */
  async pendingPage(server: number, after: string, options: { readonly signal?: AbortSignal } = {}): Promise<PendingPage> {
    const { config, crypto, verifier, onEvidence, peers, timeoutMs } = this.#options;
    const op = new PendingListOperation(
      { config, crypto, verifier, ...(onEvidence ? { onEvidence } : {}) },
      server,
      after,
      this.#options.opId(),
    );
    return peers.run(op, { timeoutMs, ...(options.signal ? { signal: options.signal } : {}) });
  }

  #listOptions(verifier: KnownVerifier) {
    const { config, crypto, onEvidence } = this.#options;
    return { config, crypto, verifier, ...(onEvidence ? { onEvidence } : {}) };
  }

  async #run(op: CatalogListOperation, options: Omit<RunOptions, 'timeoutMs'>): Promise<CatalogPage> {
    const page = await this.#options.peers.run(op, { timeoutMs: this.#options.timeoutMs, ...options });
    return { entries: mergeWithDeletes(op.accepted, page), cursor: page.cursor };
  }
}

/**
 * The keys of `page` with the deleted ones `ListOperation` left out: every key the accepted
 * `answers` carry up to the page's cursor (the page covers exactly those), with the highest
 * candidate any of them gives, as the operation's own merge picks it.
 */
export function mergeWithDeletes(answers: readonly ListAck[], page: ListPage): CatalogEntry[] {
  const best = new Map<string, { candidate: Candidate; sizes: Map<string, number> }>();
  for (const a of answers) {
    for (const e of a.entries) {
      if (page.cursor !== undefined && compareKeys(e.key, page.cursor) > 0) continue;
      let b = best.get(e.key);
      if (!b) best.set(e.key, (b = { candidate: e.candidate, sizes: new Map() }));
      else if (compareTimestamps(e.candidate.ts, b.candidate.ts) > 0) b.candidate = e.candidate;
      if (e.cc) b.sizes.set(candidateId(e.candidate), e.layout?.valueLength ?? e.cc.valueLength);
    }
  }
  // The operation's own page is authoritative for the keys it lists.
  for (const k of page.keys) {
    let b = best.get(k.key);
    if (!b) best.set(k.key, (b = { candidate: k.candidate, sizes: new Map() }));
    else b.candidate = k.candidate;
    if (k.size !== undefined) b.sizes.set(candidateId(k.candidate), k.size);
  }
  return [...best.keys()].sort(compareKeys).map((key) => {
    const { candidate, sizes } = best.get(key)!;
    return { key, candidate, size: sizes.get(candidateId(candidate)) };
  });
}
