/**
 * Crash-restart cycles under load: kill -9 one server while writers and a reader run,
 * check that the cluster kept serving, that the killed server's LevelDB holds everything
 * it acknowledged, restart it on the same directory, and check that every acknowledged
 * write is still readable. Shared by the CI test (3 cycles) and `pnpm soak:server`.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { compareTimestamps, timestampKey, type Timestamp } from '@powerstore/protocol';
import { LevelStorage } from '../../packages/server/src/index.js';
import { OperationTimeout, TestClient } from './driver.js';
import { CliCluster } from './harness.js';

/** What a run did. */
export interface CrashReport {
  readonly cycles: number;
  readonly ackedWrites: number;
  readonly writesWhileDown: number;
  /** Segments of the value log holding live records, summed over the checks after each kill. */
  readonly valueLogSegments: number;
  readonly timedOutWrites: number;
  readonly reads: number;
  /** Acknowledgements of killed servers checked against their LevelDB after the kill. */
  readonly durableAcksChecked: number;
  readonly seconds: number;
}

/** Thrown with a message naming the cycle and what was lost. */
export class DurabilityViolation extends Error {
  readonly code = 'DURABILITY_VIOLATION';
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const hex = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

/** Runs `cycles` kill/restart cycles on a fresh 4-server cluster. */
export async function runCrashCycles(options: {
  cycles: number;
  writers?: number;
  keysPerWriter?: number;
  /** Flags every server starts with. */
  serverArgs?: readonly string[];
  log?: (line: string) => void;
}): Promise<CrashReport> {
  const started = performance.now();
  const log = options.log ?? (() => undefined);
  const writerCount = options.writers ?? 3;
  const keysPerWriter = options.keysPerWriter ?? 4;
  const cluster = await CliCluster.create(1, [...(options.serverArgs ?? [])]);
  const clients: TestClient[] = [];
  try {
    await cluster.startAll();
    const n = cluster.config.n;
    // Per server: every (key, ts) it acknowledged a STORE for, and its highest COMPLETE per key.
    const storeAcks = Array.from({ length: n }, () => new Map<string, { key: string; ts: Timestamp }>());
    const completeAcks = Array.from({ length: n }, () => new Map<string, Timestamp>());
    const record = (from: number, reply: { type: string; key: string; ts?: Timestamp }) => {
      if (reply.type === 'STORE_ACK') storeAcks[from]!.set(`${reply.key}/${timestampKey(reply.ts!)}`, { key: reply.key, ts: reply.ts! });
      if (reply.type === 'COMPLETE_ACK') {
        const prev = completeAcks[from]!.get(reply.key);
        if (!prev || compareTimestamps(reply.ts!, prev) > 0) completeAcks[from]!.set(reply.key, reply.ts!);
      }
    };
    for (let w = 0; w < writerCount; w++) {
      const c = await TestClient.open(cluster, cluster.admin);
      c.cluster.onReply = record;
      clients.push(c);
    }
    const reader = await TestClient.open(cluster);
    clients.push(reader);

    // Each key has one writer, writing sequentially: the last acknowledged value is what a
    // read must return, unless a later write is still unresolved (timed out).
    const lastAcked = new Map<string, Uint8Array>();
    const unresolved = new Map<string, Set<string>>();
    const everWritten = new Map<string, Set<string>>();
    let acked = 0;
    let timedOut = 0;
    let reads = 0;
    let durableChecked = 0;
    let stop = false;
    let failure: Error | undefined;

    const writerLoop = async (c: TestClient, w: number) => {
      for (let i = 0; !stop && i < 1_000_000; i++) {
        const key = `w${w}-k${i % keysPerWriter}`;
        const value = new Uint8Array(randomBytes(1 + ((i * 7919) % 20_000)));
        const id = hex(value);
        if (!everWritten.has(key)) everWritten.set(key, new Set());
        everWritten.get(key)!.add(id);
        try {
          await c.write(key, { kind: 'value', value }, 8000);
          lastAcked.set(key, value);
          unresolved.delete(key);
          acked++;
        } catch (err) {
          if (!(err instanceof OperationTimeout)) throw err;
          timedOut++;
          if (!unresolved.has(key)) unresolved.set(key, new Set());
          unresolved.get(key)!.add(id);
        }
      }
    };
    const readerLoop = async () => {
      for (let i = 0; !stop && i < 1_000_000; i++) {
        const key = `w${i % writerCount}-k${i % keysPerWriter}`;
        const r = await reader.read(key, 8000);
        reads++;
        if (r.value !== undefined && !everWritten.get(key)?.has(hex(r.value))) {
          throw new DurabilityViolation(`read of ${key} returned a value nobody wrote`);
        }
      }
    };
    const load = Promise.all([...clients.slice(0, writerCount).map((c, w) => writerLoop(c, w)), readerLoop()]).catch((err: unknown) => {
      failure = err instanceof Error ? err : new Error(String(err));
      stop = true;
    });

    let writesWhileDown = 0;
    /** Segments of the value log holding live records, summed over the checks. */
    let valueLogSegments = 0;
    for (let cycle = 1; cycle <= options.cycles && !failure; cycle++) {
      const victim = ((cycle - 1) % n) + 1;
      await sleep(300);
      await cluster.signal(victim, 'SIGKILL');
      const ackedAtKill = acked;
      // Down for at least 500 ms, and until a write has completed without it (bounded, so a
      // loaded CI machine gets time but a cluster that stopped serving still fails).
      const downSince = Date.now();
      while (!failure && Date.now() - downSince < 10_000 && (Date.now() - downSince < 500 || acked === ackedAtKill)) await sleep(25);
      const during = acked - ackedAtKill;
      writesWhileDown += during;
      if (during === 0 && !failure) throw new DurabilityViolation(`cycle ${cycle}: no write completed while server ${victim} was down`);

      // The dead server's own database must hold everything it acknowledged, or have
      // collected it durably (history below a newer completed write is garbage).
      const storage = await LevelStorage.open({ path: join(cluster.dir, `data-${victim}`), n });
      try {
        for (const { key, ts } of storeAcks[victim - 1]!.values()) {
          const { entry, collected } = await storage.withKey(key, async (r) => ({
            entry: await r.getEntry(ts),
            collected: await r.getCollected(),
          }));
          if (!entry && !(collected && compareTimestamps(ts, collected) <= 0)) {
            throw new DurabilityViolation(`cycle ${cycle}: server ${victim} acknowledged STORE ${key}@${timestampKey(ts)} but lost it`);
          }
          durableChecked++;
        }
        for (const [key, ts] of completeAcks[victim - 1]!) {
          const lc = await storage.withKey(key, (r) => r.getLc());
          if (!lc || compareTimestamps(lc.ts, ts) < 0) {
            throw new DurabilityViolation(
              `cycle ${cycle}: server ${victim} acknowledged COMPLETE ${key}@${timestampKey(ts)} but has lc ${lc ? timestampKey(lc.ts) : 'c0'}`,
            );
          }
          durableChecked++;
        }
        // Totals are persisted with the writes, never recounted at open: after kill -9 they
        // must still equal what the key records add up to.
        const counted = await storage.recount();
        const kept = { keys: storage.keyCount, entries: storage.historyEntryCount, owners: new Map(storage.owners()) };
        if (
          JSON.stringify([counted.keys, counted.entries, [...counted.owners].sort()]) !==
          JSON.stringify([kept.keys, kept.entries, [...kept.owners].sort()])
        ) {
          throw new DurabilityViolation(
            `cycle ${cycle}: server ${victim}'s persisted totals ${JSON.stringify([kept.keys, kept.entries, [...kept.owners]])} differ from its records ${JSON.stringify([counted.keys, counted.entries, [...counted.owners]])}`,
          );
        }
        // The value log's live bytes, kept in the same batches as its pointers, likewise.
        const live = await storage.valueLogLive();
        if (live && JSON.stringify([...live.kept].sort()) !== JSON.stringify([...live.counted].sort())) {
          throw new DurabilityViolation(
            `cycle ${cycle}: server ${victim}'s value-log live bytes ${JSON.stringify([...live.kept])} differ from its pointers ${JSON.stringify([...live.counted])}`,
          );
        }
        if (live) valueLogSegments += live.counted.size;
      } finally {
        await storage.close();
      }
      await cluster.start(victim);
      log(
        `cycle ${cycle}: killed server ${victim}; ${during} writes completed while it was down; ${durableChecked} acks verified on disk so far; restarted`,
      );
    }
    await sleep(300);
    stop = true;
    await load;
    if (failure) throw failure;

    // Every acknowledged write is readable: the last acked value, or a later unresolved one.
    for (const [key, value] of lastAcked) {
      const r = await reader.read(key, 10_000);
      reads++;
      const got = r.value ? hex(r.value) : undefined;
      if (got !== hex(value) && !(got && unresolved.get(key)?.has(got))) {
        throw new DurabilityViolation(`key ${key}: acknowledged value lost (read ${got ? `${got.slice(0, 16)}…` : 'nothing'})`);
      }
    }
    return {
      cycles: options.cycles,
      ackedWrites: acked,
      writesWhileDown,
      timedOutWrites: timedOut,
      reads,
      durableAcksChecked: durableChecked,
      valueLogSegments,
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    for (const c of clients) c.close();
    await cluster.stop();
  }
}
