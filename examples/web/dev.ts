/**
 * `pnpm demo:web`: runs a development cluster (`powerstore-server dev`, 3t + 1 servers on
 * loopback, kept in .powerstore/) and the Vite dev server for this page, which serves the
 * cluster's public cluster.json next to the page (and nothing secret: the page makes its
 * own identity). Ctrl-C stops both.
 *
 *   pnpm demo:web [-- --port 5173] [-- --dir .powerstore] [-- --base-port 7001]
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createServer, type Plugin } from 'vite';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');
const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '5173' },
    dir: { type: 'string', default: join(root, '.powerstore') },
    'base-port': { type: 'string', default: '7001' },
  },
});
const dir = resolve(values.dir);
const cli = join(root, 'packages/server/dist/cli.js');
if (!existsSync(cli)) {
  console.error(`${cli} is missing: run 'pnpm build' first`);
  process.exit(1);
}

const cluster = spawn(process.execPath, [cli, 'dev', '--dir', dir, '--base-port', values['base-port'], '--log-level', 'warn'], {
  stdio: 'inherit',
});
let stopping = false;
cluster.once('exit', (code) => {
  if (!stopping) {
    console.error(`powerstore-server dev exited (${code}); stopping`);
    process.exit(1);
  }
});

// `dev` creates the cluster files on its first run: wait for them (bounded).
const deadline = Date.now() + 30_000;
while (!existsSync(join(dir, 'cluster.json'))) {
  if (Date.now() > deadline) {
    console.error(`no ${join(dir, 'cluster.json')} after 30 s`);
    cluster.kill('SIGTERM');
    process.exit(1);
  }
  await new Promise((r) => setTimeout(r, 100));
}

/** Serves the public cluster file at /cluster.json, read fresh each time. */
const clusterFiles: Plugin = {
  name: 'powerstore-cluster-files',
  configureServer(server) {
    server.middlewares.use((req, res, next) => {
      const path = (req.url ?? '').split('?')[0];
      if (path !== '/cluster.json') return next();
      res.setHeader('content-type', 'application/json');
      res.setHeader('cache-control', 'no-store');
      res.end(readFileSync(join(dir, 'cluster.json')));
    });
  },
};

const vite = await createServer({
  root: here,
  configFile: false,
  plugins: [clusterFiles],
  server: { host: '127.0.0.1', port: Number(values.port), strictPort: false },
});
await vite.listen();
vite.printUrls();
console.log(`cluster: ${dir} (servers from port ${values['base-port']}); Ctrl-C stops everything`);

const stop = async () => {
  if (stopping) return;
  stopping = true;
  await vite.close();
  cluster.kill('SIGTERM');
  const timer = setTimeout(() => cluster.kill('SIGKILL'), 15_000);
  cluster.once('exit', () => {
    clearTimeout(timer);
    process.exit(0);
  });
};
process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());
