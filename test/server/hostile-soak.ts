/**
 * The hostile soak: honest clients run a read/write workload against a 4-server cluster
 * (CLI-started processes, default limits) first alone, then while hostile clients of every
 * kind the servers defend against run beside them:
 *
 * - paused readers: sockets that ask for a 16 MiB value's fragment again and again and
 *   never read the replies (from two addresses);
 * - a connection flood: one address opening connections as fast as it is allowed;
 * - slowloris: frames announced as 1 MiB, trickled a few bytes at a time;
 * - idlers: connections that never send anything;
 * - garbage: random and oversized frames.
 *
 * It reports the honest clients' p50/p99 latency and errors in both phases and the servers'
 * peak resident memory. Attackers connect from 127.0.0.2–127.0.0.7, honest clients from
 * 127.0.0.1; every loop stops by itself when its phase ends.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { connect, Identity, type Store } from '@powerstore/client';
import { encodeMessage, type Candidate } from '@powerstore/protocol';
import { CliCluster, collectLc, largeFrameHeader, openWebSocket, rawWebSocket } from './harness.js';

/** How long, and how many honest clients. */
export interface HostileSoakOptions {
  /** Total duration; half without and half with the hostile load. */
  readonly minutes: number;
  readonly honestClients?: number;
  readonly log?: (line: string) => void;
}

/** One phase's honest-client figures. */
export interface PhaseReport {
  readonly operations: number;
  readonly errors: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  /** Errors by message, the first few kinds. */
  readonly errorKinds: Readonly<Record<string, number>>;
}

export interface HostileSoakReport {
  readonly quiet: PhaseReport;
  readonly hostile: PhaseReport;
  /** Peak VmRSS of each server over the whole run, bytes. */
  readonly peakRss: readonly number[];
  /** What the attackers did (connections opened, refused, closed by the servers, frames sent). */
  readonly attacks: Readonly<Record<string, number>>;
  /** Connections the servers closed or refused, by reason, summed over servers. */
  readonly enforced: Readonly<Record<string, number>>;
}

const MiB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runHostileSoak(options: HostileSoakOptions): Promise<HostileSoakReport> {
  const log = options.log ?? (() => undefined);
  const phaseMs = (options.minutes * 60_000) / 2;
  const cluster = await CliCluster.create(1, ['--log-level', 'warn']);
  const peakRss = [0, 0, 0, 0];
  let sampler: ReturnType<typeof setInterval> | undefined;
  const stores: Store[] = [];
  try {
    await cluster.startAll();
    sampler = setInterval(() => {
      for (let id = 1; id <= 4; id++) {
        const pid = cluster.process(id)?.pid;
        if (pid === undefined) continue;
        try {
          const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
          peakRss[id - 1] = Math.max(peakRss[id - 1]!, kb * 1024);
        } catch {
          // the process is gone; its peak stays
        }
      }
    }, 250);
    const admin = await Identity.fromJSON(JSON.parse(readFileSync(`${cluster.dir}/admin.json`, 'utf8')));
    const clusterJson = cluster.clusterJson();
    for (let i = 0; i < (options.honestClients ?? 4); i++)
      stores.push(await connect({ cluster: clusterJson, identity: admin, timeoutMs: 30_000 }));
    const big = `${stores[0]!.namespace}soak/big`;
    await stores[0]!.put(big, new Uint8Array(randomBytes(16 * MiB)));
    const candidate = await collectLc(cluster.urls[0]!, big, cluster.config.n);
    if (!candidate) throw new Error(`no candidate for ${big}`);

    log(`quiet phase: ${stores.length} honest clients for ${(phaseMs / 1000).toFixed(0)} s`);
    const quiet = await honestLoad(stores, phaseMs);
    log(`quiet: ${describe(quiet)}`);

    log(
      `hostile phase: the same clients for ${(phaseMs / 1000).toFixed(0)} s beside paused readers, a connection flood, slowloris, idlers and garbage`,
    );
    const attacks: Record<string, number> = {};
    const count = (k: string, n = 1) => (attacks[k] = (attacks[k] ?? 0) + n);
    const until = Date.now() + phaseMs;
    const attackers = [
      ...cluster.urls.flatMap((url) => [
        pausedReaders(url, '127.0.0.2', big, candidate, until, count),
        pausedReaders(url, '127.0.0.3', big, candidate, until, count),
      ]),
      ...cluster.urls.map((url) => flood(url, '127.0.0.4', until, count)),
      ...cluster.urls.map((url) => slowloris(url, '127.0.0.5', until, count)),
      ...cluster.urls.map((url) => idlers(url, '127.0.0.6', until, count)),
      ...cluster.urls.map((url) => garbage(url, '127.0.0.7', until, count)),
    ];
    const [hostile] = await Promise.all([honestLoad(stores, phaseMs), ...attackers]);
    log(`hostile: ${describe(hostile)}`);
    const enforced: Record<string, number> = {};
    for (let id = 1; id <= 4; id++) {
      const text = await cluster.metrics(id);
      for (const m of text.matchAll(/^powerstore_connections_(closed|rejected)_total\{reason="(\w+)"\} (\S+)/gm)) {
        enforced[`${m[1]}:${m[2]}`] = (enforced[`${m[1]}:${m[2]}`] ?? 0) + Number(m[3]);
      }
    }
    return { quiet, hostile, peakRss, attacks, enforced };
  } finally {
    if (sampler) clearInterval(sampler);
    for (const s of stores) s.close();
    await cluster.stop();
  }
}

