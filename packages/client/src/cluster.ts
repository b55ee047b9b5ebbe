/**
 * The cluster and credential objects a client is given: the JSON of `cluster.json` and
 * `writer.json` as `powerstore-server init` writes them, parsed and checked here so a
 * bad file fails at `connect` with the field that is wrong.
 */
import { WRITER_ID_LENGTH } from '@powerstore/protocol';
import { invalid } from './errors.js';

/** One storage server. */
export interface ServerInfo {
  /** 1-based, as in `cluster.json`; the protocol's index is `id − 1`. */
  readonly id: number;
  /** `ws://…` or `wss://…`. */
  readonly url: string;
}

/** The public description of a cluster (`cluster.json`): enough to read. */
export interface ClusterInfo {
  readonly t: number;
  readonly n: number;
  /** Ordered by id: `servers[i].id === i + 1`. */
  readonly servers: readonly ServerInfo[];
}

/** Writer credentials (`writer.json`): every server's key; needed to write. */
export interface Credentials {
  /** `k_1 … k_n` as hex strings or bytes, in server-id order. */
  readonly serverKeys: readonly (string | Uint8Array)[];
  /**
   * A fixed writer id (hex or bytes). Leave it out: each `connect` then draws a random
   * one, and two clients sharing one credentials file can never pick the same timestamp.
   */
  readonly writerId?: string | Uint8Array;
}

export function parseCluster(input: unknown): ClusterInfo {
  const o = object(input, 'cluster');
  const t = o.t;
  if (!Number.isInteger(t) || (t as number) < 1 || 3 * (t as number) + 1 > 255) throw invalid(`cluster.t must be an integer in 1..84, got ${String(t)}`);
  const n = 3 * (t as number) + 1;
  if (o.n !== undefined && o.n !== n) throw invalid(`cluster.n must be 3t + 1 = ${n}, got ${String(o.n)}`);
  if (!Array.isArray(o.servers) || o.servers.length !== n) {
    throw invalid(`cluster.servers must list ${n} servers, got ${Array.isArray(o.servers) ? o.servers.length : typeof o.servers}`);
  }
  const servers = o.servers.map((s: unknown, i: number): ServerInfo => {
    const so = object(s, `cluster.servers[${i}]`);
    if (so.id !== undefined && so.id !== i + 1) throw invalid(`cluster.servers[${i}].id must be ${i + 1}, got ${String(so.id)}`);
    if (typeof so.url !== 'string' || !/^wss?:\/\/./.test(so.url)) {
      throw invalid(`cluster.servers[${i}].url must be a ws:// or wss:// URL, got ${JSON.stringify(so.url)}`);
    }
    return { id: i + 1, url: so.url };
  });
  return { t: t as number, n, servers };
}

/** Parsed credentials: key bytes per server and an optional fixed writer id. */
export interface ParsedCredentials {
  readonly serverKeys: readonly Uint8Array[];
  readonly writerId: Uint8Array | undefined;
}

export function parseCredentials(input: unknown, cluster: ClusterInfo): ParsedCredentials {
  const o = object(input, 'credentials');
  if (!Array.isArray(o.serverKeys) || o.serverKeys.length !== cluster.n) {
    throw invalid(`credentials.serverKeys must hold ${cluster.n} keys, got ${Array.isArray(o.serverKeys) ? o.serverKeys.length : typeof o.serverKeys}`);
  }
  const serverKeys = o.serverKeys.map((k: unknown, i: number) => {
    const bytes = toBytes(k, `credentials.serverKeys[${i}]`);
    if (bytes.length < 16) throw invalid(`credentials.serverKeys[${i}] must be at least 16 bytes`);
    return bytes;
  });
  let writerId: Uint8Array | undefined;
  if (o.writerId !== undefined) {
    writerId = toBytes(o.writerId, 'credentials.writerId');
    if (writerId.length !== WRITER_ID_LENGTH || writerId.every((b) => b === 0)) {
      throw invalid(`credentials.writerId must be ${WRITER_ID_LENGTH} bytes, not all zero`);
    }
  }
  return { serverKeys, writerId };
}

function object(x: unknown, what: string): Record<string, unknown> {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) throw invalid(`${what} must be an object`);
  return x as Record<string, unknown>;
}

function toBytes(x: unknown, what: string): Uint8Array {
  if (x instanceof Uint8Array) return x;
  if (typeof x !== 'string' || x.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(x)) throw invalid(`${what} must be hex or bytes`);
  const out = new Uint8Array(x.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(x.slice(2 * i, 2 * i + 2), 16);
  return out;
}
