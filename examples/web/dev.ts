/**
 * `pnpm demo:web`: runs a development cluster (`powerstore-server dev`, 3t + 1 servers on
 * loopback, kept in .powerstore/) and the Vite dev server for this page, which serves the
 * cluster's public cluster.json next to the page (and nothing secret: the page makes its
 * own identity). Ctrl-C stops both.
 *
 *   pnpm demo:web [-- --port 5173] [-- --dir .powerstore] [-- --base-port 7001]
 *
 * `startDemoVite` is the Vite dev server alone, as this script configures it (the tests use it).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { createServer, type InlineConfig, type Plugin, type ViteDevServer } from 'vite';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '../..');

export interface DemoViteOptions {
  /** The cluster's directory: its public cluster.json is served at /cluster.json. */
  readonly clusterDir: string;
  /** Port to listen on (127.0.0.1); taken or not, Vite moves on to the next free one. */
  readonly port: number;
}

/** Serves the public cluster file at /cluster.json, read fresh each time. */
function clusterFiles(dir: string): Plugin {
  return {
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
}

/** `path` as a glob matching itself only (picomatch treats a backslash as an escape). */
function globLiteral(path: string): string {
  return path.replace(/[\\*?[\]{}()!+@]/g, '\\$&');
}

/**
 * The Vite configuration of the demo's dev server.
 *
 * Vite's dev server answers any local process, not only the page, and by default it
 * serves every file of the workspace through `/@fs/<absolute path>`: the cluster's
 * `admin.json` and `server-<id>.json` in `.powerstore/`, for one. So it serves only what
 * the page needs (`server.fs.allow`): this directory, and the modules the page imports,
 * which Vite lets through as it resolves their imports (the packages' `dist/`, its
 * pre-bundled dependencies, its own client). And it refuses (`server.fs.deny`, which wins
 * over `allow` and over those modules) any `.powerstore` directory, every file of the
 * cluster's directory (its public `cluster.json` is served at `/cluster.json` by the
 * plug-in above, which reads that one file), every dot-file and dot-directory inside this
 * directory, and files named like PowerStore's secret files wherever they are. `strict`
 * (Vite's default) stays on: it is what makes `allow` and `deny` apply.
 */
export function demoViteConfig(options: DemoViteOptions): InlineConfig {
  const dir = resolve(options.clusterDir);
  // A cluster directory holding the page (--dir examples/web, say) cannot be denied whole
  // without denying the page: its secret files are still denied by name.
  const holdsPage = here === dir || here.startsWith(`${dir}${sep}`);
  return {
    root: here,
    configFile: false,
    plugins: [clusterFiles(dir)],
    server: {
      host: '127.0.0.1',
      port: options.port,
      strictPort: false,
      fs: {
        strict: true,
        allow: [here],
        deny: [
          // Vite's defaults, which a `deny` of one's own replaces.
          '.env',
          '.env.*',
          '*.{crt,pem}',
          '**/.git/**',
          // PowerStore's secrets: cluster directories, identities, server keys.
          '**/.powerstore/**',
          ...(holdsPage ? [] : [`${globLiteral(dir)}/**`]),
          '**/admin.json',
          '**/server-*.json',
          '**/identity.json',
          // Dot-files and dot-directories in the page's directory (an editor's, a cluster's).
          `${globLiteral(here)}/**/.*`,
          `${globLiteral(here)}/**/.*/**`,
        ],
      },
    },
  };
}

/** Starts the demo's Vite dev server (listening when this resolves). */
export async function startDemoVite(options: DemoViteOptions & { readonly logLevel?: InlineConfig['logLevel'] }): Promise<ViteDevServer> {
  const vite = await createServer({ ...demoViteConfig(options), ...(options.logLevel ? { logLevel: options.logLevel } : {}) });
  await vite.listen();
  return vite;
}

async function main(): Promise<void> {
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

  const vite = await startDemoVite({ clusterDir: dir, port: Number(values.port) });
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
}

// Run as a script (tsx examples/web/dev.ts), not when a test imports it.
if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) await main();
