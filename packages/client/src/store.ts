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
  ListOperation,
  MAX_STRIPES,
  ReadOperation,
  WriteOperation,
  type ClientOperation,
  type Cluster,
  type ClusterConfig,
  type CryptoProvider,
  type GrantJson,
  type ReadResult,
  type ReadTarget,
  type WriterSession,
  type WriteValue,
} from '@powerstore/protocol';
import { issueGrant, shareCapability } from './access.js';
import {
  BATCH_BYTES_IN_FLIGHT,
  batchConcurrency,
  batchEntries,
  batchKeys,
  isBlob,
  report,
  runBatch,
  valueBytes,
  type BatchItem,
  type Settled,
} from './batch.js';
import { realClock } from './host/clock.js';
import { ServerConnection, type Liveness } from './host/connection.js';
import type { ServerStatus } from './host/link.js';
import { OperationHost } from './host/operation-host.js';
import { PowerStoreError, invalid, noIdentity, toClientError } from './errors.js';
import type { Identity } from './identity/identity.js';
import type { KeyRing } from './identity/keyring.js';
import { keyStatOf, listArguments, listResultOf } from './inspection.js';
import { checkKey } from './key-names.js';
import {
  STRIPE_BYTES,
  type AbortOptions,
  type BatchOptions,
  type BatchProgress,
  type BatchResult,
  type ByteSource,
  type Expiry,
  type GetOptions,
  type GetManyOptions,
  type GetStreamOptions,
  type KeyFailure,
  type KeyOutcome,
  type KeyRead,
  type KeyStat,
  type ListedKey,
  type ListOptions,
  type ListResult,
  type OperationOptions,
  type PutManyEntries,
  type PutManyOptions,
  type PutManyValue,
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

/** Frames carry a fragment plus metadata: room for the latter. */
const FRAME_OVERHEAD_BYTES = 64 * 1024;
/** The largest stripe layout a frame may carry (a digest per stripe). */
const MAX_LAYOUT_BYTES = 32 * MAX_STRIPES;

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
  readonly liveness: Liveness;
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
  /** Runs the operations over the connections. */
  readonly #host: OperationHost;
  /** Largest frame accepted from a server: the largest fragment `maxValueBytes` makes, plus room for the rest. */
  readonly #maxFrameBytes: number;
  #nextOpId = 1;

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
        new ServerConnection(
          i,
          s.url,
          this.#maxFrameBytes,
          {
            onFrame: (index, frame) => this.#host.receive(index, frame),
            onOpen: (index) => this.#host.opened(index),
            onStatus: () => this.#statusChanged(),
            onOversized: (index, reason, head) => this.#host.oversized(index, reason, head),
          },
          parts.liveness,
        ),
    );
    this.#host = new OperationHost({
      config: this.cluster,
      links: this.#connections,
      clock: realClock,
      timeoutMs: parts.timeoutMs,
      maxFrameBytes: this.#maxFrameBytes,
      maxValueBytes: parts.maxValueBytes,
    });
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
    await this.#write(key, { kind: 'value', ...(await sealValue(this.#parts, key, bytes, options)) }, options);
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
    const sealer = await sealerFor(this.#parts, key, options);
    const stripes = new SealedStripes(source, sealer, this.#parts.stripeBytes, expected);
    const report = options.onProgress;
    const progressOf = (op: WriteOperation) =>
      report && (() => report({ bytesDone: stripes.plaintextOf(op.bytesStored), bytesTotal: expected }));
    try {
      const value = { kind: 'stripes', source: stripes, ...(sealer.envelope ? { envelope: sealer.envelope } : {}) } as const;
      await this.#write(key, value, { signal: options.signal, timeoutMs: options.timeoutMs }, progressOf);
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

  async putMany(entries: PutManyEntries, options: PutManyOptions = {}): Promise<BatchResult<KeyOutcome>> {
    const concurrency = batchConcurrency('putMany', options.concurrency);
    // A Blob is read and sent stripe by stripe: it holds a stripe being sent and one read ahead.
    const items = batchEntries(entries, 2 * this.#parts.stripeBytes);
    if (!this.#parts.session) throw noIdentity();
    const bytesTotal = items.reduce((sum, item) => sum + valueBytes(item.value), 0);
    /** Bytes of the keys done, and what is stored so far of the Blobs in flight. */
    let bytesSettled = 0;
    const streaming = new Map<BatchItem<PutManyValue>, number>();
    let keys: BatchProgress = { done: 0, failed: 0, total: items.length };
    const progress = () => {
      let bytesDone = bytesSettled;
      for (const bytes of streaming.values()) bytesDone += bytes;
      report(options.onProgress, { ...keys, bytesDone, bytesTotal });
    };
    const put = async (item: BatchItem<PutManyValue>, signal: AbortSignal) => {
      const { key, value } = item;
      const common = { signal, timeoutMs: options.timeoutMs, public: options.public === true };
      if (!isBlob(value)) {
        if (typeof value !== 'string' && !(value instanceof Uint8Array))
          throw invalid('putMany: a value must be a Uint8Array, a string or a Blob');
        return this.put(key, value, common);
      }
      const onProgress =
        options.onProgress &&
        ((p: { bytesDone: number }) => {
          streaming.set(item, p.bytesDone);
          progress();
        });
      await this.putStream(key, value, { ...common, ...(onProgress ? { onProgress } : {}) });
    };
    const outcomes = await runBatch(items, put, {
      concurrency,
      maxBytes: BATCH_BYTES_IN_FLIGHT,
      signal: options.signal,
      name: 'putMany',
      onSettled: (counts, index) => {
        const item = items[index]!;
        streaming.delete(item);
        bytesSettled += valueBytes(item.value);
        keys = counts;
        if (options.onProgress) progress();
      },
    });
    return writesOf(items, outcomes);
  }

  async getMany(keys: Iterable<string>, options: GetManyOptions = {}): Promise<BatchResult<KeyRead>> {
    const concurrency = batchConcurrency('getMany', options.concurrency);
    const items = batchKeys('getMany', keys);
    const read = (item: BatchItem<undefined>, signal: AbortSignal) =>
      this.get(item.key, { signal, timeoutMs: options.timeoutMs, raw: options.raw === true });
    const outcomes = await runBatch(items, read, {
      concurrency,
      maxBytes: Infinity,
      signal: options.signal,
      name: 'getMany',
      onSettled: (counts) => options.onProgress?.(counts),
    });
    return readsOf(items, outcomes);
  }

  async deleteMany(keys: Iterable<string>, options: BatchOptions = {}): Promise<BatchResult<KeyOutcome>> {
    const concurrency = batchConcurrency('deleteMany', options.concurrency);
    const items = batchKeys('deleteMany', keys);
    if (!this.#parts.session) throw noIdentity();
    const outcomes = await runBatch(items, (item, signal) => this.delete(item.key, { signal, timeoutMs: options.timeoutMs }), {
      concurrency,
      maxBytes: Infinity,
      signal: options.signal,
      name: 'deleteMany',
      onSettled: (counts) => options.onProgress?.(counts),
    });
    return writesOf(items, outcomes);
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

  async *keys(prefix: string, options: Omit<ListOptions, 'cursor'> = {}): AsyncIterable<ListedKey> {
    let cursor: string | undefined;
    do {
      const page = await this.list(prefix, cursor === undefined ? options : { ...options, cursor });
      yield* page.keys;
      cursor = page.cursor;
    } while (cursor !== undefined);
  }

  async grant(grantee: string, prefix: string, expires: Expiry): Promise<GrantJson> {
    return issueGrant(this.#parts, grantee, prefix, expires);
  }

  close(): void {
    this.#host.close();
  }

  /** Resolves once `n − t` servers are connected. */
  waitForQuorum(timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
    return this.#host.waitForQuorum(timeoutMs, signal);
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
    this.#host.blame(index, reason);
  }

  /** Drives one operation to its result, its failure, a timeout or an abort (see {@link OperationHost.run}). */
  #run<R>(
    op: ClientOperation<R>,
    opId: number,
    options: OperationOptions | undefined,
    onEvidence: (server: number, reason: string) => void,
    perRound = false,
  ): Promise<R> {
    return this.#host.run(op, opId, {
      signal: options?.signal,
      timeoutMs: options?.timeoutMs,
      onProgress: options?.onProgress,
      perRound,
      onEvidence,
    });
  }

  #statusChanged(): void {
    // A connection can fail while the constructor is still making the host.
    (this.#host as OperationHost | undefined)?.linksChanged();
    this.#parts.onServerStatus?.(this.servers());
  }
}

/** What `putMany` and `deleteMany` resolve with: each key's outcome in the order given, and the failures. */
function writesOf<V>(items: readonly BatchItem<V>[], outcomes: readonly Settled<unknown>[]): BatchResult<KeyOutcome> {
  const results = outcomes.map((o, i): KeyOutcome =>
    o.ok ? { key: items[i]!.key, ok: true } : { key: items[i]!.key, ok: false, error: o.error },
  );
  return { results, failed: results.filter((r): r is KeyFailure => !r.ok) };
}

/** What `getMany` resolves with: each key's value or failure in the order given, and the failures. */
function readsOf<V>(items: readonly BatchItem<V>[], outcomes: readonly Settled<Uint8Array | undefined>[]): BatchResult<KeyRead> {
  const results = outcomes.map((o, i): KeyRead =>
    o.ok ? { key: items[i]!.key, ok: true, value: o.value } : { key: items[i]!.key, ok: false, error: o.error },
  );
  return { results, failed: results.filter((r): r is KeyFailure => !r.ok) };
}
