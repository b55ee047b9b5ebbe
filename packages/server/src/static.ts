/**
 * A small static file server for `powerstore-server dev --static <dir>`: the hook the demo
 * web app uses. It runs in the dev supervisor on its own port, apart from the storage
 * servers, so a storage server never serves files. Besides the directory it serves the
 * public `cluster.json` at `/cluster.json`, which is how the page finds the servers. It
 * serves no secret: the page makes its own identity in the browser.
 *
 * Listening on loopback, it answers only requests whose `Host` is a loopback name
 * (`localhost`, `127.x.y.z`, `[::1]`, with no port or its own): a page on another site
 * whose name an attacker re-points at 127.0.0.1 (DNS rebinding) reaches this port with its
 * own name as `Host`, and gets 421 instead of the files and the cluster file.
 */
import { createReadStream, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { extname, join, normalize, resolve, sep } from 'node:path';
import { isLoopbackHost } from '@powerstore/protocol';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.map': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};

/** A listening static server. */
export interface StaticServer {
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves `root` (index.html for directories) and `clusterJson` at `/cluster.json`. On a
 * loopback `host`, requests with any other `Host` get 421 Misdirected Request.
 */
export async function startStaticServer(options: { root: string; clusterJson: string; host: string; port: number }): Promise<StaticServer> {
  const root = resolve(options.root);
  const checkHost = isLoopbackHost(options.host);
  const server = createServer((req, res) => {
    // The bound port (options.port may be 0); address() is null once closing.
    const port = (server.address() as AddressInfo | null)?.port ?? options.port;
    if (checkHost && !loopbackHostHeader(req.headers.host, port)) {
      res
        .writeHead(421, { 'content-type': 'text/plain; charset=utf-8' })
        .end('misdirected request: this development server answers only to localhost, 127.0.0.1 and [::1]\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
      return;
    }
    let path: string;
    try {
      path = decodeURIComponent((req.url ?? '/').split('?')[0]!);
    } catch {
      res.writeHead(400).end();
      return;
    }
    const special = path === '/cluster.json' ? options.clusterJson : undefined;
    let file = special ?? join(root, normalize(path));
    // normalize() keeps '..' out of the joined path, and this check keeps it inside root.
    if (special === undefined && file !== root && !file.startsWith(root + sep)) {
      res.writeHead(403).end();
      return;
    }
    try {
      if (statSync(file).isDirectory()) file = join(file, 'index.html');
      const size = statSync(file).size;
      res.writeHead(200, {
        'content-type': TYPES[extname(file)] ?? 'application/octet-stream',
        'content-length': size,
        'cache-control': 'no-cache',
      });
      if (req.method === 'HEAD') res.end();
      else createReadStream(file).pipe(res);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    }
  });
  await new Promise<void>((done, fail) => {
    server.once('error', fail);
    server.listen(options.port, options.host, () => done());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${options.host.includes(':') ? `[${options.host}]` : options.host}:${port}`,
    close: () => new Promise<void>((done) => server.close(() => done())),
  };
}

/**
 * Whether a `Host` header names a loopback host, with no port or `port`. Checked for its
 * shape first, so a header such as `evil.example@127.0.0.1` is not read as 127.0.0.1.
 */
export function loopbackHostHeader(header: string | undefined, port: number): boolean {
  const m = header === undefined ? null : /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(header);
  if (!m) return false;
  return isLoopbackHost(m[1]!) && (m[2] === undefined || Number(m[2]) === port);
}
