/**
 * @powerstore/client against a real cluster: `powerstore-server` processes on loopback,
 * LevelDB on disk, one of them sometimes behind a Byzantine proxy.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, PowerStoreError, type Store } from '@powerstore/client';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { encodePublicKey } from '@powerstore/protocol';
import { startByzantineProxy, startListingLiar, startRefusingServer, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ensureBuilt, metricValue, OPEN_WRITERS } from '../server/harness.js';

/** Keys per owner and server (init --quota-keys). */
const QUOTA_KEYS = 40;
let cluster: CliCluster;
let clusterFile: { t: number; n: number; servers: { id: number; url: string; publicKey: string }[] };
let admin: Identity;
const stores: Store[] = [];

/** A store with a fresh identity (or the given one; `false` for none). */
async function open(
  options: {
    identity?: Identity | false;
    grants?: object[];
    capabilities?: string[];
    timeoutMs?: number;
    maxValueBytes?: number;
    servers?: { id: number; url: string; publicKey: string }[];
  } = {},
) {
  const identity = options.identity === undefined ? await Identity.generate() : options.identity;
  const store = await connect({
    cluster: options.servers ? { ...clusterFile, servers: options.servers } : clusterFile,
    ...(identity ? { identity } : {}),
    ...(options.grants ? { grants: options.grants } : {}),
    ...(options.capabilities ? { capabilities: options.capabilities } : {}),
    ...(options.maxValueBytes === undefined ? {} : { maxValueBytes: options.maxValueBytes }),
    timeoutMs: options.timeoutMs ?? 15_000,
  });
  stores.push(store);
  return store;
}

/** `name` in the store's own namespace. */
const k = (store: Store, name: string) => `${store.namespace}${name}`;
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(PowerStoreError);
    return (e as PowerStoreError).code;
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
  admin = await Identity.fromJSON(JSON.parse(readFileSync(join(cluster.dir, 'admin.json'), 'utf8')));
  expect(admin.publicKey).toBe(encodePublicKey(cluster.admin.publicKey));
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await cluster?.stop();
});

