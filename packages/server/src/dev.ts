/**
 * `powerstore-server dev`: a whole cluster on one machine for development. Each server is
 * a child process running `start`, exactly as in production, so what works here works
 * there; this process only supervises (it refuses ports another process holds, checks that
 * what answers on each port is its own server, and restarts a server that dies, with a
 * back-off), prints the URLs and, with `--static`, serves the demo app.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { isLoopbackHost } from '@powerstore/protocol';
import { initCluster, loadClusterFile, openWritersWarning, serverFileName } from './config.js';
import { startStaticServer, type StaticServer } from './static.js';

/** Flags of `dev`. */
export interface DevFlags {
  t: number;
  dir: string;
  host: string;
  basePort: number;
  static?: string;
  staticPort?: number;
  unsafeNoFsync: boolean;
  logLevel: string;
}

/** Starts the cluster and resolves once it has been stopped by a signal. */
export async function runDev(o: DevFlags & { cliPath: string }): Promise<void> {
  const clusterFile = join(o.dir, 'cluster.json');
  if (!existsSync(clusterFile)) {
    // Plaintext always: dev starts its servers without certificates. For a --host that is
    // not loopback that exposes the traffic, which the warning says.
    // Open: the demo page makes its own identity, which no cluster file lists. Quotas per
    // identity then do not bound what one person stores: said when others can reach it.
    const r = await initCluster({ t: o.t, dir: o.dir, host: o.host, basePort: o.basePort, tls: false, writers: 'open' });
    process.stdout.write(`created a cluster of ${3 * o.t + 1} servers (t = ${o.t}) in ${o.dir}\n`);
    const warnings = [...r.warnings, ...(isLoopbackHost(o.host) ? [] : [openWritersWarning()])];
    for (const w of warnings) process.stderr.write(`powerstore-server: warning: ${w}\n`);
  }
  const cluster = loadClusterFile(clusterFile);
  // Another process on a server's port would answer in its place (another dev cluster's
  // server, say): refuse to start rather than supervise someone else's servers.
  const taken = (await Promise.all(cluster.servers.map(async (s) => ((await portFree(s.url)) ? [] : [s])))).flat();
  if (taken.length > 0) {
    for (const s of taken)
      process.stderr.write(
        `powerstore-server: ${new URL(s.url).host} (server ${s.id} of ${o.dir}) is taken by another process: stop it (another dev cluster?), or use another --dir and --base-port\n`,
      );
    process.exitCode = 1;
    return;
  }
  const children = new Map<number, ChildProcess>();
  const restarts = new Map<number, NodeJS.Timeout>();
  let stopping = false;
  let staticServer: StaticServer | undefined;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));

  const stopAll = async (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
    for (const timer of restarts.values()) clearTimeout(timer);
    process.stdout.write(`\n${signal}: stopping ${children.size} servers…\n`);
    await staticServer?.close();
    await Promise.all(
      [...children.values()].map(
        (child) =>
          new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            // Servers finish their in-flight requests on SIGTERM; a hung one is killed.
            const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
            child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            child.kill('SIGTERM');
          }),
      ),
    );
    process.stdout.write('all servers stopped\n');
    finish();
  };
  process.on('SIGINT', () => void stopAll('SIGINT'));
  process.on('SIGTERM', () => void stopAll('SIGTERM'));

  /** Consecutive quick deaths of each server: its back-off, and when to give up. */
  const crashes = new Map<number, number>();
  const launch = (s: (typeof cluster.servers)[number]) => {
    const args = [
      ...process.execArgv,
      o.cliPath,
      'start',
      '--config',
      join(o.dir, serverFileName(s.id)),
      '--data',
      join(o.dir, `data-${s.id}`),
      '--log-level',
      o.logLevel,
      ...(o.unsafeNoFsync ? ['--unsafe-no-fsync'] : []),
    ];
    // Same process group: a terminal Ctrl-C reaches the servers too and starts the same
    // graceful shutdown. The IPC channel lets a server notice when this supervisor dies.
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const started = Date.now();
    children.set(s.id, child);
    child.on('exit', (code, signal) => {
      children.delete(s.id);
      if (stopping) return;
      // A server that ran a while before dying starts over at the shortest back-off.
      const quick = Date.now() - started < RESTART_RESET_MS ? (crashes.get(s.id) ?? 0) + 1 : 1;
      crashes.set(s.id, quick);
      const why = signal ?? `code ${code}`;
      if (quick > MAX_QUICK_CRASHES) {
        process.stderr.write(
          `server ${s.id} exited (${why}) ${quick} times in a row within ${RESTART_RESET_MS / 1000} s of starting: not restarting it (its log is above); the others keep serving\n`,
        );
        if (children.size === 0 && restarts.size === 0) {
          stopping = true;
          void staticServer?.close();
          finish();
          process.exitCode = 1;
        }
        return;
      }
      const delay = Math.min(RESTART_MAX_MS, RESTART_MIN_MS * 2 ** (quick - 1));
      process.stderr.write(`server ${s.id} exited (${why}); restarting it in ${delay / 1000} s, the others keep serving\n`);
      restarts.set(
        s.id,
        setTimeout(() => {
          restarts.delete(s.id);
          if (!stopping) launch(s);
        }, delay),
      );
    });
  };
  for (const s of cluster.servers) launch(s);

  const healthy = await Promise.all(cluster.servers.map((s) => waitHealthy(s.url, s.id, cluster.file.id, 20_000)));
  const note = (h: Health) =>
    h === 'ok'
      ? ''
      : h === 'other'
        ? '  (ANOTHER server answers here: not this cluster’s, or not this id)'
        : '  (not answering /healthz yet)';
  process.stdout.write(
    `PowerStore dev cluster, t = ${cluster.config.t}, n = ${cluster.config.n}, writers: ${cluster.policy.writers} (${o.dir})\n` +
      cluster.servers.map((s, i) => `  server ${s.id}: ${s.url}${note(healthy[i]!)}\n`).join('') +
      `  admin identity: ${join(o.dir, 'admin.json')} (may write any key)\n`,
  );
  if (o.static && !stopping) {
    const first = new URL(cluster.servers[0]!.url);
    const port = o.staticPort ?? Number(first.port) - 1;
    const host = first.hostname.replace(/^\[|\]$/g, '');
    // The page gets the public cluster file and nothing else: it makes its own identity.
    staticServer = await startStaticServer({ root: o.static, clusterJson: clusterFile, host, port });
    process.stdout.write(`  web app: ${staticServer.url}/  (files from ${o.static}; the public cluster file at /cluster.json)\n`);
  }
  process.stdout.write('Ctrl-C stops everything.\n');
  await finished;
}

