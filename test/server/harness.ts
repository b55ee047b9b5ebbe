/**
 * Real clusters for the server tests: the built `powerstore-server` binary, run with node
 * as separate processes on loopback, each on its own LevelDB directory.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, statSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import {
  decodeMessage,
  encodeMessage,
  fragmentMatches,
  identityFromJson,
  type Candidate,
  type Cluster,
  type ClusterConfig,
  type Message,
  type Signer,
  type StripeLayout,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { loadClusterFile } from '../../packages/server/src/index.js';
import { freeBasePort } from '../ports.js';

/** Deterministic bytes: a counter-mode SHA-256 stream of `seed`. */
export function seededBytes(n: number, seed: string): Uint8Array {
  const out = new Uint8Array(n);
  for (let off = 0, i = 0; off < n; off += 32, i++)
    out.set(
      createHash('sha256')
        .update(`${seed}:${i}`)
        .digest()
        .subarray(0, Math.min(32, n - off)),
      off,
    );
  return out;
}

export { freeBasePort };

const crypto = createCryptoProvider();

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** The built CLI, as npm would install it. */
export const CLI = join(ROOT, 'packages/server/dist/cli.js');

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Builds the server package and its references (`tsc -b packages/server`, not the whole
 * workspace, so unrelated work in progress elsewhere cannot fail these tests). Takes no
 * argument: test files pass it to `beforeAll` as it is, which calls it with a context.
 */
export function ensureBuilt(): Promise<void> {
  return ensureBuiltProjects(['packages/server']);
}

/**
 * `tsc -b` of `projects` (and their references). Test files in parallel workers take
 * turns through a lock directory, since two builds writing the same outputs race.
 */
