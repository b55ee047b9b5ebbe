/**
 * `GET /readyz` (readiness) beside `GET /healthz` (liveness), on four servers started in
 * process with self-healing, as the CLI's `start` runs them: a server started on an empty
 * data directory whose peers are down is alive (200 on `/healthz`) but rebuilding, so not
 * ready (503, reason `rebuilding`); once its peers are up and a catch-up pass completes it
 * is ready, as are its peers. Every other reason, from a hand-made route context.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { initCluster, loadServerConfig, startServer, type RunningServer } from '../src/index.js';
import { readiness, type RouteContext } from '../src/routes.js';
import { freeBasePort } from '../../../test/ports.js';

const silent = pino({ level: 'silent' });
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function ready(url: string): Promise<{ status: number; body: { status: string; reasons: string[]; catchUp?: string } }> {
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: (await res.json()) as { status: string; reasons: string[]; catchUp?: string } };
}

describe('GET /readyz', () => {
  it('answers 503 naming `rebuilding` while a fresh server cannot reach its peers, and 200 once a catch-up pass completes', async () => {
    const root = mkdtempSync(join(tmpdir(), 'powerstore-readyz-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    const base = await freeBasePort(4);
    const init = await initCluster({ t: 1, dir: join(root, 'cluster'), basePort: base, writers: 'open' });
    const servers: RunningServer[] = [];
    cleanups.push(async () => {
      for (const s of servers) await s.close();
    });
    const start = async (i: number) => {
      const config = await loadServerConfig(init.serverFiles[i]!);
      const server = await startServer({
        cluster: config.cluster,
        index: config.index,
        seed: config.seed,
        host: config.host,
        port: config.port,
        dataDir: join(root, `data-${i + 1}`),
        logger: silent,
        // The CLI's defaults, but a long interval: the passes this test needs it runs itself.
        heal: { catchUp: { intervalMs: 600_000 } },
      });
      servers.push(server);
      return server;
    };
    const http = (s: RunningServer) => s.url.replace(/^ws/, 'http');

    // Alone, server 1 cannot list the cluster: it stays rebuilding. Alive, not ready.
    const first = await start(0);
    expect((await fetch(`${http(first)}/healthz`)).status).toBe(200);
    const lonely = await ready(http(first));
    expect(lonely.status).toBe(503);
    expect(lonely.body).toMatchObject({ status: 'not-ready', reasons: ['rebuilding'], id: 1, catchUp: 'rebuilding' });

    // Its peers come up (fresh too); a complete pass ends every rebuild.
    for (let i = 1; i < 4; i++) await start(i);
    for (const s of servers) {
      const report = await s.healing!.runPass();
      expect(report.complete).toBe(true);
    }
    for (const s of servers) {
      const r = await ready(http(s));
      expect(r.status, `server at ${s.url}`).toBe(200);
      expect(r.body).toMatchObject({ status: 'ready', reasons: [], catchUp: 'caught-up', storageCheck: 'clean' });
    }
  }, 60_000);

  it('names every reason a server is out of service, and leaves catch-up that is behind out of it', () => {
    const ctx = (over: Partial<RouteContext>): RouteContext =>
      ({ id: 2, cluster: 'c', shuttingDown: () => false, ...over }) as unknown as RouteContext;
    expect(readiness(ctx({ catchUp: () => 'behind', storageCheck: () => 'repaired' }))).toEqual({
      ready: true,
      body: { status: 'ready', reasons: [], id: 2, cluster: 'c', catchUp: 'behind', storageCheck: 'repaired' },
    });
    const all = readiness(
      ctx({
        shuttingDown: () => true,
        disk: () => ({ state: 'full', since: 0 }),
        rebuilding: () => true,
        catchUp: () => 'rebuilding',
        storageCheck: () => 'damaged',
      }),
    );
    expect(all.ready).toBe(false);
    expect(all.body).toMatchObject({ status: 'not-ready', reasons: ['shutting-down', 'storage-full', 'rebuilding', 'storage-damaged'] });
    expect(readiness(ctx({ disk: () => ({ state: 'failed', since: 0 }) })).body).toMatchObject({ reasons: ['storage-failed'] });
  });
});
