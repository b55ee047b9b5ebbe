/**
 * The files `powerstore-server init` writes, and how servers read them:
 *
 * - `cluster.json` (public, 0644): the cluster id, the admin public key, `t`, `n`, every
 *   server's id, URL and receipt public key, and the write policy. Its one schema and
 *   validator live in `@powerstore/protocol` (`parseClusterFile`), shared with clients.
 * - `server-<id>.json` (secret, 0600): one server's id, listen address, the path of the
 *   cluster file, and its receipt key. The receipt key grants no write power: a store
 *   proof needs `n − t` servers' receipts *and* a writer's certificate.
 * - `admin.json` (secret, 0600): the admin identity, which may write any key and grant any
 *   prefix. Nothing a server needs: keep it with the operator.
 *
 * Server ids are 1-based like the paper's `s_1 … s_n`; the protocol index is `id − 1`.
 * Every reader of these files checks each field and names the file and field it rejects,
 * and never quotes what a secret file holds: errors end up in terminals, logs and bug
 * reports, and a quote of a broken server file may be part of its key.
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve } from 'node:path';
import {
  ClusterFileError,
  clusterConfig,
  extensionProblem,
  encodeBase64urlSeed,
  encodePublicKey,
  decodeBase64url,
  describeValue,
  identityToJson,
  isLoopbackHost,
  jsonErrorPosition,
  MAX_EPOCH,
  parseClusterFile,
  parsePolicy,
  toBase32,
  type Cluster,
  type ClusterFile,
  type PolicyJson,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { ConfigError } from './errors.js';

/** Version of the server file format. */
export const CONFIG_VERSION = 2;

const crypto = createCryptoProvider();

/** `server-<id>.json`. */
export interface ServerFile {
  readonly version: 2;
  readonly id: number;
  readonly host: string;
  readonly port: number;
  /** Path of `cluster.json`, relative to this file's directory. */
  readonly cluster: string;
  /** The receipt key's Ed25519 seed, base64url. */
  readonly secretKey: string;
}

/** A loaded server file with its cluster, the receipt key checked against the cluster file. */
export interface LoadedServerConfig {
  readonly file: string;
  readonly id: number;
  /** Protocol index, `id − 1`. */
  readonly index: number;
  readonly host: string;
  readonly port: number;
  /** Absolute path of `cluster.json`. */
  readonly clusterFile: string;
  readonly cluster: Cluster;
  /** The receipt key's seed. */
  readonly seed: Uint8Array;
  /** Problems that do not stop the server but that the operator should fix (a secret file others can read): log them at start. */
  readonly warnings: readonly SecretFileWarning[];
}

/** A secret file that users other than its owner may read or change. */
export interface SecretFileWarning {
  readonly file: string;
  /** Its permission bits, e.g. `0644`. */
  readonly mode: string;
  /** One line for the operator, ending in the `chmod 600` that fixes it. */
  readonly message: string;
}

/** What `init` takes. */
export interface InitOptions {
  readonly t: number;
  readonly dir: string;
  readonly host?: string;
  /**
   * One host per server (`3t + 1` of them), for servers on machines of their own: server
   * `i`'s URL names `hosts[i - 1]`, every server uses port `basePort`, and each listens on
   * all interfaces (`0.0.0.0`), since a public name may not be a local address. Excludes
   * `host`.
   */
  readonly hosts?: readonly string[];
  readonly basePort?: number;
  /** Overwrite an existing cluster in `dir`. */
  readonly force?: boolean;
  /**
   * `true`: `wss://` URLs (the servers must then start with a certificate). `false`:
   * `ws://` URLs even for a host that is not loopback (plaintext across a network: the
   * result carries a warning, and clients refuse such URLs unless told `allowInsecure`).
   * Default: `ws://` for a loopback host, where traffic never leaves the machine, and
   * `wss://` for any other.
   */
  readonly tls?: boolean;
  /**
   * `owners` (default): only the owners `policy.owners` lists, and the admin, may write
   * (grantees too, under a grant into an admitted namespace). `open`: any identity may
   * write its own namespace; since anyone can make identities, per-owner quotas then bound
   * what one identity stores, not what one person stores ({@link openWritersWarning}).
   */
  readonly writers?: 'open' | 'owners';
  /** Default quota per owner and server; `undefined` fields are unlimited. Default 1 GiB and 100 000 keys. */
  readonly quota?: { readonly bytes?: number; readonly keys?: number };
}

