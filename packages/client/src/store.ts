/**
 * `connect()` and the store it returns: the host of the protocol's client operations.
 * Every round goes to all servers at once; an operation finishes as soon as its quorum
 * predicate holds, without waiting for slow servers.
 */
import { createCodec, type ErasureCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  decodeMessage,
  encodeMessage,
  encodePublicKey,
  grantId,
  grantToJson,
  INSTANCE_ID_LENGTH,
  MAX_EXPIRY,
  MAX_KEY_LENGTH,
  ownerIdOf,
  ProtocolError,
  quorum,
  ReadOperation,
  signGrant,
  toHex,
  WriteOperation,
  WriterSession,
  decodePublicKey,
  type ClientOperation,
  type Cluster,
  type ClusterConfig,
  type CryptoProvider,
  type GrantJson,
  type Message,
  type Outgoing,
  type ReadResult,
  type Reply,
  type Step,
  type WriteValue,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { parseCluster, parseGrants } from './cluster.js';
import { ServerConnection, type ServerStatus } from './connection.js';
import { PowerStoreError, invalid, type PowerStoreErrorCode } from './errors.js';
import { Identity } from './identity.js';

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
  /** The cluster: the contents of `cluster.json` (public). */
  readonly cluster: object;
  /**
   * The identity to write with: an {@link Identity}, or the JSON of an identity file.
   * Without one the store can only read. It may write its own namespace
   * (`store.namespace`), and what `grants` cover.
   */
  readonly identity?: Identity | object;
  /** Grants this identity holds (the JSON `powerstore grant` prints), for keys outside its namespace. */
  readonly grants?: readonly object[];
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
  /** The protocol round: a write is clock → store → complete, a read collect → filter. */
  readonly phase: 'clock' | 'store' | 'complete' | 'collect' | 'filter';
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
  /** Who signed the write read, and the grant it relied on (absent when never written). */
  readonly writer?: { readonly publicKey: string; readonly ownerId: string; readonly grant?: string };
  /** Rounds the read took (always 2). */
  readonly rounds: number;
  /** Server ids (1-based) that answered the read's FILTER round. */
  readonly answered: readonly number[];
  /** Servers caught misbehaving during the read. */
  readonly misbehaving: readonly { readonly id: number; readonly reason: string }[];
}

/** When a grant expires: a `Date`, milliseconds since the epoch, or `'never'` (the year 9999). */
export type Expiry = Date | number | 'never';

/** A connected PowerStore. */
export interface Store {
  /** The cluster's `t` and `n`. */
  readonly cluster: ClusterConfig;
  /** Whether `put` and `delete` are possible (an identity was given). */
  readonly canWrite: boolean;
  /** The identity's public key (base64url), if any. */
  readonly publicKey: string | undefined;
  /** The identity's owner id, if any. */
  readonly ownerId: string | undefined;
  /** `~<ownerId>/`: the prefix of the keys this identity owns, if any. */
  readonly namespace: string | undefined;
  put(key: string, value: Uint8Array | string, options?: OperationOptions): Promise<void>;
  /** The latest value, or `undefined` if the key was never written or was deleted. */
  get(key: string, options?: OperationOptions): Promise<Uint8Array | undefined>;
  /** A linearizable delete: a tombstone write. */
  delete(key: string, options?: OperationOptions): Promise<void>;
  /** Reads `key` and reports the timestamp, size, writer and which servers answered or misbehaved. */
  stat(key: string, options?: OperationOptions): Promise<KeyStat>;
  /**
   * Signs a grant letting `grantee` (a public key, base64url) write keys starting with
   * `prefix` (inside this identity's namespace, or anywhere for the admin) until `expires`.
   * Give the returned JSON to the grantee; it passes it to `connect({ grants })`.
   */
  grant(grantee: string, prefix: string, expires: Expiry): Promise<GrantJson>;
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
  if (typeof options !== 'object' || options === null) throw invalid('connect() needs { cluster, identity? }');
  const cluster = parseCluster(options.cluster);
  const crypto = createCryptoProvider();
  const identity = options.identity === undefined ? undefined : options.identity instanceof Identity ? options.identity : await Identity.fromJSON(options.identity);
  const grants = parseGrants(crypto, cluster, options.grants);
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!(timeoutMs > 0)) throw invalid(`timeoutMs must be positive, got ${String(timeoutMs)}`);
  const maxValueBytes = options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES;
  if (!Number.isSafeInteger(maxValueBytes) || maxValueBytes < 0) throw invalid('maxValueBytes must be a non-negative integer');
  const codec = await createCodec({ k: cluster.config.t + 1, n: cluster.config.n });
  const random = (n: number) => globalThis.crypto.getRandomValues(new Uint8Array(n));
  // A writer id of its own per connect(): two stores of one identity never share a timestamp.
  const session =
    identity && new WriterSession({ crypto, cluster: cluster.identity, signer: identity.signer, instance: random(INSTANCE_ID_LENGTH), grants });
  const store = new PowerStore({ cluster, crypto, codec, identity, session, random, timeoutMs, maxValueBytes, onServerStatus: options.onServerStatus });
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
  /** Replies are fed one at a time: the operation may hash and verify asynchronously. */
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

