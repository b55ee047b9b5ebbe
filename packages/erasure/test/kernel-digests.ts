/**
 * Fingerprints of a codec's work over a fixed set of shapes, lengths and erasure
 * patterns, to compare the relaxed-SIMD and SIMD128 builds byte for byte when they cannot
 * run in one process: Node 20 compiles relaxed SIMD only with
 * `--experimental-wasm-relaxed-simd`, so codec.test.ts runs this file in a child Node with
 * that flag and compares its digests with its own.
 *
 * Run directly, it prints `{ preferred, kernel, digests }` as JSON for the codec that
 * `createCodec` picks by default.
 */
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { createCodec, preferredKernel, type ErasureCodec } from '@powerstore/erasure';

/** Every (k, n) with n ≤ 8, over lengths around the 64-byte step and the padding edges. */
const SMALL_LENGTHS = [0, 1, 31, 33, 64, 65, 1000, 4097];
/** PowerStore's shapes and the largest, over lengths that cross the 1 MiB arena's chunks. */
const LARGE_SHAPES = [
  { k: 2, n: 4 },
  { k: 3, n: 7 },
  { k: 4, n: 10 },
  { k: 11, n: 32 },
  { k: 128, n: 255 },
];
const LARGE_LENGTHS = [100_003, 700_001, 2_500_000];

export interface DigestCase {
  readonly k: number;
  readonly n: number;
  readonly length: number;
}

export function digestCases(): DigestCase[] {
  const cases: DigestCase[] = [];
  for (let n = 1; n <= 8; n++) for (let k = 1; k <= n; k++) for (const length of SMALL_LENGTHS) cases.push({ k, n, length });
  for (const { k, n } of LARGE_SHAPES) for (const length of LARGE_LENGTHS) cases.push({ k, n, length });
  return cases;
}

function xorshift(seed: number): () => number {
  let x = seed >>> 0 || 0x9e3779b9;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
}

/**
 * SHA-256 over the `n` fragments of each case and over two decodes: from the parity
 * fragments first (the most data rebuilt) and from a pseudo-random `k` of them.
 */
export async function kernelDigests(create: (k: number, n: number) => Promise<ErasureCodec>): Promise<string[]> {
  const codecs = new Map<string, ErasureCodec>();
  const out: string[] = [];
  for (const [i, { k, n, length }] of digestCases().entries()) {
    const key = `${k}/${n}`;
    let codec = codecs.get(key);
    if (!codec) codecs.set(key, (codec = await create(k, n)));
    const random = xorshift(i * 7919 + length);
    const value = new Uint8Array(length);
    for (let b = 0; b < length; b++) value[b] = random();
    const fragments = codec.encode(value);
    const hash = createHash('sha256');
    for (const f of fragments) hash.update(f);
    const parityFirst = fragments.map((f, j) => (j >= n - k ? f : undefined));
    hash.update(codec.decode(parityFirst, length));
    const order = [...fragments.keys()];
    for (let j = n - 1; j > 0; j--) {
      const r = random() % (j + 1);
      [order[j], order[r]] = [order[r]!, order[j]!];
    }
    const kept = new Set(order.slice(0, k));
    hash.update(
      codec.decode(
        fragments.map((f, j) => (kept.has(j) ? f : undefined)),
        length,
      ),
    );
    out.push(hash.digest('hex'));
  }
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const preferred = preferredKernel();
  const kernels = new Set<string>();
  const digests = await kernelDigests(async (k, n) => {
    const codec = await createCodec({ k, n });
    kernels.add(codec.kernel);
    return codec;
  });
  process.stdout.write(JSON.stringify({ preferred, kernel: [...kernels].join(','), digests }));
}
