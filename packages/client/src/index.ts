/**
 * @powerstore/client — Byzantine-fault-tolerant, linearizable key-value storage for web
 * pages and Node, talking WebSockets straight to the cluster's servers.
 *
 * ```ts
 * import { connect } from '@powerstore/client';
 * const store = await connect({ cluster, credentials });   // cluster.json, writer.json
 * await store.put('greeting', 'hello');
 * const bytes = await store.get('greeting');                // Uint8Array | undefined
 * await store.delete('greeting');
 * store.close();
 * ```
 */
export { connect, DEFAULT_MAX_VALUE_BYTES, DEFAULT_TIMEOUT_MS } from './store.js';
export type { ConnectOptions, KeyStat, OperationOptions, Progress, Store } from './store.js';
export type { ClusterInfo, Credentials, ServerInfo } from './cluster.js';
export type { ServerState, ServerStatus } from './connection.js';
export { PowerStoreError, type PowerStoreErrorCode } from './errors.js';
