/**
 * One nemesis run: a real PowerStore cluster (3t + 1 `powerstore-server` processes, each
 * in a network namespace of its own on a switched virtual LAN, bench/lib/netns.ts and
 * bench/lib/clusters.ts), client processes on hosts of their own (worker.ts) recording
 * every operation, and a seeded schedule of faults (schedule.ts): partitions, pauses,
 * kill -9 and restarts. At the end everything heals, every server must answer /healthz,
 * every client reads every key once more, and the history is checked (history.ts, and
 * Porcupine). The run's directory (cluster files, data, server and client logs, the
 * nemesis log, and for a failing run the history as JSON) is deleted when the run passes
 * and kept when it fails.
 */
import type { ChildProcess } from 'node:child_process';
import { appendFileSync, closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPowerStore, ROOT, track, TSX_EXEC_ARGV, type PowerStoreCluster } from '../../bench/lib/clusters.js';
import { createNetwork, netUnavailable, type NetHost, type Network } from '../../bench/lib/netns.js';
import { FIU_RUN, FSYNC_EIO, failDisk, fiuMissing, healDisk } from '../fiu.js';
import { goAvailable, runPorcupine, writeHistory } from '../porcupine/porcupine.js';
import { Prng } from '../sim/prng.js';
import { checkHistory, type NemesisOp, type OpKind } from './history.js';
import {
  describeFault,
  drawBootPowerLoss,
  drawSchedule,
  faultyServer,
  LAZYFS_KINDS,
  type Fault,
  type FaultKind,
  type PlannedFault,
} from './schedule.js';
import { LazyFs, lazyfsUnavailable } from './lazyfs.js';
import { nemesisKey, type ParentMessage, type WorkerConfig, type WorkerMessage } from './messages.js';
import { compareTimestamps, toHex, type Candidate } from '@powerstore/protocol';
import { collectLc, holdsEveryStripe, type ServerRef } from '../server/harness.js';

/** Options of {@link runNemesis}. */
export interface NemesisOptions {
  readonly seed: number;
  /** Fault threshold: 3t + 1 servers, at most t faulty at once. Default 1. */
  readonly t?: number;
  /** How long the faults go on, in milliseconds (set-up, healing and checks come on top). */
  readonly durationMs: number;
  /** Client processes. Default 3. */
  readonly clients?: number;
  /** Keys the clients share. Default 3. */
  readonly keys?: number;
  /** Every operation's timeout (a streamed one's: each round's). Default 20 s. */
  readonly opTimeoutMs?: number;
  /** Fault kinds the schedule draws from. Default all. */
  readonly kinds?: readonly FaultKind[];
  /** Share of writes made with putStream (2–3 stripes of 64 KiB). Default 0.1. */
  readonly streamShare?: number;
  /** Keep the run's directory even when it passes. */
  readonly keep?: boolean;
  /** Progress lines (also written to the run's nemesis.log). */
  readonly log?: (line: string) => void;
  /**
   * For the nemesis's own test, a run that must fail: broken servers, which acknowledge
   * writes before they are synced (`--unsafe-no-fsync`), so that a blackout (`kinds`
   * holding `blackout`) loses acknowledged writes.
   */
  readonly sabotage?: 'unsynced-acks';
}

/** One fault as it happened. */
export interface FaultRecord {
  readonly planned: PlannedFault;
  readonly description: string;
  /** Milliseconds since the run began; absent when the fault was skipped. */
  startedAt?: number;
  endedAt?: number;
  /** Why it did not happen: the run ended before its server was free. */
  skipped?: string;
  /** Operations that returned `ok` while it lasted. */
  opsOk?: number;
}

