/**
 * The lost write of issue 24, on real server processes: a write completes on servers 1–3
 * while server 4 is down; server 2's disk is then lost; server 3 is Byzantine and hides the
 * write (it answers as if it held only the version before). A reader whose COLLECT and FILTER
 * quorums are servers 2–4 (server 1 is slow) found no candidate for the write and returned
 * the previous value: one lost disk plus one Byzantine server were two faults at t = 1.
 * With rebuild, server 2 gets its fragment of the write back from servers 1 and 3 (each
 * checked against the writer's signed hash), and the reader returns the write.
 */
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import { encodeMessage, type Message } from '@powerstore/protocol';
import type { StatusReport } from '../../packages/server/src/index.js';
import { startProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { CliCluster, ensureBuilt, openWebSocket, requestOnce } from './harness.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const text = (b: Uint8Array | undefined) => (b === undefined ? undefined : new TextDecoder().decode(b));

let cluster: CliCluster | undefined;
const stores: Store[] = [];
const proxies: ByzantineProxy[] = [];

beforeAll(async () => {
  await ensureBuilt();
}, 240_000);

afterEach(async () => {
  for (const s of stores.splice(0)) s.close();
  for (const p of proxies.splice(0)) await p.close();
  await cluster?.stop();
  cluster = undefined;
});

async function open(c: CliCluster, file: object): Promise<Store> {
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(c.dir, 'admin.json'), 'utf8')));
  const store = await connect({ cluster: file, identity: admin, timeoutMs: 30_000 });
  stores.push(store);
  return store;
}

/**
 * A Byzantine server 3: it passes everything on while `lying` is off, remembering its
 * answers to a read of `key`; once lying, it answers a read of `key` with those (the
 * version it held then) itself.
 */
async function hidingProxy(target: string, n: number, key: string) {
  let collect: Message | undefined;
  let filter: Message | undefined;
  const state = { lying: false };
  const proxy = await startProxy(target, n, {
    onReply: (m) => {
      if (!state.lying && m.key === key) {
        if (m.type === 'COLLECT_ACK') collect = m;
        if (m.type === 'FILTER_ACK' && m.entry?.fragment) filter = m;
      }
      return undefined;
    },
    onRequest: (m) => {
      if (!state.lying || m.key !== key) return undefined;
      if (m.type === 'COLLECT' && collect) return encodeMessage({ ...collect, opId: m.opId });
      if (m.type === 'FILTER' && filter) return encodeMessage({ ...filter, opId: m.opId });
      return undefined;
    },
  });
  proxies.push(proxy);
  return { proxy, state, recorded: () => collect !== undefined && filter !== undefined };
}

/** Waits until server `i` reports `caught-up`, and returns its last pass. */
async function caughtUp(c: CliCluster, i: number): Promise<NonNullable<NonNullable<StatusReport['heal']>['catchUp']['lastPass']>> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const s = (await (await fetch(`${c.http(i)}/status`, { signal: AbortSignal.timeout(5000) })).json()) as StatusReport;
    if (s.heal?.catchUp.state === 'caught-up' && s.heal.catchUp.lastPass) return s.heal.catchUp.lastPass;
    if (Date.now() > deadline) throw new Error(`server ${i} did not finish rebuilding within 60 s`);
    await sleep(250);
  }
}

/**
 * A cluster (catch-up every 2 s) with v1 of a key, and the reader's view of it: server 1
 * slow (a correct server whose answers come last), server 3 Byzantine, having recorded its
 * answers to a read of v1 (it lies with them once `liar.state.lying` is set).
 */
async function setUp() {
  cluster = await CliCluster.create(1, ['--heal-interval-ms', '2000']);
  const c = cluster;
  await c.startAll();
  const writer = await open(c, c.clusterJson());
  const key = `${writer.namespace}doc`;
  await writer.put(key, 'v1');
  const file = c.clusterJson() as { servers: { url: string }[] };
  const slow = await startProxy(c.urls[0], c.config.n, { replyDelayMs: 1500 });
  proxies.push(slow);
  const liar = await hidingProxy(c.urls[2]!, c.config.n, key);
  file.servers[0]!.url = slow.url;
  file.servers[2]!.url = liar.proxy.url;
  expect(text(await (await open(c, file)).get(key))).toBe('v1');
  expect(liar.recorded()).toBe(true);
  return { c, writer, key, file, liar };
}

