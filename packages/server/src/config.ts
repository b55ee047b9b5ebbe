/**
 * Cluster files made by `powerstore-server init`:
 *
 * - `cluster.json` (public): `t`, `n` and every server's id and WebSocket URL; what a
 *   reader needs.
 * - `server-<id>.json` (secret, mode 0600): one server's id, listen address and `k_i`.
 * - `writer.json` (secret, mode 0600): the server list plus every `k_i`. It carries no
 *   writer id: everyone who copies the file would share it, and two writers with one id
 *   can give different values the same timestamp. Each loaded writer draws its own.
 *
 * Server ids are 1-based like the paper's `s_1 … s_n`; the protocol index is `id − 1`.
 * Keys are lower-case hex. Every reader of these files checks each field and names the
 * file and field it rejects.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { clusterConfig, SERVER_KEY_LENGTH, WRITER_ID_LENGTH, type ClusterConfig } from '@powerstore/protocol';
import { ConfigError } from './errors.js';

/** Version of the file formats below. */
export const CONFIG_VERSION = 1;

/** One server as the public cluster file lists it. */
export interface ClusterServer {
  /** 1-based id; protocol index `id − 1`. */
  readonly id: number;
  /** `ws://host:port` or `wss://host:port`. */
  readonly url: string;
}

/** `cluster.json`. */
export interface ClusterFile {
  readonly version: number;
  readonly t: number;
  readonly n: number;
  readonly servers: readonly ClusterServer[];
}

/** `server-<id>.json`. */
export interface ServerFile {
  readonly version: number;
  readonly id: number;
  readonly t: number;
  readonly n: number;
  readonly host: string;
  readonly port: number;
  /** `k_i`, hex. */
  readonly key: string;
}

/** `writer.json`. */
export interface WriterFile {
  readonly version: number;
  readonly t: number;
  readonly n: number;
  readonly servers: readonly ClusterServer[];
  /** `k_1 … k_n`, hex, in id order. */
  readonly serverKeys: readonly string[];
  /**
   * Hex. Optional and not written by `init`: a file that pins one must be used by a
   * single writer process at a time.
   */
  readonly writerId?: string;
}

/** A loaded server file, with the key as bytes and the cluster shape checked. */
export interface LoadedServerConfig {
  readonly file: string;
  readonly id: number;
  /** Protocol index, `id − 1`. */
  readonly index: number;
  readonly cluster: ClusterConfig;
  readonly host: string;
  readonly port: number;
  readonly key: Uint8Array;
}

/** What `init` takes. */
export interface InitOptions {
  readonly t: number;
  readonly dir: string;
  readonly host?: string;
  readonly basePort?: number;
  /** Overwrite an existing cluster in `dir`. */
  readonly force?: boolean;
  /** Use `wss://` URLs (the servers must then start with a certificate). */
  readonly tls?: boolean;
}

/** Paths `init` wrote. */
export interface InitResult {
  readonly clusterFile: string;
  readonly serverFiles: readonly string[];
  readonly writerFile: string;
  readonly cluster: ClusterFile;
}

/** The file name of server `id`'s secret file. */
export function serverFileName(id: number): string {
  return `server-${id}.json`;
}

/**
 * Writes a new cluster's files into `dir`. Refuses (`CONFIG_EXISTS`) when `cluster.json`
 * or any file it would write already exists, unless `force`: overwriting silently would
 * orphan the data of servers that still hold the old keys.
 */
export function initCluster(options: InitOptions): InitResult {
  const host = options.host ?? '127.0.0.1';
  const basePort = options.basePort ?? 7001;
  let config: ClusterConfig;
  try {
    config = clusterConfig(options.t);
  } catch (err) {
    throw new ConfigError('CONFIG_INVALID', '--t', undefined, (err as Error).message);
  }
  if (!Number.isInteger(basePort) || basePort < 1 || basePort + config.n - 1 > 65535) {
    throw new ConfigError('CONFIG_INVALID', '--base-port', undefined, `ports ${basePort}..${basePort + config.n - 1} are not all valid`);
  }
  checkHost(host, '--host', undefined);
  const dir = options.dir;
  const clusterFile = join(dir, 'cluster.json');
  const writerFile = join(dir, 'writer.json');
  const ids = Array.from({ length: config.n }, (_, i) => i + 1);
  const serverFiles = ids.map((id) => join(dir, serverFileName(id)));
  if (!options.force) {
    for (const f of [clusterFile, writerFile, ...serverFiles]) {
      if (existsSync(f)) throw new ConfigError('CONFIG_EXISTS', f, undefined, 'a cluster already exists here; pass --force to replace it (its servers keep their old keys and data)');
    }
  }
  mkdirSync(dir, { recursive: true });
  const scheme = options.tls ? 'wss' : 'ws';
  const urlHost = host.includes(':') ? `[${host}]` : host;
  const servers = ids.map((id) => ({ id, url: `${scheme}://${urlHost}:${basePort + id - 1}` }));
  const keys = ids.map(() => randomBytes(SERVER_KEY_LENGTH).toString('hex'));
  const cluster: ClusterFile = { version: CONFIG_VERSION, t: config.t, n: config.n, servers };
  writeJson(clusterFile, cluster, false);
  ids.forEach((id, i) => {
    const file: ServerFile = { version: CONFIG_VERSION, id, t: config.t, n: config.n, host, port: basePort + i, key: keys[i]! };
    writeJson(serverFiles[i]!, file, true);
  });
  const writer: WriterFile = {
    version: CONFIG_VERSION,
    t: config.t,
    n: config.n,
    servers,
    serverKeys: keys,
  };
  writeJson(writerFile, writer, true);
  return { clusterFile, serverFiles, writerFile, cluster };
}

