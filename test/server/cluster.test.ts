/**
 * A 4-server cluster started through the CLI serves concurrent writers and readers
 * running the protocol core over real WebSockets, with LevelDB underneath.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareTimestamps, type Timestamp } from '@powerstore/protocol';
import { TestClient } from './driver.js';
import { CliCluster, ensureBuilt, metricValue, ROOT } from './harness.js';

let cluster: CliCluster;

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1);
  await cluster.startAll();
}, 240_000);

afterAll(async () => {
  await cluster?.stop();
});

const value = (size: number) => new Uint8Array(randomBytes(size));
/** vitest's deep equality walks typed arrays element by element: far too slow for megabytes. */
const same = (a: Uint8Array | undefined, b: Uint8Array) => a !== undefined && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);

describe('4-server cluster over WebSockets', () => {
  it('serves concurrent writers and readers; every read returns a written value and the last write wins', async () => {
    const writers = await Promise.all(Array.from({ length: 4 }, () => TestClient.open(cluster, cluster.admin)));
    const reader = await TestClient.open(cluster);
    const keys = Array.from({ length: 8 }, (_, i) => `shared-${i}`);
    const written = new Map<string, Map<string, Uint8Array>>(keys.map((k) => [k, new Map()]));
    const latest = new Map<string, { ts: Timestamp; value: Uint8Array }>();
    const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
    const sizes = [0, 1, 17, 4096, 65_537, 200_000];
    const deadline = Date.now() + 60_000;
    let reads = 0;

    const writerLoop = async (w: TestClient, wi: number) => {
      for (let i = 0; i < 15 && Date.now() < deadline; i++) {
        const key = keys[(wi * 3 + i) % keys.length]!;
        const v = value(sizes[(wi + i) % sizes.length]!);
        // Recorded before the write: a concurrent read may return it as soon as it is stored.
        written.get(key)!.set(hex(v), v);
        const r = await w.write(key, { kind: 'value', value: v });
        const prev = latest.get(key);
        if (!prev || compareTimestamps(r.ts, prev.ts) > 0) latest.set(key, { ts: r.ts, value: v });
      }
    };
    const readerLoop = async () => {
      for (let i = 0; i < 40 && Date.now() < deadline; i++) {
        const key = keys[i % keys.length]!;
        const r = await reader.read(key);
        reads++;
        if (r.value !== undefined) expect(written.get(key)!.has(hex(r.value)), `read of ${key} returned a value nobody wrote`).toBe(true);
      }
    };
    await Promise.all([...writers.map(writerLoop), readerLoop(), readerLoop()]);
    expect(reads).toBe(80);
    for (const [key, { ts, value: v }] of latest) {
      const r = await reader.read(key);
      expect(r.ts).toEqual(ts);
      expect(same(r.value, v)).toBe(true);
    }
    for (const c of [...writers, reader]) c.close();
  });

  it('deletes are tombstones; empty and multi-megabyte values round-trip', async () => {
    const c = await TestClient.open(cluster, cluster.admin);
    const big = value(8 * 1024 * 1024 + 3);
    await c.write('big', { kind: 'value', value: big }, 30_000);
    expect(same((await c.read('big', 30_000)).value, big)).toBe(true);
    await c.write('empty', { kind: 'value', value: new Uint8Array(0) });
    expect((await c.read('empty')).value).toEqual(new Uint8Array(0));
    await c.write('gone', { kind: 'value', value: value(10) });
    const d = await c.write('gone', { kind: 'tombstone' });
    expect(await c.read('gone')).toMatchObject({ value: undefined, ts: d.ts });
    c.close();
  });

  it('the default frame limit carries a 64 MiB value at t = 1 (a 32 MiB fragment per server)', async () => {
    const c = await TestClient.open(cluster, cluster.admin);
    const huge = value(64 * 1024 * 1024);
    await c.write('huge', { kind: 'value', value: huge }, 60_000);
    expect(same((await c.read('huge', 60_000)).value, huge)).toBe(true);
    c.close();
  }, 120_000);

  it('exposes Prometheus metrics and health on the same port', async () => {
    const health = await fetch(`${cluster.http(1)}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ok', id: 1 });
    expect((await fetch(`${cluster.http(1)}/nope`)).status).toBe(404);
    const text = await cluster.metrics(1);
    for (const type of ['CLOCK', 'STORE', 'COMPLETE', 'COLLECT', 'FILTER']) {
      expect(metricValue(text, 'powerstore_requests_total', { type }), type).toBeGreaterThan(0);
    }
    expect(metricValue(text, 'powerstore_keys')).toBeGreaterThanOrEqual(8);
    expect(metricValue(text, 'powerstore_history_entries')).toBeGreaterThan(0);
    expect(metricValue(text, 'powerstore_bytes_received_total')).toBeGreaterThan((8 * 1024 * 1024) / 2);
    expect(metricValue(text, 'powerstore_bytes_sent_total')).toBeGreaterThan(0);
    expect(metricValue(text, 'powerstore_request_duration_seconds_count', { type: 'STORE' })).toBeGreaterThan(0);
    expect(metricValue(text, 'powerstore_storage_commit_group_size_count')).toBeGreaterThan(0);
    // Receipts: each STORE one, a signature per batch of them (never more signatures than receipts).
    const receipts = metricValue(text, 'powerstore_receipts_signed_total');
    expect(receipts).toBeGreaterThan(0);
    expect(metricValue(text, 'powerstore_receipt_signatures_total')).toBeGreaterThan(0);
    expect(metricValue(text, 'powerstore_receipt_signatures_total')).toBeLessThanOrEqual(receipts);
    expect(metricValue(text, 'powerstore_process_resident_memory_bytes')).toBeGreaterThan(0);
    // What an operator watches: data held, room left, storage health, the version running.
    expect(metricValue(text, 'powerstore_stored_bytes')).toBeGreaterThan((8 * 1024 * 1024) / 4);
    expect(metricValue(text, 'powerstore_data_dir_bytes')).toBeGreaterThan((8 * 1024 * 1024) / 4);
    expect(metricValue(text, 'powerstore_data_dir_free_bytes')).toBeGreaterThan(0);
    expect(metricValue(text, 'powerstore_disk_state', { state: 'ok' })).toBe(1);
    expect(metricValue(text, 'powerstore_disk_state', { state: 'full' })).toBe(0);
    const version = (JSON.parse(readFileSync(join(ROOT, 'packages/server/package.json'), 'utf8')) as { version: string }).version;
    expect(metricValue(text, 'powerstore_build_info', { version })).toBe(1);
  });

  it('SIGTERM finishes in-flight requests and exits 0; the cluster keeps serving; restart keeps the data', async () => {
    const c = await TestClient.open(cluster, cluster.admin);
    await c.write('before-stop', { kind: 'value', value: new TextEncoder().encode('kept') });
    const load = Promise.all(Array.from({ length: 20 }, (_, i) => c.write(`during-stop-${i}`, { kind: 'value', value: value(50_000) })));
    await new Promise((r) => setTimeout(r, 5));
    expect(await cluster.signal(2, 'SIGTERM')).toBe(0);
    await load;
    await c.write('while-down', { kind: 'value', value: value(100) });
    await cluster.start(2);
    // Server 2's own data: with server 3 down too, every quorum includes server 2.
    await cluster.signal(3, 'SIGKILL');
    expect(new TextDecoder().decode((await c.read('before-stop')).value)).toBe('kept');
    await cluster.start(3);
    c.close();
  });
});