interface StoreParts {
  readonly cluster: Cluster;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly identity: Identity | undefined;
  readonly session: WriterSession | undefined;
  readonly random: (n: number) => Uint8Array;
  readonly timeoutMs: number;
  readonly maxValueBytes: number;
  readonly onServerStatus: ((servers: readonly ServerStatus[]) => void) | undefined;
}

/** Protocol codes the client reports as they are; the rest are `REJECTED`. */
const PASSED_THROUGH: ReadonlySet<string> = new Set(['NOT_AUTHORIZED', 'GRANT_EXPIRED', 'REVOKED', 'QUOTA_EXCEEDED']);

function toClientError(err: unknown): unknown {
  if (!(err instanceof ProtocolError)) return err;
  if (PASSED_THROUGH.has(err.code)) return new PowerStoreError(err.code as PowerStoreErrorCode, err.message, { cause: err });
  if (err.code === 'INVALID_ARGUMENT' && !/servers refused/.test(err.message)) return invalid(err.message, err);
  return new PowerStoreError('REJECTED', err.message, { cause: err });
}

class PowerStore implements Store {
  readonly cluster: ClusterConfig;
  readonly #parts: StoreParts;
  /** Verifies candidates for reads (and remembers what it verified). */
  readonly #verifier: CertificateVerifier;
  readonly #connections: ServerConnection[];
  readonly #inFlight = new Map<number, InFlight>();
  readonly #quorumWaiters = new Set<() => void>();
  #nextOpId = 1;
  #closed = false;