/** Paths `init` wrote. */
export interface InitResult {
  readonly clusterFile: string;
  readonly serverFiles: readonly string[];
  readonly adminFile: string;
  readonly cluster: ClusterFile;
  /** Whether the URLs are `wss://`. */
  readonly tls: boolean;
  /** What the operator must do next (start the servers with a certificate), one line each. */
  readonly notes: readonly string[];
  /** Risks the operator chose (plaintext to a host that is not loopback), one line each. */
  readonly warnings: readonly string[];
}

/** Default quota per owner per server: what keeps one owner from filling the disks (one identity, in an open cluster). */
export const DEFAULT_QUOTA = Object.freeze({ bytes: 1024 ** 3, keys: 100_000 });

/**
 * What an operator choosing `writers: "open"` must know (`init --writers open` prints it,
 * and `dev` for a host that is not loopback): quotas are per identity, and identities are
 * free, so they do not bound what one person stores.
 */
export function openWritersWarning(quota: { readonly bytes?: number; readonly keys?: number } = DEFAULT_QUOTA): string {
  const limit = [
    quota.bytes === undefined ? undefined : `${quota.bytes} bytes`,
    quota.keys === undefined ? undefined : `${quota.keys} keys`,
  ].filter(Boolean);
  return (
    'writers: open lets any identity write its own namespace, and anyone can make as many identities as they like: ' +
    `the quota per owner and server (${limit.length ? limit.join(' and ') : 'unlimited'}) bounds what one identity stores, ` +
    "not what one person with many identities stores (Sybil writers can fill every server's disk); " +
    'use --writers owners (the default) and list the owners in cluster.json, or put the servers behind admission of your own'
  );
}

/** The file name of server `id`'s secret file. */
export function serverFileName(id: number): string {
  return `server-${id}.json`;
}

/**
 * Writes a new cluster's files into `dir`. Refuses (`CONFIG_EXISTS`) when any file it
 * would write already exists, unless `force`: overwriting silently would orphan the data
 * of servers that still hold the old cluster's identity.
 */