/** What a run found. */
export interface NemesisReport {
  readonly ok: boolean;
  readonly seed: number;
  readonly t: number;
  readonly violations: readonly string[];
  readonly faults: readonly FaultRecord[];
  readonly operations: number;
  /** Operations per kind and outcome (`put ok`, `get QUORUM_UNREACHABLE`, …). */
  readonly outcomes: Readonly<Record<string, number>>;
  /** Operations that met each known PowerStore issue (history.ts, KNOWN_ISSUES), by name. */
  readonly known: Readonly<Record<string, number>>;
  /** Power losses the run made (a `power` fault with `again` makes two, and one comes right after the first start). */
  readonly powerLosses: number;
  /** Porcupine's verdict, or why it was not asked. */
  readonly porcupine: string;
  /** Latency of the operations that returned `ok`, in milliseconds. */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly seconds: number;
  /** The run's directory, when kept (a failing run, or `keep`). */
  readonly dir?: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** The servers' `--heal-interval-ms`: a server that missed a COMPLETE without restarting catches up within it. */
const HEAL_INTERVAL_MS = 5000;
/** How long after the final reads every server has to hold every key's latest write. */
const CONVERGE_MS = 60_000;

/** Time a client or server gets, beyond its own timeouts, before the nemesis calls it stuck. */
const GRACE_MS = 10_000;

/**
 * How long an operation may take before it counts as hung: its timeout, or for
 * operations that may take several rounds each under their own timeout (a streamed
 * write, a read of a striped value: up to 3 stripes, plus the rounds around them) five
 * times that, plus {@link GRACE_MS}.
 */
export function hangLimitMs(kind: OpKind, opTimeoutMs: number): number {
  return (kind === 'put' || kind === 'delete' ? opTimeoutMs : 5 * opTimeoutMs) + GRACE_MS;
}

/** Runs the nemesis; see the module comment. Throws only when it cannot start (no namespaces). */
export async function runNemesis(options: NemesisOptions): Promise<NemesisReport> {
  const why = netUnavailable();
  if (why) throw new Error(`the nemesis needs network namespaces: ${why}`);
  const t = options.t ?? 1;
  const clientCount = options.clients ?? 3;
  const keys = Array.from({ length: options.keys ?? 3 }, (_, i) => `k${i}`);
  const opTimeoutMs = options.opTimeoutMs ?? 20_000;
  const origin = process.hrtime.bigint();
  const clock = () => Number(process.hrtime.bigint() - origin) / 1e6;
  const dir = mkdtempSync(join(tmpdir(), 'powerstore-nemesis-'));
  const log = (line: string) => {
    appendFileSync(join(dir, 'nemesis.log'), `${(clock() / 1000).toFixed(3).padStart(8)} ${line}\n`);
    options.log?.(line);
  };
  const plan = drawSchedule({ seed: options.seed, t, clients: clientCount, durationMs: options.durationMs, kinds: options.kinds });
  const records: FaultRecord[] = plan.map((p) => ({ planned: p, description: describeFault(p.fault) }));
  const violations: string[] = [];
  const history: NemesisOp[] = [];
  let porcupine = 'not run';
  log(`seed ${options.seed}, t = ${t}: ${plan.length} faults over ${(options.durationMs / 1000).toFixed(0)} s; logs in ${dir}`);

  let net: Network | undefined;
  let cluster: PowerStoreCluster | undefined;
  // Power losses: every data directory on lazyfs (<dir>/data-<i> over <dir>/disk-<i>).
  const power = (options.kinds ?? []).some((k) => LAZYFS_KINDS.includes(k));
  const disks = new Map<number, LazyFs>();
  let powerLosses = 0;
  const clients: Client[] = [];
  const expectedExit = new Set<number>();
  let namespace = '';
  try {
    net = createNetwork('lan', { prefix: 'psn' });
    // Disk faults are injected through libfiu: every server runs under fiu-run (test/fiu.ts).
    const diskFaults = plan.some((p) => p.fault.kind === 'disk');
    const noFiu = diskFaults ? fiuMissing() : undefined;
    if (noFiu) throw new Error(`disk faults need libfiu: ${noFiu}`);
    cluster = await createPowerStore(t, net, {
      fsync: options.sabotage !== 'unsynced-acks',
      logLevel: 'info',
      dir,
      // Catch-up passes every few seconds, not every 10 minutes: after healing, every
      // server must come to hold every key's latest write within the run.
      args: ['--heal-interval-ms', String(HEAL_INTERVAL_MS)],
      ...(diskFaults ? { wrap: FIU_RUN } : {}),
    });
    const c = cluster;
    const ids = c.hosts.map((_, i) => i + 1);
    if (power) {
      const why = lazyfsUnavailable();
      if (why) throw new Error(`power losses need lazyfs: ${why}`);
      for (let id = 1; id <= c.n; id++)
        disks.set(id, await LazyFs.mount(join(dir, `disk-${id}`), join(dir, `data-${id}`), { log: join(dir, `lazyfs-${id}.log`) }));
    }
    /** Kill -9, the plug pulled, lazyfs mounted again: the server is down, its disk as after a power loss. */
    const pullPlug = async (id: number) => {
      expectedExit.add(id);
      await c.signal(id, 'SIGKILL');
      const fs = disks.get(id)!;
      const dropped = await fs.crash();
      disks.set(id, await LazyFs.mount(fs.backing, fs.mountpoint, { control: fs.control, log: join(dir, `lazyfs-${id}.log`) }));
      powerLosses++;
      log(
        `power loss s${id}: ${dropped.pendingBytes} bytes unsynced in ${dropped.pendingFiles} files, ${dropped.uncommittedNames} directory entries dropped`,
      );
    };
    const start = async (id: number) => {
      await c.start(id);
      // A server that dies without the nemesis killing it is a finding.
      c.process(id)?.once('exit', (code, signal) => {
        if (!expectedExit.has(id)) violations.push(`server s${id} exited by itself (${signal ?? `code ${code}`}): see server-${id}.log`);
      });
    };
    await Promise.all(cluster.hosts.map((_, i) => start(i + 1)));
    log(`${cluster.n} servers up: ${cluster.urls.join(' ')}`);
    if (power) {
      // Moments after a first start: LevelDB has just created its database.
      const boot = drawBootPowerLoss(options.seed, t);
      await sleep(boot.delayMs);
      await pullPlug(boot.server);
      await start(boot.server).catch((e: unknown) => {
        throw new Error(`s${boot.server} does not start after a power loss: ${(e as Error).message}`);
      });
      expectedExit.delete(boot.server);
    }

    // ---- clients -----------------------------------------------------------------------
    const open = new Map<string, NemesisOp>();
    const toMs = (ns: string) => Number(BigInt(ns) - origin) / 1e6;
    for (let i = 1; i <= clientCount; i++) {
      const client = new Client(`c${i}`, net.host(`c${i}`), dir, net);
      client.onMessage = (m) => {
        if (m.type === 'invoke') {
          const op: NemesisOp = {
            client: client.name,
            seq: m.seq,
            kind: m.kind,
            key: m.key,
            call: toMs(m.at),
            ...(m.written !== undefined ? { written: m.written } : {}),
            ...(m.bytes !== undefined ? { bytes: m.bytes } : {}),
            ...(m.final ? { final: true } : {}),
          };
          history.push(op);
          open.set(`${client.name}#${m.seq}`, op);
        } else if (m.type === 'complete') {
          const op = open.get(`${client.name}#${m.seq}`);
          if (!op) return;
          open.delete(`${client.name}#${m.seq}`);
          op.ret = toMs(m.at);
          op.outcome = m.outcome;
          if (m.error !== undefined) op.error = m.error;
          if (m.read !== undefined) op.read = m.read;
          if (m.intact !== undefined) op.intact = m.intact;
          if (m.listed !== undefined) op.listed = m.listed;
          if (m.cursor !== undefined) op.cursor = m.cursor;
          const limit = hangLimitMs(op.kind, opTimeoutMs);
          if (op.ret - op.call > limit)
            violations.push(
              `hung past its timeout: ${op.client}#${op.seq} ${op.kind} ${op.key} took ${((op.ret - op.call) / 1000).toFixed(1)} s (limit ${limit / 1000} s)`,
            );
        } else if (m.type === 'ready') namespace = m.namespace;
        else if (m.type === 'blamed')
          violations.push(`client ${client.name} caught s${m.server}, a correct server, misbehaving: ${m.reason}`);
        else if (m.type === 'failed') violations.push(`client ${client.name} failed: ${m.error}`);
      };
      clients.push(client);
    }
    const identity = cluster.writer.identity;
    clients.forEach((cl, i) => {
      const config: WorkerConfig = {
        type: 'config',
        client: cl.name,
        seed: new Prng(options.seed * 1000 + i + 1).u32(),
        cluster: cluster!.writer.cluster,
        identity,
        keys,
        opTimeoutMs,
        streamShare: options.streamShare ?? 0.1,
      };
      cl.send(config);
    });
    await Promise.all(clients.map((cl) => cl.waitFor('ready', 60_000 + opTimeoutMs)));
    log(`${clientCount} clients connected; faults begin`);

    // Ops that outlive their limit are logged while the run goes on, not only at the end.
    const flagged = new Set<NemesisOp>();
    const watchdog = setInterval(() => {
      for (const op of open.values()) {
        const limit = hangLimitMs(op.kind, opTimeoutMs);
        if (clock() - op.call > limit && !flagged.has(op)) {
          flagged.add(op);
          log(`hung: ${op.client}#${op.seq} ${op.kind} ${op.key} has been running ${((clock() - op.call) / 1000).toFixed(0)} s`);
        }
      }
    }, 1000);

    // ---- faults ------------------------------------------------------------------------
    const partitions = new Partitions(net);
    const serverHost = (s: number) => c.hosts[s - 1]!;
    const clientHost = (i: number) => clients[i - 1]!.host;
    const faulty = new Set<number>();
    const begin = clock();
    const end = begin + options.durationMs;
    const tasks: Promise<void>[] = [];
    const apply = async (f: Fault, id: number): Promise<() => Promise<void>> => {
      switch (f.kind) {
        case 'isolate':
          partitions.set(id, { down: [serverHost(f.server)] });
          return async () => partitions.delete(id);
        case 'clients-cut':
          partitions.set(id, { blocks: f.clients.flatMap((i) => both(serverHost(f.server), clientHost(i))) });
          return async () => partitions.delete(id);
        case 'bridge':
          partitions.set(id, { blocks: f.halves[0].flatMap((a) => f.halves[1].flatMap((b) => both(serverHost(a), serverHost(b)))) });
          return async () => partitions.delete(id);
        case 'pause':
          await c.signal(f.server, 'SIGSTOP');
          return () => c.signal(f.server, 'SIGCONT');
        case 'one-way':
          partitions.set(id, {
            blocks: f.clients.map((i): [NetHost, NetHost] =>
              f.direction === 'to-clients' ? [serverHost(f.server), clientHost(i)] : [clientHost(i), serverHost(f.server)],
            ),
          });
          return async () => partitions.delete(id);
        case 'client-pause': {
          const client = clients[f.client - 1]!;
          client.signal('SIGSTOP');
          return async () => client.signal('SIGCONT');
        }
        case 'kill':
          expectedExit.add(f.server);
          await c.signal(f.server, 'SIGKILL');
          return async () => {
            await start(f.server);
            expectedExit.delete(f.server);
          };
        case 'power':
          await pullPlug(f.server);
          return async () => {
            const restart = (what: string) =>
              start(f.server).catch((e: unknown) => {
                throw new Error(`s${f.server} does not start after ${what}: ${(e as Error).message}`);
              });
            await restart('a power loss');
            if (f.again !== undefined) {
              // Right after the restart, when LevelDB has just switched to a new MANIFEST.
              await sleep(f.again);
              await pullPlug(f.server);
              await restart('a second power loss');
            }
            expectedExit.delete(f.server);
          };
        case 'disk-full': {
          await disks.get(f.server)!.setFull(true);
          return async () => {
            await disks.get(f.server)!.setFull(false);
          };
        }
        case 'blackout': {
          await Promise.all(ids.map((id) => pullPlug(id)));
          return async () => {
            await Promise.all(
              ids.map((id) =>
                start(id).catch((e: unknown) => {
                  throw new Error(`s${id} does not start after a blackout: ${(e as Error).message}`);
                }),
              ),
            );
            for (const id of ids) expectedExit.delete(id);
          };
        }
        case 'disk': {
          // The server exits (74) at its next synced batch: the README's "Failing disks".
          const child = c.process(f.server);
          if (!child?.pid) throw new Error(`s${f.server} is not running`);
          expectedExit.add(f.server);
          let exit: string | undefined;
          child.once('exit', (code, signal) => (exit = signal ?? String(code)));
          failDisk(child.pid, FSYNC_EIO);
          return async () => {
            if (exit === undefined) {
              // No synced write reached it, or it is exiting right now.
              try {
                healDisk(child.pid!, FSYNC_EIO);
              } catch {
                // gone meanwhile
              }
              await sleep(500);
            }
            if (exit !== undefined) {
              if (exit !== '74')
                violations.push(`s${f.server} exited with ${exit} after its fsync failed, not 74: see server-${f.server}.log`);
              else log(`s${f.server} exited (74) after its fsync failed; starting it again`);
              await start(f.server);
            }
            expectedExit.delete(f.server);
          };
        }
      }
    };
    for (const [id, p] of plan.entries()) {
      const record = records[id]!;
      while (clock() < begin + p.at) await sleep(Math.min(100, begin + p.at - clock()));
      const server = faultyServer(p.fault);
      const blackout = p.fault.kind === 'blackout';
      // The plan leaves room for recovery; a slow restart can still eat into it.
      while (((server !== undefined && (faulty.has(server) || faulty.size >= t)) || (blackout && faulty.size > 0)) && clock() < end)
        await sleep(100);
      const durationMs = Math.min(p.durationMs, end - clock());
      if (durationMs < 500) {
        record.skipped = 'the run ended before its server was free';
        continue;
      }
      if (server !== undefined) faulty.add(server);
      if (blackout) for (const id of ids) faulty.add(id);
      record.startedAt = clock();
      log(`fault ${id + 1}/${plan.length}: ${record.description} for ${(durationMs / 1000).toFixed(1)} s`);
      let recover: () => Promise<void>;
      try {
        recover = await apply(p.fault, id);
        // What the nemesis can see from where it stands: a server cut off or stopped no
        // longer answers. Asked once, briefly (well within the shortest such fault), and
        // not waited for, so the schedule keeps its pace.
        if (p.fault.kind === 'isolate' || p.fault.kind === 'pause') {
          const url = c.urls[p.fault.server - 1]!;
          tasks.push(
            answers(url, 800).then((yes) => {
              if (yes) violations.push(`${record.description}: the server still answers /healthz (the fault did not take)`);
            }),
          );
        }
      } catch (e) {
        violations.push(`could not inject ${record.description}: ${(e as Error).message}`);
        if (server !== undefined) faulty.delete(server);
        if (blackout) faulty.clear();
        continue;
      }
      tasks.push(
        (async () => {
          await sleep(durationMs);
          try {
            await recover();
          } catch (e) {
            violations.push(`could not end ${record.description}: ${(e as Error).message}`);
          }
          const endedAt = (record.endedAt = clock());
          if (server !== undefined) faulty.delete(server);
          if (blackout) faulty.clear();
          record.opsOk = history.filter((op) => op.outcome === 'ok' && op.ret! >= record.startedAt! && op.ret! <= endedAt).length;
          log(`healed: ${record.description} (${record.opsOk} operations completed meanwhile)`);
        })(),
      );
    }
    await Promise.all(tasks);
    partitions.clear();

    // ---- healed ------------------------------------------------------------------------
    for (let id = 1; id <= c.n; id++)
      if (!(await healthy(c.urls[id - 1]!, 30_000))) violations.push(`s${id} does not answer /healthz after healing`);
    log('healed: every fault over; the clients go on for 3 s');
    await sleep(3000);
    for (const cl of clients) cl.send({ type: 'stop' });
    const stopLimit = hangLimitMs('putStream', opTimeoutMs);
    await Promise.all(clients.map((cl) => cl.waitFor('stopped', stopLimit)));
    for (const cl of clients) cl.send({ type: 'final' });
    await Promise.all(clients.map((cl) => cl.waitFor('final-done', keys.length * stopLimit)));
    clearInterval(watchdog);
    log(`clients done: ${history.length} operations`);
    // A run that has failed already (a final read failed, or a violation) is not given
    // time to heal: what lags is reported as it is.
    const failed = violations.length > 0 || history.some((op) => op.final && op.outcome !== 'ok');
    const lagging = await converge(
      c,
      keys.map((k) => nemesisKey(namespace, k)),
      failed ? 0 : CONVERGE_MS,
    );
    if (lagging.length === 0) log("every server holds every key's latest write");
    for (const l of lagging) violations.push(`not healed ${CONVERGE_MS / 1000} s after the faults: ${l}`);
  } catch (e) {
    violations.push(`run aborted: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`);
  } finally {
    for (const cl of clients) cl.close();
    for (let id = 1; id <= (cluster?.n ?? 0); id++) expectedExit.add(id);
    await cluster?.stop();
    for (const fs of disks.values()) await fs.stop();
    if (power) log(`power losses: ${powerLosses}`);
    net?.close();
  }

  // ---- checks --------------------------------------------------------------------------
  const verdict = checkHistory(history);
  violations.push(...verdict.violations);
  const linOk = !verdict.violations.some((v) => v.startsWith('not linearizable'));
  if (!goAvailable()) porcupine = 'skipped: no Go toolchain';
  else {
    const pdir = join(dir, 'porcupine');
    mkdirSync(pdir, { recursive: true });
    writeHistory(pdir, 'history', verdict.registers);
    try {
      const v = runPorcupine(pdir).get('history') ?? 'error';
      porcupine = v;
      if ((v === 'ok' && !linOk) || (v === 'illegal' && linOk))
        violations.push(`Porcupine says ${v}, test/lincheck says ${linOk ? 'linearizable' : 'not linearizable'}`);
    } catch (e) {
      porcupine = `error: ${(e as Error).message}`;
      violations.push(`Porcupine failed to run: ${(e as Error).message}`);
    }
  }
  const ok = violations.length === 0;
  const report: NemesisReport = {
    ok,
    seed: options.seed,
    t,
    violations,
    faults: records,
    operations: history.length,
    outcomes: verdict.outcomes,
    known: verdict.known,
    powerLosses,
    porcupine,
    latencyMs: latencies(history),
    seconds: clock() / 1000,
    ...(ok && !options.keep ? {} : { dir }),
  };
  if (ok && !options.keep) rmSync(dir, { recursive: true, force: true });
  else {
    writeFileSync(
      join(dir, 'history.json'),
      JSON.stringify({ ...report, options: { ...options, log: undefined }, history }, null, 1) + '\n',
    );
    log(`${ok ? 'passed' : 'FAILED'}; kept ${dir}`);
  }
  return report;
}

/**
 * Waits (at most `withinMs`) until every server holds every key's latest completed write:
 * the same `lc` as the newest any server has, and its own valid fragment of each of its
 * stripes (a delete's included), asked for directly over connections of the nemesis's own
 * (COLLECT, FILTER). Every server is correct here, so each must get there by catch-up
 * (a restart's pass, a periodic one, or a repair on COMPLETE). Returns what still lags.
 */
export async function converge(c: PowerStoreCluster, keys: readonly string[], withinMs: number): Promise<string[]> {
  const servers: ServerRef[] = c.urls.map((url, i) => ({ url, id: i + 1, n: c.n, localAddress: null }));
  const deadline = Date.now() + withinMs;
  for (;;) {
    const lagging: string[] = [];
    for (const key of keys) {
      const lcs = await Promise.all(servers.map((s) => collectLc(s.url, key, s.n, 0, null).catch(() => undefined)));
      let latest: Candidate | undefined;
      for (const lc of lcs) if (lc && (!latest || compareTimestamps(lc.ts, latest.ts) > 0)) latest = lc;
      if (!latest) continue;
      const name = (lc: Candidate | undefined) => (lc ? `ts ${lc.ts.num}.${toHex(lc.ts.writerId).slice(0, 8)}` : 'none');
      for (const s of servers) {
        const lc = lcs[s.id - 1];
        if (!lc || compareTimestamps(lc.ts, latest.ts) !== 0)
          lagging.push(`s${s.id}'s lc of ${key} is ${name(lc)}, another server's ${name(latest)}`);
        else if (!(await holdsEveryStripe(s, key, latest).catch(() => false)))
          lagging.push(`s${s.id} lacks its valid fragment of ${key}'s latest write (${name(latest)})`);
      }
    }
    if (lagging.length === 0 || Date.now() > deadline) return lagging;
    await sleep(1000);
  }
}

function latencies(ops: readonly NemesisOp[]): NemesisReport['latencyMs'] {
  const ms = ops
    .filter((op) => op.outcome === 'ok')
    .map((op) => op.ret! - op.call)
    .sort((a, b) => a - b);
  const at = (q: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(q * ms.length))] ?? 0);
  return { p50: at(0.5), p99: at(0.99), max: Math.round(ms[ms.length - 1] ?? 0) };
}