describe('reads and writes', () => {
  it('puts, gets and deletes strings and bytes in its namespace, including empty and multi-MiB values', async () => {
    const store = await open();
    expect(store.namespace).toBe(`~${store.ownerId}/`);
    await store.put(k(store, 'greeting'), 'héllo wörld');
    expect(text(await store.get(k(store, 'greeting')))).toBe('héllo wörld');
    await store.put(k(store, 'empty'), new Uint8Array(0));
    expect(await store.get(k(store, 'empty'))).toEqual(new Uint8Array(0));
    const big = new Uint8Array(5 * 1024 * 1024 + 3).map((_, i) => (i * 131) & 255);
    await store.put(k(store, 'big'), big);
    expect(Buffer.compare((await store.get(k(store, 'big')))!, big)).toBe(0);
    expect(await store.get(k(store, 'never-written'))).toBeUndefined();
    await store.delete(k(store, 'greeting'));
    expect(await store.get(k(store, 'greeting'))).toBeUndefined();
    const stat = await store.stat(k(store, 'big'));
    expect(stat).toMatchObject({
      exists: true,
      deleted: false,
      size: big.length,
      rounds: 2,
      misbehaving: [],
      writer: { publicKey: store.publicKey, ownerId: store.ownerId },
    });
    expect(stat.answered.length).toBeGreaterThanOrEqual(3);
    expect(await store.stat(k(store, 'greeting'))).toMatchObject({ exists: false, deleted: true });
  });

  it('lets another client, and a reader without an identity, read its writes with a capability, or public ones without', async () => {
    const a = await open();
    await Promise.all(Array.from({ length: 8 }, (_, i) => a.put(k(a, `k${i}`), `a${i}`)));
    await a.put(k(a, 'public'), 'for all', { public: true });
    const stranger = await open({ identity: false });
    expect(stranger.canWrite).toBe(false);
    expect(text(await stranger.get(k(a, 'public')))).toBe('for all');
    await expect(stranger.get(k(a, 'k0'))).rejects.toMatchObject({
      code: 'NOT_AUTHORIZED',
      message: expect.stringContaining('capability') as string,
    });
    const reader = await open({ identity: false, capabilities: [await a.share(a.namespace!)] });
    for (let i = 0; i < 8; i++) expect(text(await reader.get(k(a, `k${i}`)))).toBe(`a${i}`);
    expect(await reader.stat(k(a, 'k0'))).toMatchObject({ size: 2, encrypted: true });
    expect(await reader.stat(k(a, 'public'))).toMatchObject({ size: 7, encrypted: false });
  });

  it('concurrent puts of one key from one Store, then reads from three clients: all agree, on one of the round values', async () => {
    const store = await open();
    const key = k(store, 'raced');
    const capabilities = [await store.share(key)];
    for (let round = 0; round < 5; round++) {
      await Promise.all(Array.from({ length: 6 }, (_, i) => store.put(key, `round ${round} value ${i}`)));
      const readers = [store, await open({ identity: false, capabilities }), await open({ identity: false, capabilities })];
      const reads = await Promise.all(readers.flatMap((r) => [r.get(key), r.get(key)]));
      const seen = new Set(reads.map(text));
      expect(seen.size, `reads disagree after round ${round}: ${[...seen].join(' | ')}`).toBe(1);
      expect([...seen][0]).toMatch(new RegExp(`^round ${round} value \\d$`));
      // The timestamps of one session's concurrent writes are distinct: the winner is the highest.
      const stat = await store.stat(key);
      expect(stat.timestamp.num).toBeGreaterThanOrEqual(6 * (round + 1));
    }
  });

  it('two Stores of one identity writing one key at once never share a timestamp', async () => {
    const identity = await Identity.generate();
    const [a, b] = [await open({ identity }), await open({ identity })];
    const key = k(a, 'shared');
    await Promise.all([
      ...Array.from({ length: 4 }, (_, i) => a.put(key, `a${i}`)),
      ...Array.from({ length: 4 }, (_, i) => b.put(key, `b${i}`)),
    ]);
    const reads = new Set(await Promise.all(Array.from({ length: 6 }, () => a.get(key).then(text))));
    expect(reads.size).toBe(1);
  });

  it('refuses a write without an identity, or outside its namespace, before sending anything', async () => {
    const reader = await open({ identity: false });
    const writer = await open();
    const before = await requestsServed();
    await expect(reader.put('x', 'y')).rejects.toMatchObject({
      code: 'NO_IDENTITY',
      message: expect.stringContaining('identity') as string,
    });
    expect(await code(reader.delete('x'))).toBe('NO_IDENTITY');
    expect(await code(writer.put('shared/x', 'y'))).toBe('NOT_AUTHORIZED');
    expect(await code(writer.put(`~${'a'.repeat(32)}/x`, 'y'))).toBe('NOT_AUTHORIZED');
    expect(await requestsServed()).toEqual(before);
  });

  it('the admin writes any key; grants let another identity write a prefix until they expire', async () => {
    const root = await open({ identity: admin });
    await root.put('shared/config', 'from the admin');
    const owner = await open();
    const bob = await Identity.generate();
    const grant = await owner.grant(bob.publicKey, k(owner, 'photos/'), Date.now() + 3_000);
    expect(grant).toMatchObject({ kind: 'powerstore-grant', prefix: k(owner, 'photos/'), grantee: bob.publicKey });
    // Bob may write there, but encrypts for the owner only with the owner's capability.
    const noKey = await open({ identity: bob, grants: [grant] });
    await expect(noKey.put(k(owner, 'photos/cat.jpg'), 'meow')).rejects.toMatchObject({
      code: 'NOT_AUTHORIZED',
      message: expect.stringContaining('cannot encrypt') as string,
    });
    const asBob = await open({ identity: bob, grants: [grant], capabilities: [await owner.share(k(owner, 'photos/'))] });
    await asBob.put(k(owner, 'photos/cat.jpg'), 'meow');
    expect(text(await owner.get(k(owner, 'photos/cat.jpg')))).toBe('meow');
    expect((await owner.stat(k(owner, 'photos/cat.jpg'))).writer).toMatchObject({
      publicKey: bob.publicKey,
      ownerId: bob.ownerId,
      grant: grant.id,
    });
    expect(await code(asBob.put(k(owner, 'notes/x'), 'no'))).toBe('NOT_AUTHORIZED');
    // An owner can only grant inside its namespace.
    expect(await code(owner.grant(bob.publicKey, 'shared/', 'never'))).toBe('INVALID_ARGUMENT');
    await new Promise((r) => setTimeout(r, 3_200));
    expect(await code(asBob.put(k(owner, 'photos/dog.jpg'), 'woof'))).toBe('GRANT_EXPIRED');
    // What was written under the grant stays readable after it expired.
    expect(text(await owner.get(k(owner, 'photos/cat.jpg')))).toBe('meow');
  });

  it('refuses grants of another cluster and identities that are not one', async () => {
    const other = { ...grantLike(), cluster: 'a'.repeat(26) };
    expect(await code(connect({ cluster: clusterFile, identity: await Identity.generate(), grants: [other] }))).toBe('INVALID_ARGUMENT');
    expect(
      await code(connect({ cluster: clusterFile, identity: { kind: 'powerstore-identity', version: 2, publicKey: 'x', secretKey: 'y' } })),
    ).toBe('INVALID_ARGUMENT');
  });

  it(`a write over the owner's quota (${QUOTA_KEYS} keys) fails with QUOTA_EXCEEDED and stores nothing`, async () => {
    const store = await open();
    for (let i = 0; i < QUOTA_KEYS; i += 10) await Promise.all(Array.from({ length: 10 }, (_, j) => store.put(k(store, `q${i + j}`), 'x')));
    const err = (await store.put(k(store, 'one-too-many'), 'x').catch((e: unknown) => e)) as PowerStoreError;
    expect(err).toMatchObject({ code: 'QUOTA_EXCEEDED' });
    expect(err.message).toMatch(/quota/);
    expect(await store.get(k(store, 'one-too-many'))).toBeUndefined();
    // Overwriting a key it holds is still fine.
    await store.put(k(store, 'q0'), 'y');
  });

  it('rejects bad keys, values and options with INVALID_ARGUMENT', async () => {
    const store = await open();
    expect(await code(store.put('', 'v'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.put('k'.repeat(1025), 'v'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.put(k(store, 'k'), 42 as never))).toBe('INVALID_ARGUMENT');
    expect(await code(store.get(7 as never))).toBe('INVALID_ARGUMENT');
    // A lone surrogate would reach the servers as U+FFFD, another key: refused, not a timeout.
    expect(await code(store.get('a\ud800b'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.put(k(store, '\udc00'), 'v'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.list('a\ud800'))).toBe('INVALID_ARGUMENT');
    expect(await code(store.get('a\u{10000}b'))).toBe('resolved');
    expect(await code(connect({ cluster: { t: 1, servers: [] } }))).toBe('INVALID_ARGUMENT');
    expect(await code(connect({ cluster: { ...clusterFile, version: 1 } }))).toBe('INVALID_ARGUMENT');
  });

  it('aborts an operation when its signal fires', async () => {
    const store = await open();
    const controller = new AbortController();
    controller.abort(new Error('user cancelled'));
    expect(await code(store.put(k(store, 'k'), 'v', { signal: controller.signal }))).toBe('ABORTED');
  });
});

/** A well-formed grant file of another cluster. */
function grantLike() {
  return {
    kind: 'powerstore-grant',
    version: 2,
    cluster: 'a'.repeat(26),
    issuer: encodePublicKey(new Uint8Array(32).fill(1)),
    grantee: encodePublicKey(new Uint8Array(32).fill(2)),
    prefix: 'x/',
    expiresAt: '2030-01-01T00:00:00.000Z',
    signature: 'A'.repeat(86),
  };
}

describe('servers failing', () => {
  it('keeps serving with one server down, reconnects when it returns, and explains a lost quorum at once', async () => {
    const store = await open({ timeoutMs: 20_000 });
    const durable = k(store, 'durable');
    await store.put(durable, 'before');
    await cluster.signal(4, 'SIGKILL');
    await store.put(durable, 'during');
    expect(text(await store.get(durable))).toBe('during');
    await cluster.signal(3, 'SIGKILL');
    // Both refuse connections now (nothing listens): the read fails well before its 20 s,
    // within a reconnection attempt, and says so.
    const started = Date.now();
    const err = await store.get(durable).catch((e: unknown) => e as PowerStoreError);
    expect(err).toBeInstanceOf(PowerStoreError);
    expect((err as PowerStoreError).code).toBe('QUORUM_UNREACHABLE');
    expect((err as PowerStoreError).message).toMatch(/^need 3 of 4 servers, 2 reachable: .*s3 refused.*s4 refused/);
    expect(Date.now() - started).toBeLessThan(10_000);
    await Promise.all([cluster.start(3), cluster.start(4)]);
    // Reconnection backs off for at most a few seconds.
    const deadline = Date.now() + 15_000;
    while (store.servers().some((s) => s.state !== 'open') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(store.servers().map((s) => s.state)).toEqual(['open', 'open', 'open', 'open']);
    expect(text(await store.get(durable))).toBe('during');
  }, 60_000);

  it('fails connect with QUORUM_UNREACHABLE at once when no server listens, naming why', async () => {
    const dead = clusterFile.servers.map((s) => ({ ...s, url: 'ws://127.0.0.1:9' }));
    const started = Date.now();
    const err = await connect({ cluster: { ...clusterFile, servers: dead }, timeoutMs: 30_000 }).catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'QUORUM_UNREACHABLE',
      message: expect.stringMatching(/^need 3 of 4 servers, 0 reachable: s1 refused, s2 refused/) as string,
    });
    expect(Date.now() - started).toBeLessThan(5_000);
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
    const servers = clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: proxy.url } : s));
    const store = await open({ servers });
    const value = new Uint8Array(300_000).map((_, i) => (i * 7 + 1) & 255);
    const attacked = k(store, 'attacked');
    await store.put(attacked, value);
    // Server 2 sits behind a proxy, so it is often the slowest and its corrupted answer
    // arrives after the read has its quorum; read until one read has seen it (bounded).
    const deadline = Date.now() + 20_000;
    for (let i = 0; i < 200 && Date.now() < deadline; i++) {
      expect(Buffer.compare((await store.get(attacked))!, value)).toBe(0);
      if (i >= 5 && store.servers()[1]!.misbehaving) break;
    }
    expect(proxy.corrupted).toBeGreaterThan(0);
    const stat = await store.stat(attacked);
    expect(stat.size).toBe(value.length);
    const s2 = store.servers().find((s) => s.id === 2)!;
    expect(s2.misbehaving).toMatch(/fragment/);
    expect(store.servers().filter((s) => s.misbehaving)).toHaveLength(1);
  });

  it('beyond t such servers, a read times out naming what each server sent, not only who answered', async () => {
    const more = [
      proxy,
      await startByzantineProxy(clusterFile.servers[2]!.url, clusterFile.n),
      await startByzantineProxy(clusterFile.servers[3]!.url, clusterFile.n),
    ];
    try {
      const identity = await Identity.generate();
      const writer = await open({ identity });
      const key = k(writer, 'beyond-t');
      await writer.put(key, 'only s1 can give its fragment back');
      const servers = clusterFile.servers.map((s, i) => (i === 0 ? s : { ...s, url: more[i - 1]!.url }));
      const err = await (await open({ identity, servers, timeoutMs: 3000 })).get(key).catch((e: unknown) => e as PowerStoreError);
      expect(err).toMatchObject({ code: 'QUORUM_UNREACHABLE' });
      // The put completed on 3 servers: one of s2–s4 may not have stored it yet when the
      // read comes, and then answers with the version before (named as such).
      expect((err as PowerStoreError).message).toMatch(
        /^need 3 of 4 servers, 4 reachable; the newest version \(timestamp \d+\) needs 2 fragments that verify: s1 sent one; (s2, s3, s4 sent a fragment that fails verification|s\d, s\d sent a fragment that fails verification; s\d answered with another version)$/,
      );
    } finally {
      await Promise.all(more.slice(1).map((p) => p.close()));
    }
  });
});

