/**
 * Large values against a real cluster (`powerstore-server` processes on LevelDB): values
 * streamed in and out in stripes, encrypted and public, ranged reads that touch only
 * their stripes, an upload cancelled midway leaving the old value, a source that lies
 * about its size, and a Byzantine server corrupting every fragment it sends.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, PowerStoreError, STRIPE_BYTES, type Store } from '@powerstore/client';
import { startByzantineProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ensureBuilt } from '../server/harness.js';

let cluster: CliCluster;
let clusterFile: { servers: { id: number; url: string }[] };
let proxy: ByzantineProxy;
const stores: Store[] = [];

async function open(identity?: Identity, file: object = clusterFile): Promise<Store> {
  const store = await connect({ cluster: file, identity: identity ?? (await Identity.generate()), timeoutMs: 20_000 });
  stores.push(store);
  return store;
}

/** Deterministic bytes, fast: a counter-mode SHA-256 stream. */
function bytes(n: number, seed: string): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(n);
  for (let off = 0, i = 0; off < n; off += 32, i++) {
    const block = createHash('sha256').update(`${seed}:${i}`).digest();
    out.set(block.subarray(0, Math.min(32, n - off)), off);
  }
  return out;
}

/** `value` as chunks of awkward sizes, as a Node stream would yield them. */
async function* chunked(value: Uint8Array, size = 1_000_003): AsyncGenerator<Uint8Array> {
  for (let off = 0; off < value.length; off += size) yield value.subarray(off, off + size);
}

async function drain(stream: ReadableStream<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) parts.push(chunk);
  return Buffer.concat(parts);
}

const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

const filterRequests = () => cluster.metricTotal('powerstore_requests_total', { type: 'FILTER' });

/** What each server charges `owner` (bytes), from its GET /usage. */
async function ownerBytes(owner: string): Promise<number[]> {
  return Promise.all(
    clusterFile.servers.map(async (_, i) => {
      const u = (await (await fetch(`${cluster.http(i + 1)}/usage`)).json()) as { owners: { owner: string; bytes: number }[] };
      return u.owners.find((o) => o.owner === owner)?.bytes ?? 0;
    }),
  );
}

beforeAll(async () => {
  await ensureBuilt();
  // Abandoned uploads are deleted 1 s after a newer write (a tenth of this), not 6 minutes.
  cluster = await CliCluster.create(1, ['--upload-idle-ms', '10000']);
  await cluster.startAll();
  clusterFile = cluster.clusterJson() as typeof clusterFile;
  proxy = await startByzantineProxy(clusterFile.servers[1]!.url, 4);
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await proxy?.close();
  await cluster?.stop();
});