export async function ensureBuiltProjects(projects: readonly string[]): Promise<void> {
  const lock = join(tmpdir(), `powerstore-build-${createHash('sha256').update(ROOT).digest('hex').slice(0, 12)}.lock`);
  const deadline = Date.now() + 240_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch {
      // A lock older than the build could take was left by a killed run.
      try {
        if (Date.now() - statSync(lock).mtimeMs > 180_000) rmSync(lock, { recursive: true, force: true });
      } catch {
        // gone meanwhile
      }
      if (Date.now() > deadline) throw new Error(`build lock ${lock} held too long`);
      await sleep(200);
    }
  }
  try {
    const r = spawnSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-b', ...projects], {
      cwd: ROOT,
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`tsc -b failed:\n${r.stdout}\n${r.stderr}`);
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** Runs the CLI to completion. */
export function cli(args: readonly string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 30_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** `init` arguments of a cluster any identity may write to (its own namespace). */
export const OPEN_WRITERS: readonly string[] = ['--writers', 'open'];

/** A cluster made by `powerstore-server init` and run by `powerstore-server start`. */
export class CliCluster {
  readonly dir: string;
  /** The parsed `cluster.json`. */
  readonly cluster: Cluster;
  readonly config: ClusterConfig;
  readonly urls: readonly string[];
  /** The admin identity (`admin.json`): may write any key. */
  readonly admin: Signer;
  readonly #procs = new Map<number, ChildProcess>();
  readonly #startArgs: readonly string[];

  private constructor(dir: string, cluster: Cluster, admin: Signer, startArgs: readonly string[]) {
    this.dir = dir;
    this.cluster = cluster;
    this.config = cluster.config;
    this.urls = cluster.servers.map((s) => s.url);
    this.admin = admin;
    this.#startArgs = startArgs;
  }

  /**
   * `init` into a fresh temporary directory (`initArgs` go to `init`); `startArgs` go to
   * every `start`. Without `initArgs` the cluster is open (`--writers open`): most tests
   * write with identities they make, which no cluster file lists. `init`'s own default
   * (`owners`: the listed owners and the admin) is what `initArgs` without `--writers` get.
   */
  static async create(t = 1, startArgs: readonly string[] = [], initArgs: readonly string[] = OPEN_WRITERS): Promise<CliCluster> {
    const dir = mkdtempSync(join(tmpdir(), 'powerstore-cluster-'));
    const base = await freeBasePort(3 * t + 1);
    const r = cli(['init', '--t', String(t), '--dir', dir, '--base-port', String(base), ...initArgs]);
    if (r.status !== 0) throw new Error(`init failed: ${r.stderr}`);
    const { seed } = identityFromJson(JSON.parse(readFileSync(join(dir, 'admin.json'), 'utf8')));
    return new CliCluster(dir, loadClusterFile(join(dir, 'cluster.json')), await crypto.signerFromSeed(seed), startArgs);
  }

  /** Path of `cluster.json`. */
  get clusterFile(): string {
    return join(this.dir, 'cluster.json');
  }

  /** The JSON of `cluster.json`, as a client is given it. */
  clusterJson(): object {
    return JSON.parse(readFileSync(this.clusterFile, 'utf8')) as object;
  }

  /** HTTP base URL of server `id` (1-based). */
  http(id: number): string {
    return this.urls[id - 1]!.replace(/^ws/, 'http');
  }

  /**
   * Starts server `id` on `<dir>/data-<id>` and waits for /healthz; `wrap` runs it under a
   * command that execs it (`['fiu-run', '-x']`: the process keeps its pid).
   */
  async start(id: number, extraArgs: readonly string[] = [], wrap: readonly string[] = []): Promise<ChildProcess> {
    if (this.#procs.has(id)) throw new Error(`server ${id} is running`);
    const log = openSync(join(this.dir, `server-${id}.log`), 'a');
    const [command, ...prefix] = [...wrap, process.execPath];
    // PS_CPU_PROF=DIR (benchmarks): the server writes a V8 CPU profile there when it stops.
    const profile = process.env.PS_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.PS_CPU_PROF}`] : [];
    const child = spawn(
      command,
      [
        ...prefix,
        ...profile,
        CLI,
        'start',
        '--config',
        join(this.dir, `server-${id}.json`),
        '--data',
        join(this.dir, `data-${id}`),
        ...this.#startArgs,
        ...extraArgs,
      ],
      { stdio: ['ignore', log, log] },
    );
    closeSync(log);
    this.#procs.set(id, child);
    child.once('exit', () => {
      if (this.#procs.get(id) === child) this.#procs.delete(id);
    });
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) {
        // The log's end says why (a port taken, a bad flag), and the directory may be gone by the time anyone looks.
        const tail = readFileSync(join(this.dir, `server-${id}.log`), 'utf8')
          .trimEnd()
          .split('\n')
          .slice(-5)
          .join('\n');
        throw new Error(`server ${id} exited with ${child.exitCode}; the end of ${this.dir}/server-${id}.log:\n${tail}`);
      }
      try {
        if ((await fetch(`${this.http(id)}/healthz`, { signal: AbortSignal.timeout(1000) })).ok) return child;
      } catch {
        // not up yet
      }
      await sleep(50);
    }
    throw new Error(`server ${id} did not become healthy`);
  }

  async startAll(): Promise<void> {
    await Promise.all(this.urls.map((_, i) => this.start(i + 1)));
  }

  /** The process of server `id`, if running. */
  process(id: number): ChildProcess | undefined {
    return this.#procs.get(id);
  }

  /** Sends `signal` to server `id` and waits for it to exit; resolves with its exit code. */
  async signal(id: number, signal: NodeJS.Signals, timeoutMs = 20_000): Promise<number | null> {
    const child = this.#procs.get(id);
    if (!child) return null;
    const exited = new Promise<number | null>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
      else child.once('exit', (code) => resolve(code));
    });
    child.kill(signal);
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    const code = await exited;
    clearTimeout(timer);
    this.#procs.delete(id);
    return code;
  }

  /** Text of server `id`'s /metrics. */
  async metrics(id: number): Promise<string> {
    return (await fetch(`${this.http(id)}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  }

  /** A metric summed over every server (see {@link metricValue}). */
  async metricTotal(name: string, labels: Record<string, string> = {}): Promise<number> {
    let total = 0;
    for (let id = 1; id <= this.urls.length; id++) total += metricValue(await this.metrics(id), name, labels);
    return total;
  }

  /** Stops every server gracefully and, with `remove`, deletes the directory. */
  async stop(remove = true): Promise<void> {
    await Promise.all([...this.#procs.keys()].map((id) => this.signal(id, 'SIGTERM')));
    if (remove) rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Sum of a metric's samples whose labels include `labels`, from Prometheus text. */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const body = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => body.includes(`${k}="${v}"`))) sum += Number(m[3]);
  }
  return sum;
}

/**
 * A raw TCP socket from `localAddress` that has completed the WebSocket handshake with
 * `host:port`: for attacks `ws` will not make (partial frames, trickled bytes).
 */
export function rawWebSocket(host: string, port: number, localAddress: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, localAddress }, () => {
      socket.write(
        `GET / HTTP/1.1\r\nHost: ${host}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
      );
    });
    socket.once('error', reject);
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (head.startsWith('HTTP/1.1 101')) resolve(socket);
      else {
        socket.destroy();
        reject(new Error(head.split('\r\n')[0]));
      }
    };
    socket.on('data', onData);
  });
}

/** The header of a masked binary frame announcing `length` payload bytes (≥ 64 KiB), mask 1 2 3 4. */
export function largeFrameHeader(length: number): Buffer {
  const header = Buffer.from([0x82, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
  header.writeBigUInt64BE(BigInt(length), 2);
  return header;
}

/**
 * A WebSocket to `url` from `localAddress` (`null`: whatever address the route picks, as
 * for a server in a network namespace), once open. A refused upgrade rejects with
 * `HTTP <status>`; errors after opening are swallowed (attack sockets die on purpose).
 */
export function openWebSocket(url: string, localAddress: string | null = '127.0.0.1'): Promise<WebSocket> {
  const ws = new WebSocket(url, { perMessageDeflate: false, ...(localAddress ? { localAddress } : {}), handshakeTimeout: 5000 });
  ws.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
    ws.once('unexpected-response', (_req, res) => {
      ws.terminate();
      reject(new Error(`HTTP ${res.statusCode}`));
    });
  });
}

/** Sends `m` over `ws` and resolves with the next frame, decoded for a cluster of `n`. */
export function requestOnce(ws: WebSocket, m: Message, n: number): Promise<Message> {
  const reply = new Promise<Message>((resolve) =>
    ws.once('message', (data: Buffer) => resolve(decodeMessage(new Uint8Array(data), { n }))),
  );
  ws.send(encodeMessage(m));
  return reply;
}

/** Server `url`'s `lc` of `key`, by a COLLECT (naming key epoch `epoch`) over a connection of its own. */
export async function collectLc(
  url: string,
  key: string,
  n: number,
  epoch = 0,
  localAddress: string | null = '127.0.0.1',
): Promise<Candidate | undefined> {
  const ws = await openWebSocket(url, localAddress);
  try {
    const m = await requestOnce(ws, { type: 'COLLECT', key, opId: 1, ...(epoch ? { epoch } : {}) }, n);
    return m.type === 'COLLECT_ACK' ? m.candidate : undefined;
  } finally {
    ws.close();
  }
}

/** One server, as the checks below address it: its URL, its 1-based id, the cluster's `n`. */
export interface ServerRef {
  readonly url: string;
  readonly id: number;
  readonly n: number;
  /** What {@link openWebSocket} binds to; default loopback. */
  readonly localAddress?: string | null;
}

/**
 * Server `s`'s own fragment of stripe `stripe` of `candidate`, asked for directly
 * (FILTER), checked against the hash its writer signed: `ok`, `missing` or `bad`. Also
 * returns the layout a stripe 0 answer carries.
 */
export async function fragmentAt(
  s: ServerRef,
  key: string,
  candidate: Candidate,
  stripe = 0,
): Promise<{ state: 'ok' | 'missing' | 'bad'; layout?: StripeLayout }> {
  const ws = await openWebSocket(s.url, s.localAddress);
  try {
    const m: Message = await requestOnce(ws, { type: 'FILTER', key, opId: 7, stripe, fragment: true, candidates: [candidate] }, s.n);
    if (m.type !== 'FILTER_ACK' || !m.entry?.fragment || m.stripe !== stripe || m.ts.num !== candidate.ts.num) return { state: 'missing' };
    const ok = await fragmentMatches(crypto, m.entry.cc, s.id - 1, m.entry.fragment);
    return { state: ok ? 'ok' : 'bad', ...(m.entry.layout ? { layout: m.entry.layout } : {}) };
  } finally {
    ws.close();
  }
}

/** Whether server `s` holds its valid fragment of every stripe of `lc` (a key's latest write). */
export async function holdsEveryStripe(s: ServerRef, key: string, lc: Candidate): Promise<boolean> {
  const first = await fragmentAt(s, key, lc);
  if (first.state !== 'ok') return false;
  for (let i = 1; i < (first.layout?.digests.length ?? 1); i++) if ((await fragmentAt(s, key, lc, i)).state !== 'ok') return false;
  return true;
}
