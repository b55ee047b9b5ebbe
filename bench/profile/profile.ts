/**
 * Where an operation's milliseconds go, after the paper's resource profile (Figure 7):
 * one client runs operations one at a time (so stages do not overlap with other
 * clients' work), t = 1, fsync on, and every stage is timed with performance.now().
 *
 * Client side, PowerStore: a bench-only driver of the protocol's WriteOperation /
 * ReadOperation (the same state machines @powerstore/client drives, without its
 * reconnection and progress bookkeeping) with a timed crypto provider and codec:
 *   erasure (encode/decode), hash (SHA-256: fragments, nonce, cross-checksum), sign and
 *   verify (Ed25519: certificates, receipts), protocol (the state machines' own logic), framing (wire
 *   encode/decode), send (ws.send: copying frames to the sockets), wait (the rest of the
 *   wall time: network, servers, event loop).
 * Client side, M-ABD and single: framing, send and wait of bench/baselines/client.ts.
 * Server side: PowerStore runs bench/profile/ps-server.ts (an instrumented host of the
 * same Server + LevelStorage); the baseline servers keep the same stopwatches always.
 * Server figures are per operation per server (all servers' sums / (ops × servers)).
 * `cpu` is each server process's CPU time (user + system, every thread: LevelDB's compaction
 * and fsyncs too), which the stopwatches cannot see. `PS_CPU_PROF=DIR` writes V8 CPU
 * profiles of the PowerStore servers into DIR (for `--cpu-prof` analysis).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { createCodec } from '@powerstore/erasure';
import {
  ReadOperation,
  WriteOperation,
  clusterConfig,
  decodeMessage,
  encodeMessage,
  CertificateVerifier,
  identityFromJson,
  WriterSession,
  type ClientOperation,
  type Message,
  type Outgoing,
  type Reply,
  type Step,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { DEFAULT_MAX_FRAME_BYTES, initCluster, loadClusterFile } from 'powerstore-server';
import { AbdClient, SingleClient, baselineServerStats, type KvClient } from '../baselines/client.js';
import { ROOT, TSX_EXEC_ARGV, placePowerStore, startBaseline, track, type SystemName } from '../lib/clusters.js';
import { createNetwork, type Network } from '../lib/netns.js';
import { round } from '../lib/stats.js';
import { timedCodec, timedCrypto, type Clock } from './timed.js';
import { measureMasking, type MaskResult } from './ws-mask.js';

export interface ProfileRow {
  readonly system: SystemName;
  readonly op: 'read' | 'write';
  readonly totalMs: number;
  readonly stages: Record<string, number>;
  /**
   * Server rows: CPU time (user + system, all threads of the process, LevelDB's
   * background work included) per operation per server, over the measured operations.
   */
  readonly cpuMs?: number;
}

export interface ProfileResult {
  readonly method: string;
  readonly t: number;
  readonly valueBytes: number;
  readonly ops: number;
  readonly client: ProfileRow[];
  readonly server: ProfileRow[];
  /** The --net profile the servers and the client ran on (the client is the bench process, host `bench`). */
  readonly net: string;
  /** ws client→server masking cost per 256 KiB frame (see ws-mask.ts); always measured on loopback: it is CPU. */
  readonly wsMask: MaskResult;
}

export interface ProfileOptions {
  readonly t: number;
  readonly valueBytes: number;
  readonly ops: number;
  readonly log: (line: string) => void;
  /** Where the servers run (default loopback); the client runs in this process, on the network's `self` host. */
  readonly net?: Network;
}

const METHOD =
  'One client, one operation at a time, after 3 unmeasured warm-up operations; mean milliseconds per operation. Client (PowerStore): a bench-only driver of the protocol WriteOperation/ReadOperation with performance.now() around the erasure codec, SHA-256 (hash), Ed25519 (sign, verify), the state machines (protocol), wire encode/decode (framing) and ws.send (send); wait = wall time minus all of those (network + servers + event loop). Server (per server per operation): decode, hash, sign (receipts), verify (certificates, store proofs), storageRead (LevelDB gets), storageLockAndCommit / storageCommit (group commit + fsync), encode, other (the rest of request handling), and cpu (CPU time of the server process, user + system over all its threads, per operation); PowerStore servers are bench/profile/ps-server.ts, the same Server + LevelStorage as powerstore-server with stopwatches.';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function mean(clock: Clock, ops: number, divisor = 1): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(clock)) out[k] = round(v / ops / divisor, 3);
  return out;
}

