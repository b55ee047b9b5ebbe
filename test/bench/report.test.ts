/** The bench report's arithmetic: peaks per repetition, ratios as medians of per-repetition ratios, targets met or not. */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { serversOf } from '../../bench/lib/clusters.js';
import { cpuBudget, manyVsAbd, peaks, targetRows, writeReports, type ManyResult, type Row } from '../../bench/lib/report.js';
import type { ProfileResult } from '../../bench/profile/profile.js';
import type { SystemName } from '../../bench/lib/clusters.js';
import type { Op } from '../../bench/load/worker.js';

function row(system: SystemName, op: Op, rep: number, clients: number, opsPerSec: number, t = 1, valueBytes = 262144): Row {
  return {
    system,
    net: '1gbit',
    op,
    t,
    valueBytes,
    clients,
    opsPerSec,
    mbPerSec: 0,
    p50Ms: 1,
    p99Ms: 2,
    fsync: true,
    keys: 'distinct',
    rep,
    errors: 0,
  };
}

describe('bench report', () => {
  it('takes each repetition’s best step and the median of per-repetition ratios', () => {
    const rows = [
      // rep 1: PowerStore peaks at 300 (4 clients), M-ABD at 100, single at 400
      row('powerstore', 'read', 1, 1, 200),
      row('powerstore', 'read', 1, 4, 300),
      row('m-abd', 'read', 1, 4, 100),
      row('single', 'read', 1, 4, 400),
      // rep 2: 330 / 110 / 300
      row('powerstore', 'read', 2, 4, 330),
      row('m-abd', 'read', 2, 4, 110),
      row('single', 'read', 2, 4, 300),
      // rep 3: 280 / 140 / 350
      row('powerstore', 'read', 3, 4, 280),
      row('m-abd', 'read', 3, 4, 140),
      row('single', 'read', 3, 4, 350),
    ];
    const ps = peaks(rows).find((p) => p.system === 'powerstore')!;
    expect(ps.repPeaks).toEqual([300, 330, 280]);
    expect(ps.opsPerSec).toBe(300);
    // Per repetition: 3.0, 3.0, 2.0 against M-ABD; 0.75, 1.1, 0.8 against single.
    expect(ps.vsAbd).toBe(3);
    expect(ps.vsSingle).toBe(0.8);
    expect(targetRows(peaks(rows))).toEqual([
      expect.objectContaining({ op: 'read', vs: 'm-abd', ratio: 3, atLeast: 3, met: true }),
      expect.objectContaining({ op: 'read', vs: 'single', ratio: 0.8, atLeast: 0.9, met: false }),
    ]);
  });

  it('checks writes against M-ABD only, for every t', () => {
    const rows = [row('powerstore', 'write', 1, 4, 150, 2), row('m-abd', 'write', 1, 4, 100, 2), row('single', 'write', 1, 4, 400, 2)];
    expect(targetRows(peaks(rows))).toEqual([
      expect.objectContaining({ t: 2, op: 'write', vs: 'm-abd', ratio: 1.5, atLeast: 1.6, met: false }),
    ]);
  });
});

describe('reports of several sizes (pnpm bench:quick)', () => {
  it('has peaks, ratios and a chart row for every size', () => {
    const rows: Row[] = [];
    for (const valueBytes of [4096, 65536, 262144])
      for (const op of ['read', 'write'] as Op[])
        for (const [system, ops] of [
          ['powerstore', 200],
          ['m-abd', 100],
          ['single', 400],
        ] as [SystemName, number][])
          for (const clients of [1, 2]) rows.push(row(system, op, 1, clients, (ops * clients) / (valueBytes / 4096), 1, valueBytes));
    const ps = peaks(rows).filter((p) => p.system === 'powerstore');
    expect(ps.map((p) => [p.valueBytes, p.op, p.vsAbd]).sort()).toEqual(
      [4096, 65536, 262144]
        .flatMap((v) => [
          [v, 'read', 2],
          [v, 'write', 2],
        ])
        .sort(),
    );
    const dir = mkdtempSync(join(tmpdir(), 'bench-report-'));
    try {
      writeReports(dir, 'quick', { meta: { net: { profile: '1gbit' } }, rows });
      const md = readFileSync(join(dir, 'quick.md'), 'utf8');
      for (const size of ['4 KiB', '64 KiB', '256 KiB'])
        expect(md).toMatch(new RegExp(`\\| 1gbit \\| 1 \\| ${size} \\| write \\| distinct \\| on \\| powerstore \\| `));
      const svg = readFileSync(join(dir, 'quick-throughput-latency.svg'), 'utf8');
      for (const size of ['4 KiB', '64 KiB', '256 KiB'])
        for (const op of ['read', 'write']) expect(svg).toContain(`${op}, t=1, ${size}, fsync on, net 1gbit`);
      expect(svg).toMatch(/height="984"/); // three rows of 320 px panels and the legend
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('sets the putMany row against M-ABD’s single-key write peak at its size, and says when that was not measured', () => {
    const rows = [
      row('m-abd', 'write', 1, 1, 100, 1, 4096),
      row('m-abd', 'write', 1, 2, 160, 1, 4096),
      row('m-abd', 'read', 1, 2, 900, 1, 4096),
    ];
    const many: ManyResult = {
      net: '1gbit',
      t: 1,
      keys: 1000,
      valueBytes: 4096,
      concurrency: 64,
      repKeysPerSec: [300, 400, 500],
      keysPerSec: 400,
      failed: 0,
    };
    expect(manyVsAbd(many, peaks(rows))).toBe(2.5);
    expect(manyVsAbd({ ...many, valueBytes: 65536 }, peaks(rows))).toBeUndefined();
    expect(manyVsAbd({ ...many, net: 'loopback' }, peaks(rows))).toBeUndefined();
    const dir = mkdtempSync(join(tmpdir(), 'bench-report-'));
    try {
      writeReports(dir, 'quick', { meta: { net: { profile: '1gbit' } }, rows, many });
      expect(readFileSync(join(dir, 'quick.md'), 'utf8')).toContain('| 1gbit | 400 | 300, 400, 500 | 0 | 2.5 |');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('CPU budget', () => {
  it('sums the client’s own stages and every server’s CPU, and caps throughput at cores × 1000 / ms', () => {
    const profile = {
      method: '',
      t: 1,
      valueBytes: 262144,
      ops: 1,
      net: '1gbit',
      client: [{ system: 'powerstore', op: 'write', totalMs: 18, stages: { hash: 1, send: 4, wait: 12 } }],
      server: [{ system: 'powerstore', op: 'write', totalMs: 9, stages: {}, cpuMs: 5 }],
    } as unknown as ProfileResult;
    const rows = [row('powerstore', 'write', 1, 8, 90), row('m-abd', 'write', 1, 8, 150), row('single', 'write', 1, 8, 300)];
    // Client 18 − 12 = 6 ms; servers 4 × 5 = 20 ms; 2 cores: 2000 / 26 = 77 op/s.
    expect(cpuBudget(profile, 2, peaks(rows))).toEqual([
      { system: 'powerstore', op: 'write', clientMs: 6, serversMs: 20, totalMs: 26, ceiling: 77, peak: 90 },
    ]);
    expect([serversOf('powerstore', 2), serversOf('m-abd', 2), serversOf('single', 2)]).toEqual([7, 5, 1]);
  });
});
