/**
 * `connect()` and the store it returns: the host of the protocol's client operations.
 * Every round goes to all servers at once; an operation finishes as soon as its quorum
 * predicate holds, without waiting for slow servers.
 */
import { createCodec, type ErasureCodec } from '@powerstore/erasure';
import {
  MAX_KEY_LENGTH,
  WRITER_ID_LENGTH,
  clusterConfig,
  decodeMessage,
  encodeMessage,
  quorum,
  toHex,
  writerCredentials,
  type ClientOperation,
  type ClusterConfig,
  type CryptoProvider,
  type Message,
  type Outgoing,
  type Reply,
  type Step,
  type WriterCredentials,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { parseCluster, parseCredentials, type ClusterInfo, type Credentials } from './cluster.js';
import { ServerConnection, type ServerStatus } from './connection.js';
import { PowerStoreError, invalid } from './errors.js';
import { ObservedRead, ObservedWrite, type Misbehaviour } from './operations.js';

/** Largest value `put` accepts by default: 64 MiB. */
export const DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024;
/** Default time an operation (or `connect`) may take before it fails. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** A server with this much unsent data is treated as slow and skipped for new rounds. */
const SEND_HIGH_WATER_BYTES = 64 * 1024 * 1024;
/** Frames carry a fragment plus metadata: room for the latter. */
const FRAME_OVERHEAD_BYTES = 64 * 1024;

/** Options of {@link connect}. */
export interface ConnectOptions {
  /** The cluster: the contents of `cluster.json` (or of `writer.json`, which includes it). */
  readonly cluster: ClusterInfo | object;
  /** Writer credentials (`writer.json`); without them the store can only read. */
  readonly credentials?: Credentials | object;
  /** Time an operation, and `connect` itself, may take. Default 30 s. */
  readonly timeoutMs?: number;
  /** Aborts `connect`. */
  readonly signal?: AbortSignal;
  /** Largest value `put` accepts. Default 64 MiB, which the servers' default frame limit fits at t = 1. */
  readonly maxValueBytes?: number;
  /** Called whenever a server's status changes (connected, closed, misbehaving). */
  readonly onServerStatus?: (servers: readonly ServerStatus[]) => void;
}

/** Per-operation options. */
export interface OperationOptions {
  readonly signal?: AbortSignal;
  readonly timeoutMs?: number;
  /** Called as each round starts and, while large frames drain, about every 100 ms. */
  readonly onProgress?: (progress: Progress) => void;
}

/** Where an operation is: its round, and how much of that round's data is on the wire. */
export interface Progress {
  /** The protocol round: a write is clock → store → complete, a read collect → filter (→ repair). */
  readonly phase: 'clock' | 'store' | 'complete' | 'collect' | 'filter' | 'repair';
  /** Bytes of this round's frames handed to the network so far, over all servers. */
  readonly bytesSent: number;
  /** Bytes of this round's frames, over all servers. */
  readonly bytesTotal: number;
}

/** How often progress is polled while a round's frames drain. */
const PROGRESS_INTERVAL_MS = 100;

/** What `stat` reports about a key. */
export interface KeyStat {
  readonly key: string;
  /** Whether the key holds a value (false when never written or deleted). */
  readonly exists: boolean;
  /** Deleted by a tombstone write. */
  readonly deleted: boolean;
  /** Bytes in the value. */
  readonly size: number;
  /** Timestamp of the write read: its number and writer id (hex). */
  readonly timestamp: { readonly num: number; readonly writerId: string };
  /** Rounds the read took (2, or 3 when it repaired metadata). */
  readonly rounds: number;
  /** Server ids (1-based) that answered the read's FILTER round. */
  readonly answered: readonly number[];
  /** Servers caught misbehaving during the read. */
  readonly misbehaving: readonly { readonly id: number; readonly reason: string }[];
}

/** A connected PowerStore. */
export interface Store {
  /** The cluster's `t` and `n`. */
  readonly cluster: ClusterConfig;
  /** Whether `put` and `delete` are possible (credentials were given). */
  readonly canWrite: boolean;
  put(key: string, value: Uint8Array | string, options?: OperationOptions): Promise<void>;
  /** The latest value, or `undefined` if the key was never written or was deleted. */
  get(key: string, options?: OperationOptions): Promise<Uint8Array | undefined>;
  /** A linearizable delete: a tombstone write. */
  delete(key: string, options?: OperationOptions): Promise<void>;
  /** Reads `key` and reports the timestamp, size and which servers answered or misbehaved. */
  stat(key: string, options?: OperationOptions): Promise<KeyStat>;
  /** Every server's status. */
  servers(): ServerStatus[];
  /** Closes every connection; pending operations fail with `CLOSED`. */
  close(): void;
}

/**
 * Connects to a cluster: opens a WebSocket to every server and resolves once `n − t`
 * are connected (the quorum every operation needs), or fails with
 * `QUORUM_UNREACHABLE` saying which servers could not be reached and why.
 */
export async function connect(options: ConnectOptions): Promise<Store> {
  if (typeof options !== 'object' || options === null) throw invalid('connect() needs { cluster, credentials? }');
  const info = parseCluster(options.cluster);
  const parsed = options.credentials === undefined ? undefined : parseCredentials(options.credentials, info);
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!(timeoutMs > 0)) throw invalid(`timeoutMs must be positive, got ${String(timeoutMs)}`);
  const maxValueBytes = options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES;
  if (!Number.isSafeInteger(maxValueBytes) || maxValueBytes < 0) throw invalid('maxValueBytes must be a non-negative integer');
  const config = clusterConfig(info.t);
  const crypto = createCryptoProvider();
  const codec = await createCodec({ k: config.t + 1, n: config.n });
  const random = (n: number) => globalThis.crypto.getRandomValues(new Uint8Array(n));
  const credentials = parsed && writerCredentials(crypto, parsed.serverKeys, parsed.writerId ?? nonZero(random, WRITER_ID_LENGTH));
  const store = new PowerStore(info, config, crypto, codec, credentials, random, timeoutMs, maxValueBytes, options.onServerStatus);
  try {
    await store.waitForQuorum(timeoutMs, options.signal);
  } catch (e) {
    store.close();
    throw e;
  }
  return store;
}