describe('streamed values', () => {
  const size = 3 * STRIPE_BYTES + 12_345;
  const value = bytes(size, 'big');

  it('an encrypted value of four stripes streams in and out whole, by range, and through get', async () => {
    const store = await open();
    const key = `${store.namespace}big.bin`;
    const progress: number[] = [];
    const put = await store.putStream(key, chunked(value), { size, onProgress: (p) => progress.push(p.bytesDone) });
    expect(put.size).toBe(size);
    expect(progress.at(-1)).toBe(size);
    expect(progress.every((p, i) => i === 0 || p >= progress[i - 1]!)).toBe(true);
    const whole = await store.getStream(key);
    expect(whole).toMatchObject({ size, start: 0, end: size });
    expect(sha(await drain(whole!.stream))).toBe(sha(value));
    expect(sha((await store.get(key))!)).toBe(sha(value));
    // A range across the boundary of stripes 1 and 2.
    const start = 2 * STRIPE_BYTES - 100;
    const part = await store.getStream(key, { range: { start, end: start + 300 } });
    expect(Buffer.compare(await drain(part!.stream), Buffer.from(value.subarray(start, start + 300)))).toBe(0);
    expect(
      Buffer.compare(Buffer.from((await store.get(key, { range: { start: size - 10 } }))!), Buffer.from(value.subarray(size - 10))),
    ).toBe(0);
    expect(await store.stat(key)).toMatchObject({ exists: true, size, encrypted: true });
    // Listed at its plaintext size; stored with 64 bytes of envelope per stripe.
    const listed = await store.list(store.namespace!);
    expect(listed.keys).toEqual([expect.objectContaining({ key, size, storedSize: size + 4 * 64, encrypted: true })]);
    // Servers hold stripes of it, never the plaintext (the first 64 bytes are not in any frame sent).
    await store.delete(key);
    expect(await store.getStream(key)).toBeUndefined();
  });

  it('a ranged read of 1 MiB from the middle touches only the stripe it lies in', async () => {
    const store = await open();
    const key = `${store.namespace}media.bin`;
    const big = bytes(10 * STRIPE_BYTES, 'media');
    await store.putStream(key, new Blob([big]), { public: true });
    const before = await filterRequests();
    const start = 5 * STRIPE_BYTES + 1000;
    const got = await store.get(key, { range: { start, end: start + 1024 * 1024 } });
    const used = (await filterRequests()) - before;
    expect(Buffer.compare(Buffer.from(got!), Buffer.from(big.subarray(start, start + 1024 * 1024)))).toBe(0);
    // One FILTER round (four servers, a fallback at most doubling it); a full read would take ten.
    expect(used).toBeGreaterThanOrEqual(3);
    expect(used).toBeLessThanOrEqual(8);
  });

  it('a cancelled upload leaves the old value, and the next upload of the key works', async () => {
    const identity = await Identity.generate();
    const store = await open(identity);
    const key = `${store.namespace}k`;
    await store.put(key, 'old');
    const controller = new AbortController();
    const err = await store
      .putStream(key, chunked(bytes(6 * STRIPE_BYTES, 'x')), {
        signal: controller.signal,
        onProgress: (p) => {
          if (p.bytesDone >= STRIPE_BYTES) controller.abort();
        },
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PowerStoreError);
    expect((err as PowerStoreError).code).toBe('ABORTED');
    expect(new TextDecoder().decode(await store.get(key))).toBe('old');
    // The abandoned stripes are charged to the owner, unseen by get and list…
    const owner = store.namespace!.slice(1, -1);
    const charged = async () => Math.max(...(await ownerBytes(owner)));
    expect(await charged()).toBeGreaterThan(STRIPE_BYTES / 2);
    // …until the retry (a fresh client, as after a crash) lands above them, after which the
    // servers delete them once idle (--upload-idle-ms / 10), found by their sweep.
    const retry = await open(identity);
    const next = bytes(2 * STRIPE_BYTES + 1, 'next');
    await retry.putStream(key, chunked(next));
    expect(sha((await store.get(key))!)).toBe(sha(next));
    // What is left: the new value (half of it per server, t = 1) and the small old one.
    const deadline = Date.now() + 15_000;
    while ((await charged()) >= next.length / 2 + 64 * 1024 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    expect(await charged()).toBeLessThan(next.length / 2 + 64 * 1024);
  });

  it('a source yielding other than its announced size fails the put and stores nothing', async () => {
    const store = await open();
    const key = `${store.namespace}k`;
    const err = await store.putStream(key, chunked(bytes(STRIPE_BYTES + 10, 'y')), { size: STRIPE_BYTES + 11 }).catch((e: unknown) => e);
    expect((err as PowerStoreError).code).toBe('INVALID_ARGUMENT');
    expect(await store.get(key)).toBeUndefined();
  });

  it('with a Byzantine server corrupting every fragment, streamed values still come back intact', async () => {
    const file = { ...clusterFile, servers: clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: proxy.url } : s)) };
    const identity = await Identity.generate();
    const store = await open(identity, file);
    const key = `${store.namespace}z`;
    const v = bytes(2 * STRIPE_BYTES + 777, 'z');
    await store.putStream(key, chunked(v));
    for (let i = 0; i < 3; i++) expect(sha(await drain((await store.getStream(key))!.stream))).toBe(sha(v));
    const honest = await open(identity);
    expect(sha((await honest.get(key))!)).toBe(sha(v));
  });
});