function diff(after: Record<string, number>, before: Record<string, number>): Clock {
  const out: Clock = {};
  for (const k of Object.keys(after)) out[k] = (after[k] ?? 0) - (before[k] ?? 0);
  return out;
}

// ---- PowerStore ---------------------------------------------------------------------

class PsDriver {
  readonly #sockets: WebSocket[] = [];
  readonly #queue: { from: number; reply: Reply }[] = [];
  #wake: (() => void) | undefined;
  #opId = 0;

  constructor(
    readonly clock: Clock,
    private readonly n: number,
  ) {}

  async open(urls: readonly string[]): Promise<void> {
    await Promise.all(
      urls.map(
        (url, i) =>
          new Promise<void>((resolve, reject) => {
            const ws = new WebSocket(url, { maxPayload: DEFAULT_MAX_FRAME_BYTES, perMessageDeflate: false });
            ws.binaryType = 'nodebuffer';
            ws.once('open', () => resolve());
            ws.once('error', reject);
            ws.on('message', (data: Buffer, isBinary: boolean) => {
              if (!isBinary) return;
              const t0 = performance.now();
              const m = decodeMessage(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), {
                n: this.n,
                maxFragmentLength: DEFAULT_MAX_FRAME_BYTES,
              });
              this.clock['framing'] = (this.clock['framing'] ?? 0) + performance.now() - t0;
              if (m.opId !== this.#opId) return; // a slow server's answer to a finished operation
              this.#queue.push({ from: i, reply: m as Reply });
              this.#wake?.();
            });
            this.#sockets[i] = ws;
          }),
      ),
    );
  }

  nextOpId(): number {
    return ++this.#opId;
  }

  async run<R>(op: ClientOperation<R>): Promise<R> {
    const c = this.clock;
    let proto = 0;
    const timed = async (f: () => Promise<Step<R>>) => {
      const t0 = performance.now();
      const s = await f();
      proto += performance.now() - t0;
      return s;
    };
    this.#queue.length = 0;
    let step = await timed(() => op.start());
    for (;;) {
      if (step.result !== undefined) break;
      if (step.send) this.#send(step.send);
      while (this.#queue.length === 0) await new Promise<void>((r) => (this.#wake = r));
      const { from, reply } = this.#queue.shift()!;
      step = await timed(() => op.onReply(from, reply));
    }
    c['protocolAll'] = (c['protocolAll'] ?? 0) + proto;
    return step.result;
  }

  #send(send: readonly Outgoing[]): void {
    const t0 = performance.now();
    const encoded = new Map<Message, Uint8Array>();
    const frames: [number, Uint8Array][] = [];
    for (const { to, message } of send) {
      let f = encoded.get(message);
      if (!f) encoded.set(message, (f = encodeMessage(message)));
      frames.push([to, f]);
    }
    const t1 = performance.now();
    for (const [to, f] of frames) this.#sockets[to]!.send(f, { binary: true });
    this.clock['framing'] = (this.clock['framing'] ?? 0) + t1 - t0;
    this.clock['send'] = (this.clock['send'] ?? 0) + performance.now() - t1;
  }

