/**
 * `connect()` and the store it returns: the host of the protocol's client operations.
 * Every round goes to all servers at once; an operation finishes as soon as its quorum
 * predicate holds, without waiting for slow servers.
 */
import { createCodec, type ErasureCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  decodeHeader,
  decodeMessage,
  encodeMessage,
  encodePublicKey,
  grantId,
  grantToJson,
  INSTANCE_ID_LENGTH,
  MAX_EXPIRY,
  ListOperation,
  MAX_KEY_LENGTH,
  MAX_LIST_LIMIT,
  MAX_STRIPES,
  MIN_STRIPE_SIZE,
  ownerIdOf,
  namespaceOf,
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
  type ErrorReply,
  type GrantJson,
  type Message,
  type Outgoing,
  type ReadResult,
  type ReadTarget,
  type StripeLayout,
  type StripeSource,
  type Reply,
  type Step,
  type WriteValue,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { decodeCapability, scopeProblem, type Capability } from './identity/capability.js';
import { parseCluster, parseGrants } from './cluster.js';
import { ServerConnection, type ServerStatus } from './connection.js';
import {
  ENCRYPTED_OVERHEAD,
  MAX_OVERHEAD,
  openEncrypted,
  parseEnvelope,
  plaintextSize,
  PUBLIC_OVERHEAD,
  sealEncrypted,
  sealPublic,
  stripeMismatch,
  writeNonce,
  writeOrigin,
  type StripePosition,
  type WriteOrigin,
} from './values/encryption.js';
import { PowerStoreError, invalid, invalidInput, toClientError } from './errors.js';
import { Identity } from './identity/identity.js';
import { KeyRing } from './identity/keyring.js';
import { RoundBook, type Round } from './rounds.js';
import { checkTransport } from './transport.js';
import { chunksOf, clampRange, firstStripe, stripesOf } from './values/streams.js';

/** Largest value `put` accepts by default: 64 MiB. */
export const DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024;
/** Default time an operation (or `connect`) may take before it fails. */
export const DEFAULT_TIMEOUT_MS = 30_000;
/** A server with this much unsent data is treated as slow and skipped for new rounds. */
const SEND_HIGH_WATER_BYTES = 64 * 1024 * 1024;
/** Frames carry a fragment plus metadata: room for the latter. */
const FRAME_OVERHEAD_BYTES = 64 * 1024;
/** The largest stripe layout a frame may carry (a digest per stripe). */
const MAX_LAYOUT_BYTES = 32 * MAX_STRIPES;

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
  /**
   * Read capabilities (what `store.share` returns) for keys or prefixes of other
   * namespaces: the keys to decrypt their values (and to encrypt what a grant lets this
   * identity write there).
   */
  readonly capabilities?: readonly string[];
  /**
   * The key epoch new encrypted values are written at (default 0). Capabilities are for one
   * epoch: to revoke them, rewrite the values at a higher epoch and share anew (the owner
   * reads every epoch).
   */
  readonly keyEpoch?: number;
  /** Time an operation, and `connect` itself, may take. Default 30 s. */
  readonly timeoutMs?: number;
  /** Aborts `connect`. */
  readonly signal?: AbortSignal;
  /** Largest value `put` accepts. Default 64 MiB, which the servers' default frame limit fits at t = 1. */
  readonly maxValueBytes?: number;
  /**
   * Plaintext bytes per stripe of the values `putStream` writes: 64 KiB to 32 MiB, default
   * {@link STRIPE_BYTES} (2 MiB). Readers learn each value's stripe size from the value.
   */
  readonly stripeBytes?: number;
  /** Called whenever a server's status changes (connected, closed, misbehaving). */
  readonly onServerStatus?: (servers: readonly ServerStatus[]) => void;
  /**
   * Accept plaintext `ws://` URLs to hosts that are not loopback. Without it `connect`
   * refuses them (`INVALID_ARGUMENT`) before any traffic: anyone on the network could read
   * the values and tamper with the traffic. Loopback `ws://` and any `wss://` need nothing.
   */
  readonly allowInsecure?: boolean;
}

/**
 * How to give up on an operation, the same for every operation that takes them. Both
 * are honoured wherever this type is accepted.
 */
export interface AbortOptions {
  /** Cancels the operation: it fails with `ABORTED` (a stream errors with it). */
  readonly signal?: AbortSignal;
  /**
   * Milliseconds the operation (a streamed one: each of its rounds) may take before it fails
   * with `QUORUM_UNREACHABLE`, which names the servers that did not answer. Default:
   * connect's `timeoutMs`.
   */
  readonly timeoutMs?: number;
}

