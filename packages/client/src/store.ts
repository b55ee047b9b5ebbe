/**
 * The store `connect` returns: the {@link Store} facade over the host of the protocol's
 * client operations. Its public methods check their arguments, seal and open values
 * (`values/`) and hand protocol operations to the host (`#run` and the methods after
 * `close`), which sends every round to all servers at once and finishes an operation as
 * soon as its quorum predicate holds, without waiting for slow servers.
 */
import type { ErasureCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  decodeHeader,
  decodeMessage,
  encodeMessage,
  ListOperation,
  MAX_STRIPES,
  quorum,
  ReadOperation,
  WriteOperation,
  type ClientOperation,
  type Cluster,
  type ClusterConfig,
  type CryptoProvider,
  type ErrorReply,
  type GrantJson,
  type Message,
  type Outgoing,
  type ReadResult,
  type ReadTarget,
  type Reply,
  type Step,
  type WriterSession,
  type WriteValue,
} from '@powerstore/protocol';
import { issueGrant, shareCapability } from './access.js';
import { ServerConnection, type ServerStatus } from './connection.js';
import { PowerStoreError, invalid, noIdentity, toClientError } from './errors.js';
import type { Identity } from './identity/identity.js';
import type { KeyRing } from './identity/keyring.js';
import { keyStatOf, listArguments, listResultOf } from './inspection.js';
import { checkKey } from './key-names.js';
import { RoundBook, type Round } from './rounds.js';
import {
  STRIPE_BYTES,
  type AbortOptions,
  type ByteSource,
  type Expiry,
  type GetOptions,
  type GetStreamOptions,
  type KeyStat,
  type ListOptions,
  type ListResult,
  type OperationOptions,
  type Progress,
  type PutOptions,
  type PutStreamOptions,
  type ShareOptions,
  type Store,
  type ValueStream,
} from './types.js';
import { MAX_OVERHEAD } from './values/encryption.js';
import { openValue, sealerFor, sealValue } from './values/envelopes.js';
import { announcedSize, SealedStripes } from './values/sealed-stripes.js';
import { clampRange, firstStripe } from './values/streams.js';
import { readAll, valueStream, type StripeReader } from './values/value-stream.js';

/** A server with this much unsent data is treated as slow and skipped for new rounds. */
const SEND_HIGH_WATER_BYTES = 64 * 1024 * 1024;
/** Frames carry a fragment plus metadata: room for the latter. */
const FRAME_OVERHEAD_BYTES = 64 * 1024;
/** The largest stripe layout a frame may carry (a digest per stripe). */
const MAX_LAYOUT_BYTES = 32 * MAX_STRIPES;

/** How often progress is polled while a round's frames drain. */
const PROGRESS_INTERVAL_MS = 100;
/** Shortest wait for fragments a read asked for before it asks the other servers (see #armFragmentTimer). */
const FRAGMENT_WAIT_MIN_MS = 20;
/**
 * Shortest wait of a listing for the answers beyond `n − t` when its page would come out
 * thin (see #armFragmentTimer): only then does it wait, and a page returned without them
 * may be held back by a Byzantine server to just past its cursor, so it waits longer than
 * a read does for fragments.
 */
const LIST_WAIT_MIN_MS = 100;

/** An operation in flight: the protocol state machine plus what its host tracks. */
interface InFlight {
  readonly op: ClientOperation<unknown>;
  /** The id the operation's messages carry; each round goes out under a wire id of its own (`round.id`). */
  readonly opId: number;
  /** Replies are fed one at a time: the operation may hash and verify asynchronously. */
  chain: Promise<void>;
  /** The round in progress: its frames (resent to a server that reconnects) and who answered it how. */
  round: Round<InFlight> | undefined;
  /** Where evidence the host finds against a server goes (a read's `stat` lists it too). */
  readonly onEvidence: (server: number, reason: string) => void;
  readonly onProgress: ((progress: Progress) => void) | undefined;
  /** Set for operations whose timeout is per round (streamed writes): called as each round starts. */
  restartTimer: (() => void) | undefined;
  progressTimer: ReturnType<typeof setInterval> | undefined;
  /** A read's wait for the servers it asked for fragments, or a listing's for more answers (see `stalled` of either). */
  fragmentTimer: ReturnType<typeof setTimeout> | undefined;
  finish(result: unknown): void;
  fail(error: unknown): void;
}

