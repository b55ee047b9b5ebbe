/**
 * The public types of `@powerstore/client`: `connect`'s options, every operation's options
 * and results, the {@link Store} interface, and the defaults they name. Types only (and
 * three constants), so every module of the client can use them without importing another.
 */
import type { ClusterConfig, GrantJson } from '@powerstore/protocol';
import type { ServerStatus } from './host/link.js';
import type { Identity } from './identity/identity.js';

/** Largest value `put` accepts by default: 64 MiB. */
export const DEFAULT_MAX_VALUE_BYTES = 64 * 1024 * 1024;
/** Default time an operation (or `connect`) may take before it fails. */
export const DEFAULT_TIMEOUT_MS = 30_000;

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
  /**
   * When a server's connection is presumed dead and reopened: `silenceMs` (default 15 s)
   * without a sign of life while it owes answers, or `connectTimeoutMs` (default 10 s)
   * without opening. TCP alone notices a server cut off silently (a partition, a frozen
   * host) only after minutes; values so large that one fragment takes longer than
   * `silenceMs` to arrive over a slow link need a larger `silenceMs`.
   */
  readonly liveness?: { readonly silenceMs?: number; readonly connectTimeoutMs?: number };
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
   * Bytes in the value: an encrypted or public value's plaintext, as `stat` reports it (the
   * stored size less the envelope the write's certificate names). `undefined` for a write
   * that completed while the listing ran, and for one whose signed envelope is longer than
   * its value (only a writer of the key could sign that).
   */
  readonly size: number | undefined;
  /**
   * Bytes the servers store for the value, before erasure coding: in a namespace the
   * envelope too, 64 bytes per 2 MiB stripe over an encrypted value's plaintext and 4 over a
   * public one's. `undefined` for a write that completed while the listing ran.
   */
  readonly storedSize: number | undefined;
  /** Whether the value is encrypted, as its writer signed it (false for `{ public: true }` values, raw ones and keys outside namespaces). */
  readonly encrypted: boolean;
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

/** Keys a multi-key operation (`putMany`, `getMany`, `deleteMany`) has in flight at once unless its `concurrency` says otherwise. */
export const DEFAULT_BATCH_CONCURRENCY = 16;
/** The most keys a multi-key operation may have in flight at once. */
export const MAX_BATCH_CONCURRENCY = 1024;

/**
 * A value for `putMany`: bytes, a string (stored as UTF-8), or a `Blob`/`File`, which is read
 * only when its key's turn comes and written as `putStream` writes it (any size, in stripes).
 */
export type PutManyValue = Uint8Array | string | Blob;

/**
 * What `putMany` writes: `[key, value]` pairs (an array of pairs, a `Map`, any iterable of
 * pairs) or a plain object whose own enumerable properties are the keys.
 */
export type PutManyEntries = Iterable<readonly [string, PutManyValue]> | { readonly [key: string]: PutManyValue };

/** How far a multi-key operation is, in keys. */
export interface BatchProgress {
  /** Keys whose outcome is known: succeeded or failed. */
  readonly done: number;
  /** Of those, the keys that failed. */
  readonly failed: number;
  /** Keys in the call. */
  readonly total: number;
}

/** How far `putMany` is, in keys and in bytes of plaintext. */
export interface PutManyProgress extends BatchProgress {
  /**
   * Bytes of the values of the keys done (stored or failed), plus what is stored so far of
   * `Blob` values still in flight: `bytesTotal` once every key is done.
   */
  readonly bytesDone: number;
  /** Bytes of all the values (a string's UTF-8 bytes, a `Blob`'s size). */
  readonly bytesTotal: number;
}

/**
 * Options of `getMany` and `deleteMany` (and, with its own `onProgress`, `putMany`).
 * `signal` and `timeoutMs` apply to each key's operation: `timeoutMs` bounds each key's
 * operation, not the whole call; an abort fails the keys not yet done with `ABORTED`.
 */
export interface BatchOptions extends AbortOptions {
  /** Keys in flight at once, 1 to {@link MAX_BATCH_CONCURRENCY}; default {@link DEFAULT_BATCH_CONCURRENCY}. */
  readonly concurrency?: number;
  /** Called each time a key is done (succeeded or failed). Exceptions it throws are ignored. */
  readonly onProgress?: (progress: BatchProgress) => void;
}

