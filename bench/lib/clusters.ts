/**
 * The systems under test as real processes on loopback, each with its own LevelDB
 * directories on disk: a PowerStore cluster (`powerstore-server` CLI from
 * packages/server/dist, as operators run it), an M-ABD cluster and a single server
 * (bench/baselines/server.ts). Same approach as test/server/harness.ts's CliCluster.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

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

async function portFree(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = createServer();
    s.once('error', () => done(false));
    s.listen(port, '127.0.0.1', () => s.close(() => done(true)));
  });
}

async function freeBasePort(count: number): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    let ok = true;
    for (let p = base; p < base + count && ok; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error('no free ports');
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

/** `powerstore-server init` + `start` × (3t + 1). */
export async function startPowerStore(t: number, fsync: boolean): Promise<RunningSystem> {
  const dir = mkdtempSync(join(tmpdir(), 'powerstore-bench-ps-'));
  const n = 3 * t + 1;
  const base = await freeBasePort(n);
  const init = spawnSync(process.execPath, [SERVER_CLI, 'init', '--t', String(t), '--dir', dir, '--base-port', String(base)], { encoding: 'utf8' });
  if (init.status !== 0) throw new Error(`powerstore-server init failed: ${init.stderr}`);
  const cluster = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as { servers: { url: string }[] };
  const writer = { cluster, identity: JSON.parse(readFileSync(join(dir, 'admin.json'), 'utf8')) as object };
  const children: ChildProcess[] = [];
  const stop = stopper(children, dir);
  try {
    for (let id = 1; id <= n; id++) {
      const log = openSync(join(dir, `server-${id}.log`), 'a');
      const args = [SERVER_CLI, 'start', '--config', join(dir, `server-${id}.json`), '--data', join(dir, `data-${id}`), '--log-level', 'warn'];
      if (!fsync) args.push('--unsafe-no-fsync');
      children.push(track(spawn(process.execPath, args, { stdio: ['ignore', log, log] })));
      closeSync(log);
    }
    await Promise.all(cluster.servers.map((s, i) => waitHealthy(`${s.url.replace(/^ws/, 'http')}/healthz`, children[i]!, `powerstore server ${i + 1} (log in ${dir})`)));
  } catch (e) {
    await stop();
    throw e;
  }
  return { system: 'powerstore', t, fsync, urls: cluster.servers.map((s) => s.url), writer, dir, pids: children.map((c) => c.pid!), stop };
}

/** M-ABD: 2t + 1 replicas; single: one server. */
export async function startBaseline(system: 'm-abd' | 'single', t: number, fsync: boolean): Promise<RunningSystem> {
  const dir = mkdtempSync(join(tmpdir(), `powerstore-bench-${system}-`));
  const n = system === 'single' ? 1 : 2 * t + 1;
  const base = await freeBasePort(n);
  const children: ChildProcess[] = [];
  const stop = stopper(children, dir);
  const urls: string[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const log = openSync(join(dir, `server-${i + 1}.log`), 'a');
      const args = [...TSX_EXEC_ARGV, join(ROOT, 'bench/baselines/server.ts'), '--port', String(base + i), '--data', join(dir, `data-${i + 1}`)];
      if (!fsync) args.push('--unsafe-no-fsync');
      children.push(track(spawn(process.execPath, args, { stdio: ['ignore', log, log], cwd: ROOT })));
      closeSync(log);
      urls.push(`ws://127.0.0.1:${base + i}`);
    }
    await Promise.all(urls.map((u, i) => waitHealthy(u.replace(/^ws/, 'http'), children[i]!, `${system} server ${i + 1} (log in ${dir})`)));
  } catch (e) {
    await stop();
    throw e;
  }
  return { system, t, fsync, urls, dir, pids: children.map((c) => c.pid!), stop };
}

export function startSystem(system: SystemName, t: number, fsync: boolean): Promise<RunningSystem> {
  return system === 'powerstore' ? startPowerStore(t, fsync) : startBaseline(system, t, fsync);
}