export async function initCluster(options: InitOptions): Promise<InitResult> {
  if (options.host !== undefined && options.hosts !== undefined) {
    throw new ConfigError(
      'CONFIG_INVALID',
      '--hosts',
      undefined,
      'give --host (every server on one machine) or --hosts (one per server), not both',
    );
  }
  const host = options.hosts ? '0.0.0.0' : (options.host ?? '127.0.0.1');
  const basePort = options.basePort ?? 7001;
  let config;
  try {
    config = clusterConfig(options.t);
  } catch (err) {
    throw new ConfigError('CONFIG_INVALID', '--t', undefined, (err as Error).message);
  }
  const spread = options.hosts !== undefined;
  if (!Number.isInteger(basePort) || basePort < 1 || basePort + (spread ? 0 : config.n - 1) > 65535) {
    throw new ConfigError('CONFIG_INVALID', '--base-port', undefined, `ports ${basePort}..${basePort + config.n - 1} are not all valid`);
  }
  if (spread && options.hosts.length !== config.n) {
    throw new ConfigError(
      'CONFIG_INVALID',
      '--hosts',
      undefined,
      `t = ${config.t} makes ${config.n} servers: give ${config.n} hosts, one per server, not ${options.hosts.length}`,
    );
  }
  /** The host each server's URL names. */
  const urlHosts = options.hosts ?? Array.from({ length: config.n }, () => host);
  for (const h of urlHosts) checkHost(h, spread ? '--hosts' : '--host', undefined, true);
  const dir = options.dir;
  const clusterFile = join(dir, 'cluster.json');
  const adminFile = join(dir, 'admin.json');
  const ids = Array.from({ length: config.n }, (_, i) => i + 1);
  const serverFiles = ids.map((id) => join(dir, serverFileName(id)));
  if (!options.force) {
    for (const f of [clusterFile, adminFile, ...serverFiles]) {
      if (existsSync(f))
        throw new ConfigError(
          'CONFIG_EXISTS',
          f,
          undefined,
          'a cluster already exists here; pass --force to replace it (its servers keep their old identity and data)',
        );
    }
  }
  mkdirSync(dir, { recursive: true });
  // Plaintext is the default only where it cannot be overheard: on loopback.
  const loopback = urlHosts.every((h) => isLoopbackHost(h));
  const tls = options.tls ?? !loopback;
  const scheme = tls ? 'wss' : 'ws';
  const inUrl = (h: string) => (h.includes(':') ? `[${h}]` : h);
  const seeds = ids.map(() => new Uint8Array(randomBytes(32)));
  const serverKeys = await Promise.all(seeds.map(async (s) => (await crypto.signerFromSeed(s)).publicKey));
  const adminSeed = new Uint8Array(randomBytes(32));
  const admin = await crypto.signerFromSeed(adminSeed);
  const quota = options.quota ?? DEFAULT_QUOTA;
  const policy: PolicyJson = {
    writers: options.writers ?? 'owners',
    owners: [],
    revoked: { keys: [], grants: [] },
    quotas: { default: quota, owners: {} },
  };
  const cluster: ClusterFile = {
    version: 2,
    id: toBase32(new Uint8Array(randomBytes(16))),
    admin: encodePublicKey(admin.publicKey),
    t: config.t,
    n: config.n,
    servers: ids.map((id, i) => ({
      id,
      url: `${scheme}://${inUrl(urlHosts[i]!)}:${spread ? basePort : basePort + i}`,
      publicKey: encodePublicKey(serverKeys[i]!),
    })),
    policy,
  };
  writeJson(clusterFile, cluster, false);
  ids.forEach((id, i) => {
    const file: ServerFile = {
      version: 2,
      id,
      host,
      port: spread ? basePort : basePort + i,
      cluster: 'cluster.json',
      secretKey: encodeBase64urlSeed(seeds[i]!),
    };
    writeJson(serverFiles[i]!, file, true);
  });
  writeJson(adminFile, identityToJson(crypto, admin.publicKey, adminSeed), true);
  const notes: string[] = [];
  const warnings: string[] = [];
  const named = [...new Set(urlHosts)];
  const hostList = named.join(', ');
  if (tls) {
    const san = (h: string) => (/^[\d.]+$/.test(h) || h.includes(':') ? `IP:${h}` : `DNS:${h}`);
    notes.push(
      `the servers' URLs are wss://${options.tls === undefined ? ` because ${named.length > 1 ? 'their hosts are not loopback addresses' : `${hostList} is not a loopback address`}` : ''}: start each server with --tls-cert <cert.pem> --tls-key <key.pem>`,
      `a certificate for ${named.length > 1 ? `each server's host (${hostList})` : hostList} that clients trust: from your CA (or ACME, e.g. Let's Encrypt, for a DNS name), or for a closed group a self-made one clients are told to trust (NODE_EXTRA_CA_CERTS=cert.pem):`,
      ...named.map(
        (h) =>
          `  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out cert.pem -days 365 -subj /CN=${h} -addext subjectAltName=${san(h)}`,
      ),
    );
    if (options.tls === undefined) notes.push('to keep plaintext ws:// instead, run init again with --insecure --force');
  } else if (!loopback) {
    warnings.push(
      `ws:// URLs to ${hostList} are plaintext: anyone on the network between clients and servers can read every value and tamper with the traffic; ` +
        'clients refuse them unless told to allow it (connect option allowInsecure: true, powerstore --allow-insecure)',
    );
  }
  if (spread) notes.push(`each server listens on all interfaces (0.0.0.0) at port ${basePort}; copy server-<i>.json only to host i`);
  return { clusterFile, serverFiles, adminFile, cluster, tls, notes, warnings };
}

/** What `rotate-key` takes. */
export interface RotateKeyOptions {
  /** The cluster directory: its `cluster.json` is updated and `server-<id>.json` written there. */
  readonly dir: string;
  /** The server (1-based) whose receipt key is replaced. */
  readonly id: number;
  /**
   * The server's new URL (`ws://host:port` or `wss://host:port`), when its replacement
   * listens elsewhere; the new server file then listens on that host and port.
   */
  readonly url?: string;
}

/** What `rotate-key` wrote. */
export interface RotateKeyResult {
  readonly clusterFile: string;
  readonly serverFile: string;
  /** The new current key epoch. */
  readonly epoch: number;
  /** The server's new receipt public key (base64url). */
  readonly publicKey: string;
  /** The key it replaces, now retired (base64url). */
  readonly retired: string;
  /** The new `cluster.json`. */
  readonly cluster: ClusterFile;
  /** The server file's listen address. */
  readonly host: string;
  readonly port: number;
}