/** An operation in flight: the protocol state machine plus what its host tracks. */
interface InFlight {
  readonly op: ClientOperation<unknown>;
  /** Replies are fed one at a time: the operation may hash asynchronously. */
  chain: Promise<void>;
  /** This round's frame per server, to resend to a server that reconnects. */
  frames: Map<number, Uint8Array>;
  /** Servers that answered this round. */
  answered: Set<number>;
  /** Servers that rejected this round, and why. */
  rejected: Map<number, string>;
  roundStarted: number;
  readonly onProgress: ((progress: Progress) => void) | undefined;
  progressTimer: ReturnType<typeof setInterval> | undefined;
  finish(result: unknown): void;
  fail(error: unknown): void;
}

class PowerStore implements Store {
  readonly cluster: ClusterConfig;
  readonly #info: ClusterInfo;
  readonly #crypto: CryptoProvider;
  readonly #codec: ErasureCodec;
  readonly #credentials: WriterCredentials | undefined;
  readonly #random: (n: number) => Uint8Array;
  readonly #timeoutMs: number;
  readonly #maxValueBytes: number;
  readonly #connections: ServerConnection[];
  readonly #inFlight = new Map<number, InFlight>();
  readonly #onServerStatus: ((servers: readonly ServerStatus[]) => void) | undefined;
  readonly #quorumWaiters = new Set<() => void>();
  #nextOpId = 1;
  #closed = false;

