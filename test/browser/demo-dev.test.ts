/**
 * `pnpm demo:web`'s Vite dev server (examples/web/dev.ts, started with the same
 * configuration through its `startDemoVite`) serves the page, the modules it imports and
 * the public cluster.json, and nothing else: not the cluster's admin identity or server
 * keys beside cluster.json, not a secret in a dot-directory inside the page's own
 * directory, not the rest of the repository, not /etc/passwd, however the path is asked
 * for (`/@fs/`, `?raw`, `?import`, `/@id/`). Loopback only, on a free port.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ViteDevServer } from 'vite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDemoVite } from '../../examples/web/dev.js';
import { freeBasePort } from '../ports.js';
import { ROOT, cli, ensureBuiltProjects } from '../server/harness.js';

let vite: ViteDevServer | undefined;
let base: string;
/** A scratch directory inside the repository (as `<repo>/.powerstore` is), holding the cluster in `.powerstore/`. */
let scratch: string;
let clusterDir: string;
/** A dot-directory planted inside the page's own directory, holding an identity. */
let plantedDir: string;
/** Every secret key the files above hold: no response may contain any of them. */
const secrets: string[] = [];

function secretOf(file: string): string {
  const json = JSON.parse(readFileSync(file, 'utf8')) as { secretKey: string };
  return json.secretKey;
}

async function get(path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(15_000), redirect: 'manual' });
  return { status: res.status, body: await res.text() };
}

beforeAll(async () => {
  await ensureBuiltProjects(['packages/server', 'packages/client']); // the page imports the packages' dist/
  mkdirSync(join(ROOT, 'test-results'), { recursive: true });
  scratch = mkdtempSync(join(ROOT, 'test-results', 'demo-dev-'));
  clusterDir = join(scratch, '.powerstore');
  const r = cli(['init', '--t', '1', '--dir', clusterDir, '--base-port', String(await freeBasePort(4))]);
  if (r.status !== 0) throw new Error(`init failed: ${r.stderr}`);
  secrets.push(secretOf(join(clusterDir, 'admin.json')), secretOf(join(clusterDir, 'server-1.json')));
  plantedDir = mkdtempSync(join(ROOT, 'examples/web', '.powerstore-test-'));
  writeFileSync(join(plantedDir, 'identity.json'), readFileSync(join(clusterDir, 'admin.json')));
  vite = await startDemoVite({ clusterDir, port: await freeBasePort(1), logLevel: 'silent' });
  const address = vite.httpServer?.address();
  if (!address || typeof address === 'string') throw new Error('Vite has no address');
  base = `http://127.0.0.1:${address.port}`;
}, 120_000);

afterAll(async () => {
  await vite?.close();
  if (plantedDir) rmSync(plantedDir, { recursive: true, force: true });
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('demo:web dev server', () => {
  it('serves the page, every module it imports, and the public cluster.json', async () => {
    const page = await get('/');
    expect(page.status).toBe(200);
    expect(page.body).toContain('PowerStore demo');

    const cluster = await get('/cluster.json');
    expect(cluster.status).toBe(200);
    expect(JSON.parse(cluster.body)).toEqual(JSON.parse(readFileSync(join(clusterDir, 'cluster.json'), 'utf8')));

    // What a browser loading the page fetches: its scripts and stylesheet, then every
    // module they import, transitively (bounded), as Vite rewrote the specifiers.
    const queue = [...page.body.matchAll(/(?:src|href)="(\/[^"]+)"/g)].map((m) => m[1]!);
    expect(queue).toContain('/src/main.ts');
    const seen = new Set<string>();
    while (queue.length > 0) {
      const url = queue.shift()!;
      if (seen.has(url)) continue;
      seen.add(url);
      expect(seen.size, 'the module graph is bounded').toBeLessThan(300);
      const { status, body } = await get(url);
      expect(status, url).toBe(200);
      for (const m of body.matchAll(/(?:\bfrom\s*|\bimport\s*\(?\s*)["'](\/[^"']+)["']/g)) queue.push(m[1]!);
    }
    // The client (from packages/client/dist) and its codec came through.
    expect([...seen].some((u) => u.includes('/packages/client/dist/'))).toBe(true);
    expect([...seen].some((u) => u.includes('/packages/erasure/dist/'))).toBe(true);
  });

  it("refuses the cluster's secret files, dot-directories, the rest of the repository and the system's files", async () => {
    const denied = [
      `/@fs${clusterDir}/admin.json`,
      `/@fs${clusterDir}/server-1.json`,
      `/@fs${clusterDir}/server-1.json?raw`,
      `/@fs${clusterDir}/admin.json?import`,
      `/@fs${clusterDir}/cluster.json`, // served at /cluster.json only, never from the cluster's directory
      `/@fs${plantedDir}/identity.json`,
      `/${plantedDir.slice(join(ROOT, 'examples/web').length + 1)}/identity.json`,
      `/@fs${ROOT}/package.json`,
      `/@fs${ROOT}/packages/server/src/config.ts`,
      '/@fs/etc/passwd',
      '/@fs/etc/passwd?raw',
    ];
    for (const path of denied) {
      const { status, body } = await get(path);
      expect(status, path).toBe(403);
      for (const secret of secrets) expect(body, path).not.toContain(secret);
      expect(body, path).not.toMatch(/root:.*:0:0:/);
    }
    // Asked for as a module id, the file is refused too (or the page's own HTML comes back, Vite's fallback).
    for (const path of [`/@id${clusterDir}/admin.json`, `/@id${clusterDir}/admin.json?import`, `/@id${plantedDir}/identity.json?raw`]) {
      const { body } = await get(path);
      for (const secret of secrets) expect(body, path).not.toContain(secret);
      expect(body, path).not.toContain('secretKey');
    }
    // The default cluster directory, <repo>/.powerstore: refused if it exists here, and
    // otherwise (nothing to refuse) Vite's fallback, the page's own HTML.
    for (const file of ['admin.json', 'server-1.json', 'identity.json']) {
      const { status, body } = await get(`/@fs${ROOT}/.powerstore/${file}`);
      expect(body, file).not.toContain('secretKey');
      if (status !== 403) expect(body, file).toContain('PowerStore demo');
    }
  });
});