/** A server that dies within this long of starting counts as crashing again. */
const RESTART_RESET_MS = 30_000;
/** First restart delay, doubled per quick crash up to {@link RESTART_MAX_MS}. */
const RESTART_MIN_MS = 1000;
const RESTART_MAX_MS = 30_000;
/** Quick crashes in a row after which a server is left down. */
const MAX_QUICK_CRASHES = 5;

/** Whether nothing listens on `wsUrl`'s host and port (a listen there succeeds). */
function portFree(wsUrl: string): Promise<boolean> {
  const { hostname, port } = new URL(wsUrl);
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen({ host: hostname.replace(/^\[|\]$/g, ''), port: Number(port), exclusive: true }, () => probe.close(() => resolve(true)));
  });
}

type Health = 'ok' | 'other' | 'silent';

/** Waits until server `id` of cluster `clusterId` answers `/healthz` at `wsUrl`; `other` if a different server answers there. */
async function waitHealthy(wsUrl: string, id: number, clusterId: string, timeoutMs: number): Promise<Health> {
  const url = wsUrl.replace(/^ws/, 'http') + '/healthz';
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      const body = (await res.json()) as { id?: number; cluster?: string };
      if (body.id !== id || body.cluster !== clusterId) return 'other';
      if (res.ok) return 'ok';
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return 'silent';
}
