/** The storage amplification bench's arithmetic (`bench/storage/measure.ts`) and its value-log pointer format. */
import { describe, expect, it } from 'vitest';
import { decodePointer, encodePointer } from '../../bench/storage/backends.js';
import { figures, ioDelta, markdownTable, parseProcIo, readProcIo, summarize, type RunResult } from '../../bench/storage/measure.js';

const PROC_IO = `rchar: 6976
wchar: 120
syscr: 10
syscw: 2
read_bytes: 4096
write_bytes: 8192
cancelled_write_bytes: 4096
`;

function run(variant: string, fragmentBytes: number, rep: number, seconds: number, writeBytes: number, settled = true): RunResult {
  return {
    variant,
    fragmentBytes,
    rep,
    fragments: 1000,
    seconds,
    settleSeconds: 3,
    settled,
    cpuMs: 500,
    io: { rchar: 0, wchar: 2 * writeBytes, read_bytes: 0, write_bytes: writeBytes, cancelled_write_bytes: 0 },
    liveBytes: 300 * fragmentBytes,
    diskBytes: 600 * fragmentBytes,
  };
}

describe('storage amplification bench', () => {
  it('parses /proc/self/io and subtracts readings', () => {
    const io = parseProcIo(PROC_IO);
    expect(io).toEqual({ rchar: 6976, wchar: 120, read_bytes: 4096, write_bytes: 8192, cancelled_write_bytes: 4096 });
    expect(ioDelta(io, { ...io, write_bytes: 10_000, wchar: 200 })).toEqual({
      rchar: 0,
      wchar: 80,
      read_bytes: 0,
      write_bytes: 1808,
      cancelled_write_bytes: 0,
    });
    expect(() => parseProcIo('rchar: 1\n')).toThrow(/no wchar/);
  });

  it.runIf(process.platform === 'linux')('reads this process’s counters', () => {
    expect(readProcIo().rchar).toBeGreaterThan(0);
  });

  it('computes throughput and amplification, net of cancelled writes', () => {
    const r = {
      ...run('level', 4096, 1, 2, 8_192_000),
      io: { ...run('level', 4096, 1, 2, 8_192_000).io, cancelled_write_bytes: 4_096_000 },
    };
    const f = figures(r);
    expect(f.fragmentsPerSec).toBe(500);
    expect(f.mbPerSec).toBeCloseTo(2.048);
    expect(f.writeAmp).toBeCloseTo(1); // (8 192 000 − 4 096 000) / 4 096 000
    expect(f.syscallWriteAmp).toBeCloseTo(4);
    expect(f.spaceAmp).toBe(2);
    expect(f.cpuMsPerFragment).toBe(0.5);
  });

  it('takes medians per size and backend, and ratios to the baseline', () => {
    const results = [
      run('level', 131072, 1, 4, 262_144_000),
      run('vlog', 131072, 1, 2, 131_072_000),
      run('level', 131072, 2, 5, 393_216_000, false),
      run('vlog', 131072, 2, 1, 131_072_000),
      run('level', 131072, 3, 6, 262_144_000),
      run('vlog', 131072, 3, 3, 131_072_000),
      run('level', 4096, 1, 1, 4_096_000),
    ];
    const cells = summarize(results);
    expect(cells.map((c) => [c.fragmentBytes, c.variant, c.reps])).toEqual([
      [4096, 'level', 1],
      [131072, 'level', 3],
      [131072, 'vlog', 3],
    ]);
    const level = cells[1]!;
    expect(level.fragmentsPerSec).toBe(200); // median of 250, 200, 166.7
    expect(level.writeAmp).toBe(2);
    expect(level.unsettled).toBe(1);
    const table = markdownTable(cells, 'level');
    expect(table).toContain('| 128 KiB | vlog | 500 |');
    expect(table).toContain('×2.50'); // vlog's throughput over level's
    expect(table).toContain('×0.50'); // vlog's write amplification over level's
    expect(table).toContain('3 (1 unsettled)');
    expect(table.split('\n')).toHaveLength(2 + 3);
  });

  it('round-trips a value-log pointer', () => {
    const p = { segment: 7, offset: 2 ** 40 + 3, length: 131072, crc: 0xdeadbeef };
    expect(decodePointer(encodePointer(p.segment, p.offset, p.length, p.crc))).toEqual(p);
    expect(() => decodePointer(new Uint8Array(3))).toThrow(/pointer of 3 bytes/);
  });
});
