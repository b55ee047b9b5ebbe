/**
 * putMany, getMany and deleteMany against a real cluster (`powerstore-server` processes on
 * loopback): round trips in every form the entries come in, failures reported per key while
 * the other keys succeed, the call rejected only when it cannot start, aborts, and the same
 * calls succeeding with one server Byzantine, refusing everything, or stopped (t = 1).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, PowerStoreError, type BatchResult, type KeyRead, type PutManyProgress, type Store } from '@powerstore/client';
import { startByzantineProxy, startRefusingServer } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ensureBuilt, metricValue, OPEN_WRITERS } from '../server/harness.js';

/** Keys per owner and server (init --quota-keys). */
const QUOTA_KEYS = 40;
let cluster: CliCluster;
let clusterFile: { t: number; n: number; servers: { id: number; url: string; publicKey: string }[] };
const stores: Store[] = [];

async function open(
  options: {
    identity?: Identity | false;
    capabilities?: string[];
    maxValueBytes?: number;
    stripeBytes?: number;
    servers?: { id: number; url: string; publicKey: string }[];
  } = {},
): Promise<Store> {
  const identity = options.identity === undefined ? await Identity.generate() : options.identity;
  const store = await connect({
    cluster: options.servers ? { ...clusterFile, servers: options.servers } : clusterFile,
    ...(identity ? { identity } : {}),
    ...(options.capabilities ? { capabilities: options.capabilities } : {}),
    ...(options.maxValueBytes === undefined ? {} : { maxValueBytes: options.maxValueBytes }),
    ...(options.stripeBytes === undefined ? {} : { stripeBytes: options.stripeBytes }),
    timeoutMs: 15_000,
  });
  stores.push(store);
  return store;
}

const k = (store: Store, name: string) => `${store.namespace}${name}`;
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));
/** Each key's outcome: its text for a read, 'ok' for a write, or the error's code. */
const outcomes = (r: BatchResult<KeyRead> | BatchResult) =>
  Object.fromEntries(
    r.results.map((x) => [
      x.key,
      !x.ok ? (x.error instanceof PowerStoreError ? x.error.code : x.error.message) : 'value' in x ? text(x.value) : 'ok',
    ]),
  );

async function rejection(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PowerStoreError);
    return `${(e as PowerStoreError).code}: ${(e as PowerStoreError).message}`;
  }
  return 'resolved';
}

async function requestsServed(): Promise<number[]> {
  return Promise.all([1, 2, 3, 4].map(async (id) => metricValue(await cluster.metrics(id), 'powerstore_requests_total')));
}

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1, [], [...OPEN_WRITERS, '--quota-keys', String(QUOTA_KEYS)]);
  await cluster.startAll();
  clusterFile = cluster.clusterJson() as typeof clusterFile;
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await cluster?.stop();
});

