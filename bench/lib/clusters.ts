/**
 * The systems under test as real processes, each with its own LevelDB directories on
 * disk: a PowerStore cluster (`powerstore-server` CLI from packages/server/dist, as
 * operators run it), an M-ABD cluster and a single server (bench/baselines/server.ts).
 * Same approach as test/server/harness.ts's CliCluster. Every server runs on a host of
 * the bench's {@link Network}: on loopback all on 127.0.0.1 (the default), on an
 * emulated network each in its own namespace at its own address (lib/netns.ts).
 */
import { spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createNetwork, type NetHost, type Network } from './netns.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const SERVER_CLI = join(ROOT, 'packages/server/dist/cli.js');
/** How a bench TypeScript entry point is run as its own process. */
export { track };
export const TSX_EXEC_ARGV = ['--import', 'tsx', '--conditions=@powerstore/source'];

export type SystemName = 'powerstore' | 'm-abd' | 'single';
export const SYSTEMS: readonly SystemName[] = ['powerstore', 'm-abd', 'single'];

export interface RunningSystem {
  readonly system: SystemName;
  readonly t: number;
  readonly fsync: boolean;
  readonly urls: readonly string[];
  /**
   * PowerStore only: the public cluster file and the admin identity every load client
   * writes with (each client's own connect() draws its own writer id).
   */
  readonly writer?: { readonly cluster: object; readonly identity: object };
  readonly dir: string;
  readonly pids: readonly number[];
  stop(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every server process started here, so none outlives the bench if it crashes or is interrupted. */
const started = new Set<ChildProcess>();
process.once('exit', () => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => process.exit(130));
}

function track(child: ChildProcess): ChildProcess {
  started.add(child);
  child.once('exit', () => started.delete(child));
  return child;
}

/** The network when the caller names none: loopback, nothing to build or tear down. */
const LOOPBACK = createNetwork('loopback');

/**
 * Points a cluster written by `init` (all servers on one host, loopback) at each
 * server's own host and port: cluster.json's URLs (what clients dial) and each server
 * file's host and port (what it listens on). The URLs stay ws://, as the baselines'
 * are; clients then have to allow plaintext to a host that is not loopback.
 */
export function placePowerStore(dir: string, at: readonly { readonly host: string; readonly port: number }[]): void {
  const clusterFile = join(dir, 'cluster.json');
  const cluster = JSON.parse(readFileSync(clusterFile, 'utf8')) as { servers: { id: number; url: string }[] };
  cluster.servers.forEach((s, i) => (s.url = `ws://${at[i]!.host}:${at[i]!.port}`));
  writeFileSync(clusterFile, JSON.stringify(cluster, null, 2) + '\n');
  at.forEach((a, i) => {
    // Rewritten in place, so the secret file keeps its 0600 mode.
    const file = join(dir, `server-${i + 1}.json`);
    writeFileSync(
      file,
      JSON.stringify({ ...(JSON.parse(readFileSync(file, 'utf8')) as object), host: a.host, port: a.port }, null, 2) + '\n',
    );
  });
}

async function waitHealthy(url: string, child: ChildProcess, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}`);
    try {
      if ((await fetch(url, { signal: AbortSignal.timeout(1000) })).ok) return;
    } catch {
      // not up yet
    }
    await sleep(50);
  }
  throw new Error(`${what} did not become healthy`);
}

function stopper(children: ChildProcess[], dir: string): () => Promise<void> {
  return async () => {
    await Promise.all(
      children.map(
        (c) =>
          new Promise<void>((done) => {
            if (c.exitCode !== null || c.signalCode !== null) return done();
            const timer = setTimeout(() => c.kill('SIGKILL'), 15_000);
            c.once('exit', () => {
              clearTimeout(timer);
              done();
            });
            c.kill('SIGTERM');
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
  };
}

/** Servers each system runs at fault threshold `t`: PowerStore 3t + 1, M-ABD 2t + 1, single 1. */
export function serversOf(system: SystemName, t: number): number {
  return system === 'powerstore' ? 3 * t + 1 : system === 'm-abd' ? 2 * t + 1 : 1;
}

/** Options of {@link createPowerStore}. */
export interface PowerStoreOptions {
  /** Sync writes before acknowledging them (the servers' default); false adds `--unsafe-no-fsync`. */
  readonly fsync: boolean;
  /** The servers' `--log-level`; default `warn`. */
  readonly logLevel?: 'debug' | 'info' | 'warn' | 'error';
  /** Where the cluster's files, data directories and logs go; default a new temporary directory. */
  readonly dir?: string;
  /** A command every server runs under, which execs it (the nemesis's `['fiu-run', '-x']`, `test/fiu.ts`). */
  readonly wrap?: readonly string[];
  /** More `powerstore-server start` flags for every server (the nemesis's `--heal-interval-ms`). */
  readonly args?: readonly string[];
}

/**
 * A PowerStore cluster written by `powerstore-server init` whose servers are started,
 * signalled and stopped one by one, each on its own host of a {@link Network} and its own
 * data directory (`<dir>/data-<id>`), logging to `<dir>/server-<id>.log`.
 */
export interface PowerStoreCluster {
  readonly t: number;
  readonly n: number;
  readonly dir: string;
  /** Server `id` runs on `hosts[id - 1]` (role `ps<id>`). */
  readonly hosts: readonly NetHost[];
  readonly urls: readonly string[];
  /** The public cluster file and the admin identity (which may write every key). */
  readonly writer: { readonly cluster: object; readonly identity: object };
  /** Starts server `id` (1-based) and resolves once its /healthz answers; throws if it exits first or takes over 30 s. */
  start(id: number): Promise<void>;
  /** Server `id`'s process while it runs. */
  process(id: number): ChildProcess | undefined;
  /** Sends `signal` to server `id`; with SIGKILL, resolves once it has exited. */
  signal(id: number, signal: NodeJS.Signals): Promise<void>;
  /** Stops every server (SIGCONT first, for a paused one; SIGTERM, SIGKILL after 15 s). Leaves `dir` as it is. */
  stop(): Promise<void>;
}

const exited = (c: ChildProcess) => c.exitCode !== null || c.signalCode !== null;

/** `powerstore-server init` of a cluster of 3t + 1 servers on hosts `ps<i>` of `net`; starts none. */
export async function createPowerStore(t: number, net: Network, options: PowerStoreOptions): Promise<PowerStoreCluster> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'powerstore-bench-ps-'));
  const n = serversOf('powerstore', t);
  const hosts = Array.from({ length: n }, (_, i) => net.host(`ps${i + 1}`));
  const base = await net.basePort(n);
  const init = spawnSync(process.execPath, [SERVER_CLI, 'init', '--t', String(t), '--dir', dir, '--base-port', String(base)], {
    encoding: 'utf8',
  });
  if (init.status !== 0) throw new Error(`powerstore-server init failed: ${init.stderr}`);
  if (net.profile.topology !== 'loopback')
    placePowerStore(
      dir,
      hosts.map((h, i) => ({ host: h.address, port: base + i })),
    );
  const cluster = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as { servers: { url: string }[] };
  const writer = { cluster, identity: JSON.parse(readFileSync(join(dir, 'admin.json'), 'utf8')) as object };
  const urls = cluster.servers.map((s) => s.url);
  const procs = new Map<number, ChildProcess>();
  const check = (id: number) => {
    if (!Number.isInteger(id) || id < 1 || id > n) throw new Error(`no server ${id} in a cluster of ${n}`);
  };
  return {
    t,
    n,
    dir,
    hosts,
    urls,
    writer,
    async start(id) {
      check(id);
      const running = procs.get(id);
      if (running && !exited(running)) throw new Error(`server ${id} is running`);
      const log = openSync(join(dir, `server-${id}.log`), 'a');
      const args = [
        SERVER_CLI,
        'start',
        '--config',
        join(dir, `server-${id}.json`),
        '--data',
        join(dir, `data-${id}`),
        '--log-level',
        options.logLevel ?? 'warn',
      ];
      if (!options.fsync) args.push('--unsafe-no-fsync');
      args.push(...(options.args ?? []));
      // PS_SERVER_ARGS="--flag value …": extra flags for every PowerStore server (A/B runs of a server setting).
      if (process.env.PS_SERVER_ARGS) args.push(...process.env.PS_SERVER_ARGS.trim().split(/\s+/));
      const [command, ...prefix] = [...(options.wrap ?? []), process.execPath];
      // PS_CPU_PROF=DIR: each server writes a V8 CPU profile there when it stops.
      const profile = process.env.PS_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.PS_CPU_PROF}`] : [];
      const child = track(net.spawn(hosts[id - 1]!, command, [...prefix, ...profile, ...args], { stdio: ['ignore', log, log] }));
      closeSync(log);
      procs.set(id, child);
      await waitHealthy(`${urls[id - 1]!.replace(/^ws/, 'http')}/healthz`, child, `powerstore server ${id} (log in ${dir})`);
    },
    process(id) {
      const c = procs.get(id);
      return c && !exited(c) ? c : undefined;
    },
    async signal(id, signal) {
      const c = procs.get(id);
      if (!c || exited(c)) throw new Error(`server ${id} is not running`);
      const gone = new Promise<void>((done) => c.once('exit', () => done()));
      c.kill(signal);
      if (signal === 'SIGKILL') await gone;
    },
    async stop() {
      await Promise.all(
        [...procs.values()].map(
          (c) =>
            new Promise<void>((done) => {
              if (exited(c)) return done();
              const timer = setTimeout(() => c.kill('SIGKILL'), 15_000);
              c.once('exit', () => {
                clearTimeout(timer);
                done();
              });
              // A stopped process keeps SIGTERM pending until it runs again.
              c.kill('SIGCONT');
              c.kill('SIGTERM');
            }),
        ),
      );
    },
  };
}