  close(): void {
    for (const ws of this.#sockets) ws.close();
  }
}

function serverCommand(ws: WebSocket, cmd: string): Promise<Record<string, number>> {
  return new Promise((resolve) => {
    ws.once('message', (d: Buffer) => resolve(JSON.parse(d.toString()) as Record<string, number>));
    ws.send(cmd);
  });
}

async function profilePowerStore(o: ProfileOptions, value: Uint8Array): Promise<{ client: ProfileRow[]; server: ProfileRow[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'powerstore-bench-profile-'));
  const config = clusterConfig(o.t);
  const net = o.net ?? createNetwork('loopback');
  const hosts = Array.from({ length: config.n }, (_, i) => net.host(`ps${i + 1}`));
  const base = await net.basePort(config.n);
  // The library's initCluster, from the same sources as the loader and ps-server.ts use.
  const init = await initCluster({ t: o.t, dir, basePort: base });
  if (net.profile.topology !== 'loopback')
    placePowerStore(
      dir,
      hosts.map((h, i) => ({ host: h.address, port: base + i })),
    );
  const cluster = loadClusterFile(init.clusterFile);
  const admin = identityFromJson(JSON.parse(readFileSync(init.adminFile, 'utf8')));
  const children: ChildProcess[] = [];
  const control: WebSocket[] = [];
  try {
    for (let id = 1; id <= config.n; id++) {
      children.push(
        track(
          net.spawn(
            hosts[id - 1]!,
            process.execPath,
            [
              ...TSX_EXEC_ARGV,
              ...(process.env.PS_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.PS_CPU_PROF}`] : []),
              join(ROOT, 'bench/profile/ps-server.ts'),
              '--config',
              join(dir, `server-${id}.json`),
              '--data',
              join(dir, `data-${id}`),
            ],
            { cwd: ROOT, stdio: 'inherit' },
          ),
        ),
      );
    }
    const urls = cluster.servers.map((s) => s.url);
    for (const u of urls) {
      for (let i = 0; ; i++) {
        try {
          if ((await fetch(u.replace(/^ws/, 'http'), { signal: AbortSignal.timeout(1000) })).ok) break;
        } catch {
          if (i > 300) throw new Error(`profile server ${u} did not start`);
          await sleep(100);
        }
      }
    }
    for (const u of urls) {
      const ws = new WebSocket(u);
      await new Promise((r, j) => ws.once('open', r).once('error', j));
      control.push(ws);
    }
    const clock: Clock = {};
    const crypto = timedCrypto(createCryptoProvider(), clock);
    const codec = timedCodec(await createCodec({ k: config.t + 1, n: config.n }), clock);
    const random = (n: number) => globalThis.crypto.getRandomValues(new Uint8Array(n));
    const session = new WriterSession({
      crypto,
      cluster: cluster.identity,
      signer: await crypto.signerFromSeed(admin.seed),
      instance: random(16),
    });
    const verifier = new CertificateVerifier(crypto, cluster.identity);
    const driver = new PsDriver(clock, config.n);
    await driver.open(urls);
    const key = 'profile/powerstore';
    const write = () =>
      driver.run(
        new WriteOperation({ config, session, crypto, codec, random, now: Date.now }, key, { kind: 'value', value }, driver.nextOpId()),
      );
    const read = () => driver.run(new ReadOperation({ config, crypto, codec, verifier }, key, driver.nextOpId()));
    const client: ProfileRow[] = [];
    const server: ProfileRow[] = [];
    for (const [op, f] of [
      ['write', write],
      ['read', read],
    ] as const) {
      for (let i = 0; i < 3; i++) await f();
      for (const k of Object.keys(clock)) delete clock[k];
      await Promise.all(control.map((ws) => serverCommand(ws, 'reset')));
      const t0 = performance.now();
      for (let i = 0; i < o.ops; i++) {
        const r = await f();
        if (op === 'read' && (r as { value?: Uint8Array }).value?.length !== value.length)
          throw new Error('profile read returned the wrong value');
      }
      const total = performance.now() - t0;
      const stats = await Promise.all(control.map((ws) => serverCommand(ws, 'stats')));
      const c = { ...clock };
      const inner = (c['hash'] ?? 0) + (c['sign'] ?? 0) + (c['verify'] ?? 0) + (c['erasure'] ?? 0);
      c['protocol'] = (c['protocolAll'] ?? 0) - inner;
      delete c['protocolAll'];
      c['wait'] = total - Object.values(c).reduce((a, v) => a + v, 0);
      client.push({ system: 'powerstore', op, totalMs: round(total / o.ops, 3), stages: mean(c, o.ops) });
      const sum: Clock = {};
      let cpu = 0;
      for (const s of stats)
        for (const [k, v] of Object.entries(s))
          if (k === 'cpuMs') cpu += v;
          else if (k !== 'requests') sum[k] = (sum[k] ?? 0) + v;
      server.push({
        system: 'powerstore',
        op,
        totalMs: round(Object.values(sum).reduce((a, v) => a + v, 0) / o.ops / config.n, 3),
        stages: mean(sum, o.ops, config.n),
        cpuMs: round(cpu / o.ops / config.n, 3),
      });
    }
    driver.close();
    return { client, server };
  } finally {
    for (const ws of control) ws.close();
    await Promise.all(
      children.map((ch) => new Promise<void>((r) => (ch.exitCode !== null ? r() : (ch.once('exit', () => r()), ch.kill('SIGTERM'))))),
    );
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- baselines ----------------------------------------------------------------------

async function profileBaseline(
  system: 'm-abd' | 'single',
  o: ProfileOptions,
  value: Uint8Array,
): Promise<{ client: ProfileRow[]; server: ProfileRow[] }> {
  const sys = await startBaseline(system, o.t, true, o.net);
  let kv: KvClient | undefined;
  try {
    kv = system === 'm-abd' ? await AbdClient.connect(sys.urls) : await SingleClient.connect(sys.urls[0]!);
    const c = kv;
    const key = `profile/${system}`;
    const client: ProfileRow[] = [];
    const server: ProfileRow[] = [];
    for (const op of ['write', 'read'] as const) {
      const f = op === 'write' ? () => c.put(key, value) : () => c.get(key);
      for (let i = 0; i < 3; i++) await f();
      const before = await Promise.all(sys.urls.map((u) => baselineServerStats(u)));
      const timings = { framing: 0, send: 0 };
      c.timings = timings;
      const t0 = performance.now();
      for (let i = 0; i < o.ops; i++) await f();
      const total = performance.now() - t0;
      c.timings = undefined;
      const after = await Promise.all(sys.urls.map((u) => baselineServerStats(u)));
      const cl: Clock = { framing: timings.framing, send: timings.send, wait: total - timings.framing - timings.send };
      client.push({ system, op, totalMs: round(total / o.ops, 3), stages: mean(cl, o.ops) });
      const sum: Clock = {};
      after.forEach((a, i) => {
        const d = diff(a, before[i]!);
        for (const [k, v] of Object.entries(d)) sum[k] = (sum[k] ?? 0) + v;
      });
      // The STATS request itself is one of the counted requests: negligible.
      const handle = sum['handle'] ?? 0;
      const cpu = sum['cpuMs'] ?? 0;
      delete sum['handle'];
      delete sum['requests'];
      delete sum['cpuMs'];
      sum['other'] = handle - Object.values(sum).reduce((a, v) => a + v, 0);
      server.push({
        system,
        op,
        totalMs: round(handle / o.ops / sys.urls.length, 3),
        stages: mean(sum, o.ops, sys.urls.length),
        cpuMs: round(cpu / o.ops / sys.urls.length, 3),
      });
    }
    return { client, server };
  } finally {
    kv?.close();
    await sys.stop();
  }
}

export async function runProfile(o: ProfileOptions): Promise<ProfileResult> {
  const value = new Uint8Array(o.valueBytes);
  for (let off = 0; off < value.length; off += 65536)
    globalThis.crypto.getRandomValues(value.subarray(off, Math.min(value.length, off + 65536)));
  const ps = await profilePowerStore(o, value);
  const abd = await profileBaseline('m-abd', o, value);
  const single = await profileBaseline('single', o, value);
  const wsMask = await measureMasking();
  const result: ProfileResult = {
    method: METHOD,
    t: o.t,
    valueBytes: o.valueBytes,
    ops: o.ops,
    client: [...ps.client, ...abd.client, ...single.client],
    server: [...ps.server, ...abd.server, ...single.server],
    net: o.net?.profile.name ?? 'loopback',
    wsMask,
  };
  for (const r of result.client)
    o.log(
      `client ${r.system.padEnd(10)} ${r.op.padEnd(5)} ${r.totalMs.toFixed(2)} ms: ${Object.entries(r.stages)
        .map(([k, v]) => `${k} ${v.toFixed(2)}`)
        .join(', ')}`,
    );
  for (const r of result.server)
    o.log(
      `server ${r.system.padEnd(10)} ${r.op.padEnd(5)} ${r.totalMs.toFixed(2)} ms (cpu ${r.cpuMs?.toFixed(2) ?? '?'} ms): ${Object.entries(
        r.stages,
      )
        .map(([k, v]) => `${k} ${v.toFixed(2)}`)
        .join(', ')}`,
    );
  o.log(
    `ws send of a 256 KiB client frame: random mask ${wsMask.randomMask.sendMs} ms in send(), ${wsMask.randomMask.totalMs} ms per frame delivered; zero mask ${wsMask.zeroMask.sendMs} / ${wsMask.zeroMask.totalMs} ms (bufferutil ${wsMask.bufferutil ? 'installed' : 'not installed'})`,
  );
  return result;
}
