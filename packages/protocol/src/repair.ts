/**
 * Repair: how a server rebuilds its own fragment of a completed write from its peers —
 * after it missed the write's STORE, lost its disk, or found a fragment that no longer
 * matches its hash (scrub). Every fragment a server stores this way is proven, so a
 * Byzantine peer can slow a repair but never make a correct server store what the writer
 * did not write:
 *
 * - the candidate is valid (writer certificate and a store proof of `n − t` receipts).
 *   Validity is timeless, so repair needs no admission checks and works for writes whose
 *   grant has since expired or been revoked;
 * - the fragments come from a read pinned to that candidate (`ReadOperation`): each is
 *   checked against its hash in the cross-checksum the certificate signs, and `t + 1` of
 *   them are decoded;
 * - the decoded stripe is erasure-coded again and **all `n` fragment hashes** must equal
 *   the signed cross-checksum (`entryCovered`). A writer that encoded inconsistently (no two
 *   sets of `t + 1` fragments decode alike) is caught here and reported, never "repaired"
 *   into something else;
 * - the server stores the result under the write's own timestamp and certificate
 *   ({@link Server.storeRepaired}), never as a new version, and signs no receipt for it.
 *
 * A striped value is repaired stripe by stripe: stripe 0 first (it brings the layout), kept
 * until every other stripe is stored, and stored last, as a writer does.
 *
 * **Writes under way.** A server that lost its disk may have signed receipts for writes
 * that had not completed yet; once they complete, their store proofs count it as holding
 * them. So a rebuild also repairs the writes its peers hold above `lc` (PENDING), named by
 * {@link pendingCandidate}: the same read, decode and re-encode checks, with the writer's
 * certificate (signatures and authority) in place of `valid(c)`, which a write under way
 * cannot pass yet, and the entry stored above `lc` with nothing written back.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import { NONCE_LENGTH, type Candidate } from './candidate.js';
import type { CertificateVerifier, WriteCertificate } from './certificate.js';
import type { ClusterConfig } from './config.js';
import { computeCrossChecksum, type CrossChecksum } from './cross-checksum.js';
import type { CryptoProvider } from './crypto.js';
import { check, ProtocolError } from './errors.js';
import type { ClientOperation, HistoryEntry, Reply, Step } from './messages.js';
import { ReadOperation, type ReadResult } from './reader.js';
import { entryCovered, type StripeLayout } from './stripes.js';
import type { Timestamp } from './timestamp.js';

/** What a repair needs. */
export interface RepairOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly verifier: CertificateVerifier;
  /** The repairing server's index: the fragment it rebuilds. */
  readonly index: number;
  /** Called when a peer is caught answering what no correct server would. */
  readonly onEvidence?: (server: number, reason: string) => void;
  /**
   * The servers each FILTER round asks for their fragment (see `ReaderOptions.fragmentServers`).
   * Default: `t + 1` consecutive servers other than `index` from `(opId + round)`: the
   * repairing server holds no usable fragment of what it repairs, so asking it would only
   * cost a second request to the others.
   */
  readonly fragmentServers?: (opId: number, round: number) => readonly number[];
}

/** `t + 1` servers other than `index`, consecutive (skipping `index`) from `start mod (n − 1)`. */
export function repairFragmentServers(n: number, t: number, index: number, start: number): number[] {
  const others = Array.from({ length: n - 1 }, (_, i) => (i < index ? i : i + 1));
  const first = ((start % others.length) + others.length) % others.length;
  return Array.from({ length: t + 1 }, (_, k) => others[(first + k) % others.length]!);
}

/**
 * A write under way named as a candidate for a pending repair: its timestamp and certificate,
 * a zero nonce and no proof. Never valid (`valid(c)` fails on the nonce and the proof), so it
 * cannot be mistaken for a completed write anywhere a candidate is checked.
 */
export function pendingCandidate(ts: Timestamp, cert: WriteCertificate): Candidate {
  return { ts, nonce: new Uint8Array(NONCE_LENGTH), cert, proof: [] };
}

/** What a finished repair of one stripe gives: the entry to store, and the value's layout (a striped value's). */
export interface RepairResult {
  readonly entry: HistoryEntry;
  readonly layout: StripeLayout | undefined;
}

/**
 * Rebuilds server `options.index`'s entry for stripe `stripe` of the write `candidate` of
 * `key`. A host drives it like any client operation, sending to the other servers (asking
 * itself is harmless: it answers without the entry). Ends with `VALUE_CHANGED` when the
 * version was collected meanwhile (a newer write completed: repair that instead), with
 * `UNAUTHENTICATED` when the candidate is not valid, and with `INCONSISTENT_ENCODING` when
 * the writer's fragments do not re-encode to its own cross-checksum.
 */
