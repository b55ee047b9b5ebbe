import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createCryptoProvider } from '../src/crypto.node.js';
import { compareTimestamps, makeTimestamp, TS0, verifyTimestamp, type Timestamp } from '../src/index.js';
import { timestamp } from './arbitraries.js';

const crypto = createCryptoProvider();
const kW = new Uint8Array(32).fill(9);

describe('timestamps', () => {
  it('order by num, then writerId, then MAC, and form a total order', () => {
    fc.assert(
      fc.property(timestamp(), timestamp(), timestamp(), (a, b, c) => {
        const sign = (x: number) => Math.sign(x);
        expect(sign(compareTimestamps(a, b))).toBe(-sign(compareTimestamps(b, a)));
        if (compareTimestamps(a, b) <= 0 && compareTimestamps(b, c) <= 0) expect(compareTimestamps(a, c)).toBeLessThanOrEqual(0);
        if (a.num !== b.num) expect(sign(compareTimestamps(a, b))).toBe(sign(a.num - b.num));
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

  it('a timestamp verifies only under kW, for its own key, with unchanged fields', () => {
    const id = new Uint8Array(16).fill(1);
    const ts = makeTimestamp(crypto, kW, 'k', 5, id);
    expect(verifyTimestamp(crypto, kW, 'k', ts)).toBe(true);
    expect(verifyTimestamp(crypto, kW, 'other', ts)).toBe(false);
    expect(verifyTimestamp(crypto, new Uint8Array(32), 'k', ts)).toBe(false);
    const inflated: Timestamp = { ...ts, num: 6 };
    expect(verifyTimestamp(crypto, kW, 'k', inflated)).toBe(false);
    const otherWriter: Timestamp = { ...ts, writerId: new Uint8Array(16).fill(2) };
    expect(verifyTimestamp(crypto, kW, 'k', otherWriter)).toBe(false);
    expect(verifyTimestamp(crypto, kW, 'k', TS0)).toBe(true);
    expect(verifyTimestamp(crypto, kW, 'k', { ...TS0, mac: new Uint8Array(32).fill(1) })).toBe(false);
  });
});
