import fc from 'fast-check';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import { describe, expect, it } from 'vitest';
import { createCryptoProvider } from '../src/crypto/node.js';
import { computeCrossChecksum, crossChecksumDigest, fragmentMatches, toHex } from '../src/index.js';

const crypto = createCryptoProvider();
const codec = createReferenceCodec({ k: 2, n: 4 });

describe('cross-checksum', () => {
  it('every fragment matches its own entry and no other', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 50 }), async (value) => {
        const fragments = codec.encode(value);
        const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
        expect(cc.hashes).toHaveLength(4);
        for (let i = 0; i < 4; i++) {
          expect(await fragmentMatches(crypto, cc, i, fragments[i]!)).toBe(true);
          // Entry j is the hash of fragment j's bytes at index j: a fragment with other bytes
          // never matches it. (Equal bytes do: a one-byte zero value has four zero fragments.)
          const j = (i + 1) % 4;
          if (Buffer.compare(fragments[i]!, fragments[j]!) !== 0) {
            expect(await fragmentMatches(crypto, cc, j, fragments[i]!)).toBe(false);
          }
          const flipped = fragments[i]!.slice();
          flipped[0]! ^= 1;
          expect(await fragmentMatches(crypto, cc, i, flipped)).toBe(false);
        }
        expect(await fragmentMatches(crypto, cc, 4, fragments[0]!)).toBe(false);
      }),
      { numRuns: 200 },
    );
  });

  it('a fragment of zeros does not match entry 0 of a value whose fragment 0 differs', async () => {
    // The case seed 1445064420 found: equal bytes at another index are not a match of entry 0.
    const fragments = codec.encode(new Uint8Array([7]));
    const cc = await computeCrossChecksum(crypto, fragments, 1, false);
    expect(await fragmentMatches(crypto, cc, 0, fragments[1]!)).toBe(false);
    expect(await fragmentMatches(crypto, cc, 1, new Uint8Array([0]))).toBe(true);
  });

  it('the digest authenticates the value length and the tombstone flag', async () => {
    const fragments = codec.encode(new Uint8Array([1, 2, 3]));
    const cc = await computeCrossChecksum(crypto, fragments, 3, false);
    const d = toHex(crossChecksumDigest(crypto, cc));
    expect(toHex(crossChecksumDigest(crypto, { ...cc, valueLength: 4 }))).not.toBe(d);
    expect(toHex(crossChecksumDigest(crypto, { ...cc, tombstone: true }))).not.toBe(d);
    expect(toHex(crossChecksumDigest(crypto, { ...cc, hashes: [...cc.hashes].reverse() }))).not.toBe(d);
    expect(toHex(crossChecksumDigest(crypto, await computeCrossChecksum(crypto, fragments, 3, false)))).toBe(d);
  });
});
