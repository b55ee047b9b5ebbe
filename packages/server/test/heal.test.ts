/**
 * The host side of self-healing, in process: the peer connections (`peers.ts`) against
 * peers that flood, send garbage or stay mute; the catalog (`catalog.ts`) listing deletes
 * that `ListOperation` leaves out; repairs over real WebSockets to protocol servers; the
 * names of stored entries and the walk over them (`level-storage.ts`); the rate limiter.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import {
  computeCrossChecksum,
  entryId,
  type Candidate,
  type HistoryEntry,
  type ListAck,
  type Reply,
  type Server,
} from '@powerstore/protocol';
import { crypto, makeCluster, own } from '@powerstore/protocol/testing';
import { Catalog, KnownVerifier, mergeWithDeletes } from '../src/catalog.js';
import { createHealMetrics } from '../src/heal-metrics.js';
import { DEFAULT_CATCH_UP, RateLimiter, rememberingHashes, Repairer } from '../src/heal.js';
import { LevelStorage, parseEntryName } from '../src/level-storage.js';
import { PeerSet, PeerTimeout } from '../src/peers.js';

const log = pino({ level: 'silent' });
const text = (s: string) => new TextEncoder().encode(s);
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

type Behaviour = 'honest' | 'flood' | 'garbage' | 'mute';

/** Protocol server `s` behind a WebSocket on loopback, answering as `behaviour` says. */
async function serve(s: Server, behaviour: () => Behaviour): Promise<string> {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise<void>((r) => wss.once('listening', () => r()));
  wss.on('connection', (ws: WebSocket) => {
    ws.on('message', (data: Buffer) => {
      void (async () => {
        const how = behaviour();
        if (how === 'mute') return;
        const { reply } = await s.handleFrame(new Uint8Array(data));
        if (how === 'garbage') {
          ws.send(reply.slice(0, Math.max(3, reply.length >> 1)));
          ws.send(Buffer.from('not a frame'), { binary: false });
          return;
        }
        ws.send(reply);
        if (how === 'flood') {
          for (let i = 0; i < 200; i++) ws.send(reply);
          ws.send(reply.slice(0, 20));
        }
      })();
    });
  });
  cleanups.push(
    () =>
      new Promise<void>((r) => {
        for (const c of wss.clients) c.terminate();
        wss.close(() => r());
      }),
  );
  const a = wss.address();
  if (typeof a === 'string' || a === null) throw new Error('no address');
  return `ws://127.0.0.1:${a.port}`;
}

/** A cluster of 4 in-process protocol servers; server 0 is "this" server, the others are reached over WebSockets. */
async function setUp(behaviours: Behaviour[] = ['honest', 'honest', 'honest', 'honest'], skip = new Set<number>()) {
  const c = await makeCluster(1, { skip });
  const urls = await Promise.all(c.servers.map((s, i) => (i === 0 ? Promise.resolve('ws://unused') : serve(s, () => behaviours[i]!))));
  const evidence: [number, string][] = [];
  const self = c.servers[0]!;
  const peers = new PeerSet({
    n: 4,
    self: 0,
    urls,
    handleSelf: (r) => self.handle(r),
    maxFrameBytes: 1 << 20,
    log,
    onEvidence: (server, reason) => evidence.push([server, reason]),
  });
  cleanups.push(() => peers.close());
  let opId = 1000;
  const verifier = new KnownVerifier(crypto, c.cluster);
  const catalog = new Catalog({
    config: c.config,
    crypto,
    verifier,
    peers,
    handleSelf: (r) => self.handle(r),
    opId: () => opId++,
    timeoutMs: 5000,
    onEvidence: (server, reason) => peers.evidence(server, reason),
  });
  const metrics = createHealMetrics(new Registry());
  const repairer = new Repairer({
    config: c.config,
    crypto,
    codec: c.codec,
    verifier,
    index: 0,
    protocol: self,
    peers,
    opId: () => opId++,
    settings: { ...DEFAULT_CATCH_UP, operationTimeoutMs: 5000 },
    metrics,
  });
  return { c, peers, catalog, repairer, evidence, metrics, opId: () => opId++ };
}