export class RepairOperation implements ClientOperation<RepairResult> {
  readonly key: string;
  readonly opId: number;
  readonly #options: RepairOptions;
  readonly #candidate: Candidate;
  readonly #read: ReadOperation;
  readonly #pending: boolean;

  /**
   * `target.pending`: `candidate` is a write under way ({@link pendingCandidate}), checked by
   * its certificate, not `valid(c)`.
   */
  constructor(
    options: RepairOptions,
    key: string,
    candidate: Candidate,
    opId: number,
    target: { stripe?: number; layout?: StripeLayout; pending?: boolean } = {},
  ) {
    check(
      Number.isInteger(options.index) && options.index >= 0 && options.index < options.config.n,
      'index must be a server of the cluster',
    );
    this.key = key;
    this.opId = opId;
    this.#options = options;
    this.#candidate = candidate;
    this.#pending = target.pending ?? false;
    const { config, crypto, codec, verifier, onEvidence, index } = options;
    const fragmentServers =
      options.fragmentServers ?? ((op: number, round: number) => repairFragmentServers(config.n, config.t, index, op + round));
    this.#read = new ReadOperation({ config, crypto, codec, verifier, fragmentServers, ...(onEvidence ? { onEvidence } : {}) }, key, opId, {
      pinned: candidate,
      ...(target.stripe !== undefined ? { stripe: target.stripe } : {}),
      ...(target.layout ? { layout: target.layout } : {}),
      ...(this.#pending ? { pending: true } : {}),
    });
  }

  async start(): Promise<Step<RepairResult>> {
    if (this.#pending) {
      const { ts, cert } = this.#candidate;
      const checked = await this.#options.verifier.check(this.key, ts, cert);
      if (!checked.ok) return { error: new ProtocolError(checked.code, `the write under way to repair: ${checked.reason}`) };
    } else if (!(await this.#options.verifier.valid(this.key, this.#candidate))) {
      return { error: new ProtocolError('UNAUTHENTICATED', 'the candidate to repair is not valid') };
    }
    return this.#map(await this.#read.start());
  }

  async onReply(from: number, reply: Reply): Promise<Step<RepairResult>> {
    return this.#map(await this.#read.onReply(from, reply));
  }

  /** The host's fragment timer fired (see `ReadOperation.stalled`): more servers are asked; it never finishes the read. */
  stalled(): Step<RepairResult> {
    const { send, supplement } = this.#read.stalled();
    return { ...(send ? { send } : {}), ...(supplement ? { supplement } : {}) };
  }

  /** Whether the host should arm its fragment timer (see `ReadOperation.awaitingFragments`). */
  get awaitingFragments(): boolean {
    return this.#read.awaitingFragments;
  }

  /**
   * Whether the value decoded, erasure-coded again, gives the cross-checksum `cc` the
   * write's certificate signs (through `layout` for a stripe ≥ 1). All `n` hashes, not only
   * the fragments read: a writer whose fragments disagree with one another is found here,
   * whichever `t + 1` of them were read. Protected so the simulator's mutants can skip it.
   */
  protected encodingConsistent(cert: WriteCertificate, stripe: number, cc: CrossChecksum, layout: StripeLayout | undefined): boolean {
    return entryCovered(this.#options.crypto, cert, stripe, cc, layout);
  }

  async #map(step: Step<ReadResult>): Promise<Step<RepairResult>> {
    if (!step.result) {
      const { send, supplement, error } = step;
      return { ...(send ? { send } : {}), ...(supplement ? { supplement } : {}), ...(error ? { error } : {}) };
    }
    const { value, stripe = 0, layout, cert } = step.result;
    check(cert !== undefined, 'a pinned read returns its certificate');
    const { crypto, codec, index } = this.#options;
    const tombstone = this.#candidate.cert.tombstone;
    const bytes = value ?? new Uint8Array(0);
    const fragments = codec.encode(bytes);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, tombstone);
    if (!this.encodingConsistent(cert, stripe, cc, layout)) {
      return {
        error: new ProtocolError(
          'INCONSISTENT_ENCODING',
          `the write's fragments of stripe ${stripe} decode to a value whose encoding its certificate does not sign: the writer encoded inconsistently`,
        ),
      };
    }
    const entry: HistoryEntry = {
      ts: this.#candidate.ts,
      stripe,
      fragment: fragments[index]!,
      cc,
      cert,
      ...(layout && stripe === 0 ? { layout } : {}),
    };
    return { result: { entry, layout } };
  }
}
