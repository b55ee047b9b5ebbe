/**
 * Self-healing on real server processes (issue 24): a server that missed writes while it
 * was down catches up when it restarts; a server whose data directory was wiped rebuilds
 * every completed write (values, a striped value, deletes) from its peers and then serves
 * reads another server's failure needs it for; scrub finds fragments damaged on disk and
 * repairs them; and a rebuild through a peer that corrupts every fragment it sends stores
 * only correct fragments.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import { encodeMessage, toHex, type Candidate } from '@powerstore/protocol';
import type { StatusReport } from '../../packages/server/src/index.js';
import { startByzantineProxy, startProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import {
  cli,
  CliCluster,
  collectLc,
  ensureBuilt,
  fragmentAt as fragmentOf,
  holdsEveryStripe,
  metricValue,
  openWebSocket,
  requestOnce,
  type ServerRef,
  seededBytes as bytes,
} from './harness.js';

const STRIPE = 64 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: CliCluster | undefined;
const stores: Store[] = [];
let proxy: ByzantineProxy | undefined;

beforeAll(async () => {
  await ensureBuilt();
}, 240_000);

afterEach(async () => {
  for (const s of stores.splice(0)) s.close();
  await proxy?.close();
  proxy = undefined;
  await cluster?.stop();
  cluster = undefined;
});

async function* chunks(value: Uint8Array): AsyncGenerator<Uint8Array> {
  for (let off = 0; off < value.length; off += 50_000) yield value.subarray(off, off + 50_000);
}

async function open(c: CliCluster, file: object = c.clusterJson()): Promise<Store> {
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(c.dir, 'admin.json'), 'utf8')));
  const store = await connect({ cluster: file, identity: admin, timeoutMs: 30_000, stripeBytes: STRIPE });
  stores.push(store);
  return store;
}

async function status(c: CliCluster, id: number): Promise<StatusReport> {
  return (await (await fetch(`${c.http(id)}/status`, { signal: AbortSignal.timeout(5000) })).json()) as StatusReport;
}

/** Waits (bounded) until `check` holds, polling. */
async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(250);
  }
}

/** Server `id` of `c`, for the harness's fragment checks. */
const server = (c: CliCluster, id: number): ServerRef => ({ url: c.urls[id - 1]!, id, n: c.config.n });

const fragmentAt = (c: CliCluster, id: number, key: string, candidate: Candidate, stripe = 0) =>
  fragmentOf(server(c, id), key, candidate, stripe);

/** Whether server `id` holds its fragment of every stripe of `key`'s latest write (as server `from` has it). */
async function holdsAll(c: CliCluster, id: number, key: string, from: number): Promise<boolean> {
  const lc = await collectLc(c.urls[from - 1]!, key, c.config.n);
  if (!lc) throw new Error(`server ${from} has no lc of ${key}`);
  return holdsEveryStripe(server(c, id), key, lc);
}

const same = (a: Uint8Array | undefined, b: Uint8Array) => a !== undefined && Buffer.from(a).equals(Buffer.from(b));

describe('catch-up', () => {
  it('a server that was down while writes completed gets its fragment of each when it restarts', async () => {
    cluster = await CliCluster.create(1, ['--heal-interval-ms', '3000']);
    const c = cluster;
    await c.startAll();
    const store = await open(c);
    const ns = store.namespace;
    await store.put(`${ns}a`, 'before');
    await store.put(`${ns}gone`, 'deleted while server 4 was down');
    expect(await c.signal(4, 'SIGTERM')).toBe(0);

    // Completed on servers 1–3 only.
    const a = bytes(150_000, 'a');
    const b = bytes(10_000, 'b');
    const big = bytes(3 * STRIPE + 1234, 'big');
    await store.put(`${ns}a`, a);
    await store.put(`${ns}b`, b);
    await store.putStream(`${ns}big`, chunks(big));
    await store.delete(`${ns}gone`);
    const keys = ['a', 'b', 'big', 'gone'].map((k) => `${ns}${k}`);
    for (const key of keys) expect(await holdsAll(c, 4, key, 1).catch(() => false), key).toBe(false);

    await c.start(4);
    await until('server 4 holds its fragment of every write it missed', async () => {
      for (const key of keys) if (!(await holdsAll(c, 4, key, 1))) return false;
      return true;
    });
    const s4 = await status(c, 4);
    expect(s4.heal?.catchUp.rebuilding).toBe(false);
    const m = await c.metrics(4);
    expect(metricValue(m, 'powerstore_heal_writes_repaired_total', { cause: 'catch_up' })).toBeGreaterThanOrEqual(4);
    expect(metricValue(m, 'powerstore_heal_failures_total')).toBe(0);
    const log = readFileSync(join(c.dir, 'server-4.log'), 'utf8');
    expect(log).toContain('catch-up: repaired a write this server did not hold');
    expect(log).toContain(`${ns}big`);
  }, 120_000);
});

