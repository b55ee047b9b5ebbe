/**
 * `connect`: checks its options, loads the identity, grants and capabilities it is given,
 * and opens a {@link PowerStore} on the cluster, returned once `n − t` servers are connected.
 */
import { createCodec } from '@powerstore/erasure';
import { INSTANCE_ID_LENGTH, MIN_STRIPE_SIZE, WriterSession } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { parseCluster, parseGrants } from './cluster.js';
import { invalid, invalidInput } from './errors.js';
import { decodeCapability, type Capability } from './identity/capability.js';
import { Identity } from './identity/identity.js';
import { checkKeyEpoch, KeyRing } from './identity/keyring.js';
import { PowerStore } from './store.js';
import { DEFAULT_LIVENESS } from './host/connection.js';
import { checkTransport } from './transport.js';
import {
  DEFAULT_MAX_VALUE_BYTES,
  DEFAULT_TIMEOUT_MS,
  STRIPE_BYTES,
  type ConnectOptions,
  type IdentifiedStore,
  type Store,
} from './types.js';

/**
 * Connects to a cluster: opens a WebSocket to every server and resolves once `n − t`
 * are connected (the quorum every operation needs), or fails with
 * `QUORUM_UNREACHABLE` saying which servers could not be reached and why.
 */
export async function connect(options: ConnectOptions & { readonly identity: Identity | object }): Promise<IdentifiedStore>;
export async function connect(options: ConnectOptions): Promise<Store>;
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
  const keyEpoch = checkKeyEpoch(options.keyEpoch ?? 0);
  const keys = new KeyRing(
    identity?.encryptionRoot && { namespace: identity.namespace, root: identity.encryptionRoot },
    parseCapabilities(options.capabilities),
  );
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  if (!(timeoutMs > 0)) throw invalid(`timeoutMs must be positive, got ${String(timeoutMs)}`);
  const liveness = { ...DEFAULT_LIVENESS, ...options.liveness };
  for (const [name, ms] of Object.entries(liveness)) {
    if (!(typeof ms === 'number' && ms > 0)) throw invalid(`liveness.${name} must be positive, got ${String(ms)}`);
  }
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
    new WriterSession({
      crypto,
      cluster: cluster.identity,
      signer: identity.signer,
      instance: random(INSTANCE_ID_LENGTH),
      grants,
      // Writes that sign in the same turn (putMany, concurrent puts) share one signature,
      // which every server then checks once.
      certificateBatching: nextTurn,
    });
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
    liveness,
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

/** The read capabilities `connect` was given, decoded; `INVALID_ARGUMENT` (source `capabilities`) naming the first bad one. */
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

/** Runs `f` after the current turn of the event loop: `setImmediate` in Node, a zero timeout in browsers. */
function nextTurn(f: () => void): void {
  if (typeof setImmediate === 'function') setImmediate(f);
  else setTimeout(f, 0);
}