/** One line for a phase. */
export function describe(p: PhaseReport): string {
  const kinds = Object.entries(p.errorKinds)
    .map(([k, n]) => `${n}× ${k}`)
    .join('; ');
  return `${p.operations} operations, p50 ${p.p50Ms.toFixed(1)} ms, p99 ${p.p99Ms.toFixed(1)} ms, ${p.errors} errors${kinds ? ` (${kinds})` : ''}`;
}

/** Each store alternates writes and reads of 1–64 KiB values on its own keys until `ms` pass. */
async function honestLoad(stores: readonly Store[], ms: number): Promise<PhaseReport> {
  const until = Date.now() + ms;
  const latencies: number[] = [];
  const errorKinds: Record<string, number> = {};
  let errors = 0;
  await Promise.all(
    stores.map(async (store, s) => {
      for (let i = 0; Date.now() < until; i++) {
        const key = `${store.namespace}soak/${s}/${i % 16}`;
        const value = new Uint8Array(randomBytes(1024 + ((i * 7919) % (63 * 1024))));
        for (const op of [() => store.put(key, value), () => store.get(key)]) {
          const started = performance.now();
          try {
            const r = await op();
            if (r instanceof Uint8Array && Buffer.compare(r, value) !== 0) throw new Error('read returned other bytes than the last write');
            latencies.push(performance.now() - started);
          } catch (err) {
            errors++;
            const kind = ((err as { code?: string }).code ?? '') + ' ' + (err as Error).message.slice(0, 80);
            errorKinds[kind] = (errorKinds[kind] ?? 0) + 1;
          }
        }
      }
    }),
  );
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? Number.NaN;
  return { operations: latencies.length + errors, errors, p50Ms: at(0.5), p99Ms: at(0.99), errorKinds };
}

const open = openWebSocket;

const closedOrDeadline = (ws: WebSocket, until: number) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, Math.max(0, until - Date.now()));
    ws.once('close', () => {
      clearTimeout(timer);
      resolve();
    });
  });

type Count = (kind: string, n?: number) => void;

/** 8 sockets that ask for the big fragment 8 times each and never read; reopened when closed. */
async function pausedReaders(url: string, address: string, key: string, candidate: Candidate, until: number, count: Count): Promise<void> {
  const frame = encodeMessage({ type: 'FILTER', key, opId: 1, stripe: 0, fragment: true, candidates: [candidate] });
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (Date.now() < until) {
        let ws: WebSocket;
        try {
          ws = await open(url, address);
        } catch {
          count('paused-reader refused');
          await sleep(500);
          continue;
        }
        count('paused-reader connections');
        ws.pause();
        for (let i = 0; i < 8; i++) ws.send(frame);
        await closedOrDeadline(ws, until);
        ws.terminate();
      }
    }),
  );
}

/** Opens connections as fast as they are accepted and keeps them until the phase ends. */
async function flood(url: string, address: string, until: number, count: Count): Promise<void> {
  const held: WebSocket[] = [];
  while (Date.now() < until) {
    try {
      held.push(await open(url, address));
      count('flood connections');
    } catch {
      count('flood refused');
      await sleep(200);
    }
  }
  for (const ws of held) ws.terminate();
}

/** Sockets announcing a 1 MiB frame and trickling 16 bytes every 200 ms. */
async function slowloris(url: string, address: string, until: number, count: Count): Promise<void> {
  const { hostname, port } = new URL(url);
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (Date.now() < until) {
        const socket = await rawWebSocket(hostname, Number(port), address).catch(() => undefined);
        if (!socket) {
          count('slowloris refused');
          await sleep(500);
          continue;
        }
        count('slowloris connections');
        socket.write(largeFrameHeader(MiB));
        const trickle = setInterval(() => socket.writable && socket.write(Buffer.alloc(16)), 200);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.max(0, until - Date.now()));
          socket.once('close', () => {
            clearTimeout(timer);
            resolve();
          });
        });
        clearInterval(trickle);
        socket.destroy();
      }
    }),
  );
}

/** 16 connections that send nothing, reopened when the server closes them. */
async function idlers(url: string, address: string, until: number, count: Count): Promise<void> {
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (Date.now() < until) {
        const ws = await open(url, address).catch(() => undefined);
        if (!ws) {
          count('idle refused');
          await sleep(500);
          continue;
        }
        count('idle connections');
        await closedOrDeadline(ws, until);
        ws.terminate();
      }
    }),
  );
}

/** Random frames, frames with a wrong version, and one oversized frame per connection. */
async function garbage(url: string, address: string, until: number, count: Count): Promise<void> {
  while (Date.now() < until) {
    const ws = await open(url, address).catch(() => undefined);
    if (!ws) {
      await sleep(500);
      continue;
    }
    ws.on('message', () => count('garbage answered'));
    for (let i = 0; i < 50 && ws.readyState === ws.OPEN; i++) {
      ws.send(randomBytes(1 + ((i * 37) % 2000)));
      count('garbage frames');
      await sleep(20);
    }
    if (ws.readyState === ws.OPEN) ws.send(Buffer.alloc(40 * MiB));
    await closedOrDeadline(ws, Math.min(until, Date.now() + 5000));
    ws.terminate();
  }
}