/** What a {@link PowerStore} is made of: what `connect` checked, parsed and built. */
export interface StoreParts {
  readonly cluster: Cluster;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly identity: Identity | undefined;
  readonly session: WriterSession | undefined;
  /** What values are encrypted and decrypted with. */
  readonly keys: KeyRing;
  /** The key epoch of new encrypted values. */
  readonly keyEpoch: number;
  readonly random: (n: number) => Uint8Array;
  readonly timeoutMs: number;
  readonly maxValueBytes: number;
  readonly stripeBytes: number;
  readonly onServerStatus: ((servers: readonly ServerStatus[]) => void) | undefined;
}

/** The {@link Store} `connect` returns. */
export class PowerStore implements Store {
  readonly cluster: ClusterConfig;
  readonly #parts: StoreParts;
  /** Verifies candidates for reads (and remembers what it verified). */
  readonly #verifier: CertificateVerifier;
  readonly #connections: ServerConnection[];
  readonly #inFlight = new Map<number, InFlight>();
  /** Every round on the wire, by the opId its frames carry. */
  readonly #rounds = new RoundBook<InFlight>();
  readonly #quorumWaiters = new Set<() => void>();
  /** Largest frame accepted from a server: the largest fragment `maxValueBytes` makes, plus room for the rest. */
  readonly #maxFrameBytes: number;
  #nextOpId = 1;
  #closed = false;