describe('a write completed here without its STORE', () => {
  it('is repaired within seconds of its COMPLETE, not at the next pass', async () => {
    // One pass at start-up, the next in 10 minutes: only the COMPLETE can bring the write back in time.
    cluster = await CliCluster.create(1, ['--heal-interval-ms', '600000']);
    const c = cluster;
    await c.startAll();
    // The start-up pass first (under load it can still be running, or retrying, when the
    // writes below are made): a write it found would be repaired as catch_up instead.
    await until('server 4 has finished its start-up pass without a failure', async () => {
      const catchUp = (await status(c, 4)).heal?.catchUp;
      return catchUp !== undefined && !catchUp.rebuilding && catchUp.pass === undefined && catchUp.lastPass !== undefined;
    });
    const direct = await open(c);
    const key = `${direct.namespace}missed`;
    await direct.put(key, 'v1');
    // The writer's STORE to server 4 is lost on the way (refused by the proxy); its COMPLETE gets through.
    proxy = await startProxy(c.urls[3], c.config.n, {
      onRequest: (m) =>
        m.type === 'STORE' && m.key === key
          ? encodeMessage({ type: 'ERROR', key, opId: m.opId, code: 'INTERNAL', message: 'lost on the way' })
          : undefined,
    });
    const file = c.clusterJson() as { servers: { url: string }[] };
    file.servers[3]!.url = proxy.url;
    const value = bytes(40_000, 'missed');
    await (await open(c, file)).put(key, value);
    await until(
      'server 4 has the write as lc',
      async () => (await collectLc(c.urls[3]!, key, c.config.n))?.ts.num === (await collectLc(c.urls[0]!, key, c.config.n))?.ts.num,
    );
    const started = Date.now();
    await until('server 4 holds its fragment of the write', () => holdsAll(c, 4, key, 1), 30_000);
    expect(Date.now() - started).toBeLessThan(30_000);
    const m = await c.metrics(4);
    expect(metricValue(m, 'powerstore_heal_writes_repaired_total', { cause: 'complete' })).toBe(1);
    expect(metricValue(m, 'powerstore_heal_failures_total')).toBe(0);
    expect(readFileSync(join(c.dir, 'server-4.log'), 'utf8')).toContain('catch-up: repaired a write that completed here without its STORE');
  }, 120_000);
});

describe('flags', () => {
  it('start refuses a --peer-url of no other server, before it listens', async () => {
    cluster = await CliCluster.create(1);
    const c = cluster;
    for (const bad of ['1=ws://127.0.0.1:9', '5=ws://127.0.0.1:9', '2=http://127.0.0.1:9']) {
      const r = cli(['start', '--config', join(c.dir, 'server-1.json'), '--data', join(c.dir, 'data-1'), '--peer-url', bad]);
      expect(r.status, bad).toBe(2);
      expect(r.stderr, bad).toMatch(/peer-url/);
    }
    const help = cli(['start', '--help']);
    for (const flag of [
      '--heal-interval-ms',
      '--heal-concurrency',
      '--heal-bytes-per-sec',
      '--scrub-period-ms',
      '--scrub-bytes-per-sec',
      '--peer-url',
      '--peer-ca',
    ]) {
      expect(help.stdout).toContain(flag);
    }
  }, 60_000);
});

