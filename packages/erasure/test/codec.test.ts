/**
 * The WebAssembly codec against two oracles: the TypeScript reference codec, and ISA-L's
 * own portable C (`ec_encode_data_base`) compiled to WebAssembly with the same matrix;
 * and its two builds (relaxed SIMD, SIMD128) against each other.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createCodec,
  createCodecFromModule,
  ErasureCodecError,
  MAX_FRAGMENTS,
  preferredKernel,
  type ErasureCodec,
} from '@powerstore/erasure';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import { wasmBase64 as isalPortable } from '../../../wasm/generated/isal-portable.js';
import { wasmBase64 as relaxedBase64 } from '../src/wasm/powerstore-rs-relaxed.js';
import { kernelDigests } from './kernel-digests.js';

const codecs = new Map<string, Promise<{ wasm: ErasureCodec; isal: ErasureCodec; ref: ErasureCodec }>>();
function codecsFor(k: number, n: number) {
  const key = `${k}/${n}`;
  let c = codecs.get(key);
  if (!c) {
    c = (async () => ({
      wasm: await createCodec({ k, n }),
      isal: await createCodecFromModule(isalPortable, { k, n }),
      ref: createReferenceCodec({ k, n }),
    }))();
    codecs.set(key, c);
  }
  return c;
}

/** (k, n) with n up to 32, plus the PowerStore shapes n = 3t + 1, k = t + 1. */
const shape = fc.integer({ min: 1, max: 32 }).chain((n) => fc.record({ n: fc.constant(n), k: fc.integer({ min: 1, max: n }) }));

/** Lengths around the interesting edges: empty, one byte, odd, multiples of the 64-byte step, chunk-crossing. */
const valueLength = fc.oneof(
  fc.constantFrom(0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 127, 1000, 4095, 4096, 4097),
  fc.integer({ min: 0, max: 5000 }),
  fc.integer({ min: 200_000, max: 700_000 }),
);

function bytes(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed >>> 0 || 0x9e3779b9;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x;
  }
  return out;
}

function keep(fragments: readonly Uint8Array[], present: readonly boolean[]): (Uint8Array | undefined)[] {
  return fragments.map((f, i) => (present[i] ? f : undefined));
}

describe('WebAssembly codec matches ISA-L and the reference', () => {
  it('encodes byte for byte like ISA-L portable C and the reference, and decodes any k fragments', async () => {
    await fc.assert(
      fc.asyncProperty(shape, valueLength, fc.integer(), fc.infiniteStream(fc.boolean()), async ({ k, n }, length, seed, coin) => {
        const { wasm, isal, ref } = await codecsFor(k, n);
        const value = bytes(length, seed);
        const ours = wasm.encode(value);
        // The reference is slow: compare with it on small values, with ISA-L always.
        const oracle = length <= 20_000 ? ref.encode(value) : isal.encode(value);
        expect(ours).toHaveLength(n);
        ours.forEach((f, i) => expect(Buffer.compare(f, oracle[i]!), `fragment ${i}`).toBe(0));
        if (length > 20_000) {
          const isalOut = isal.encode(value);
          ours.forEach((f, i) => expect(Buffer.compare(f, isalOut[i]!)).toBe(0));
        }
        // Systematic: data fragments are the zero-padded slices of the value.
        const len = wasm.fragmentLength(length);
        const padded = new Uint8Array(k * len);
        padded.set(value);
        for (let j = 0; j < k; j++) expect(Buffer.compare(ours[j]!, padded.subarray(j * len, (j + 1) * len))).toBe(0);

        // A random erasure pattern keeping exactly k fragments.
        const order = [...Array(n).keys()];
        const it = coin[Symbol.iterator]();
        for (let i = n - 1; i > 0; i--) {
          // Fisher–Yates driven by the stream of coins (deterministic per case).
          let r = 0;
          for (let b = 0; b < 8; b++) r = (r << 1) | (it.next().value ? 1 : 0);
          const j = r % (i + 1);
          [order[i], order[j]] = [order[j]!, order[i]!];
        }
        const present = Array.from({ length: n }, () => false);
        for (const i of order.slice(0, k)) present[i] = true;
        const decoded = wasm.decode(keep(ours, present), length);
        expect(Buffer.compare(decoded, value)).toBe(0);
      }),
      { numRuns: 300 },
    );
  });

  it('decodes every erasure pattern for every (k, n) with n ≤ 7', async () => {
    for (let n = 1; n <= 7; n++) {
      for (let k = 1; k <= n; k++) {
        const { wasm, ref } = await codecsFor(k, n);
        for (const length of [0, 1, 97, 4099]) {
          const value = bytes(length, n * 31 + k + length);
          const fragments = wasm.encode(value);
          for (let mask = 0; mask < 1 << n; mask++) {
            const present = Array.from({ length: n }, (_, i) => ((mask >> i) & 1) === 1);
            const count = present.filter(Boolean).length;
            const slots = keep(fragments, present);
            if (count < k) {
              expect(() => wasm.decode(slots, length)).toThrow(ErasureCodecError);
              continue;
            }
            expect(Buffer.compare(wasm.decode(slots, length), value), `k=${k} n=${n} mask=${mask}`).toBe(0);
            if (length <= 97) expect(Buffer.compare(ref.decode(slots, length), value)).toBe(0);
          }
        }
      }
    }
  });

  it('handles the largest shape, n = 255', async () => {
    const { wasm, isal } = await codecsFor(128, MAX_FRAGMENTS);
    const value = bytes(100_003, 7);
    const ours = wasm.encode(value);
    const theirs = isal.encode(value);
    ours.forEach((f, i) => expect(Buffer.compare(f, theirs[i]!)).toBe(0));
    const present = ours.map((_, i) => i % 2 === 1); // 127 odd fragments + …
    present[0] = true; // … one data fragment: 128 in all.
    expect(Buffer.compare(wasm.decode(keep(ours, present), value.length), value)).toBe(0);
  });
});

