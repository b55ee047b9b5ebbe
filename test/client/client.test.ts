/**
 * @powerstore/client against a real cluster: `powerstore-server` processes on loopback,
 * LevelDB on disk, one of them sometimes behind a Byzantine proxy.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, PowerStoreError, type Store } from '@powerstore/client';
import { startByzantineProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ensureBuilt, metricValue } from '../server/harness.js';

let cluster: CliCluster;
let clusterFile: { t: number; n: number; servers: { id: number; url: string }[] };
let writerFile: object;
const stores: Store[] = [];

async function open(options: { credentials?: boolean; timeoutMs?: number; servers?: { id: number; url: string }[] } = {}) {
  const store = await connect({
    cluster: options.servers ? { ...clusterFile, servers: options.servers } : clusterFile,
    ...(options.credentials === false ? {} : { credentials: writerFile }),
    timeoutMs: options.timeoutMs ?? 15_000,
  });
  stores.push(store);
  return store;
}

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PowerStoreError);
    return (e as PowerStoreError).code;
  }
  return 'resolved';
}

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1);
  await cluster.startAll();
  clusterFile = JSON.parse(readFileSync(join(cluster.dir, 'cluster.json'), 'utf8'));
  writerFile = JSON.parse(readFileSync(join(cluster.dir, 'writer.json'), 'utf8'));
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await cluster?.stop();
});

describe('reads and writes', () => {
  it('puts, gets and deletes strings and bytes, including empty and multi-MiB values', async () => {
    const store = await open();
    await store.put('greeting', 'héllo wörld');
    expect(new TextDecoder().decode(await store.get('greeting'))).toBe('héllo wörld');
    await store.put('empty', new Uint8Array(0));
    expect(await store.get('empty')).toEqual(new Uint8Array(0));
    const big = new Uint8Array(5 * 1024 * 1024 + 3).map((_, i) => (i * 131) & 255);
    await store.put('big', big);
    expect(Buffer.compare((await store.get('big'))!, big)).toBe(0);
    expect(await store.get('never-written')).toBeUndefined();
    await store.delete('greeting');
    expect(await store.get('greeting')).toBeUndefined();
    const stat = await store.stat('big');
    expect(stat).toMatchObject({ exists: true, deleted: false, size: big.length, rounds: 2, misbehaving: [] });
    expect(stat.answered.length).toBeGreaterThanOrEqual(3);
    expect(await store.stat('greeting')).toMatchObject({ exists: false, deleted: true });
  });

  it('lets a second client read the first one’s writes, and a reader without credentials read', async () => {
    const a = await open();
    const b = await open();
    const reader = await open({ credentials: false });
    expect(reader.canWrite).toBe(false);
    await Promise.all(Array.from({ length: 8 }, (_, i) => a.put(`k${i}`, `a${i}`)));
    await Promise.all(Array.from({ length: 8 }, (_, i) => b.put(`k${i}`, `b${i}`)));
    for (let i = 0; i < 8; i++) {
      expect(new TextDecoder().decode(await reader.get(`k${i}`))).toBe(`b${i}`);
    }
  });

  it('refuses a write without credentials before sending anything', async () => {
    const reader = await open({ credentials: false });
    const before = await Promise.all([1, 2, 3, 4].map(async (id) => metricValue(await cluster.metrics(id), 'powerstore_requests_total')));
    await expect(reader.put('x', 'y')).rejects.toMatchObject({ code: 'NO_CREDENTIALS', message: expect.stringContaining('writer credentials') });
    expect(await code(reader.delete('x'))).toBe('NO_CREDENTIALS');
    const after = await Promise.all([1, 2, 3, 4].map(async (id) => metricValue(await cluster.metrics(id), 'powerstore_requests_total')));
    expect(after).toEqual(before);
  });

  it('rejects bad keys, values and options with INVALID_ARGUMENT', async () => {
    const store = await open();
    expect(await code(store.put('', 'v'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.put('k'.repeat(1025), 'v'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.put('k', 42 as never))).toBe('INVALID_ARGUMENT');
    expect(await code(store.get(7 as never))).toBe('INVALID_ARGUMENT');
    expect(await code(connect({ cluster: { t: 1, servers: [] } }))).toBe('INVALID_ARGUMENT');
    expect(await code(connect({ cluster: clusterFile, credentials: { serverKeys: ['00'] } }))).toBe('INVALID_ARGUMENT');
  });

  it('aborts an operation when its signal fires', async () => {
    const store = await open();
    const controller = new AbortController();
    controller.abort(new Error('user cancelled'));
    expect(await code(store.put('k', 'v', { signal: controller.signal }))).toBe('ABORTED');
  });
});

describe('servers failing', () => {
  it('keeps serving with one server down, reconnects when it returns, and explains a lost quorum', async () => {
    const store = await open({ timeoutMs: 3_000 });
    await store.put('durable', 'before');
    await cluster.signal(4, 'SIGKILL');
    await store.put('durable', 'during');
    expect(new TextDecoder().decode(await store.get('durable'))).toBe('during');
    await cluster.signal(3, 'SIGKILL');
    const err = await store.get('durable').catch((e: unknown) => e as PowerStoreError);
    expect(err).toBeInstanceOf(PowerStoreError);
    expect((err as PowerStoreError).code).toBe('QUORUM_UNREACHABLE');
    expect((err as PowerStoreError).message).toMatch(/^need 3 of 4 servers, 2 reachable: .*s3 .*s4 /);
    await Promise.all([cluster.start(3), cluster.start(4)]);
    // Reconnection backs off for at most a few seconds.
    const deadline = Date.now() + 15_000;
    while (store.servers().some((s) => s.state !== 'open') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(store.servers().map((s) => s.state)).toEqual(['open', 'open', 'open', 'open']);
    expect(new TextDecoder().decode(await store.get('durable'))).toBe('during');
  }, 60_000);

  it('fails connect with QUORUM_UNREACHABLE when no server listens', async () => {
    const dead = clusterFile.servers.map((s) => ({ id: s.id, url: 'ws://127.0.0.1:9' }));
    const err = await connect({ cluster: { ...clusterFile, servers: dead }, timeoutMs: 1_500 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'QUORUM_UNREACHABLE', message: expect.stringContaining('need 3 of 4 servers, 0 reachable') });
  });
});

describe('a Byzantine server', () => {
  let proxy: ByzantineProxy;
  beforeAll(async () => {
    proxy = await startByzantineProxy(clusterFile.servers[1]!.url, clusterFile.n);
  });
  afterAll(async () => {
    await proxy?.close();
  });

  it('returns the right bytes while server 2 corrupts every fragment, and names it as misbehaving', async () => {
    const servers = clusterFile.servers.map((s) => (s.id === 2 ? { id: 2, url: proxy.url } : s));
    const store = await open({ servers });
    const value = new Uint8Array(300_000).map((_, i) => (i * 7 + 1) & 255);
    await store.put('attacked', value);
    // Server 2 sits behind a proxy, so it is often the slowest and its corrupted answer
    // arrives after the read has its quorum; read until one read has seen it (bounded).
    const deadline = Date.now() + 20_000;
    for (let i = 0; i < 200 && Date.now() < deadline; i++) {
      expect(Buffer.compare((await store.get('attacked'))!, value)).toBe(0);
      if (i >= 5 && store.servers()[1]!.misbehaving) break;
    }
    expect(proxy.corrupted).toBeGreaterThan(0);
    const stat = await store.stat('attacked');
    expect(stat.size).toBe(value.length);
    const s2 = store.servers().find((s) => s.id === 2)!;
    expect(s2.misbehaving).toMatch(/fragment/);
    expect(store.servers().filter((s) => s.misbehaving)).toHaveLength(1);
  });
});