  constructor(parts: StoreParts) {
    this.#parts = parts;
    this.cluster = parts.cluster.config;
    this.#verifier = parts.session?.verifier ?? new CertificateVerifier(parts.crypto, parts.cluster.identity);
    const maxFrame = parts.codec.fragmentLength(Math.max(parts.maxValueBytes, 0)) + FRAME_OVERHEAD_BYTES;
    this.#connections = parts.cluster.servers.map(
      (s, i) =>
        new ServerConnection(i, s.url, maxFrame, {
          onFrame: (index, frame) => this.#onFrame(index, frame),
          onOpen: (index) => this.#onOpen(index),
          onStatus: () => this.#statusChanged(),
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

  async put(key: string, value: Uint8Array | string, options?: OperationOptions): Promise<void> {
    const bytes = typeof value === 'string' ? new TextEncoder().encode(value) : value;
    if (!(bytes instanceof Uint8Array)) throw invalid('value must be a Uint8Array or a string');
    if (bytes.length > this.#parts.maxValueBytes) {
      throw invalid(`value of ${bytes.length} bytes exceeds the maximum of ${this.#parts.maxValueBytes} (connect's maxValueBytes)`);
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
    const { op, result, evidence } = await this.#read(key, options);
    const { crypto } = this.#parts;
    const cert = result.cert;
    return {
      key,
      exists: result.value !== undefined,
      deleted: result.value === undefined && result.ts.num > 0,
      size: result.value?.length ?? 0,
      timestamp: { num: result.ts.num, writerId: toHex(result.ts.writerId) },
      ...(cert
        ? { writer: { publicKey: encodePublicKey(cert.signer), ownerId: ownerIdOf(crypto, cert.signer), ...(cert.grant ? { grant: grantId(crypto, cert.grant) } : {}) } }
        : {}),
      rounds: result.rounds,
      answered: op.answered().map((i) => i + 1),
      misbehaving: [...evidence].map(([index, reason]) => ({ id: index + 1, reason })),
    };
  }

  async grant(grantee: string, prefix: string, expires: Expiry): Promise<GrantJson> {
    const { identity, crypto, cluster } = this.#parts;
    if (!identity) throw new PowerStoreError('NO_IDENTITY', 'granting needs an identity: connect({ cluster, identity })');
    let granteeKey: Uint8Array;
    try {
      granteeKey = decodePublicKey(grantee, 'grantee');
    } catch (err) {
      throw invalid((err as Error).message);
    }
    const expiresAt = expires === 'never' ? MAX_EXPIRY : expires instanceof Date ? expires.getTime() : expires;
    try {
      const g = await signGrant(crypto, cluster.identity, identity.signer, { grantee: granteeKey, prefix, expiresAt });
      return grantToJson(crypto, cluster.identity.id, g);
    } catch (err) {
      throw invalid((err as Error).message, err);
    }
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

  async #write(key: string, value: WriteValue, options?: OperationOptions): Promise<void> {
    checkKey(key);
    const { session, crypto, codec, random } = this.#parts;
    if (!session) {
      throw new PowerStoreError('NO_IDENTITY', 'writing needs an identity: connect({ cluster, identity }) (Identity.generate(), an identity file, or openBrowserIdentity())');
    }
    const opId = this.#nextOpId++;
    let op: WriteOperation;
    try {
      op = new WriteOperation({ config: this.cluster, crypto, codec, random, session, now: Date.now, onEvidence: (i, reason) => this.#misbehaving(i, reason) }, key, value, opId);
    } catch (err) {
      throw toClientError(err);
    }
    try {
      await this.#run(op, opId, options);
    } finally {
      op.abandon();
    }
  }

  async #read(key: string, options?: OperationOptions): Promise<{ op: ReadOperation; result: ReadResult; evidence: Map<number, string> }> {
    checkKey(key);
    const opId = this.#nextOpId++;
    const evidence = new Map<number, string>();
    const onEvidence = (i: number, reason: string) => {
      evidence.set(i, reason);
      this.#misbehaving(i, reason);
    };
    const op = new ReadOperation({ config: this.cluster, crypto: this.#parts.crypto, codec: this.#parts.codec, verifier: this.#verifier, onEvidence }, key, opId);
    const result = await this.#run(op, opId, options);
    return { op, result, evidence };
  }

  #misbehaving(index: number, reason: string): void {
    this.#connections[index]?.markMisbehaving(reason);
  }

  /** Drives one operation to its result, its failure, a timeout or an abort. */
  #run<R>(op: ClientOperation<R>, opId: number, options: OperationOptions | undefined): Promise<R> {
    if (this.#closed) return Promise.reject(new PowerStoreError('CLOSED', 'the store was closed'));
    const signal = options?.signal;
    const timeoutMs = options?.timeoutMs ?? this.#parts.timeoutMs;
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
          reject(toClientError(e));
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
    if (step.error) {
      flight.fail(step.error);
      return;
    }
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
      message = decodeMessage(frame, { n: this.cluster.n, maxFragmentLength: this.#parts.codec.fragmentLength(this.#parts.maxValueBytes) });
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
    this.#parts.onServerStatus?.(this.servers());
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
    return new PowerStoreError('QUORUM_UNREACHABLE', `need ${need} of ${this.cluster.n} servers, ${reachable} reachable: ${reasons.join(', ')}`);
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
