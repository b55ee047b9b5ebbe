/**
 * The nemesis: its schedules and checks on their own, then short runs against a real
 * cluster in network namespaces (root only; skipped, with the reason logged, when
 * namespaces cannot be made): one seed that must pass, and one whose servers come back on
 * old copies of their disks before the final reads (a fault no storage system survives),
 * which must fail.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@powerstore/client';
import { beforeAll, describe, expect, it } from 'vitest';
import { createPowerStore } from '../../bench/lib/clusters.js';
import { createNetwork, leftovers, netUnavailable } from '../../bench/lib/netns.js';
import { ensureBuilt } from '../server/harness.js';
import { checkHistory, listViolations, lostWrites, registerHistory, storedBytes, type NemesisOp } from './history.js';
import { converge, runNemesis } from './run.js';
import { ALL_FAULT_KINDS, describeFault, drawSchedule, FAULT_KINDS, faultyServer, peakFaulty, RECOVERY_MS } from './schedule.js';
import { identify, nemesisKey, valueBytes } from './messages.js';

const unavailable = netUnavailable();
if (unavailable) console.log(`test/nemesis/nemesis.test.ts: the runs against a real cluster are skipped: ${unavailable}`);

describe('schedules', () => {
  it('stay within the fault budget and the duration, never two faults on one server, the same for the same seed', () => {
    const kinds = new Set<string>();
    for (let seed = 1; seed <= 300; seed++) {
      const t = (seed % 2) + 1;
      const durationMs = 20_000 + (seed % 5) * 30_000;
      const plan = drawSchedule({ seed, t, clients: 3, durationMs });
      expect(plan).toEqual(drawSchedule({ seed, t, clients: 3, durationMs }));
      expect(peakFaulty(plan)).toBeLessThanOrEqual(t);
      for (const [i, p] of plan.entries()) {
        kinds.add(p.fault.kind);
        expect(p.at + p.durationMs).toBeLessThanOrEqual(durationMs);
        const s = faultyServer(p.fault);
        const overlapping = plan.filter((q, j) => j !== i && q.at < p.at + p.durationMs && p.at < q.at + q.durationMs);
        if (s !== undefined) expect(overlapping.map((q) => faultyServer(q.fault))).not.toContain(s);
        if (p.fault.kind === 'bridge') {
          expect(overlapping.filter((q) => q.fault.kind === 'bridge')).toEqual([]);
          const all = [p.fault.bridge, ...p.fault.halves[0], ...p.fault.halves[1]].sort();
          expect(all).toEqual(Array.from({ length: 3 * t + 1 }, (_, k) => k + 1));
        }
        if (p.fault.kind === 'clients-cut' || p.fault.kind === 'one-way') expect(p.fault.clients.length).toBeGreaterThan(0);
        if (p.fault.kind === 'client-pause') {
          const c = p.fault.client;
          expect(overlapping.filter((q) => q.fault.kind === 'client-pause' && q.fault.client === c)).toEqual([]);
        }
      }
      expect(plan.length).toBeGreaterThan(0);
    }
    expect([...kinds].sort()).toEqual([...FAULT_KINDS].sort());
  });

  it('draw only the kinds asked for', () => {
    const plan = drawSchedule({ seed: 7, t: 1, clients: 2, durationMs: 60_000, kinds: ['pause'] });
    expect(plan.length).toBeGreaterThan(3);
    expect(new Set(plan.map((p) => p.fault.kind))).toEqual(new Set(['pause']));
  });

  it('draw a blackout only while no server is faulty, and only when asked for', () => {
    let blackouts = 0;
    for (let seed = 1; seed <= 100; seed++) {
      const plan = drawSchedule({ seed, t: (seed % 2) + 1, clients: 3, durationMs: 90_000, kinds: ALL_FAULT_KINDS });
      for (const p of plan.filter((q) => q.fault.kind === 'blackout')) {
        blackouts++;
        const busy = plan.filter(
          (q) =>
            faultyServer(q.fault) !== undefined && q.at < p.at + p.durationMs + RECOVERY_MS && p.at < q.at + q.durationMs + RECOVERY_MS,
        );
        expect(busy.map((q) => describeFault(q.fault))).toEqual([]);
      }
    }
    expect(blackouts).toBeGreaterThan(20);
    expect(FAULT_KINDS).not.toContain('blackout');
  });

  it('draw disk faults only when asked for, within the budget like a kill', () => {
    const plan = drawSchedule({ seed: 1, t: 1, clients: 3, durationMs: 120_000, kinds: ['disk', 'kill'] });
    expect(new Set(plan.map((p) => p.fault.kind))).toEqual(new Set(['disk', 'kill']));
    expect(peakFaulty(plan)).toBeLessThanOrEqual(1);
    expect(ALL_FAULT_KINDS).toContain('disk');
    expect(FAULT_KINDS).not.toContain('disk');
  });
});

describe('values', () => {
  it('say which write they are, and whether their bytes are all that write’s', () => {
    const v = valueBytes('c2.17', 70_000);
    expect(identify(v)).toEqual({ id: 'c2.17', intact: true });
    const spliced = v.slice();
    spliced.set(valueBytes('c1.3', 70_000).subarray(65_536), 65_536);
    expect(identify(spliced)).toEqual({ id: 'c2.17', intact: false });
    expect(identify(v.subarray(0, 69_999)).intact).toBe(false);
    expect(identify(new TextEncoder().encode('garbage')).intact).toBe(false);
  });
});

describe('history checks', () => {
  let seq = 0;
  const op = (o: Partial<NemesisOp> & Pick<NemesisOp, 'kind' | 'call'>): NemesisOp => ({
    client: 'c1',
    seq: ++seq,
    key: 'k0',
    outcome: 'ok',
    ...o,
  });
  const put = (written: string, call: number, ret?: number, outcome = 'ok') => op({ kind: 'put', written, call, ret, outcome });
  const get = (read: string | null, call: number, ret: number, extra: Partial<NemesisOp> = {}) =>
    op({ kind: 'get', read, call, ret, ...extra });

  it('pass a correct history, with a timed-out write read later and a delete', () => {
    const h = [
      put('c1.1', 1, 2),
      put('c1.2', 3, 30, 'QUORUM_UNREACHABLE'),
      get('c1.1', 4, 5),
      get('c1.2', 31, 32, { intact: true }),
      op({ kind: 'delete', written: null, call: 33, ret: 34 }),
      get(null, 35, 36, { final: true }),
    ];
    expect(checkHistory(h).violations).toEqual([]);
    // The failed write has no return in the register history: it may take effect any time.
    expect(registerHistory(h).find((r) => r.value === 'c1.2')!.ret).toBeUndefined();
  });

  it('find a lost acknowledged write, a value never written, a corrupt read, a hung and an erroneous operation', () => {
    const v = checkHistory([
      get(null, 0.5, 20, { final: true, outcome: 'QUORUM_UNREACHABLE' }),
      put('c1.1', 1, 2),
      put('c1.2', 3, 4),
      get('c1.1', 5, 6, { final: true, intact: true }),
      get('c9.9', 7, 8),
      get('c1.2', 9, 10, { intact: false }),
      put('c1.3', 11),
      put('c1.4', 12, 13, 'TAMPERED'),
    ]).violations;
    expect(v.some((x) => x.startsWith('acknowledged write lost') && x.includes('c1.2'))).toBe(true);
    expect(v.some((x) => x.startsWith('not linearizable: key k0'))).toBe(true);
    expect(v.some((x) => x.startsWith('read of a value never written') && x.includes('c9.9'))).toBe(true);
    expect(v.some((x) => x.startsWith('corrupt read'))).toBe(true);
    expect(v.some((x) => x.startsWith('hung') && x.includes('c1.3'))).toBe(true);
    expect(v.some((x) => x.startsWith('unexpected error') && x.includes('TAMPERED'))).toBe(true);
    expect(v.some((x) => x.startsWith('final read failed after healing'))).toBe(true);
  });

  it('find a list that invents, hides or resurrects a key, or misreports its size, and pass lists that are fine', () => {
    const list = (call: number, ret: number, listed: NemesisOp['listed'], extra: Partial<NemesisOp> = {}) =>
      op({ kind: 'list', key: '*', call, ret, listed, ...extra });
    const w = (key: string, written: string | null, call: number, ret: number, outcome = 'ok') =>
      op({ kind: written === null ? 'delete' : 'put', key, written, ...(written ? { bytes: 100 } : {}), call, ret, outcome });
    const history = [
      w('k0', 'c1.1', 1, 2),
      w('k1', 'c1.2', 3, 4),
      w('k1', null, 5, 6),
      // k2: written, then deleted while a put that failed may have taken effect after it.
      w('k2', 'c1.3', 7, 8),
      w('k2', 'c1.4', 9, 12, 'QUORUM_UNREACHABLE'),
      w('k2', null, 10, 11),
    ];
    const fine = [
      list(20, 21, [{ key: 'k0', size: 100, storedSize: storedBytes(100) }, { key: 'k2' }]),
      list(0, 22, [{ key: 'k1', size: 100, storedSize: 164 }], { cursor: 'k1' }),
    ];
    expect(listViolations([...history, ...fine])).toEqual([]);
    expect(checkHistory([...history, ...fine]).violations).toEqual([]);
    const bad = listViolations([
      ...history,
      list(20, 21, [{ key: 'k0', size: 99 }, { key: 'k1' }, { key: 'k9' }]),
      list(20, 21, [{ key: 'k0', size: 100, storedSize: 100 }]),
      list(20, 21, []),
    ]);
    expect(bad.some((v) => v.startsWith('list validity') && v.includes('k0 with 99 bytes,'))).toBe(true);
    expect(bad.some((v) => v.startsWith('list validity') && v.includes('k0 with 100 bytes stored'))).toBe(true);
    expect(bad.some((v) => v.startsWith('list showed a deleted key') && v.includes('k1'))).toBe(true);
    expect(bad.some((v) => v.startsWith('list of a key never written') && v.includes('k9'))).toBe(true);
    expect(bad.filter((v) => v.startsWith('list hid a key'))).toEqual([expect.stringContaining('left out k0')]);
    // A striped value stores an envelope per stripe.
    expect(storedBytes(100)).toBe(164);
    expect(storedBytes(2 * 65_536 + 1)).toBe(2 * 65_536 + 1 + 3 * 64);
  });

  it('count a known issue only under its condition', () => {
    /** A putStream (10–20) refused with `error`. */
    const streamRefused = (error: string) => op({ kind: 'putStream', written: 'c1.9', call: 10, ret: 20, outcome: 'REJECTED', error });
    const refused = () => streamRefused('2 servers refused: s1: STRIPES_MISSING (…)');
    // Was a known issue (servers erased an upload's stripes below a delete at once): fixed, so
    // it fails a run again, overlapping delete or not.
    const overtaken = checkHistory([refused(), op({ kind: 'delete', written: null, call: 11, ret: 15, client: 'c2' })]);
    expect(overtaken.violations.some((x) => x.startsWith('unexpected error') && x.includes('STRIPES_MISSING'))).toBe(true);
    const unexplained = checkHistory([refused(), op({ kind: 'delete', written: null, call: 21, ret: 25, client: 'c2' })]);
    expect(unexplained.violations.some((x) => x.startsWith('unexpected error') && x.includes('STRIPES_MISSING'))).toBe(true);

    // A stream overtaken by newer writes whose history was collected (a CI run met it, seed 43).
    const superseded = () => streamRefused('2 servers refused: s4: SUPERSEDED (…); s1: SUPERSEDED (…)');
    // Seed 123, t = 2: SUPERSEDED where the history was collected, STRIPES_MISSING where
    // servers faulty during the upload missed a stripe; together more than t.
    const mixed = checkHistory([
      streamRefused('3 servers refused, for different reasons: s6: STRIPES_MISSING (…); s5: STRIPES_MISSING (…); s7: SUPERSEDED (…)'),
      op({ kind: 'put', written: 'c2.1', call: 11, ret: 15, client: 'c2' }),
    ]);
    expect(mixed.violations).toEqual([]);
    expect(mixed.known).toEqual({ 'putStream-superseded': 1 });
    const overwritten = checkHistory([superseded(), op({ kind: 'put', written: 'c2.1', call: 11, ret: 15, client: 'c2' })]);
    expect(overwritten.violations).toEqual([]);
    expect(overwritten.known).toEqual({ 'putStream-superseded': 1 });
    const alone = checkHistory([superseded(), op({ kind: 'put', written: 'c2.1', call: 21, ret: 25, client: 'c2' })]);
    expect(alone.violations.some((x) => x.startsWith('unexpected error') && x.includes('SUPERSEDED'))).toBe(true);
  });

  it('count a final read of absence after an acknowledged write as lost, and not after a later delete or beside an unfinished write', () => {
    expect(lostWrites([put('c1.1', 1, 2), get(null, 3, 4, { final: true })])).toHaveLength(1);
    expect(
      lostWrites([put('c1.1', 1, 2), op({ kind: 'delete', written: null, call: 3, ret: 4 }), get(null, 5, 6, { final: true })]),
    ).toEqual([]);
    // A delete that timed out may have taken effect after the acknowledged write.
    expect(
      lostWrites([
        put('c1.1', 2, 3),
        op({ kind: 'delete', written: null, call: 1, outcome: 'QUORUM_UNREACHABLE', ret: 9 }),
        get(null, 10, 11, { final: true }),
      ]),
    ).toEqual([]);
    // Concurrent writes: either value may be last.
    expect(lostWrites([put('c1.1', 1, 5), put('c1.2', 2, 6), get('c1.1', 7, 8, { final: true })])).toEqual([]);
  });
});