/** Per-operation options. */
export interface OperationOptions extends AbortOptions {
  /** Called as each round starts and, while large frames drain, about every 100 ms. */
  readonly onProgress?: (progress: Progress) => void;
}

/** Options of `put`. */
export interface PutOptions extends OperationOptions {
  /**
   * Store the value as plaintext, readable by anyone who reaches a server (public web
   * assets). Without it, values in a namespace are encrypted at the client.
   */
  readonly public?: boolean;
  /** Store the bytes exactly as given, with no envelope: for migrations and tests. */
  readonly raw?: boolean;
}

/** Options of `get`. */
export interface GetOptions extends OperationOptions {
  /** The stored bytes as they are, envelope and ciphertext included, without decrypting. */
  readonly raw?: boolean;
  /**
   * Only these bytes (clamped to the value's length): a large value's read touches only the
   * stripes they lie in, and an encrypted one's stripe 0, which every stripe must match.
   */
  readonly range?: ByteRange;
}

/** Bytes for {@link Store.putStream}: a Web `ReadableStream`, an async iterable of chunks (a Node stream), or a `Blob`/`File`. */
export type ByteSource = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Blob;

/** How far a streamed transfer is, in bytes of plaintext. */
export interface TransferProgress {
  /** Bytes of the value stored (putStream: acknowledged by `n − t` servers) or delivered (getStream) so far. */
  readonly bytesDone: number;
  /** Bytes in all: `undefined` while a put's source has not told (an async iterable without `size`). */
  readonly bytesTotal: number | undefined;
}

/**
 * Options of `putStream`. An aborted upload leaves nothing visible (the servers collect
 * what they hold of it); `timeoutMs` bounds each round of the upload, not the whole upload.
 */
export interface PutStreamOptions extends AbortOptions {
  /** Called as stripes are stored, and once at the end. */
  readonly onProgress?: (progress: TransferProgress) => void;
  /** Bytes the source will yield, for progress (a `Blob` knows its own). A source yielding another count fails the put. */
  readonly size?: number;
  /** Store the value as plaintext, readable by anyone who reaches a server (see `put`). */
  readonly public?: boolean;
}

/** A byte range of a value: `start` inclusive, `end` exclusive (as `Blob.slice`); `end` defaults to the value's end. */
export interface ByteRange {
  readonly start: number;
  readonly end?: number;
}

/** Options of `getStream`. `timeoutMs` bounds each round of the read, not the whole stream. */
export interface GetStreamOptions extends AbortOptions {
  /** Only these bytes: reads only the stripes they lie in (and an encrypted value's stripe 0). Clamped to the value's length. */
  readonly range?: ByteRange;
  /** Called as bytes are delivered. */
  readonly onProgress?: (progress: TransferProgress) => void;
}

/** A value being read: the whole value's size, the range delivered, and the bytes. */
export interface ValueStream {
  /** Bytes in the whole value (plaintext). */
  readonly size: number;
  /** First byte delivered. */
  readonly start: number;
  /** One past the last byte delivered. */
  readonly end: number;
  /**
   * The bytes of `[start, end)`, read stripe by stripe as the consumer pulls: at most a few
   * stripes are held. Every stripe is verified (and decrypted) before it is delivered. It
   * errors with `VALUE_CHANGED` if the value is overwritten so often during the read that
   * the servers collect the version being streamed (the bytes delivered are all of one version).
   */
  readonly stream: ReadableStream<Uint8Array>;
}

/** Plaintext bytes per stripe of values written with `putStream` (measured: see bench/large). */
export const STRIPE_BYTES = 2 * 1024 * 1024;

/** How a key's values are stored: the envelope's bytes per stripe, and the function that seals a stripe. */
interface Sealer {
  readonly overhead: number;
  /** Seals `value`: one stripe of a streamed value at `position`, or (without) a value written whole. */
  seal(value: Uint8Array, position?: StripePosition): Promise<Uint8Array>;
}

/** Options of `share`. */
export interface ShareOptions {
  /** The key epoch the capability is for; default the store's `keyEpoch`. */
  readonly keyEpoch?: number;
}

/** Where an operation is: its round, and how much of that round's data is on the wire. */
export interface Progress {
  /** The protocol round: a write is clock → store → complete, a read collect → filter. */
  readonly phase: 'clock' | 'store' | 'complete' | 'collect' | 'filter' | 'list';
  /** Bytes of this round's frames handed to the network so far, over all servers. */
  readonly bytesSent: number;
  /** Bytes of this round's frames, over all servers. */
  readonly bytesTotal: number;
}

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

