import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { toHex } from '../src/core/bytes.js';
import { sha256Hex } from '../src/core/crypto.js';
import { CertificateVerifier, type Candidate } from '../src/index.js';
import { crypto, makeCluster, own } from '../src/testing/cluster.js';

/** `b` with bit 0 of byte `i` flipped. */
const flip = (b: Uint8Array, i = 0) => Uint8Array.from(b, (x, j) => (j === i ? x ^ 1 : x));

describe('CertificateVerifier remembers valid candidates', () => {
  it('by every field and the key: a candidate changed anywhere is checked again, not taken for the one remembered', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'remembered');
    await c.write(key, { kind: 'value', value: new TextEncoder().encode('v') });
    const lc = (await c.storages[0]!.withKey(key, (r) => r.getLc()))!;
    const verifier = new CertificateVerifier(crypto, c.cluster);
    expect(await verifier.valid(key, lc)).toBe(true);
    const path = { index: 0, count: 2, siblings: [new Uint8Array(32)] };
    const receipt0 = lc.proof[0]!;
    const changed: [string, string, Candidate][] = [
      ['the key', `${key}x`, lc],
      ['the timestamp', key, { ...lc, ts: { ...lc.ts, num: lc.ts.num + 1 } }],
      ['the writer id', key, { ...lc, ts: { ...lc.ts, writerId: flip(lc.ts.writerId, 20) } }],
      ['the nonce', key, { ...lc, nonce: flip(lc.nonce) }],
      ['the tombstone flag', key, { ...lc, cert: { ...lc.cert, tombstone: !lc.cert.tombstone } }],
      ['the certificate signature', key, { ...lc, cert: { ...lc.cert, signature: flip(lc.cert.signature, 63) } }],
      ['the epoch', key, { ...lc, cert: { ...lc.cert, epoch: 1 } }],
      ['a certificate batch path', key, { ...lc, cert: { ...lc.cert, batch: path } }],
      ['a receipt server', key, { ...lc, proof: [{ ...receipt0, server: 3 }, ...lc.proof.slice(1)] }],
      ['a receipt signature', key, { ...lc, proof: [{ ...receipt0, signature: flip(receipt0.signature, 5) }, ...lc.proof.slice(1)] }],
      ['a receipt batch path', key, { ...lc, proof: [{ ...receipt0, batch: path }, ...lc.proof.slice(1)] }],
      ['a receipt fewer', key, { ...lc, proof: lc.proof.slice(1) }],
    ];
    for (const [what, k, candidate] of changed) expect(await verifier.valid(k, candidate), what).toBe(false);
    expect(await verifier.valid(key, lc)).toBe(true);
  });
});

describe('sha256Hex (the caches’ names)', () => {
  it('is the hex of sha256Sync, for small inputs, inputs in many parts, and inputs past the scratch buffer', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 3000 }), { maxLength: 8 }), fc.integer({ min: 0, max: 80_000 }), (parts, big) => {
        expect(sha256Hex(crypto, parts)).toBe(toHex(crypto.sha256Sync(parts)));
        const large = [...parts, new Uint8Array(big).fill(7)];
        expect(sha256Hex(crypto, large)).toBe(toHex(crypto.sha256Sync(large)));
        expect(typeof crypto.sha256HexSync).toBe('function');
      }),
      { numRuns: 100 },
    );
  });
});
