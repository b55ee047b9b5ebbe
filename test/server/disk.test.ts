/**
 * Failing disks (issue 28) on real server processes: what a server does when LevelDB's
 * fsync fails (EIO, injected with libfiu: `test/fiu.ts`) and when its disk is full
 * (ENOSPC, a real one: a small tmpfs filled up), as `packages/server/README.md`
 * ("Failing disks") promises. Needs libfiu (`scripts/setup.mjs --for-tests`) for the
 * first and root (mount) for the second; each is skipped, saying why, without.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, type ServerStatus, type Store } from '@powerstore/client';
import type { Reply } from '@powerstore/protocol';
import { LevelStorage } from '../../packages/server/src/index.js';
import { FIU_RUN, FSYNC_EIO, failDisk, fiuMissing } from '../fiu.js';
import { TestClient } from './driver.js';
import { cli, CliCluster, ensureBuilt, metricValue } from './harness.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const bytes = (s: string) => new TextEncoder().encode(s);

let cluster: CliCluster | undefined;
const clients: TestClient[] = [];
const stores: Store[] = [];
const mounts: string[] = [];

beforeAll(async () => {
  await ensureBuilt();
}, 240_000);

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of stores.splice(0)) s.close();
  await cluster?.stop(false);
  for (const m of mounts.splice(0)) execFileSync('umount', ['-l', m]);
  if (cluster) rmSync(cluster.dir, { recursive: true, force: true });
  cluster = undefined;
});

/** Replies of one server (0-based `index`) a driver's client received, by key. */
function recordReplies(client: TestClient, index: number): { replies: { key: string; reply: Reply; at: number }[] } {
  const log = { replies: [] as { key: string; reply: Reply; at: number }[] };
  client.cluster.onReply = (from, reply) => {
    if (from === index) log.replies.push({ key: reply.key, reply, at: performance.now() });
  };
  return log;
}

const exited = (c: CliCluster, id: number): Promise<number | null> =>
  new Promise((resolve) => {
    const p = c.process(id);
    if (!p || p.exitCode !== null) resolve(p?.exitCode ?? null);
    else p.once('exit', (code) => resolve(code));
  });

async function healthz(c: CliCluster, id: number): Promise<{ status: number; body: { status: string; storage?: { state: string } } }> {
  const r = await fetch(`${c.http(id)}/healthz`, { signal: AbortSignal.timeout(3000) });
  return { status: r.status, body: (await r.json()) as { status: string; storage?: { state: string } } };
}

const fiuSkip = fiuMissing();
const rootSkip = process.getuid?.() === 0 ? undefined : 'not root: mounting a tmpfs to fill needs root';

describe('fsync fails with EIO', () => {
  it.skipIf(fiuSkip !== undefined)(
    'the server acknowledges nothing more, exits 74, and has every write it acknowledged when it restarts',
    async () => {
      const c = (cluster = await CliCluster.create(1));
      await Promise.all([c.start(1, [], FIU_RUN), c.start(2), c.start(3), c.start(4)]);
      const pid = c.process(1)!.pid!;
      const client = await TestClient.open(c, c.admin);
      clients.push(client);
      const seen = recordReplies(client, 0);
      for (let i = 0; i < 8; i++) await client.write(`before-${i}`, { kind: 'value', value: bytes(`before ${i} `.repeat(50)) });
      await sleep(300); // server 1's last answers, if it was the slowest
      const ackedBefore = new Set(seen.replies.filter((r) => r.reply.type === 'STORE_ACK').map((r) => r.key));
      expect(ackedBefore.size).toBe(8);
      const faultAt = performance.now();
      const exit = exited(c, 1);
      failDisk(pid, FSYNC_EIO);
      // The cluster goes on without server 1 (one crash is within t = 1).
      for (let i = 0; i < 4; i++) await client.write(`after-${i}`, { kind: 'value', value: bytes(`after ${i}`) });
      expect(await exit).toBe(74);
      const after = seen.replies.filter((r) => r.at > faultAt);
      expect(after.filter((r) => r.reply.type.endsWith('_ACK') && r.reply.type !== 'CLOCK_ACK')).toEqual([]);
      const log = readFileSync(join(c.dir, 'server-1.log'), 'utf8');
      expect(log.match(/storage failed/g)?.length).toBe(1);

      // Its data directory, as a restart finds it: every acknowledged write is there.
      const storage = await LevelStorage.open({ path: join(c.dir, 'data-1'), n: 4 });
      const onDisk = new Set<string>();
      for await (const e of storage.historyEntries()) onDisk.add(e.key);
      await storage.close();
      for (const key of ackedBefore) expect(onDisk.has(key), key).toBe(true);

      // Restarted (the disk is fine again), it is healthy and takes writes.
      await c.start(1);
      expect((await healthz(c, 1)).status).toBe(200);
      const seen2 = recordReplies(client, 0);
      await client.write('restarted', { kind: 'value', value: bytes('again') });
      await sleep(300);
      expect(seen2.replies.some((r) => r.key === 'restarted' && r.reply.type === 'STORE_ACK')).toBe(true);
      for (let i = 0; i < 8; i++) {
        const r = await client.read(`before-${i}`);
        expect(r.value && new TextDecoder().decode(r.value)).toBe(`before ${i} `.repeat(50));
      }
    },
    60_000,
  );
});

