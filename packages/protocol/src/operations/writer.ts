/**
 * The writer of PowerStore (M-PoWerStore's Algorithm 4 with signed write certificates):
 * CLOCK → STORE → COMPLETE, three rounds, each sent to all `n` servers and finished after
 * `n − t` acknowledgements.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import { NONCE_LENGTH, type Candidate } from '../auth/candidate.js';
import {
  authorityProblem,
  certificateBatcher,
  CertificateVerifier,
  signCertificate,
  storeProof,
  type ValueEnvelope,
  type WriteCertificate,
} from '../auth/certificate.js';
import { MAX_VALUE_LENGTH, quorum, type ClusterConfig } from '../core/config.js';
import { ackReceipt, type ReceiptSignature } from '../auth/receipt-batch.js';
import type { BatchedSignature } from '../core/signature-batch.js';
import { computeCrossChecksum, crossChecksumDigest, type CrossChecksum } from '../core/cross-checksum.js';
import { nonceHash, type CryptoProvider, type Signer } from '../core/crypto.js';
import { currentEpoch, withEpoch } from '../auth/epochs.js';
import { check, ProtocolError } from '../core/errors.js';
import { layoutDigest, MAX_STRIPE_SIZE, MAX_STRIPES, MIN_STRIPE_SIZE, type StripeLayout } from '../core/stripes.js';
import { mayGrant, type ClusterIdentity, type Grant } from '../auth/grant.js';
import { writerTagOf } from '../auth/identity.js';
import type { ClientOperation, Outgoing, Reply, Step } from '../wire/messages.js';
import type { RandomBytes } from '../core/random.js';
import { Rejections } from './rejections.js';
import { whoDidWhat } from './server-names.js';
import { INSTANCE_ID_LENGTH, TS0, compareTimestamps, makeWriterId, timestampsEqual, type Timestamp } from '../auth/timestamp.js';
import { jumpTarget, writerRank, type WriterRank } from '../auth/window.js';

/** Keys whose abandoned writes a session remembers (a timed-out write is rare; the oldest is forgotten first). */
const ABANDONED_KEYS = 4096;

/** How a writer session is made. */
export interface WriterSessionOptions {
  readonly crypto: CryptoProvider;
  readonly cluster: ClusterIdentity;
  /** The identity that signs. */
  readonly signer: Signer;
  /** 16 random bytes, drawn once per client instance: the second half of its writer id. */
  readonly instance: Uint8Array;
  /** Grants this identity holds, for keys outside its own namespace. */
  readonly grants?: readonly Grant[];
  /**
   * Signs the certificates of writes that sign in the same turn under one root
   * (`signature-batch.ts`): `defer` runs its callback after the current turn (Node:
   * `setImmediate`). Without it, each certificate is signed on its own.
   */
  readonly certificateBatching?: (flush: () => void) => void;
  /** Called for every signature made for certificates, with how many it covers (with `certificateBatching`). */
  readonly onCertificatesSigned?: (certificates: number) => void;
}

/**
 * One writer instance (one client `Store`): its identity, writer id and grants, and the
 * rule that keeps its writes of one key on distinct timestamps. Two writes of one key
 * running at once may read the same clock; the session remembers the highest number it
 * gave the key while any of its writes of that key is in flight, and never gives it again.
 */
export class WriterSession {
  readonly crypto: CryptoProvider;
  readonly cluster: ClusterIdentity;
  readonly signer: Signer;
  /** `writerTag(signer) | instance`. */
  readonly writerId: Uint8Array;
  /** Shared by this session's operations, so repeated candidates are verified once. */
  readonly verifier: CertificateVerifier;
  readonly #grants: readonly Grant[];
  readonly #inFlight = new Map<string, { ops: number; highest: number; basis?: Candidate }>();
  /**
   * The highest number given to an abandoned write, per key (most recent keys only): its
   * STORE may sit at some servers, so reusing its timestamp would meet `CONFLICT` there.
   * With the basis that number was given above.
   */
  readonly #abandoned = new Map<string, { num: number; basis?: Candidate }>();

