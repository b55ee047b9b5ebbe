/**
 * `cluster.json`, the one public file that describes a cluster, and its one validator,
 * used by servers, clients and tools alike:
 *
 * ```json
 * { "version": 2, "id": "<cluster id, base32>", "admin": "<admin public key, base64url>",
 *   "t": 1, "n": 4, "servers": [{ "id": 1, "url": "ws://127.0.0.1:7001", "publicKey": "…" }, …],
 *   "policy": { "writers": "open", "owners": [], "revoked": { "keys": [], "grants": [] },
 *               "quotas": { "default": { "bytes": 1073741824, "keys": 100000 }, "owners": {} } } }
 * ```
 *
 * `id` and `admin` are fixed for the cluster's life; the servers' public keys are fixed per
 * **key epoch** (`epochs.ts`; they are part of every candidate's validity). Replacing a
 * server's key (`powerstore-server rotate-key`) adds an epoch: `epoch` (left out while it
 * is 0) is the current one, and a server whose key was replaced lists every key it has
 * had with the epoch it started in, its current one last:
 *
 * ```json
 * { "version": 2, …, "epoch": 1, "servers": [{ "id": 1, "url": "…", "publicKey": "K1" },
 *   { "id": 2, "url": "…", "publicKey": "K2'", "keys": [{ "epoch": 0, "publicKey": "K2" }, { "epoch": 1, "publicKey": "K2'" }] }, …] }
 * ```
 *
 * `url`s may change; `policy` may be edited (servers reload it on SIGHUP) and only affects
 * which new writes are admitted.
 */
import { bytesEqual } from '../core/bytes.js';
import { clusterConfig, MAX_SERVERS, type ClusterConfig } from '../core/config.js';
import { MAX_EPOCH, type ServerKey } from './epochs.js';
import { ProtocolError } from '../core/errors.js';
import { CLUSTER_ID_LENGTH, type ClusterIdentity } from './grant.js';
import { decodePublicKey, fromBase32, isOwnerId, toBase32, encodePublicKey } from './identity.js';
import type { Quota, WritePolicy } from './policy.js';

/** Version of the file format. */
export const CLUSTER_FILE_VERSION = 2;

/** One server as the cluster file lists it. */
export interface ClusterServer {
  /** 1-based, like the paper's `s_1 … s_n`; the protocol index is `id − 1`. */
  readonly id: number;
  /** `ws://host:port` or `wss://host:port`. */
  readonly url: string;
  /**
   * The server's receipt key (base64url) in the current epoch: what its signatures in store
   * proofs of writes of that epoch are checked against, and the key its server file holds.
   */
  readonly publicKey: string;
  /**
   * Every receipt key the server has had, oldest first, each with the epoch it started in:
   * the first at 0, the last `publicKey`. Left out while it has had only `publicKey`.
   */
  readonly keys?: readonly ServerKeyJson[];
}

/** One receipt key a server has had, as the cluster file lists it. */
export interface ServerKeyJson {
  /** The first epoch of this key; it holds until the next key's `epoch`. */
  readonly epoch: number;
  readonly publicKey: string;
}

/** The policy as written in the file. */
export interface PolicyJson {
  /**
   * The policy's sequence number: 0 (or left out) for a policy never pushed. `powerstore-server
   * policy …` raises it with every signed change it pushes to the servers (and writes it here),
   * and a server keeps whichever policy it holds of the highest version (the server README,
   * "Changing the policy"). It does not change what the policy admits.
   */
  readonly version?: number;
  readonly writers: 'open' | 'owners';
  readonly owners?: readonly string[];
  readonly revoked?: { readonly keys?: readonly string[]; readonly grants?: readonly string[] };
  readonly quotas?: { readonly default?: Quota; readonly owners?: Readonly<Record<string, Quota>> };
}