/** Both directions between two hosts. */
function both(a: NetHost, b: NetHost): [NetHost, NetHost][] {
  return [
    [a, b],
    [b, a],
  ];
}

/** The partitions in force: the union of every active fault's cuts, applied as a difference to what the network has. */
class Partitions {
  readonly #faults = new Map<number, { blocks?: [NetHost, NetHost][]; down?: NetHost[] }>();
  readonly #blocked = new Map<string, [NetHost, NetHost]>();
  readonly #down = new Set<NetHost>();

  constructor(readonly net: Network) {}

  set(id: number, cuts: { blocks?: [NetHost, NetHost][]; down?: NetHost[] }): void {
    this.#faults.set(id, cuts);
    this.#apply();
  }

  delete(id: number): void {
    this.#faults.delete(id);
    this.#apply();
  }

  clear(): void {
    this.#faults.clear();
    this.#apply();
  }

  #apply(): void {
    const blocks = new Map<string, [NetHost, NetHost]>();
    const down = new Set<NetHost>();
    for (const f of this.#faults.values()) {
      for (const [a, b] of f.blocks ?? []) blocks.set(`${a.role}>${b.role}`, [a, b]);
      for (const h of f.down ?? []) down.add(h);
    }
    for (const [k, [a, b]] of this.#blocked)
      if (!blocks.has(k)) {
        this.net.unblock(a, b);
        this.#blocked.delete(k);
      }
    for (const [k, [a, b]] of blocks)
      if (!this.#blocked.has(k)) {
        this.net.block(a, b);
        this.#blocked.set(k, [a, b]);
      }
    for (const h of this.#down)
      if (!down.has(h)) {
        this.net.setLink(h, true);
        this.#down.delete(h);
      }
    for (const h of down)
      if (!this.#down.has(h)) {
        this.net.setLink(h, false);
        this.#down.add(h);
      }
  }
}

/** Whether `url`'s /healthz answers 200 to one request within `timeoutMs`. */
async function answers(url: string, timeoutMs: number): Promise<boolean> {
  try {
    return (await fetch(`${url.replace(/^ws/, 'http')}/healthz`, { signal: AbortSignal.timeout(timeoutMs) })).ok;
  } catch {
    return false;
  }
}

/** Whether `url`'s /healthz answers 200 within `withinMs` (asked again until then). */
async function healthy(url: string, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (await answers(url, 2000)) return true;
    await sleep(250);
  }
  return false;
}