  constructor(parts: StoreParts) {
    this.#parts = parts;
    this.cluster = parts.cluster.config;
    this.#verifier = parts.session?.verifier ?? new CertificateVerifier(parts.crypto, parts.cluster.identity);
    // The envelope's few bytes over maxValueBytes fit in the frame overhead's room.
    // Stripes are read whatever maxValueBytes says, and stripe 0's answers carry the layout.
    const largest = Math.max(parts.maxValueBytes, parts.stripeBytes + MAX_OVERHEAD, STRIPE_BYTES + MAX_OVERHEAD);
    this.#maxFrameBytes = parts.codec.fragmentLength(largest) + FRAME_OVERHEAD_BYTES + MAX_LAYOUT_BYTES;
    this.#connections = parts.cluster.servers.map(
      (s, i) =>
        new ServerConnection(i, s.url, this.#maxFrameBytes, {
          onFrame: (index, frame) => this.#onFrame(index, frame),
          onOpen: (index) => this.#onOpen(index),
          onStatus: () => this.#statusChanged(),
          onOversized: (index, reason, head) => this.#onOversized(index, reason, head),
        }),
    );
  }

  get canWrite(): boolean {
    return this.#parts.session !== undefined;
  }

  get publicKey(): string | undefined {
    return this.#parts.identity?.publicKey;
  }

  get ownerId(): string | undefined {
    return this.#parts.identity?.ownerId;
  }

  get namespace(): string | undefined {
    return this.#parts.identity?.namespace;
  }

  servers(): ServerStatus[] {
    return this.#connections.map((c) => c.status());
  }

  /** Largest stored value (envelope included) this store reads: `maxValueBytes` of plaintext plus the envelope. */
  get #maxStoredBytes(): number {
    return this.#parts.maxValueBytes + MAX_OVERHEAD;
  }

  async put(key: string, value: Uint8Array | string, options?: PutOptions): Promise<void> {
    const bytes = typeof value === 'string' ? new TextEncoder().encode(value) : value;
    if (!(bytes instanceof Uint8Array)) throw invalid('value must be a Uint8Array or a string');
    if (bytes.length > this.#parts.maxValueBytes) {
      throw invalid(`value of ${bytes.length} bytes exceeds the maximum of ${this.#parts.maxValueBytes} (connect's maxValueBytes)`);
    }
    this.#writerFor(key);
    await this.#write(key, { kind: 'value', value: await sealValue(this.#parts, key, bytes, options) }, options);
  }

  /**
   * The session to write `key` with, once the key is well-formed and this identity may write
   * it: "not yours to write" comes before "no key to encrypt it with".
   */
  #writerFor(key: string): WriterSession {
    checkKey(key);
    const { session } = this.#parts;
    if (!session) throw noIdentity();
    try {
      session.authorityFor(key, Date.now());
    } catch (err) {
      throw toClientError(err);
    }
    return session;
  }

  async putStream(key: string, source: ByteSource, options: PutStreamOptions = {}): Promise<{ readonly size: number }> {
    this.#writerFor(key);
    const expected = announcedSize(source, options.size);
    const stripes = new SealedStripes(source, await sealerFor(this.#parts, key, options), this.#parts.stripeBytes, expected);
    const report = options.onProgress;
    const progressOf = (op: WriteOperation) =>
      report && (() => report({ bytesDone: stripes.plaintextOf(op.bytesStored), bytesTotal: expected }));
    try {
      await this.#write(key, { kind: 'stripes', source: stripes }, { signal: options.signal, timeoutMs: options.timeoutMs }, progressOf);
    } finally {
      stripes.close();
    }
    const size = stripes.bytesRead;
    report?.({ bytesDone: size, bytesTotal: size });
    return { size };
  }

  async getStream(key: string, options: GetStreamOptions = {}): Promise<ValueStream | undefined> {
    const stripe = firstStripe(options.range, STRIPE_BYTES);
    const { result } = await this.#read(key, { signal: options.signal, timeoutMs: options.timeoutMs }, { stripe });
    if (result.value === undefined) return undefined;
    return valueStream(key, result, options, this.#stripeReader(key, options));
  }

  /** Where a streamed value of `key` gets its further stripes: reads under `options`' signal and timeout. */
  #stripeReader(key: string, options: AbortOptions | undefined): StripeReader {
    const abort = { signal: options?.signal, timeoutMs: options?.timeoutMs };
    return { keys: this.#parts.keys, read: async (target) => (await this.#read(key, abort, target)).result };
  }

  async delete(key: string, options?: OperationOptions): Promise<void> {
    await this.#write(key, { kind: 'tombstone' }, options);
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array | undefined> {
    const { result } = await this.#read(key, options, { stripe: firstStripe(options?.range, STRIPE_BYTES) });
    if (!result.layout) {
      const value = await openValue(this.#parts.keys, key, result, options?.raw);
      if (value === undefined || options?.range === undefined) return value;
      const { start, end } = clampRange(options.range, value.length);
      return value.subarray(start, end);
    }
    if (options?.raw)
      throw invalid(`get: { raw } reads values written whole; ${JSON.stringify(key)} is in stripes (read it with getStream)`);
    const { start, end, size, stream } = await valueStream(key, result, { range: options?.range }, this.#stripeReader(key, options));
    if (end - start > this.#parts.maxValueBytes) {
      void stream.cancel();
      throw new PowerStoreError(
        'VALUE_TOO_LARGE',
        `the value of ${JSON.stringify(key)} is ${size} bytes, over the ${this.#parts.maxValueBytes} bytes get() returns in memory (connect's maxValueBytes): read it with getStream, or a range of it`,
      );
    }
    return readAll(stream, end - start);
  }

  async share(keyOrPrefix: string, options?: ShareOptions): Promise<string> {
    return shareCapability(this.#parts.keys, keyOrPrefix, options?.keyEpoch ?? this.#parts.keyEpoch);
  }

  async stat(key: string, options?: OperationOptions): Promise<KeyStat> {
    return keyStatOf(key, await this.#read(key, options), this.#parts.crypto);
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ListResult> {
    const { limit, after } = listArguments(prefix, options);
    const opId = this.#nextOpId++;
    const onEvidence = (i: number, reason: string) => this.#misbehaving(i, reason);
    const { crypto } = this.#parts;
    const op = new ListOperation({ config: this.cluster, crypto, verifier: this.#verifier, onEvidence }, prefix, after, limit, opId);
    return listResultOf(await this.#run(op, opId, options, onEvidence));
  }

  async grant(grantee: string, prefix: string, expires: Expiry): Promise<GrantJson> {
    return issueGrant(this.#parts, grantee, prefix, expires);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const c of this.#connections) c.close();
    for (const f of this.#inFlight.values()) f.fail(new PowerStoreError('CLOSED', 'the store was closed'));
    this.#inFlight.clear();
  }

  /** Resolves once `n − t` servers are connected. */
  waitForQuorum(timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const need = quorum(this.cluster);
      const check = () => {
        if (this.#connections.filter((c) => c.state === 'open').length < need) return;
        done();
        resolve();
      };
      const timer = setTimeout(() => {
        done();
        reject(this.#unreachable(need, undefined, 'connecting'));
      }, timeoutMs);
      const onAbort = () => {
        done();
        reject(new PowerStoreError('ABORTED', 'connect was aborted', { cause: signal?.reason }));
      };
      const done = () => {
        clearTimeout(timer);
        this.#quorumWaiters.delete(check);
        signal?.removeEventListener('abort', onAbort);
      };
      if (signal?.aborted) return onAbort();
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#quorumWaiters.add(check);
      check();
    });
  }

  /**
   * Runs a write. A streamed one (`progressOf` given) has a timeout per round, and reports
   * progress through what `progressOf` makes of its operation instead of `options.onProgress`.
   */
  async #write(
    key: string,
    value: WriteValue,
    options?: OperationOptions,
    progressOf?: (op: WriteOperation) => OperationOptions['onProgress'],
  ): Promise<void> {
    checkKey(key);
    const { session, crypto, codec, random } = this.#parts;
    if (!session) throw noIdentity();
    const opId = this.#nextOpId++;
    let op: WriteOperation;
    try {
      op = new WriteOperation(
        { config: this.cluster, crypto, codec, random, session, now: Date.now, onEvidence: (i, reason) => this.#misbehaving(i, reason) },
        key,
        value,
        opId,
      );
    } catch (err) {
      throw toClientError(err);
    }
    const run = progressOf ? { ...options, onProgress: progressOf(op) } : options;
    try {
      await this.#run(op, opId, run, (i, reason) => this.#misbehaving(i, reason), progressOf !== undefined);
    } finally {
      op.abandon();
    }
  }

  async #read(
    key: string,
    options?: OperationOptions,
    target?: ReadTarget,
  ): Promise<{ op: ReadOperation; result: ReadResult; evidence: Map<number, string> }> {
    checkKey(key);
    const opId = this.#nextOpId++;
    const evidence = new Map<number, string>();
    const onEvidence = (i: number, reason: string) => {
      evidence.set(i, reason);
      this.#misbehaving(i, reason);
    };
    const { crypto, codec } = this.#parts;
    const op = new ReadOperation(
      { config: this.cluster, crypto, codec, verifier: this.#verifier, onEvidence, maxValueLength: this.#maxStoredBytes },
      key,
      opId,
      target,
    );
    const result = await this.#run(op, opId, options, onEvidence);
    return { op, result, evidence };
  }

  #misbehaving(index: number, reason: string): void {
    this.#connections[index]?.markMisbehaving(reason);
  }

  /** Drives one operation to its result, its failure, a timeout or an abort. */
  #run<R>(
    op: ClientOperation<R>,
    opId: number,
    options: OperationOptions | undefined,
    onEvidence: (server: number, reason: string) => void,
    perRound = false,
  ): Promise<R> {
    if (this.#closed) return Promise.reject(new PowerStoreError('CLOSED', 'the store was closed'));
    const signal = options?.signal;
    const timeoutMs = options?.timeoutMs ?? this.#parts.timeoutMs;
    if (signal?.aborted) return Promise.reject(new PowerStoreError('ABORTED', 'the operation was aborted', { cause: signal.reason }));
    return new Promise<R>((resolve, reject) => {
      const need = quorum(this.cluster);
      const cleanup = (succeeded: boolean) => {
        clearTimeout(timer);
        clearTimeout(flight.fragmentTimer);
        clearInterval(flight.progressTimer);
        signal?.removeEventListener('abort', onAbort);
        this.#inFlight.delete(opId);
        this.#endRound(flight, succeeded);
      };
      const flight: InFlight = {
        op,
        opId,
        chain: Promise.resolve(),
        round: undefined,
        onEvidence,
        onProgress: options?.onProgress,
        progressTimer: undefined,
        restartTimer: perRound
          ? () => {
              clearTimeout(timer);
              timer = setTimeout(onTimeout, timeoutMs);
            }
          : undefined,
        fragmentTimer: undefined,
        finish: (r) => {
          cleanup(true);
          resolve(r as R);
        },
        fail: (e) => {
          cleanup(false);
          reject(toClientError(e));
        },
      };
      const onTimeout = () => flight.fail(this.#unreachable(need, flight.round, 'timed out'));
      let timer = setTimeout(onTimeout, timeoutMs);
      const onAbort = () => flight.fail(new PowerStoreError('ABORTED', 'the operation was aborted', { cause: signal?.reason }));
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#inFlight.set(opId, flight);
      flight.chain = op.start().then(
        (step) => this.#apply(flight, step),
        (e) => flight.fail(e),
      );
    });
  }

  #apply(flight: InFlight, step: Step<unknown>): void {
    if (step.error) {
      flight.fail(step.error);
      return;
    }
    if (step.result !== undefined) {
      flight.finish(step.result);
      return;
    }
    if (step.supplement && step.send && flight.round?.flight === flight) {
      this.#supplement(flight, flight.round, step.send);
      return;
    }
    if (!step.send) {
      this.#armFragmentTimer(flight);
      return;
    }
    clearTimeout(flight.fragmentTimer);
    flight.fragmentTimer = undefined;
    flight.restartTimer?.();
    this.#endRound(flight, false);
    const send = step.send;
    const round = this.#rounds.start(
      flight,
      send[0]!.message.key,
      send[0]!.message.type,
      (id) => this.#encodeRound(send, id),
      flight.onEvidence,
    );
    flight.round = round;
    const sent: [ServerConnection, number, number][] = [];
    for (const [to, frame] of round.frames) {
      const connection = this.#connections[to]!;
      const before = connection.bufferedBytes;
      if (connection.send(frame, SEND_HIGH_WATER_BYTES)) {
        round.pending.add(to);
        sent.push([connection, frame.length, before]);
      }
    }
    if (flight.onProgress) this.#trackProgress(flight, phaseOf(step.send[0]!.message.type), sent);
  }

  /** Sends a supplement's messages under the round in progress's wire id. */
  #supplement(flight: InFlight, round: Round<InFlight>, send: readonly Outgoing[]): void {
    for (const [to, frame] of this.#encodeRound(send, round.id)) {
      round.frames.set(to, frame);
      if (this.#connections[to]!.send(frame, SEND_HIGH_WATER_BYTES)) round.pending.add(to);
    }
    this.#armFragmentTimer(flight);
  }

  /**
   * A read that has `n − t` answers but waits on the servers it asked for fragments gives
   * them twice as long as the quorum took (at least {@link FRAGMENT_WAIT_MIN_MS}), then asks
   * the others; a listing that has `n − t` answers but waits for more (its page would come
   * out thin and the answers disagree) gives the others four times as long (at least
   * {@link LIST_WAIT_MIN_MS}), then returns the page without them. Either way a slow or
   * dead server costs one timer, not the operation's timeout.
   */
  #armFragmentTimer(flight: InFlight): void {
    const op = flight.op;
    const round = flight.round;
    const list = op instanceof ListOperation;
    const waits = (op instanceof ReadOperation && op.awaitingFragments) || (list && op.awaitingAnswers);
    if (!waits || flight.fragmentTimer !== undefined || !round) return;
    const took = performance.now() - round.started;
    const wait = list ? Math.max(LIST_WAIT_MIN_MS, 4 * took) : Math.max(FRAGMENT_WAIT_MIN_MS, 2 * took);
    flight.fragmentTimer = setTimeout(() => {
      flight.chain = flight.chain.then(() => this.#apply(flight, op.stalled())).catch((e) => flight.fail(e));
    }, wait);
  }

  /**
   * Reports how much of a round's frames left this process: a frame counts as sent once
   * the socket's buffer has drained below where it stood when the frame was queued.
   */
  #trackProgress(flight: InFlight, phase: Progress['phase'], sent: readonly [ServerConnection, number, number][]): void {
    clearInterval(flight.progressTimer);
    const bytesTotal = sent.reduce((a, [, len]) => a + len, 0);
    const report = () => {
      let bytesSent = 0;
      for (const [connection, len, before] of sent) {
        const queued = connection.bufferedBytes;
        bytesSent += Math.max(0, Math.min(len, before + len - queued));
      }
      flight.onProgress!({ phase, bytesSent, bytesTotal });
      if (bytesSent >= bytesTotal) clearInterval(flight.progressTimer);
    };
    report();
    if (bytesTotal > 0) flight.progressTimer = setInterval(report, PROGRESS_INTERVAL_MS);
  }

  /**
   * Encodes each distinct message once (most rounds send the same one to every server),
   * under the round's wire id `id` in place of the operation's.
   */
  #encodeRound(send: readonly Outgoing[], id: number): Map<number, Uint8Array> {
    const encoded = new Map<Outgoing['message'], Uint8Array>();
    const frames = new Map<number, Uint8Array>();
    for (const { to, message } of send) {
      let frame = encoded.get(message);
      if (!frame) {
        frame = encodeMessage({ ...message, opId: id });
        encoded.set(message, frame);
      }
      frames.set(to, frame);
    }
    return frames;
  }

  #onFrame(index: number, frame: Uint8Array): void {
    let message: Message;
    try {
      // Fragments are bounded by the frame limit the transport enforced, not by the
      // fragment length of maxValueBytes: an answer carrying a value a little over
      // maxValueBytes is honest, and the reader fails such a read with VALUE_TOO_LARGE.
      message = decodeMessage(frame, { n: this.cluster.n, maxFragmentLength: this.#maxFrameBytes });
    } catch (e) {
      this.#misbehaving(index, `sent an undecodable frame: ${(e as Error).message}`);
      return;
    }
    if (!isReply(message)) return;
    // Replies name their round by its wire id, never reused: any other id is not ours, or long gone.
    const round = this.#rounds.get(message.opId);
    if (!round) return;
    const answer = round.answerOf(message);
    if (!answer) {
      this.#misbehaving(
        index,
        `answered a ${round.request} with ${message.type === 'ERROR' ? 'an ERROR' : message.type} of key ${JSON.stringify(message.key.slice(0, 64))}`,
      );
      return;
    }
    round.pending.delete(index);
    if (answer === 'ack' && !round.acked.has(index)) {
      round.acked.add(index);
      if (round.flight) this.#connections[index]!.noteRoundTrip(performance.now() - round.started);
    }
    const flight = round.flight;
    if (!flight) {
      // A late answer to a round that is over: only a refusal of what the quorum accepted tells anything.
      if (message.type === 'ERROR') {
        const evidence = round.refusalEvidence(index, message, quorum(this.cluster));
        if (evidence) round.report(index, evidence);
      }
      this.#releaseHeld(index);
      return;
    }
    if (message.type === 'ERROR') round.refused.set(index, message);
    this.#releaseHeld(index);
    // The operation sees its own id: the wire id is the host's business.
    const reply: Reply = { ...message, opId: flight.opId };
    flight.chain = flight.chain
      .then(async () => {
        // Queued replies may outlive their round: a later round's answers moved the operation on.
        if (round.flight !== flight) return;
        this.#apply(flight, await flight.op.onReply(index, reply));
      })
      .catch((e) => flight.fail(e));
  }

  /**
   * The round of `flight` in progress is over: the operation moved on to the next round
   * (`succeeded` false) or finished. Refusals of a request `n − t` other servers accepted
   * are misbehaving; so are oversized FILTER answers once the read returned a value
   * within the limit, since a correct server's answer carries that value's fragment.
   */
  #endRound(flight: InFlight, succeeded: boolean): void {
    const round = flight.round;
    if (!round || round.flight !== flight) return;
    const held = [...round.held];
    this.#rounds.end(round, succeeded);
    for (const [index, reply] of round.refused) {
      const evidence = round.refusalEvidence(index, reply, quorum(this.cluster));
      if (evidence) round.report(index, evidence);
    }
    if (succeeded) for (const [index, reason] of round.oversized) round.report(index, reason);
    for (const index of new Set([...held, ...round.pending])) this.#releaseHeld(index);
  }

  /**
   * `index` sent a frame over the size limit (the connection is closing). Only a FILTER
   * answer can honestly be that large, and only when the value read is over
   * `maxValueBytes`: see {@link RoundBook.oversized} for how the frame is matched to a
   * round. Once `t + 1` servers answered one FILTER so, one of them is correct, so the
   * value the read would return (correct servers answer with the highest candidate's
   * entry) is too large: the read fails with VALUE_TOO_LARGE instead of reconnecting and
   * asking again, and nobody is blamed.
   */
  #onOversized(index: number, reason: string, head: Uint8Array | undefined): void {
    let opId: number | undefined;
    if (head) {
      const header = decodeHeader(head);
      if (header?.type !== 'FILTER_ACK') {
        this.#misbehaving(index, reason);
        return;
      }
      opId = header.opId;
    }
    const verdict = this.#rounds.oversized(index, opId);
    if (verdict.kind === 'misbehaving') this.#misbehaving(index, reason);
    if (verdict.kind !== 'answer') return;
    const { round } = verdict;
    round.oversized.set(index, reason);
    if (round.oversized.size > this.cluster.t) {
      const servers = [...round.oversized.keys()].map((i) => `s${i + 1}`).join(', ');
      round.flight?.fail(
        new PowerStoreError(
          'VALUE_TOO_LARGE',
          `the value of ${JSON.stringify(round.key)} is over the ${this.#parts.maxValueBytes} bytes this store accepts (connect's maxValueBytes): ${servers} answered with frames over the limit of ${this.#maxFrameBytes} bytes`,
        ),
      );
    }
  }

  /** Sends `index` the next FILTER held back for it, if its connection is up and none is outstanding. */
  #releaseHeld(index: number): void {
    const connection = this.#connections[index];
    if (connection?.state !== 'open') return;
    const round = this.#rounds.nextHeld(index);
    const frame = round?.frames.get(index);
    if (round && frame && connection.send(frame, SEND_HIGH_WATER_BYTES)) round.pending.add(index);
  }

  /** A server came (back): send it the current round of every operation it has not acknowledged. */
  #onOpen(index: number): void {
    this.#rounds.reconnected(index);
    const connection = this.#connections[index]!;
    for (const round of this.#rounds.live()) {
      const frame = round.frames.get(index);
      if (!frame || !round.awaits(index)) continue;
      round.refused.delete(index);
      if (connection.send(frame, SEND_HIGH_WATER_BYTES)) round.pending.add(index);
    }
    this.#releaseHeld(index);
    for (const check of [...this.#quorumWaiters]) check();
  }

  #statusChanged(): void {
    this.#parts.onServerStatus?.(this.servers());
  }

  /** "need 3 of 4 servers, 2 reachable: s2 refused, s4 timed out". */
  #unreachable(need: number, round: Round<InFlight> | undefined, pending: string): PowerStoreError {
    const reasons: string[] = [];
    let reachable = 0;
    this.#connections.forEach((c, i) => {
      const name = `s${i + 1}`;
      if (c.state === 'open') reachable++;
      if (round?.acked.has(i)) return;
      const refusal: ErrorReply | undefined = round?.refused.get(i);
      const oversized = round?.oversized.get(i);
      if (refusal) reasons.push(`${name} rejected (${refusal.code}: ${refusal.message})`);
      else if (oversized) reasons.push(`${name} ${oversized}`);
      else if (c.state !== 'open') reasons.push(`${name} ${c.status().lastError ?? 'not connected'}`);
      else reasons.push(`${name} ${pending}`);
    });
    return new PowerStoreError(
      'QUORUM_UNREACHABLE',
      `need ${need} of ${this.cluster.n} servers, ${reachable} reachable: ${reasons.join(', ')}`,
    );
  }
}

function phaseOf(type: Outgoing['message']['type']): Progress['phase'] {
  return type.toLowerCase() as Progress['phase'];
}

function isReply(m: Message): m is Reply {
  return m.type.endsWith('_ACK') || m.type === 'ERROR';
}