describe('round trips', () => {
  it('puts pairs (strings, bytes, empty, Blobs in stripes), reads them back in order, deletes some; progress counts keys and bytes', async () => {
    // Stripes of 64 KiB, so a 200 KiB Blob goes as putStream writes it, in four stripes.
    const store = await open({ stripeBytes: 64 * 1024 });
    const big = new Uint8Array(1024 * 1024 + 5).map((_, i) => (i * 31) & 255);
    const striped = new Uint8Array(200 * 1024 + 7).map((_, i) => (i * 7 + 3) & 255);
    const entries: [string, Uint8Array | string | Blob][] = [
      ...Array.from({ length: 20 }, (_, i): [string, string] => [k(store, `notes/${i}`), `note ${i} ✓`]),
      [k(store, 'empty'), new Uint8Array(0)],
      [k(store, 'big'), big],
      [k(store, 'striped'), new Blob([striped])],
      [k(store, 'small-blob'), new Blob(['from a blob'])],
    ];
    const progress: PutManyProgress[] = [];
    const bundles = async (direction: string) => {
      let sum = 0;
      for (const id of [1, 2, 3, 4]) sum += metricValue(await cluster.metrics(id), 'powerstore_bundles_total', { direction });
      return sum;
    };
    const bundlesBefore = { received: await bundles('received'), sent: await bundles('sent') };
    const put = await store.putMany(entries, { concurrency: 8, onProgress: (p) => progress.push(p) });
    expect(put.failed).toEqual([]);
    // Keys in flight together went to each server in bundles, and their replies came back in them.
    expect(await bundles('received')).toBeGreaterThan(bundlesBefore.received);
    expect(await bundles('sent')).toBeGreaterThan(bundlesBefore.sent);
    expect(put.results).toEqual(entries.map(([key]) => ({ key, ok: true })));
    const size = (v: Uint8Array | string | Blob) =>
      v instanceof Blob ? v.size : typeof v === 'string' ? new TextEncoder().encode(v).length : v.length;
    const bytesTotal = entries.reduce((sum, [, v]) => sum + size(v), 0);
    expect(progress.at(-1)).toEqual({ done: 24, failed: 0, total: 24, bytesDone: bytesTotal, bytesTotal });
    const keyCounts = progress.map((p) => p.done);
    expect(keyCounts).toEqual([...keyCounts].sort((a, b) => a - b));
    // The striped Blob reported its stripes as they were stored, between keys.
    expect(progress.filter((p, i) => i > 0 && p.done === progress[i - 1]!.done).length).toBeGreaterThan(0);
    expect(progress.every((p) => p.bytesDone <= p.bytesTotal)).toBe(true);

    const keys = [...entries.map(([key]) => key), k(store, 'never-written')];
    const got = await store.getMany(keys, { onProgress: () => {} });
    expect(got.failed).toEqual([]);
    expect(got.results.map((r) => r.key)).toEqual(keys);
    const values = got.results.map((r) => (r.ok ? r.value : r.error));
    for (let i = 0; i < 20; i++) expect(text(values[i] as Uint8Array)).toBe(`note ${i} ✓`);
    expect(values[20]).toEqual(new Uint8Array(0));
    expect(Buffer.compare(values[21] as Uint8Array, big)).toBe(0);
    expect(Buffer.compare(values[22] as Uint8Array, striped)).toBe(0);
    expect(text(values[23] as Uint8Array)).toBe('from a blob');
    expect(values[24]).toBeUndefined();
    expect((await store.stat(k(store, 'striped'))).size).toBe(striped.length);

    const gone = keys.slice(0, 10);
    const deleted = await store.deleteMany(new Set(gone), { concurrency: 3 });
    expect(deleted).toEqual({ results: gone.map((key) => ({ key, ok: true })), failed: [] });
    const after = await store.getMany(keys.slice(0, 12));
    expect(after.results.map((r) => r.ok && text(r.value))).toEqual([...gone.map(() => undefined), 'note 10 ✓', 'note 11 ✓']);
    expect(await store.stat(gone[0]!)).toMatchObject({ exists: false, deleted: true });
  });

  it('takes a Map or a plain object of key → value, and an empty batch', async () => {
    const store = await open();
    const fromMap = await store.putMany(
      new Map<string, string | Uint8Array>([
        [k(store, 'm/a'), 'A'],
        [k(store, 'm/b'), new TextEncoder().encode('B')],
      ]),
    );
    expect(fromMap.failed).toEqual([]);
    const fromObject = await store.putMany({ [k(store, 'o/c')]: 'C', [k(store, 'o/d')]: 'D' }, { public: true });
    expect(fromObject.results.map((r) => r.key)).toEqual([k(store, 'o/c'), k(store, 'o/d')]);
    expect(outcomes(await store.getMany([k(store, 'm/a'), k(store, 'm/b'), k(store, 'o/c'), k(store, 'o/d')]))).toEqual({
      [k(store, 'm/a')]: 'A',
      [k(store, 'm/b')]: 'B',
      [k(store, 'o/c')]: 'C',
      [k(store, 'o/d')]: 'D',
    });
    // { public: true } applies to every value: a reader without any key reads them.
    const stranger = await open({ identity: false });
    expect(outcomes(await stranger.getMany([k(store, 'o/d'), k(store, 'm/a')]))).toEqual({
      [k(store, 'o/d')]: 'D',
      [k(store, 'm/a')]: 'NOT_AUTHORIZED',
    });
    expect(await store.putMany([])).toEqual({ results: [], failed: [] });
    expect(await store.getMany([])).toEqual({ results: [], failed: [] });
    expect(await store.deleteMany(new Set())).toEqual({ results: [], failed: [] });
  });
});