/** What `stat` reports about a key. */
export interface KeyStat {
  readonly key: string;
  /** Whether the key holds a value (false when never written or deleted). */
  readonly exists: boolean;
  /** Deleted by a tombstone write. */
  readonly deleted: boolean;
  /** Bytes in the value (its plaintext, for an encrypted value). */
  readonly size: number;
  /** Whether the value is encrypted (false for `{ public: true }` values, keys outside namespaces, and tombstones). */
  readonly encrypted: boolean;
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

/** One key as `list` finds it. */
export interface ListedKey {
  readonly key: string;
  /**
   * Bytes the servers store for the value (`stat` tells the plaintext's): in a namespace,
   * the envelope, 64 bytes over an encrypted value's plaintext and 4 over a public one's.
   * `undefined` only for a write that completed while the listing ran.
   */
  readonly size: number | undefined;
  /** Timestamp of the latest completed write: its number and writer id (hex). */
  readonly timestamp: { readonly num: number; readonly writerId: string };
}

/** One page of `list`. */
export interface ListResult {
  /** Keys in code point order (UTF-8 byte order); deleted keys are left out. */
  readonly keys: readonly ListedKey[];
  /**
   * Pass it as `cursor` for the next page; `undefined` once the listing is complete. A
   * page may hold fewer than `limit` keys, even none, and still have a cursor: servers
   * read at most `MAX_LIST_SCAN` keys per page, writes never completed included.
   */
  readonly cursor: string | undefined;
}

/** Options of `list`. */
export interface ListOptions extends OperationOptions {
  /** Most keys in the page, 1–1000 (default 1000). */
  readonly limit?: number;
  /** Where to continue: the previous page's `cursor`. */
  readonly cursor?: string;
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
  /**
   * Writes `value`. In a namespace (`~<ownerId>/…`) it is encrypted at the client unless
   * `options.public`; keys outside every namespace (only the admin writes them) are stored
   * as given.
   */
  put(key: string, value: Uint8Array | string, options?: PutOptions): Promise<void>;
  /**
   * The latest value, or `undefined` if the key was never written or was deleted. An
   * encrypted value is decrypted: `NOT_AUTHORIZED` when this store holds no key for it,
   * `TAMPERED` when it fails authentication; it is never returned undecrypted.
   */
  get(key: string, options?: GetOptions): Promise<Uint8Array | undefined>;
  /**
   * Writes a value of any size from a stream, with bounded memory: the value is cut into
   * stripes, each erasure-coded and sent as it is read, and becomes visible all at once
   * when the last stripe is stored (readers see the whole old value or the whole new one).
   * Encrypted like `put`. Resolves with the bytes stored.
   */
  putStream(key: string, source: ByteSource, options?: PutStreamOptions): Promise<{ readonly size: number }>;
  /**
   * The latest value as a stream (or `undefined` if the key was never written or was
   * deleted): linearizable like `get`, and every stripe is verified before it is delivered.
   */
  getStream(key: string, options?: GetStreamOptions): Promise<ValueStream | undefined>;
  /** A linearizable delete: a tombstone write. */
  delete(key: string, options?: OperationOptions): Promise<void>;
  /** Reads `key` and reports the timestamp, size, writer and which servers answered or misbehaved. */
  stat(key: string, options?: OperationOptions): Promise<KeyStat>;
  /**
   * One page of the keys starting with `prefix` ('' for all) that hold a value. Each key
   * comes with a certificate the client checks, so a Byzantine server can neither invent
   * keys nor hide one whose write completed before the listing began; writes completing
   * meanwhile may or may not appear. Page on with `cursor`.
   */
  list(prefix: string, options?: ListOptions): Promise<ListResult>;
  /**
   * Signs a grant letting `grantee` (a public key, base64url) write keys starting with
   * `prefix` (inside this identity's namespace, or anywhere for the admin) until `expires`.
   * Give the returned JSON to the grantee; it passes it to `connect({ grants })`.
   */
  grant(grantee: string, prefix: string, expires: Expiry): Promise<GrantJson>;
  /**
   * A read capability for `keyOrPrefix`: one key, or with a trailing `/` every key under
   * that prefix (`…/photos/` covers `…/photos/cat.jpg`, never `…/photos2/…`). A URL-safe
   * secret string; whoever holds it passes it to `connect({ capabilities })` to decrypt
   * those values. Revoke by rewriting the values at a higher `keyEpoch`.
   */
  share(keyOrPrefix: string, options?: ShareOptions): Promise<string>;
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
  checkTransport(cluster, options.allowInsecure);
  const crypto = createCryptoProvider();
  const identity =
    options.identity === undefined
      ? undefined
      : options.identity instanceof Identity
        ? options.identity
        : await Identity.fromJSON(options.identity);
  const grants = parseGrants(crypto, cluster, options.grants);
  const keyEpoch = options.keyEpoch ?? 0;
  if (!isEpoch(keyEpoch)) throw invalid(`keyEpoch must be an integer from 0 to ${2 ** 32 - 1}`);
  const keys = new KeyRing(
    identity?.encryptionRoot && { namespace: identity.namespace, root: identity.encryptionRoot },
    parseCapabilities(options.capabilities),
  );
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!(timeoutMs > 0)) throw invalid(`timeoutMs must be positive, got ${String(timeoutMs)}`);
  const maxValueBytes = options.maxValueBytes ?? DEFAULT_MAX_VALUE_BYTES;
  if (!Number.isSafeInteger(maxValueBytes) || maxValueBytes < 0) throw invalid('maxValueBytes must be a non-negative integer');
  const stripeBytes = options.stripeBytes ?? STRIPE_BYTES;
  if (!Number.isSafeInteger(stripeBytes) || stripeBytes < MIN_STRIPE_SIZE || stripeBytes > 32 * 1024 * 1024) {
    throw invalid(`stripeBytes must be an integer from ${MIN_STRIPE_SIZE} to ${32 * 1024 * 1024}`);
  }
  const codec = await createCodec({ k: cluster.config.t + 1, n: cluster.config.n });
  const random = (n: number) => globalThis.crypto.getRandomValues(new Uint8Array(n));
  // A writer id of its own per connect(): two stores of one identity never share a timestamp.
  const session =
    identity &&
    new WriterSession({ crypto, cluster: cluster.identity, signer: identity.signer, instance: random(INSTANCE_ID_LENGTH), grants });
  const store = new PowerStore({
    cluster,
    crypto,
    codec,
    identity,
    session,
    keys,
    keyEpoch,
    random,
    timeoutMs,
    maxValueBytes,
    stripeBytes,
    onServerStatus: options.onServerStatus,
  });
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

interface StoreParts {
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

class PowerStore implements Store {
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
    await this.#write(key, { kind: 'value', value: await this.#seal(key, bytes, options) }, options);
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