describe('listing keys', () => {
  it('lists a prefix in pages, with sizes and timestamps, without deleted keys; a reader without identity lists too', async () => {
    const store = await open();
    const names = ['photos/b.jpg', 'photos/a.jpg', 'photos2/c.jpg', 'notes/x', 'photos/d/e.jpg'];
    await Promise.all(names.map((n, i) => store.put(k(store, n), 'x'.repeat(i + 1))));
    await store.delete(k(store, 'photos/d/e.jpg'));
    const all = await store.list(k(store, 'photos/'));
    // Sizes are the plaintext's, as stat reports them; servers store the envelope too, 64 bytes more.
    const ts = { num: 1, writerId: expect.any(String) as string };
    expect(all).toEqual({
      keys: [
        { key: k(store, 'photos/a.jpg'), size: 2, storedSize: 2 + 64, encrypted: true, timestamp: ts },
        { key: k(store, 'photos/b.jpg'), size: 1, storedSize: 1 + 64, encrypted: true, timestamp: ts },
      ],
      cursor: undefined,
    });
    expect((await store.stat(k(store, 'photos/a.jpg'))).size).toBe(2);
    // A public value's envelope is 4 bytes; a raw one is stored as given.
    await store.put(k(store, 'open/p'), 'public', { public: true });
    await store.put(k(store, 'open/r'), 'raw bytes', { raw: true });
    expect((await store.list(k(store, 'open/'))).keys).toEqual([
      { key: k(store, 'open/p'), size: 6, storedSize: 6 + 4, encrypted: false, timestamp: ts },
      { key: k(store, 'open/r'), size: 9, storedSize: 9, encrypted: false, timestamp: ts },
    ]);
    const reader = await open({ identity: false });
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await reader.list(k(store, ''), { limit: 2, ...(cursor ? { cursor } : {}) });
      expect(page.keys.length).toBeLessThanOrEqual(2);
      seen.push(...page.keys.map((x) => x.key));
      cursor = page.cursor;
    } while (cursor);
    expect(seen).toEqual(['notes/x', 'open/p', 'open/r', 'photos/a.jpg', 'photos/b.jpg', 'photos2/c.jpg'].map((n) => k(store, n)));
    // The same, page after page, as an async iterator; breaking off asks for no more pages.
    const iterated: string[] = [];
    for await (const { key } of reader.keys(k(store, ''), { limit: 2 })) iterated.push(key);
    expect(iterated).toEqual(seen);
    const first: string[] = [];
    for await (const { key, storedSize } of store.keys(k(store, 'photos'), { limit: 1 })) {
      expect(storedSize).toBeGreaterThan(64);
      first.push(key);
      if (first.length === 2) break;
    }
    expect(first).toEqual([k(store, 'photos/a.jpg'), k(store, 'photos/b.jpg')]);
    await expect(async () => {
      for await (const _ of reader.keys('', { limit: 0 })) void _;
    }).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(await code(reader.list('', { limit: 0 }))).toBe('INVALID_ARGUMENT');
    expect(await code(reader.list('a/', { cursor: 'b/1' }))).toBe('INVALID_ARGUMENT');
  });

  it('a Byzantine server can neither hide a completed write nor invent a key, and inventing is reported', async () => {
    const id = await Identity.generate();
    const writer = await open({ identity: id });
    const hider = await startListingLiar(clusterFile.servers[1]!.url, clusterFile.n, 'hide');
    const inventor = await startListingLiar(clusterFile.servers[1]!.url, clusterFile.n, 'invent', k(writer, 'listed/0-forged'));
    try {
      // Server 3 is out of reach for these clients, so every write completes at 1, 2 and 4
      // only, and a listing needs server 2's answer: the hider cannot be outvoted by 3.
      const withServer2 = (url: string) =>
        clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url } : s.id === 3 ? { ...s, url: 'ws://127.0.0.1:9' } : s));
      const viaHider = await open({ identity: id, servers: withServer2(hider.url) });
      await viaHider.put(k(writer, 'listed/1'), 'one');
      const hidden = await viaHider.list(k(writer, 'listed/'));
      expect(hidden.keys.map((x) => x.key)).toEqual([k(writer, 'listed/1')]);
      expect(hider.corrupted).toBeGreaterThan(0);
      // A dropped answer needs another in its place: here server 3 is reachable again.
      const viaInventor = await open({
        identity: false,
        servers: clusterFile.servers.map((s) => (s.id === 2 ? { ...s, url: inventor.url } : s)),
      });
      // The proxied server is often the slowest, its answer after the quorum: list until one listing has seen it (bounded).
      for (let i = 0; i < 100 && !viaInventor.servers()[1]!.misbehaving; i++) {
        const invented = await viaInventor.list(k(writer, 'listed/'));
        expect(invented.keys.map((x) => x.key)).toEqual([k(writer, 'listed/1')]);
      }
      expect(inventor.corrupted).toBeGreaterThan(0);
      expect(viaInventor.servers().find((s) => s.id === 2)!.misbehaving).toMatch(/not valid/);
    } finally {
      await hider.close();
      await inventor.close();
    }
  });
});