/**
 * Replaces server `id`'s receipt key (its machine was lost with its `server-<id>.json`, or
 * the key may have leaked): makes a new key, adds key epoch `e + 1` to `cluster.json` with
 * that key for the server and every other server's key carried over (`epochs.ts`), and
 * writes the new `server-<id>.json` (0600). Every earlier epoch stays as it was, so every
 * write made so far stays valid. The server file keeps the old file's listen address when
 * there is one (and no new `url`), or takes the URL's.
 *
 * Then: copy `cluster.json` to every host and send every server SIGHUP, and start server
 * `id` with the new server file (on an empty data directory for a new machine). Clients
 * write under the new epoch once given the new `cluster.json`; until then they are told
 * `CLUSTER_OUTDATED`.
 */
export async function rotateServerKey(options: RotateKeyOptions): Promise<RotateKeyResult> {
  const clusterFile = join(options.dir, 'cluster.json');
  const current = loadClusterFile(clusterFile);
  const { n } = current.config;
  const id = options.id;
  if (!Number.isInteger(id) || id < 1 || id > n) {
    throw new ConfigError('CONFIG_INVALID', '--server', undefined, `must be the id of one of the cluster's servers, 1..${n}, got ${id}`);
  }
  const epoch = (current.file.epoch ?? 0) + 1;
  if (epoch > MAX_EPOCH) throw new ConfigError('CONFIG_INVALID', clusterFile, 'epoch', 'is at its largest value');
  const seed = new Uint8Array(randomBytes(32));
  const publicKey = encodePublicKey((await crypto.signerFromSeed(seed)).publicKey);
  const slot = current.file.servers[id - 1]!;
  const url = options.url ?? slot.url;
  const keys = [...(slot.keys ?? [{ epoch: 0, publicKey: slot.publicKey }]), { epoch, publicKey }];
  const servers = current.file.servers.map((s, i) => (i === id - 1 ? { ...s, url, publicKey, keys } : s));
  let next: Cluster;
  try {
    next = parseClusterFile({ ...current.file, epoch, servers });
  } catch (err) {
    if (err instanceof ClusterFileError)
      throw new ConfigError('CONFIG_INVALID', options.url ? '--url' : clusterFile, undefined, err.detail);
    throw err;
  }
  // The one change a running server accepts: an epoch added, nothing published changed.
  const problem = extensionProblem(current.identity, next.identity);
  if (problem) throw new ConfigError('CONFIG_INVALID', clusterFile, undefined, problem);
  const serverFile = join(options.dir, serverFileName(id));
  const listen = listenAddress(serverFile, next.file.servers[id - 1]!.url, options.url !== undefined);
  const file: ServerFile = {
    version: 2,
    id,
    host: listen.host,
    port: listen.port,
    cluster: listen.cluster,
    secretKey: encodeBase64urlSeed(seed),
  };
  // Written beside the targets, then renamed over them: a crash leaves the old pair or the new cluster file.
  const tmp = (f: string) => join(dirname(f), `.${basename(f)}.${randomBytes(6).toString('hex')}.tmp`);
  const serverTmp = tmp(serverFile);
  const clusterTmp = tmp(clusterFile);
  try {
    writeJson(serverTmp, file, true);
    writeJson(clusterTmp, next.file, false);
    renameSync(clusterTmp, clusterFile);
    renameSync(serverTmp, serverFile);
  } finally {
    rmSync(serverTmp, { force: true });
    rmSync(clusterTmp, { force: true });
  }
  return { clusterFile, serverFile, epoch, publicKey, retired: slot.publicKey, cluster: next.file, host: listen.host, port: listen.port };
}

/**
 * Where a replaced server's new file listens: the old server file's host and port (and its
 * path to the cluster file) when it is there and `fromUrl` is not asked for, else the
 * URL's. Only those fields of the old (secret) file are read.
 */