  constructor(
    info: ClusterInfo,
    config: ClusterConfig,
    crypto: CryptoProvider,
    codec: ErasureCodec,
    credentials: WriterCredentials | undefined,
    random: (n: number) => Uint8Array,
    timeoutMs: number,
    maxValueBytes: number,
    onServerStatus: ((servers: readonly ServerStatus[]) => void) | undefined,
  ) {
    this.cluster = config;
    this.#info = info;
    this.#crypto = crypto;
    this.#codec = codec;
    this.#credentials = credentials;
    this.#random = random;
    this.#timeoutMs = timeoutMs;
    this.#maxValueBytes = maxValueBytes;
    this.#onServerStatus = onServerStatus;
    const maxFrame = codec.fragmentLength(Math.max(maxValueBytes, 0)) + FRAME_OVERHEAD_BYTES;
    this.#connections = info.servers.map(
      (s, i) =>
        new ServerConnection(i, s.url, maxFrame, {
          onFrame: (index, frame) => this.#onFrame(index, frame),
          onOpen: (index) => this.#onOpen(index),
          onStatus: () => this.#statusChanged(),
        }),
    );
  }

  get canWrite(): boolean {
    return this.#credentials !== undefined;
  }

  servers(): ServerStatus[] {
    return this.#connections.map((c) => c.status());
  }

  async put(key: string, value: Uint8Array | string, options?: OperationOptions): Promise<void> {
    const bytes = typeof value === 'string' ? new TextEncoder().encode(value) : value;
    if (!(bytes instanceof Uint8Array)) throw invalid('value must be a Uint8Array or a string');
    if (bytes.length > this.#maxValueBytes) {
      throw invalid(`value of ${bytes.length} bytes exceeds the maximum of ${this.#maxValueBytes} (connect's maxValueBytes)`);
    }
    await this.#write(key, { kind: 'value', value: bytes }, options);
  }

  async delete(key: string, options?: OperationOptions): Promise<void> {
    await this.#write(key, { kind: 'tombstone' }, options);
  }

  async get(key: string, options?: OperationOptions): Promise<Uint8Array | undefined> {
    return (await this.#read(key, options)).result.value;
  }

  async stat(key: string, options?: OperationOptions): Promise<KeyStat> {
    const { op, result } = await this.#read(key, options);
    return {
      key,
      exists: result.value !== undefined,
      deleted: result.value === undefined && result.ts.num > 0,
      size: result.value?.length ?? 0,
      timestamp: { num: result.ts.num, writerId: toHex(result.ts.writerId) },
      rounds: result.rounds,
      answered: op.answered().map((i) => i + 1),
      misbehaving: op.misbehaviours().map((m) => ({ id: m.index + 1, reason: m.reason })),
    };
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
        reject(this.#unreachable(need, new Set(), new Map(), 'connecting'));
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

  async #write(key: string, value: { kind: 'value'; value: Uint8Array } | { kind: 'tombstone' }, options?: OperationOptions): Promise<void> {
    checkKey(key);
    const credentials = this.#credentials;
    if (!credentials) {
      throw new PowerStoreError('NO_CREDENTIALS', 'writing needs writer credentials: pass connect({ cluster, credentials }) with writer.json');
    }
    const opId = this.#nextOpId++;
    const op = new ObservedWrite(
      { config: this.cluster, credentials, crypto: this.#crypto, codec: this.#codec, random: this.#random },
      key,
      value,
      opId,
    );
    try {
      await this.#run(op, opId, options);
    } finally {
      this.#report(op.misbehaviours());
    }
  }

  async #read(key: string, options?: OperationOptions) {
    checkKey(key);
    const opId = this.#nextOpId++;
    const op = new ObservedRead({ config: this.cluster, crypto: this.#crypto, codec: this.#codec }, key, opId);
    try {
      const result = await this.#run(op, opId, options);
      return { op, result };
    } finally {
      this.#report(op.misbehaviours());
    }
  }

  #report(misbehaviours: readonly Misbehaviour[]): void {
    for (const m of misbehaviours) this.#connections[m.index]?.markMisbehaving(m.reason);
  }

  /** Drives one operation to its result, a timeout or an abort. */
  #run<R>(op: ClientOperation<R>, opId: number, options: OperationOptions | undefined): Promise<R> {
    if (this.#closed) return Promise.reject(new PowerStoreError('CLOSED', 'the store was closed'));
    const signal = options?.signal;
    const timeoutMs = options?.timeoutMs ?? this.#timeoutMs;
    if (signal?.aborted) return Promise.reject(new PowerStoreError('ABORTED', 'the operation was aborted', { cause: signal.reason }));
    return new Promise<R>((resolve, reject) => {
      const need = quorum(this.cluster);
      const cleanup = () => {
        clearTimeout(timer);
        clearInterval(flight.progressTimer);
        signal?.removeEventListener('abort', onAbort);
        this.#inFlight.delete(opId);
      };
      const flight: InFlight = {
        op,
        chain: Promise.resolve(),
        frames: new Map(),
        answered: new Set(),
        rejected: new Map(),
        roundStarted: 0,
        onProgress: options?.onProgress,
        progressTimer: undefined,
        finish: (r) => {
          cleanup();
          resolve(r as R);
        },
        fail: (e) => {
          cleanup();
          reject(e);
        },
      };
      const timer = setTimeout(() => flight.fail(this.#unreachable(need, flight.answered, flight.rejected, 'timed out')), timeoutMs);
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
    if (step.result !== undefined) {
      flight.finish(step.result);
      return;
    }
    if (!step.send) return;
    flight.frames = this.#encodeRound(step.send);
    flight.answered = new Set();
    flight.rejected = new Map();
    flight.roundStarted = performance.now();
    const sent: [ServerConnection, number, number][] = [];
    for (const [to, frame] of flight.frames) {
      const connection = this.#connections[to]!;
      const before = connection.bufferedBytes;
      if (connection.send(frame, SEND_HIGH_WATER_BYTES)) sent.push([connection, frame.length, before]);
    }
    if (flight.onProgress) this.#trackProgress(flight, phaseOf(step.send[0]!.message.type), sent);
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

  /** Encodes each distinct message once: most rounds send the same one to every server. */
  #encodeRound(send: readonly Outgoing[]): Map<number, Uint8Array> {
    const encoded = new Map<Outgoing['message'], Uint8Array>();
    const frames = new Map<number, Uint8Array>();
    for (const { to, message } of send) {
      let frame = encoded.get(message);
      if (!frame) {
        frame = encodeMessage(message);
        encoded.set(message, frame);
      }
      frames.set(to, frame);
    }
    return frames;
  }

  #onFrame(index: number, frame: Uint8Array): void {
    let message: Message;
    try {
      message = decodeMessage(frame, { n: this.cluster.n, maxFragmentLength: this.#codec.fragmentLength(this.#maxValueBytes) });
    } catch (e) {
      this.#connections[index]!.markMisbehaving(`sent an undecodable frame: ${(e as Error).message}`);
      return;
    }
    const flight = this.#inFlight.get(message.opId);
    if (!flight || !isReply(message)) return;
    if (message.type === 'ERROR') {
      flight.rejected.set(index, `${message.code}: ${message.message}`);
    } else if (!flight.answered.has(index)) {
      flight.answered.add(index);
      this.#connections[index]!.noteRoundTrip(performance.now() - flight.roundStarted);
    }
    flight.chain = flight.chain
      .then(async () => {
        if (!this.#inFlight.has(message.opId)) return;
        this.#apply(flight, await flight.op.onReply(index, message));
      })
      .catch((e) => flight.fail(e));
  }

  /** A server came (back): send it the current round of every operation it has not answered. */
  #onOpen(index: number): void {
    for (const flight of this.#inFlight.values()) {
      const frame = flight.frames.get(index);
      if (frame && !flight.answered.has(index)) this.#connections[index]!.send(frame, SEND_HIGH_WATER_BYTES);
    }
    for (const check of [...this.#quorumWaiters]) check();
  }

  #statusChanged(): void {
    this.#onServerStatus?.(this.servers());
  }

  /** "need 3 of 4 servers, 2 reachable: s2 refused, s4 timed out". */
  #unreachable(need: number, answered: Set<number>, rejected: Map<number, string>, pending: string): PowerStoreError {
    const reasons: string[] = [];
    let reachable = 0;
    this.#connections.forEach((c, i) => {
      const name = `s${i + 1}`;
      if (c.state === 'open') reachable++;
      if (answered.has(i)) return;
      if (rejected.has(i)) reasons.push(`${name} rejected (${rejected.get(i)})`);
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

function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) throw invalid('key must be a non-empty string');
  const bytes = new TextEncoder().encode(key).length;
  if (bytes > MAX_KEY_LENGTH) throw invalid(`key is ${bytes} bytes of UTF-8, the maximum is ${MAX_KEY_LENGTH}`);
}

function nonZero(random: (n: number) => Uint8Array, n: number): Uint8Array {
  for (;;) {
    const id = random(n);
    if (id.some((b) => b !== 0)) return id;
  }
}