  /** What is stored for `value`: see `encryption.ts`. */
  async #seal(key: string, value: Uint8Array, options: PutOptions | undefined): Promise<Uint8Array> {
    if (options?.raw && options.public) throw invalid('put: { raw } and { public } exclude each other');
    if (options?.raw) return value;
    return (await this.#sealer(key, options)).seal(value);
  }

  /** How values of `key` are stored: the envelope's overhead per stripe and the function that makes it. */
  async #sealer(key: string, options: { readonly public?: boolean } | undefined): Promise<Sealer> {
    // Keys outside every namespace are the admin's (cluster-wide settings, not anyone's data): stored as given.
    if (namespaceOf(key) === undefined) return { overhead: 0, seal: async (value) => value };
    if (options?.public) return { overhead: PUBLIC_OVERHEAD, seal: async (value) => sealPublic(value) };
    const { keys, keyEpoch, identity } = this.#parts;
    if (identity && !identity.encryptionRoot && key.startsWith(identity.namespace)) {
      throw new PowerStoreError(
        'NOT_AUTHORIZED',
        `cannot encrypt ${JSON.stringify(key)}: this identity was made from a bare signer and has no encryption root (pass its seed or an EncryptionRoot to new Identity); or write it as plaintext with { public: true }`,
      );
    }
    const found = await keys.leaf(key, keyEpoch);
    if ('missing' in found) {
      throw new PowerStoreError(
        'NOT_AUTHORIZED',
        `cannot encrypt ${JSON.stringify(key)}: ${found.missing}; or write it as plaintext with { public: true }`,
      );
    }
    const leaf = found.leaf;
    return { overhead: ENCRYPTED_OVERHEAD, seal: (value, position) => sealEncrypted(key, value, leaf, keyEpoch, position) };
  }

  /** The plaintext of what `read` returned for `key`: see `encryption.ts`. */
  async #open(key: string, result: ReadResult, raw: boolean | undefined): Promise<Uint8Array | undefined> {
    const stored = result.value;
    if (stored === undefined || raw || namespaceOf(key) === undefined) return stored;
    return this.#openStripe(key, stored, result, { index: 0, count: 1 });
  }