describe('failures per key', () => {
  it('reports each failed key with its code while the other keys are written, and never rejects for them', async () => {
    const owner = await open();
    await owner.put(k(owner, 'secret'), 'not for you');
    const store = await open({ maxValueBytes: 1024 });
    const entries: [string, unknown][] = [
      [k(store, 'first'), 'one'],
      ['shared/outside-every-namespace', 'admin only'],
      [k(owner, 'not-mine'), 'no grant'],
      [k(store, 'too-large'), new Uint8Array(1025)],
      ['', 'empty key'],
      [k(store, 'not-a-value'), 42],
      [k(store, 'last'), 'two'],
    ];
    const put = await store.putMany(entries as [string, string][]);
    expect(outcomes(put)).toEqual({
      [k(store, 'first')]: 'ok',
      'shared/outside-every-namespace': 'NOT_AUTHORIZED',
      [k(owner, 'not-mine')]: 'NOT_AUTHORIZED',
      [k(store, 'too-large')]: 'INVALID_ARGUMENT',
      '': 'INVALID_ARGUMENT',
      [k(store, 'not-a-value')]: 'INVALID_ARGUMENT',
      [k(store, 'last')]: 'ok',
    });
    expect(put.failed.map((f) => f.key)).toEqual(entries.slice(1, 6).map(([key]) => key));
    expect(put.failed.every((f) => f.ok === false && f.error instanceof PowerStoreError)).toBe(true);
    expect(put.failed[2]!.error.message).toMatch(/maxValueBytes/);

    // The keys that failed hold nothing; the others hold their values.
    const read = await store.getMany([k(store, 'first'), k(store, 'last'), k(store, 'too-large'), 'shared/outside-every-namespace']);
    expect(outcomes(read)).toEqual({
      [k(store, 'first')]: 'one',
      [k(store, 'last')]: 'two',
      [k(store, 'too-large')]: undefined,
      'shared/outside-every-namespace': undefined,
    });
    // Reads fail per key too: another's encrypted value without a capability, a malformed key.
    expect(outcomes(await store.getMany([k(owner, 'secret'), 'a\ud800', k(store, 'first')]))).toEqual({
      [k(owner, 'secret')]: 'NOT_AUTHORIZED',
      'a\ud800': 'INVALID_ARGUMENT',
      [k(store, 'first')]: 'one',
    });
    // And deletes: another's key is refused, this store's is deleted.
    const deleted = await store.deleteMany([k(owner, 'secret'), k(store, 'first')]);
    expect(outcomes(deleted)).toEqual({ [k(owner, 'secret')]: 'NOT_AUTHORIZED', [k(store, 'first')]: 'ok' });
    expect(text(await owner.get(k(owner, 'secret')))).toBe('not for you');
    expect(await store.get(k(store, 'first'))).toBeUndefined();
  });

  it(`over the owner's quota (${QUOTA_KEYS} keys), the keys past it fail with QUOTA_EXCEEDED and the others are stored`, async () => {
    const store = await open();
    const entries = Array.from({ length: QUOTA_KEYS + 2 }, (_, i): [string, string] => [
      k(store, `q/${String(i).padStart(2, '0')}`),
      `${i}`,
    ]);
    // One at a time, so which keys are past the quota is certain.
    const put = await store.putMany(entries, { concurrency: 1 });
    expect(put.failed.map((f) => [f.key, (f.error as PowerStoreError).code])).toEqual(
      entries.slice(QUOTA_KEYS).map(([key]) => [key, 'QUOTA_EXCEEDED']),
    );
    const read = await store.getMany(entries.map(([key]) => key));
    expect(read.failed).toEqual([]);
    expect(read.results.map((r) => r.ok && text(r.value))).toEqual(entries.map(([, v], i) => (i < QUOTA_KEYS ? v : undefined)));
  });

  it('rejects the whole call, before sending anything, only when it cannot start: a key twice, bad arguments, no identity', async () => {
    const store = await open();
    const reader = await open({ identity: false });
    const before = await requestsServed();
    const a = k(store, 'a');
    expect(
      await rejection(
        store.putMany([
          [a, '1'],
          [k(store, 'b'), '2'],
          [a, '3'],
        ]),
      ),
    ).toBe(`INVALID_ARGUMENT: putMany: the key ${JSON.stringify(a)} is given twice (entries 0 and 2): each key may appear once`);
    expect(await rejection(store.getMany([a, a]))).toMatch(/^INVALID_ARGUMENT: getMany: the key .* is given twice/);
    expect(await rejection(store.deleteMany([a, a]))).toMatch(/^INVALID_ARGUMENT: deleteMany: the key .* is given twice/);
    expect(await rejection(store.getMany(a as never))).toMatch(/^INVALID_ARGUMENT: getMany: keys must be an iterable of strings/);
    expect(await rejection(store.putMany([[a]] as never))).toBe('INVALID_ARGUMENT: putMany: entry 0 is not a [key, value] pair');
    expect(await rejection(store.putMany([[a, '1']], { concurrency: 0 }))).toMatch(/^INVALID_ARGUMENT: putMany: concurrency/);
    expect(await rejection(reader.putMany([[a, '1']]))).toMatch(/^NO_IDENTITY: /);
    expect(await rejection(reader.deleteMany([a]))).toMatch(/^NO_IDENTITY: /);
    expect(await requestsServed()).toEqual(before);
  });

  it('an abort fails the keys not done with ABORTED, keeps those done, and the call still resolves', async () => {
    const store = await open();
    const entries = Array.from({ length: 10 }, (_, i): [string, string] => [k(store, `abort/${i}`), `v${i}`]);
    const controller = new AbortController();
    const put = await store.putMany(entries, {
      concurrency: 1,
      signal: controller.signal,
      onProgress: (p) => {
        if (p.done === 3) controller.abort(new Error('user cancelled'));
      },
    });
    expect(put.results.map((r) => (r.ok ? 'ok' : (r.error as PowerStoreError).code))).toEqual([
      ...Array<string>(3).fill('ok'),
      ...Array<string>(7).fill('ABORTED'),
    ]);
    expect(put.failed[0]!.error.message).toMatch(/before this key was started: nothing was sent for it/);
    const read = await store.getMany(entries.map(([key]) => key));
    expect(read.results.map((r) => r.ok && text(r.value))).toEqual(['v0', 'v1', 'v2', ...Array<undefined>(7).fill(undefined)]);
    // A signal aborted before the call: every key fails, nothing is sent.
    const none = await store.getMany([entries[0]![0]], { signal: AbortSignal.abort() });
    expect(outcomes(none)).toEqual({ [entries[0]![0]]: 'ABORTED' });
  });
});

