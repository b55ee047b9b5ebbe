import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createCryptoProvider as browserProvider } from '../src/crypto.browser.js';
import { createCryptoProvider as nobleProvider } from '../src/crypto.noble.js';
import { createCryptoProvider as nodeProvider } from '../src/crypto.node.js';
import { createCryptoProvider as exported } from '@powerstore/protocol/crypto';
import { DOMAIN, fragmentHash, nonceHash, toHex } from '../src/index.js';

const providers = [nodeProvider(), browserProvider(), nobleProvider()];

describe('crypto providers', () => {
  it('the package export picks the node provider under Node', () => {
    expect(exported().name).toBe('node');
  });

  it('known answers: SHA-256("abc") and RFC 4231 HMAC test case 2', async () => {
    const abc = new TextEncoder().encode('abc');
    const key = new TextEncoder().encode('Jefe');
    const data = new TextEncoder().encode('what do ya want for nothing?');
    for (const p of providers) {
      expect(toHex(await p.sha256([abc])), p.name).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      expect(toHex(p.sha256Sync([abc])), p.name).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      expect(toHex(p.hmacSha256(key, [data])), p.name).toBe('5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843');
    }
  });

  it('every provider yields identical bytes for any input split into any parts', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 5 }), fc.uint8Array({ minLength: 1, maxLength: 64 }), async (parts, key) => {
        const joined = Uint8Array.from(parts.flatMap((p) => [...p]));
        const expected = toHex(providers[0]!.sha256Sync([joined]));
        for (const p of providers) {
          expect(toHex(await p.sha256(parts)), p.name).toBe(expected);
          expect(toHex(p.sha256Sync(parts)), p.name).toBe(expected);
          expect(toHex(p.hmacSha256(key, parts)), p.name).toBe(toHex(providers[0]!.hmacSha256(key, [joined])));
        }
      }),
      { numRuns: 200 },
    );
  });

  it('domain separation: the same bytes hash differently as fragment and as nonce', async () => {
    const p = providers[0]!;
    const bytes = new Uint8Array(32).fill(7);
    expect(toHex(await fragmentHash(p, 0, bytes))).not.toBe(toHex(nonceHash(p, bytes)));
    expect(toHex(await fragmentHash(p, 0, bytes))).not.toBe(toHex(await fragmentHash(p, 1, bytes)));
    expect(new Set(Object.values(DOMAIN)).size).toBe(Object.values(DOMAIN).length);
  });
});