/** Node 20 needs the flag to compile relaxed SIMD; later versions ship it and may reject the flag. */
function relaxedSimdFlags(): string[] {
  const probe = spawnSync(process.execPath, ['--experimental-wasm-relaxed-simd', '-e', '0']);
  return probe.status === 0 ? ['--experimental-wasm-relaxed-simd'] : [];
}

describe('relaxed-SIMD and SIMD128 builds', () => {
  afterEach(() => {
    vi.restoreAllMocks();
    vi.resetModules();
  });

  it('encode and decode byte for byte alike, and like ISA-L portable C, across shapes and lengths', async () => {
    // The relaxed build runs in a child Node that can compile it (this one may not).
    const child = spawnSync(
      process.execPath,
      [
        ...relaxedSimdFlags(),
        '--conditions=@powerstore/source',
        '--import',
        'tsx',
        fileURLToPath(new URL('./kernel-digests.ts', import.meta.url)),
      ],
      { encoding: 'utf8', maxBuffer: 64 << 20, timeout: 120_000 },
    );
    expect(child.status, child.stderr).toBe(0);
    const relaxed = JSON.parse(child.stdout) as { preferred: string; kernel: string; digests: string[] };
    // With the flag, the default choice is the relaxed build: this compares two builds, not one with itself.
    expect(relaxed.preferred).toBe('relaxed-simd');
    expect(relaxed.kernel).toBe('relaxed-simd');

    const simd128 = await kernelDigests((k, n) => createCodec({ k, n }, { kernel: 'simd128' }));
    const portable = await kernelDigests((k, n) => createCodecFromModule(isalPortable, { k, n }));
    expect(relaxed.digests).toHaveLength(simd128.length);
    relaxed.digests.forEach((d, i) => expect(d, `case ${i}`).toBe(simd128[i]));
    simd128.forEach((d, i) => expect(d, `case ${i}`).toBe(portable[i]));
  }, 120_000);

  it('prefers the relaxed build exactly when WebAssembly.validate accepts it, and falls back to SIMD128', async () => {
    vi.resetModules();
    const validate = vi.spyOn(WebAssembly, 'validate').mockReturnValueOnce(false);
    const fresh = await import('@powerstore/erasure');
    expect(fresh.preferredKernel()).toBe('simd128');
    // The check ran on the relaxed module itself, not on a probe.
    expect(validate).toHaveBeenCalledTimes(1);
    expect(Buffer.from(validate.mock.calls[0]![0] as Uint8Array).toString('base64')).toBe(relaxedBase64);
    // Decided once per realm.
    expect(fresh.preferredKernel()).toBe('simd128');
    expect(validate).toHaveBeenCalledTimes(1);
    const codec = await fresh.createCodec({ k: 2, n: 4 });
    expect(codec.kernel).toBe('simd128');

    vi.resetModules();
    validate.mockReset().mockReturnValueOnce(true);
    const other = await import('@powerstore/erasure');
    expect(other.preferredKernel()).toBe('relaxed-simd');
  });

  it('can be forced, and refuses a kernel this engine cannot run', async () => {
    const simd128 = await createCodec({ k: 3, n: 7 }, { kernel: 'simd128' });
    expect(simd128.kernel).toBe('simd128');
    expect((await createCodec({ k: 3, n: 7 })).kernel).toBe(preferredKernel());
    if (preferredKernel() === 'relaxed-simd') {
      expect((await createCodec({ k: 3, n: 7 }, { kernel: 'relaxed-simd' })).kernel).toBe('relaxed-simd');
    } else {
      // Plain Node 20: the relaxed build does not validate.
      await expect(createCodec({ k: 3, n: 7 }, { kernel: 'relaxed-simd' })).rejects.toMatchObject({ code: 'UNSUPPORTED_PLATFORM' });
    }
    await expect(createCodec({ k: 3, n: 7 }, { kernel: 'avx512' as never })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('encodeInto and decodeInto', () => {
  it('write into caller buffers and agree with encode/decode', async () => {
    await fc.assert(
      fc.asyncProperty(shape, fc.integer({ min: 0, max: 3000 }), fc.integer(), async ({ k, n }, length, seed) => {
        const { wasm, ref } = await codecsFor(k, n);
        const value = bytes(length, seed);
        for (const codec of [wasm, ref]) {
          const len = codec.fragmentLength(length);
          const parity = Array.from({ length: n - k }, () => new Uint8Array(len).fill(0xee));
          const fragments = codec.encodeInto(value, parity);
          const expected = codec.encode(value);
          fragments.forEach((f, i) => expect(Buffer.compare(f, expected[i]!)).toBe(0));
          parity.forEach((p, r) => expect(fragments[k + r]).toBe(p));
          const out = new Uint8Array(length + 5).fill(0xee);
          const slots = fragments.map((f, i) => (i >= n - k ? f : undefined));
          const back = codec.decodeInto(slots, length, out);
          expect(back.buffer).toBe(out.buffer);
          expect(Buffer.compare(back, value)).toBe(0);
          expect([...out.subarray(length)]).toEqual([0xee, 0xee, 0xee, 0xee, 0xee]);
        }
      }),
      { numRuns: 100 },
    );
  });
});

describe('input validation', () => {
  let codec: ErasureCodec;
  beforeAll(async () => {
    codec = await createCodec({ k: 2, n: 4 });
  });

  function code(f: () => unknown): string | undefined {
    try {
      f();
    } catch (e) {
      expect(e).toBeInstanceOf(ErasureCodecError);
      return (e as ErasureCodecError).code;
    }
    return undefined;
  }

  it('rejects bad shapes', async () => {
    for (const bad of [
      { k: 0, n: 4 },
      { k: 5, n: 4 },
      { k: 1, n: 0 },
      { k: 2, n: 256 },
      { k: 1.5, n: 4 },
      { k: '2', n: 4 },
      null,
      undefined,
    ]) {
      await expect(createCodec(bad as never), JSON.stringify(bad)).rejects.toMatchObject({ code: 'INVALID_PARAMS' });
      expect(code(() => createReferenceCodec(bad as never))).toBe('INVALID_PARAMS');
    }
  });

  it('rejects values that are not bytes', () => {
    for (const bad of ['abc', [1, 2], new Uint16Array(4), null, undefined, 42]) {
      expect(code(() => codec.encode(bad as never))).toBe('INVALID_ARGUMENT');
    }
  });

  it('rejects fragments of the wrong length or type, and too few fragments', () => {
    const f = codec.encode(bytes(100, 1));
    expect(code(() => codec.decode([f[0], f[1]!.subarray(1)], 100))).toBe('INVALID_FRAGMENT');
    expect(code(() => codec.decode([f[0], 'x' as never], 100))).toBe('INVALID_FRAGMENT');
    expect(code(() => codec.decode([f[0], undefined, undefined, undefined], 100))).toBe('TOO_FEW_FRAGMENTS');
    expect(code(() => codec.decode([...f, f[0]], 100))).toBe('INVALID_ARGUMENT');
    expect(code(() => codec.decode('nope' as never, 100))).toBe('INVALID_ARGUMENT');
    expect(code(() => codec.decode(f, 101))).toBe('INVALID_FRAGMENT'); // 101 bytes need 51-byte fragments
    expect(code(() => codec.decode(f, -1))).toBe('INVALID_ARGUMENT');
    expect(code(() => codec.decode(f, 2 ** 31))).toBe('VALUE_TOO_LARGE');
  });

  it('rejects bad output buffers', () => {
    const v = bytes(100, 2);
    expect(code(() => codec.encodeInto(v, [new Uint8Array(50)]))).toBe('INVALID_ARGUMENT');
    expect(code(() => codec.encodeInto(v, [new Uint8Array(50), new Uint8Array(49)]))).toBe('INVALID_ARGUMENT');
    expect(code(() => codec.decodeInto(codec.encode(v), 100, new Uint8Array(99)))).toBe('INVALID_ARGUMENT');
  });

  it('says what is wrong', () => {
    expect(() => codec.decode([undefined, undefined, undefined, new Uint8Array(50)], 100)).toThrow('need 2 fragments to decode, got 1');
    expect(() => codec.decode([new Uint8Array(3)], 100)).toThrow('fragment 0 has 3 bytes, expected 50');
  });
});