/** Writes, reads and deletes 24 keys through `store`, checking every outcome. */
async function roundTrip(store: Store, prefix: string): Promise<void> {
  const entries = Array.from({ length: 24 }, (_, i): [string, Uint8Array] => [
    k(store, `${prefix}/${i}`),
    new Uint8Array(20_000 + i).map((_, j) => (i + j * 13) & 255),
  ]);
  const put = await store.putMany(entries);
  expect(put.failed).toEqual([]);
  const read = await store.getMany(entries.map(([key]) => key));
  expect(read.failed).toEqual([]);
  read.results.forEach((r, i) => expect(r.ok && Buffer.compare(r.value!, entries[i]![1])).toBe(0));
  const deleted = await store.deleteMany(entries.slice(0, 12).map(([key]) => key));
  expect(deleted.failed).toEqual([]);
  const after = await store.getMany(entries.map(([key]) => key));
  expect(after.failed).toEqual([]);
  expect(after.results.filter((r) => r.ok && r.value !== undefined).map((r) => r.key)).toEqual(entries.slice(12).map(([key]) => key));
}

describe('with one server faulty (t = 1), every key still succeeds', () => {
  it('server 2 Byzantine: it corrupts every fragment it returns, and is reported', async () => {
    const proxy = await startByzantineProxy(clusterFile.servers[1]!.url, clusterFile.n);
    try {
      const store = await open({ servers: clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: proxy.url } : s)) });
      await roundTrip(store, 'byzantine');
      // Its answers often arrive after the quorum's; read until one was seen (bounded).
      const keys = Array.from({ length: 12 }, (_, i) => k(store, `byzantine/${12 + i}`));
      for (let i = 0; i < 50 && !store.servers()[1]!.misbehaving; i++) expect((await store.getMany(keys)).failed).toEqual([]);
      expect(proxy.corrupted).toBeGreaterThan(0);
      expect(store.servers().find((s) => s.id === 2)!.misbehaving).toMatch(/fragment/);
      expect(store.servers().filter((s) => s.misbehaving)).toHaveLength(1);
    } finally {
      await proxy.close();
    }
  });

  it('server 3 refusing every request', async () => {
    const refusing = await startRefusingServer(clusterFile.n, 'INTERNAL', 'disk on fire');
    try {
      const store = await open({ servers: clusterFile.servers.map((s) => (s.id === 3 ? { ...s, url: refusing.url } : s)) });
      await roundTrip(store, 'refused');
      expect(refusing.corrupted).toBeGreaterThan(0);
    } finally {
      await refusing.close();
    }
  });

  it('server 4 stopped (SIGKILL), then back', async () => {
    const store = await open();
    await cluster.signal(4, 'SIGKILL');
    try {
      await roundTrip(store, 'stopped');
    } finally {
      await cluster.start(4);
    }
  });
});