describe('rebuild', () => {
  it('a server whose data directory was wiped rebuilds every completed write; with another server down, every key reads back from it', async () => {
    cluster = await CliCluster.create(1, ['--heal-interval-ms', '3000']);
    const c = cluster;
    await c.startAll();
    const store = await open(c);
    const ns = store.namespace;
    const values = new Map<string, Uint8Array>();
    for (let i = 0; i < 12; i++) values.set(`${ns}k${i}`, bytes(1 + i * 20_000, `k${i}`));
    values.set(`${ns}big`, bytes(4 * STRIPE + 999, 'big'));
    for (const [key, value] of values) {
      if (key.endsWith('big')) await store.putStream(key, chunks(value));
      else await store.put(key, value);
    }
    // Overwritten, and deleted.
    await store.put(`${ns}k0`, 'old');
    values.set(`${ns}k0`, bytes(70_000, 'k0 again'));
    await store.put(`${ns}k0`, values.get(`${ns}k0`)!);
    await store.put(`${ns}gone`, 'soon deleted');
    await store.delete(`${ns}gone`);

    expect(await c.signal(2, 'SIGTERM')).toBe(0);
    rmSync(join(c.dir, 'data-2'), { recursive: true, force: true });
    await c.start(2);
    // Rebuilding from its first answer on (unless this small rebuild already ended).
    const first = (await status(c, 2)).heal?.catchUp;
    expect(first?.rebuilding === true || first?.state === 'caught-up', JSON.stringify(first)).toBe(true);
    await until('server 2 has rebuilt', async () => (await status(c, 2)).heal?.catchUp.state === 'caught-up');
    const s2 = await status(c, 2);
    expect(s2.heal?.catchUp.rebuilding).toBe(false);
    expect(s2.keys).toBe((await status(c, 3)).keys);
    for (const key of [...values.keys(), `${ns}gone`]) expect(await holdsAll(c, 2, key, 3), key).toBe(true);
    const log = readFileSync(join(c.dir, 'server-2.log'), 'utf8');
    expect(log).toContain('rebuilding from its peers');
    expect(log).toContain('rebuild complete');
    // Its peers hold writes it lacks: that is worth a warning (a new cluster's servers get none), once.
    const warned = log
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string })
      .filter((l) => l.level === 40 && /empty data directory .*peers hold writes it lacks/.test(l.msg));
    expect(warned).toHaveLength(1);
    expect(metricValue(await c.metrics(2), 'powerstore_heal_rebuilding')).toBe(0);

    const shown = cli(['status', '--cluster', c.clusterFile]);
    expect(shown.status, shown.stderr).toBe(0);
    // Rebuilt: caught up, or already in its next periodic pass (every 3 s here), which a
    // slow CLI start can reach; not rebuilding, not behind.
    expect(shown.stdout).toMatch(/^s2\s+up\s+ok\s+\S+ \S+\s+\S+\s+v\d+\s+(caught-up|catching-up)\s/m);
    expect(shown.stdout).toContain('4 of 4 servers healthy');

    // Server 1 down: reads need server 2's fragments as much as anyone's.
    expect(await c.signal(1, 'SIGTERM')).toBe(0);
    const reader = await open(c);
    for (const [key, value] of values) expect(same(await reader.get(key), value), key).toBe(true);
    expect(await reader.get(`${ns}gone`)).toBeUndefined();
    // And with server 3's fragments corrupted on the way, only server 2's and 4's remain.
    const file = c.clusterJson() as { servers: { url: string }[] };
    proxy = await startByzantineProxy(file.servers[2]!.url, c.config.n);
    file.servers[2]!.url = proxy.url;
    const wary = await open(c, file);
    for (const [key, value] of values) expect(same(await wary.get(key), value), key).toBe(true);
    expect(proxy.corrupted).toBeGreaterThan(0);
  }, 180_000);
});