describe('catalog', () => {
  it('lists every completed write, deletes included, each with its latest candidate', async () => {
    const { c, catalog } = await setUp();
    const keep = own(c.owner, 'keep');
    const gone = own(c.owner, 'gone');
    await c.write(keep, { kind: 'value', value: text('v1') });
    await c.write(keep, { kind: 'value', value: text('v2, longer') });
    await c.write(gone, { kind: 'value', value: text('x') });
    await c.write(gone, { kind: 'tombstone' });
    const page = await catalog.page('');
    expect(page.cursor).toBeUndefined();
    expect(page.entries.map((e) => [e.key, e.candidate.cert.tombstone])).toEqual(
      [
        [gone, true],
        [keep, false],
      ].sort((a, b) => (a[0]! < b[0]! ? -1 : 1)),
    );
    expect(page.entries.find((e) => e.key === keep)?.size).toBe(10);
    expect((await catalog.lookup(gone))?.candidate.cert.tombstone).toBe(true);
    expect(await catalog.lookup(own(c.owner, 'never'))).toBeUndefined();
  });

  it('mergeWithDeletes keeps what the page covers: keys up to its cursor, the highest candidate of each', () => {
    const z = (n: number, fill = 0) => new Uint8Array(n).fill(fill);
    const cand = (num: number, tombstone = false): Candidate => ({
      ts: { num, writerId: z(32) },
      nonce: z(32, num),
      cert: { nonceHash: z(32), ccDigest: z(32), signer: z(32), signature: z(64), tombstone, grant: undefined },
      proof: [],
    });
    const ack = (entries: [string, number, boolean?][]): ListAck =>
      ({
        type: 'LIST_ACK',
        key: '',
        opId: 1,
        more: false,
        entries: entries.map(([key, num, t]) => ({ key, candidate: cand(num, t) })),
      }) as unknown as ListAck;
    const merged = mergeWithDeletes(
      [
        ack([
          ['a', 1],
          ['b', 2, true],
          ['d', 1],
        ]),
        ack([
          ['a', 3, true],
          ['c', 1],
        ]),
      ],
      {
        keys: [{ key: 'c', candidate: cand(1), size: 5, stripes: 1 }],
        cursor: 'c',
      },
    );
    expect(merged.map((e) => [e.key, e.candidate.ts.num, e.candidate.cert.tombstone, e.size])).toEqual([
      ['a', 3, true, undefined],
      ['b', 2, true, undefined],
      ['c', 1, false, 5],
    ]);
  });
});

describe('peer connections', () => {
  it('repairs over WebSockets what this server missed; a flooding peer and one sending garbage change nothing but the evidence', async () => {
    const behaviours: Behaviour[] = ['honest', 'flood', 'garbage', 'honest'];
    const skip = new Set([0]);
    const { c, catalog, repairer, evidence } = await setUp(behaviours, skip);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('written while server 1 was away, long enough') });
    skip.clear();
    const [entry] = (await catalog.page('')).entries;
    expect(entry?.key).toBe(key);
    expect(await c.servers[0]!.holds(key, entry!.candidate.ts)).toBe(false);
    const r = await repairer.repair(key, entry!.candidate, {});
    expect(r).toMatchObject({ outcome: 'stored', entries: 1 });
    expect(await c.servers[0]!.holds(key, entry!.candidate.ts)).toBe(true);
    // Server 3 sent a cut frame and a text frame: evidence; the flood counted once per request.
    expect(evidence.some(([s, reason]) => s === 2 && /decode|text/.test(reason))).toBe(true);
    expect(evidence.some(([s]) => s === 1 || s === 3)).toBe(false);
  });

  it('a mute peer costs nothing while n − t others answer; with too few answering, the operation times out', async () => {
    const behaviours: Behaviour[] = ['honest', 'mute', 'honest', 'honest'];
    const { c, catalog, peers, opId } = await setUp(behaviours);
    await c.write(own(c.owner, 'a'), { kind: 'value', value: text('a') });
    expect((await catalog.page('')).entries).toHaveLength(1);
    behaviours[2] = 'mute';
    const { ListOperation } = await import('@powerstore/protocol');
    const op = new ListOperation({ config: c.config, crypto, verifier: new KnownVerifier(crypto, c.cluster) }, '', '', 10, opId());
    await expect(peers.run(op, { timeoutMs: 300 })).rejects.toBeInstanceOf(PeerTimeout);
    expect(peers.status().map((p) => p.id)).toEqual([2, 3, 4]);
  });

  it('drops answers to a round that is over, and frames under an opId never sent', async () => {
    const { c, peers, opId } = await setUp();
    const { ListOperation } = await import('@powerstore/protocol');
    await c.write(own(c.owner, 'a'), { kind: 'value', value: text('a') });
    const seen: Reply[] = [];
    const op = new ListOperation({ config: c.config, crypto, verifier: new KnownVerifier(crypto, c.cluster) }, '', '', 10, opId());
    const original = op.onReply.bind(op);
    op.onReply = (from, reply) => {
      seen.push(reply);
      return original(from, reply);
    };
    const page = await peers.run(op, { timeoutMs: 5000 });
    expect(page.keys).toHaveLength(1);
    // Every reply the operation saw carries its own opId (the wire ones are the host's).
    expect(seen.every((r) => r.opId === op.opId)).toBe(true);
    expect(seen.length).toBeLessThanOrEqual(4);
  });
});