/** Options of `getMany`. */
export interface GetManyOptions extends BatchOptions {
  /** The stored bytes as they are, envelope and ciphertext included, without decrypting (as `get`'s `raw`). */
  readonly raw?: boolean;
}

/** Options of `putMany`. */
export interface PutManyOptions extends Omit<BatchOptions, 'onProgress'> {
  /** Store every value as plaintext, readable by anyone who reaches a server (as `put`'s `public`). */
  readonly public?: boolean;
  /** Called each time a key is done, and as stripes of `Blob` values are stored. Exceptions it throws are ignored. */
  readonly onProgress?: (progress: PutManyProgress) => void;
}

/** A key of a multi-key operation that failed, and why. */
export interface KeyFailure {
  readonly key: string;
  readonly ok: false;
  /**
   * What the single-key operation would have failed with: a `PowerStoreError` (its `code`
   * says why), or, for a `Blob` value that could not be read, the `Blob`'s own error.
   */
  readonly error: Error;
}

/** A key `putMany` or `deleteMany` wrote, or the failure of one. */
export type KeyOutcome = { readonly key: string; readonly ok: true } | KeyFailure;

/** A key `getMany` read (`value` is `undefined` when it was never written or was deleted), or the failure of one. */
export type KeyRead = { readonly key: string; readonly ok: true; readonly value: Uint8Array | undefined } | KeyFailure;

/**
 * What a multi-key operation resolves with: every key's outcome. A key's failure never
 * rejects the call; the call rejects only when it cannot start (see {@link Store.putMany}).
 */
export interface BatchResult<R extends KeyOutcome | KeyRead = KeyOutcome> {
  /** One entry per key, in the order the keys were given. */
  readonly results: readonly R[];
  /** The keys that failed, in the order given: empty when every key succeeded. */
  readonly failed: readonly KeyFailure[];
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
  /**
   * `~<ownerId>/`: the prefix of the keys this identity owns, if any. `connect` with an
   * `identity` returns an {@link IdentifiedStore}, whose `namespace` is a `string`.
   */
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
  /**
   * Writes many keys, each as `put` writes it (a `Blob` value as `putStream` does), up to
   * `options.concurrency` at once. Not a transaction: each key is its own linearizable
   * register, written or not on its own; readers may see some of the keys written and not
   * others, and a failure leaves the other keys' writes in place. Resolves with every key's
   * outcome, in the order given; one key's failure (not authorized, over `maxValueBytes`,
   * quota, no quorum, aborted…) is reported for that key and never rejects the call. The
   * call rejects (`INVALID_ARGUMENT`, `NO_IDENTITY`) only when it cannot start: `entries`
   * not pairs of a string key and a value, the same key twice, bad options, no identity.
   */
  putMany(entries: PutManyEntries, options?: PutManyOptions): Promise<BatchResult<KeyOutcome>>;
  /**
   * Reads many keys, each as `get` reads it (each read linearizable on its own; the reads
   * of different keys are not one snapshot), up to `options.concurrency` at once. Per-key
   * results and failures as for `putMany`; rejects only on bad arguments (the same key twice).
   */
  getMany(keys: Iterable<string>, options?: GetManyOptions): Promise<BatchResult<KeyRead>>;
  /** Deletes many keys, each as `delete` does (a tombstone write); per-key results as for `putMany`. */
  deleteMany(keys: Iterable<string>, options?: BatchOptions): Promise<BatchResult<KeyOutcome>>;
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
   * Every key starting with `prefix` that holds a value, in code point order, page after
   * page as {@link list} gives them (`for await (const { key, size } of store.keys(prefix))`).
   * Each page is checked as `list` checks it; `options.limit` is the page size. Stopping
   * early (`break`) asks for no further page.
   */
  keys(prefix: string, options?: Omit<ListOptions, 'cursor'>): AsyncIterable<ListedKey>;
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

/** A {@link Store} opened with an identity: it has a namespace, its owner id and public key. */
export interface IdentifiedStore extends Store {
  readonly namespace: string;
  readonly ownerId: string;
  readonly publicKey: string;
}
