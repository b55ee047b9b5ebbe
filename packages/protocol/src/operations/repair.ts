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
import { NONCE_LENGTH, type Candidate } from '../auth/candidate.js';
import type { CertificateVerifier, WriteCertificate } from '../auth/certificate.js';
import type { ClusterConfig } from '../core/config.js';
import { computeCrossChecksum, type CrossChecksum } from '../core/cross-checksum.js';
import type { CryptoProvider } from '../core/crypto.js';
import { check, ProtocolError } from '../core/errors.js';
import type { ClientOperation, HistoryEntry, Reply, Step } from '../wire/messages.js';
import { ReadOperation, type ReadResult } from './reader.js';
import { entryCovered, type StripeLayout } from '../core/stripes.js';
import type { Timestamp } from '../auth/timestamp.js';

/**
 * Scratch buffers for the value a repair decodes and the parity it re-encodes: a repair
 * needs both only until the `n` hashes are checked, and keeps only its own fragment (a
 * copy). Allocating them afresh for every stripe (megabytes each) was most of what a
 * rebuilding server allocated outside its heap, and every ~64 MiB of that makes V8 run a
 * full garbage collection. Reused, they cost nothing after the first few stripes. Module-
 * wide (a host runs several repairs at once, each taking its own buffers), bounded, and
 * emptied once repairs stop for a while.
 */
class ScratchPool {
  /** Buffers larger than this are allocated and dropped as before. */
  static readonly MAX_BUFFER = 16 * 1024 * 1024;
  /** Free buffers kept (the largest ones). */
  static readonly MAX_FREE = 8;
  /** The free buffers are dropped after this long without a repair. */
  static readonly IDLE_MS = 10_000;
  readonly #free: Uint8Array[] = [];
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** A buffer of at least `size` bytes, its contents unspecified (every user overwrites what it reads). */
  take(size: number): Uint8Array {
    let best = -1;
    for (let i = 0; i < this.#free.length; i++) {
      const len = this.#free[i]!.length;
      if (len >= size && (best < 0 || len < this.#free[best]!.length)) best = i;
    }
    if (best >= 0) return this.#free.splice(best, 1)[0]!;
    // Rounded up to 1 MiB, so a buffer serves values of other sizes later.
    return new Uint8Array(size <= ScratchPool.MAX_BUFFER ? Math.ceil(size / 2 ** 20) * 2 ** 20 : size);
  }

  /** Takes `buffer` back: nothing may use it (or a view of it) afterwards. */
  give(buffer: Uint8Array): void {
    if (buffer.length > ScratchPool.MAX_BUFFER || buffer.length === 0) return;
    this.#free.push(buffer);
    if (this.#free.length > ScratchPool.MAX_FREE) {
      let smallest = 0;
      for (let i = 1; i < this.#free.length; i++) if (this.#free[i]!.length < this.#free[smallest]!.length) smallest = i;
      this.#free.splice(smallest, 1);
    }
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => (this.#free.length = 0), ScratchPool.IDLE_MS);
    // A Node timer must not keep the process alive; browsers' timers have no unref.
    (this.#timer as { unref?: () => void }).unref?.();
  }
}

const scratch = new ScratchPool();

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
  /** The scratch buffer the read decoded into, until #map gives it back. */
  #decoded: Uint8Array | undefined;

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
    // The read decodes into a scratch buffer (see ScratchPool), which #map gives back.
    const decoding: ErasureCodec = {
      n: codec.n,
      k: codec.k,
      fragmentLength: (valueLength) => codec.fragmentLength(valueLength),
      encode: (value) => codec.encode(value),
      encodeInto: (value, parity) => codec.encodeInto(value, parity),
      decodeInto: (fragments, valueLength, out) => codec.decodeInto(fragments, valueLength, out),
      decode: (fragments, valueLength) => {
        // k whole fragments: #map re-encodes the value padded to them, in place.
        const buffer = scratch.take(codec.k * codec.fragmentLength(valueLength));
        this.#decoded = buffer;
        return codec.decodeInto(fragments, valueLength, buffer);
      },
    };
    this.#read = new ReadOperation(
      { config, crypto, codec: decoding, verifier, fragmentServers, ...(onEvidence ? { onEvidence } : {}) },
      key,
      opId,
      {
        pinned: candidate,
        ...(target.stripe !== undefined ? { stripe: target.stripe } : {}),
        ...(target.layout ? { layout: target.layout } : {}),
        ...(this.#pending ? { pending: true } : {}),
      },
    );
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
    const decoded = this.#decoded;
    this.#decoded = undefined;
    const parity =
      step.result.value && step.result.value.length > 0 ? scratch.take(this.#parityBytes(step.result.value.length)) : undefined;
    try {
      return await this.#check(step.result, decoded, parity);
    } finally {
      // Every view of them is dead here: the entry holds a copy of this server's fragment,
      // and the hashes were computed.
      if (decoded) scratch.give(decoded);
      if (parity) scratch.give(parity);
    }
  }

  #parityBytes(valueLength: number): number {
    const { codec } = this.#options;
    return (codec.n - codec.k) * codec.fragmentLength(valueLength);
  }

  async #check(result: ReadResult, decoded: Uint8Array | undefined, parityBuffer: Uint8Array | undefined): Promise<Step<RepairResult>> {
    const { value, stripe = 0, layout, cert } = result;
    check(cert !== undefined, 'a pinned read returns its certificate');
    const { crypto, codec, index } = this.#options;
    const tombstone = this.#candidate.cert.tombstone;
    const bytes = value ?? new Uint8Array(0);
    let fragments: Uint8Array[];
    if (parityBuffer && decoded && bytes.length > 0 && bytes.buffer === decoded.buffer && bytes.byteOffset === decoded.byteOffset) {
      // The value sits at the start of the scratch buffer, which holds k whole fragments:
      // zeroing the rest pads it exactly as encode pads the value, so the fragments are the
      // same bytes, without encode copying the last data fragment to pad it.
      const len = codec.fragmentLength(bytes.length);
      const padded = decoded.subarray(0, codec.k * len);
      padded.fill(0, bytes.length);
      const parity = Array.from({ length: codec.n - codec.k }, (_, r) => parityBuffer.subarray(r * len, (r + 1) * len));
      fragments = codec.encodeInto(padded, parity);
    } else {
      fragments = codec.encode(bytes);
    }
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
      // A copy: the fragments are views of scratch buffers that are reused.
      fragment: fragments[index]!.slice(),
      cc,
      cert,
      ...(layout && stripe === 0 ? { layout } : {}),
    };
    return { result: { entry, layout } };
  }
}
