/**
 * Hostile clients against real server processes, each attack beside a control showing an
 * honest client still served: sockets that request large replies and never read them,
 * a connection flood from one address, slowloris frames that never finish, connections
 * that send nothing. Attackers connect from 127.0.0.2 and the honest client from
 * 127.0.0.1 (both loopback, which gets the same rules as any other address).
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { connect, Identity, type Store } from '@powerstore/client';
import { encodeMessage, type Message } from '@powerstore/protocol';
import { CliCluster, collectLc, ensureBuilt, largeFrameHeader, metricValue, openWebSocket, rawWebSocket, requestOnce } from './harness.js';

const MiB = 1024 * 1024;
const BUDGET = 100 * MiB;
const BUDGET_PER_ADDRESS = 40 * MiB;
const PER_ADDRESS = 24;
const SEND_TIMEOUT_MS = 4000;
const FRAME_TIMEOUT_MS = 1500;
const IDLE_TIMEOUT_MS = 3000;
const ATTACKER = '127.0.0.2';

let cluster: CliCluster;
let store: Store;

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1, [
    '--max-buffered-bytes',
    String(BUDGET),
    '--max-buffered-bytes-per-address',
    String(BUDGET_PER_ADDRESS),
    '--max-connections-per-address',
    String(PER_ADDRESS),
    '--send-timeout-ms',
    String(SEND_TIMEOUT_MS),
    '--frame-timeout-ms',
    String(FRAME_TIMEOUT_MS),
    '--idle-timeout-ms',
    String(IDLE_TIMEOUT_MS),
  ]);
  await cluster.startAll();
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(`${cluster.dir}/admin.json`, 'utf8')));
  store = await connect({ cluster: cluster.clusterJson(), identity: admin, timeoutMs: 20_000 });
}, 240_000);

afterAll(async () => {
  store?.close();
  await cluster?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Resident memory of server `id`'s process, from /proc. */
