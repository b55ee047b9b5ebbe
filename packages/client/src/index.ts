/**
 * @powerstore/client — Byzantine-fault-tolerant, linearizable key-value storage for web
 * pages and Node, talking WebSockets straight to the cluster's servers.
 *
 * ```ts
 * import { connect, Identity } from '@powerstore/client';
 * const identity = await Identity.generate();               // or Identity.fromJSON(file), openBrowserIdentity()
 * const store = await connect({ cluster, identity });        // cluster.json
 * await store.put(`${store.namespace}greeting`, 'hello');   // keys ~<ownerId>/… are this identity's
 * const bytes = await store.get(`${store.namespace}greeting`); // Uint8Array | undefined; encrypted at rest
 * const { failed } = await store.putMany([[`${store.namespace}a`, 'one'], [`${store.namespace}b`, 'two']]); // per key; not atomic
 * const cap = await store.share(`${store.namespace}photos/`);   // read capability: connect({ cluster, capabilities: [cap] })
 * store.close();
 * ```
 */
export { connect } from './connect.js';
export { DEFAULT_BATCH_CONCURRENCY, DEFAULT_MAX_VALUE_BYTES, DEFAULT_TIMEOUT_MS, MAX_BATCH_CONCURRENCY, STRIPE_BYTES } from './types.js';
/** Most keys one `list` page holds. */
export { MAX_LIST_LIMIT } from '@powerstore/protocol';
export type {
  AbortOptions,
  BatchOptions,
  BatchProgress,
  BatchResult,
  ByteRange,
  ByteSource,
  ConnectOptions,
  GetStreamOptions,
  PutStreamOptions,
  TransferProgress,
  ValueStream,
  Expiry,
  GetManyOptions,
  GetOptions,
  KeyFailure,
  KeyOutcome,
  KeyRead,
  KeyStat,
  ListedKey,
  IdentifiedStore,
  ListOptions,
  ListResult,
  OperationOptions,
  Progress,
  PutManyEntries,
  PutManyOptions,
  PutManyProgress,
  PutManyValue,
  PutOptions,
  ShareOptions,
  Store,
} from './types.js';
export { Identity } from './identity/identity.js';
export type { EncryptionRoot } from './identity/key-tree.js';
export { openBrowserIdentity } from '#identity-store';
export type { ClusterFile, GrantJson, IdentityJson } from '@powerstore/protocol';
/** Where a `JSON.parse` error is ("line L, column C") without quoting the text: for tools reading identity files. */
export { jsonErrorPosition } from '@powerstore/protocol';
export type { ServerState, ServerStatus } from './host/link.js';
export { PowerStoreError, type PowerStoreErrorCode, type PowerStoreErrorSource } from './errors.js';