describe('a listing that cannot complete', () => {
  it('fails at once, naming the server whose entries fail verification and the one that is down', async () => {
    const writer = await open();
    const prefix = k(writer, 'failing/');
    await writer.put(`${prefix}1`, 'one');
    const forged = `${prefix}0-forged`;
    const inventor = await startListingLiar(clusterFile.servers[1]!.url, clusterFile.n, 'invent', forged);
    try {
      // Server 2 lists a key nobody wrote, server 3 refuses connections: two answers that
      // count, of the three needed.
      const servers = clusterFile.servers.map((s) =>
        s.id === 2 ? { ...s, url: inventor.url } : s.id === 3 ? { ...s, url: 'ws://127.0.0.1:9' } : s,
      );
      const reader = await open({ identity: false, servers, timeoutMs: 20_000 });
      const started = Date.now();
      const err = await reader.list(prefix).catch((e: unknown) => e);
      expect(err).toMatchObject({
        code: 'QUORUM_UNREACHABLE',
        message: `need 3 of 4 servers, 3 reachable: s3 refused; the LIST needs 3 answers that verify: s1, s4 sent one; s2 sent one that fails verification (listed ${JSON.stringify(forged)} with a candidate that is not valid)`,
      });
      // Within a reconnection attempt to server 3, not the 20 s timeout.
      expect(Date.now() - started).toBeLessThan(10_000);
      expect(inventor.corrupted).toBeGreaterThan(0);
    } finally {
      await inventor.close();
    }
  });
});

