/** Stopwatch wrappers for the profile: crypto provider and erasure codec that add their time to counters. */
import type { ErasureCodec } from '@powerstore/erasure';
import type { CryptoProvider } from '@powerstore/protocol';

export type Clock = Record<string, number>;

export function add(clock: Clock, stage: string, ms: number): void {
  clock[stage] = (clock[stage] ?? 0) + ms;
}

export function timedCrypto(inner: CryptoProvider, clock: Clock, current: () => Clock = () => clock): CryptoProvider {
  return {
    name: `timed ${inner.name}`,
    sha256(parts) {
      const t0 = performance.now();
      const p = inner.sha256(parts); // node:crypto hashes synchronously, then resolves
      add(current(), 'hash', performance.now() - t0);
      return p;
    },
    sha256Sync(parts) {
      const t0 = performance.now();
      const h = inner.sha256Sync(parts);
      add(current(), 'hash', performance.now() - t0);
      return h;
    },
    async verifyEd25519(publicKey, message, signature) {
      const t0 = performance.now();
      const ok = await inner.verifyEd25519(publicKey, message, signature);
      add(current(), 'verify', performance.now() - t0);
      return ok;
    },
    async signerFromSeed(seed) {
      const signer = await inner.signerFromSeed(seed);
      return {
        publicKey: signer.publicKey,
        async sign(message) {
          const t0 = performance.now();
          const s = await signer.sign(message);
          add(current(), 'sign', performance.now() - t0);
          return s;
        },
      };
    },
  };
}

export function timedCodec(inner: ErasureCodec, clock: Clock): ErasureCodec {
  const time =
    <A extends unknown[], R>(f: (...a: A) => R) =>
    (...a: A): R => {
      const t0 = performance.now();
      const r = f(...a);
      add(clock, 'erasure', performance.now() - t0);
      return r;
    };
  return {
    k: inner.k,
    n: inner.n,
    fragmentLength: (l) => inner.fragmentLength(l),
    encode: time((v: Uint8Array) => inner.encode(v)),
    encodeInto: time((v: Uint8Array, p: readonly Uint8Array[]) => inner.encodeInto(v, p)),
    decode: time((f: readonly (Uint8Array | undefined)[], l: number) => inner.decode(f, l)),
    decodeInto: time((f: readonly (Uint8Array | undefined)[], l: number, o: Uint8Array) => inner.decodeInto(f, l, o)),
  };
}