/** `powerstore-server init` + `start` × (3t + 1), server i on host `ps<i>`. */
export async function startPowerStore(t: number, fsync: boolean, net: Network = LOOPBACK): Promise<RunningSystem> {
  const c = await createPowerStore(t, net, { fsync });
  const stop = async () => {
    await c.stop();
    rmSync(c.dir, { recursive: true, force: true });
  };
  try {
    await Promise.all(c.hosts.map((_, i) => c.start(i + 1)));
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    system: 'powerstore',
    t,
    fsync,
    urls: c.urls,
    writer: c.writer,
    dir: c.dir,
    pids: c.hosts.map((_, i) => c.process(i + 1)!.pid!),
    stop,
  };
}

/** M-ABD: 2t + 1 replicas on hosts `abd<i>`; single: one server on host `single`. */
export async function startBaseline(
  system: 'm-abd' | 'single',
  t: number,
  fsync: boolean,
  net: Network = LOOPBACK,
): Promise<RunningSystem> {
  const dir = mkdtempSync(join(tmpdir(), `powerstore-bench-${system}-`));
  const n = serversOf(system, t);
  const hosts: NetHost[] = Array.from({ length: n }, (_, i) => net.host(system === 'single' ? 'single' : `abd${i + 1}`));
  const base = await net.basePort(n);
  const children: ChildProcess[] = [];
  const stop = stopper(children, dir);
  const urls: string[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const log = openSync(join(dir, `server-${i + 1}.log`), 'a');
      const args = [
        ...TSX_EXEC_ARGV,
        join(ROOT, 'bench/baselines/server.ts'),
        '--host',
        hosts[i]!.address,
        '--port',
        String(base + i),
        '--data',
        join(dir, `data-${i + 1}`),
      ];
      if (!fsync) args.push('--unsafe-no-fsync');
      children.push(track(net.spawn(hosts[i]!, process.execPath, args, { stdio: ['ignore', log, log], cwd: ROOT })));
      closeSync(log);
      urls.push(`ws://${hosts[i]!.address}:${base + i}`);
    }
    await Promise.all(urls.map((u, i) => waitHealthy(u.replace(/^ws/, 'http'), children[i]!, `${system} server ${i + 1} (log in ${dir})`)));
  } catch (e) {
    await stop();
    throw e;
  }
  return { system, t, fsync, urls, dir, pids: children.map((c) => c.pid!), stop };
}

/** Starts `system` with its servers on `net`'s hosts (loopback when not given). */
export function startSystem(system: SystemName, t: number, fsync: boolean, net: Network = LOOPBACK): Promise<RunningSystem> {
  return system === 'powerstore' ? startPowerStore(t, fsync, net) : startBaseline(system, t, fsync, net);
}