describe("values over a reader's maxValueBytes", () => {
  it('fail promptly with VALUE_TOO_LARGE, blame no server, and leave the store working', async () => {
    const writer = await open();
    // Fragments of 512 KiB: over the reader's frame limit (32 KiB + 64 KiB), so the servers'
    // answers never reach it (ws closes those connections with 1009).
    const huge = k(writer, 'huge');
    await writer.put(huge, new Uint8Array(1024 * 1024).fill(1));
    // 70 000 bytes: answers fit the frame limit, the value is still over maxValueBytes.
    const over = k(writer, 'just-over');
    await writer.put(over, new Uint8Array(70_000).fill(2));
    const fits = k(writer, 'fits');
    await writer.put(fits, 'small enough', { public: true });
    const reader = await open({ identity: false, maxValueBytes: 64 * 1024, timeoutMs: 10_000 });
    for (const key of [huge, over, huge]) {
      const started = Date.now();
      const err = (await reader.get(key).catch((e: unknown) => e)) as PowerStoreError;
      expect(err).toBeInstanceOf(PowerStoreError);
      expect({ code: err.code, message: err.message }).toMatchObject({
        code: 'VALUE_TOO_LARGE',
        message: expect.stringContaining('maxValueBytes') as string,
      });
      expect(Date.now() - started).toBeLessThan(5_000);
    }
    expect(reader.servers().filter((s) => s.misbehaving)).toEqual([]);
    expect(text(await reader.get(fits))).toBe('small enough');
    expect(await reader.stat(fits)).toMatchObject({ size: 12, misbehaving: [] });
    expect(reader.servers().filter((s) => s.misbehaving)).toEqual([]);
  });
});

