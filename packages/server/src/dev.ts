/**
 * `powerstore-server dev`: a whole cluster on one machine for development. Each server is
 * a child process running `start`, exactly as in production, so what works here works
 * there; this process only supervises, prints the URLs and, with `--static`, serves the
 * demo app.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
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
  const children = new Map<number, ChildProcess>();
  let stopping = false;
  let staticServer: StaticServer | undefined;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => (finish = resolve));

  const stopAll = async (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = true;
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

  for (const s of cluster.servers) {
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
    children.set(s.id, child);
    child.on('exit', (code, signal) => {
      if (!stopping) process.stderr.write(`server ${s.id} exited (${signal ?? `code ${code}`}); the others keep serving\n`);
      children.delete(s.id);
      if (children.size === 0 && !stopping) {
        stopping = true;
        void staticServer?.close();
        finish();
        process.exitCode = 1;
      }
    });
  }

  const healthy = await Promise.all(cluster.servers.map((s) => waitHealthy(s.url, 20_000)));
  process.stdout.write(
    `PowerStore dev cluster, t = ${cluster.config.t}, n = ${cluster.config.n}, writers: ${cluster.policy.writers} (${o.dir})\n` +
      cluster.servers.map((s, i) => `  server ${s.id}: ${s.url}${healthy[i] ? '' : '  (not answering /healthz yet)'}\n`).join('') +
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

async function waitHealthy(wsUrl: string, timeoutMs: number): Promise<boolean> {
  const url = wsUrl.replace(/^ws/, 'http') + '/healthz';
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
      if (res.ok) return true;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}