describe('the check that every server holds every key after healing', () => {
  beforeAll(ensureBuilt, 240_000);

  it("names a server that missed a key's latest write, and passes once every server holds it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'powerstore-converge-'));
    // No catch-up: server 4 stays behind until a write reaches it.
    const cluster = await createPowerStore(1, createNetwork('loopback'), { fsync: false, dir, args: ['--heal-interval-ms', '0'] });
    const ids = cluster.hosts.map((_, i) => i + 1);
    try {
      await Promise.all(ids.map((id) => cluster.start(id)));
      const store = await connect({
        cluster: cluster.writer.cluster,
        identity: cluster.writer.identity,
        allowInsecure: true,
        timeoutMs: 10_000,
      });
      try {
        const key = nemesisKey(store.namespace ?? '', 'k0');
        await store.put(key, valueBytes('c1.1', 100));
        expect(await converge(cluster, [key], 0)).toEqual([]);
        await cluster.signal(4, 'SIGKILL');
        await store.put(key, valueBytes('c1.2', 70_000));
        await cluster.start(4);
        for (let i = 0; i < 200 && store.servers()[3]!.state !== 'open'; i++) await new Promise((r) => setTimeout(r, 100));
        const lagging = await converge(cluster, [key], 0);
        expect(lagging).toHaveLength(1);
        expect(lagging[0]).toMatch(new RegExp(`^s4's lc of ${key} is ts \\d+\\.[0-9a-f]{8}, another server's ts \\d+\\.[0-9a-f]{8}$`));
        await store.put(key, valueBytes('c1.3', 200_000));
        expect(await converge(cluster, [key], 10_000)).toEqual([]);
      } finally {
        store.close();
      }
    } finally {
      await cluster.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe.skipIf(unavailable !== undefined)('against a real cluster (root)', () => {
  beforeAll(ensureBuilt, 240_000);

  /** Every kind but full disks and blackouts, which the pair below has (no seed of 60 s draws them all). */
  const kinds = [...FAULT_KINDS, 'power', 'disk'] as const;

  it('seed 9018, t = 1: every kind of fault, the history linearizable, nothing lost or hung, every server healthy and holding every key', async () => {
    const lines: string[] = [];
    // Seed 9018's 55 s (and a power loss right after the first start): pause; bridge; a
    // cut from two clients; power loss; another bridge; kill -9; fsync failing (EIO);
    // isolate; every client's packets to a server lost; a client paused; power loss.
    const report = await runNemesis({ seed: 9018, t: 1, durationMs: 55_000, kinds, log: (l) => lines.push(l) });
    expect(report.violations, `${report.dir ?? ''}\n${lines.join('\n')}`).toEqual([]);
    expect(report.ok).toBe(true);
    expect(report.dir).toBeUndefined(); // a passing run cleans up
    const injected = report.faults.filter((f) => f.startedAt !== undefined);
    expect(injected.length).toBeGreaterThanOrEqual(5);
    expect(new Set(injected.map((f) => f.planned.fault.kind))).toEqual(new Set(kinds));
    expect(report.powerLosses).toBeGreaterThanOrEqual(3);
    expect(report.outcomes['list ok']).toBeGreaterThan(10);
    expect(lines).toContain("every server holds every key's latest write");
    expect(report.operations).toBeGreaterThan(200);
    expect(report.outcomes['get ok']).toBeGreaterThan(50);
    expect(report.outcomes['put ok']).toBeGreaterThan(50);
    expect(['ok', 'skipped: no Go toolchain']).toContain(report.porcupine);
    expect(leftovers(`psn${process.pid}`)).toEqual([]);
  }, 240_000);

  // Seed 238's 14 s: every server loses power at once, 0.8 s in; then s4's disk is full
  // for 3 s. Eight keys: on three, writes after the blackout overwrite every key before
  // anyone reads what it lost. Timeouts of 3 s: the sabotaged run's final reads fail,
  // each after its timeout.
  const blackout = { seed: 238, t: 1, durationMs: 14_000, kinds: ['blackout', 'disk-full'], keys: 8, opTimeoutMs: 3000 } as const;

  it('seed 238: a blackout (every server loses power at once) loses nothing acknowledged, and a server whose disk fills recovers by itself', async () => {
    const lines: string[] = [];
    const report = await runNemesis({ ...blackout, log: (l) => lines.push(l) });
    expect(report.violations, `${report.dir ?? ''}\n${lines.join('\n')}`).toEqual([]);
    expect(report.faults.filter((f) => f.startedAt !== undefined).map((f) => f.planned.fault.kind)).toEqual(['blackout', 'disk-full']);
    expect(lines).toContain("every server holds every key's latest write");
    expect(report.powerLosses).toBeGreaterThanOrEqual(5); // the one after the first start, and four at once
  }, 240_000);

  it('fails, keeping its logs, on the same schedule with servers that acknowledge writes before syncing them', async () => {
    // Whether the blackout finds acknowledged writes still unsynced, and a read then finds
    // them missing, depends on timing: one full CI run in about five saw nothing. So the
    // schedule runs again (at most three times) until the loss shows; it must show once.
    let report = await runNemesis({ ...blackout, sabotage: 'unsynced-acks' });
    for (let attempt = 2; attempt <= 3 && report.ok; attempt++) {
      console.log(`the sabotaged run found nothing (timing): running it again (${attempt}/3)`);
      report = await runNemesis({ ...blackout, sabotage: 'unsynced-acks' });
    }
    console.log(
      `the sabotaged run's violations (${report.violations.length}), the first three:\n${report.violations.slice(0, 3).join('\n')}`,
    );
    expect(report.ok).toBe(false);
    expect(
      // What the lost writes show as: reads that cannot find them (the servers that lost
      // them outnumber the one that kept them), or reads that miss them.
      report.violations.some((v) =>
        /^acknowledged write lost|^not linearizable|^final read failed after healing|^not healed|does not start after a blackout/.test(v),
      ),
      report.violations.join('\n'),
    ).toBe(true);
    expect(report.dir).toBeDefined();
    expect(existsSync(`${report.dir}/history.json`)).toBe(true);
    rmSync(report.dir!, { recursive: true, force: true });
    expect(leftovers(`psn${process.pid}`)).toEqual([]);
  }, 480_000);
});