/** A worker.ts process on its own host. */
class Client {
  onMessage: (m: WorkerMessage) => void = () => undefined;
  readonly #child: ChildProcess;
  readonly #seen = new Set<string>();
  readonly #waiters = new Map<string, () => void>();
  #gone: string | undefined;

  constructor(
    readonly name: string,
    readonly host: NetHost,
    dir: string,
    net: Network,
  ) {
    const logFd = openSync(join(dir, `client-${name}.log`), 'a');
    this.#child = track(
      net.spawn(host, process.execPath, [...TSX_EXEC_ARGV, join(ROOT, 'test/nemesis/worker.ts')], {
        cwd: ROOT,
        stdio: ['ignore', logFd, logFd, 'ipc'],
      }),
    );
    closeSync(logFd);
    this.#child.on('message', (m: WorkerMessage) => {
      this.onMessage(m);
      this.#seen.add(m.type);
      for (const w of this.#waiters.values()) w();
    });
    this.#child.once('exit', (code, signal) => {
      this.#gone = `client ${name} exited (${signal ?? `code ${code}`}): see client-${name}.log`;
      for (const w of this.#waiters.values()) w();
    });
  }

  send(m: ParentMessage): void {
    if (this.#child.connected) this.#child.send(m);
  }

  /** SIGSTOP / SIGCONT (a client pause); nothing if the process is gone. */
  signal(signal: 'SIGSTOP' | 'SIGCONT'): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill(signal);
  }

  /** Resolves once the client has sent a message of `type`; throws if it exits first or `withinMs` pass. */
  async waitFor(type: WorkerMessage['type'], withinMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      const check = () => (this.#seen.has(type) || this.#gone || this.#seen.has('failed')) && resolve();
      this.#waiters.set(type, check);
      timer = setTimeout(resolve, withinMs);
      check();
    });
    clearTimeout(timer);
    this.#waiters.delete(type);
    if (this.#seen.has(type)) return;
    throw new Error(
      this.#gone ??
        (this.#seen.has('failed') ? `client ${this.name} failed` : `client ${this.name}: no ${type} within ${withinMs / 1000} s`),
    );
  }

  close(): void {
    this.send({ type: 'exit' });
    const child = this.#child;
    if (child.exitCode === null && child.signalCode === null) setTimeout(() => child.kill('SIGKILL'), 2000).unref();
  }
}
