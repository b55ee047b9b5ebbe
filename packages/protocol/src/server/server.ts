/**
 * Server `s_i` of PowerStore (M-PoWerStore's Algorithm 5 with signed write certificates),
 * over an abstract {@link ServerStorage}.
 *
 * - STORE is accepted only when the certificate covers the cross-checksum, the fragment
 *   is entry `i` of it, the certificate is valid (signatures and the signer's authority
 *   over the key), the write policy admits it (expiry, revocation, owners), the owner is
 *   within quota, and `Hist[key][ts]` is empty or byte-identical: **history is write-once**
 *   (an identical retry is acknowledged, a different entry refused with `CONFLICT`). The
 *   acknowledgement carries the server's signed receipt; `n − t` of them form the store
 *   proof that makes the write's candidate valid.
 * - COMPLETE and the FILTER write-back change `lc` only for a valid candidate with a
 *   higher timestamp. Validity depends on nothing but the candidate's bytes and the
 *   cluster's fixed identity, so it is the same at every correct server, at every time.
 * - The server's only secret is its receipt key, which grants no write power: a store
 *   proof needs `n − t` servers' receipts *and* the writer's certificate.
 */
import { bytesEqual } from '../core/bytes.js';
import { certificatesEqual, type Candidate } from '../auth/candidate.js';
import { receiptBatcher, type ReceiptSignature } from '../auth/receipt-batch.js';
import type { SignatureBatcher } from '../core/signature-batch.js';
import { CertificateVerifier, receiptMessage, type CertificateCheck, type StoreProof, type WriteCertificate } from '../auth/certificate.js';
import { decodeHeader, decodeMessage, encodeMessage, listEntryBytes, MAX_PENDING_ENTRIES, pendingEntryBytes } from '../wire/codec.js';
import type { ClusterConfig } from '../core/config.js';
import { crossChecksumDigest, fragmentMatches, type CrossChecksum } from '../core/cross-checksum.js';
import { currentEpoch, epochRefusal } from '../auth/epochs.js';
import { SIGNATURE_LENGTH, type CryptoProvider, type Signer } from '../core/crypto.js';
import { check, ProtocolError, type ProtocolErrorCode } from '../core/errors.js';
import type { ClusterIdentity } from '../auth/grant.js';
import {
  isRequest,
  type CollectRequest,
  type CompleteRequest,
  type ErrorReply,
  type FilterAck,
  type FilterRequest,
  type ListEntry,
  type ListRequest,
  type PendingEntry,
  type PendingRequest,
  type HistoryEntry,
  type Message,
  type Reply,
  type Request,
  type RequestType,
  type StoreRequest,
} from '../wire/messages.js';
import { OPEN_POLICY, WritePolicyCheck, type Quota, type Refusal, type WritePolicy } from '../auth/policy.js';
import { MAX_LIST_REPLY_BYTES } from '../wire/list-bounds.js';
import { historyEntryBytes, type EntryMeta, type WriteInfo } from '../storage/record.js';
import { StorageError, type KeyRecord, type ServerStorage } from '../storage/abstract-storage.js';
import {
  entryCovered,
  layoutProblem,
  layoutsEqual,
  MAX_STRIPES,
  MIN_STRIPE_SIZE,
  stripeMatches,
  summarize,
  type StripeLayout,
} from '../core/stripes.js';
import { TS0, compareTimestamps, timestampsEqual, type Timestamp } from '../auth/timestamp.js';
import { windowTop, writerRank } from '../auth/window.js';

/**
 * How much history a server keeps per key (garbage collection). It keeps `lc`'s entry,
 * the `keep` newest entries below it (none below a completed delete), and the entries
 * above it (writes under way), and deletes the rest; see the protocol README for the
 * guarantee this gives readers.
 */
export interface HistoryLimits {
  /**
   * δ: entries kept below `lc`. A read's FILTER finds the version its COLLECT selected
   * as long as at most δ newer writes have reached the server in between.
   */
  readonly keep: number;
  /** Entries above `lc` (started, not completed) per key; more get `PENDING_LIMIT`. */
  readonly maxPendingPerKey: number;
  /** Entries above `lc` per key and writer identity (writer tag); more get `PENDING_LIMIT`. */
  readonly maxPendingPerWriter: number;
  /**
   * An upload's stripes without its stripe 0 (a `putStream` abandoned part way) are deleted
   * once no stripe of it arrived for this long (ms), or at once when a newer write
   * completed and it is idle for a tenth of that.
   */
  readonly uploadIdleMs: number;
}

/** The defaults of {@link HistoryLimits}. */
export const DEFAULT_HISTORY: HistoryLimits = Object.freeze({
  keep: 2,
  maxPendingPerKey: 256,
  maxPendingPerWriter: 32,
  uploadIdleMs: 60 * 60 * 1000,
});

/** Bytes of a writer id that name the writer's identity (the rest is its instance). */
const WRITER_TAG_BYTES = 16;

/** What a server needs. */
export interface ServerOptions {
  readonly config: ClusterConfig;
  /** This server's position `i` (0-based) in the cluster. */
  readonly index: number;
  readonly crypto: CryptoProvider;
  readonly storage: ServerStorage;
  /**
   * The cluster's id, admin key and server keys by key epoch: part of every candidate's
   * validity; a newer identity may only add epochs ({@link Server.setCluster}).
   */
  readonly cluster: ClusterIdentity;
  /** This server's key: signs the receipts in STORE acknowledgements. Its public key is `cluster.servers[index]`. */
  readonly signer: Signer;
  /** Who may write, revocations and quotas; see {@link Server.setPolicy}. Default: open, no quotas. */
  readonly policy?: WritePolicy;
  /** The time, in ms since the epoch, for grant expiry (injected: simulations run on virtual time). */
  readonly now: () => number;
  /**
   * Called for every candidate in COMPLETE or FILTER that is not valid: forged, replayed
   * from another key or cluster. FILTER drops them silently (a reader may relay a
   * Byzantine server's forgery), so this is their only trace.
   */
  readonly onInvalidCandidate?: (key: string) => void;
  /** Called when a STORE tried to change an entry already in the history. */
  readonly onConflict?: (key: string, ts: Timestamp) => void;
  /** How much history to keep per key. Default {@link DEFAULT_HISTORY}. */
  readonly history?: Partial<HistoryLimits>;
  /** Called when garbage collection deleted `count` entries of `key`. */
  readonly onCollected?: (key: string, count: number) => void;
  /**
   * Called when `lc` of `key` moved to `candidate` (a COMPLETE, a FILTER's write-back) and
   * this server does not hold its entry: it missed the write's STORE, or lost it. Hosts
   * repair it from the other servers (`powerstore-server`'s catch-up) instead of waiting
   * for their next pass over every key.
   */
  readonly onMissedEntry?: (key: string, candidate: Candidate) => void;
  /**
   * Signs the receipts of STOREs that become durable together under one root
   * (`receipt-batch.ts`): `defer` runs its callback after the current turn (Node:
   * `setImmediate`), and every receipt asked for before then shares one signature. Without
   * it, each receipt is signed on its own.
   */
  readonly receiptBatching?: (flush: () => void) => void;
  /** Called for every signature made for receipts, with how many receipts it covers (with `receiptBatching`). */
  readonly onReceiptsSigned?: (receipts: number) => void;
}