function rss(id: number): number {
  const status = readFileSync(`/proc/${cluster.process(id)!.pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
}

const openWs = (url: string, localAddress = ATTACKER) => openWebSocket(url, localAddress);

function closed(ws: WebSocket): Promise<{ code: number; reason: string; at: number }> {
  return new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString(), at: Date.now() })));
}

const request = (ws: WebSocket, m: Message) => requestOnce(ws, m, cluster.config.n);

async function metricSum(name: string, labels: Record<string, string> = {}): Promise<number> {
  let sum = 0;
  for (let id = 1; id <= cluster.config.n; id++) sum += metricValue(await cluster.metrics(id), name, labels);
  return sum;
}

describe('hostile clients cannot exhaust a server; honest clients stay served', () => {
  it('16 paused sockets per server asking for a 16 MiB value: memory stays within the budget, an honest read succeeds, the stalled sockets are closed', async () => {
    const key = `${store.namespace}big`;
    const value = new Uint8Array(randomBytes(16 * MiB));
    await store.put(key, value);
    const candidate = (await collectLc(cluster.urls[0]!, key, cluster.config.n))!;
    expect(candidate).toBeDefined();
    const baseline = cluster.urls.map((_, i) => rss(i + 1));
    const timeoutsBefore =
      (await metricSum('powerstore_connections_closed_total', { reason: 'send_timeout' })) +
      (await metricSum('powerstore_connections_closed_total', { reason: 'heartbeat_timeout' }));

    // Each attacker stops reading, then asks for the fragment again and again.
    const attackers: WebSocket[] = [];
    for (const url of cluster.urls) {
      for (let i = 0; i < 16; i++) {
        const ws = await openWs(url);
        ws.pause();
        ws.on('error', () => undefined);
        const frame = encodeMessage({ type: 'FILTER', key, opId: 100 + i, stripe: 0, fragment: true, candidates: [candidate] });
        for (let j = 0; j < 8; j++) ws.send(frame);
        attackers.push(ws);
      }
    }
    const peak = [...baseline];
    const sample = () => cluster.urls.forEach((_, i) => (peak[i] = Math.max(peak[i]!, rss(i + 1))));
    await sleep(1000);
    sample();
    // The honest client, meanwhile: the large value and a small write and read.
    const started = Date.now();
    const got = await store.get(key);
    expect(got && Buffer.compare(got, value)).toBe(0);
    await store.put(`${store.namespace}small`, new TextEncoder().encode('still served'));
    expect(new TextDecoder().decode(await store.get(`${store.namespace}small`))).toBe('still served');
    const honestMs = Date.now() - started;
    sample();
    const buffered = await Promise.all(
      cluster.urls.map(async (_, i) => metricValue(await cluster.metrics(i + 1), 'powerstore_buffered_bytes')),
    );
    for (const b of buffered) expect(b).toBeLessThanOrEqual(BUDGET);
    // The address's share admits a few of its requests at a time; each stalled socket is
    // closed after SEND_TIMEOUT_MS, which lets the next ones through to stall in turn.
    // (The attackers' own sockets are paused, so only the servers know they were closed.)
    // A stalled socket is closed by the send timeout, or by the heartbeat first when it
    // waited its turn longer than a ping interval (its pongs are unread too).
    const closedByServers = async () =>
      (await metricSum('powerstore_connections_closed_total', { reason: 'send_timeout' })) +
      (await metricSum('powerstore_connections_closed_total', { reason: 'heartbeat_timeout' })) -
      timeoutsBefore;
    for (const deadline = Date.now() + 150_000; Date.now() < deadline && (await closedByServers()) < attackers.length;) {
      sample();
      for (let id = 1; id <= 4; id++)
        expect(metricValue(await cluster.metrics(id), 'powerstore_buffered_bytes')).toBeLessThanOrEqual(BUDGET);
      await sleep(500);
    }
    // Every attacker was closed for not reading, and its memory given back.
    expect(await closedByServers()).toBe(attackers.length);
    for (const ws of attackers) ws.terminate();
    await sleep(200);
    expect(await metricSum('powerstore_buffered_bytes', { kind: 'replies' })).toBe(0);
    expect(await metricSum('powerstore_buffered_bytes', { kind: 'requests' })).toBe(0);
    // Without the budget each server would hold 16 × 8 replies of 8 MiB (1 GiB). With it,
    // the budget bounds what is held (the attackers' address share, 40 MiB, plus the honest
    // read); resident memory also carries what the collector has not yet returned (each
    // FILTER reads an 8 MiB entry and encodes an 8 MiB reply), allowed 64 MiB here.
    for (let i = 0; i < peak.length; i++) {
      const grew = peak[i]! - baseline[i]!;
      expect(grew, `server ${i + 1} grew by ${(grew / MiB).toFixed(0)} MiB`).toBeLessThan(BUDGET + 64 * MiB);
    }
    expect(honestMs).toBeLessThan(20_000);
  }, 240_000);

  it(`a connection flood from one address gets HTTP 429 past ${PER_ADDRESS} connections; another address still connects`, async () => {
    const url = cluster.urls[1]!;
    const before = metricValue(await cluster.metrics(2), 'powerstore_connections_rejected_total', { reason: 'address_full' });
    const open: WebSocket[] = [];
    let refusal: string | undefined;
    for (let i = 0; i < PER_ADDRESS + 3 && refusal === undefined; i++) {
      try {
        open.push(await openWs(url));
      } catch (err) {
        refusal = (err as Error).message;
      }
    }
    expect(refusal).toBe('HTTP 429');
    expect(open.length).toBe(PER_ADDRESS);
    expect(metricValue(await cluster.metrics(2), 'powerstore_connections_rejected_total', { reason: 'address_full' })).toBe(before + 1);
    // The control: another address connects and is answered, and the store still works.
    const other = await openWs(url, '127.0.0.1');
    expect(await request(other, { type: 'CLOCK', key: 'flood', opId: 1 })).toMatchObject({ type: 'CLOCK_ACK' });
    other.close();
    await store.put(`${store.namespace}flood`, new Uint8Array([1]));
    for (const ws of open) ws.close();
    await sleep(300);
    // Slots are given back on close.
    (await openWs(url)).close();
  }, 60_000);

  it(`a frame that does not arrive whole within ${FRAME_TIMEOUT_MS} ms closes the connection; a slow frame that does is answered`, async () => {
    const before = await metricSum('powerstore_connections_closed_total', { reason: 'frame_timeout' });
    const { hostname, port } = new URL(cluster.urls[2]!);
    const frame = encodeMessage({ type: 'CLOCK', key: 'slow', opId: 9 });
    // The control: the same frame in three pieces, 300 ms apart, is answered.
    const good = await rawWebSocket(hostname, Number(port), ATTACKER);
    const packet = maskedFrame(frame);
    const answered = new Promise<boolean>((resolve) => {
      good.once('data', () => resolve(true));
      good.once('close', () => resolve(false));
    });
    for (const piece of [packet.subarray(0, 3), packet.subarray(3, 9), packet.subarray(9)]) {
      good.write(piece);
      await sleep(300);
    }
    expect(await answered).toBe(true);
    good.destroy();
    // Slowloris: a header announcing 1 MiB, then a trickle that never completes it.
    const bad = await rawWebSocket(hostname, Number(port), ATTACKER);
    const start = Date.now();
    const gone = new Promise<number>((resolve) => bad.once('close', () => resolve(Date.now() - start)));
    bad.write(largeFrameHeader(MiB));
    const trickle = setInterval(() => bad.writable && bad.write(Buffer.alloc(16)), 200);
    const elapsed = await Promise.race([gone, sleep(FRAME_TIMEOUT_MS * 4).then(() => -1)]);
    clearInterval(trickle);
    expect(elapsed).toBeGreaterThanOrEqual(FRAME_TIMEOUT_MS - 100);
    expect(elapsed).toBeLessThan(FRAME_TIMEOUT_MS * 2);
    expect((await metricSum('powerstore_connections_closed_total', { reason: 'frame_timeout' })) - before).toBe(1);
    expect(await metricSum('powerstore_buffered_bytes', { kind: 'partial' })).toBe(0);
  }, 30_000);

  it(`a connection that sends nothing for ${IDLE_TIMEOUT_MS} ms is closed (1000 idle); one that keeps sending stays open`, async () => {
    const url = cluster.urls[3]!;
    const idle = await openWs(url);
    const busy = await openWs(url);
    const idleClosed = closed(idle);
    const opened = Date.now();
    let busyClosed = false;
    busy.once('close', () => (busyClosed = true));
    busy.on('message', () => undefined);
    for (let i = 0; Date.now() - opened < IDLE_TIMEOUT_MS * 1.6; i++) {
      busy.send(encodeMessage({ type: 'CLOCK', key: 'busy', opId: i + 1 }));
      await sleep(500);
    }
    const c = await Promise.race([idleClosed, sleep(IDLE_TIMEOUT_MS * 2).then(() => undefined)]);
    expect(c).toMatchObject({ code: 1000, reason: 'idle' });
    expect(c!.at - opened).toBeGreaterThanOrEqual(IDLE_TIMEOUT_MS - 100);
    expect(busyClosed).toBe(false);
    busy.close();
    expect(metricValue(await cluster.metrics(4), 'powerstore_connections_closed_total', { reason: 'idle' })).toBeGreaterThanOrEqual(1);
    // The honest store's own connections may have idled out meanwhile: it reconnects.
    await store.put(`${store.namespace}after-idle`, new Uint8Array([2]));
  }, 30_000);
});

/** A client-to-server binary frame (clients must mask), for payloads under 64 KiB. */
function maskedFrame(payload: Uint8Array): Buffer {
  const mask = randomBytes(4);
  const header =
    payload.length < 126
      ? Buffer.from([0x82, 0x80 | payload.length])
      : Buffer.from([0x82, 0x80 | 126, payload.length >> 8, payload.length & 0xff]);
  const body = Buffer.from(payload.map((b, i) => b ^ mask[i % 4]!));
  return Buffer.concat([header, mask, body]);
}