describe('stored entries', () => {
  it('entry names parse back, whatever the key holds', () => {
    for (const key of ['k', 'a:b:c', 'x#1', 'ü/𝄞/:#', '~owner/photos/2024:01#3']) {
      for (const stripe of [0, 1, 77]) {
        const ts = { num: 123456, writerId: Uint8Array.from({ length: 32 }, (_, i) => (i * 37) & 0xff) };
        const name = `h:${key.length}:${key}:${entryId(ts, stripe)}`;
        expect(parseEntryName(name)).toEqual({ key, ts, stripe });
      }
    }
    expect(parseEntryName('h:3:ab')).toBeUndefined();
    expect(parseEntryName('k:1:a')).toBeUndefined();
    expect(parseEntryName(`h:1:a:1:${'00'.repeat(32)}#0`)).toBeUndefined();
  });

  it('LevelStorage walks every stored entry, from any point, and marks a new directory fresh until told', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'powerstore-heal-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const storage = await LevelStorage.open({ path: dir, n: 4 });
    expect(storage.created).toBe(true);
    expect(await storage.getMarker('fresh')).toMatchObject({ createdAt: expect.any(Number) as number });
    const fragments = [text('ab'), text('cd'), text('ef'), text('gh')];
    const cc = await computeCrossChecksum(crypto, fragments, 7, false);
    const cert = {
      nonceHash: new Uint8Array(32),
      ccDigest: new Uint8Array(32),
      signer: new Uint8Array(32),
      signature: new Uint8Array(64),
      tombstone: false,
      grant: undefined,
    };
    const keys = ['b', 'a:1', 'c#2'];
    for (const [i, key] of keys.entries()) {
      const entry: HistoryEntry = {
        ts: { num: i + 1, writerId: new Uint8Array(32).fill(i) },
        stripe: 0,
        fragment: fragments[0]!,
        cc,
        cert,
      };
      await storage.withKey(key, (r) => r.putEntry(entry, { owner: 'o', bytes: 10, quota: {} }));
    }
    const all = [];
    for await (const ref of storage.historyEntries()) all.push(ref);
    expect(all.map((r) => [r.key, r.ts.num, r.stripe, r.fragmentLength])).toEqual([
      ['b', 1, 0, 2],
      ['a:1', 2, 0, 2],
      ['c#2', 3, 0, 2],
    ]);
    const rest = [];
    for await (const ref of storage.historyEntries(all[0]!.cursor)) rest.push(ref.key);
    expect(rest).toEqual(['a:1', 'c#2']);
    // Many more than one batch of the walk, in order, each once.
    for (let i = 0; i < 150; i++) {
      const entry: HistoryEntry = {
        ts: { num: 1000 + i, writerId: new Uint8Array(32).fill(7) },
        stripe: 0,
        fragment: fragments[0]!,
        cc,
        cert,
      };
      await storage.withKey(`many/${String(i).padStart(3, '0')}`, (r) => r.putEntry(entry, { owner: 'o', bytes: 10, quota: {} }));
    }
    const walked = [];
    for await (const ref of storage.historyEntries()) walked.push(ref.key);
    expect(walked).toHaveLength(153);
    expect(new Set(walked).size).toBe(153);
    expect(walked.filter((k) => k.startsWith('many/'))).toEqual(
      Array.from({ length: 150 }, (_, i) => `many/${String(i).padStart(3, '0')}`),
    );
    await storage.setMarker('fresh', undefined);
    await storage.close();
    const again = await LevelStorage.open({ path: dir, n: 4 });
    expect(again.created).toBe(false);
    expect(await again.getMarker('fresh')).toBeUndefined();
    await expect(again.setMarker('totals', 1)).rejects.toThrow();
    await again.close();
  });
});

describe('remembered hashes', () => {
  it('give the hashes of the provider they wrap, computing each input once, whatever buffer holds it', async () => {
    let calls = 0;
    const counting = { ...crypto, sha256: (parts: readonly Uint8Array[]) => (calls++, crypto.sha256(parts)) };
    const memo = rememberingHashes(counting);
    const big = Uint8Array.from({ length: 100_000 }, (_, i) => i & 0xff);
    const head = [text('domain'), Uint8Array.of(0, 0, 0, 1)];
    const h1 = await memo.sha256([...head, big]);
    expect(h1).toEqual(await crypto.sha256([...head, big]));
    expect(await memo.sha256([...head, big.slice()])).toEqual(h1);
    expect(calls).toBe(1);
    const other = big.slice();
    other[50_000]! ^= 1;
    expect(await memo.sha256([...head, other])).toEqual(await crypto.sha256([...head, other]));
    expect(await memo.sha256([text('domain'), Uint8Array.of(0, 0, 0, 2), big])).toEqual(
      await crypto.sha256([text('domain'), Uint8Array.of(0, 0, 0, 2), big]),
    );
    expect(calls).toBe(3);
    await memo.sha256([text('small')]);
    await memo.sha256([text('small')]);
    expect(calls).toBe(5);
  });
});

describe('rate limiter', () => {
  it('lets a second of bytes through at once and then holds to the rate', async () => {
    const limiter = new RateLimiter(1_000_000);
    const started = performance.now();
    await limiter.ready();
    limiter.charge(1_000_000);
    await limiter.ready();
    limiter.charge(300_000);
    await limiter.ready();
    const ms = performance.now() - started;
    expect(ms).toBeGreaterThanOrEqual(250);
    expect(ms).toBeLessThan(1500);
    const unlimited = new RateLimiter(0);
    unlimited.charge(1e12);
    await unlimited.ready();
  });
});
