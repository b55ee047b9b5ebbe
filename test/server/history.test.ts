/**
 * Bounded history on real server processes: thousands of versions of one key leave each
 * server a bounded history and a bounded data directory, and a completed delete leaves no
 * fragment of the deleted value, nor of any earlier version, in any file of any server's
 * data directory within `--erase-within` (scanned while the servers run, without a manual
 * compaction, with the values' markers as the probe and the same scan before the delete
 * as the control).
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
/** `--erase-within`, in seconds. */
const ERASE_WITHIN = 1;
const WRITERS = 10;
let cluster: CliCluster;
let stores: Store[] = [];

beforeAll(async () => {
  await ensureBuilt();
  // No fsync: this is about what is kept, not about durability, and 10,000 synced writes
  // would take minutes on a shared disk.
  cluster = await CliCluster.create(1, [
    '--unsafe-no-fsync',
    '--history-keep',
    String(KEEP),
    '--erase-within',
    String(ERASE_WITHIN),
    '--log-level',
    'warn',
  ]);
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

/**
 * Compacts server `id`'s LevelDB (stopped) and returns every byte of its files, and the
 * sizes of its data (tables and log) and of LevelDB's own bookkeeping (`LOG`, `LOG.old`,
 * `MANIFEST-*`, `CURRENT`), which grows with every compaction and flush (erase passes
 * included) until the database is next opened.
 */
async function compactedFiles(id: number): Promise<{ bytes: number; bookkeeping: number; contents: Buffer[] }> {
  const dir = join(cluster.dir, `data-${id}`);
  const db = new ClassicLevel(dir);
  await db.open();
  await db.compactRange('\u0000', '\uffff');
  await db.close();
  const contents = filesIn(dir).map((f) => readFileSync(join(dir, f)));
  const size = (data: boolean) =>
    filesIn(dir)
      .filter((f) => /\.(ldb|log|vlog)$/.test(f) === data)
      .reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);
  return { bytes: size(true), bookkeeping: size(false), contents };
}

/** The files under `dir` (LevelDB's, and the value log's in `vlog/`), relative to it. */
function filesIn(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath ?? e.path, e.name).slice(dir.length + 1));
}

