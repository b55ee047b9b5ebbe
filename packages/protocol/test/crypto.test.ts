import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createCryptoProvider as browserProvider } from '../src/crypto/browser.js';
import { createCryptoProvider as nobleProvider } from '../src/crypto/noble.js';
import { createCryptoProvider as nodeProvider } from '../src/crypto/node.js';
import { createCryptoProvider as exported } from '@powerstore/protocol/crypto';
import { nonceHash, toHex } from '../src/index.js';
import { DOMAIN, fragmentHash } from '../src/core/crypto.js';
import { hexToBytes } from '../src/core/bytes.js';

// Node 20 has WebCrypto Ed25519, so the browser provider runs its native path here; the
// noble provider is the pure-JavaScript fallback. All three must agree byte for byte.
const providers = [nodeProvider(), browserProvider(), nobleProvider()];

/** RFC 8032 section 7.1, tests 1 and 2. */
const RFC8032 = [
  {
    seed: '9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60',
    publicKey: 'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a',
    message: '',
    signature:
      'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
  },
  {
    seed: '4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb',
    publicKey: '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c',
    message: '72',
    signature:
      '92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00',
  },
];

describe('crypto providers', () => {
  it('the package export picks the node provider under Node', () => {
    expect(exported().name).toBe('node');
  });

  it('known answers: SHA-256("abc") and RFC 8032 Ed25519 vectors', async () => {
    const abc = new TextEncoder().encode('abc');
    for (const p of providers) {
      expect(toHex(await p.sha256([abc])), p.name).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      expect(toHex(p.sha256Sync([abc])), p.name).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      for (const v of RFC8032) {
        const signer = await p.signerFromSeed(hexToBytes(v.seed));
        expect(toHex(signer.publicKey), p.name).toBe(v.publicKey);
        expect(toHex(await signer.sign(hexToBytes(v.message))), p.name).toBe(v.signature);
        expect(await p.verifyEd25519(hexToBytes(v.publicKey), hexToBytes(v.message), hexToBytes(v.signature)), p.name).toBe(true);
      }
    }
  });

  it('every provider hashes identically for any input split into any parts', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 5 }), async (parts) => {
        const joined = Uint8Array.from(parts.flatMap((p) => [...p]));
        const expected = toHex(providers[0]!.sha256Sync([joined]));
        for (const p of providers) {
          expect(toHex(await p.sha256(parts)), p.name).toBe(expected);
          expect(toHex(p.sha256Sync(parts)), p.name).toBe(expected);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('the browser provider hashes concurrent multi-part inputs right though it joins them in one reused buffer', async () => {
    // Sizes that grow the buffer, shrink back into it, and exceed what it keeps (4 MiB).
    const sizes = [0, 50, 131_072, 100, 300_000, 5 << 20, 131_072, 7, 2 << 20];
    const browser = browserProvider();
    const inputs = sizes.map((size, i) => [Uint8Array.of(i), new Uint8Array(size).fill(i + 1), Uint8Array.of(0xff - i)]);
    // All in flight at once, as a cross-checksum's fragment hashes are.
    const digests = await Promise.all(inputs.map((parts) => browser.sha256(parts)));
    inputs.forEach((parts, i) => expect(toHex(digests[i]!), `input ${i}`).toBe(toHex(providers[0]!.sha256Sync(parts))));
  });

  it('every provider signs identically and accepts exactly the others’ signatures', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.uint8Array({ maxLength: 300 }),
        fc.nat(),
        async (seed, message, flip) => {
          const signers = await Promise.all(providers.map((p) => p.signerFromSeed(seed)));
          const signatures = await Promise.all(signers.map((s) => s.sign(message)));
          for (const s of signers) expect(toHex(s.publicKey)).toBe(toHex(signers[0]!.publicKey));
          for (const sig of signatures) expect(toHex(sig)).toBe(toHex(signatures[0]!));
          const pub = signers[0]!.publicKey;
          const tampered = signatures[0]!.slice();
          tampered[flip % 64]! ^= 1 << (flip % 8);
          const otherMessage = Uint8Array.from([...message, 0]);
          for (const p of providers) {
            expect(await p.verifyEd25519(pub, message, signatures[0]!), p.name).toBe(true);
            expect(await p.verifyEd25519(pub, message, tampered), p.name).toBe(false);
            expect(await p.verifyEd25519(pub, otherMessage, signatures[0]!), p.name).toBe(false);
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it('malformed keys and signatures verify as false, never throw', async () => {
    const [v] = RFC8032;
    const pub = hexToBytes(v!.publicKey);
    const sig = hexToBytes(v!.signature);
    // S ≥ L (non-canonical scalar): RFC 8032 requires rejecting it; every provider must.
    const bigS = sig.slice();
    bigS.fill(0xff, 32);
    const notAPoint = new Uint8Array(32).fill(0xff);
    for (const p of providers) {
      expect(await p.verifyEd25519(pub.subarray(1), new Uint8Array(0), sig), p.name).toBe(false);
      expect(await p.verifyEd25519(pub, new Uint8Array(0), sig.subarray(1)), p.name).toBe(false);
      expect(await p.verifyEd25519(pub, new Uint8Array(0), bigS), p.name).toBe(false);
      expect(await p.verifyEd25519(notAPoint, new Uint8Array(0), sig), p.name).toBe(false);
      await expect(p.signerFromSeed(new Uint8Array(31)), p.name).rejects.toThrow(/32 bytes/);
    }
  });

  it('domain separation: the same bytes hash differently as fragment and as nonce', async () => {
    const p = providers[0]!;
    const bytes = new Uint8Array(32).fill(7);
    expect(toHex(await fragmentHash(p, 0, bytes))).not.toBe(toHex(nonceHash(p, bytes)));
    expect(toHex(await fragmentHash(p, 0, bytes))).not.toBe(toHex(await fragmentHash(p, 1, bytes)));
    expect(new Set(Object.values(DOMAIN)).size).toBe(Object.values(DOMAIN).length);
  });
});