  /**
   * The plaintext of stripe `position.index` of `position.count` (0 of 1 for a value written
   * whole) of what was read for `key`. `origin` is the write of the value's stripe 0, which
   * every other stripe must come from (see `stripeMismatch`); the caller passes it for every
   * stripe but stripe 0 of an encrypted value.
   */
  async #openStripe(
    key: string,
    stored: Uint8Array,
    result: ReadResult,
    position: { index: number; count: number },
    origin?: WriteOrigin,
  ): Promise<Uint8Array> {
    if (namespaceOf(key) === undefined) return stored;
    const envelope = parseEnvelope(stored);
    if (envelope.kind === 'unknown') {
      throw new PowerStoreError(
        'UNKNOWN_FORMAT',
        `the value of ${JSON.stringify(key)} cannot be read: ${envelope.reason}; get it with { raw: true } for the stored bytes`,
      );
    }
    const writer = result.cert ? ` (written by ${encodePublicKey(result.cert.signer)} at timestamp ${result.ts.num})` : '';
    const mismatch = stripeMismatch(envelope, position, origin);
    if (mismatch !== undefined) {
      throw new PowerStoreError(
        'TAMPERED',
        `stripe ${position.index} of ${position.count} of the value of ${JSON.stringify(key)}${writer} ${mismatch}; it is not returned`,
      );
    }
    if (envelope.kind === 'public') return envelope.value;
    const found = await this.#parts.keys.leaf(key, envelope.epoch);
    if ('missing' in found) {
      throw new PowerStoreError('NOT_AUTHORIZED', `the value of ${JSON.stringify(key)} is encrypted and ${found.missing}`);
    }
    const opened = await openEncrypted(key, envelope, found.leaf);
    // The owner's root derives the one right key of this name and epoch, so a key check that
    // differs under it means the value was sealed for another name: moved, i.e. tampered. A
    // capability's key is only as right as the string it came from, so there it may be either.
    if (opened === 'wrong-key' && found.from === 'capability') {
      throw new PowerStoreError(
        'NOT_AUTHORIZED',
        `the value of ${JSON.stringify(key)}${writer} is encrypted under another key than the one the capability covering it gives (a capability not made by the namespace's owner, or a value moved from another key); it is not returned`,
      );
    }
    if (opened !== 'wrong-key' && opened !== 'tampered') return opened;
    throw new PowerStoreError(
      'TAMPERED',
      opened === 'wrong-key'
        ? `the value of ${JSON.stringify(key)}${writer} was encrypted for another key name (moved from another key, or sealed with a key its owner never derived for this one); it is not returned`
        : `the value of ${JSON.stringify(key)}${writer} failed authentication: its ciphertext, header or key name is not what was encrypted (altered, or moved from another key or version); it is not returned`,
    );
  }

  async putStream(key: string, source: ByteSource, options: PutStreamOptions = {}): Promise<{ readonly size: number }> {
    this.#writerFor(key);
    const blobSize = typeof Blob !== 'undefined' && source instanceof Blob ? source.size : undefined;
    const expected = options.size ?? blobSize;
    if (expected !== undefined && !(Number.isSafeInteger(expected) && expected >= 0))
      throw invalid('putStream: size must be an integer ≥ 0');
    const sealer = await this.#sealer(key, options);
    const stripeSize = this.#parts.stripeBytes + sealer.overhead;
    const plain = stripesOf(chunksOf(source), this.#parts.stripeBytes)[Symbol.asyncIterator]();
    const nonce = writeNonce();
    let ahead: IteratorResult<Uint8Array> | undefined;
    let index = 0;
    let total = 0;
    const stripes: StripeSource = {
      stripeSize,
      next: async () => {
        ahead ??= await plain.next();
        if (ahead.done) return undefined;
        const current = ahead.value;
        // One stripe of lookahead: whether this one is the last goes into its envelope.
        ahead = await plain.next();
        total += current.length;
        if (expected !== undefined && (total > expected || (ahead.done && total !== expected))) {
          throw invalid(`putStream: the source yielded ${total > expected ? 'more' : 'fewer'} than the ${expected} bytes announced`);
        }
        return sealer.seal(current, { nonce, index: index++, last: !!ahead.done });
      },
    };
    const report = options.onProgress;
    // Stored bytes acknowledged, less the envelopes of the stripes they hold.
    const progressOf = (op: WriteOperation) =>
      report &&
      (() =>
        report({
          bytesDone: Math.max(0, op.bytesStored - sealer.overhead * Math.ceil(op.bytesStored / stripeSize)),
          bytesTotal: expected,
        }));
    try {
      await this.#write(key, { kind: 'stripes', source: stripes }, { signal: options.signal, timeoutMs: options.timeoutMs }, progressOf);
    } finally {
      void plain.return?.(undefined);
    }
    report?.({ bytesDone: total, bytesTotal: total });
    return { size: total };
  }

  async getStream(key: string, options: GetStreamOptions = {}): Promise<ValueStream | undefined> {
    const stripe = firstStripe(options.range, STRIPE_BYTES);
    const { result } = await this.#read(key, { signal: options.signal, timeoutMs: options.timeoutMs }, { stripe });
    if (result.value === undefined) return undefined;
    return this.#valueStream(key, result, options);
  }

  /**
   * The bytes of `options.range` of the value `result` read: the stripes they lie in, each
   * read (pinned to `result`'s version), verified and decrypted as the consumer pulls, with
   * the next one fetched meanwhile.
   *
   * One value, one write: the writer's certificate binds the stripes' order and number, but a
   * grantee without the key may sign one over stripes of the owner's earlier versions, each
   * of which authenticates on its own. So every stripe delivered must come from the write of
   * the value's stripe 0 (`stripeMismatch`). For an encrypted value (as the stripe `result`
   * holds says) that is stripe 0's key epoch and write nonce, and stripe 0 is read and
   * authenticated first even when the range starts later: checking a range's stripes only
   * against one another would let a range of stripe 1 alone return another version's bytes.
   * For a public value every stripe delivered must be public: public bytes are whatever the
   * key's writer chose anyway, so they need no stripe 0 and a public range costs none.
   * A read that reaches the value's end (even an empty range there) reads its last stripe,
   * sealed as the last of its write: a value cut short or extended fails there.
   */
  async #valueStream(key: string, result: ReadResult, options: GetStreamOptions): Promise<ValueStream> {
    const stored = result.value!;
    const report = options.onProgress;
    const layout = result.layout;
    if (!layout) {
      const value = await this.#openStripe(key, stored, result, { index: 0, count: 1 });
      const { start, end } = clampRange(options.range, value.length);
      const bytes = value.subarray(start, end);
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          if (bytes.length > 0) controller.enqueue(bytes);
          report?.({ bytesDone: bytes.length, bytesTotal: bytes.length });
          controller.close();
        },
      });
      return { size: value.length, start, end, stream };
    }
    const count = layout.digests.length;
    const overhead = this.#overheadOf(key, stored);
    const perStripe = layout.stripeSize - overhead;
    const size = stripedSize(layout, overhead);
    const { start, end } = clampRange(options.range, size);
    const firstStripe = Math.min(Math.floor(start / perStripe), count - 1);
    const lastStripe = end === size ? count - 1 : end > start ? Math.floor((end - 1) / perStripe) : firstStripe - 1;
    // The envelope of the stripe in hand: it says whether stripes must match stripe 0's write.
    const held = namespaceOf(key) === undefined ? undefined : parseEnvelope(stored);
    const encrypted = held?.kind === 'encrypted';
    /** Stripe `s`, verified and opened, and the write its envelope names. */
    const open = async (s: number): Promise<{ plain: Uint8Array; origin: WriteOrigin | undefined }> => {
      const reference = held === undefined || (encrypted && s === 0) ? undefined : originOf();
      let [bytes, from] = [stored, result];
      if (s !== result.stripe) {
        const { result: r } = await this.#read(
          key,
          { signal: options.signal, timeoutMs: options.timeoutMs },
          { stripe: s, pinned: result.candidate!, layout },
        );
        if (r.stripe !== s || r.value === undefined) throw new Error(`stripe ${s} came back as stripe ${String(r.stripe)}`);
        [bytes, from] = [r.value, r];
      }
      const plain = await this.#openStripe(key, bytes, from, { index: s, count }, await reference);
      const envelope = held && parseEnvelope(bytes);
      return { plain, origin: envelope && envelope.kind !== 'unknown' ? writeOrigin(envelope) : undefined };
    };
    /** The write every stripe delivered must come from: stripe 0's (authenticated) for an encrypted value, public for a public one. */
    let origin: Promise<WriteOrigin | undefined> | undefined;
    const originOf = (): Promise<WriteOrigin | undefined> => {
      if (!origin) {
        // A range from stripe 0 delivers it first (see fetch); one starting later reads and authenticates it without delivering it.
        origin = encrypted
          ? (fetched.get(0) ?? open(0)).then((o) => o.origin)
          : Promise.resolve(held?.kind === 'public' ? writeOrigin(held) : undefined);
        // Awaited by every later stripe, which reports a failure when it is pulled.
        origin.catch(() => {});
      }
      return origin;
    };
    const fetched = new Map<number, Promise<{ plain: Uint8Array; origin: WriteOrigin | undefined }>>();
    const fetch = (s: number) => {
      let p = fetched.get(s);
      if (!p) {
        p = open(s);
        // A prefetched stripe that fails is reported when it is pulled, not as an unhandled rejection.
        p.catch(() => {});
        fetched.set(s, p);
        // Stripe 0 is dropped from `fetched` once delivered: take its write now.
        if (s === 0 && encrypted) void originOf();
      }
      return p;
    };
    let next = firstStripe;
    let delivered = 0;
    const stream = new ReadableStream<Uint8Array>(
      {
        pull: async (controller) => {
          if (next > lastStripe) {
            controller.close();
            return;
          }
          const s = next++;
          let plain: Uint8Array;
          try {
            ({ plain } = await fetch(s));
          } catch (err) {
            throw toClientError(err);
          }
          fetched.delete(s);
          if (next <= lastStripe) void fetch(next);
          const from = s === firstStripe ? start - s * perStripe : 0;
          const to = s === lastStripe ? end - s * perStripe : plain.length;
          if (to > from) controller.enqueue(plain.subarray(from, to));
          delivered += to - from;
          report?.({ bytesDone: delivered, bytesTotal: end - start });
          if (next > lastStripe) controller.close();
        },
        cancel: () => {
          fetched.clear();
        },
      },
      { highWaterMark: 0 },
    );
    return { size, start, end, stream };
  }

  /** Envelope bytes per stripe of a value of `key` whose (some) stripe is `stored`. */
  #overheadOf(key: string, stored: Uint8Array): number {
    if (namespaceOf(key) === undefined) return 0;
    const e = parseEnvelope(stored);
    if (e.kind === 'unknown')
      throw new PowerStoreError('UNKNOWN_FORMAT', `the value of ${JSON.stringify(key)} cannot be read: ${e.reason}`);
    return e.kind === 'public' ? PUBLIC_OVERHEAD : ENCRYPTED_OVERHEAD;
  }

  async delete(key: string, options?: OperationOptions): Promise<void> {
    await this.#write(key, { kind: 'tombstone' }, options);
  }

  async get(key: string, options?: GetOptions): Promise<Uint8Array | undefined> {
    const { result } = await this.#read(key, options, { stripe: firstStripe(options?.range, STRIPE_BYTES) });
    if (!result.layout) {
      const value = await this.#open(key, result, options?.raw);
      if (value === undefined || options?.range === undefined) return value;
      const { start, end } = clampRange(options.range, value.length);
      return value.subarray(start, end);
    }
    if (options?.raw)
      throw invalid(`get: { raw } reads values written whole; ${JSON.stringify(key)} is in stripes (read it with getStream)`);
    const { start, end, size, stream } = await this.#valueStream(key, result, { ...options, onProgress: undefined });
    if (end - start > this.#parts.maxValueBytes) {
      void stream.cancel();
      throw new PowerStoreError(
        'VALUE_TOO_LARGE',
        `the value of ${JSON.stringify(key)} is ${size} bytes, over the ${this.#parts.maxValueBytes} bytes get() returns in memory (connect's maxValueBytes): read it with getStream, or a range of it`,
      );
    }
    const out = new Uint8Array(end - start);
    // A reader rather than `for await`: not every browser iterates a ReadableStream.
    const reader = stream.getReader();
    for (let off = 0; ;) {
      const { done, value } = await reader.read();
      if (done) break;
      out.set(value, off);
      off += value.length;
    }
    return out;
  }

  async share(keyOrPrefix: string, options?: ShareOptions): Promise<string> {
    const problem = scopeProblem(keyOrPrefix);
    if (problem) throw invalid(`share: ${problem}`);
    const epoch = options?.keyEpoch ?? this.#parts.keyEpoch;
    if (!isEpoch(epoch)) throw invalid(`keyEpoch must be an integer from 0 to ${2 ** 32 - 1}`);
    const cap = await this.#parts.keys.share(keyOrPrefix, epoch);
    if (cap === undefined) {
      throw new PowerStoreError(
        'NOT_AUTHORIZED',
        `cannot share ${JSON.stringify(keyOrPrefix)} at key epoch ${epoch}: it is outside this identity's namespace and no capability it holds covers it`,
      );
    }
    return cap;
  }

  async stat(key: string, options?: OperationOptions): Promise<KeyStat> {
    const { op, result, evidence } = await this.#read(key, options);
    const { crypto } = this.#parts;
    const cert = result.cert;
    // Values in namespaces carry an envelope (encryption.ts); values elsewhere are stored as given.
    const envelope = result.value !== undefined && namespaceOf(key) !== undefined ? parseEnvelope(result.value) : undefined;
    return {
      key,
      exists: result.value !== undefined,
      deleted: result.value === undefined && result.ts.num > 0,
      size:
        result.value === undefined
          ? 0
          : result.layout
            ? stripedSize(result.layout, this.#overheadOf(key, result.value))
            : envelope
              ? plaintextSize(result.value, envelope)
              : result.value.length,
      encrypted: envelope?.kind === 'encrypted',
      timestamp: { num: result.ts.num, writerId: toHex(result.ts.writerId) },
      ...(cert
        ? {
            writer: {
              publicKey: encodePublicKey(cert.signer),
              ownerId: ownerIdOf(crypto, cert.signer),
              ...(cert.grant ? { grant: grantId(crypto, cert.grant) } : {}),
            },
          }
        : {}),
      rounds: result.rounds,
      answered: op.answered().map((i) => i + 1),
      misbehaving: [...evidence].map(([index, reason]) => ({ id: index + 1, reason })),
    };
  }

  async list(prefix: string, options: ListOptions = {}): Promise<ListResult> {
    if (typeof prefix !== 'string') throw invalid('prefix must be a string');
    checkKeyText(prefix, 'prefix');
    const limit = options.limit ?? MAX_LIST_LIMIT;
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIST_LIMIT) throw invalid(`limit must be an integer in 1..${MAX_LIST_LIMIT}`);
    const after = options.cursor ?? '';
    if (typeof after !== 'string' || (after !== '' && !after.startsWith(prefix))) {
      throw invalid('cursor must be a cursor that list returned for this prefix');
    }
    const opId = this.#nextOpId++;
    const onEvidence = (i: number, reason: string) => this.#misbehaving(i, reason);
    const { crypto } = this.#parts;
    const op = new ListOperation({ config: this.cluster, crypto, verifier: this.#verifier, onEvidence }, prefix, after, limit, opId);
    const page = await this.#run(op, opId, options, onEvidence);
    return {
      keys: page.keys.map((k) => ({
        key: k.key,
        size: k.size,
        timestamp: { num: k.candidate.ts.num, writerId: toHex(k.candidate.ts.writerId) },
      })),
      cursor: page.cursor,
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

function noIdentity(): PowerStoreError {
  return new PowerStoreError(
    'NO_IDENTITY',
    'writing needs an identity: connect({ cluster, identity }) (Identity.generate(), an identity file, or openBrowserIdentity())',
  );
}

function isEpoch(x: unknown): x is number {
  return Number.isSafeInteger(x) && (x as number) >= 0 && (x as number) < 2 ** 32;
}

function parseCapabilities(capabilities: unknown): Capability[] {
  if (capabilities === undefined) return [];
  if (!Array.isArray(capabilities)) throw invalidInput('capabilities', 'capabilities must be a list of strings (what store.share returns)');
  return capabilities.map((c: unknown, i) => {
    try {
      return decodeCapability(c);
    } catch (err) {
      throw invalidInput('capabilities', `capabilities[${i}]: ${(err as Error).message}`);
    }
  });
}

/** Plaintext bytes of a striped value whose stripes each carry an envelope of `overhead` bytes. */
function stripedSize(layout: StripeLayout, overhead: number): number {
  return layout.valueLength - layout.digests.length * overhead;
}

/** A lone surrogate, which UTF-8 cannot carry: it would reach the servers as U+FFFD, another key. */
const LONE_SURROGATE = /\p{Cs}/u;

function checkKey(key: unknown): asserts key is string {
  if (typeof key !== 'string' || key.length === 0) throw invalid('key must be a non-empty string');
  checkKeyText(key, 'key');
}

/** What keys and list prefixes share: well-formed Unicode, at most `MAX_KEY_LENGTH` bytes of UTF-8. */
function checkKeyText(text: string, what: 'key' | 'prefix'): void {
  if (LONE_SURROGATE.test(text)) throw invalid(`${what} must be well-formed Unicode: it holds a lone surrogate (half of a UTF-16 pair)`);
  const bytes = new TextEncoder().encode(text).length;
  if (bytes > MAX_KEY_LENGTH) throw invalid(`${what} is ${bytes} bytes of UTF-8, the maximum is ${MAX_KEY_LENGTH}`);
}