describe('the disk is full (ENOSPC)', () => {
  it.skipIf(rootSkip !== undefined)(
    'writes are refused with UNAVAILABLE, reads served, /healthz 503; clients carry on without blaming it; it recovers once there is room',
    async () => {
      const c = (cluster = await CliCluster.create(1, ['--disk-probe-ms', '300']));
      const data = join(c.dir, 'data-2');
      mkdirSync(data);
      // 48 MiB: LevelDB's memtable (32 MiB) plus the 8 MiB margin must fit before it reopens.
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=48m', 'tmpfs', data]);
      mounts.push(data);
      await c.startAll();
      const driver = await TestClient.open(c, c.admin);
      clients.push(driver);
      const seen = recordReplies(driver, 1);
      const statuses = new Map<number, ServerStatus>();
      const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(c.dir, 'admin.json'), 'utf8')));
      const store = await connect({
        cluster: c.clusterJson(),
        identity: admin,
        timeoutMs: 15_000,
        onServerStatus: (servers) => servers.forEach((s) => statuses.set(s.id, s)),
      });
      stores.push(store);
      for (let i = 0; i < 5; i++) await store.put(`pre-${i}`, `pre ${i}`);

      // Fill the filesystem: LevelDB's next log write fails with ENOSPC.
      const ballast = join(data, 'ballast');
      const fd = openSync(ballast, 'w');
      try {
        for (const chunk = new Uint8Array(1 << 20); ;) writeSync(fd, chunk);
      } catch (err) {
        expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC');
      } finally {
        closeSync(fd);
      }
      const fullAt = performance.now();
      for (let i = 0; i < 6; i++) {
        await store.put(`full-${i}`, `full ${i}`);
        await driver.write(`full-driver-${i}`, { kind: 'value', value: bytes(`full ${i}`) });
      }
      await sleep(300);
      const during = seen.replies.filter((r) => r.at > fullAt);
      expect(during.filter((r) => r.reply.type === 'STORE_ACK' || r.reply.type === 'COMPLETE_ACK')).toEqual([]);
      expect(during.some((r) => r.reply.type === 'ERROR' && r.reply.code === 'UNAVAILABLE')).toBe(true);
      const health = await healthz(c, 2);
      expect(health.status).toBe(503);
      expect(health.body.status).toBe('storage-full');
      // The operator's view: status shows the disk full, with no room, and exits 1 (the quorum holds).
      const shown = cli(['status', '--cluster', c.clusterFile]);
      expect(shown.status, shown.stdout).toBe(1);
      expect(shown.stdout).toMatch(/^s2\s+up\s+FULL\s+[\d.]+ (B|KiB)\s+\d+\.\d+\.\d+/m);
      expect(shown.stdout).toContain('3 of 4 servers healthy; operations need 3: the quorum holds');
      // Reads: server 2 still answers them, from what it holds.
      const readAt = performance.now();
      for (let i = 0; i < 5; i++) expect(new TextDecoder().decode(await store.get(`pre-${i}`))).toBe(`pre ${i}`);
      for (let i = 0; i < 5; i++) expect((await driver.read(`pre-${i}`)).value).toBeDefined();
      expect(seen.replies.some((r) => r.at > readAt && r.reply.type === 'COLLECT_ACK')).toBe(true);
      for (let i = 0; i < 6; i++) expect(new TextDecoder().decode(await store.get(`full-${i}`))).toBe(`full ${i}`);
      const metrics = await c.metrics(2);
      expect(metricValue(metrics, 'powerstore_errors_total', { kind: 'unavailable' })).toBeGreaterThan(0);
      expect(metricValue(metrics, 'powerstore_disk_state_changes_total', { state: 'full' })).toBe(1);
      expect(metricValue(metrics, 'powerstore_disk_state', { state: 'full' })).toBe(1);
      expect(metricValue(metrics, 'powerstore_disk_state', { state: 'ok' })).toBe(0);
      expect(readFileSync(join(c.dir, 'server-2.log'), 'utf8').match(/disk full/g)?.length).toBe(1);

      // Room again: the server reopens its storage by itself and takes writes.
      rmSync(ballast);
      const deadline = Date.now() + 15_000;
      while ((await healthz(c, 2)).status !== 200) {
        if (Date.now() > deadline) throw new Error('server 2 did not recover');
        await sleep(200);
      }
      const healedAt = performance.now();
      await driver.write('healed', { kind: 'value', value: bytes('healed') });
      await sleep(300);
      expect(seen.replies.some((r) => r.at > healedAt && r.key === 'healed' && r.reply.type === 'STORE_ACK')).toBe(true);
      expect(metricValue(await c.metrics(2), 'powerstore_disk_state_changes_total', { state: 'ok' })).toBe(1);
      // No server was blamed: a full disk is a server that is down, not one that lies.
      expect([...statuses.values()].filter((s) => s.misbehaving !== undefined)).toEqual([]);
      expect(c.process(2)?.exitCode).toBeNull();
    },
    60_000,
  );
});