it('a write completed on 3 of 4 servers survives a lost disk and a Byzantine server hiding it', async () => {
  const { c, writer, key, file, liar } = await setUp();

  // v2 completes on servers 1–3 while server 4 is down.
  expect(await c.signal(4, 'SIGTERM')).toBe(0);
  await writer.put(key, 'v2');
  // Server 2's disk is lost; server 4 comes back without catching up (the write stays missing there).
  expect(await c.signal(2, 'SIGTERM')).toBe(0);
  rmSync(join(c.dir, 'data-2'), { recursive: true, force: true });
  await c.start(4, ['--heal-interval-ms', '0']);
  await c.start(2);
  await caughtUp(c, 2);

  liar.state.lying = true;
  const reader = await open(c, file);
  expect(text(await reader.get(key))).toBe('v2');
  expect(liar.proxy.corrupted).toBeGreaterThan(0);
}, 180_000);

/**
 * The same two faults, with the write still under way when the disk is lost: v2 is stored
 * on servers 1–3 (server 4 down), server 2 signs its receipt, and only then loses its disk.
 * The writer's COMPLETE goes out after server 2 has rebuilt, so v2's store proof counts
 * server 2 among its holders. A rebuild that repaired only completed writes left server 2
 * without v2's fragment: with server 3 hiding it and server 4 never having stored it, only
 * server 1 held it, and no read could decode it. The rebuild now also repairs the writes
 * its peers hold above `lc` (PENDING).
 */
it('a write under way when a disk is lost is rebuilt too, and survives a Byzantine server hiding it', async () => {
  const { c, key, file, liar } = await setUp();

  // A writer whose COMPLETE of v2 is held back (acknowledged by the proxies, delivered later).
  const held: Message[] = [];
  const late = c.clusterJson() as { servers: { url: string }[] };
  for (let i = 0; i < c.config.n; i++) {
    const p = await startProxy(c.urls[i], c.config.n, {
      onRequest: (m) => {
        if (m.type !== 'COMPLETE' || m.key !== key) return undefined;
        held.push(m);
        return encodeMessage({ type: 'COMPLETE_ACK', key, opId: m.opId, ts: m.candidate.ts });
      },
    });
    proxies.push(p);
    late.servers[i]!.url = p.url;
  }
  expect(await c.signal(4, 'SIGTERM')).toBe(0);
  await (await open(c, late)).put(key, 'v2');
  expect(held.length).toBeGreaterThan(0);
  const complete = held[0] as Extract<Message, { type: 'COMPLETE' }>;
  // Server 2 signed its receipt for v2; no server has v2 as its lc yet.
  expect(complete.candidate.proof.map((r) => r.server)).toContain(1);

  expect(await c.signal(2, 'SIGTERM')).toBe(0);
  rmSync(join(c.dir, 'data-2'), { recursive: true, force: true });
  await c.start(4, ['--heal-interval-ms', '0']);
  await c.start(2);
  const pass = await caughtUp(c, 2);
  expect(pass.pendingRepaired).toBe(1);
  expect(pass.failures).toEqual({});

  // v2 completes now, with server 2's receipt from before the loss in its proof.
  for (let i = 0; i < c.config.n; i++) {
    const ws = await openWebSocket(c.urls[i]!);
    const ack = await requestOnce(ws, { ...complete, opId: 1 }, c.config.n);
    ws.close();
    expect(ack.type).toBe('COMPLETE_ACK');
  }

  liar.state.lying = true;
  const reader = await open(c, file);
  expect(text(await reader.get(key))).toBe('v2');
  expect(liar.proxy.corrupted).toBeGreaterThan(0);
}, 180_000);
