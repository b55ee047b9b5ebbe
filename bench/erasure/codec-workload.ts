/**
 * The write path's CPU work on a value, as the client does it: erasure-code the value,
 * then hash every fragment into the cross-checksum. Shared by the Node side of
 * `pnpm bench:codec-browser` and the page it runs in Chromium (bundled by esbuild with
 * the `browser` condition, so the page gets the browser's allocator and crypto
 * provider, as a web app does).
 */
import { createCodec, type CodecKernel, type WasmErasureCodec } from '@powerstore/erasure';
import { computeCrossChecksum, type CryptoProvider } from '@powerstore/protocol';

/**
 * - `encode`: `codec.encode(value)`, new parity arrays each time;
 * - `encode-into`: `codec.encodeInto` with parity buffers allocated once;
 * - `hash`: the cross-checksum of fragments encoded once;
 * - `encode+hash`: `encode` then the cross-checksum, the client's work per write.
 */
export const OPS = ['encode', 'encode-into', 'hash', 'encode+hash'] as const;
export type Op = (typeof OPS)[number];

/** One operation, ready to run repeatedly; returns a promise only when it must be awaited. */
export type Runner = () => void | Promise<unknown>;

export interface Workload {
  readonly kernel: CodecKernel;
  readonly runners: Record<Op, Runner>;
}

/** Deterministic bytes (xorshift32) for benchmark values. */
export function randomBytes(length: number, seed: number): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

/** Runners for a `(k, n)` code over values of `valueBytes`, on `kernel` or the preferred one. */
export async function prepareWorkload(
  crypto: CryptoProvider,
  params: { k: number; n: number; valueBytes: number; kernel?: CodecKernel },
): Promise<Workload> {
  const { k, n, valueBytes } = params;
  const codec: WasmErasureCodec = await createCodec({ k, n }, params.kernel ? { kernel: params.kernel } : {});
  const value = randomBytes(valueBytes, valueBytes ^ (n << 8) ^ k);
  const len = codec.fragmentLength(valueBytes);
  const parity = Array.from({ length: n - k }, () => new Uint8Array(len));
  const fragments = codec.encode(value);
  return {
    kernel: codec.kernel,
    runners: {
      encode: () => void codec.encode(value),
      'encode-into': () => void codec.encodeInto(value, parity),
      hash: () => computeCrossChecksum(crypto, fragments, valueBytes, false),
      'encode+hash': () => computeCrossChecksum(crypto, codec.encode(value), valueBytes, false),
    },
  };
}

/** Runs `run` back to back for `seconds`; operations per second. */
export async function sample(run: Runner, seconds: number): Promise<number> {
  let ops = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  let now = start;
  while (now < deadline) {
    const r = run();
    if (r) await r;
    ops++;
    now = performance.now();
  }
  return ops / ((now - start) / 1000);
}

/** What the page (and the Node worker) expose to the orchestrator. */
export interface BenchPage {
  /** Prepares workload `id`; resolves to the kernel its codec runs. */
  prepare(id: string, params: { k: number; n: number; valueBytes: number; kernel?: CodecKernel }): Promise<CodecKernel>;
  /** Operations per second of `op` over `seconds`. */
  sample(id: string, op: Op, seconds: number): Promise<number>;
}

/** A {@link BenchPage} over `crypto`: the same code in the page and in the Node worker. */
export function benchPage(crypto: CryptoProvider): BenchPage {
  const workloads = new Map<string, Workload>();
  return {
    async prepare(id, params) {
      const workload = await prepareWorkload(crypto, params);
      workloads.set(id, workload);
      return workload.kernel;
    },
    sample(id, op, seconds) {
      return sample(workloads.get(id)!.runners[op], seconds);
    },
  };
}