/** For each server (1 … 4), the indices of `markers` some file of its data directory holds. */
function scanServers(markers: readonly Buffer[]): Set<number>[] {
  return [1, 2, 3, 4].map((id) => {
    const dir = join(cluster.dir, `data-${id}`);
    for (;;) {
      try {
        const found = new Set<number>();
        for (const f of filesIn(dir)) {
          const bytes = readFileSync(join(dir, f));
          for (const [i, m] of markers.entries()) if (bytes.includes(m)) found.add(i);
        }
        return found;
      } catch (err) {
        // LevelDB deleted a file between the listing and the read: scan again.
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  });
}

/**
 * Polls (running servers, no compaction of ours) until no server's data directory holds
 * any of `markers` but those of `allowed`, for at most `ms`; returns what the last scan found.
 */
async function scanUntilOnly(markers: readonly Buffer[], allowed: ReadonlySet<number>, ms: number): Promise<Set<number>[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const found = scanServers(markers);
    if (found.every((f) => [...f].every((i) => allowed.has(i))) || Date.now() > deadline) return found;
    await new Promise((r) => setTimeout(r, 50));
  }
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
async function everyServerAt(key: string, num: number | 'latest', store: Store): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const states = await Promise.all(cluster.urls.map(async (url) => (await collectLc(url, key, cluster.config.n))?.ts.num ?? 0));
    if (states.every((n) => n === (num === 'latest' ? Math.max(...states) : num))) return;
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
      const { bytes, bookkeeping } = await compactedFiles(id);
      // Without collection: 10,000 entries of ~1 KiB each (fragment, cc, certificate).
      expect(bytes, `server ${id}: ${bytes} bytes`).toBeLessThan(1024 * 1024);
      // LevelDB's LOG gains ~3 KiB and its MANIFEST ~0.4 KiB per erase pass (one per
      // half --erase-within at most: a few hundred here).
      expect(bookkeeping, `server ${id}: ${bookkeeping} bytes of LevelDB's own files`).toBeLessThan(4 * 1024 * 1024);
    }
    await cluster.startAll();
  }, 600_000);

  it(`a completed delete leaves no fragment of the deleted value in any server's files within --erase-within ${ERASE_WITHIN} s, without a manual compaction; the same scan finds it before the delete`, async () => {
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
    // Every server has the delete as its lc (reads write it back), so every one collected,
    // and at most ERASE_WITHIN s ago: the bytes leave the running servers' files by then.
    await everyServerAt(key, 2, store);
    const probe = [Buffer.from(marker)];
    const after = await scanUntilOnly(probe, new Set(), ERASE_WITHIN * 1000);
    for (const [i, f] of after.entries()) expect(f.size, `server ${i + 1} still holds the marker`).toBe(0);
    // Nor do they come back from a log replayed at the next start.
    await cluster.stop(false);
    await cluster.startAll();
    for (const [i, f] of scanServers(probe).entries()) expect(f.size, `server ${i + 1} holds the marker after a restart`).toBe(0);
  }, 240_000);

  it(`300 versions of a key: within --erase-within, only the kept ones are in any server's files; after a delete, none, also across restarts`, async () => {
    const store = stores[0]!;
    const key = `${store.namespace}versions`;
    await allConnected(store);
    // A random marker per version (random bytes: Snappy stores them as they are, where it
    // would encode a repeated text as a back-reference), at 10 % and 70 % of random bytes,
    // so each data fragment (half of the value) holds it.
    const markers = Array.from({ length: 300 }, () => randomBytes(16));
    for (const m of markers) {
      const value = new Uint8Array(randomBytes(2000));
      value.set(m, 200);
      value.set(m, 1400);
      await store.put(key, value, { public: true });
    }
    await everyServerAt(key, 'latest', store);
    // Control: the scan finds what is kept (lc and the δ entries below it), and only that.
    const last = markers.length - 1;
    const kept = new Set(Array.from({ length: KEEP + 1 }, (_, i) => last - i));
    const before = await scanUntilOnly(markers, kept, ERASE_WITHIN * 1000);
    for (const f of before) expect([...f].filter((i) => !kept.has(i))).toEqual([]);
    // Servers 1 and 2 hold the data fragments in plain (the code is systematic), 3 and 4 parity.
    expect(before.map((f) => f.has(last))).toEqual([true, true, false, false]);
    await store.delete(key);
    expect(await store.get(key)).toBeUndefined();
    await everyServerAt(key, 'latest', store);
    const after = await scanUntilOnly(markers, new Set(), ERASE_WITHIN * 1000);
    expect(after.map((f) => f.size)).toEqual([0, 0, 0, 0]);
    // Every server ran erase passes, and none failed.
    for (let id = 1; id <= 4; id++) {
      const text = await cluster.metrics(id);
      expect(metricValue(text, 'powerstore_storage_compactions_total', { scope: 'keys', result: 'ok' })).toBeGreaterThan(0);
      expect(metricValue(text, 'powerstore_storage_compactions_total', { scope: 'keys', result: 'failed' })).toBe(0);
    }
    for (let restart = 0; restart < 2; restart++) {
      await cluster.stop(false);
      expect(scanServers(markers).map((f) => f.size)).toEqual([0, 0, 0, 0]);
      await cluster.startAll();
      expect(scanServers(markers).map((f) => f.size)).toEqual([0, 0, 0, 0]);
    }
  }, 240_000);

  it('a server killed (kill -9) before its erase pass erases within the bound once restarted', async () => {
    const store = stores[0]!;
    const key = `${store.namespace}killed`;
    // Server 1 (which holds a data fragment) with a bound long enough that no pass comes.
    await cluster.signal(1, 'SIGTERM');
    await cluster.start(1, ['--erase-within', '3600']);
    await allConnected(store);
    const markers = Array.from({ length: 20 }, () => randomBytes(16));
    for (const m of markers) {
      const value = new Uint8Array(randomBytes(2000));
      value.set(m, 200);
      value.set(m, 1400);
      await store.put(key, value, { public: true });
    }
    await store.delete(key);
    await everyServerAt(key, 'latest', store);
    // Control: the others erased everything; server 1 collected it too but still holds it.
    const found = await scanUntilOnly(markers, new Set(), ERASE_WITHIN * 1000);
    expect(found.map((f) => f.size > 0)).toEqual([true, false, false, false]);
    await cluster.signal(1, 'SIGKILL');
    await cluster.start(1);
    const after = await scanUntilOnly(markers, new Set(), ERASE_WITHIN * 1000);
    expect(after.map((f) => f.size)).toEqual([0, 0, 0, 0]);
  }, 240_000);
});