/** What {@link Server.handleFrame} did with a frame. */
export interface FrameResult {
  /** The reply frame to send. */
  readonly reply: Uint8Array;
  /** The request's type, when the frame decoded to a request. */
  readonly type: RequestType | undefined;
  /** The code of the ERROR reply, if the reply is one. */
  readonly error: ProtocolErrorCode | undefined;
  /** The storage failure behind an `INTERNAL` reply, for the host's log. */
  readonly failure?: unknown;
}

/**
 * Answers requests. `handle` runs each request's state change under the storage's per-key
 * exclusion and resolves after it is durable, so the reply may be sent at once.
 * Protected methods are the protocol's rules, one each, so the simulator's mutants can
 * break exactly one.
 */
export class Server {
  protected readonly config: ClusterConfig;
  protected readonly index: number;
  protected readonly crypto: CryptoProvider;
  protected readonly verifier: CertificateVerifier;
  protected readonly storage: ServerStorage;
  protected admission: WritePolicyCheck;
  protected readonly history: HistoryLimits;
  readonly #options: ServerOptions;
  readonly #receipts: SignatureBatcher | undefined;

  constructor(options: ServerOptions) {
    check(
      options.cluster.servers.length === options.config.n,
      `the cluster identity lists ${options.cluster.servers.length} server keys, the cluster has ${options.config.n} servers`,
    );
    this.config = options.config;
    this.index = options.index;
    this.crypto = options.crypto;
    this.storage = options.storage;
    this.verifier = new CertificateVerifier(options.crypto, options.cluster);
    this.admission = new WritePolicyCheck(options.crypto, options.cluster, options.policy ?? OPEN_POLICY);
    this.history = { ...DEFAULT_HISTORY, ...options.history };
    const { keep, maxPendingPerKey, maxPendingPerWriter, uploadIdleMs } = this.history;
    check(Number.isSafeInteger(keep) && keep >= 0, `history.keep must be an integer ≥ 0, got ${keep}`);
    check(
      Number.isSafeInteger(maxPendingPerKey) && maxPendingPerKey >= 1,
      `history.maxPendingPerKey must be a positive integer, got ${maxPendingPerKey}`,
    );
    check(
      Number.isSafeInteger(maxPendingPerWriter) && maxPendingPerWriter >= 1,
      `history.maxPendingPerWriter must be a positive integer, got ${maxPendingPerWriter}`,
    );
    check(Number.isSafeInteger(uploadIdleMs) && uploadIdleMs >= 1, `history.uploadIdleMs must be a positive integer, got ${uploadIdleMs}`);
    this.#options = options;
    this.#receipts = options.receiptBatching
      ? receiptBatcher(
          options.crypto,
          options.signer,
          options.cluster.id,
          options.index,
          options.receiptBatching,
          (message, signature, n) => {
            this.verifier.signed(options.signer.publicKey, message, signature);
            options.onReceiptsSigned?.(n);
          },
        )
      : undefined;
  }

  /** Replaces the write policy (the operator edited the cluster file). Affects STORE admission only. */
  setPolicy(policy: WritePolicy): void {
    this.admission = new WritePolicyCheck(this.crypto, this.verifier.cluster, policy);
  }

  /** The cluster identity this server judges by: its key epochs (see {@link setCluster}). */
  get cluster(): ClusterIdentity {
    return this.verifier.cluster;
  }

  /** The key epoch this server is at: the only one whose requests it answers and whose writes it admits. */
  get epoch(): number {
    return currentEpoch(this.verifier.cluster);
  }

  /**
   * Moves to a newer identity of the cluster that adds key epochs (a server was replaced,
   * `epochs.ts`), after the operator published a new cluster file. Throws `INVALID_ARGUMENT`
   * unless `cluster` only adds epochs and this server's own key is its key in the new
   * current epoch (a server whose key was replaced must stop: its successor has the slot).
   * From then on the server answers only requests of the new epoch and admits only its writes;
   * what it stored and every candidate valid before stays valid.
   */
  setCluster(cluster: ClusterIdentity): void {
    const mine = cluster.servers[this.index];
    if (!mine || !bytesEqual(mine, this.#options.signer.publicKey)) {
      throw new ProtocolError(
        'INVALID_ARGUMENT',
        `server ${this.index + 1}'s key is not its key in epoch ${currentEpoch(cluster)}: it was replaced, and this server must stop`,
      );
    }
    this.verifier.update(cluster);
    this.admission = new WritePolicyCheck(this.crypto, cluster, this.admission.policy);
  }

  /** The owner whose usage a key's entries are charged to. */
  ownerOfKey(key: string): string {
    return this.admission.ownerOfKey(key);
  }

  /** The quota the current policy gives `owner`. */
  quotaFor(owner: string): Quota {
    return this.admission.quotaFor(owner);
  }

  /**
   * Handles one request. A malformed, unauthenticated or refused request gets an ERROR
   * reply; only storage failures reject.
   */
  async handle(request: Request): Promise<Reply> {
    const epoch = this.epoch;
    const reply = await this.#answer(request, epoch);
    return epoch ? { ...reply, epoch } : reply;
  }

  async #answer(request: Request, epoch: number): Promise<Reply> {
    try {
      this.checkEpoch(request, epoch);
      this.checkShape(request);
      switch (request.type) {
        case 'CLOCK':
        case 'COLLECT':
          return await this.onCollect(request);
        case 'STORE':
          return await this.onStore(request);
        case 'COMPLETE':
          return await this.onComplete(request);
        case 'FILTER':
          return await this.onFilter(request);
        case 'LIST':
          return await this.onList(request);
        case 'PENDING':
          return await this.onPending(request);
      }
    } catch (err) {
      if (err instanceof ProtocolError) return errorReply(request, err.code, err.message);
      throw err;
    }
  }

