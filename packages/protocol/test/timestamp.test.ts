import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareTimestamps, makeWriterId, timestampKey, TS0 } from '../src/index.js';
import { WRITER_ID_LENGTH } from '../src/auth/timestamp.js';
import { timestamp } from './arbitraries.js';

describe('timestamps', () => {
  it('order by num, then writerId, and form a total order', () => {
    fc.assert(
      fc.property(timestamp(), timestamp(), timestamp(), (a, b, c) => {
        const sign = (x: number) => Math.sign(x);
        expect(sign(compareTimestamps(a, b))).toBe(-sign(compareTimestamps(b, a)));
        if (compareTimestamps(a, b) <= 0 && compareTimestamps(b, c) <= 0) expect(compareTimestamps(a, c)).toBeLessThanOrEqual(0);
        if (a.num !== b.num) expect(sign(compareTimestamps(a, b))).toBe(sign(a.num - b.num));
        expect(compareTimestamps(a, b) === 0).toBe(timestampKey(a) === timestampKey(b));
      }),
    );
  });

  it('ts0 is below every written timestamp', () => {
    fc.assert(
      fc.property(timestamp(), (ts) => {
        fc.pre(ts.num > 0);
        expect(compareTimestamps(TS0, ts)).toBeLessThan(0);
      }),
    );
  });

  it('a writer id is the writer tag followed by the instance id', () => {
    const id = makeWriterId(new Uint8Array(16).fill(1), new Uint8Array(16).fill(2));
    expect(id.length).toBe(WRITER_ID_LENGTH);
    expect([...id.subarray(0, 16)].every((b) => b === 1) && [...id.subarray(16)].every((b) => b === 2)).toBe(true);
    expect(() => makeWriterId(new Uint8Array(15), new Uint8Array(16))).toThrow(/16 bytes/);
  });
});