/** `cluster.json` as JSON. */
export interface ClusterFile {
  readonly version: 2;
  readonly id: string;
  readonly admin: string;
  readonly t: number;
  readonly n: number;
  /** The current key epoch (`epochs.ts`); left out while it is 0. */
  readonly epoch?: number;
  readonly servers: readonly ClusterServer[];
  readonly policy: PolicyJson;
}

/** A checked cluster file, with its parts ready to use. */
export interface Cluster {
  readonly config: ClusterConfig;
  readonly identity: ClusterIdentity;
  readonly servers: readonly ClusterServer[];
  readonly policy: WritePolicy;
  /** The file, normalized: what a tool writes back after editing the policy. */
  readonly file: ClusterFile;
}

/** A cluster file that cannot be used; `field` is the JSON path of the problem. */
export class ClusterFileError extends ProtocolError {
  constructor(
    readonly field: string | undefined,
    readonly detail: string,
  ) {
    super('INVALID_ARGUMENT', field ? `field "${field}": ${detail}` : detail);
  }
}

function fail(field: string | undefined, detail: string): never {
  throw new ClusterFileError(field, detail);
}

function object(x: unknown, field: string | undefined): Record<string, unknown> {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) fail(field, 'must be a JSON object');
  return x as Record<string, unknown>;
}

function int(x: unknown, field: string, min: number, max: number): number {
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < min || x > max)
    fail(field, `must be an integer in ${min}..${max}, got ${JSON.stringify(x)}`);
  return x;
}

function strings(x: unknown, field: string, each: (s: string, field: string) => void): string[] {
  if (x === undefined) return [];
  if (!Array.isArray(x)) fail(field, 'must be a list of strings');
  return x.map((s: unknown, i) => {
    if (typeof s !== 'string') fail(`${field}[${i}]`, 'must be a string');
    each(s, `${field}[${i}]`);
    return s;
  });
}

function quota(x: unknown, field: string): Quota {
  const o = object(x, field);
  for (const k of Object.keys(o))
    if (k !== 'bytes' && k !== 'keys') fail(`${field}.${k}`, 'unknown field (a quota has "bytes" and "keys")');
  return {
    ...(o.bytes !== undefined ? { bytes: int(o.bytes, `${field}.bytes`, 0, Number.MAX_SAFE_INTEGER) } : {}),
    ...(o.keys !== undefined ? { keys: int(o.keys, `${field}.keys`, 0, Number.MAX_SAFE_INTEGER) } : {}),
  };
}

const ownerIdCheck = (s: string, field: string) => {
  if (!isOwnerId(s)) fail(field, `not an owner id (32 base32 characters): ${JSON.stringify(s)}`);
};

/** Checks the `policy` object. */
export function parsePolicy(x: unknown, field = 'policy'): { policy: WritePolicy; json: PolicyJson } {
  const o = object(x, field);
  const version = o.version === undefined ? undefined : int(o.version, `${field}.version`, 0, Number.MAX_SAFE_INTEGER);
  if (o.writers !== 'open' && o.writers !== 'owners')
    fail(`${field}.writers`, `must be "open" or "owners", got ${JSON.stringify(o.writers)}`);
  const owners = strings(o.owners, `${field}.owners`, ownerIdCheck);
  const revoked = o.revoked === undefined ? {} : object(o.revoked, `${field}.revoked`);
  const revokedKeys = strings(revoked.keys, `${field}.revoked.keys`, (s, f) => {
    try {
      decodePublicKey(s);
    } catch {
      fail(f, `not a public key (43 base64url characters): ${JSON.stringify(s)}`);
    }
  });
  const revokedGrants = strings(revoked.grants, `${field}.revoked.grants`, (s, f) => {
    if (!/^[a-z2-7]{32}$/.test(s)) fail(f, `not a grant id (32 base32 characters): ${JSON.stringify(s)}`);
  });
  const q = o.quotas === undefined ? {} : object(o.quotas, `${field}.quotas`);
  const defaultQuota = q.default === undefined ? undefined : quota(q.default, `${field}.quotas.default`);
  const ownerQuotas: Record<string, Quota> = {};
  if (q.owners !== undefined) {
    for (const [owner, v] of Object.entries(object(q.owners, `${field}.quotas.owners`))) {
      ownerIdCheck(owner, `${field}.quotas.owners`);
      ownerQuotas[owner] = quota(v, `${field}.quotas.owners.${owner}`);
    }
  }
  const quotas = { ...(defaultQuota ? { default: defaultQuota } : {}), owners: ownerQuotas };
  const policy: WritePolicy = { writers: o.writers, owners, revokedKeys, revokedGrants, quotas };
  const json: PolicyJson = {
    ...(version !== undefined ? { version } : {}),
    writers: o.writers,
    owners,
    revoked: { keys: revokedKeys, grants: revokedGrants },
    quotas,
  };
  return { policy, json };
}