  constructor(options: WriterSessionOptions) {
    check(options.instance.length === INSTANCE_ID_LENGTH, `instance must be ${INSTANCE_ID_LENGTH} bytes`);
    this.crypto = options.crypto;
    this.cluster = options.cluster;
    this.signer = options.signer;
    this.writerId = makeWriterId(writerTagOf(options.crypto, options.signer.publicKey), options.instance);
    this.verifier = new CertificateVerifier(options.crypto, options.cluster);
    this.#grants = options.grants ?? [];
    // What this session signs comes back in CLOCK: it is remembered as verified.
    const signed = (message: Uint8Array, signature: Uint8Array) => this.verifier.signed(options.signer.publicKey, message, signature);
    const batcher = options.certificateBatching
      ? certificateBatcher(options.crypto, options.signer, options.cluster.id, options.certificateBatching, (message, signature, n) => {
          signed(message, signature);
          options.onCertificatesSigned?.(n);
        })
      : undefined;
    this.signCertificate = batcher
      ? (message) => batcher.sign(message)
      : async (message) => {
          const signature = await options.signer.sign(message);
          signed(message, signature);
          return { signature };
        };
  }

  /**
   * Signs a certificate message: alone, or in a batch with others of this session
   * (`certificateBatching`); either way remembered as verified by {@link verifier}.
   */
  readonly signCertificate: (message: Uint8Array) => Promise<BatchedSignature>;

  /**
   * The grant to write `key` with at time `now` (`undefined` when the identity needs none:
   * its own namespace, or it is the admin). Throws `NOT_AUTHORIZED` when no grant covers
   * the key, `GRANT_EXPIRED` when only expired ones do: before any traffic.
   */
  authorityFor(key: string, now: number): Grant | undefined {
    const { crypto, cluster, signer } = this;
    const probe = { num: 1, writerId: this.writerId };
    if (!authorityProblem(crypto, cluster, key, probe, signer.publicKey, undefined)) return undefined;
    const covering = this.#grants
      .filter((g) => !authorityProblem(crypto, cluster, key, probe, signer.publicKey, g) && mayGrant(crypto, cluster, g.issuer, g.prefix))
      .sort((a, b) => b.prefix.length - a.prefix.length || b.expiresAt - a.expiresAt);
    const live = covering.find((g) => g.expiresAt > now);
    if (live) return live;
    if (covering.length > 0) {
      throw new ProtocolError(
        'GRANT_EXPIRED',
        `every grant covering ${JSON.stringify(key)} has expired (the latest at ${new Date(covering[0]!.expiresAt).toISOString()})`,
      );
    }
    throw new ProtocolError(
      'NOT_AUTHORIZED',
      `this identity may not write ${JSON.stringify(key)}: ${authorityProblem(crypto, cluster, key, probe, signer.publicKey, undefined)}`,
    );
  }

  /** A write of `key` starts. */
  begin(key: string): void {
    const e = this.#inFlight.get(key);
    if (e) e.ops++;
    else this.#inFlight.set(key, { ops: 1, highest: 0 });
  }

