/**
 * Bounded history on real server processes: thousands of versions of one key leave each
 * server a bounded history and a bounded data directory, and a completed delete leaves no
 * fragment of the deleted value on any server's disk (scanned after compaction, with the
 * value's marker as the probe and the same scan before the delete as the control).
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import { CliCluster, collectLc, ensureBuilt, metricValue } from './harness.js';

const KEEP = 2;
const VERSIONS = 10_000;
const WRITERS = 10;
let cluster: CliCluster;
let stores: Store[] = [];

beforeAll(async () => {
  await ensureBuilt();
  // No fsync: this is about what is kept, not about durability, and 10,000 synced writes
  // would take minutes on a shared disk.
  cluster = await CliCluster.create(1, ['--unsafe-no-fsync', '--history-keep', String(KEEP), '--log-level', 'warn']);
  await cluster.startAll();
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(cluster.dir, 'admin.json'), 'utf8')));
  stores = await Promise.all(
    Array.from({ length: WRITERS }, () => connect({ cluster: cluster.clusterJson(), identity: admin, timeoutMs: 30_000 })),
  );
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await cluster?.stop();
});

/** Compacts server `id`'s LevelDB (stopped) and returns every byte of its files. */
async function compactedFiles(id: number): Promise<{ bytes: number; contents: Buffer[] }> {
  const dir = join(cluster.dir, `data-${id}`);
  const db = new ClassicLevel(dir);
  await db.open();
  await db.compactRange('\u0000', '\uffff');
  await db.close();
  const contents = readdirSync(dir).map((f) => readFileSync(join(dir, f)));
  return { bytes: readdirSync(dir).reduce((sum, f) => sum + statSync(join(dir, f)).size, 0), contents };
}

async function allConnected(store: Store): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (store.servers().some((s) => s.state !== 'open')) {
    if (Date.now() > deadline) throw new Error('the store did not reconnect to every server');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Waits (bounded) until every server's lc of `key` has timestamp number `num` and its
 * entry: a write completes at n − t servers, so reads (which write back) are repeated for
 * the last one.
 */
async function everyServerAt(key: string, num: number, store: Store): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const states = await Promise.all(cluster.urls.map(async (url) => (await collectLc(url, key, cluster.config.n))?.ts.num ?? 0));
    if (states.every((n) => n === num)) return;
    if (Date.now() > deadline) throw new Error(`servers' lc of ${key}: ${states.join(', ')}, expected ${num}`);
    await store.get(key);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe('bounded history', () => {
  it(`${VERSIONS} versions of one key from ${WRITERS} concurrent writers: every server keeps at most δ + 1 entries of it, and a small data directory`, async () => {
    const key = `${stores[0]!.namespace}hot`;
    let written = 0;
    await Promise.all(
      stores.map(async (store, w) => {
        for (let i = w; i < VERSIONS; i += WRITERS) {
          await store.put(key, new TextEncoder().encode(`version ${i} `.repeat(8)));
          written++;
        }
      }),
    );
    expect(written).toBe(VERSIONS);
    const last = new TextDecoder().decode(await stores[0]!.get(key));
    expect(last).toMatch(/^version \d+ /);
    for (let id = 1; id <= 4; id++) {
      const text = await cluster.metrics(id);
      // lc, δ below it, and nothing pending once every write has completed.
      expect(metricValue(text, 'powerstore_history_entries')).toBeLessThanOrEqual(KEEP + 1);
      expect(metricValue(text, 'powerstore_history_collected_total')).toBeGreaterThan(VERSIONS / 2);
    }
    await cluster.stop(false);
    for (let id = 1; id <= 4; id++) {
      const { bytes } = await compactedFiles(id);
      // Without collection: 10,000 entries of ~1 KiB each (fragment, cc, certificate).
      expect(bytes, `server ${id}: ${bytes} bytes`).toBeLessThan(1024 * 1024);
    }
    await cluster.startAll();
  }, 600_000);

  it('a completed delete leaves no fragment of the deleted value on any server; the same scan finds it before the delete', async () => {
    const store = stores[0]!;
    const key = `${store.namespace}secret`;
    const marker = `MARKER-${randomBytes(8).toString('hex')}`;
    // The marker at 10 % and 70 % of random bytes (which LevelDB's Snappy stores as they
    // are), so each data fragment (a half of the value) holds it whole; public, so the
    // servers hold it as plaintext (an encrypted value's never shows).
    await allConnected(store);
    const value = new Uint8Array(randomBytes(2000));
    value.set(new TextEncoder().encode(marker), 200);
    value.set(new TextEncoder().encode(marker), 1400);
    await store.put(key, value, { public: true });
    await everyServerAt(key, 1, store);
    await cluster.stop(false);
    const before = await Promise.all([1, 2, 3, 4].map((id) => compactedFiles(id)));
    // Servers 1 and 2 hold the value's two halves in plain (the code is systematic).
    expect(before.filter((f) => f.contents.some((c) => c.includes(marker))).length).toBe(2);
    await cluster.startAll();
    // Every server receives the delete's STORE (a server that misses it learns of the
    // delete only as its lc, without the tombstone flag, and keeps δ entries below it).
    await allConnected(store);
    await store.delete(key);
    expect(await store.get(key)).toBeUndefined();
    // Every server has the delete as its lc (reads write it back), so every one collected.
    await everyServerAt(key, 2, store);
    await cluster.stop(false);
    const after = await Promise.all([1, 2, 3, 4].map((id) => compactedFiles(id)));
    for (const [i, f] of after.entries())
      expect(
        f.contents.some((c) => c.includes(marker)),
        `server ${i + 1} still holds the marker`,
      ).toBe(false);
    await cluster.startAll();
  }, 240_000);
});