/**
 * Checks a parsed `cluster.json`; throws {@link ClusterFileError} naming the field. The
 * rules are exact, because servers and clients must agree on every file: a 16-byte
 * cluster id, 32-byte Ed25519 public keys (admin, servers, revoked keys), `n = 3t + 1`
 * servers listed in order with distinct keys none of which is the admin's (nor any key a
 * server ever had: a retired key is never used again), key histories that start at epoch 0,
 * go up, end with the current key and at most at the current `epoch`, `ws://` or `wss://`
 * URLs of host and port. `version: 1` files (MAC-authenticated clusters) are refused with
 * a message saying so.
 */
export function parseClusterFile(input: unknown): Cluster {
  const o = object(input, undefined);
  if (o.version === 1 || o.serverKeys !== undefined) {
    fail(
      'version',
      'this is a version 1 cluster file (writers held every server key); PowerStore 0.2 uses signed writes: create a new cluster with `powerstore-server init`',
    );
  }
  if (o.version !== CLUSTER_FILE_VERSION) fail('version', `must be ${CLUSTER_FILE_VERSION}, got ${JSON.stringify(o.version)}`);
  if (typeof o.id !== 'string') fail('id', 'must be the cluster id (base32)');
  let id: Uint8Array;
  try {
    id = fromBase32(o.id, 'id');
  } catch {
    fail('id', 'must be base32');
  }
  if (id.length !== CLUSTER_ID_LENGTH) fail('id', `must be ${CLUSTER_ID_LENGTH} bytes of base32`);
  let admin: Uint8Array;
  try {
    admin = decodePublicKey(o.admin);
  } catch {
    fail('admin', 'must be the admin public key (43 base64url characters)');
  }
  const t = int(o.t, 't', 1, Math.floor((MAX_SERVERS - 1) / 3));
  const n = 3 * t + 1;
  if (o.n !== undefined && o.n !== n) fail('n', `must be 3t + 1 = ${n} for t = ${t}, got ${JSON.stringify(o.n)}`);
  if (!Array.isArray(o.servers) || o.servers.length !== n) {
    fail('servers', `must list ${n} servers, got ${Array.isArray(o.servers) ? o.servers.length : typeof o.servers}`);
  }
  const epoch = o.epoch === undefined ? 0 : int(o.epoch, 'epoch', 0, MAX_EPOCH);
  const keys: Uint8Array[] = [];
  // Every key any server has had, and whose it was: no key serves two servers, ever.
  const seen: { key: Uint8Array; server: number }[] = [];
  const history: ServerKey[][] = [];
  const servers = o.servers.map((s: unknown, i: number): ClusterServer => {
    const field = `servers[${i}]`;
    const so = object(s, field);
    if (so.id !== undefined && so.id !== i + 1) fail(`${field}.id`, `must be ${i + 1}, got ${JSON.stringify(so.id)}`);
    if (typeof so.url !== 'string' || !/^wss?:\/\/[^/?#\s]+$/.test(so.url)) {
      fail(`${field}.url`, `must be a ws:// or wss:// URL (host and port, no path), got ${JSON.stringify(so.url)}`);
    }
    let publicKey: Uint8Array;
    try {
      publicKey = decodePublicKey(so.publicKey);
    } catch {
      fail(`${field}.publicKey`, "must be the server's public key (43 base64url characters)");
    }
    const own = serverKeys(so.keys, `${field}.keys`, publicKey, epoch);
    // One key per server: a store proof counts receipts of n − t distinct servers, and two
    // entries sharing a key would let one machine sign for both; a retired key is never
    // used again (it may be in other hands). And no server holds the admin's key: servers
    // must hold no write power.
    for (const [k, { key }] of own.entries()) {
      const f = so.keys === undefined ? `${field}.publicKey` : `${field}.keys[${k}].publicKey`;
      const same = seen.find((x) => bytesEqual(x.key, key));
      if (same && same.server !== i) fail(f, `is also a key of servers[${same.server}]: every server needs receipt keys of its own`);
      if (same) fail(f, `is listed twice: a retired key is never used again`);
      if (bytesEqual(key, admin)) fail(f, 'is the admin key: a server must hold no key that can write');
      seen.push({ key, server: i });
    }
    keys.push(publicKey);
    history.push(own);
    const json = { id: i + 1, url: so.url, publicKey: encodePublicKey(publicKey) };
    return own.length > 1 ? { ...json, keys: own.map((k) => ({ epoch: k.from, publicKey: encodePublicKey(k.key) })) } : json;
  });
  const { policy, json } = parsePolicy(o.policy ?? { writers: 'open' });
  const file: ClusterFile = {
    version: 2,
    id: toBase32(id),
    admin: encodePublicKey(admin),
    t,
    n,
    ...(epoch ? { epoch } : {}),
    servers,
    policy: json,
  };
  const rotated = history.some((h) => h.length > 1);
  const identity = { id, admin, servers: keys, ...(epoch ? { epoch } : {}), ...(rotated ? { history } : {}) };
  return { config: clusterConfig(t), identity, servers, policy, file };
}

/**
 * A server's `keys` (its key history), checked: the first from epoch 0, going up, the last
 * `current` (its `publicKey`) and from at most the file's `epoch`. Left out: `current` alone.
 */
function serverKeys(x: unknown, field: string, current: Uint8Array, epoch: number): ServerKey[] {
  if (x === undefined) return [{ from: 0, key: current }];
  if (!Array.isArray(x) || x.length === 0) fail(field, 'must be a non-empty list of { "epoch", "publicKey" }');
  const keys = x.map((e: unknown, k): ServerKey => {
    const o = object(e, `${field}[${k}]`);
    for (const name of Object.keys(o)) {
      if (name !== 'epoch' && name !== 'publicKey') fail(`${field}[${k}].${name}`, 'unknown field (a key has "epoch" and "publicKey")');
    }
    const from = int(o.epoch, `${field}[${k}].epoch`, 0, MAX_EPOCH);
    let key: Uint8Array;
    try {
      key = decodePublicKey(o.publicKey);
    } catch {
      fail(`${field}[${k}].publicKey`, 'must be a public key (43 base64url characters)');
    }
    return { from, key };
  });
  if (keys[0]!.from !== 0) fail(`${field}[0].epoch`, 'must be 0: the first key is the one the cluster started with');
  for (let k = 1; k < keys.length; k++) {
    if (keys[k]!.from <= keys[k - 1]!.from) fail(`${field}[${k}].epoch`, `must be above the previous key's epoch ${keys[k - 1]!.from}`);
  }
  const last = keys.at(-1)!;
  if (last.from > epoch) fail(`${field}[${keys.length - 1}].epoch`, `is after the current epoch ${epoch} (field "epoch")`);
  if (!bytesEqual(last.key, current)) fail(`${field}[${keys.length - 1}].publicKey`, 'must be the current key (the server\'s "publicKey")');
  return keys;
}