describe('scrub', () => {
  it('finds fragments damaged on disk (in a table file, and in a record rewritten in place) and repairs them from the peers', async () => {
    // The start check off: scrub, not the check at start, is to find the damage. Fragments
    // in LevelDB (the value log's damage is storage-check.test.ts's).
    cluster = await CliCluster.create(1, [
      '--value-log-min-bytes',
      'off',
      '--heal-interval-ms',
      '0',
      '--scrub-period-ms',
      '1000',
      '--scrub-bytes-per-sec',
      '100000000',
      '--start-check-bytes',
      '0',
    ]);
    const c = cluster;
    await c.startAll();
    const store = await open(c);
    const ns = store.namespace;
    const one = bytes(300_000, 'one');
    const two = bytes(200_000, 'two');
    await store.put(`${ns}one`, one);
    await store.put(`${ns}two`, two);
    const lcOne = (await collectLc(c.urls[2]!, `${ns}one`, 4))!;
    const lcTwo = (await collectLc(c.urls[2]!, `${ns}two`, 4))!;
    expect((await fragmentAt(c, 3, `${ns}one`, lcOne)).state).toBe('ok');
    expect((await fragmentAt(c, 3, `${ns}two`, lcTwo)).state).toBe('ok');
    // Server 3's fragment of "one", read raw, to find it on disk.
    const ws = await openWebSocket(c.urls[2]!);
    const ack = await requestOnce(ws, { type: 'FILTER', key: `${ns}one`, opId: 1, stripe: 0, fragment: true, candidates: [lcOne] }, 4);
    ws.close();
    if (ack.type !== 'FILTER_ACK' || !ack.entry?.fragment) throw new Error('no fragment');
    const fragment = Buffer.from(ack.entry.fragment);
    expect(await c.signal(3, 'SIGTERM')).toBe(0);

    const dir = join(c.dir, 'data-3');
    // "two": its f: record rewritten with one byte flipped.
    const db = new ClassicLevel<string, Uint8Array>(dir, { keyEncoding: 'utf8', valueEncoding: 'view' });
    await db.open();
    const name = `f:${`${ns}two`.length}:${ns}two:${lcTwo.ts.num}:${toHex(lcTwo.ts.writerId)}`;
    const stored = await db.get(name);
    if (!stored) throw new Error(`no record ${name}`);
    const altered = Uint8Array.from(stored);
    altered[1000]! ^= 0x40;
    await db.put(name, altered);
    // "one": moved into table files, then one byte flipped inside them.
    await db.compactRange('\u0000', '\uffff');
    await db.close();
    const probe = fragment.subarray(100_000, 100_064);
    let flipped = 0;
    for (const f of readdirSync(dir).filter((f) => f.endsWith('.ldb'))) {
      const content = readFileSync(join(dir, f));
      const at = content.indexOf(probe);
      if (at < 0) continue;
      content[at + 10]! ^= 0x01;
      writeFileSync(join(dir, f), content);
      flipped++;
    }
    expect(flipped).toBe(1);

    await c.start(3);
    await until(
      'scrub repaired both fragments',
      async () => metricValue(await c.metrics(3), 'powerstore_scrub_repaired_total') >= 2,
      60_000,
    );
    expect((await fragmentAt(c, 3, `${ns}one`, lcOne)).state).toBe('ok');
    expect((await fragmentAt(c, 3, `${ns}two`, lcTwo)).state).toBe('ok');
    const m = await c.metrics(3);
    expect(metricValue(m, 'powerstore_scrub_damaged_total', { kind: 'lc' })).toBe(2);
    const log = readFileSync(join(c.dir, 'server-3.log'), 'utf8');
    expect(log).toContain('scrub: repaired a damaged fragment');
    expect(log).toContain(`${ns}one`);
    const s3 = await status(c, 3);
    expect(s3.heal?.scrub).toMatchObject({ enabled: true, damaged: 2, repaired: 2 });
    // Server 1 down and server 2 lying: the repaired fragments are what a read needs.
    expect(await c.signal(1, 'SIGTERM')).toBe(0);
    const file = c.clusterJson() as { servers: { url: string }[] };
    proxy = await startByzantineProxy(file.servers[1]!.url, c.config.n);
    file.servers[1]!.url = proxy.url;
    const reader = await open(c, file);
    expect(same(await reader.get(`${ns}one`), one)).toBe(true);
    expect(same(await reader.get(`${ns}two`), two)).toBe(true);
  }, 120_000);
});

describe('a Byzantine peer during a rebuild', () => {
  it('a peer corrupting every fragment it sends slows the rebuild but never gets a wrong fragment stored', async () => {
    cluster = await CliCluster.create(1, ['--heal-interval-ms', '3000']);
    const c = cluster;
    await c.startAll();
    const store = await open(c);
    const ns = store.namespace;
    const keys: string[] = [];
    for (let i = 0; i < 10; i++) {
      keys.push(`${ns}v${i}`);
      await store.put(`${ns}v${i}`, new Uint8Array(randomBytes(5_000 + i * 15_000)));
    }
    keys.push(`${ns}big`);
    await store.putStream(`${ns}big`, chunks(bytes(3 * STRIPE + 5, 'big')));

    expect(await c.signal(4, 'SIGTERM')).toBe(0);
    rmSync(join(c.dir, 'data-4'), { recursive: true, force: true });
    proxy = await startByzantineProxy(c.urls[1]!, c.config.n);
    await c.start(4, ['--peer-url', `2=${proxy.url}`]);
    await until('server 4 has rebuilt', async () => (await status(c, 4)).heal?.catchUp.state === 'caught-up');
    expect(proxy.corrupted).toBeGreaterThan(0);
    for (const key of keys) expect(await holdsAll(c, 4, key, 3), key).toBe(true);
    const m = await c.metrics(4);
    expect(metricValue(m, 'powerstore_heal_peer_misbehaving_total', { peer: '2' })).toBeGreaterThan(0);
    expect(metricValue(m, 'powerstore_heal_peer_misbehaving_total', { peer: '1' })).toBe(0);
    expect(metricValue(m, 'powerstore_heal_peer_misbehaving_total', { peer: '3' })).toBe(0);
    const peers = (await status(c, 4)).heal?.peers ?? [];
    expect(peers.find((p) => p.id === 2)?.misbehaving).toMatch(/fragment/);
  }, 120_000);
});