function listenAddress(serverFile: string, url: string, fromUrl: boolean): { host: string; port: number; cluster: string } {
  if (!fromUrl && existsSync(serverFile)) {
    const old = readJson(serverFile);
    const host = str(old, serverFile, 'host');
    checkHost(host, serverFile, 'host', false);
    return { host, port: int(old, serverFile, 'port', 0, 65535), cluster: typeof old.cluster === 'string' ? old.cluster : 'cluster.json' };
  }
  const u = new URL(url);
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  checkHost(host, fromUrl ? '--url' : serverFile, undefined, true);
  const port = u.port ? Number(u.port) : u.protocol === 'wss:' ? 443 : 80;
  return { host, port, cluster: 'cluster.json' };
}

/** Writes `value` as JSON; secrets are created 0600 so they are never readable by others, even briefly. */
export function writeJson(path: string, value: unknown, secret: boolean): void {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`, { mode: secret ? 0o600 : 0o644 });
  // chmod as well: `mode` does not apply when the file already existed.
  chmodSync(path, secret ? 0o600 : 0o644);
}

/**
 * Reads a JSON object; `CONFIG_MISSING` or `CONFIG_INVALID` naming the file and, for a
 * syntax error, the line and column, but never quoting the file: it may hold a secret.
 */
export function readJson(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(
      'CONFIG_MISSING',
      file,
      undefined,
      `cannot read: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    // JSON.parse's message may quote the text around the error, which may be a secret:
    // keep only where it is.
    const at = jsonErrorPosition(text, err);
    throw new ConfigError('CONFIG_INVALID', file, undefined, `not valid JSON${at ? ` (at ${at})` : ''}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ConfigError('CONFIG_INVALID', file, undefined, 'must be a JSON object');
  }
  return value as Record<string, unknown>;
}

// Field readers of the (secret) server file: they describe a bad value, never quote it.

function int(obj: Record<string, unknown>, file: string, field: string, min: number, max: number): number {
  const v = obj[field];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw new ConfigError('CONFIG_INVALID', file, field, `must be an integer in ${min}..${max}, got ${describeValue(v)}`);
  }
  return v;
}

function str(obj: Record<string, unknown>, file: string, field: string): string {
  const v = obj[field];
  if (typeof v !== 'string' || v.length === 0)
    throw new ConfigError('CONFIG_INVALID', file, field, `must be a non-empty string, got ${describeValue(v)}`);
  return v;
}

/** `quote`: the host came from the command line, not from a secret file, so it may be shown. */
function checkHost(host: string, file: string, field: string | undefined, quote: boolean): void {
  if (!/^[A-Za-z0-9.:\-[\]]+$/.test(host)) {
    throw new ConfigError('CONFIG_INVALID', file, field, `not a host name or address${quote ? `: ${JSON.stringify(host)}` : ''}`);
  }
}

/**
 * A warning when `file` (a secret: a server's receipt key, an identity) may be read or
 * changed by users other than its owner (`mode & 0o077`), naming the file, its mode and
 * the `chmod 600` that fixes it; `undefined` when it is private. It warns rather than
 * refuses: the key may already be in use, and stopping a server is worse than the
 * warning. Windows has no such bits.
 */
export function secretFileWarning(file: string): SecretFileWarning | undefined {
  if (process.platform === 'win32') return undefined;
  let bits: number;
  try {
    bits = statSync(file).mode & 0o777;
  } catch {
    return undefined;
  }
  if ((bits & 0o077) === 0) return undefined;
  const mode = `0${bits.toString(8).padStart(3, '0')}`;
  return {
    file,
    mode,
    message: `${file} holds a secret key but its mode ${mode} lets other users read or change it; run: chmod 600 ${shellQuote(file)}`,
  };
}

/** `s` as one shell word, quoted only when it needs to be, so the printed command can be pasted. */
function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(s) ? s : `'${s.replaceAll("'", "'\\''")}'`;
}

/** Reads and checks `cluster.json` with the shared validator; errors name the file and field. */
export function loadClusterFile(file: string): Cluster {
  const json = readJson(file);
  try {
    return parseClusterFile(json);
  } catch (err) {
    if (err instanceof ClusterFileError) throw new ConfigError('CONFIG_INVALID', file, err.field, err.detail);
    throw err;
  }
}

/**
 * Reads a cluster file again for a running party that uses `current` (a server on
 * SIGHUP): its policy and URLs may have changed, and it may add key epochs (a server was
 * replaced: `rotate-key`); the cluster id, admin, `t`, `n` and every key of an epoch
 * `current` knows must not have. `CONFIG_INVALID` naming what changed otherwise.
 */
export function reloadClusterFile(file: string, current: Cluster): Cluster {
  const fresh = loadClusterFile(file);
  const problem =
    fresh.config.t !== current.config.t
      ? `t changed from ${current.config.t} to ${fresh.config.t}`
      : extensionProblem(current.identity, fresh.identity);
  if (problem) {
    throw new ConfigError(
      'CONFIG_INVALID',
      file,
      undefined,
      `${problem} (the cluster id, admin, t, n and the server keys of published epochs are fixed; only the policy, URLs and new key epochs may change)`,
    );
  }
  return fresh;
}

/** Reads only the `policy` of a cluster file (for a policy reload); the rest must not have changed (see {@link reloadClusterFile}). */
export function loadPolicy(file: string, current: Cluster): Cluster['policy'] {
  const fresh = loadClusterFile(file);
  const same = JSON.stringify({ ...fresh.file, policy: undefined, servers: fresh.file.servers.map((s) => s.publicKey) });
  const before = JSON.stringify({ ...current.file, policy: undefined, servers: current.file.servers.map((s) => s.publicKey) });
  if (same !== before)
    throw new ConfigError(
      'CONFIG_INVALID',
      file,
      undefined,
      'only "policy" may change while servers run (the cluster id, admin, t, n and server keys are fixed)',
    );
  return parsePolicy(fresh.file.policy).policy;
}

/**
 * Reads and checks `server-<id>.json` and the cluster file it names (or `clusterPath`),
 * and that its receipt key is the one the cluster file lists for it. A server file other
 * users may read is loaded, with a warning in `warnings` for the caller to log.
 */
export async function loadServerConfig(file: string, clusterPath?: string): Promise<LoadedServerConfig> {
  const obj = readJson(file);
  if (obj.version === 1 || obj.key !== undefined) {
    throw new ConfigError(
      'CONFIG_INVALID',
      file,
      'version',
      'a version 1 server file (MAC keys): PowerStore 0.2 servers sign receipts instead; create a new cluster with `powerstore-server init`',
    );
  }
  const version = int(obj, file, 'version', 1, Number.MAX_SAFE_INTEGER);
  if (version !== CONFIG_VERSION)
    throw new ConfigError('CONFIG_INVALID', file, 'version', `this server reads version ${CONFIG_VERSION}, got ${version}`);
  const host = str(obj, file, 'host');
  checkHost(host, file, 'host', false);
  const port = int(obj, file, 'port', 0, 65535);
  const clusterFile = clusterPath ? resolve(clusterPath) : resolve(dirname(file), str(obj, file, 'cluster'));
  const cluster = loadClusterFile(clusterFile);
  const id = int(obj, file, 'id', 1, cluster.config.n);
  let seed: Uint8Array;
  try {
    seed = decodeBase64url(obj.secretKey, 32, 'secretKey');
  } catch {
    throw new ConfigError('CONFIG_INVALID', file, 'secretKey', 'must be 32 bytes of base64url');
  }
  const publicKey = encodePublicKey((await crypto.signerFromSeed(seed)).publicKey);
  const slot = cluster.file.servers[id - 1]!;
  if (publicKey !== slot.publicKey) {
    // A key of an earlier epoch: this file was retired by rotate-key, and a server must not sign with it.
    const retired = slot.keys?.findIndex((k) => k.publicKey === publicKey) ?? -1;
    throw new ConfigError(
      'CONFIG_INVALID',
      file,
      'secretKey',
      retired >= 0
        ? `is server ${id}'s retired key (epochs ${slot.keys![retired]!.epoch}..${slot.keys![retired + 1]!.epoch - 1}), replaced in epoch ${slot.keys![retired + 1]!.epoch} of ${relativePath(clusterFile)}: ` +
            `start server ${id} with the server file rotate-key wrote`
        : `is not the key ${relativePath(clusterFile)} lists for server ${id} in its current epoch (servers[${id - 1}].publicKey)`,
    );
  }
  const warning = secretFileWarning(file);
  return { file, id, index: id - 1, host, port, clusterFile, cluster, seed, warnings: warning ? [warning] : [] };
}

function relativePath(p: string): string {
  const r = relative(process.cwd(), p);
  return r && !r.startsWith('..') && !isAbsolute(r) ? r : p;
}