describe('a server that refuses every request', () => {
  let refusing: ByzantineProxy;
  beforeAll(async () => {
    refusing = await startRefusingServer(clusterFile.n, 'INTERNAL', `disk on fire ${'x'.repeat(300)}`);
  });
  afterAll(async () => {
    await refusing?.close();
  });

  it('is named as misbehaving with its code and message, while operations succeed on the others', async () => {
    const servers = clusterFile.servers.map((s) => (s.id === 3 ? { ...s, url: refusing.url } : s));
    const store = await open({ servers });
    const key = k(store, 'refused');
    await store.put(key, 'still written');
    expect(text(await store.get(key))).toBe('still written');
    expect(refusing.corrupted).toBeGreaterThan(0);
    const flagged = store.servers().filter((s) => s.misbehaving);
    expect(flagged.map((s) => s.id)).toEqual([3]);
    expect(flagged[0]!.misbehaving).toMatch(/^refused a [A-Z]+ that 3 other servers accepted \(INTERNAL: disk on fire x+…\)$/);
    expect(flagged[0]!.misbehaving!.length).toBeLessThan(220);
    const stat = await store.stat(key);
    expect(stat.misbehaving).toEqual([
      { id: 3, reason: expect.stringMatching(/^refused a (COLLECT|FILTER) that 3 other servers/) as string },
    ]);
  });
});