function writeJson(path: string, value: unknown, secret: boolean): void {
  // Create with the final mode so a secret is never readable by others, even briefly;
  // chmod as well because `mode` does not apply when --force overwrites a file.
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`, { mode: secret ? 0o600 : 0o644 });
  chmodSync(path, secret ? 0o600 : 0o644);
}

function readJson(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError('CONFIG_MISSING', file, undefined, `cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ConfigError('CONFIG_INVALID', file, undefined, `not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ConfigError('CONFIG_INVALID', file, undefined, 'must be a JSON object');
  }
  return value as Record<string, unknown>;
}

function int(obj: Record<string, unknown>, file: string, field: string, min: number, max: number, label = field): number {
  const v = obj[field];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError('CONFIG_INVALID', file, label, `must be an integer in ${min}..${max}, got ${JSON.stringify(v)}`);
  }
  return v;
}

function str(obj: Record<string, unknown>, file: string, field: string, label = field): string {
  const v = obj[field];
  if (typeof v !== 'string' || v.length === 0) throw new ConfigError('CONFIG_INVALID', file, label, `must be a non-empty string, got ${JSON.stringify(v)}`);
  return v;
}

function hex(value: unknown, file: string, field: string, bytes: number): Uint8Array {
  if (typeof value !== 'string' || !/^[0-9a-f]*$/i.test(value) || value.length !== bytes * 2) {
    throw new ConfigError('CONFIG_INVALID', file, field, `must be ${bytes} bytes of hex (${bytes * 2} characters)`);
  }
  return new Uint8Array(Buffer.from(value, 'hex'));
}

function checkHost(host: string, file: string, field: string | undefined): void {
  if (!/^[A-Za-z0-9.:\-[\]]+$/.test(host)) throw new ConfigError('CONFIG_INVALID', file, field, `not a host name or address: ${JSON.stringify(host)}`);
}

function checkVersion(obj: Record<string, unknown>, file: string): number {
  const version = int(obj, file, 'version', 1, Number.MAX_SAFE_INTEGER);
  if (version !== CONFIG_VERSION) throw new ConfigError('CONFIG_INVALID', file, 'version', `this server reads version ${CONFIG_VERSION}, got ${version}`);
  return version;
}

function shape(obj: Record<string, unknown>, file: string): ClusterConfig {
  const t = int(obj, file, 't', 1, 84);
  const n = int(obj, file, 'n', 4, 255);
  if (n !== 3 * t + 1) throw new ConfigError('CONFIG_INVALID', file, 'n', `must be 3t + 1 = ${3 * t + 1} for t = ${t}, got ${n}`);
  return clusterConfig(t);
}

function serverList(obj: Record<string, unknown>, file: string, n: number): ClusterServer[] {
  const list = obj['servers'];
  if (!Array.isArray(list) || list.length !== n) throw new ConfigError('CONFIG_INVALID', file, 'servers', `must list ${n} servers`);
  return list.map((s: unknown, i) => {
    const field = `servers[${i}]`;
    if (typeof s !== 'object' || s === null) throw new ConfigError('CONFIG_INVALID', file, field, 'must be an object');
    const o = s as Record<string, unknown>;
    const id = int(o, file, 'id', i + 1, i + 1, `${field}.id`);
    const url = str(o, file, 'url', `${field}.url`);
    if (!/^wss?:\/\//.test(url)) throw new ConfigError('CONFIG_INVALID', file, `${field}.url`, `must be a ws:// or wss:// URL, got ${JSON.stringify(url)}`);
    return { id, url };
  });
}

/** Reads and checks `server-<id>.json`. */
export function loadServerConfig(file: string): LoadedServerConfig {
  const obj = readJson(file);
  checkVersion(obj, file);
  const cluster = shape(obj, file);
  const id = int(obj, file, 'id', 1, cluster.n);
  const host = str(obj, file, 'host');
  checkHost(host, file, 'host');
  const port = int(obj, file, 'port', 0, 65535);
  const key = hex(obj['key'], file, 'key', SERVER_KEY_LENGTH);
  return { file, id, index: id - 1, cluster, host, port, key };
}

/** Reads and checks `cluster.json`. */
export function loadClusterFile(file: string): ClusterFile {
  const obj = readJson(file);
  const version = checkVersion(obj, file);
  const { t, n } = shape(obj, file);
  return { version, t, n, servers: serverList(obj, file, n) };
}

/**
 * Reads and checks `writer.json`; the keys come back as bytes. Without a `writerId` in
 * the file, each call draws a fresh random one.
 */
export function loadWriterFile(file: string): {
  cluster: ClusterConfig;
  servers: ClusterServer[];
  serverKeys: Uint8Array[];
  writerId: Uint8Array;
} {
  const obj = readJson(file);
  checkVersion(obj, file);
  const cluster = shape(obj, file);
  const servers = serverList(obj, file, cluster.n);
  const keys = obj['serverKeys'];
  if (!Array.isArray(keys) || keys.length !== cluster.n) throw new ConfigError('CONFIG_INVALID', file, 'serverKeys', `must list ${cluster.n} keys`);
  const serverKeys = keys.map((k: unknown, i) => hex(k, file, `serverKeys[${i}]`, SERVER_KEY_LENGTH));
  const writerId =
    obj['writerId'] === undefined ? nonZeroRandom(WRITER_ID_LENGTH) : hex(obj['writerId'], file, 'writerId', WRITER_ID_LENGTH);
  return { cluster, servers, serverKeys, writerId };
}

function nonZeroRandom(length: number): Uint8Array {
  for (;;) {
    const id = new Uint8Array(randomBytes(length));
    if (id.some((b) => b !== 0)) return id;
  }
}
