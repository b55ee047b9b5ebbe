/**
 * The writer of M-PoWerStore (Algorithm 4): CLOCK → STORE → COMPLETE, three rounds,
 * each sent to all `n` servers and finished after `n − t` acknowledgements.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import { candidateMac, NONCE_LENGTH, type Candidate } from './candidate.js';
import { MAX_VALUE_LENGTH, quorum, type ClusterConfig } from './config.js';
import type { WriterCredentials } from './credentials.js';
import { computeCrossChecksum } from './cross-checksum.js';
import { nonceHash, type CryptoProvider } from './crypto.js';
import { check } from './errors.js';
import type { ClientOperation, Outgoing, Reply, Step } from './messages.js';
import type { RandomBytes } from './random.js';
import { TS0, compareTimestamps, makeTimestamp, timestampsEqual, verifyTimestamp, type Timestamp } from './timestamp.js';

/** What a writer needs. */
export interface WriterOptions {
  readonly config: ClusterConfig;
  readonly credentials: WriterCredentials;
  readonly crypto: CryptoProvider;
  /** Injected so the WebAssembly codec and the reference one are interchangeable. */
  readonly codec: ErasureCodec;
  readonly random: RandomBytes;
}

/** What a finished write reports. */
export interface WriteResult {
  /** The timestamp the write took. */
  readonly ts: Timestamp;
  /** Communication rounds used: always 3. */
  readonly rounds: number;
}

/** What to write: bytes, or a tombstone (delete). */
export type WriteValue = { readonly kind: 'value'; readonly value: Uint8Array } | { readonly kind: 'tombstone' };

type Phase = 'idle' | 'clock' | 'store' | 'complete' | 'done';

/**
 * One WRITE (or delete) of one key. The host sends what `start` and `onReply` return and
 * must await each call before the next (they may hash asynchronously).
 */
export class WriteOperation implements ClientOperation<WriteResult> {
  protected readonly options: WriterOptions;
  readonly key: string;
  readonly opId: number;
  readonly #value: WriteValue;
  #phase: Phase = 'idle';
  readonly #acked = new Set<number>();
  /** Highest authenticated timestamp seen in CLOCK. */
  #highest: Timestamp = TS0;
  #candidate: Candidate | undefined;

  constructor(options: WriterOptions, key: string, value: WriteValue, opId: number) {
    const { config, codec, credentials } = options;
    check(codec.n === config.n && codec.k === config.t + 1, `codec must be (k = t + 1, n = 3t + 1), got (${codec.k}, ${codec.n})`);
    check(credentials.serverKeys.length === config.n, 'need one server key per server');
    check(value.kind === 'tombstone' || value.value.length <= MAX_VALUE_LENGTH, `values are limited to ${MAX_VALUE_LENGTH} bytes`);
    this.options = options;
    this.key = key;
    this.opId = opId;
    this.#value = value;
  }

  /** The round in progress (for hosts that report progress, and for the simulator). */
  get phase(): Phase {
    return this.#phase;
  }

  async start(): Promise<Step<WriteResult>> {
    check(this.#phase === 'idle', 'operation already started');
    this.#phase = 'clock';
    return { send: this.#toAll(() => ({ type: 'CLOCK', key: this.key, opId: this.opId })) };
  }

  async onReply(from: number, reply: Reply): Promise<Step<WriteResult>> {
    if (reply.key !== this.key || reply.opId !== this.opId || from < 0 || from >= this.options.config.n) return {};
    switch (this.#phase) {
      case 'clock':
        if (reply.type !== 'CLOCK_ACK' || this.#acked.has(from)) return {};
        this.#acked.add(from);
        if (compareTimestamps(reply.ts, this.#highest) > 0 && this.acceptClockTimestamp(reply.ts)) this.#highest = reply.ts;
        return this.#acked.size >= quorum(this.options.config) ? this.#store() : {};
      case 'store':
        if (reply.type !== 'STORE_ACK' || !this.#isOurs(reply.ts) || this.#acked.has(from)) return {};
        this.#acked.add(from);
        return this.#acked.size >= quorum(this.options.config) ? this.#complete() : {};
      case 'complete':
        if (reply.type !== 'COMPLETE_ACK' || !this.#isOurs(reply.ts) || this.#acked.has(from)) return {};
        this.#acked.add(from);
        if (this.#acked.size < quorum(this.options.config)) return {};
        this.#phase = 'done';
        return { result: { ts: this.#candidate!.ts, rounds: 3 } };
      default:
        return {};
    }
  }

  /**
   * Line 100: adopt a higher timestamp only if its MAC under `kW` verifies, so a
   * Byzantine server cannot make writers skip timestamps.
   */
  protected acceptClockTimestamp(ts: Timestamp): boolean {
    return verifyTimestamp(this.options.crypto, this.options.credentials.writerKey, this.key, ts);
  }

  /** The new timestamp: highest authenticated `num` plus one (non-skipping). */
  protected nextTimestamp(highest: Timestamp): Timestamp {
    const { crypto, credentials } = this.options;
    return makeTimestamp(crypto, credentials.writerKey, this.key, highest.num + 1, credentials.writerId);
  }

  async #store(): Promise<Step<WriteResult>> {
    const { crypto, codec, credentials, random, config } = this.options;
    const ts = this.nextTimestamp(this.#highest);
    const nonce = random(NONCE_LENGTH);
    check(nonce.length === NONCE_LENGTH, `random must return ${NONCE_LENGTH} bytes`);
    const nbar = nonceHash(crypto, nonce);
    const vec = credentials.serverKeys.map((k, i) => candidateMac(crypto, k, i, this.key, ts, nbar));
    const bytes = this.#value.kind === 'value' ? this.#value.value : new Uint8Array(0);
    const fragments = codec.encode(bytes);
    const cc = await computeCrossChecksum(crypto, fragments, bytes.length, this.#value.kind === 'tombstone');
    this.#candidate = { ts, nonce, vec };
    this.#phase = 'store';
    this.#acked.clear();
    const send: Outgoing[] = [];
    for (let i = 0; i < config.n; i++) {
      send.push({
        to: i,
        message: { type: 'STORE', key: this.key, opId: this.opId, ts, stripe: 0, fragment: fragments[i]!, cc, nonceHash: nbar, vec },
      });
    }
    return { send };
  }

  #complete(): Step<WriteResult> {
    this.#phase = 'complete';
    this.#acked.clear();
    const candidate = this.#candidate!;
    return { send: this.#toAll(() => ({ type: 'COMPLETE', key: this.key, opId: this.opId, candidate })) };
  }

  #isOurs(ts: Timestamp): boolean {
    return timestampsEqual(ts, this.#candidate!.ts);
  }

  #toAll(make: () => Outgoing['message']): Outgoing[] {
    const message = make();
    return Array.from({ length: this.options.config.n }, (_, to) => ({ to, message }));
  }
}