  /**
   * The number for a write of `key` whose CLOCK round saw `clockNum`: above it, above every
   * number given to a write of `key` still in flight, and above any given to an abandoned one.
   */
  assign(key: string, clockNum: number): number {
    const e = this.#inFlight.get(key);
    check(e !== undefined, 'assign() before begin()');
    e.highest = Math.max(clockNum, e.highest, this.#abandoned.get(key)?.num ?? 0) + 1;
    return e.highest;
  }

  /**
   * The basis a write of `key` whose CLOCK round adopted `basis` must send with its STORE:
   * the highest valid candidate any of this session's writes of `key` in flight (or
   * abandoned) was based on. {@link assign} may put a write above a session sibling whose
   * CLOCK saw a higher `lc`; without that sibling's basis, a server that has not yet seen
   * it would find the number beyond the writer's window (`window.ts`).
   */
  basisFor(key: string, basis: Candidate | undefined): Candidate | undefined {
    const e = this.#inFlight.get(key);
    check(e !== undefined, 'basisFor() before begin()');
    e.basis = higherCandidate(higherCandidate(e.basis, basis), this.#abandoned.get(key)?.basis);
    return e.basis;
  }

  /**
   * A write of `key` finished (`completed`), failed or was abandoned. A write that did not
   * complete may have left its STORE behind; its number is remembered.
   */
  end(key: string, completed: boolean, num?: number): void {
    const e = this.#inFlight.get(key);
    if (!completed && num !== undefined) {
      const before = this.#abandoned.get(key);
      this.#abandoned.delete(key);
      const basis = higherCandidate(before?.basis, e?.basis);
      this.#abandoned.set(key, { num: Math.max(num, before?.num ?? 0), ...(basis ? { basis } : {}) });
      if (this.#abandoned.size > ABANDONED_KEYS) this.#abandoned.delete(this.#abandoned.keys().next().value!);
    }
    if (!e) return;
    if (--e.ops === 0) this.#inFlight.delete(key);
  }
}

/** The one of `a` and `b` with the higher timestamp (either, when one is missing). */
function higherCandidate(a: Candidate | undefined, b: Candidate | undefined): Candidate | undefined {
  return !a || (b && compareTimestamps(b.ts, a.ts) > 0) ? b : a;
}

/** What a write needs. */
export interface WriterOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  /** Injected so the WebAssembly codec and the reference one are interchangeable. */
  readonly codec: ErasureCodec;
  readonly random: RandomBytes;
  readonly session: WriterSession;
  /** The time in ms since the epoch, to choose a grant that has not expired. */
  readonly now: () => number;
  /** Called when a server is caught answering what no correct server would. */
  readonly onEvidence?: (server: number, reason: string) => void;
}

/** What a finished write reports. */
export interface WriteResult {
  /** The timestamp the write took. */
  readonly ts: Timestamp;
  /**
   * Communication rounds used: 3, plus 2 (CLOCK and STORE again) each time `t + 1`
   * servers answered that newer writes had superseded the timestamp taken.
   */
  readonly rounds: number;
}

/**
 * The stripes of a value too large for memory, pulled one at a time (see `stripes.ts`):
 * every stripe but the last is exactly `stripeSize` bytes. A value that turns out to fit
 * one stripe is written as a plain value.
 */
export interface StripeSource {
  readonly stripeSize: number;
  /** The next stripe, or `undefined` after the last. */
  next(): Promise<Uint8Array | undefined>;
}

/**
 * What to write: bytes, a tombstone (delete), or stripes from a source; `envelope` names
 * the client envelope the bytes are in, for the write certificate to sign.
 */
export type WriteValue =
  | { readonly kind: 'value'; readonly value: Uint8Array; readonly envelope?: ValueEnvelope }
  | { readonly kind: 'tombstone' }
  | { readonly kind: 'stripes'; readonly source: StripeSource; readonly envelope?: ValueEnvelope };

type Phase = 'idle' | 'clock' | 'stripes' | 'store' | 'complete' | 'done';

/** A striped write in progress: what is kept between stripe rounds. */
interface Striping {
  readonly ts: Timestamp;
  readonly nonce: Uint8Array;
  /** Stripe 0, stored last (with the write certificate), so kept until then. */
  readonly first: Uint8Array;
  /** Cross-checksum digests of the stripes sent so far (index 0 filled at the end). */
  readonly digests: Uint8Array[];
  /** Bytes of the stripes pulled so far. */
  length: number;
  /** The stripe in flight. */
  current: number;
}

/**
 * One WRITE (or delete) of one key. The host sends what `start` and `onReply` return and
 * must await each call before the next (they hash and sign asynchronously). A host that
 * gives up on an unfinished write calls {@link abandon}.
 */
export class WriteOperation implements ClientOperation<WriteResult> {
  protected readonly options: WriterOptions;
  readonly key: string;
  readonly opId: number;
  readonly #value: WriteValue;
  readonly #grant: Grant | undefined;
  #phase: Phase = 'idle';
  readonly #acked = new Set<number>();
  /** Valid STORE receipts, by server. */
  readonly #receipts = new Map<number, ReceiptSignature>();
  /** Servers whose STORE acknowledgement carried a receipt that does not verify. */
  readonly #badReceipts = new Set<number>();
  readonly #rejections = new Rejections();
  /** Highest valid timestamp seen in CLOCK, and its candidate: the basis of this write's timestamp. */
  #highest: Timestamp = TS0;
  #basis: Candidate | undefined;
  /** What each server answered in CLOCK: its `lc`'s timestamp (servers answering the basis get no copy of it). */
  readonly #clockAnswers = new Map<number, Timestamp>();
  /** The highest pending number a CLOCK answer reported (unverified; clamped by {@link jumpTarget}). */
  #pending = 0;
  readonly #rank: WriterRank;
  /** The key epoch of the session's cluster file: signed into the certificate, named by every request. */
  readonly #epoch: number;
  #candidate: Candidate | undefined;
  #striping: Striping | undefined;
  /** Stripes pulled from a striped write's source, and the index of the one that was short (so must be the last). */
  #pulled = 0;
  #shortStripe: number | undefined;
  /** Bytes of the value that `n − t` servers hold (stripes acknowledged; the whole value once stripe 0 is). */
  #bytesStored = 0;
  /** Bytes in the whole value, once its last STORE round is sent. */
  #total = 0;
  /** Servers that refused this STORE round as `SUPERSEDED`. */
  readonly #superseded = new Set<number>();
  #restarts = 0;

  /** Throws `NOT_AUTHORIZED` or `GRANT_EXPIRED` when the session cannot write `key`. */
  constructor(options: WriterOptions, key: string, value: WriteValue, opId: number) {
    const { config, codec } = options;
    check(codec.n === config.n && codec.k === config.t + 1, `codec must be (k = t + 1, n = 3t + 1), got (${codec.k}, ${codec.n})`);
    check(value.kind !== 'value' || value.value.length <= MAX_VALUE_LENGTH, `values are limited to ${MAX_VALUE_LENGTH} bytes`);
    if (value.kind === 'stripes') {
      const size = value.source.stripeSize;
      check(
        Number.isSafeInteger(size) && size >= MIN_STRIPE_SIZE && size <= MAX_STRIPE_SIZE,
        `stripe size must be in ${MIN_STRIPE_SIZE}..${MAX_STRIPE_SIZE}, got ${size}`,
      );
    }
    this.options = options;
    this.key = key;
    this.opId = opId;
    this.#value = value;
    this.#grant = options.session.authorityFor(key, options.now());
    this.#rank = writerRank({ signer: options.session.signer.publicKey, grant: this.#grant }, options.session.cluster.admin);
    this.#epoch = currentEpoch(options.session.cluster);
  }

  /** The round in progress (for hosts that report progress, and for the simulator). */
  get phase(): Phase {
    return this.#phase;
  }

  /** Bytes of the value acknowledged by `n − t` servers so far, for progress. */
  get bytesStored(): number {
    return this.#bytesStored;
  }

  async start(): Promise<Step<WriteResult>> {
    check(this.#phase === 'idle', 'operation already started');
    this.#phase = 'clock';
    this.options.session.begin(this.key);
    return { send: this.#toAll({ type: 'CLOCK', key: this.key, opId: this.opId }) };
  }

  /** The host gave up (timeout, abort): frees the session's bookkeeping for this write. */
  abandon(): void {
    if (this.#phase === 'done' || this.#phase === 'idle') return;
    this.#phase = 'done';
    this.options.session.end(this.key, false, (this.#candidate ?? this.#striping)?.ts.num);
  }

  async onReply(from: number, reply: Reply): Promise<Step<WriteResult>> {
    const { config } = this.options;
    if (reply.key !== this.key || reply.opId !== this.opId || from < 0 || from >= config.n) return {};
    if (this.#phase === 'idle' || this.#phase === 'done' || this.#acked.has(from)) return {};
    if (reply.type === 'ERROR' && reply.code === 'SUPERSEDED' && this.#value.kind !== 'stripes') {
      // Not a failure: the timestamp was overtaken by writes that completed meanwhile.
      if (this.#phase !== 'store') return {};
      this.#superseded.add(from);
      return this.#storeStalled() ? this.#restart() : {};
    }
    if (reply.type === 'ERROR') {
      const failure = this.#rejections.add(config, from, reply);
      if (!failure) return {};
      this.abandon();
      return { error: failure };
    }
    switch (this.#phase) {
      case 'clock':
        if (reply.type !== 'CLOCK_ACK') return {};
        this.#acked.add(from);
        this.#clockAnswers.set(from, reply.candidate?.ts ?? TS0);
        this.#pending = Math.max(this.#pending, reply.pending);
        if (reply.candidate && compareTimestamps(reply.candidate.ts, this.#highest) > 0) {
          if (await this.acceptClockCandidate(reply.candidate)) {
            this.#highest = reply.candidate.ts;
            this.#basis = reply.candidate;
          } else this.options.onEvidence?.(from, 'sent a CLOCK candidate that is not valid');
        }
        if (this.#acked.size < quorum(config)) return {};
        return this.#value.kind === 'stripes' ? this.#beginStripes(this.#value.source) : this.#store();
      case 'stripes': {
        if (reply.type !== 'STORE_ACK' || reply.stripe !== this.#striping!.current || !timestampsEqual(reply.ts, this.#striping!.ts))
          return {};
        this.#acked.add(from);
        return this.#acked.size >= quorum(config) ? this.#nextStripe() : {};
      }
      case 'store': {
        if (reply.type !== 'STORE_ACK' || reply.stripe !== 0 || !this.#isOurs(reply.ts)) return {};
        this.#acked.add(from);
        const { ts, cert } = this.#candidate!;
        const receipt = ackReceipt(reply);
        if (await this.options.session.verifier.receiptValid(this.key, ts, cert, from, receipt)) this.#receipts.set(from, receipt);
        else {
          this.#badReceipts.add(from);
          this.options.onEvidence?.(from, 'acknowledged a STORE with a receipt that does not verify');
        }
        if (this.#receipts.size >= quorum(config)) return this.#complete();
        return this.#storeStalled() ? this.#restart() : {};
      }
      case 'complete':
        if (reply.type !== 'COMPLETE_ACK' || !this.#isOurs(reply.ts)) return {};
        this.#acked.add(from);
        if (this.#acked.size < quorum(config)) return {};
        this.#phase = 'done';
        this.options.session.end(this.key, true);
        this.#bytesStored = this.#total;
        return { result: { ts: this.#candidate!.ts, rounds: 3 + 2 * this.#restarts } };
      default:
        return {};
    }
  }

  /**
   * Why the write has not finished while it waits in STORE, server by server (1-based),
   * for the error of a write that times out although servers answered: "the STORE needs 3
   * receipts that verify: s1, s3 sent one; s2 sent one that fails verification". Who did
   * not answer at all the host says itself; `undefined` outside STORE, or when no answer
   * failed verification.
   */
  waiting(): string | undefined {
    if (this.#phase !== 'store' || this.#badReceipts.size === 0) return undefined;
    const did = [
      ...[...this.#receipts.keys()].map((i) => [i, 'sent one'] as const),
      ...[...this.#badReceipts].map((i) => [i, 'sent one that fails verification'] as const),
    ];
    return `the STORE needs ${quorum(this.options.config)} receipts that verify: ${whoDidWhat(did)}`;
  }

  /** Adopt a higher timestamp only if its candidate is valid, so a Byzantine server cannot make writers skip timestamps. */
  protected acceptClockCandidate(c: Candidate): Promise<boolean> {
    return this.options.session.verifier.valid(this.key, c);
  }

  /**
   * The new timestamp's number: above the highest valid one seen, above the pending writes
   * this writer's rank jumps over (`window.ts`), and above this session's writes of the key
   * in flight.
   */
  protected nextNum(highest: Timestamp, pending: number): number {
    return this.options.session.assign(this.key, this.jumpTarget(highest, pending));
  }

  /** What this writer's rank must take its number above (`window.ts`). */
  protected jumpTarget(highest: Timestamp, pending: number): number {
    return jumpTarget(highest.num, pending, this.#rank);
  }

  get #source(): StripeSource {
    check(this.#value.kind === 'stripes', 'not a striped write');
    return this.#value.source;
  }

  /** A fresh timestamp above every valid one CLOCK saw, and a fresh nonce. */
  #fresh(): { ts: Timestamp; nonce: Uint8Array } {
    const ts: Timestamp = { num: this.nextNum(this.#highest, this.#pending), writerId: this.options.session.writerId };
    this.#basis = this.options.session.basisFor(this.key, this.#basis);
    const nonce = this.options.random(NONCE_LENGTH);
    check(nonce.length === NONCE_LENGTH, `random must return ${NONCE_LENGTH} bytes`);
    return { ts, nonce };
  }

  /**
   * A striped write after CLOCK: stripe 0 is kept for the end; if there is no stripe 1,
   * the value fits one stripe and is written as a plain value.
   */
  async #beginStripes(source: StripeSource): Promise<Step<WriteResult>> {
    const first = await this.#pull(source);
    const second = first ? await this.#pull(source) : undefined;
    if (!first || !second) return this.#store(first ?? new Uint8Array(0));
    const { ts, nonce } = this.#fresh();
    this.#striping = { ts, nonce, first, digests: [new Uint8Array(0)], length: first.length, current: 0 };
    return this.#sendStripe(1, second);
  }

  /** The next stripe of `source`; only the last may be shorter than the stripe size. */
  async #pull(source: StripeSource): Promise<Uint8Array | undefined> {
    const stripe = await source.next();
    if (stripe === undefined) return undefined;
    if (this.#shortStripe !== undefined) {
      throw new ProtocolError('INVALID_ARGUMENT', `stripe ${this.#shortStripe} is not ${source.stripeSize} bytes and is not the last`);
    }
    check(stripe.length <= source.stripeSize, `a stripe of ${stripe.length} bytes is over the stripe size of ${source.stripeSize}`);
    if (stripe.length < source.stripeSize) this.#shortStripe = this.#pulled;
    this.#pulled++;
    return stripe;
  }

  /** Stores stripe `index` ≥ 1 under its stripe certificate. */
  async #sendStripe(index: number, bytes: Uint8Array): Promise<Step<WriteResult>> {
    const { crypto, codec, session } = this.options;
    const striping = this.#striping!;
    check(index < MAX_STRIPES, `a value has at most ${MAX_STRIPES} stripes`);
    const fragments = codec.encode(bytes);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
    const ccDigest = crossChecksumDigest(crypto, cc);
    const cert = await signCertificate(
      crypto,
      session.cluster.id,
      session.signer,
      {
        key: this.key,
        ts: striping.ts,
        nonceHash: nonceHash(crypto, striping.nonce),
        ccDigest,
        tombstone: false,
        grant: this.#grant,
        stripe: index,
        epoch: this.#epoch,
      },
      session.signCertificate,
    );
    striping.digests[index] = ccDigest;
    striping.current = index;
    striping.length += bytes.length;
    this.#nextRound('stripes');
    return { send: this.#stores(striping.ts, index, fragments, cc, cert, undefined) };
  }

  /**
   * One STORE per server, each with its own fragment, and the basis for servers whose
   * CLOCK answer was not the basis (lower, or none): they write it back before checking the
   * timestamp window.
   */
  #stores(
    ts: Timestamp,
    stripe: number,
    fragments: readonly Uint8Array[],
    cc: CrossChecksum,
    cert: WriteCertificate,
    layout: StripeLayout | undefined,
  ): Outgoing[] {
    const basis = this.#basis;
    return Array.from({ length: this.options.config.n }, (_, i) => {
      const answered = this.#clockAnswers.get(i);
      const needsBasis = basis !== undefined && (answered === undefined || !timestampsEqual(answered, basis.ts));
      const message = {
        type: 'STORE',
        key: this.key,
        opId: this.opId,
        ts,
        stripe,
        fragment: fragments[i]!,
        cc,
        cert,
        ...(layout ? { layout } : {}),
        ...(needsBasis ? { basis } : {}),
        ...(this.#epoch ? { epoch: this.#epoch } : {}),
      } as const;
      return { to: i, message };
    });
  }

  /** Stripe `current` is on `n − t` servers: send the next, or stripe 0 with the layout after the last. */
  async #nextStripe(): Promise<Step<WriteResult>> {
    const striping = this.#striping!;
    this.#bytesStored = striping.length - striping.first.length;
    const next = await this.#pull(this.#source);
    if (next) return this.#sendStripe(striping.current + 1, next);
    return this.#store(striping.first);
  }

  async #store(bytes: Uint8Array = this.#value.kind === 'value' ? this.#value.value : new Uint8Array(0)): Promise<Step<WriteResult>> {
    const { crypto, codec, session } = this.options;
    const striping = this.#striping;
    const { ts, nonce } = striping ?? this.#fresh();
    this.#total = striping ? striping.length : bytes.length;
    const fragments = codec.encode(bytes);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, this.#value.kind === 'tombstone');
    let layout: StripeLayout | undefined;
    if (striping) {
      striping.digests[0] = crossChecksumDigest(crypto, cc);
      layout = { valueLength: striping.length, stripeSize: this.#source.stripeSize, digests: striping.digests };
    }
    const cert = await signCertificate(
      crypto,
      session.cluster.id,
      session.signer,
      {
        key: this.key,
        ts,
        nonceHash: nonceHash(crypto, nonce),
        ccDigest: layout ? layoutDigest(crypto, layout) : crossChecksumDigest(crypto, cc),
        tombstone: cc.tombstone,
        ...(this.#value.kind !== 'tombstone' && this.#value.envelope ? { envelope: this.#value.envelope } : {}),
        grant: this.#grant,
        epoch: this.#epoch,
      },
      session.signCertificate,
    );
    this.#candidate = { ts, nonce, cert, proof: [] };
    this.#nextRound('store');
    return { send: this.#stores(ts, 0, fragments, cc, cert, layout) };
  }

  /**
   * Whether to take a fresh timestamp: some server refused this one as `SUPERSEDED` and
   * `n − t` receipts can no longer be counted on — `t + 1` such refusals, or `n − t`
   * answers in without a quorum of receipts (the missing server may be a silent
   * Byzantine one, so waiting for it could be forever).
   */
  #storeStalled(): boolean {
    const { config } = this.options;
    if (this.#superseded.size === 0) return false;
    if (this.#superseded.size >= config.t + 1) return true;
    return this.#acked.size + this.#superseded.size >= quorum(config);
  }

  #restart(): Step<WriteResult> {
    this.#restarts++;
    this.#receipts.clear();
    this.#badReceipts.clear();
    this.#superseded.clear();
    this.#clockAnswers.clear();
    this.#pending = 0;
    this.#nextRound('clock');
    return { send: this.#toAll({ type: 'CLOCK', key: this.key, opId: this.opId }) };
  }

  #complete(): Step<WriteResult> {
    const proof = storeProof(this.#receipts);
    this.#candidate = { ...this.#candidate!, proof };
    this.#nextRound('complete');
    return { send: this.#toAll({ type: 'COMPLETE', key: this.key, opId: this.opId, candidate: this.#candidate }) };
  }

  #nextRound(phase: Phase): void {
    this.#phase = phase;
    this.#acked.clear();
    this.#rejections.clear();
  }

  #isOurs(ts: Timestamp): boolean {
    return timestampsEqual(ts, this.#candidate!.ts);
  }

  #toAll(request: Outgoing['message']): Outgoing[] {
    const message = withEpoch(request, this.#epoch);
    return Array.from({ length: this.options.config.n }, (_, to) => ({ to, message }));
  }
}