  /**
   * Wire-level entry point, used by the production server and the simulator alike:
   * decodes a frame, handles it, encodes the reply. A frame that does not decode, or is
   * not a request, gets an ERROR frame (carrying the frame's key and opId when its header
   * is readable); a storage failure gets an `INTERNAL` ERROR frame, or `UNAVAILABLE` for a
   * backend's `STORAGE_FAILED` (its disk failed; the message is the backend's). Never rejects.
   * `options.alloc` supplies the reply frame's memory (see `ByteWriter.finish`).
   */
  async handleFrame(
    frame: Uint8Array,
    options: { readonly maxFragmentLength?: number; readonly alloc?: (length: number) => Uint8Array } = {},
  ): Promise<FrameResult> {
    const { alloc, ...limits } = options;
    let message: Message;
    try {
      message = decodeMessage(frame, { n: this.config.n, ...limits });
    } catch (err) {
      const code: ProtocolErrorCode = err instanceof ProtocolError ? err.code : 'INVALID_FRAME';
      const header = decodeHeader(frame);
      return this.#frame(errorReply(header ?? { key: '', opId: 0 }, code, (err as Error).message), undefined, alloc);
    }
    if (!isRequest(message)) {
      return this.#frame(errorReply(message, 'INVALID_ARGUMENT', `${message.type} is a reply, not a request`), undefined, alloc);
    }
    try {
      return this.#frame(await this.handle(message), message.type, alloc);
    } catch (failure) {
      // A backend whose disk failed (full, a failed write or fsync) says so with
      // `STORAGE_FAILED`: the server is unavailable, not wrong, and clients must not blame it.
      if (failure instanceof StorageError && failure.code === 'STORAGE_FAILED') {
        return { ...this.#frame(errorReply(message, 'UNAVAILABLE', failure.message), message.type, alloc), failure };
      }
      return { ...this.#frame(errorReply(message, 'INTERNAL', 'the server could not complete the request'), message.type, alloc), failure };
    }
  }

  #frame(reply: Reply, type: RequestType | undefined, alloc: ((length: number) => Uint8Array) | undefined): FrameResult {
    return { reply: encodeMessage(reply, alloc), type, error: reply.type === 'ERROR' ? reply.code : undefined };
  }

  /**
   * CLOCK and COLLECT: answer with `lc` (its certificate proves its timestamp); CLOCK also
   * with the highest write pending above it that may complete (see `window.ts`).
   */
  protected async onCollect(req: CollectRequest | Extract<Request, { type: 'CLOCK' }>): Promise<Reply> {
    const { key, opId } = req;
    if (req.type === 'COLLECT') return { type: 'COLLECT_ACK', key, opId, candidate: await this.storage.withKey(key, (r) => r.getLc()) };
    return this.storage.withKey(key, async (record) => {
      const candidate = await record.getLc();
      return { type: 'CLOCK_ACK', key, opId, candidate, pending: this.pendingNum(await record.index(), candidate?.ts ?? TS0) };
    });
  }

  /**
   * The highest number of a write stored here above `lc`, 0 if none. Only writes with their
   * head can still complete, but an upload's stripes count too: an owner's next write then
   * lands above an abandoned upload, which frees it (`collectable`).
   */
  protected pendingNum(index: readonly WriteInfo[], lcTs: Timestamp): number {
    let top = 0;
    for (const w of index) if (compareTimestamps(w.ts, lcTs) > 0) top = Math.max(top, w.ts.num);
    return top;
  }

  /**
   * STORE: `Hist[ts] ← (fr_i, cc, cert)` once every check passes; see the module comment.
   * For a striped value (`stripes.ts`), stripes 1 … k−1 come first with stripe
   * certificates, and stripe 0 last with the write certificate and the layout: only then,
   * and only if this server holds every stripe the layout lists, is a receipt signed.
   */
  protected async onStore(req: StoreRequest): Promise<Reply> {
    if (req.stripe > 0) return this.onStoreStripe(req);
    const { key, ts, fragment, cc, cert, layout } = req;
    if (layout) {
      const problem = layoutProblem(layout);
      if (problem) throw new ProtocolError('INVALID_ARGUMENT', problem);
      if (!entryCovered(this.crypto, cert, 0, cc, layout)) {
        throw new ProtocolError('UNAUTHENTICATED', 'the certificate does not cover this stripe layout and cross-checksum');
      }
    } else if (!bytesEqual(crossChecksumDigest(this.crypto, cc), cert.ccDigest)) {
      throw new ProtocolError('UNAUTHENTICATED', 'the certificate does not cover this cross-checksum');
    }
    // Servers that learn this write only as a candidate trust the certificate's flag.
    if (cert.tombstone !== cc.tombstone) {
      throw new ProtocolError(
        'INVALID_ARGUMENT',
        `the certificate says ${cert.tombstone ? 'delete' : 'value'}, the cross-checksum says otherwise`,
      );
    }
    if (!(await this.fragmentMatches(req))) {
      throw new ProtocolError('INVALID_ARGUMENT', `fragment ${this.index} does not match the cross-checksum`);
    }
    const checked = await this.checkCertificate(key, ts, cert);
    if (!checked.ok) throw new ProtocolError(checked.code, checked.reason);
    const refusal = this.refusal(key, cert);
    if (refusal) throw new ProtocolError(refusal.code, refusal.reason);
    const basis = await this.checkedBasis(req);
    const entry: HistoryEntry = layout ? { ts, stripe: 0, fragment, cc, cert, layout } : { ts, stripe: 0, fragment, cc, cert };
    await this.storage.withKey(key, (record) => this.storeEntry(record, key, entry, basis));
    // Signed only once the entry is durable: a receipt is a promise to hold it.
    const { signature, batch } = await this.signReceipt(receiptMessage(this.crypto, this.#options.cluster.id, key, ts, cert, this.index));
    return batch
      ? { type: 'STORE_ACK', key, opId: req.opId, ts, stripe: 0, receipt: signature, batch }
      : { type: 'STORE_ACK', key, opId: req.opId, ts, stripe: 0, receipt: signature };
  }

  /** This server's receipt for `message`: alone, or in a batch (`receiptBatching`). */
  protected async signReceipt(message: Uint8Array): Promise<ReceiptSignature> {
    if (this.#receipts) return this.#receipts.sign(message);
    const signature = await this.#options.signer.sign(message);
    this.verifier.signed(this.#options.signer.publicKey, message, signature);
    return { signature };
  }

  /**
   * Write-once history, per stripe: an identical retry is a no-op, a different entry a
   * `CONFLICT`, and so is a stripe ≥ 1 of a write whose stripe 0 is stored (the write is
   * whole then). A timestamp at or below the collected mark is refused (`SUPERSEDED`):
   * storing it again, or acknowledging it unstored, would let a collected timestamp take
   * other content. Stripe 0 of a striped write also needs every other stripe here.
   */
  protected async storeEntry(record: KeyRecord, key: string, entry: HistoryEntry, basis?: Candidate): Promise<void> {
    const { ts, stripe } = entry;
    // The index says whether an entry exists, so a new write reads nothing, and a retry only
    // the metadata: `H(fr_i) = cc[i]` was checked, so equal metadata means an equal fragment.
    const existing = await record.getEntryMeta(ts, stripe);
    if (existing) {
      if (entryMetaEqual(existing, entry)) return;
      this.#options.onConflict?.(key, ts);
      const what = stripe > 0 ? `stripe ${stripe} of history entry ${ts.num}` : `history entry ${ts.num}`;
      throw new ProtocolError('CONFLICT', `${what} of this key already holds another write`);
    }
    if (stripe > 0 && (await record.getEntryMeta(ts, 0))) {
      this.#options.onConflict?.(key, ts);
      throw new ProtocolError('CONFLICT', `history entry ${ts.num} of this key is complete; stripe ${stripe} is not part of it`);
    }
    // The writer's basis first: the window is measured from the highest valid `lc` known.
    if (basis) await this.writeBack(record, basis, key);
    await this.checkNotCollected(record, ts);
    if (entry.layout) await this.checkStripesHeld(record, ts, entry.layout);
    const lc = await record.getLc();
    this.checkWindow(lc?.ts ?? TS0, ts, entry.cert);
    const index = await record.index();
    const write = index.find((w) => timestampsEqual(w.ts, ts));
    if (stripe > 0) this.checkStripeShape(write, stripe, entry.cc.valueLength);
    // A write's first entry makes it pending (or, for a stripe, an unfinished upload wherever
    // it lies); its other stripes add no write.
    if (!write && (stripe > 0 || compareTimestamps(ts, lc?.ts ?? TS0) > 0)) this.checkPending(index, lc?.ts ?? TS0, ts);
    await this.charge(record, key, entry);
    // Also after a stripe ≥ 1: one that arrives below lc (its write overtaken) is one more
    // write below lc, and would otherwise outlive the history bound until the next STORE.
    await this.collect(record, key);
  }

  /**
   * The timestamp window (`window.ts`): a write may take a number at most `rank · W` above
   * `lc`, so a writer that jumps over the pending writes of lower ranks is always inside it,
   * and nobody can take a key's numbers to the limit.
   */
  protected checkWindow(lcTs: Timestamp, ts: Timestamp, cert: WriteCertificate): void {
    const top = windowTop(lcTs.num, writerRank(cert, this.#options.cluster.admin));
    if (ts.num > top) {
      throw new ProtocolError(
        'INVALID_ARGUMENT',
        `timestamp ${ts.num} is beyond this writer's window over the key (${top}, from the last completed write ${lcTs.num})`,
      );
    }
  }

  /**
   * The basis a STORE carries (see {@link StoreRequest.basis}), if it is valid and so may be
   * written back; a basis that is not valid is a forgery, refused like one.
   */
  protected async checkedBasis(req: StoreRequest): Promise<Candidate | undefined> {
    if (!req.basis) return undefined;
    if (!(await this.#validOrCount(req.key, req.basis))) throw new ProtocolError('UNAUTHENTICATED', 'the basis candidate is not valid');
    return req.basis;
  }

  /**
   * Stripes ≥ 1 hold at least one byte, and only the last may be shorter than the smallest
   * stripe size, so a write's stripes are bounded by the bytes (and so the quota) they cost,
   * not by the requests an attacker can send. The exact sizes are the layout's, checked
   * when stripe 0 arrives.
   */
  protected checkStripeShape(write: WriteInfo | undefined, stripe: number, length: number): void {
    const bad = (m: string): never => {
      throw new ProtocolError('INVALID_ARGUMENT', m);
    };
    if (length === 0) bad(`stripe ${stripe} is empty; only a value's stripe 0 may be`);
    if (!write) return;
    if (write.short > 0 && stripe > write.short) {
      bad(`stripe ${stripe} follows stripe ${write.short}, which is shorter than ${MIN_STRIPE_SIZE} bytes and so the last`);
    }
    if (length < MIN_STRIPE_SIZE && write.short > 0) bad(`only the last stripe may be shorter than ${MIN_STRIPE_SIZE} bytes`);
    if (length < MIN_STRIPE_SIZE && stripe < write.top) {
      bad(`stripe ${stripe} is shorter than ${MIN_STRIPE_SIZE} bytes but stripe ${write.top} follows it`);
    }
  }

  /** A STORE at or below the collected mark would give a collected timestamp content again: `SUPERSEDED`. */
  protected async checkNotCollected(record: KeyRecord, ts: Timestamp): Promise<void> {
    const collected = await record.getCollected();
    if (collected && compareTimestamps(ts, collected) <= 0) {
      throw new ProtocolError(
        'SUPERSEDED',
        `history of this key up to ${collected.num} was collected after newer writes completed; write again with a fresh timestamp`,
      );
    }
  }

  /** Stores `entry`, charged to the key's owner, or `QUOTA_EXCEEDED`. */
  protected async charge(record: KeyRecord, key: string, entry: HistoryEntry): Promise<void> {
    const owner = this.admission.ownerOfKey(key);
    const charge = { owner, bytes: historyEntryBytes(entry), quota: this.admission.quotaFor(owner), at: this.#options.now() };
    if (!(await record.putEntry(entry, charge))) {
      throw new ProtocolError('QUOTA_EXCEEDED', `owner ${owner} has reached its quota on this server (${describeQuota(charge.quota)})`);
    }
  }

  /**
   * Stripe 0 of a striped write is stored (and a receipt signed) only when every other
   * stripe the layout lists is here, with the cross-checksum it lists: a receipt promises
   * the whole value, so `n − t` receipts put all of it on `t + 1` correct servers.
   */
  protected async checkStripesHeld(record: KeyRecord, ts: Timestamp, layout: StripeLayout): Promise<void> {
    const missing: number[] = [];
    for (let s = 1; s < layout.digests.length; s++) {
      const meta = await record.getEntryMeta(ts, s);
      if (!meta) missing.push(s);
      else if (!stripeMatches(this.crypto, layout, s, meta.cc)) {
        throw new ProtocolError('CONFLICT', `stripe ${s} stored for this write is not the one its layout lists`);
      }
    }
    if (missing.length > 0) {
      const shown = missing.slice(0, 5).join(', ') + (missing.length > 5 ? ', …' : '');
      throw new ProtocolError(
        'STRIPES_MISSING',
        `this server does not hold stripes ${shown} of this write (${missing.length} of ${layout.digests.length - 1})`,
      );
    }
  }

  /**
   * STORE of stripe `s` ≥ 1 of a striped write: checked against its stripe certificate
   * (signatures, authority, policy), then stored by {@link storeEntry} like any entry. Acknowledged without a receipt: only stripe 0's STORE earns one.
   */
  protected async onStoreStripe(req: StoreRequest): Promise<Reply> {
    const { key, ts, stripe, fragment, cc, cert } = req;
    if (req.layout) throw new ProtocolError('INVALID_ARGUMENT', 'only stripe 0 carries the stripe layout');
    if (cc.tombstone || cert.tombstone) throw new ProtocolError('INVALID_ARGUMENT', 'a delete has no stripes');
    if (!bytesEqual(crossChecksumDigest(this.crypto, cc), cert.ccDigest)) {
      throw new ProtocolError('UNAUTHENTICATED', 'the stripe certificate does not cover this cross-checksum');
    }
    if (!(await this.fragmentMatches(req))) {
      throw new ProtocolError('INVALID_ARGUMENT', `fragment ${this.index} does not match the cross-checksum`);
    }
    const checked = await this.checkStripeCertificate(key, ts, stripe, cert);
    if (!checked.ok) throw new ProtocolError(checked.code, checked.reason);
    const refusal = this.refusal(key, cert);
    if (refusal) throw new ProtocolError(refusal.code, refusal.reason);
    const basis = await this.checkedBasis(req);
    const entry: HistoryEntry = { ts, stripe, fragment, cc, cert };
    await this.storage.withKey(key, (record) => this.storeEntry(record, key, entry, basis));
    return { type: 'STORE_ACK', key, opId: req.opId, ts, stripe, receipt: NO_RECEIPT };
  }

  /**
   * Unfinished writes — above `lc`, or uploads without their stripe 0 anywhere (their
   * stripes count once) — are bounded per key and per writer identity, which also bounds a
   * key's index.
   */
  protected checkPending(index: readonly WriteInfo[], lcTs: Timestamp, ts: Timestamp): void {
    const { maxPendingPerKey, maxPendingPerWriter } = this.history;
    const pending = index.filter((e) => !e.head || compareTimestamps(e.ts, lcTs) > 0);
    if (pending.length >= maxPendingPerKey) {
      throw new ProtocolError(
        'PENDING_LIMIT',
        `${pending.length} writes of this key are under way on this server (limit ${maxPendingPerKey})`,
      );
    }
    const tag = ts.writerId.subarray(0, WRITER_TAG_BYTES);
    const mine = pending.filter((e) => bytesEqual(e.ts.writerId.subarray(0, WRITER_TAG_BYTES), tag)).length;
    if (mine >= maxPendingPerWriter) {
      throw new ProtocolError(
        'PENDING_LIMIT',
        `this writer has ${mine} writes of this key under way on this server (limit ${maxPendingPerWriter})`,
      );
    }
  }

  /**
   * Garbage collection of `key` at the host's leisure: what a STORE, COMPLETE or write-back
   * would collect, and uploads that went idle meanwhile. Hosts call it for the keys
   * {@link ServerStorage.unfinishedKeys} lists, so an upload abandoned on a key nobody
   * writes again is still deleted.
   */
  async sweep(key: string): Promise<void> {
    await this.storage.withKey(key, (record) => this.collect(record, key));
  }

  /** Garbage collection: deletes the entries {@link collectable} names. */
  protected async collect(record: KeyRecord, key: string): Promise<void> {
    const lc = await record.getLc();
    const doomed = this.collectable(await record.index(), lc, this.#options.now());
    // A write without its head raises no collected mark: this server never stored its stripe
    // 0, so never signed a receipt for it, and storing its stripes again (a straggler) gives
    // no timestamp a second content; the mark would only refuse overlapping writes below it.
    for (const e of doomed) await record.deleteEntry(e.ts, { mark: e.head });
    if (doomed.length > 0) this.#options.onCollected?.(key, doomed.length);
  }

  /**
   * The writes to delete (all their stripes), given the key's writes (oldest first), `lc`
   * and the time: below `lc`, every write but the `keep` newest with a head, and everything
   * below a completed delete (whether `lc` is a delete comes from its certificate, so a
   * server that never received the delete's STORE erases as well). Never `lc`'s own entry.
   *
   * An upload without its head (stripe 0) is different: no reader can ask for it (only a
   * head is a candidate's entry) and this server signed no receipt for it, so deleting it is
   * always safe, and it is deleted once idle for `uploadIdleMs`, above `lc` or not. Below
   * `lc` (a newer write completed) it waits only a tenth of that, and while its stripes keep
   * arriving it stays, so an upload overtaken by a small write or a delete still finishes
   * (ordered before it, and then collected) instead of failing with `STRIPES_MISSING`.
   */
  protected collectable(index: readonly WriteInfo[], lc: Candidate | undefined, now: number): WriteInfo[] {
    const lcTs = lc?.ts ?? TS0;
    const { keep, uploadIdleMs } = this.history;
    const below = (e: WriteInfo) => compareTimestamps(e.ts, lcTs) < 0;
    const headed = index.filter((e) => e.head && below(e));
    const kept = new Set(lc?.cert.tombstone ? [] : headed.slice(Math.max(0, headed.length - keep)));
    return index.filter((e) => {
      if (e.head) return below(e) && !kept.has(e);
      return now - e.touched >= (below(e) ? uploadIdleMs / 10 : uploadIdleMs);
    });
  }

  /**
   * Stores this server's entry for stripe `entry.stripe` of the completed write `candidate`
   * of `key`, as a {@link RepairOperation} rebuilt it from the other servers (`repair.ts`).
   * It is checked again here, so a host cannot store what is not proven: the candidate is
   * valid; the entry carries its timestamp and certificate; the certificate covers the
   * cross-checksum (through `layout` for a stripe ≥ 1, which the caller passes); the fragment
   * matches its hash. No admission check (validity is timeless, and the write was admitted
   * by `n − t` servers when it was made) and no quota (it is charged, as the original was).
   * The candidate is written back like a FILTER's. Stripe 0 of a striped value is stored only
   * once every other stripe is (`STRIPES_MISSING`). With `rewrite`, an entry already held
   * whose bytes were found damaged (scrub) is written again.
   *
   * Resolves `stored`, `held` (already here), `rewritten`, or `superseded` (this server's
   * `lc` is newer, or the version was collected here: nothing to repair).
   *
   * With `pending`, the write is one still under way at the peers (a rebuilding server may
   * have signed a receipt for it before it lost its disk): `candidate` names it without
   * nonce or proof, so its certificate is checked instead of `valid(c)` (signatures and
   * authority, timeless like validity), nothing is written back, and the entry is stored
   * above `lc` as its STORE would have.
   */
  async storeRepaired(
    key: string,
    candidate: Candidate,
    entry: HistoryEntry,
    options: { readonly layout?: StripeLayout; readonly rewrite?: boolean; readonly pending?: boolean } = {},
  ): Promise<RepairOutcome> {
    const { ts, stripe, cc, cert, fragment } = entry;
    if (!timestampsEqual(ts, candidate.ts) || !certificatesEqual(cert, candidate.cert)) {
      throw new ProtocolError('INVALID_ARGUMENT', 'a repaired entry carries its write’s own timestamp and certificate');
    }
    if (options.pending) {
      const checked = await this.checkCertificate(key, ts, cert);
      if (!checked.ok) throw new ProtocolError(checked.code, checked.reason);
    } else if (!(await this.#validOrCount(key, candidate))) {
      throw new ProtocolError('UNAUTHENTICATED', 'the candidate to repair is not valid');
    }
    const layout = stripe === 0 ? entry.layout : options.layout;
    if (!entryCovered(this.crypto, cert, stripe, cc, layout)) {
      throw new ProtocolError('UNAUTHENTICATED', `the certificate does not cover stripe ${stripe}'s cross-checksum`);
    }
    if (
      fragment.length !== Math.ceil(cc.valueLength / (this.config.t + 1)) ||
      !(await fragmentMatches(this.crypto, cc, this.index, fragment))
    ) {
      throw new ProtocolError('INVALID_ARGUMENT', `fragment ${this.index} does not match the cross-checksum`);
    }
    return this.storage.withKey(key, async (record) => {
      if (!options.pending) await this.writeBack(record, candidate, key);
      const lc = await record.getLc();
      const collected = await record.getCollected();
      if ((lc && compareTimestamps(lc.ts, ts) > 0) || (collected && compareTimestamps(ts, collected) <= 0)) return 'superseded';
      let existing: EntryMeta | undefined;
      try {
        existing = await record.getEntryMeta(ts, stripe);
      } catch (err) {
        // Its metadata is what is damaged: the repaired entry, proven above, replaces it.
        if (!options.rewrite || !(err instanceof StorageError) || err.code !== 'STORAGE_CORRUPT') throw err;
        await record.restoreEntry(entry);
        return 'rewritten';
      }
      if (existing) {
        // A stripe ≥ 1 may be held under its stripe certificate: the same stripe if its
        // cross-checksum is the same.
        const same = stripe === 0 ? entryMetaEqual(existing, entry) : crossChecksumsEqual(existing.cc, cc);
        if (!same) throw new ProtocolError('CONFLICT', `stripe ${stripe} of history entry ${ts.num} of this key holds another write`);
        if (!options.rewrite) return 'held';
        await record.restoreEntry({ ...existing, fragment });
        return 'rewritten';
      }
      if (entry.layout) await this.checkStripesHeld(record, ts, entry.layout);
      const owner = this.admission.ownerOfKey(key);
      await record.putEntry(entry, { owner, bytes: historyEntryBytes(entry), quota: {}, at: this.#options.now() });
      await this.collect(record, key);
      return 'stored';
    });
  }

  /**
   * Whether this server holds the entry (stripe 0, so for a striped value every stripe) of
   * `key`'s write at `ts`: what a host asks before repairing a write it learned of.
   */
  holds(key: string, ts: Timestamp): Promise<boolean> {
    return this.storage.withKey(key, async (record) => (await record.getEntryMeta(ts, 0)) !== undefined);
  }

  /**
   * Scrub: reads stripe `stripe` of `key`'s entry at `ts` and checks its fragment against
   * its hash in the cross-checksum. `intact`, `absent` (collected meanwhile), or `damaged`
   * (it does not match, or storage cannot read it), with `lc` when the damaged entry is
   * `lc`'s (the host repairs it with `rewrite`). A damaged entry below `lc` is collected at
   * once, as garbage collection could have (`dropped`); one above `lc`, a write under way
   * whose COMPLETE has not come, stays `damaged` until it completes.
   */
  async scrub(key: string, ts: Timestamp, stripe: number): Promise<ScrubOutcome> {
    return this.storage.withKey(key, async (record) => {
      let entry: HistoryEntry | undefined;
      let unreadable = false;
      try {
        entry = await record.getEntry(ts, stripe);
      } catch (err) {
        if (!(err instanceof StorageError) || err.code !== 'STORAGE_CORRUPT') throw err;
        unreadable = true;
      }
      if (!entry && !unreadable) return { status: 'absent' };
      if (entry && (await fragmentMatches(this.crypto, entry.cc, this.index, entry.fragment))) return { status: 'intact' };
      const lc = await record.getLc();
      const order = compareTimestamps(ts, lc?.ts ?? TS0);
      if (order === 0) return { status: 'damaged', lc };
      if (order > 0) return { status: 'damaged' };
      await record.deleteEntry(ts);
      this.#options.onCollected?.(key, 1);
      return { status: 'dropped' };
    });
  }

  /** COMPLETE: `lc ← (ts, N, cert)` if valid and higher. */
  protected async onComplete(req: CompleteRequest): Promise<Reply> {
    if (!(await this.#validOrCount(req.key, req.candidate))) {
      throw new ProtocolError('UNAUTHENTICATED', 'candidate is not valid');
    }
    await this.storage.withKey(req.key, (record) => this.writeBack(record, req.candidate, req.key));
    return { type: 'COMPLETE_ACK', key: req.key, opId: req.opId, ts: req.candidate.ts };
  }

  /**
   * FILTER: pick the highest valid candidate `c_hv`, write it back to `lc` if higher (the
   * metadata write-back that makes reads linearizable), answer with `Hist[c_hv.ts]`.
   */
  protected async onFilter(req: FilterRequest): Promise<Reply> {
    if (req.pending) return this.onFilterPending(req);
    const chv = await this.highestValid(req.key, req.candidates);
    const ts = chv?.ts ?? TS0;
    const { entry, stripe, newer } = await this.storage.withKey(req.key, async (record) => {
      if (!chv) return { entry: undefined, stripe: 0, newer: undefined };
      await this.writeBack(record, chv, req.key);
      const found = await this.readStripe(record, ts, req.stripe, req.fragment, !req.withoutLayout);
      return { ...found, newer: found.entry ? undefined : await this.newerThanCollected(record, ts) };
    });
    const reply: FilterAck = { type: 'FILTER_ACK', key: req.key, opId: req.opId, ts, stripe, entry };
    return newer ? { ...reply, newer } : reply;
  }

  /**
   * FILTER for a write under way (`FilterRequest.pending`), from a server rebuilding it:
   * this server's entry of exactly that write (same timestamp and certificate), or none.
   * Nothing is checked or written back: the entry is what this server stored, checked then,
   * and the asker checks every fragment against the certificate itself. The answer names
   * the write's timestamp either way, so "not here" never reads as "older".
   */
  protected async onFilterPending(req: FilterRequest): Promise<Reply> {
    const wanted = req.candidates[0];
    if (req.candidates.length !== 1 || !wanted) throw new ProtocolError('INVALID_ARGUMENT', 'a FILTER for a pending write names one write');
    const { entry, stripe } = await this.storage.withKey(req.key, async (record) => {
      const head = await record.getEntryMeta(wanted.ts, 0);
      if (!head || !certificatesEqual(head.cert, wanted.cert)) return { entry: undefined, stripe: 0 };
      return this.readStripe(record, wanted.ts, req.stripe, req.fragment, !req.withoutLayout);
    });
    return { type: 'FILTER_ACK', key: req.key, opId: req.opId, ts: wanted.ts, stripe, entry };
  }

  /**
   * What FILTER answers for `ts`: stripe `wanted` (the last one when the value has fewer),
   * with the write certificate and (unless the reader has it) the layout from stripe 0.
   * Asked for metadata only, no fragment is read.
   */
  protected async readStripe(
    record: KeyRecord,
    ts: Timestamp,
    wanted: number,
    withFragment: boolean,
    withLayout = true,
  ): Promise<{ entry: FilterAck['entry']; stripe: number }> {
    const head = withFragment && wanted === 0 ? await record.getEntry(ts, 0) : await record.getEntryMeta(ts, 0);
    if (!head) return { entry: undefined, stripe: 0 };
    const layout = head.layout;
    const stripe = layout ? Math.min(wanted, layout.digests.length - 1) : 0;
    const part = stripe === 0 ? head : withFragment ? await record.getEntry(ts, stripe) : await record.getEntryMeta(ts, stripe);
    // A stripe missing under a stored stripe 0 means storage lost it: answer nothing rather than half.
    if (!part) return { entry: undefined, stripe };
    const fragment = withFragment ? (part as Partial<HistoryEntry>).fragment : undefined;
    const entry = { cc: part.cc, cert: head.cert, ...(fragment ? { fragment } : {}), ...(layout && withLayout ? { layout } : {}) };
    return { entry, stripe };
  }

  /**
   * LIST: the keys in range that have an `lc`, each with `lc` and its cross-checksum, up to
   * the limit and {@link MAX_LIST_REPLY_BYTES}, from at most `MAX_LIST_SCAN` key records
   * read (`resumeAfter` says where that bound stopped it). Every `lc` was valid when it was
   * set, so nothing is verified here; readers verify each one (see `listing.ts`).
   */
  protected async onList(req: ListRequest): Promise<Reply> {
    const { keys, more, resumeAfter } = await this.storage.list(req.key, req.after, req.limit);
    const entries: ListEntry[] = [];
    // The frame's header with the prefix, and the key to resume after, are under 4 KiB.
    let bytes = 4096;
    for (const k of keys) {
      const entry: ListEntry = k.layout
        ? { key: k.key, candidate: k.lc, cc: k.cc, layout: summarize(this.crypto, k.layout) }
        : { key: k.key, candidate: k.lc, cc: k.cc };
      bytes += listEntryBytes(entry);
      // Cut short by its size, the answer speaks for the keys up to its last entry only.
      if (bytes > MAX_LIST_REPLY_BYTES) return { type: 'LIST_ACK', key: req.key, opId: req.opId, entries, more: true };
      entries.push(entry);
    }
    return resumeAfter === undefined
      ? { type: 'LIST_ACK', key: req.key, opId: req.opId, entries, more }
      : { type: 'LIST_ACK', key: req.key, opId: req.opId, entries, more, resumeAfter };
  }

  /**
   * PENDING: the writes with their stripe 0 stored above `lc`, key by key, bounded like LIST
   * (`limit` keys, {@link MAX_PENDING_ENTRIES} writes, `MAX_LIST_REPLY_BYTES`, `MAX_LIST_SCAN`
   * records read). A rebuilding server asks this of its peers (`heal.ts`).
   */
  protected async onPending(req: PendingRequest): Promise<Reply> {
    const { keys, more, resumeAfter } = await this.storage.listPending(req.key, req.after, req.limit);
    const entries: PendingEntry[] = [];
    let bytes = 4096;
    for (const k of keys) {
      const listed = k.writes.map(({ ts, cc, cert, layout }): PendingEntry =>
        layout ? { key: k.key, ts, cc, cert, layout } : { key: k.key, ts, cc, cert },
      );
      bytes += listed.reduce((sum, e) => sum + pendingEntryBytes(e), 0);
      // Cut short, the answer speaks for the keys up to its last entry's; a key's writes are never split.
      if (bytes > MAX_LIST_REPLY_BYTES || entries.length + listed.length > MAX_PENDING_ENTRIES) {
        return { type: 'PENDING_ACK', key: req.key, opId: req.opId, entries, more: true };
      }
      entries.push(...listed);
    }
    return resumeAfter === undefined
      ? { type: 'PENDING_ACK', key: req.key, opId: req.opId, entries, more }
      : { type: 'PENDING_ACK', key: req.key, opId: req.opId, entries, more, resumeAfter };
  }

  /**
   * When `ts`'s entry was collected, `lc` (newer, and valid like every `lc`): what the
   * reader moves on to instead of waiting for an entry this server will never send.
   */
  protected async newerThanCollected(record: KeyRecord, ts: Timestamp): Promise<Candidate | undefined> {
    const collected = await record.getCollected();
    if (!collected || compareTimestamps(ts, collected) > 0) return undefined;
    return record.getLc();
  }

  /** `lc ← c` if `c.ts > lc.ts`, then collect what `c` supersedes; callers have checked `valid(c)`. */
  protected async writeBack(record: KeyRecord, c: Candidate, key: string): Promise<void> {
    const lc = await record.getLc();
    if (compareTimestamps(c.ts, lc?.ts ?? TS0) > 0) {
      await record.setLc(c);
      await this.collect(record, key);
      const missed = this.#options.onMissedEntry;
      if (missed && !(await record.index()).some((w) => w.head && timestampsEqual(w.ts, c.ts))) missed(key, c);
    }
  }

  /** `max({c ∈ C : valid(c)})`, or `undefined` for `c0`. */
  protected async highestValid(key: string, candidates: readonly Candidate[]): Promise<Candidate | undefined> {
    const sorted = [...candidates].sort((a, b) => compareTimestamps(b.ts, a.ts));
    for (const c of sorted) {
      if (await this.#validOrCount(key, c)) return c;
    }
    return undefined;
  }

  async #validOrCount(key: string, c: Candidate): Promise<boolean> {
    const ok = await this.valid(key, c);
    // c0 (ts 0) is what servers without a value report; readers relay it, it is not forged.
    if (!ok && c.ts.num !== 0) this.#options.onInvalidCandidate?.(key);
    return ok;
  }

  /** `valid(c)`: see `certificate.ts`. */
  protected valid(key: string, c: Candidate): Promise<boolean> {
    return this.verifier.valid(key, c, {
      certificate: (ts, cert) => this.checkCertificate(key, ts, cert),
      proof: (ts, cert, proof) => this.checkProof(key, ts, cert, proof),
    });
  }

  /** `n − t` valid receipts of distinct servers. */
  protected checkProof(key: string, ts: Timestamp, cert: WriteCertificate, proof: StoreProof): Promise<boolean> {
    return this.verifier.proofValid(key, ts, cert, proof);
  }

  /** Signatures and the signer's authority over `key`: the timeless half of every check. */
  protected checkCertificate(key: string, ts: Timestamp, cert: WriteCertificate): Promise<CertificateCheck> {
    return this.verifier.check(key, ts, cert);
  }

  /** Signatures and authority of a stripe certificate (stripe ≥ 1). */
  protected checkStripeCertificate(key: string, ts: Timestamp, stripe: number, cert: WriteCertificate): Promise<CertificateCheck> {
    return this.verifier.checkStripe(key, ts, stripe, cert);
  }

  /** `H(fr_i) = cc[i]`. */
  protected fragmentMatches(req: StoreRequest): Promise<boolean> {
    return fragmentMatches(this.crypto, req.cc, this.index, req.fragment);
  }

  /** The write policy's verdict on a STORE, by this server's clock. */
  protected refusal(key: string, cert: WriteCertificate): Refusal | undefined {
    return this.admission.refusal(key, cert, this.#options.now());
  }

  /**
   * A request of another key epoch is refused: its sender judges validity by other keys
   * than this server (`epochs.ts`), and no operation may mix the two.
   */
  protected checkEpoch(req: Request, epoch: number): void {
    const other = epochRefusal(req.epoch ?? 0, epoch, 'request');
    if (other) throw new ProtocolError(other.code, other.reason);
  }

  /** Bounds the wire decoder cannot know (cluster shape, code geometry). */
  protected checkShape(req: Request): void {
    const { t } = this.config;
    const bad = (m: string): never => {
      throw new ProtocolError('INVALID_ARGUMENT', m);
    };
    // A LIST's key is the prefix, and every key starts with the empty one.
    if (req.key.length === 0 && req.type !== 'LIST' && req.type !== 'PENDING') bad('the key must not be empty');
    switch (req.type) {
      case 'STORE':
        if (req.fragment.length !== Math.ceil(req.cc.valueLength / (t + 1))) bad('fragment length does not match the value length');
        if (req.cc.tombstone && req.cc.valueLength !== 0) bad('a tombstone has no value');
        if (req.stripe >= MAX_STRIPES) bad(`stripe ${req.stripe} is beyond the ${MAX_STRIPES} a value may have`);
        break;
      default:
        break;
    }
  }
}

/** What {@link Server.storeRepaired} did. */
export type RepairOutcome = 'stored' | 'held' | 'rewritten' | 'superseded';

/** What {@link Server.scrub} found. */
export type ScrubOutcome =
  { readonly status: 'intact' | 'absent' | 'dropped' } | { readonly status: 'damaged'; readonly lc?: Candidate | undefined };

/** Byte-identical history entries (a retried STORE). */
export function entriesEqual(a: HistoryEntry, b: HistoryEntry): boolean {
  return bytesEqual(a.fragment, b.fragment) && entryMetaEqual(a, b);
}

/** Identical history entries but for the fragment, which `cc` pins down once it was checked against it. */
export function entryMetaEqual(a: EntryMeta, b: EntryMeta): boolean {
  return (
    compareTimestamps(a.ts, b.ts) === 0 &&
    a.stripe === b.stripe &&
    crossChecksumsEqual(a.cc, b.cc) &&
    certificatesEqual(a.cert, b.cert) &&
    layoutsEqual(a.layout, b.layout)
  );
}

function crossChecksumsEqual(a: CrossChecksum, b: CrossChecksum): boolean {
  return (
    a.tombstone === b.tombstone &&
    a.valueLength === b.valueLength &&
    a.hashes.length === b.hashes.length &&
    a.hashes.every((h, i) => bytesEqual(h, b.hashes[i]!))
  );
}

/** The receipt field of a stripe's acknowledgement: stripes earn no receipt. */
const NO_RECEIPT = new Uint8Array(SIGNATURE_LENGTH);

function describeQuota(q: { bytes?: number; keys?: number }): string {
  const parts = [];
  if (q.bytes !== undefined) parts.push(`${q.bytes} bytes`);
  if (q.keys !== undefined) parts.push(`${q.keys} keys`);
  return parts.join(', ') || 'none';
}

function errorReply(req: { key: string; opId: number }, code: ProtocolErrorCode, message: string): ErrorReply {
  return { type: 'ERROR', key: req.key, opId: req.opId, code, message: message.slice(0, 200) };
}
